//! Files the service reads at start (`REACTSTEP_PRICES_FILE`, `REACTSTEP_UPSTREAM_CA_FILE`) and
//! the folder it opens (`REACTSTEP_WORKSPACE_ROOT`): a FIFO (whose open would wait for a writer),
//! a device that never ends, or the wrong kind of entry stops the real binary by itself with a
//! message naming the setting and what the path is; a symbolic link to the right kind is
//! followed.

use std::path::{Path, PathBuf};

use crate::support::binary::{start_up_with, RunningBinary};

fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo is needed for this test");
    path
}

fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.self_signed(&key).unwrap().pem()
}

#[tokio::test]
async fn a_fifo_a_device_or_a_directory_named_as_a_file_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = fifo(dir.path());
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let cases = [
        (&fifo, "is a FIFO (named pipe), not a regular file"),
        (&folder, "is a directory, not a regular file"),
        (&PathBuf::from("/dev/zero"), "is a character device"),
    ];
    for setting in ["REACTSTEP_PRICES_FILE", "REACTSTEP_UPSTREAM_CA_FILE"] {
        for (path, says) in &cases {
            let shown = path.display().to_string();
            // `start_up_with` fails the test if the binary has not exited by itself.
            let (status, stderr) = start_up_with(&[(setting, &shown)]).await;
            assert!(!status.success(), "{setting}={shown}");
            assert!(
                stderr.contains(setting) && stderr.contains(&shown) && stderr.contains(says),
                "{setting}={shown}: {stderr}"
            );
        }
    }
    let shown = fifo.display().to_string();
    let (status, stderr) = start_up_with(&[("REACTSTEP_WORKSPACE_ROOT", &shown)]).await;
    assert!(!status.success());
    assert!(
        stderr.contains("REACTSTEP_WORKSPACE_ROOT") && stderr.contains("Not a directory"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_symbolic_link_to_a_regular_file_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(&prices, r#"{"gpt-4o": {"input": 2.5, "output": 10}}"#).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem()).unwrap();
    let mut links = Vec::new();
    for target in [&prices, &ca] {
        let link = target.with_extension("link");
        std::os::unix::fs::symlink(target, &link).unwrap();
        links.push(link.display().to_string());
    }
    let llm = wiremock::MockServer::start().await;
    let env = [
        ("REACTSTEP_PRICES_FILE", links[0].as_str()),
        ("REACTSTEP_UPSTREAM_CA_FILE", links[1].as_str()),
    ];
    let mut server = RunningBinary::start_with(&llm.uri(), "info", &env).await;
    server.logged("price table loaded").await;
    let health = reqwest::get(format!("http://127.0.0.1:{}/healthz", server.port))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let log = server.stop().await;
    assert!(log.contains(r#""models":1"#), "{log}");
}

#[tokio::test]
async fn a_certificate_that_does_not_decode_stops_start_up_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.pem");
    std::fs::write(
        &path,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGUgYXQgYWxs\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let shown = path.display().to_string();
    let (status, stderr) = start_up_with(&[("REACTSTEP_UPSTREAM_CA_FILE", &shown)]).await;
    assert!(!status.success());
    assert!(
        stderr.contains("REACTSTEP_UPSTREAM_CA_FILE") && stderr.contains(&shown),
        "{stderr}"
    );
}
