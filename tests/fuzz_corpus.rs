//! Every input the fuzz targets keep in `fuzz/corpus/` (the seeds, and what fuzzing found and
//! was fixed) replayed through the same checks on every `cargo test`, so a fix cannot regress.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fuzz/common/request_path.rs"]
mod request_path;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
        .collect()
}

#[test]
fn every_request_in_the_corpus_passes_the_whole_path() {
    let inputs = corpus("request");
    assert!(inputs.len() >= 10, "the request corpus holds its seeds");
    let mut stepped = 0;
    for (name, data) in &inputs {
        let reached = std::panic::catch_unwind(|| request_path::check(data));
        match reached {
            Ok(request_path::Reached::Step) => stepped += 1,
            Ok(_) => {}
            Err(_) => panic!("{name} broke an invariant"),
        }
    }
    // Seeds that never get past decoding would fuzz only the decoder.
    assert!(
        stepped * 2 > inputs.len(),
        "{stepped} of {} seeds reach the step",
        inputs.len()
    );
}
