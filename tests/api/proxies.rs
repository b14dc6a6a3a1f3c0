//! The per-client rate limit behind a trusted proxy (the test's own loopback connection, named
//! in `REACTSTEP_TRUSTED_PROXIES`): every form of `X-Forwarded-For` entry a proxy writes names
//! its own client, a client cannot pick its bucket by writing the header itself, and IPv6
//! clients count by their /64 (or the prefix the operator sets).

use serde_json::{json, Value};

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::requests::request;

const LIMIT: u32 = 3;

fn offline() -> Value {
    let mut body = request("gpt-4o", "q");
    body["mock_response"] = json!("Thought: t\nFinal Answer: a");
    body
}

async fn behind_proxy(ipv6_prefix: u8) -> TestApp {
    spawn_app_with(|c| {
        c.rate_limit_per_client = LIMIT;
        c.rate_limit_ipv6_prefix = ipv6_prefix;
        c.trusted_proxies = "127.0.0.1".parse().unwrap();
    })
    .await
}

/// The status of one step whose proxy says `forwarded` (no header when `None`).
async fn step_from(app: &TestApp, forwarded: Option<&str>) -> u16 {
    let mut req = app
        .client
        .post(format!("{}/api/agent/react_step", app.address))
        .json(&offline());
    if let Some(value) = forwarded {
        req = req.header("x-forwarded-for", value);
    }
    let reply = req.send().await.unwrap();
    let status = reply.status().as_u16();
    if status == 429 {
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["error"]["type"], "rate_limited", "{body}");
    }
    status
}

/// Uses up the bucket of the client `forwarded` names: `LIMIT` steps pass, the next is 429.
async fn exhaust(app: &TestApp, forwarded: &str) {
    for i in 0..LIMIT {
        assert_eq!(
            step_from(app, Some(forwarded)).await,
            200,
            "{forwarded} #{i}"
        );
    }
    assert_eq!(step_from(app, Some(forwarded)).await, 429, "{forwarded}");
}

#[tokio::test]
async fn entries_with_ports_brackets_or_no_address_each_name_their_own_client() {
    let app = behind_proxy(64).await;
    exhaust(&app, "1.2.3.4:5678").await;
    // The same client through another port, or with none, is still over its limit.
    assert_eq!(step_from(&app, Some("1.2.3.4:1")).await, 429);
    assert_eq!(step_from(&app, Some("1.2.3.4")).await, 429);
    for other in [
        "5.6.7.8:5678",
        "[2001:db8::1]:443",
        "[2001:db8:0:1::1]",
        "2001:db8:0:2::1",
        "unknown",
        "_hidden-by-proxy",
    ] {
        assert_eq!(step_from(&app, Some(other)).await, 200, "{other}");
    }
    // The proxy's own bucket was never touched.
    assert_eq!(step_from(&app, None).await, 200);
    // A bracketed address and a bare one are the same client.
    exhaust(&app, "[2001:db8:0:3::1]:443").await;
    assert_eq!(step_from(&app, Some("2001:db8:0:3::1")).await, 429);
    // Clients the proxy could not name share one bucket (used once above), apart from everyone
    // else.
    for _ in 1..LIMIT {
        assert_eq!(step_from(&app, Some("unknown")).await, 200);
    }
    assert_eq!(step_from(&app, Some("unknown")).await, 429);
    assert_eq!(step_from(&app, Some("9.9.9.9")).await, 200);
}

#[tokio::test]
async fn a_client_cannot_leave_its_bucket_by_writing_the_header() {
    let app = behind_proxy(64).await;
    // The proxy appends the address it saw (right-most); the client wrote everything before it:
    // other addresses, trusted-looking hops, names, and thousands of entries.
    let many = vec!["10.0.0.1"; 3_000].join(",");
    let long = "x".repeat(16 * 1024);
    let spoofs = [
        "9.9.9.9".to_string(),
        "127.0.0.1, 127.0.0.1".to_string(),
        "unknown".to_string(),
        many,
        long,
    ];
    for (i, spoof) in spoofs.iter().enumerate() {
        let status = step_from(&app, Some(&format!("{spoof}, 4.4.4.4:80"))).await;
        let expected = if i < LIMIT as usize { 200 } else { 429 };
        assert_eq!(status, expected, "spoof #{i}");
    }
    // A proxy chain of trusted hops is walked to the client, however long.
    let hops = vec!["127.0.0.1"; 3_000].join(",");
    exhaust(&app, &format!("6.6.6.6, {hops}")).await;
    // A header past what the server reads (512 KiB) is refused with the connection, or with a
    // 4xx, before any step; the server goes on answering.
    let huge = "1.1.1.1,".repeat(64 * 1024);
    let refused = app
        .client
        .post(format!("{}/api/agent/react_step", app.address))
        .header("x-forwarded-for", huge)
        .json(&offline())
        .send()
        .await;
    if let Ok(reply) = refused {
        let status = reply.status().as_u16();
        assert!((400..500).contains(&status) && status != 429, "{status}");
    }
    assert_eq!(step_from(&app, Some("7.7.7.7")).await, 200);
}

#[tokio::test]
async fn ipv6_clients_count_by_their_64_and_mapped_ones_as_ipv4() {
    let app = behind_proxy(64).await;
    let admitted = rotate(&app, "2001:db8:aa:bb", 20).await;
    assert_eq!(admitted, LIMIT as usize, "one /64 is one client");
    assert_eq!(rotate(&app, "2001:db8:aa:bc", 1).await, 1, "the next /64");
    // `::ffff:1.2.3.4` is 1.2.3.4, however written.
    for form in ["::ffff:1.2.3.4", "[::ffff:1.2.3.4]:80", "1.2.3.4:9"] {
        assert_eq!(step_from(&app, Some(form)).await, 200, "{form}");
    }
    assert_eq!(step_from(&app, Some("1.2.3.4")).await, 429);
}

#[tokio::test]
async fn a_prefix_of_128_counts_each_ipv6_address_alone() {
    let app = behind_proxy(128).await;
    assert_eq!(rotate(&app, "2001:db8:aa:bb", 20).await, 20);
    exhaust(&app, "2001:db8:aa:bb::1").await;
}

/// Steps from `count` addresses of the /64 `network` (its first four groups); how many passed.
async fn rotate(app: &TestApp, network: &str, count: u16) -> usize {
    let mut admitted = 0;
    for i in 0..count {
        let address = format!("[{network}:{:x}:{:x}::1]:443", 0x1000 + i, i * 7);
        if step_from(app, Some(&address)).await == 200 {
            admitted += 1;
        }
    }
    admitted
}
