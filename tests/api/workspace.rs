//! REACTSTEP_WORKSPACE_ROOT: context named without content is read from
//! `<root>/<project_id>/…`, and nothing outside it can be reached. Each way out is tried, and the
//! swaps that once raced the checks are raced against the real server.

use std::fs;
use std::os::unix::fs::symlink;

use serde_json::{json, Value};

use crate::support::app::{report_item, spawn_app_with, TestApp};
use crate::support::requests::request;

const PROJECT: &str = "proj-1";
const SECRET: &str = "TOP-SECRET-HOST-FILE";

/// A workspace with a project, a secret beside it, and every kind of trap inside it.
fn workspace() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join(PROJECT);
    fs::create_dir_all(project.join("src")).unwrap();
    fs::create_dir_all(project.join(".reactstep/pinned")).unwrap();
    fs::create_dir_all(project.join("dir")).unwrap();
    fs::write(root.path().join("secret.txt"), SECRET).unwrap();
    fs::write(
        project.join("src/auth.js"),
        "export function login() { return 'AUTH_CONTENT'; }\n",
    )
    .unwrap();
    fs::write(
        project.join("src/Login.tsx"),
        (1..=120)
            .map(|i| format!("const line{i} = {i};\n"))
            .collect::<String>(),
    )
    .unwrap();
    fs::write(
        project.join(".reactstep/pinned/pin-1"),
        "PINNED_CONTENT: rate-limit login\n",
    )
    .unwrap();
    fs::write(project.join("big.txt"), "x ".repeat(4096)).unwrap();
    fs::write(project.join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    fs::write(project.join("latin1.txt"), b"caf\xe9\n").unwrap();
    symlink(root.path().join("secret.txt"), project.join("link_out")).unwrap();
    symlink("/etc/passwd", project.join("link_abs")).unwrap();
    symlink(project.join("src/auth.js"), project.join("link_in")).unwrap();
    symlink("src", project.join("link_dir")).unwrap();
    let fifo = project.join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    root
}

async fn app_with(root: &tempfile::TempDir) -> TestApp {
    let path = root.path().to_path_buf();
    spawn_app_with(move |c| {
        c.workspace_root = Some(path);
        c.workspace_max_file_bytes = 3000;
    })
    .await
}

fn reason_for(reply: &Value, id: &str) -> (String, String) {
    let item = report_item(reply, id);
    (
        item["fate"].as_str().unwrap().to_string(),
        item["reason"].as_str().unwrap_or("").to_string(),
    )
}

fn dry_run(paths: &[&str]) -> Value {
    let mut body = request("gpt-4o", "Explain login.");
    body["project_id"] = json!(PROJECT);
    body["explicit_context_paths"] = json!(paths);
    body["dry_run"] = json!(true);
    body
}

#[tokio::test]
async fn files_pinned_items_and_the_focused_file_are_read_from_the_project() {
    let root = workspace();
    let app = app_with(&root).await;
    let mut body = dry_run(&["src/auth.js"]);
    body["pinned_item_ids_to_include"] = json!(["pin-1"]);
    body["implicit_context"] =
        json!({"last_focused_file_path": "src/Login.tsx", "cursor_line": 60});
    body["llm_config"]["tokenLimit"] = json!(1300);
    body["llm_config"]["reservedOutputTokens"] = json!(500);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let messages = reply.body["prompt"]["messages"].as_array().unwrap();
    let system = messages[0]["content"].as_str().unwrap();
    let last = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(system.contains("AUTH_CONTENT"));
    assert!(system.contains("PINNED_CONTENT"));
    assert!(
        last.contains("const line60 = 60;"),
        "the focused file is cut around the cursor"
    );
    assert!(!last.contains("const line1 = 1;"));
    assert_eq!(reason_for(&reply.body, "src/auth.js").0, "included");
    assert_eq!(reason_for(&reply.body, "pin-1").0, "included");
    assert_eq!(reason_for(&reply.body, "src/Login.tsx").0, "truncated");
}

/// A pinned id or a path named several times (`./src/a.js` and `src//a.js` are `src/a.js`) is
/// read once, sent once and reported once; the later mentions are reported as duplicates (each
/// mention was read and sent).
#[tokio::test]
async fn a_name_given_several_times_is_read_and_sent_once() {
    let root = workspace();
    let app = app_with(&root).await;
    let mut body = dry_run(&["src/auth.js", "./src/auth.js", "src//auth.js"]);
    body["pinned_item_ids_to_include"] = json!(["pin-1", "pin-1", "pin-1"]);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let prompt = reply.body["prompt"].to_string();
    assert_eq!(prompt.matches("PINNED_CONTENT").count(), 1, "{prompt}");
    assert_eq!(prompt.matches("AUTH_CONTENT").count(), 1, "{prompt}");
    let items = reply.body["context_report"]["items"].as_array().unwrap();
    for (id, mentions) in [("pin-1", 3), ("auth.js", 3)] {
        let fates: Vec<&str> = items
            .iter()
            .filter(|i| i["id"].as_str().unwrap().ends_with(id))
            .map(|i| i["fate"].as_str().unwrap())
            .collect();
        let mut expected = vec!["dropped"; mentions - 1];
        expected.insert(0, "included");
        let mut fates = fates;
        fates.sort_by_key(|f| *f != "included");
        assert_eq!(fates, expected, "{items:?}");
    }
}

#[tokio::test]
async fn every_way_out_of_the_project_is_refused_with_a_reason() {
    let root = workspace();
    let app = app_with(&root).await;
    let secret_abs = root.path().join("secret.txt").display().to_string();
    let cases: Vec<(String, &str)> = vec![
        (secret_abs.clone(), "absolute paths are refused"),
        ("/etc/passwd".into(), "absolute paths are refused"),
        ("C:\\Windows\\win.ini".into(), "absolute paths are refused"),
        ("../secret.txt".into(), "'..' are refused"),
        ("src/../../secret.txt".into(), "'..' are refused"),
        ("link_out".into(), "symbolic links are not followed"),
        ("link_abs".into(), "symbolic links are not followed"),
        ("link_in".into(), "symbolic links are not followed"),
        ("link_dir/auth.js".into(), "symbolic links are not followed"),
        ("src/auth.js\u{0}.png".into(), "NUL byte"),
        ("big.txt".into(), "over the size limit of 3000 bytes"),
        ("image.png".into(), "binary"),
        ("latin1.txt".into(), "binary"),
        ("pipe".into(), "not a regular file"),
        ("dir".into(), "not a regular file"),
        ("missing.js".into(), "no such file"),
    ];
    let paths: Vec<&str> = cases.iter().map(|(p, _)| p.as_str()).collect();
    let mut body = dry_run(&paths);
    body["pinned_item_ids_to_include"] = json!(["../../secret.txt"]);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    for (path, why) in &cases {
        let (fate, reason) = reason_for(&reply.body, path);
        assert_eq!(fate, "unresolved", "{path}");
        assert!(reason.contains(why), "{path}: {reason}");
    }
    assert!(reason_for(&reply.body, "../../secret.txt")
        .1
        .contains("plain file name"));
    assert!(
        !reply.text.contains(SECRET),
        "nothing outside the project may be read"
    );
    assert!(
        !reply.text.contains("root:x:0:0"),
        "nothing of the host may be read"
    );
}

#[tokio::test]
async fn a_project_id_that_is_not_a_plain_name_reads_nothing() {
    let root = workspace();
    let app = app_with(&root).await;
    for project in ["..", "proj-1/../..", "/tmp"] {
        let mut body = dry_run(&["secret.txt", "src/auth.js"]);
        body["project_id"] = json!(project);
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let (fate, reason) = reason_for(&reply.body, "secret.txt");
        assert_eq!(fate, "unresolved");
        assert!(reason.contains("project_id"), "{project}: {reason}");
        assert!(!reply.text.contains(SECRET) && !reply.text.contains("AUTH_CONTENT"));
    }
}

#[tokio::test]
async fn without_a_workspace_root_nothing_is_read_from_disk() {
    let root = workspace();
    let app = crate::support::app::spawn_app().await;
    let reply = app.post_react_step(&dry_run(&["src/auth.js"])).await;
    let (fate, reason) = reason_for(&reply.body, "src/auth.js");
    assert_eq!(fate, "unresolved");
    assert!(reason.contains("no workspace"), "{reason}");
    drop(root);
}

#[tokio::test]
async fn a_project_folder_that_is_a_symbolic_link_is_not_followed() {
    let root = workspace();
    fs::create_dir(root.path().join("elsewhere")).unwrap();
    fs::write(root.path().join("elsewhere/secret.txt"), SECRET).unwrap();
    symlink(root.path().join("elsewhere"), root.path().join("proj-out")).unwrap();
    symlink(PROJECT, root.path().join("proj-alias")).unwrap();
    let app = app_with(&root).await;
    for (project, path) in [("proj-out", "secret.txt"), ("proj-alias", "src/auth.js")] {
        let mut body = dry_run(&[path]);
        body["project_id"] = json!(project);
        let reply = app.post_react_step(&body).await;
        let (fate, reason) = reason_for(&reply.body, path);
        assert_eq!(fate, "unresolved", "{project}");
        assert!(
            reason.contains("project's folder is a symbolic link"),
            "{reason}"
        );
        assert!(!reply.text.contains(SECRET) && !reply.text.contains("AUTH_CONTENT"));
    }
}

/// One worker serves every request here, so a read stuck opening the FIFO would hold every
/// request after it: the test finishing is the assertion.
#[tokio::test]
async fn a_fifo_is_refused_and_the_server_goes_on_answering() {
    let root = workspace();
    let app = app_with(&root).await;
    for _ in 0..3 {
        let reply = app
            .post_react_step(&dry_run(&["pipe", "src/auth.js"]))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(reason_for(&reply.body, "pipe")
            .1
            .contains("not a regular file"));
        assert_eq!(reason_for(&reply.body, "src/auth.js").0, "included");
    }
}

/// The attacks that once got through, against the real server: `swap` keeps trading places
/// with a symbolic link to the secret, `gate` (a folder) with a link to the secret's folder,
/// and `pipe-swap` with a FIFO, while requests read all three.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn racing_swaps_never_let_the_secret_out_through_the_server() {
    let root = workspace();
    let project = root.path().join(PROJECT);
    fs::write(project.join("swap"), "SWAP_INSIDE").unwrap();
    symlink(root.path().join("secret.txt"), project.join("swap.alt")).unwrap();
    fs::create_dir(project.join("gate")).unwrap();
    fs::write(project.join("gate/secret.txt"), "GATE_INSIDE").unwrap();
    symlink(root.path(), project.join("gate.alt")).unwrap();
    fs::write(project.join("pipe-swap"), "PIPE_INSIDE").unwrap();
    fs::rename(project.join("pipe"), project.join("pipe-swap.alt")).unwrap();
    let app = app_with(&root).await;
    let swapper = Swapper::start(["swap", "gate", "pipe-swap"].map(|n| project.join(n)));

    for _ in 0..200 {
        let reply = app
            .post_react_step(&dry_run(&["swap", "gate/secret.txt", "pipe-swap"]))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(!reply.text.contains(SECRET), "the secret was read");
    }
    drop(swapper);
}

/// A thread that keeps exchanging each path with `<path>.alt`, in turn, until dropped. One
/// thread for all, yielding between rounds, so the server keeps a core on a two-core machine.
#[cfg(target_os = "linux")]
struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(target_os = "linux")]
impl Swapper {
    fn start<const N: usize>(paths: [std::path::PathBuf; N]) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                paths.iter().for_each(|p| crate::support::swap::exchange(p));
                std::thread::yield_now();
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // A swap that failed is a failed test, unless the test is already failing.
        if let Some(Err(panic)) = self.thread.take().map(|t| t.join()) {
            if !std::thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}
