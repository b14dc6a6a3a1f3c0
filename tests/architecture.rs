//! The layout's rules, read from the source (docs/architecture.md): a module imports only from
//! its own layer or the layers below it, no two files import each other through any chain, and
//! files and functions stay short enough to read at once. Production code only: inline
//! `#[cfg(test)]` items are left out, as tests may reach anywhere.

// A test reads its own source tree: a failure to read or parse it should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The layers from the bottom up: a module may import from its own layer and those before it.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "json",
            "scrub",
            "runtime",
            "descriptors",
            "start_file",
            "beneath",
        ],
    ),
    ("telemetry", &["telemetry"]),
    ("providers", &["llm", "prices"]),
    ("step", &["step"]),
    ("settings", &["config"]),
    ("edge", &["api"]),
    ("start-up", &["startup"]),
    ("loop driver", &["driver"]),
];

const MOST_CODE_LINES: usize = 700;
const MOST_FUNCTION_LINES: usize = 80;
const MOST_ORCHESTRATOR_LINES: usize = 500;
/// The parser's reading of model output is allowed longer files (issue 31).
const LONG_FILES_ALLOWED_UNDER: &str = "src/step/parse/";

/// Each file of `src/`, parsed, with its module path (`src/a/b.rs` is `a::b`).
struct Source {
    path: String,
    module: Vec<String>,
    text: String,
    file: syn::File,
}

fn source(path: &str, text: &str) -> Source {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{path} does not parse: {e}"));
    Source {
        module: module_of(path),
        path: path.to_owned(),
        text: text.to_owned(),
        file: without_tests(file),
    }
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    walk(&root.join("src"), &mut found);
    found.sort();
    found
        .into_iter()
        .filter(|path| !path.ends_with("main.rs") || path.parent() != Some(&root.join("src")))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            source(&path.strip_prefix(root).unwrap().to_string_lossy(), &text)
        })
        .collect()
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

fn module_of(relative: &str) -> Vec<String> {
    let inner = relative.trim_start_matches("src/").trim_end_matches(".rs");
    let mut parts: Vec<String> = inner.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn without_tests(mut file: syn::File) -> syn::File {
    file.items.retain(|item| !is_test_only(item_attrs(item)));
    file
}

/// The lines of `text` that are code (not blank, not only a comment), outside test-only items.
fn code_lines(source: &Source, test_lines: &BTreeSet<usize>) -> usize {
    source
        .text
        .lines()
        .enumerate()
        .filter(|(i, line)| {
            let line = line.trim();
            !test_lines.contains(&(i + 1)) && !line.is_empty() && !line.starts_with("//")
        })
        .count()
}

/// The line numbers (1-based) taken by test-only items, read from the unfiltered file.
fn test_lines(text: &str) -> BTreeSet<usize> {
    let file = syn::parse_file(text).unwrap();
    let mut lines = BTreeSet::new();
    for item in &file.items {
        if is_test_only(item_attrs(item)) {
            let span = syn::spanned::Spanned::span(item);
            lines.extend(span.start().line..=span.end().line);
        }
    }
    lines
}

/// Every function with a body, and its length in lines from `fn` to its closing brace.
#[derive(Default)]
struct Functions(Vec<(String, usize)>);

impl Functions {
    fn note(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let first = sig.fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        self.0.push((name.to_string(), last + 1 - first));
    }
}

impl<'a> Visit<'a> for Functions {
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        self.note(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            self.note(&f.sig.ident, &f.sig, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'a syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.note(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The crate paths a file names: its `use` trees, the paths in its code, and `crate::…` inside
/// macro calls (log lines and the like), each as written (`crate::`, `super::` or `self::`
/// first, or a child module's name).
#[derive(Default)]
struct Named {
    paths: Vec<Vec<String>>,
    /// `use …::*`: the whole module is brought in.
    globs: Vec<Vec<String>>,
    /// What the file's `use` items bring in: name → the path it stands for.
    imports: BTreeMap<String, Vec<String>>,
    children: BTreeSet<String>,
}

impl Named {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                let name = n.ident.to_string();
                if name != "self" {
                    path.push(name.clone());
                }
                let imported = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    name
                };
                self.imports.insert(imported, path.clone());
                self.paths.push(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                self.imports.insert(r.rename.to_string(), path.clone());
                self.paths.push(path);
            }
            syn::UseTree::Glob(_) => self.globs.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn macro_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let tokens: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
        for (i, token) in tokens.iter().enumerate() {
            match token {
                proc_macro2::TokenTree::Group(g) => self.macro_tokens(g.stream()),
                proc_macro2::TokenTree::Ident(id) if id == "crate" => {
                    self.paths.push(macro_path(&tokens[i..]));
                }
                _ => {}
            }
        }
    }
}

/// `crate :: a :: b` read from a macro's tokens.
fn macro_path(tokens: &[proc_macro2::TokenTree]) -> Vec<String> {
    let mut path = vec!["crate".to_owned()];
    let mut rest = tokens[1..].iter();
    loop {
        let (Some(proc_macro2::TokenTree::Punct(a)), Some(proc_macro2::TokenTree::Punct(b))) =
            (rest.next(), rest.next())
        else {
            return path;
        };
        match rest.next() {
            Some(proc_macro2::TokenTree::Ident(id)) if a.as_char() == ':' && b.as_char() == ':' => {
                path.push(id.to_string());
            }
            _ => return path,
        }
    }
}

impl<'a> Visit<'a> for Named {
    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        if !is_test_only(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }
    fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
        if is_test_only(&m.attrs) {
            return;
        }
        if m.content.is_none() {
            self.children.insert(m.ident.to_string());
        }
        syn::visit::visit_item_mod(self, m);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_path(&mut self, p: &'a syn::Path) {
        self.paths
            .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'a syn::Macro) {
        self.macro_tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The graph of which file imports from which.
struct Graph {
    /// module path → file
    files: BTreeMap<Vec<String>, String>,
    named: BTreeMap<String, Named>,
    modules: BTreeMap<String, Vec<String>>,
}

impl Graph {
    fn new(sources: &[Source]) -> Self {
        let mut graph = Graph {
            files: BTreeMap::new(),
            named: BTreeMap::new(),
            modules: BTreeMap::new(),
        };
        for source in sources {
            let mut named = Named::default();
            named.visit_file(&source.file);
            graph
                .files
                .insert(source.module.clone(), source.path.clone());
            graph
                .modules
                .insert(source.path.clone(), source.module.clone());
            graph.named.insert(source.path.clone(), named);
        }
        graph
    }

    /// The absolute module path of `path` as written in the file at `from`, if it names the crate.
    fn absolute(&self, from: &str, path: &[String]) -> Option<Vec<String>> {
        let module = &self.modules[from];
        let named = &self.named[from];
        let first = path.first()?;
        let mut here = module.clone();
        let rest = match first.as_str() {
            "crate" => {
                here.clear();
                &path[1..]
            }
            "self" => &path[1..],
            "super" => {
                let supers = path.iter().take_while(|s| *s == "super").count();
                here.truncate(here.len().checked_sub(supers)?);
                &path[supers..]
            }
            child if named.children.contains(child) => path,
            imported if path.len() > 1 && named.imports.contains_key(imported) => {
                let mut whole = named.imports[imported].clone();
                if whole.first() == Some(first) {
                    return None;
                }
                whole.extend(path[1..].iter().cloned());
                return self.absolute(from, &whole);
            }
            _ => return None,
        };
        here.extend(rest.iter().cloned());
        Some(here)
    }

    /// The file that defines what `absolute` names, following imports and re-exports.
    fn defining_file(&self, absolute: &[String], depth: usize) -> Option<String> {
        let known = (0..=absolute.len())
            .rev()
            .find(|n| self.files.contains_key(&absolute[..*n]))?;
        let file = &self.files[&absolute[..known]];
        if depth < 8 {
            if let Some(name) = absolute.get(known) {
                if let Some(imported) = self.named[file].imports.get(name) {
                    if let Some(target) = self.absolute(file, imported) {
                        let mut target = target;
                        target.extend(absolute[known + 1..].iter().cloned());
                        return self.defining_file(&target, depth + 1);
                    }
                }
            }
        }
        Some(file.clone())
    }

    /// Paths from the edge (`api/`) into the step that go past its surface: the edge names the
    /// step's items as `crate::step::Item` (re-exported by `step/mod.rs`), never its modules.
    fn past_the_surface(&self) -> Vec<String> {
        let mut found = BTreeSet::new();
        for (from, named) in &self.named {
            if self.modules[from].first().map(String::as_str) != Some("api") {
                continue;
            }
            for path in &named.paths {
                let Some(absolute) = self.absolute(from, path) else {
                    continue;
                };
                let into_step = absolute.first().map(String::as_str) == Some("step");
                // An item of the step's and what hangs on it (a variant, a method) is fine.
                if into_step && (absolute.len() < 2 || self.files.contains_key(&absolute[..2])) {
                    found.insert(format!(
                        "{from} (edge) names {} past the step's surface",
                        absolute.join("::")
                    ));
                }
            }
        }
        found.into_iter().collect()
    }

    fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, named) in &self.named {
            let targets = edges.entry(from.clone()).or_default();
            let items = named.paths.iter().map(|p| (p, false));
            for (path, glob) in items.chain(named.globs.iter().map(|p| (p, true))) {
                let Some(absolute) = self.absolute(from, path) else {
                    continue;
                };
                // Naming a module is not using it: what is used through the name is seen.
                if !glob && self.files.contains_key(&absolute) {
                    continue;
                }
                if let Some(to) = self.defining_file(&absolute, 0) {
                    if &to != from && to != "src/lib.rs" {
                        targets.insert(to);
                    }
                }
            }
        }
        edges
    }
}

fn layer_of(module: &[String]) -> Option<(usize, &'static str)> {
    let top = module.first()?;
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, members))| members.contains(&top.as_str()))
        .map(|(i, (name, _))| (i, *name))
}

/// Groups of files that import each other through some chain (Tarjan's algorithm).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'e> {
        edges: &'e BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'e str, usize>,
        low: BTreeMap<&'e str, usize>,
        stack: Vec<&'e str>,
        on_stack: BTreeSet<&'e str>,
        found: Vec<Vec<String>>,
    }
    impl<'e> Walk<'e> {
        fn visit(&mut self, node: &'e str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    group.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

/// Everything that breaks a rule, one line each.
fn findings(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for source in sources {
        let tests = test_lines(&source.text);
        let code = code_lines(source, &tests);
        if code > MOST_CODE_LINES && !source.path.starts_with(LONG_FILES_ALLOWED_UNDER) {
            found.push(format!("{}: {code} lines of code", source.path));
        }
        if source.path == "src/step/mod.rs" {
            let lines = source.text.lines().count();
            if lines >= MOST_ORCHESTRATOR_LINES {
                found.push(format!(
                    "{}: {lines} lines in the orchestrator",
                    source.path
                ));
            }
        }
        let mut functions = Functions::default();
        functions.visit_file(&source.file);
        for (name, lines) in functions.0 {
            if lines > MOST_FUNCTION_LINES {
                found.push(format!("{}: fn {name} is {lines} lines", source.path));
            }
        }
    }
    let graph = Graph::new(sources);
    found.extend(graph.past_the_surface());
    let edges = graph.edges();
    for (from, targets) in &edges {
        let Some((below, below_name)) = layer_of(&graph.modules[from]) else {
            continue;
        };
        for to in targets {
            if let Some((above, above_name)) = layer_of(&graph.modules[to]) {
                if above > below {
                    found.push(format!(
                        "{from} ({below_name}) imports from {to} ({above_name})"
                    ));
                }
            }
        }
    }
    for circle in circles(&edges) {
        let inside: Vec<String> = circle
            .iter()
            .flat_map(|from| {
                let circle = &circle;
                edges[from]
                    .iter()
                    .filter(move |to| circle.contains(to))
                    .map(move |to| format!("{from} → {to}"))
            })
            .collect();
        found.push(format!("circle: {}", inside.join(", ")));
    }
    found
}

#[test]
fn every_top_level_module_has_a_layer() {
    let sources = sources();
    let unplaced: BTreeSet<&str> = sources
        .iter()
        .filter(|s| !s.module.is_empty() && layer_of(&s.module).is_none())
        .map(|s| s.module[0].as_str())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules with no layer in LAYERS: {unplaced:?}"
    );
}

#[test]
fn the_layout_keeps_its_rules() {
    let found = findings(&sources());
    assert!(
        found.is_empty(),
        "the layout breaks its rules (docs/architecture.md):\n{}",
        found.join("\n")
    );
}

/// The checker itself finds what it is for, on a small made-up crate.
#[test]
fn the_checker_sees_circles_back_edges_and_long_functions() {
    let long_body = "    let _ = 1;\n".repeat(MOST_FUNCTION_LINES);
    let made_up = [
        source("src/lib.rs", "pub mod api; pub mod json; pub mod step;"),
        source("src/json/mod.rs", "pub mod write;"),
        source(
            "src/json/write.rs",
            "pub fn put() { crate::api::answer(); }",
        ),
        source("src/api.rs", "pub fn answer() {}"),
        source(
            "src/step/mod.rs",
            "mod fit;\npub use fit::Fitted;\npub struct Input;",
        ),
        source(
            "src/step/fit.rs",
            &format!("use super::Input;\npub struct Fitted;\nfn fit(_: Input) {{\n{long_body}}}"),
        ),
        source(
            "src/api/convert.rs",
            "use crate::step::Input;\nuse crate::step::fit::Fitted;",
        ),
        source(
            "src/step/summary.rs",
            "use super::Fitted;\n#[cfg(test)]\nmod tests { use crate::api::answer; }",
        ),
    ];
    let found = findings(&made_up);
    assert!(
        found.contains(&"src/json/write.rs (foundation) imports from src/api.rs (edge)".into()),
        "{found:?}"
    );
    assert!(
        found.contains(
            &"circle: src/step/fit.rs → src/step/mod.rs, src/step/mod.rs → src/step/fit.rs".into()
        ),
        "{found:?}"
    );
    let too_long = format!(
        "src/step/fit.rs: fn fit is {} lines",
        MOST_FUNCTION_LINES + 2
    );
    assert!(found.contains(&too_long), "{found:?}");
    // A re-export is followed to the file that defines the item, and test code is left out.
    assert!(!found.iter().any(|f| f.contains("summary")), "{found:?}");
    assert!(
        found.contains(
            &"src/api/convert.rs (edge) names step::fit::Fitted past the step's surface".into()
        ),
        "{found:?}"
    );
    assert_eq!(found.len(), 4, "{found:?}");
}

/// The paths of the repository that the README and the guides name outside code blocks, with
/// the file and line that names each. The benchmarks' history is left out: it tells the past.
fn named_paths() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut guides = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        let history = path.ends_with("benchmarks-history.md");
        if path.extension().is_some_and(|e| e == "md") && !history {
            guides.push(path);
        }
    }
    let mut named = Vec::new();
    for guide in guides {
        let text = std::fs::read_to_string(&guide).unwrap();
        let mut in_code = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if in_code {
                continue;
            }
            let at = format!("{}:{}", guide.display(), n + 1);
            named.extend(paths_in(line).into_iter().map(|p| (p, at.clone())));
        }
    }
    named
}

/// `src/…`, `tests/…` and the other top folders' paths in a line of prose, as written.
fn paths_in(line: &str) -> Vec<String> {
    const TOPS: &[&str] = &[
        "src/",
        "tests/",
        "benches/",
        "examples/",
        "scripts/",
        "clients/",
        "deploy/",
        "fuzz/",
        "docs/",
    ];
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-<>{}*".contains(c);
    let mut found = Vec::new();
    for (i, _) in line.char_indices() {
        let before = line[..i].chars().next_back();
        if before.is_some_and(|c| is_path_char(c) || c == '/') {
            continue;
        }
        if let Some(top) = TOPS.iter().find(|top| line[i..].starts_with(**top)) {
            let path: String = line[i + top.len()..]
                .chars()
                .take_while(|c| is_path_char(*c))
                .collect();
            let path = format!("{top}{}", path.trim_end_matches(['.', ',', ':']));
            if !path.contains(['<', '{', '*']) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn the_guides_name_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let named = named_paths();
    assert!(
        named.iter().any(|(p, _)| p == "src/llm/registry.rs"),
        "adding-a-provider.md names the registry: the scan reads the guides"
    );
    let missing: Vec<String> = named
        .iter()
        .filter(|(path, _)| !root.join(path).exists())
        .map(|(path, at)| format!("{at}: {path}"))
        .collect();
    assert!(
        missing.is_empty(),
        "the guides name files that do not exist:\n{}",
        missing.join("\n")
    );
}
