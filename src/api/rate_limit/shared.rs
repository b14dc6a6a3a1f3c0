//! Buckets in Redis, shared by every replica: one atomic script per check (GCRA on Redis's own
//! clock, so replicas whose clocks differ still agree), over a few multiplexed connections taken
//! in turn. Each carries any number of checks at once (pipelined), and reconnects by itself.
//! They are opened at start, not by the first steps, and live on the runtime that started the
//! server, so that they close only after the last step has finished.
//!
//! Redis that fails or does not answer within the timeout makes the check "unanswered": the
//! request passes (fail open) or is refused (fail closed), a warning is logged and a metric
//! counts it. For a second after a failure Redis is not asked at all, so that an outage costs
//! no request a timeout; then the next check tries again, and the limits work again by
//! themselves once Redis is back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use tokio::runtime::Handle;

use super::refusal::Refusal;

/// How long Redis is left alone after a failure.
const BACKOFF: Duration = Duration::from_secs(1);
/// Connections a replica keeps; each one multiplexes many checks.
const CONNECTIONS: usize = 4;

/// KEYS[1]: the bucket. ARGV[1]: microseconds between requests at the steady rate; ARGV[2]: the
/// burst. The bucket holds the theoretical arrival time (TAT) of the next request. Answers 0
/// when the request passes (and moves the TAT on), otherwise the microseconds until it would.
const GCRA: &str = r"
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed_at = tat + interval - burst * interval
if allowed_at > now then return allowed_at - now end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', next_tat),
           'PX', math.ceil((next_tat - now) / 1000))
return 0
";

/// What the operator set: `REACTSTEP_REDIS_URL` and the rest.
pub struct SharedSettings {
    /// May hold a password: never logged.
    pub url: String,
    pub fail_open: bool,
    /// Longest wait for one check's answer.
    pub timeout: Duration,
    /// Put before every key, so that several services can share one Redis.
    pub key_prefix: String,
}

pub struct SharedLimits {
    connections: Vec<ConnectionManager>,
    next: AtomicUsize,
    script: Arc<Script>,
    fail_open: bool,
    timeout: Duration,
    key_prefix: String,
    health: Arc<Health>,
    /// The runtime that made the connections, where every exchange with Redis runs: the one
    /// that started the server (`main`'s), which outlives every worker. Run in a worker's, a
    /// connection would die with that worker at shutdown while another still checks steps.
    runtime: Handle,
}

/// Whether Redis answers, shared with the task that connects at start.
struct Health {
    fail_open: bool,
    /// Since when Redis has been failing, and when to ask it again; `None` while it answers.
    outage: Mutex<Option<Outage>>,
    /// Whether `outage` is set: read without the lock on every check.
    failing: AtomicBool,
    /// Whether Redis has answered once since start.
    answered_once: AtomicBool,
}

#[derive(Clone, Copy)]
struct Outage {
    since: Instant,
    ask_again_at: Instant,
}

impl SharedLimits {
    /// Parses the URL and starts connecting every connection at once, in the background (again
    /// each [`BACKOFF`] until Redis answers): a service whose Redis is down still starts, fails
    /// open or closed, and is not [`ready`](Self::ready) when it fails closed. Needs the Tokio
    /// runtime that will outlive the server.
    pub fn new(settings: SharedSettings) -> Result<Self, String> {
        let runtime = Handle::try_current()
            .map_err(|_| "the shared rate limiter needs a Tokio runtime".to_string())?;
        // The redis crate's parse errors do not repeat the URL, so the message is safe to show.
        let client = redis::Client::open(settings.url.as_str())
            .map_err(|e| format!("REACTSTEP_REDIS_URL is not a Redis URL: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            // A check never waits for a reconnection: it fails, and the next one finds it done.
            .set_number_of_retries(1);
        let connections: Vec<ConnectionManager> = (0..CONNECTIONS)
            .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot set up the Redis connections: {e}"))?;
        let limits = Self {
            connections,
            next: AtomicUsize::new(0),
            script: Arc::new(Script::new(GCRA)),
            fail_open: settings.fail_open,
            timeout: settings.timeout,
            key_prefix: settings.key_prefix,
            health: Arc::new(Health {
                fail_open: settings.fail_open,
                outage: Mutex::new(None),
                failing: AtomicBool::new(false),
                answered_once: AtomicBool::new(false),
            }),
            runtime,
        };
        limits.runtime.spawn(connect_all(
            limits.connections.clone(),
            limits.script.clone(),
            limits.timeout,
            limits.health.clone(),
        ));
        Ok(limits)
    }

    /// Whether steps can be served: always when failing open; failing closed, once Redis has
    /// answered (a later outage does not change it: every replica shares it, and each answers
    /// a documented 503 meanwhile).
    pub fn ready(&self) -> bool {
        self.fail_open || self.health.answered_once.load(Ordering::Acquire)
    }

    /// Counts one request against `kind:id`'s bucket of `per_minute` (0: no limit).
    pub async fn check(&self, kind: &str, id: &str, per_minute: u32) -> Result<(), Refusal> {
        if per_minute == 0 {
            return Ok(());
        }
        if self.health.resting() {
            return self.unanswered();
        }
        let key = format!("{}{kind}:{id}", self.key_prefix);
        let ask = tokio::time::timeout(self.timeout, self.ask(key, per_minute));
        match self.runtime.spawn(ask).await {
            Ok(Ok(Ok(wait_micros))) => {
                self.health.answered();
                match wait_micros {
                    0 => Ok(()),
                    micros => Err(Refusal::Wait(Duration::from_micros(micros))),
                }
            }
            Ok(Ok(Err(error))) => {
                self.health.failed(&error);
                self.unanswered()
            }
            Ok(Err(_)) => {
                self.health
                    .failed(&format!("no answer within {:?}", self.timeout));
                self.unanswered()
            }
            Err(_) => {
                self.health.failed("the limiter's runtime has stopped");
                self.unanswered()
            }
        }
    }

    /// The check, owning all it needs, to run on the limiter's runtime.
    fn ask(
        &self,
        key: String,
        per_minute: u32,
    ) -> impl Future<Output = Result<u64, String>> + Send + 'static {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let mut connection = self.connections[turn].clone();
        let script = self.script.clone();
        let interval_micros = (60_000_000 / u64::from(per_minute)).max(1);
        async move {
            script
                .key(key)
                .arg(interval_micros)
                .arg(per_minute)
                .invoke_async(&mut connection)
                .await
                .map_err(|e| e.to_string())
        }
    }

    /// The operator's choice for a check Redis did not answer, counted.
    fn unanswered(&self) -> Result<(), Refusal> {
        let kind = if self.fail_open {
            "admitted"
        } else {
            "refused"
        };
        crate::telemetry::metrics::Metrics::count(
            &crate::telemetry::metrics::global().rate_limiter_unanswered,
            kind,
            1,
        );
        if self.fail_open {
            Ok(())
        } else {
            Err(Refusal::Unavailable)
        }
    }
}

/// Connects every connection and loads the script into Redis, again each [`BACKOFF`] until
/// all have answered: the first steps then find them open.
async fn connect_all(
    connections: Vec<ConnectionManager>,
    script: Arc<Script>,
    timeout: Duration,
    health: Arc<Health>,
) {
    loop {
        let mut outcome = Ok(());
        for connection in &connections {
            let mut connection = connection.clone();
            outcome = match tokio::time::timeout(timeout, script.load_async(&mut connection)).await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            };
            if outcome.is_err() {
                break;
            }
        }
        match outcome {
            Ok(()) => {
                health.answered();
                tracing::info!("the shared rate limiter (Redis) is connected");
                return;
            }
            Err(error) => {
                health.failed(&error);
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

impl Health {
    /// Whether Redis failed less than [`BACKOFF`] ago.
    fn resting(&self) -> bool {
        if !self.failing.load(Ordering::Acquire) {
            return false;
        }
        self.outage
            .lock()
            .map(|o| o.is_some_and(|o| Instant::now() < o.ask_again_at))
            .unwrap_or(false)
    }

    fn failed(&self, error: &str) {
        let now = Instant::now();
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        let since = outage.map_or(now, |o| o.since);
        *outage = Some(Outage {
            since,
            ask_again_at: now + BACKOFF,
        });
        self.failing.store(true, Ordering::Release);
        let then = if self.fail_open {
            "letting requests through"
        } else {
            "refusing requests"
        };
        tracing::warn!(
            error,
            failing_for_secs = since.elapsed().as_secs(),
            "the shared rate limiter (Redis) did not answer: {then} until it does"
        );
    }

    fn answered(&self) {
        if !self.answered_once.load(Ordering::Relaxed) {
            self.answered_once.store(true, Ordering::Release);
        }
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        self.failing.store(false, Ordering::Release);
        if let Some(was) = outage.take() {
            tracing::info!(
                down_for_secs = was.since.elapsed().as_secs(),
                "the shared rate limiter (Redis) answers again"
            );
        }
    }
}
