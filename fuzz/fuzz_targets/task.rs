//! Any bytes as a plan or evaluation request (the first byte picks which), through the whole
//! request path offline (see `fuzz/common/request_path.rs`): nothing may panic or hang, and what
//! is answered holds to the plan's and the evaluation's rules.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../common/request_path.rs"]
mod request_path;

fuzz_target!(|data: &[u8]| {
    request_path::check_task(data);
});
