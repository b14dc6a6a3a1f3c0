//! An upstream over HTTPS, as every hosted provider is: the service speaks HTTP/2 to it when
//! offered, trusts the operator's extra certificate authority, says so when it cannot trust a
//! certificate, and spreads its calls over pools so that a server's stream limit does not cap
//! them.

use std::io::Write;

use reactstep::config::Config;

use crate::helpers::{request, spawn_app_with, TestApp};
use crate::https_upstream::{self, HttpsUpstream};
use crate::upstream::openai_reply;

fn answer() -> (u16, String) {
    let reply = openai_reply("Thought: It is known.\nFinal Answer: reached over TLS");
    (200, reply.to_string())
}

async fn upstream() -> HttpsUpstream {
    https_upstream::start(None, |_body| async { answer() }).await
}

fn pem_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// The app calling `upstream` as OpenAI, trusting `ca` if given, with the test's other changes.
async fn app_for(
    upstream: &HttpsUpstream,
    ca: Option<&tempfile::NamedTempFile>,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    let base = format!("{}/v1", upstream.uri);
    let ca = ca.map(|f| f.path().to_path_buf());
    spawn_app_with(move |c| {
        c.openai_base_url = base;
        c.upstream_ca_file = ca;
        tweak(c);
    })
    .await
}

#[tokio::test]
async fn with_the_operator_ca_the_step_reaches_an_https_upstream_over_http2() {
    let upstream = upstream().await;
    let ca = pem_file(&upstream.ca_pem);
    let app = app_for(&upstream, Some(&ca), |_| {}).await;

    let reply = app.post_react_step(&request("gpt-4o", "q")).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "reached over TLS");
    let versions = upstream.versions.lock().unwrap().clone();
    assert_eq!(versions, vec![hyper::Version::HTTP_2], "ALPN chose HTTP/2");
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_502_that_says_so_and_is_not_retried() {
    let upstream = upstream().await;
    let app = app_for(&upstream, None, |_| {}).await;

    let reply = app.post_react_step(&request("gpt-4o", "q")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    assert_eq!(
        reply.body["error"]["retryable"], false,
        "a retry cannot help"
    );
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("TLS certificate is not trusted"),
        "{message}"
    );
    // One handshake, refused; the retries (3 by default) were not spent on it.
    let connections = upstream
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(connections, 1);
    assert!(
        upstream.versions.lock().unwrap().is_empty(),
        "nothing got through"
    );
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
}

#[tokio::test]
async fn a_ca_file_that_is_missing_or_holds_no_certificate_stops_start_up() {
    let empty = pem_file("this is not a certificate\n");
    let broken =
        pem_file("-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n");
    let missing = std::path::PathBuf::from("/nonexistent/reactstep-ca.pem");
    for (path, says) in [
        (empty.path().to_path_buf(), "holds no PEM certificate"),
        (broken.path().to_path_buf(), "certificate"),
        (missing.clone(), "No such file"),
    ] {
        let mut config = reactstep::config::Config::defaults();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.upstream_ca_file = Some(path.clone());
        let Err(err) = reactstep::startup::Application::build(&config) else {
            panic!("{} must stop start-up", path.display());
        };
        let text = err.to_string();
        assert!(text.contains("REACTSTEP_UPSTREAM_CA_FILE"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(says), "{text}");
    }
}

/// The provider's server allows one stream per connection and answers only once four calls
/// are in: four steps at once get through only if the service spreads them over four
/// connections. With a single pool they would queue on one, and the step deadline would end
/// them.
#[tokio::test]
async fn calls_spread_over_pools_so_a_stream_limit_does_not_cap_them() {
    let all_in = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let upstream = https_upstream::start(Some(1), move |_body| {
        let all_in = all_in.clone();
        async move {
            all_in.wait().await;
            answer()
        }
    })
    .await;
    let ca = pem_file(&upstream.ca_pem);
    let app = app_for(&upstream, Some(&ca), |c| {
        c.upstream_pools = 4;
        c.step_timeout_secs = 20;
    })
    .await;

    let body = request("gpt-4o", "q");
    let replies = futures_util::future::join_all((0..4).map(|_| app.post_react_step(&body))).await;

    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["direct_response"], "reached over TLS");
    }
    assert_eq!(upstream.versions.lock().unwrap().len(), 4);
}
