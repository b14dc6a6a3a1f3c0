//! `mixed [SECONDS] [RATE] [BIG]`: do big requests stall small ones? (issue 15, target 4; see
//! `scripts/load.sh mixed` and docs/benchmarks.md).
//!
//! The mock upstream and the release service of `compare` are started. `oha` sends the typical
//! IDE body (a small request: its prompt is built on the HTTP worker) at a fixed RATE per second
//! (open loop, with oha's latency correction, so a stall shows in the latencies instead of
//! slowing the sender), once alone and once while BIG tasks of this process each keep one
//! 128k-token request in flight: `gpt-4o` with a 128,000-token limit, about 480 KB of source
//! files that fit it, every request's files made new by a number at their top, so that the
//! process-wide cache of token counts has never seen them and each is counted in full. The two
//! phases alternate for two rounds; the table gives the small requests' figures in each, and
//! the big requests answered meanwhile.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::compare::{self, Figures, Target};

/// Files of the big body: this many, of this many bytes each.
const BIG_FILES: usize = 24;
const BIG_FILE_BYTES: usize = 20_000;
/// Replaced in each big request by its own number.
const NONCE: &str = "@@NONCE@@";

/// The big body as JSON text, with `NONCE` at the top of every file.
fn big_template() -> String {
    let files: Vec<Value> = (0..BIG_FILES)
        .map(|n| {
            let content = format!(
                "// version {NONCE}\n{}",
                compare::source(BIG_FILE_BYTES, 5_000 + n * 100)
            );
            json!({"path": format!("src/big/module{n}.js"), "content": content})
        })
        .collect();
    let mut body = compare::step_body(1, compare::earlier_turns(), "Where is the lockout set?");
    body["explicit_context"] = Value::Array(files);
    body["llm_config"]["tokenLimit"] = 128_000.into();
    serde_json::to_string(&body).unwrap()
}

/// What the big tasks saw.
#[derive(Default)]
struct Big {
    answered: u64,
    failed: u64,
    latencies: Vec<Duration>,
}

/// `tasks` loops, each sending one big request after another until `stop`.
async fn drive_big(
    url: String,
    template: Arc<String>,
    tasks: usize,
    stop: Arc<AtomicBool>,
    first: u64,
) -> Big {
    let client = reqwest::Client::new();
    let loops: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, url, template, stop) =
                (client.clone(), url.clone(), template.clone(), stop.clone());
            tokio::spawn(async move {
                let mut big = Big::default();
                let mut n = first + t as u64 * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let body = template.replace(NONCE, &n.to_string());
                    let sent = Instant::now();
                    let reply = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await;
                    let ok = match reply {
                        Ok(r) if r.status() == 200 => {
                            r.json::<Value>().await.is_ok_and(|j| compare::is_step(&j))
                        }
                        _ => false,
                    };
                    if ok {
                        big.answered += 1;
                        big.latencies.push(sent.elapsed());
                    } else {
                        big.failed += 1;
                    }
                }
                big
            })
        })
        .collect();
    let mut all = Big::default();
    for task in loops {
        let big = task.await.unwrap();
        all.answered += big.answered;
        all.failed += big.failed;
        all.latencies.extend(big.latencies);
    }
    all.latencies.sort();
    all
}

/// Call from the main thread (children die with the thread that forked them).
pub async fn run(seconds: u64, rate: u64, big_tasks: usize) {
    let oha = std::env::var("OHA").unwrap_or_else(|_| "oha".into());
    let load_before = compare::load_average();
    let dir = compare::release_binary().with_file_name("load-compare");
    std::fs::create_dir_all(&dir).unwrap();
    let small_file = compare::write_body(&dir, "typical.json", &compare::typical_body());
    let template = Arc::new(big_template());

    let (_mock, mock_port) = compare::start_helper(&["mock-upstream"]);
    let (_service, service_port) = compare::start_service(mock_port);
    let client = reqwest::Client::new();
    compare::wait_ready(&client, service_port).await;
    let url = format!("http://127.0.0.1:{service_port}/api/agent/react_step");
    let small = Target {
        name: "typical body".into(),
        url: url.clone(),
        body: small_file.clone(),
    };
    compare::check(&client, &small, compare::is_step).await;
    // One big request checked, and its size noted.
    let big_file = dir.join("big-128k.json");
    std::fs::write(&big_file, template.replace(NONCE, "0")).unwrap();
    let big_target = Target {
        name: "big body".into(),
        url: url.clone(),
        body: big_file.clone(),
    };
    let big_json = compare::check(&client, &big_target, compare::is_step).await;
    let big_tokens = big_json["context_report"]["used"].as_u64().unwrap_or(0);
    let big_kb = std::fs::metadata(&big_file).map_or(0, |m| m.len()) as f64 / 1e3;

    let mut args = compare::oha_args(&url, &small_file, seconds, 16);
    args.extend([
        "-q".to_string(),
        rate.to_string(),
        "--latency-correction".to_string(),
    ]);
    // Warm-up: connections and the small body's counts.
    let warm = compare::oha_args(&url, &small_file, 1, 16);
    compare::drive_with(&oha, &small.name, &warm);

    let mut rows: Vec<(String, Figures, Option<Big>)> = Vec::new();
    for round in 1..=2 {
        eprintln!("round {round}: small requests alone for {seconds} s");
        let alone = compare::drive_with(&oha, &small.name, &args);
        rows.push((format!("alone (round {round})"), alone, None));

        eprintln!("round {round}: small requests with {big_tasks} big in flight for {seconds} s");
        let stop = Arc::new(AtomicBool::new(false));
        let big = tokio::spawn(drive_big(
            url.clone(),
            template.clone(),
            big_tasks,
            stop.clone(),
            round * 100_000_000,
        ));
        // Let the big requests start before the small ones are measured.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (oha2, args2) = (oha.clone(), args.clone());
        let mixed =
            tokio::task::spawn_blocking(move || compare::drive_with(&oha2, "typical body", &args2))
                .await
                .unwrap();
        stop.store(true, Ordering::Relaxed);
        let big = big.await.unwrap();
        rows.push((
            format!("with {big_tasks} big requests in flight (round {round})"),
            mixed,
            Some(big),
        ));
    }
    let load_after = compare::load_average();

    let mut out = std::io::stdout().lock();
    let cli: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "command: scripts/load.sh {}", cli.join(" "));
    let _ = writeln!(
        out,
        "small: the typical body ({:.1} KB), {rate} requests/s for {seconds} s over 16 connections (oha -q {rate} --latency-correction)",
        std::fs::metadata(&small_file).map_or(0, |m| m.len()) as f64 / 1e3
    );
    let _ = writeln!(
        out,
        "big: {big_kb:.0} KB, {big_tokens} prompt tokens of a 128,000-token limit, each request's files never seen before; {big_tasks} in flight at all times"
    );
    let _ = writeln!(
        out,
        "cores: {}; load average before: {load_before}; after: {load_after}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| small requests | req/s | p50 | p90 | p99 | errors | big answered | big p50 | big max |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for (name, f, big) in &rows {
        let (answered, p50, max) = match big {
            Some(b) if !b.latencies.is_empty() => (
                format!("{} ({} failed)", b.answered, b.failed),
                compare::ms(b.latencies[b.latencies.len() / 2].as_secs_f64()),
                compare::ms(b.latencies[b.latencies.len() - 1].as_secs_f64()),
            ),
            Some(b) => (format!("0 ({} failed)", b.failed), "–".into(), "–".into()),
            None => ("–".into(), "–".into(), "–".into()),
        };
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {} | {} | {} | {} / {} | {answered} | {p50} | {max} |",
            f.rps,
            compare::ms(f.p50),
            compare::ms(f.p90),
            compare::ms(f.p99),
            f.errors,
            f.requests
        );
    }
    let mean = |with_big: bool, pick: fn(&Figures) -> f64| {
        let picked: Vec<f64> = rows
            .iter()
            .filter(|r| r.2.is_some() == with_big)
            .map(|r| pick(&r.1))
            .collect();
        picked.iter().sum::<f64>() / picked.len() as f64
    };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "added by the big requests (means of the rounds): p50 {}, p99 {}",
        compare::added(mean(true, |f| f.p50) - mean(false, |f| f.p50)),
        compare::added(mean(true, |f| f.p99) - mean(false, |f| f.p99)),
    );
    let errors: u64 = rows
        .iter()
        .map(|r| r.1.errors + r.2.as_ref().map_or(0, |b| b.failed))
        .sum();
    assert_eq!(
        errors, 0,
        "every request must be answered 200 with the proposed call"
    );
}
