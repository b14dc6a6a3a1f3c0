//! `Workspace::read` against someone who can write in the project: every swap that once let a
//! read out (a file exchanged with a symbolic link, a folder exchanged with a link to outside, a
//! file exchanged with a FIFO, the project folder itself exchanged), raced thousands of times
//! through both resolvers. Each swap is `renameat2(RENAME_EXCHANGE)`, so the name always exists
//! and is one thing or the other at every instant.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::beneath::swaps::{exchange, mkfifo, StopOnDrop};

use super::Workspace;

const SECRET: &str = "SECRET-FROM-OUTSIDE-THE-PROJECT";
const INSIDE: &str = "inside the project";
const LIMIT: u64 = 4096;
/// Rounds of reads in a race; each round reads every swapped name once.
const ROUNDS: usize = 2500;

/// `<tmp>/outside` holds the secret; `<tmp>/root` is the workspace, `proj` its project, and each
/// swapped name `x` has its other self beside it as `x.alt`.
fn fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
    let project = root.join("proj");
    for dir in [project.join("d"), outside.join("dir"), root.join("proj2")] {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(outside.join("secret.txt"), SECRET).unwrap();
    fs::write(outside.join("dir/f"), SECRET).unwrap();
    fs::write(outside.join("f"), SECRET).unwrap();
    for file in ["file", "d/f", "p", "in"] {
        fs::write(project.join(file), INSIDE).unwrap();
    }
    fs::write(root.join("proj2/f"), INSIDE).unwrap();
    symlink(outside.join("secret.txt"), project.join("file.alt")).unwrap();
    symlink(outside.join("dir"), project.join("d.alt")).unwrap();
    mkfifo(&project.join("p.alt"));
    symlink("file", project.join("in.alt")).unwrap();
    symlink(&outside, root.join("proj2.alt")).unwrap();
    tmp
}

fn root(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("root")
}

/// Every read is the file inside or a refusal; never the secret, and every call returns.
fn check(read: Result<String, String>, what: &str) -> bool {
    match read {
        Ok(text) => {
            assert_eq!(text, INSIDE, "{what} read something else than its own file");
            true
        }
        Err(why) => {
            assert!(!why.contains(SECRET), "{what}: {why}");
            false
        }
    }
}

/// Reads every `(project, path)` for `ROUNDS` rounds while one thread per name keeps exchanging
/// it. Returns how many reads succeeded and how many were refused, for the caller to judge.
fn race(ws: &Workspace, swapped: &[PathBuf], reads: &[(&str, &str)]) -> (usize, usize) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for path in swapped {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    exchange(path);
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        let mut outcomes = (0, 0);
        for _ in 0..ROUNDS {
            for (project, path) in reads {
                match check(ws.read(Some(project), path), path) {
                    true => outcomes.0 += 1,
                    false => outcomes.1 += 1,
                }
            }
        }
        outcomes
    })
}

fn race_every_swap(ws: &Workspace, tmp: &tempfile::TempDir) {
    let project = root(tmp).join("proj");
    let swapped = [
        project.join("file"),
        project.join("d"),
        project.join("p"),
        root(tmp).join("proj2"),
    ];
    let reads = [
        ("proj", "file"),
        ("proj", "d/f"),
        ("proj", "p"),
        ("proj2", "f"),
    ];
    let (read, refused) = race(ws, &swapped, &reads);
    assert_eq!(read + refused, ROUNDS * reads.len());
}

#[test]
fn racing_swaps_never_let_a_read_out_through_openat2() {
    let tmp = fixture();
    race_every_swap(&Workspace::new(&root(&tmp), LIMIT).unwrap(), &tmp);
}

#[test]
fn racing_swaps_never_let_a_read_out_through_the_walk() {
    let tmp = fixture();
    race_every_swap(&Workspace::walking(&root(&tmp), LIMIT).unwrap(), &tmp);
}

/// The same reads without a race: each of the two states of every name gives what it should,
/// so the race above has both outcomes to interleave.
#[test]
fn each_side_of_every_swap_is_read_or_refused_as_it_should() {
    let tmp = fixture();
    let project = root(&tmp).join("proj");
    for ws in workspaces(&tmp) {
        let read = |project: &str, path: &str| ws.read(Some(project), path);
        assert_eq!(read("proj", "file").unwrap(), INSIDE);
        assert_eq!(read("proj", "d/f").unwrap(), INSIDE);
        assert_eq!(read("proj", "p").unwrap(), INSIDE);
        assert_eq!(read("proj2", "f").unwrap(), INSIDE);
        for name in ["file", "d", "p"] {
            exchange(&project.join(name));
        }
        exchange(&root(&tmp).join("proj2"));
        assert!(read("proj", "file").unwrap_err().contains("symbolic link"));
        assert!(read("proj", "d/f").unwrap_err().contains("symbolic link"));
        assert!(read("proj", "p")
            .unwrap_err()
            .contains("not a regular file"));
        assert!(read("proj2", "f").unwrap_err().contains("symbolic link"));
        for name in ["file", "d", "p"] {
            exchange(&project.join(name));
        }
        exchange(&root(&tmp).join("proj2"));
    }
}

fn workspaces(tmp: &tempfile::TempDir) -> [Workspace; 2] {
    [
        Workspace::new(&root(tmp), LIMIT).unwrap(),
        Workspace::walking(&root(tmp), LIMIT).unwrap(),
    ]
}

#[test]
fn a_link_that_stays_inside_is_refused_too() {
    let tmp = fixture();
    for ws in workspaces(&tmp) {
        let why = ws.read(Some("proj"), "in.alt").unwrap_err();
        assert!(why.contains("symbolic links are not followed"), "{why}");
    }
}

#[test]
fn a_project_folder_that_is_a_link_is_refused_even_to_a_folder_inside() {
    let tmp = fixture();
    symlink("proj", root(&tmp).join("alias")).unwrap();
    for ws in workspaces(&tmp) {
        for project in ["proj2.alt", "alias"] {
            let why = ws.read(Some(project), "f").unwrap_err();
            assert!(why.contains("project's folder is a symbolic link"), "{why}");
        }
    }
}

#[test]
fn a_directory_a_socket_and_a_fifo_are_refused_without_blocking() {
    let tmp = fixture();
    let project = root(&tmp).join("proj");
    let _listener = std::os::unix::net::UnixListener::bind(project.join("sock")).unwrap();
    for ws in workspaces(&tmp) {
        for path in ["d", "sock", "p.alt"] {
            let why = ws.read(Some("proj"), path).unwrap_err();
            assert!(why.contains("not a regular file"), "{path}: {why}");
        }
    }
}

/// A file whose `fstat` size is 0 but that reads longer than the limit (as files in `/proc`
/// do, and as a file that grows after `fstat` would): the read itself is capped.
#[test]
fn the_read_is_capped_whatever_fstat_said() {
    let file = fs::File::open("/proc/self/maps").unwrap();
    assert_eq!(file.metadata().unwrap().len(), 0);
    let why = super::read_capped(file, 16).unwrap_err();
    assert!(why.contains("over the size limit of 16 bytes"), "{why}");
}

/// Documented, not defended: a hard link is the outside file under a name inside, and no path
/// resolution can tell. Keeping the workspace on a filesystem of its own closes it.
#[test]
fn a_hard_link_to_a_file_outside_is_the_file_itself() {
    let tmp = fixture();
    let secret = tmp.path().join("outside/secret.txt");
    fs::hard_link(secret, root(&tmp).join("proj/hard")).unwrap();
    for ws in workspaces(&tmp) {
        assert_eq!(ws.read(Some("proj"), "hard").unwrap(), SECRET);
    }
}
