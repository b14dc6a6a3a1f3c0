//! The tools every loop has: reading the workspace (`read_file`, `list_directory`,
//! `grep_search`, never outside it, symbolic links included), `calculator`, `string_helper`,
//! and `submit_answer`, which ends the loop.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::registry::{ToolMetadata, ToolOutcome, ToolRegistry};

/// The most a read or a listing gives back; the rest is said to be left out.
const MAX_FILE_BYTES: u64 = 256 * 1024;
const MAX_ENTRIES: usize = 500;
const MAX_MATCHES: usize = 100;
/// A search reads at most this many files, so a huge tree cannot hold the loop.
const MAX_FILES_SEARCHED: usize = 20_000;
/// Folders a search does not go into: version control and build output.
const SKIPPED_DIRS: [&str; 4] = [".git", "target", "node_modules", ".venv"];

/// The workspace's folder, resolved once: every path a tool is given must lead inside it once
/// every symbolic link in it is resolved.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    pub fn new(root: &Path) -> std::io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The real path `relative` names inside the workspace, or why it may not be used. An
    /// absolute path, a `..` or a symbolic link that leads out is refused.
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, String> {
        let real = self
            .root
            .join(relative)
            .canonicalize()
            .map_err(|e| format!("{relative}: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "{relative} is outside the workspace, so it is not read"
            ));
        }
        Ok(real)
    }

    /// The path as the model should write it: relative to the workspace.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

fn string_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the argument '{name}' (a string) is missing"))
}

fn outcome(result: Result<String, String>) -> ToolOutcome {
    match result {
        Ok(text) => ToolOutcome::Done(text),
        Err(why) => ToolOutcome::Failed(why),
    }
}

fn read_file(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let path = ws.resolve(string_arg(args, "path")?)?;
    let file = fs::File::open(&path).map_err(|e| format!("{}: {e}", ws.shown(&path)))?;
    let mut bytes = Vec::new();
    use std::io::Read;
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", ws.shown(&path)))?;
    let cut = bytes.len() as u64 > MAX_FILE_BYTES;
    bytes.truncate(MAX_FILE_BYTES as usize);
    if bytes.contains(&0) {
        return Err(format!("{} is binary", ws.shown(&path)));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        text.push_str(&format!("\n[cut: the file is over {MAX_FILE_BYTES} bytes]"));
    }
    Ok(text)
}

fn list_directory(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let relative = args.get("path").and_then(Value::as_str).unwrap_or(".");
    let dir = ws.resolve(relative)?;
    let mut names: Vec<String> = fs::read_dir(&dir)
        .map_err(|e| format!("{relative}: {e}"))?
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    names.sort();
    let total = names.len();
    names.truncate(MAX_ENTRIES);
    let mut text = names.join("\n");
    if total > MAX_ENTRIES {
        text.push_str(&format!(
            "\n[{} more entries left out]",
            total - MAX_ENTRIES
        ));
    }
    if text.is_empty() {
        text = "(empty)".into();
    }
    Ok(text)
}

fn grep_search(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let pattern = string_arg(args, "pattern")?;
    let regex = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("the pattern is not a regular expression: {e}"))?;
    let start = ws.resolve(args.get("path").and_then(Value::as_str).unwrap_or("."))?;
    let mut matches = Vec::new();
    let mut pending = vec![start];
    let mut searched = 0;
    while let Some(path) = pending.pop() {
        if searched == MAX_FILES_SEARCHED {
            matches.push(format!("[stopped after {MAX_FILES_SEARCHED} files]"));
            break;
        }
        // Links are not followed: a link out of the workspace is not searched.
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let skipped = path
                .file_name()
                .is_some_and(|n| SKIPPED_DIRS.iter().any(|s| n == *s));
            if !skipped {
                let mut children: Vec<PathBuf> = fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .collect();
                children.sort_by(|a, b| b.cmp(a));
                pending.extend(children);
            }
            continue;
        }
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            continue;
        }
        searched += 1;
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                matches.push(format!("{}:{}: {}", ws.shown(&path), n + 1, line.trim()));
                if matches.len() == MAX_MATCHES {
                    matches.push(format!("[stopped at {MAX_MATCHES} matches]"));
                    return Ok(matches.join("\n"));
                }
            }
        }
    }
    if matches.is_empty() {
        return Ok(format!("no line matches {pattern}"));
    }
    Ok(matches.join("\n"))
}

fn string_helper(args: &Map<String, Value>) -> Result<String, String> {
    let text = string_arg(args, "text")?;
    Ok(match string_arg(args, "operation")? {
        "length" => text.chars().count().to_string(),
        "upper" => text.to_uppercase(),
        "lower" => text.to_lowercase(),
        "trim" => text.trim().to_string(),
        other => {
            return Err(format!(
                "unknown operation '{other}': length, upper, lower or trim"
            ))
        }
    })
}

fn submit_answer(args: &Map<String, Value>) -> ToolOutcome {
    let answer = match string_arg(args, "answer") {
        Ok(answer) => answer.to_string(),
        Err(why) => return ToolOutcome::Failed(why),
    };
    let confidence = args.get("confidence").and_then(Value::as_f64);
    if confidence.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
        return ToolOutcome::Failed("confidence must be between 0 and 1".into());
    }
    ToolOutcome::Submitted { answer, confidence }
}

fn meta(description: &str, category: &str, parameters: Value, read_only: bool) -> ToolMetadata {
    ToolMetadata {
        description: description.into(),
        category: category.into(),
        parameters,
        examples: Vec::new(),
        read_only,
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// Registers the built-in tools, the workspace's confined to `workspace`.
pub fn register_builtins(registry: &mut ToolRegistry, workspace: Workspace) {
    let ws = workspace.clone();
    registry.register(
        "read_file",
        move |a: &Map<String, Value>| outcome(read_file(&ws, a)),
        meta(
            "Read a text file of the workspace.",
            "files",
            object(json!({"path": {"type": "string"}}), &["path"]),
            true,
        ),
    );
    let ws = workspace.clone();
    registry.register(
        "list_directory",
        move |a: &Map<String, Value>| outcome(list_directory(&ws, a)),
        meta(
            "List a folder of the workspace (folders end with /).",
            "files",
            object(json!({"path": {"type": "string"}}), &[]),
            true,
        ),
    );
    let ws = workspace;
    registry.register(
        "grep_search",
        move |a: &Map<String, Value>| outcome(grep_search(&ws, a)),
        meta(
            "Search the workspace's files for lines matching a regular expression.",
            "files",
            object(
                json!({"pattern": {"type": "string"}, "path": {"type": "string"}}),
                &["pattern"],
            ),
            true,
        ),
    );
    registry.register(
        "calculator",
        |a: &Map<String, Value>| {
            outcome(
                string_arg(a, "expression")
                    .and_then(|e| super::arithmetic::evaluate(e).map(|n| n.to_string())),
            )
        },
        meta(
            "Evaluate an arithmetic expression: + - * / % ^ and parentheses.",
            "math",
            object(json!({"expression": {"type": "string"}}), &["expression"]),
            true,
        ),
    );
    registry.register(
        "string_helper",
        |a: &Map<String, Value>| outcome(string_helper(a)),
        meta(
            "Length, upper case, lower case or trimmed form of a text.",
            "text",
            object(
                json!({"operation": {"enum": ["length", "upper", "lower", "trim"]},
                       "text": {"type": "string"}}),
                &["operation", "text"],
            ),
            true,
        ),
    );
    registry.register(
        "submit_answer",
        submit_answer,
        meta(
            "Give the final answer, with how confident you are in it (0 to 1).",
            "control",
            object(
                json!({"answer": {"type": "string"},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1}}),
                &["answer"],
            ),
            false,
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir(dir.path().join("src")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("src/a.rs"), "fn a() {}\n// TODO: b\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let ws = Workspace::new(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        (dir, ws)
    }

    #[test]
    fn files_are_read_listed_and_searched_inside_the_workspace() {
        let (_dir, ws) = workspace();
        assert_eq!(
            read_file(&ws, &args(json!({"path": "src/a.rs"}))).as_deref(),
            Ok("fn a() {}\n// TODO: b\n")
        );
        assert_eq!(list_directory(&ws, &args(json!({}))).as_deref(), Ok("src/"));
        assert_eq!(
            grep_search(&ws, &args(json!({"pattern": "TODO"}))).as_deref(),
            Ok("src/a.rs:2: // TODO: b")
        );
    }

    #[test]
    fn nothing_outside_the_workspace_is_read() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(outside.path().join("secret"), "s3cret").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out"))
            .unwrap_or_else(|e| panic!("{e}"));
        let secret = outside.path().join("secret");
        let name = outside
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        let up = format!("../{name}/secret");
        for path in [
            up.as_str(),
            secret.to_str().unwrap_or_default(),
            "out/secret",
        ] {
            let read = read_file(&ws, &args(json!({"path": path})));
            assert!(
                read.as_ref().is_err_and(|e| e.contains("outside")),
                "{path}: {read:?}"
            );
        }
        let listed = list_directory(&ws, &args(json!({"path": "out"})));
        assert!(listed.is_err(), "{listed:?}");
        let found = grep_search(&ws, &args(json!({"pattern": "s3cret"})));
        assert_eq!(found.as_deref(), Ok("no line matches s3cret"));
    }

    #[test]
    fn text_helpers_and_the_answer() {
        assert_eq!(
            string_helper(&args(json!({"operation": "upper", "text": "ab"}))).as_deref(),
            Ok("AB")
        );
        assert!(string_helper(&args(json!({"operation": "x", "text": "a"}))).is_err());
        assert_eq!(
            submit_answer(&args(json!({"answer": "42", "confidence": 0.9}))),
            ToolOutcome::Submitted {
                answer: "42".into(),
                confidence: Some(0.9)
            }
        );
        assert!(matches!(
            submit_answer(&args(json!({"answer": "42", "confidence": 2}))),
            ToolOutcome::Failed(_)
        ));
    }
}
