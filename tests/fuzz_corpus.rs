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

/// Every input of `target`'s corpus through `check`; more than half must reach the step, or
/// the seeds would fuzz only the decoder.
fn replay(target: &str, check: fn(&[u8]) -> request_path::Reached) {
    let inputs = corpus(target);
    assert!(inputs.len() >= 10, "the {target} corpus holds its seeds");
    let mut stepped = 0;
    for (name, data) in &inputs {
        match std::panic::catch_unwind(|| check(data)) {
            Ok(request_path::Reached::Step) => stepped += 1,
            Ok(_) => {}
            Err(_) => panic!("{name} broke an invariant"),
        }
    }
    assert!(
        stepped * 2 > inputs.len(),
        "{stepped} of {} seeds reach the step",
        inputs.len()
    );
}

#[test]
fn every_request_in_the_corpus_passes_the_whole_path() {
    replay("request", request_path::check);
}

#[test]
fn every_plan_and_evaluation_in_the_corpus_passes_the_whole_path() {
    replay("task", request_path::check_task);
}

#[test]
fn every_output_in_the_parse_corpus_is_read_whole_and_live() {
    use reactstep::step::parse::{live::LiveParser, parse, Decision, Tags};
    let inputs = corpus("parse");
    assert!(inputs.len() >= 40, "the parse corpus holds its seeds");
    let mut actions = 0;
    for (name, data) in &inputs {
        let text = String::from_utf8_lossy(data);
        let parsed = std::panic::catch_unwind(|| parse(&text, &Tags::default()))
            .unwrap_or_else(|_| panic!("{name} broke the parser"));
        if let Some(Decision::Action { tool_name, .. }) = parsed.map(|p| p.decision) {
            assert!(!tool_name.is_empty(), "{name}: an action without a name");
            actions += 1;
        }
        let mut live = LiveParser::new(&Tags::default());
        for piece in text.as_bytes().chunks(3) {
            live.push(&String::from_utf8_lossy(piece));
        }
        live.finish();
    }
    // The seeds are the families the parser reads, so most of them are actions.
    assert!(
        actions * 2 > inputs.len(),
        "{actions} of {} seeds are actions",
        inputs.len()
    );
}
