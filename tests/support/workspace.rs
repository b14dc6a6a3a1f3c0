//! The workspace the `reactstep run` tests give the file tools: one source file whose constant
//! the scripted loops read.
#![allow(clippy::unwrap_used)]

pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/answer.rs"),
        "pub const ANSWER: u32 = 6 * 7;\n",
    )
    .unwrap();
    dir
}
