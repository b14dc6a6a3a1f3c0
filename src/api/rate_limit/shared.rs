//! Buckets in Redis, shared by every replica: one atomic script per check (GCRA on Redis's own
//! clock, so replicas whose clocks differ still agree), over a few multiplexed connections taken
//! in turn. Each carries any number of checks at once (pipelined), and reconnects by itself.
//!
//! Redis that fails or does not answer within the timeout makes the check "unanswered": the
//! request passes (fail open) or is refused (fail closed), a warning is logged and a metric
//! counts it. For a second after a failure Redis is not asked at all, so that an outage costs
//! no request a timeout; then the next check tries again, and the limits work again by
//! themselves once Redis is back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::Refusal;

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
    script: Script,
    fail_open: bool,
    timeout: Duration,
    key_prefix: String,
    /// Since when Redis has been failing, and when to ask it again; `None` while it answers.
    outage: Mutex<Option<Outage>>,
    /// Whether `outage` is set: read without the lock on every check.
    failing: AtomicBool,
}

#[derive(Clone, Copy)]
struct Outage {
    since: Instant,
    ask_again_at: Instant,
}

impl SharedLimits {
    /// Parses the URL; no connection is made until the first check, so a service whose Redis
    /// is down still starts (and fails open or closed). Needs a Tokio runtime, where the
    /// connections will reconnect.
    pub fn new(settings: SharedSettings) -> Result<Self, String> {
        // The redis crate's parse errors do not repeat the URL, so the message is safe to show.
        let client = redis::Client::open(settings.url.as_str())
            .map_err(|e| format!("REACTSTEP_REDIS_URL is not a Redis URL: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            // A check never waits for a reconnection: it fails, and the next one finds it done.
            .set_number_of_retries(1);
        let connections = (0..CONNECTIONS)
            .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot set up the Redis connections: {e}"))?;
        Ok(Self {
            connections,
            next: AtomicUsize::new(0),
            script: Script::new(GCRA),
            fail_open: settings.fail_open,
            timeout: settings.timeout,
            key_prefix: settings.key_prefix,
            outage: Mutex::new(None),
            failing: AtomicBool::new(false),
        })
    }

    /// Counts one request against `kind:id`'s bucket of `per_minute` (0: no limit).
    pub async fn check(&self, kind: &str, id: &str, per_minute: u32) -> Result<(), Refusal> {
        if per_minute == 0 {
            return Ok(());
        }
        if self.resting() {
            return self.unanswered();
        }
        let key = format!("{}{kind}:{id}", self.key_prefix);
        match tokio::time::timeout(self.timeout, self.ask(&key, per_minute)).await {
            Ok(Ok(wait_micros)) => {
                self.answered();
                match wait_micros {
                    0 => Ok(()),
                    micros => Err(Refusal::Wait(Duration::from_micros(micros))),
                }
            }
            Ok(Err(error)) => {
                self.failed(&error);
                self.unanswered()
            }
            Err(_) => {
                self.failed(&format!("no answer within {:?}", self.timeout));
                self.unanswered()
            }
        }
    }

    async fn ask(&self, key: &str, per_minute: u32) -> Result<u64, String> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let mut connection = self.connections[turn].clone();
        let interval_micros = (60_000_000 / u64::from(per_minute)).max(1);
        self.script
            .key(key)
            .arg(interval_micros)
            .arg(per_minute)
            .invoke_async(&mut connection)
            .await
            .map_err(|e| e.to_string())
    }

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

    /// The operator's choice for a check Redis did not answer, counted.
    fn unanswered(&self) -> Result<(), Refusal> {
        let kind = if self.fail_open {
            "admitted"
        } else {
            "refused"
        };
        crate::metrics::Metrics::count(&crate::metrics::global().rate_limiter_unanswered, kind, 1);
        if self.fail_open {
            Ok(())
        } else {
            Err(Refusal::Unavailable)
        }
    }
}
