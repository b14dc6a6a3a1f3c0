//! An upstream over HTTPS, as every hosted provider is: the service speaks HTTP/2 to it when
//! offered, trusts the operator's extra certificate authority, says so when it cannot trust a
//! certificate, and spreads its calls over pools so that a server's stream limit does not cap
//! them.

use std::io::Write;

use reactstep::config::Config;

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::https_upstream::{self, HttpsUpstream};
use crate::support::requests::request;
use crate::support::upstream::openai_reply;

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
    steps_at_once(&upstream, &ca, 4, 4).await;
    assert_eq!(upstream.versions.lock().unwrap().len(), 4);
}

/// Steps at once from a new app (a cold pool), over `pools` connection pools: each must get
/// through.
async fn steps_at_once(
    upstream: &HttpsUpstream,
    ca: &tempfile::NamedTempFile,
    steps: usize,
    pools: u16,
) {
    let app = app_for(upstream, Some(ca), |c| {
        c.upstream_pools = pools;
        c.step_timeout_secs = 20;
    })
    .await;
    let body = request("gpt-4o", "q");
    let replies =
        futures_util::future::join_all((0..steps).map(|_| app.post_react_step(&body))).await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["direct_response"], "reached over TLS");
    }
}

fn held_until(
    steps: usize,
) -> impl Fn(bytes::Bytes) -> futures_util::future::BoxFuture<'static, (u16, String)> + Clone {
    let all_in = std::sync::Arc::new(tokio::sync::Barrier::new(steps));
    move |_body| {
        let all_in = all_in.clone();
        Box::pin(async move {
            all_in.wait().await;
            answer()
        })
    }
}

#[tokio::test]
async fn a_burst_on_a_cold_pool_opens_one_http2_connection_per_pool_not_one_per_step() {
    let steps = 40;
    let upstream = https_upstream::start(None, held_until(steps)).await;
    let ca = pem_file(&upstream.ca_pem);
    steps_at_once(&upstream, &ca, steps, 2).await;
    let connections = upstream
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        connections <= 2,
        "{connections} connections for 2 pools: the calls that started while the first handshake ran each opened their own"
    );
    let versions = upstream.versions.lock().unwrap().clone();
    assert!(versions.iter().all(|v| *v == hyper::Version::HTTP_2));
}

#[tokio::test]
async fn over_tls_without_http2_every_step_still_gets_a_connection_of_its_own() {
    // Held until all are in: a call left waiting for a shared connection would hold them all.
    let steps = 12;
    let upstream = https_upstream::start_offering(&[b"http/1.1"], None, held_until(steps)).await;
    let ca = pem_file(&upstream.ca_pem);
    steps_at_once(&upstream, &ca, steps, 2).await;
    let versions = upstream.versions.lock().unwrap().clone();
    assert_eq!(versions.len(), steps);
    assert!(versions.iter().all(|v| *v == hyper::Version::HTTP_11));
}

#[tokio::test]
async fn when_the_first_connection_fails_every_step_still_gets_through() {
    let upstream = upstream().await;
    // The first connection is closed before its TLS handshake, while the other calls wait for
    // it: they connect on their own (or take the connection the retried call makes).
    upstream
        .drop_next
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let ca = pem_file(&upstream.ca_pem);
    steps_at_once(&upstream, &ca, 10, 1).await;
    assert_eq!(upstream.versions.lock().unwrap().len(), 10);
    assert_eq!(
        upstream.drop_next.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}
