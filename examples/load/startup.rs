//! `startup [RUNS]`: what a fresh service costs before and at its first steps (issue 35, item 5:
//! the encoders' tables are inflated when each encoder is first built). Each run starts the
//! release service (`REACTSTEP_BIN` or the one next to this example), polls `/readyz` every
//! millisecond, then sends the typical body with `mock_response` (no upstream): for `gpt-4o`
//! (`o200k_base`, built at start), then twice for `gpt-4` (`cl100k_base`, built by its first
//! request). The medians over RUNS (10) are printed, with the service's RSS when idle after
//! start and after the `gpt-4` steps.

use std::time::{Duration, Instant};

use super::compare;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A figure's name and how it is read from a run.
type Column = (&'static str, fn(&Run) -> f64);

struct Run {
    ready: Duration,
    first_o200k: Duration,
    first_cl100k: Duration,
    second_cl100k: Duration,
    idle_kib: u64,
    after_kib: u64,
}

async fn step(client: &reqwest::Client, url: &str, body: &serde_json::Value) -> Duration {
    let started = Instant::now();
    let reply = client.post(url).json(body).send().await.unwrap();
    let status = reply.status();
    let json: serde_json::Value = reply.json().await.unwrap();
    assert!(status == 200 && compare::is_step(&json), "{status}: {json}");
    started.elapsed()
}

async fn once(client: &reqwest::Client) -> Run {
    let port = compare::free_port();
    let binary = compare::release_binary();
    let started = Instant::now();
    let child = compare::command(&binary)
        .env("REACTSTEP_BIND", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let service = compare::Process::from(child);
    let ready_url = format!("http://127.0.0.1:{port}/readyz");
    loop {
        let ready = client.get(&ready_url).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never ready");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ready = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_kib = super::rss_kib(service.id(), "VmRSS");
    let url = format!("http://127.0.0.1:{port}/api/agent/react_step");
    let mut body = compare::typical_body();
    body["mock_response"] = compare::MODEL_OUTPUT.into();
    let first_o200k = step(client, &url, &body).await;
    body["llm_config"]["modelName"] = "gpt-4".into();
    body["llm_config"]["tokenLimit"] = 8000.into();
    let first_cl100k = step(client, &url, &body).await;
    let second_cl100k = step(client, &url, &body).await;
    let after_kib = super::rss_kib(service.id(), "VmRSS");
    Run {
        ready,
        first_o200k,
        first_cl100k,
        second_cl100k,
        idle_kib,
        after_kib,
    }
}

pub async fn run(runs: usize) {
    let client = reqwest::Client::new();
    let mut all = Vec::new();
    for _ in 0..runs {
        all.push(once(&client).await);
    }
    let median = |f: fn(&Run) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        let (lo, hi) = (v[0], v[v.len() - 1]);
        (v[v.len() / 2], lo, hi)
    };
    let binary = compare::release_binary();
    let size = std::fs::metadata(&binary).map_or(0, |m| m.len());
    println!(
        "startup: {} ({size} bytes), {runs} runs; median (lowest–highest)",
        binary.display()
    );
    let rows: [Column; 6] = [
        ("start to /readyz, ms", |r| ms(r.ready)),
        ("first step, gpt-4o (o200k_base), ms", |r| ms(r.first_o200k)),
        ("first step, gpt-4 (cl100k_base built), ms", |r| {
            ms(r.first_cl100k)
        }),
        ("second step, gpt-4, ms", |r| ms(r.second_cl100k)),
        ("RSS idle 1 s after ready, MiB", |r| {
            r.idle_kib as f64 / 1024.0
        }),
        ("RSS after the gpt-4 steps, MiB", |r| {
            r.after_kib as f64 / 1024.0
        }),
    ];
    for (what, f) in rows {
        let (m, lo, hi) = median(f);
        println!("  {what}: {m:.1} ({lo:.1}–{hi:.1})");
    }
}
