//! Programs the tests run for real (Redis, HAProxy, PostgreSQL) come from the system's
//! packages. A clean machine has none of them: they are installed here, once, with apt-get, and
//! a machine where that cannot be done fails the test that needs them, saying why.

use std::process::Command;
use std::sync::Mutex;

/// Makes sure `program` is on the PATH, installing `package` when it is not.
pub fn require(program: &str, package: &str) {
    install(package, || on_path(program));
}

/// Makes sure `present()` holds (a program is where the package puts it), installing
/// `package` when it does not.
pub fn install(package: &str, present: impl Fn() -> bool) {
    // One install at a time in this process; apt's lock (waited for) covers other processes.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if present() {
        return;
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            // A mirror that drops a connection is tried again, not taken for a missing package.
            .args([
                "-o",
                "DPkg::Lock::Timeout=300",
                "-o",
                "Acquire::Retries=5",
                "-q",
                "-y",
            ])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("{package} is missing and apt-get cannot run: {e}"))
    };
    let mut install = apt(&["install", "--no-install-recommends", package]);
    if !install.status.success() {
        // A clean machine may not have read the package lists yet.
        apt(&["update"]);
        install = apt(&["install", "--no-install-recommends", package]);
    }
    assert!(
        install.status.success() && present(),
        "{package} is missing and `apt-get install {package}` failed (it needs root):\n{}",
        String::from_utf8_lossy(&install.stderr)
    );
}

fn on_path(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
