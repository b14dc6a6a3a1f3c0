//! The file tools against someone who can write in the workspace while the loop runs: a folder
//! exchanged with a link to outside, a file exchanged with a link to a secret, a file exchanged
//! with a FIFO, raced thousands of times through `read_file`, `list_directory` and
//! `grep_search`. Each swap is `renameat2(RENAME_EXCHANGE)`, so the name always exists and is one
//! thing or the other at every instant: a check-then-open reader is caught within a few hundred.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::beneath::swaps::{exchange, mkfifo, StopOnDrop};

use serde_json::{json, Map, Value};

use super::{grep_search, list_directory, read_file, Workspace};

const SECRET: &str = "SECRET-FROM-OUTSIDE";
/// A name only the outside folder holds: a listing that shows it listed outside.
const OUTSIDE_NAME: &str = "outside-only-name";
const INSIDE: &str = "inside the workspace";
const ROUNDS: usize = 2000;

/// `<tmp>/outside` holds the secret; `<tmp>/ws` is the workspace, and each swapped name `x` has
/// its other self beside it as `x.alt`.
fn fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, outside) = (tmp.path().join("ws"), tmp.path().join("outside"));
    fs::create_dir_all(ws.join("d")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("f"), SECRET).unwrap();
    fs::write(outside.join(OUTSIDE_NAME), SECRET).unwrap();
    fs::write(outside.join("secret.txt"), SECRET).unwrap();
    for file in ["d/f", "file", "p"] {
        fs::write(ws.join(file), INSIDE).unwrap();
    }
    symlink(&outside, ws.join("d.alt")).unwrap();
    symlink(outside.join("secret.txt"), ws.join("file.alt")).unwrap();
    mkfifo(&ws.join("p.alt"));
    tmp
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Never the secret nor the outside folder's names, whatever the tool answered.
fn clean(answer: &Result<String, String>, what: &str) {
    let text = match answer {
        Ok(text) | Err(text) => text,
    };
    assert!(
        !text.contains(SECRET) && !text.contains(OUTSIDE_NAME),
        "{what} reached outside the workspace: {text}"
    );
}

#[test]
fn racing_swaps_never_let_a_tool_out_of_the_workspace() {
    let tmp = fixture();
    let root = tmp.path().join("ws");
    let ws = Workspace::new(&root).unwrap();
    let swapped: [PathBuf; 3] = [root.join("d"), root.join("file"), root.join("p")];
    let stop = AtomicBool::new(false);
    let (mut read, mut refused) = (0, 0);
    std::thread::scope(|s| {
        for path in &swapped {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    exchange(path);
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        for _ in 0..ROUNDS {
            for path in ["d/f", "file", "p"] {
                let answer = read_file(&ws, &args(json!({ "path": path })));
                clean(&answer, path);
                match answer {
                    Ok(text) => {
                        assert_eq!(text, INSIDE, "{path}");
                        read += 1;
                    }
                    Err(_) => refused += 1,
                }
            }
            clean(&list_directory(&ws, &args(json!({"path": "d"}))), "list d");
            clean(
                &grep_search(&ws, &args(json!({"pattern": "SECRET|inside"}))),
                "grep",
            );
        }
    });
    // Both sides of the swaps were met: the race ran, rather than one state throughout.
    assert_eq!(read + refused, ROUNDS * 3);
    assert!(read > 0 && refused > 0, "read {read}, refused {refused}");
}

/// Each state of every swapped name, without a race: the inside one is read, the other refused
/// with its reason, and the FIFO answers at once.
#[test]
fn each_side_of_every_swap_is_read_or_refused_as_it_should() {
    let tmp = fixture();
    let root = tmp.path().join("ws");
    let ws = Workspace::new(&root).unwrap();
    let read = |path: &str| read_file(&ws, &args(json!({ "path": path })));
    for path in ["d/f", "file", "p"] {
        assert_eq!(read(path).unwrap(), INSIDE);
    }
    for name in ["d", "file", "p"] {
        exchange(&root.join(name));
    }
    assert!(read("d/f").unwrap_err().contains("symbolic link"));
    assert!(read("file").unwrap_err().contains("symbolic link"));
    assert!(read("p").unwrap_err().contains("named pipe (FIFO)"));
    assert!(list_directory(&ws, &args(json!({"path": "d"})))
        .unwrap_err()
        .contains("symbolic link"));
    let found = grep_search(&ws, &args(json!({"pattern": "SECRET|inside"}))).unwrap();
    // The inside files now go by their `.alt` names; the links and the FIFO are passed over.
    let names: Vec<&str> = found
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(names, ["d.alt/f", "file.alt", "p.alt"]);
}
