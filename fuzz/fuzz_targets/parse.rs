//! Any bytes, read as the model's output: the parser must not panic, and an action it returns
//! must have a tool name and arguments taken from the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reactstep::step::parse::{parse, Decision, Tags};

fuzz_target!(|data: &[u8]| {
    // Model output arrives as UTF-8 text; cut invalid input at its first bad byte.
    let text = match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(e) => match std::str::from_utf8(&data[..e.valid_up_to()]) {
            Ok(text) => text,
            Err(_) => return,
        },
    };
    if let Some(parsed) = parse(text, &Tags::default()) {
        if let Decision::Action { tool_name, .. } = &parsed.decision {
            assert!(!tool_name.is_empty());
        }
    }
});
