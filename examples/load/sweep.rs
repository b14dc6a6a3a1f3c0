//! `sweep [SECONDS]`: the service and the bare pass-through on 1, 2, 4 and 8 cores, each process
//! pinned to its own cores with `taskset`, a warm and a cold body, at concurrency 1, 16 and 64;
//! one markdown table for all of it (issue 35; see `scripts/load.sh sweep` and
//! docs/benchmarks.md).
//!
//! Layout: the target (the pass-through, then the service: never both at once) on CPUs 0..K, the
//! mock upstream of `compare` on the next cores (up to 4), the load generator on the ones after
//! (up to 4). The service is told `REACTSTEP_WORKERS=K`; its CPU pool and its upstream pools
//! size themselves from the cores it may run on (`available_parallelism`, which follows the
//! affinity `taskset` sets), as actix-web's workers do in the pass-through. A core count that
//! does not fit the machine is skipped, and the run says so. Each point is `SECONDS` (3) after a
//! 0.5 s warm-up on the same connections: 48 points, about 3 minutes in all. `SWEEP_BODIES=warm`
//! (or `cold`) measures one body alone, in half the time; `SWEEP_CORES=1,8` those core counts
//! alone.
//!
//! The load generator is this binary (`drive`), not oha: a cold run needs a body the service has
//! never seen on every request, and oha sends one body. Both bodies go through the same code:
//! the typical IDE step with a marker in each of its three files (`// revision N`) and each of
//! its tool observations (`[call N]`). Warm, N is always 0: the same body every time, so the
//! token cache knows it. Cold, N is new for every request, and the files under it come from 64
//! distinct sets of the same sizes, so each request's files and observations are text the
//! service has not counted. `tokenizer-pass` times one pass of `o200k_base` over that new text
//! (no cache, no memo), the yardstick of issue 35's cold target.
//!
//! Beside the added latency the client sees, the table gives what the service told it added
//! (`X-Reactstep-Overhead-Ms`, its own phases less the upstream call, "told"): where the two
//! part, the time went between the processes (waking, the loopback, the larger upstream body),
//! not into the step's own work.
//!
//! And what each target's process spent: CPU per request over the measured window, how busy it
//! kept the cores it was given, and its busiest thread. This is the profile a machine without
//! `perf` allows: a lock or a single queue that flattens the scaling shows as cores left idle
//! while latency grows, or as one thread near 100 %; contention on shared lines shows as CPU
//! per request growing with the cores. `SWEEP_SERVICE_PRELOAD=lib.so` starts the service (alone,
//! not the pass-through or the helpers) with that library preloaded, to try an allocator.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use super::compare::{self, Figures, Process};

const CORE_COUNTS: [usize; 4] = [1, 2, 4, 8];
const CONCURRENCIES: [u64; 3] = [1, 16, 64];
const WARM_UP: Duration = Duration::from_millis(500);
/// Distinct file sets the cold bodies take turns with.
const COLD_SETS: usize = 64;
const MARK: &str = "@@N@@";

// ---------------------------------------------------------------------------------------------
// The bodies

/// A body's JSON text cut at its markers: rendering puts a number between the pieces.
pub struct Template(Vec<String>);

impl Template {
    /// The typical body with file set `set` (0: the typical files) and a marker in each file and
    /// each tool observation.
    fn new(set: usize) -> Self {
        let mut body = compare::typical_body();
        let files = body["explicit_context"].as_array_mut().unwrap();
        for (n, file) in files.iter_mut().enumerate() {
            let text = file["content"].as_str().unwrap();
            let header = format!("// revision {MARK}\n");
            let size = text.len() - header.len();
            let seed = if set == 0 {
                n * 100
            } else {
                10_000 + set * 300 + n * 100
            };
            file["content"] = format!("{header}{}", compare::source(size, seed)).into();
        }
        for turn in body["conversation_history"].as_array_mut().unwrap() {
            if turn["role"] == "tool_observation" {
                let text = turn["content"].as_str().unwrap();
                turn["content"] = format!("[call {MARK}] {text}").into();
            }
        }
        let text = serde_json::to_string(&body).unwrap();
        Self(text.split(MARK).map(str::to_string).collect())
    }

    fn render(&self, n: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.iter().map(String::len).sum::<usize>() + 64);
        for (i, piece) in self.0.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(n.as_bytes());
            }
            out.extend_from_slice(piece.as_bytes());
        }
        out
    }
}

/// Request `i`'s body: warm, always the same; cold, new text (`run` keeps runs apart).
fn body(templates: &[Template], cold: bool, run: u64, i: u64) -> Bytes {
    if cold {
        let set = &templates[i as usize % templates.len()];
        Bytes::from(set.render(&format!("{run:x}.{i}")))
    } else {
        Bytes::from(templates[0].render("0"))
    }
}

fn templates(cold: bool) -> Vec<Template> {
    if cold {
        (1..=COLD_SETS).map(Template::new).collect()
    } else {
        vec![Template::new(0)]
    }
}

/// `cold-bodies N`: `N` cold bodies (`cold-0.json` …) written beside the other bodies, each with
/// text the service has not seen, for `scripts/callgrind_service.sh cold`; prints their folder.
pub fn write_cold_bodies(count: u64) {
    let dir = compare::release_binary().with_file_name("load-compare");
    std::fs::create_dir_all(&dir).unwrap();
    let templates = templates(true);
    for i in 0..count {
        std::fs::write(
            dir.join(format!("cold-{i}.json")),
            body(&templates, true, 2, i),
        )
        .unwrap();
    }
    println!("{}", dir.display());
}

/// What request `i` of a cold run carries that the service has not seen: its files and its
/// observations, as the service counts them (each text on its own).
fn new_texts(body: &[u8]) -> Vec<String> {
    let body: Value = serde_json::from_slice(body).unwrap();
    let files = body["explicit_context"].as_array().unwrap().iter();
    let seen = body["conversation_history"].as_array().unwrap().iter();
    files
        .map(|f| f["content"].as_str().unwrap().to_string())
        .chain(
            seen.filter(|t| t["role"] == "tool_observation")
                .map(|t| t["content"].as_str().unwrap().to_string()),
        )
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The generator (`drive URL warm|cold SECONDS CONCURRENCY`), a child pinned to its own cores

/// One closed loop on one keep-alive connection: send, read the whole answer, send again, until
/// `until`; the latencies (µs) of the requests sent after `measure_from`, and the time the
/// service says it added to each (`X-Reactstep-Overhead-Ms`, µs; none from the pass-through).
async fn connection(
    url: Arc<hyper::Uri>,
    next: Arc<AtomicU64>,
    templates: Arc<Vec<Template>>,
    cold: bool,
    run: u64,
    (measure_from, until): (Instant, Instant),
) -> (Vec<u32>, Vec<u32>, u64) {
    use http_body_util::{BodyExt, Full};
    let authority = url.authority().unwrap().to_string();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let (mut latencies, mut own, mut errors) = (Vec::new(), Vec::new(), 0);
    while Instant::now() < until {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let request = hyper::Request::post(url.path())
            .header(hyper::header::HOST, &authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body(&templates, cold, run, i)))
            .unwrap();
        let sent = Instant::now();
        let (ok, overhead) = match sender.send_request(request).await {
            Ok(reply) => {
                let status = reply.status();
                let overhead = overhead_us(reply.headers());
                (
                    reply.into_body().collect().await.is_ok() && status == 200,
                    overhead,
                )
            }
            Err(_) => (false, None),
        };
        if sent >= measure_from {
            latencies.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
            own.extend(overhead);
            errors += u64::from(!ok);
        }
        if !ok {
            break;
        }
    }
    (latencies, own, errors)
}

/// The service's own time in a reply, in µs.
fn overhead_us(headers: &hyper::HeaderMap) -> Option<u32> {
    let ms: f64 = headers
        .get("x-reactstep-overhead-ms")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some((ms * 1000.0).round() as u32)
}

/// The value at quantile `p` of sorted µs, in seconds.
fn quantile(sorted: &[u32], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .map_or(f64::NAN, |&us| f64::from(us) / 1e6)
}

/// CPU time in clock ticks (user and system) of a process and of each of its live threads.
struct ThreadTimes {
    process: u64,
    threads: std::collections::HashMap<String, (String, u64)>,
}

impl ThreadTimes {
    fn now(pid: u32) -> Self {
        let read = |path: String| std::fs::read_to_string(path).ok();
        let process = read(format!("/proc/{pid}/stat"))
            .and_then(|s| compare::stat_ticks(&s))
            .map_or(0, |(_, ticks)| ticks);
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|task| {
                let tid = task.file_name().to_string_lossy().into_owned();
                let stat = read(format!("/proc/{pid}/task/{tid}/stat"))?;
                Some((tid, compare::stat_ticks(&stat)?))
            })
            .collect();
        Self { process, threads }
    }

    /// Seconds of CPU since `before`: the process's, and its busiest thread's with its name.
    fn since(&self, before: &Self) -> (f64, f64, String) {
        // SAFETY: sysconf only reads a constant of the system.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let busiest = self
            .threads
            .iter()
            .filter_map(|(tid, (name, ticks))| {
                let was = before.threads.get(tid)?.1;
                Some((ticks.saturating_sub(was), name.clone()))
            })
            .max()
            .unwrap_or_default();
        let seconds = |ticks: u64| ticks as f64 / per_second;
        (
            seconds(self.process.saturating_sub(before.process)),
            seconds(busiest.0),
            busiest.1,
        )
    }
}

/// The CPU `pid` spends from `from` to `until`: its seconds, its busiest thread's and that
/// thread's name.
async fn watch(pid: u32, (from, until): (Instant, Instant)) -> (f64, f64, String) {
    tokio::time::sleep_until(from.into()).await;
    let before = ThreadTimes::now(pid);
    tokio::time::sleep_until(until.into()).await;
    ThreadTimes::now(pid).since(&before)
}

/// `drive`: prints one JSON line of figures; with the target's `pid`, what it spent in CPU.
pub async fn drive(url: &str, kind: &str, seconds: u64, concurrency: u64, pid: Option<u32>) {
    let cold = kind == "cold";
    let templates = Arc::new(templates(cold));
    let url: Arc<hyper::Uri> = Arc::new(url.parse().unwrap());
    let next = Arc::new(AtomicU64::new(0));
    let run = fastrand::u64(..) >> 16;
    let start = Instant::now();
    let window = (
        start + WARM_UP,
        start + WARM_UP + Duration::from_secs(seconds),
    );
    let watcher = pid.map(|pid| tokio::spawn(watch(pid, window)));
    let loops: Vec<_> = (0..concurrency)
        .map(|_| {
            let (url, next, templates) = (url.clone(), next.clone(), templates.clone());
            tokio::spawn(connection(url, next, templates, cold, run, window))
        })
        .collect();
    let (mut latencies, mut own, mut errors) = (Vec::new(), Vec::new(), 0);
    for handle in loops {
        let (l, o, e) = handle.await.unwrap();
        latencies.extend(l);
        own.extend(o);
        errors += e;
    }
    latencies.sort_unstable();
    own.sort_unstable();
    let at = |p: f64| quantile(&latencies, p);
    let measured = (Instant::now() - window.0).as_secs_f64();
    let (cpu, busiest, thread) = match watcher {
        Some(watcher) => watcher.await.unwrap(),
        None => (f64::NAN, f64::NAN, String::new()),
    };
    let line = json!({
        "requests": latencies.len(), "errors": errors,
        "rps": latencies.len() as f64 / measured,
        "p50": at(0.5), "p90": at(0.9), "p99": at(0.99),
        "own_p50": quantile(&own, 0.5), "own_p99": quantile(&own, 0.99),
        "cpu_s": cpu, "busiest_s": busiest, "busiest_thread": thread,
        "window_s": seconds as f64,
    });
    println!("{line}");
}

/// `tokenizer-pass`: one pass of `o200k_base` over a cold request's new text, the median over
/// 128 requests, and the text's size; one JSON line.
pub fn tokenizer_pass() {
    use reactstep::step::context::tokens::{count_uncached, Encoding};
    let templates = templates(true);
    let _ = count_uncached(Encoding::O200kBase, "build the encoder first");
    let mut times = Vec::new();
    let (mut bytes, mut texts_per_request) = (0, 0);
    for i in 0..128 {
        let texts = new_texts(&body(&templates, true, 1, i));
        bytes = texts.iter().map(String::len).sum::<usize>();
        texts_per_request = texts.len();
        let started = Instant::now();
        let tokens: usize = texts
            .iter()
            .map(|t| count_uncached(Encoding::O200kBase, t))
            .sum();
        times.push(started.elapsed());
        std::hint::black_box(tokens);
    }
    times.sort_unstable();
    let line = json!({"bytes": bytes, "texts": texts_per_request, "median_s": times[times.len() / 2].as_secs_f64()});
    println!("{line}");
}

// ---------------------------------------------------------------------------------------------
// The orchestrator

/// CPUs for one core count: the target's, the mock upstream's and the generator's.
struct Layout {
    cores: usize,
    target: Vec<usize>,
    mock: Vec<usize>,
    generator: Vec<usize>,
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled in by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: the set is as big as the size given.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Which CPUs share a physical core, as the kernel tells it: a target whose CPUs share cores
/// with the helpers' runs slower per request than one on cores of its own.
fn siblings(cpus: &[usize]) -> String {
    let mut groups: Vec<String> = cpus
        .iter()
        .filter_map(|cpu| {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
            Some(std::fs::read_to_string(path).ok()?.trim().to_string())
        })
        .collect();
    groups.sort();
    groups.dedup();
    if groups.is_empty() {
        "CPUs sharing a physical core: not told by this kernel".into()
    } else {
        format!("CPUs sharing a physical core: {}", groups.join(" · "))
    }
}

/// The layout of each core count that fits, and a line for each that does not. Helpers get up
/// to 4 cores each; with one core left for both, they share it (and the line says so).
fn layouts(cpus: &[usize]) -> (Vec<Layout>, Vec<String>) {
    let (mut fit, mut notes) = (Vec::new(), Vec::new());
    for cores in core_counts() {
        let rest = cpus.len().saturating_sub(cores);
        if rest == 0 {
            notes.push(format!(
                "{cores} cores: skipped, {} CPUs leave none for the mock upstream and the load generator",
                cpus.len()
            ));
            continue;
        }
        let target = cpus[..cores].to_vec();
        let helpers = &cpus[cores..];
        let (mock, generator) = if helpers.len() == 1 {
            notes.push(format!(
                "{cores} cores: the mock upstream and the load generator share CPU {}",
                helpers[0]
            ));
            (helpers.to_vec(), helpers.to_vec())
        } else {
            let mock = (helpers.len() / 2).min(4);
            let generator = (helpers.len() - mock).min(4);
            (
                helpers[..mock].to_vec(),
                helpers[mock..mock + generator].to_vec(),
            )
        };
        fit.push(Layout {
            cores,
            target,
            mock,
            generator,
        });
    }
    (fit, notes)
}

/// This binary with a subcommand, pinned to `cpus`; its first line of output read.
fn pinned(
    cpus: &[usize],
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
) -> (Process, String) {
    let mut command = compare::command("taskset");
    command.arg("-c").arg(list(cpus)).arg(program).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("taskset: {e} (util-linux)"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (Process::from(child), line.trim().to_string())
}

/// How busy a target's process was over a point's window (its CPU per request is in the
/// point's `Figures`).
struct Spent {
    /// CPU seconds per second: how many of its cores it kept busy.
    cores_busy: f64,
    /// The busiest thread's CPU seconds per second, and its name.
    busiest: f64,
    thread: String,
}

/// One point from the line `drive` printed.
fn point(line: &str) -> (Figures, Spent) {
    let v: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("drive said {line:?}: {e}"));
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let requests = v["requests"].as_u64().unwrap_or(0);
    let figures = Figures {
        rps: f("rps"),
        p50: f("p50"),
        p90: f("p90"),
        p99: f("p99"),
        errors: v["errors"].as_u64().unwrap_or(0),
        requests,
        own_p50: f("own_p50"),
        own_p99: f("own_p99"),
        cpu_us: f("cpu_s") * 1e6 / requests.max(1) as f64,
        ..Figures::default()
    };
    let spent = Spent {
        cores_busy: f("cpu_s") / f("window_s"),
        busiest: f("busiest_s") / f("window_s"),
        thread: v["busiest_thread"].as_str().unwrap_or("").to_string(),
    };
    (figures, spent)
}

/// The core counts measured: those of `SWEEP_CORES` (comma-separated) among 1, 2, 4 and 8, else
/// all four. `SWEEP_CORES=1,8` gives the two points the scaling target compares, in half the
/// time, so that one lent machine can repeat them more often.
fn core_counts() -> Vec<usize> {
    let asked = std::env::var("SWEEP_CORES").unwrap_or_default();
    let asked: Vec<usize> = asked
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let chosen: Vec<usize> = CORE_COUNTS
        .into_iter()
        .filter(|n| asked.contains(n))
        .collect();
    if chosen.is_empty() {
        CORE_COUNTS.to_vec()
    } else {
        chosen
    }
}

/// The bodies measured: `SWEEP_BODIES` (`warm`, `cold` or both, comma-separated), else both.
fn bodies() -> Vec<&'static str> {
    let asked = std::env::var("SWEEP_BODIES").unwrap_or_default();
    let asked: Vec<&str> = asked.split(',').map(str::trim).collect();
    let chosen: Vec<_> = ["warm", "cold"]
        .into_iter()
        .filter(|kind| asked.contains(kind))
        .collect();
    if chosen.is_empty() {
        vec!["warm", "cold"]
    } else {
        chosen
    }
}

/// Every point of one target (served by `pid`) on one layout: body × concurrency.
fn points(layout: &Layout, url: &str, pid: u32, seconds: u64) -> Vec<(Figures, Spent)> {
    let exe = std::env::current_exe().unwrap();
    let mut out = Vec::new();
    for kind in bodies() {
        for c in CONCURRENCIES {
            eprintln!("{} cores, {url}, {kind}, c={c}", layout.cores);
            let (seconds, c, pid) = (seconds.to_string(), c.to_string(), pid.to_string());
            let args = ["drive", url, kind, &seconds, &c, &pid];
            let (_child, line) = pinned(&layout.generator, &exe, &args, &[]);
            out.push(point(&line));
        }
    }
    out
}

type Points = Vec<(Figures, Spent)>;

/// The pass-through's and the service's points on one layout.
async fn measure(layout: &Layout, seconds: u64) -> (Points, Points) {
    let exe = std::env::current_exe().unwrap();
    let client = reqwest::Client::new();
    let (_mock, mock_port) = pinned(&layout.mock, &exe, &["mock-upstream"], &[]);
    let mock_url = format!("http://127.0.0.1:{mock_port}");
    let (pass, port) = pinned(&layout.target, &exe, &["pass-through", &mock_url], &[]);
    let url = format!("http://127.0.0.1:{port}/api/agent/react_step");
    let check = |url: String| {
        let client = client.clone();
        async move {
            let body = body(&templates(false), false, 0, 0);
            let reply = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(
                reply.status(),
                200,
                "{url}: {}",
                reply.text().await.unwrap_or_default()
            );
        }
    };
    check(url.clone()).await;
    let pass_points = points(layout, &url, pass.id(), seconds);
    drop(pass);

    let port = compare::free_port();
    let mut env = vec![
        ("REACTSTEP_BIND", format!("127.0.0.1:{port}")),
        ("REACTSTEP_OPENAI_BASE_URL", format!("{mock_url}/v1")),
        ("REACTSTEP_WORKERS", layout.cores.to_string()),
    ];
    env.extend(service_preload().map(|lib| ("LD_PRELOAD", lib)));
    let binary = compare::release_binary();
    let service = pinned_silent(&layout.target, &binary, &env);
    compare::wait_ready(&client, port).await;
    let url = format!("http://127.0.0.1:{port}/api/agent/react_step");
    check(url.clone()).await;
    let service_points = points(layout, &url, service.id(), seconds);
    drop(service);
    (pass_points, service_points)
}

/// The library the service alone is started with preloaded (`SWEEP_SERVICE_PRELOAD`), if any.
fn service_preload() -> Option<String> {
    std::env::var("SWEEP_SERVICE_PRELOAD")
        .ok()
        .filter(|lib| !lib.is_empty())
}

/// The service, pinned, its output thrown away (it says nothing on stdout to wait for).
fn pinned_silent(cpus: &[usize], binary: &std::path::Path, env: &[(&str, String)]) -> Process {
    let mut command = compare::command("taskset");
    command.arg("-c").arg(list(cpus)).arg(binary);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("taskset {}: {e}", binary.display()));
    Process::from(child)
}

/// The whole sweep. Call from the main thread (see `compare::command`).
pub async fn run(seconds: u64) {
    let cpus = allowed_cpus();
    let (fit, notes) = layouts(&cpus);
    let exe = std::env::current_exe().unwrap();
    let first = fit.first().map_or(vec![cpus[0]], |l| l.target.clone());
    let (_t, pass_line) = pinned(&first[..1], &exe, &["tokenizer-pass"], &[]);
    let pass: Value = serde_json::from_str(&pass_line).unwrap();
    let started = Instant::now();
    let mut rows = Vec::new();
    for layout in &fit {
        rows.push(measure(layout, seconds).await);
    }
    let mut out = std::io::stdout().lock();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "command: scripts/load.sh {}", args.join(" "));
    let _ = writeln!(
        out,
        "CPUs: {} ({}); load average after: {}; {} s in all; each point {seconds} s after a {} ms warm-up, load generator `load drive` (closed loop, keep-alive)",
        cpus.len(),
        list(&cpus),
        compare::load_average(),
        started.elapsed().as_secs(),
        WARM_UP.as_millis()
    );
    for layout in &fit {
        let _ = writeln!(
            out,
            "{} cores: `taskset -c {}` for the target (REACTSTEP_WORKERS={}), mock upstream on {}, load generator on {}",
            layout.cores, list(&layout.target), layout.cores, list(&layout.mock), list(&layout.generator)
        );
    }
    for note in &notes {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(out, "{}", siblings(&cpus));
    let _ = writeln!(
        out,
        "one tokenizer pass (o200k_base, no cache) over a cold request's new text ({} bytes in {} texts: its 3 files and its observations): {}",
        pass["bytes"],
        pass["texts"],
        compare::ms(pass["median_s"].as_f64().unwrap_or(f64::NAN))
    );
    if let Some(lib) = service_preload() {
        let _ = writeln!(out, "the service alone started with LD_PRELOAD={lib}");
    }
    let _ = writeln!(out);
    write_table(&mut out, &fit, &rows);
}

/// One row per point: latency and throughput against the pass-through, what the service told,
/// and what each process spent.
fn write_table(out: &mut impl Write, fit: &[Layout], rows: &[(Points, Points)]) {
    let _ = writeln!(out, "| cores | body | c | pass-through req/s | p50 | p99 | reactstep req/s | p50 | p99 | ÷ pass-through | added p50 | added p99 | told p50 | told p99 | errors | pass-through CPU µs/req | cores busy | reactstep CPU µs/step | cores busy | busiest thread |");
    let _ = writeln!(out, "{}|", "|---".repeat(20));
    for (layout, (pass, service)) in fit.iter().zip(rows) {
        let kinds = bodies()
            .into_iter()
            .flat_map(|k| CONCURRENCIES.iter().map(move |c| (k, c)));
        for ((kind, c), ((p, pc), (s, sc))) in kinds.zip(pass.iter().zip(service)) {
            let _ = writeln!(
                out,
                "| {} | {kind} | {c} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2}× | {} | {} | {} | {} | {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} % ({}) |",
                layout.cores,
                p.rps,
                compare::ms(p.p50),
                compare::ms(p.p99),
                s.rps,
                compare::ms(s.p50),
                compare::ms(s.p99),
                s.rps / p.rps,
                compare::added(s.p50 - p.p50),
                compare::added(s.p99 - p.p99),
                compare::ms(s.own_p50),
                compare::ms(s.own_p99),
                p.errors + s.errors,
                p.cpu_us,
                pc.cores_busy,
                s.cpu_us,
                sc.cores_busy,
                sc.busiest * 100.0,
                sc.thread,
            );
        }
    }
}
