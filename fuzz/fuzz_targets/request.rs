//! Any bytes as a request body, through the whole request path offline (see
//! `fuzz/common/request_path.rs`): nothing may panic, hang or break an invariant.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../common/request_path.rs"]
mod request_path;

fuzz_target!(|data: &[u8]| {
    request_path::check(data);
});
