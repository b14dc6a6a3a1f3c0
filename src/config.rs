//! Every setting of the service: a command-line flag and a `REACTSTEP_*` environment variable,
//! with defaults in code so that `cargo run --release` needs no configuration at all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

pub use crate::telemetry::logs::LogFormat;

/// Operator bearer tokens: parsed from a comma-separated list, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiTokens(pub Vec<String>);

impl std::fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiTokens({} set)", self.0.len())
    }
}

impl std::str::FromStr for ApiTokens {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let tokens: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        // A list that parses to nothing (`""`, `","`, spaces) is a mistake, not a wish to turn
        // authentication off: that is done by leaving the setting unset.
        if tokens.is_empty() {
            return Err("the list holds no token; leave REACTSTEP_API_TOKENS unset to run without authentication".into());
        }
        if tokens.iter().any(|t| t.len() < 16) {
            return Err("each API token must be at least 16 characters".into());
        }
        Ok(Self(tokens))
    }
}

/// Reads `REACTSTEP_API_TOKENS` without quoting it back when it is refused: clap's own refusal
/// repeats the value, which is a list of secrets, on stderr (the container's log).
#[derive(Clone)]
pub struct ApiTokensParser;

impl clap::builder::TypedValueParser for ApiTokensParser {
    type Value = ApiTokens;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ApiTokens, clap::Error> {
        let refused = |why: &str| {
            let said = format!(
                "--api-tokens (REACTSTEP_API_TOKENS): {why} (the value is not shown: it holds secrets)\n"
            );
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, said).with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| refused("not UTF-8"))?;
        text.parse().map_err(|why: String| refused(&why))
    }
}

/// An origin as a browser sends it in `Origin`: `scheme://host[:port]`, nothing after it (a
/// trailing `/` never matches one), and not `*`. Editor webviews have schemes of their own
/// (`vscode-webview://…`).
fn cors_origin(text: &str) -> Result<String, String> {
    let origin = text.trim();
    if origin.is_empty() {
        return Ok(String::new());
    }
    let refused = || {
        format!("not an origin as a browser sends it: write scheme://host[:port], with nothing after it (for https://app.example.com/, https://app.example.com){}",
            if origin == "*" { "; * is not taken: name each origin" } else { "" })
    };
    let (scheme, rest) = origin.split_once("://").ok_or_else(refused)?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    let rest_ok = !rest.is_empty()
        && rest.chars().all(|c| c.is_ascii_graphic())
        && !rest.contains(['/', '?', '#', '@', '*', '\\']);
    let parsed = reqwest::Url::parse(origin).map_err(|_| refused())?;
    // A web origin as the browser writes it: lower case, no default port, IPv6 in its short
    // form, a domain in punycode. Other schemes (`vscode-webview://…`) have opaque origins.
    let web = matches!(parsed.scheme(), "http" | "https");
    if !(scheme_ok && rest_ok) || (web && parsed.origin().ascii_serialization() != origin) {
        return Err(refused());
    }
    Ok(origin.to_string())
}

/// `REACTSTEP_WORKERS`: 0 (one per core) up to actix's own most.
fn workers(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n <= MOST_WORKERS)
        .ok_or_else(|| format!("HTTP workers are 0 (one per CPU core) to {MOST_WORKERS}"))
}

/// The most HTTP workers actix-web runs.
const MOST_WORKERS: usize = 512;

/// Networks named in a setting: addresses or ranges (`10.0.0.1, 10.1.0.0/16, ::1`),
/// comma-separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networks(pub Vec<ipnet::IpNet>);

impl std::str::FromStr for Networks {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = match item.parse::<std::net::IpAddr>() {
                Ok(ip) => ipnet::IpNet::from(ip),
                Err(_) => item.parse::<ipnet::IpNet>().map_err(|_| {
                    format!("{item:?} is neither an IP address nor a range such as 10.0.0.0/8")
                })?,
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }
}

/// The Redis URL for shared rate limits: it may hold a password, so it is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(pub String);

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisUrl(set)")
    }
}

impl std::str::FromStr for RedisUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.trim().to_string()))
    }
}

/// reactstep: one ReAct step per request for IDE plugins.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "reactstep",
    version,
    about,
    long_about = None,
    after_help = "To drive a whole loop from the terminal: reactstep run --help"
)]
pub struct Config {
    /// Address and port to listen on.
    #[arg(long, env = "REACTSTEP_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Base URL of the OpenAI Chat Completions API (`/chat/completions` is appended).
    #[arg(
        long,
        env = "REACTSTEP_OPENAI_BASE_URL",
        default_value = crate::llm::Provider::OPENAI.facts().default_base_url
    )]
    pub openai_base_url: String,

    /// Base URL of the Anthropic Messages API (`/v1/messages` is appended).
    #[arg(
        long,
        env = "REACTSTEP_ANTHROPIC_BASE_URL",
        default_value = crate::llm::Provider::ANTHROPIC.facts().default_base_url
    )]
    pub anthropic_base_url: String,

    /// Base URL of the Ollama server (its native `/api/chat` is used; a trailing `/v1` is
    /// dropped).
    #[arg(
        long,
        env = "REACTSTEP_OLLAMA_BASE_URL",
        default_value = crate::llm::Provider::OLLAMA.facts().default_base_url
    )]
    pub ollama_base_url: String,

    /// Base URLs of the other providers, by provider name, from `REACTSTEP_<NAME>_BASE_URL`
    /// (`GET /api/providers` lists the names).
    #[arg(skip)]
    pub base_urls: std::collections::BTreeMap<String, String>,

    /// Whether the server stops on SIGINT, SIGTERM and SIGQUIT itself; off for a service run
    /// inside `reactstep run`, whose loop ends on them first (and saves what it did).
    #[arg(skip = true)]
    pub stops_on_signals: bool,

    /// Values of the variables providers take headers from (`REACTSTEP_OPENROUTER_REFERER`,
    /// `REACTSTEP_OPENROUTER_TITLE`), by variable.
    #[arg(skip)]
    pub provider_variables: std::collections::BTreeMap<String, String>,

    /// PEM file of certificate authorities to trust for upstream TLS besides the built-in web
    /// roots: a company's TLS-inspecting proxy, or a model server with a private CA.
    #[arg(long, env = "REACTSTEP_UPSTREAM_CA_FILE")]
    pub upstream_ca_file: Option<std::path::PathBuf>,

    /// Connection pools the upstream calls are spread over, in turn. Over HTTP/2 each holds one
    /// connection per provider, whose server limits the calls on it at once (often 100–256).
    #[arg(long, env = "REACTSTEP_UPSTREAM_POOLS", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub upstream_pools: u16,

    /// Seconds one upstream LLM call may take, from connect to the last byte.
    #[arg(long, env = "REACTSTEP_LLM_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub llm_timeout_secs: u64,

    /// Largest request body accepted, in bytes; larger bodies get 413.
    #[arg(long, env = "REACTSTEP_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..=1024 * 1024 * 1024))]
    pub max_body_bytes: u64,

    /// MiB of request bodies and upstream replies held at once, across all requests; past it new
    /// work gets 503 `overloaded` (retry after 1 s). Unset: a sixth of the container's memory
    /// limit (cgroup `memory.max`), or 256 MiB outside a limited container.
    #[arg(long, env = "REACTSTEP_MEMORY_BUDGET_MIB",
          value_parser = clap::value_parser!(u64).range(1..=1024 * 1024))]
    pub memory_budget_mib: Option<u64>,

    /// Log line format.
    #[arg(long, env = "REACTSTEP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// OpenTelemetry collector to export each request's trace to, over OTLP/HTTP with protobuf:
    /// its base URL (`http://127.0.0.1:4318`; `/v1/traces` is added). Unset, nothing is traced;
    /// the standard `OTEL_*` variables (headers, timeout, sampler, service name) apply.
    #[arg(long, env = "REACTSTEP_OTLP_ENDPOINT", hide_env_values = true)]
    pub otlp_endpoint: Option<String>,

    /// Whether requests may carry `mock_response` (the model's output given by the client).
    #[arg(long, env = "REACTSTEP_ALLOW_MOCK_RESPONSE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub allow_mock_response: bool,

    /// Folder holding one sub-folder per project_id, from which context named without content
    /// is read (off when unset).
    #[arg(long, env = "REACTSTEP_WORKSPACE_ROOT")]
    pub workspace_root: Option<std::path::PathBuf>,

    /// Largest file read from the workspace, in bytes; larger files are reported unresolved.
    #[arg(long, env = "REACTSTEP_WORKSPACE_MAX_FILE_BYTES", default_value_t = 1024 * 1024)]
    pub workspace_max_file_bytes: u64,

    /// Percent added to token counts for models with no public tokenizer (Claude, local
    /// models), for every such model; unset, each model family gets its calibrated margin.
    #[arg(long, env = "REACTSTEP_APPROXIMATION_MARGIN_PERCENT",
          value_parser = clap::value_parser!(u32).range(0..=200))]
    pub approximation_margin_percent: Option<u32>,

    /// Seconds one step may take in all: every upstream attempt and every wait between them.
    #[arg(long, env = "REACTSTEP_STEP_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub step_timeout_secs: u64,

    /// Retries of an upstream call that failed in a way another attempt can fix.
    #[arg(long, env = "REACTSTEP_RETRIES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=10))]
    pub retries: u32,

    /// Base of the exponential backoff between retries, in milliseconds.
    #[arg(long, env = "REACTSTEP_RETRY_BASE_MS", default_value_t = 500)]
    pub retry_base_ms: u64,

    /// Longest wait between retries (also caps a provider's Retry-After), in milliseconds.
    #[arg(long, env = "REACTSTEP_RETRY_CAP_MS", default_value_t = 8000)]
    pub retry_cap_ms: u64,

    /// MiB of token counts remembered across steps (least recently used dropped first); 0 turns
    /// the cache off.
    #[arg(long, env = "REACTSTEP_TOKEN_CACHE_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub token_cache_mib: u64,

    /// JSON price table, `{"<model>": {"input": …, "cached_input": …, "cache_write": …,
    /// "output": …}}` in US dollars per million tokens, by model name exactly as requested:
    /// responses then carry `usage.cost_usd`. A file that is not exactly right stops start-up.
    #[arg(long, env = "REACTSTEP_PRICES_FILE")]
    pub prices_file: Option<std::path::PathBuf>,

    /// Seconds between heartbeat comments on a quiet event stream.
    #[arg(long, env = "REACTSTEP_STREAM_HEARTBEAT_SECS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub stream_heartbeat_secs: u64,

    /// Bearer tokens a client must present (`Authorization: Bearer …`) on the API endpoints,
    /// comma-separated; unset means no operator authentication, and a list that holds no token
    /// is refused.
    #[arg(long, env = "REACTSTEP_API_TOKENS", hide_env_values = true,
          value_parser = ApiTokensParser)]
    pub api_tokens: Option<ApiTokens>,

    /// Base URLs a request may send its LLM call to (`llm_config.base_url`), comma-separated;
    /// none by default, so no request can choose where the service connects.
    #[arg(long, env = "REACTSTEP_ALLOWED_BASE_URLS", value_delimiter = ',')]
    pub allowed_base_urls: Vec<String>,

    /// Origins allowed to call the API from a browser (editor webviews), comma-separated; none
    /// by default.
    #[arg(long, env = "REACTSTEP_CORS_ORIGINS", value_delimiter = ',', value_parser = cors_origin)]
    pub cors_origins: Vec<String>,

    /// Seconds in-flight requests get to finish after SIGTERM or SIGINT, while no new ones are
    /// accepted: at most a day (a larger figure overflowed the clock when a signal came).
    #[arg(long, env = "REACTSTEP_SHUTDOWN_GRACE_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub shutdown_grace_secs: u64,

    /// Requests per minute one client address may make (with a burst of as many); 0 = no limit.
    #[arg(long, env = "REACTSTEP_RATE_LIMIT_PER_CLIENT", default_value_t = 0)]
    pub rate_limit_per_client: u32,

    /// Requests per minute one `session_id` may make (with a burst of as many); 0 = no limit.
    #[arg(long, env = "REACTSTEP_RATE_LIMIT_PER_SESSION", default_value_t = 0)]
    pub rate_limit_per_session: u32,

    /// How many leading bits (1 to 128) of an IPv6 client's address the per-client limit counts
    /// by: 64 counts a host's whole /64, whose addresses it can rotate through; 128 counts each
    /// address on its own. IPv4-mapped addresses count as their IPv4 address.
    #[arg(long, env = "REACTSTEP_RATE_LIMIT_IPV6_PREFIX", default_value_t = 64,
          value_parser = clap::value_parser!(u8).range(1..=128))]
    pub rate_limit_ipv6_prefix: u8,

    /// Proxies (addresses or ranges, comma-separated) whose `X-Forwarded-For` names the client
    /// for the per-client rate limit; none by default, so the connection's address is used.
    #[arg(long, env = "REACTSTEP_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: Networks,

    /// A Redis server (`redis://[:password@]host:port[/db]`; TLS is not built in) holding the
    /// rate limits for every replica that names it; unset, each process keeps its own.
    #[arg(long, env = "REACTSTEP_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<RedisUrl>,

    /// When Redis does not answer a rate-limit check: let the request through (true, with a
    /// warning and the `reactstep_rate_limiter_unanswered` metric) or refuse it with 503
    /// `rate_limiter_unavailable` (false).
    #[arg(long, env = "REACTSTEP_REDIS_FAIL_OPEN", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub redis_fail_open: bool,

    /// Milliseconds one rate-limit check may wait for Redis before it counts as unanswered.
    #[arg(long, env = "REACTSTEP_REDIS_TIMEOUT_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_timeout_ms: u64,

    /// Put before every rate-limit key in Redis, so that several services can share one server.
    #[arg(
        long,
        env = "REACTSTEP_REDIS_KEY_PREFIX",
        default_value = "reactstep:ratelimit:"
    )]
    pub redis_key_prefix: String,

    /// Seconds a client has to send a request: its body must arrive whole within this long of
    /// the handler starting to read it (408 `request_timeout` otherwise), and its head within this
    /// long or 5 s, whichever is less.
    #[arg(long, env = "REACTSTEP_CLIENT_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub client_timeout_secs: u64,

    /// Steps in flight at once, past which a step gets 503 `at_capacity`; 0 (the default) means
    /// as many as the file descriptor limit allows, and a larger figure is cut to that.
    #[arg(long, env = "REACTSTEP_MAX_STEPS_IN_FLIGHT", default_value_t = 0)]
    pub max_steps_in_flight: usize,

    /// HTTP worker threads; 0 means one per CPU core (at most 512).
    #[arg(long, env = "REACTSTEP_WORKERS", default_value_t = 0, value_parser = workers)]
    pub workers: usize,
}

impl Config {
    /// Bytes of bodies and replies the process may hold at once.
    pub fn memory_budget_bytes(&self) -> usize {
        self.memory_budget_mib
            .map_or_else(crate::runtime::memory_budget::default_limit, |mib| {
                usize::try_from(mib * 1024 * 1024).unwrap_or(usize::MAX)
            })
    }

    /// The defaults, as `reactstep` with no flags and no environment would use them: read from
    /// the flags' definitions above, the one place they are written.
    pub fn defaults() -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let no_environment = Self::command().mut_args(|arg| arg.env(None));
        no_environment
            .try_get_matches_from(["reactstep"])
            .and_then(|matches| Self::from_arg_matches(&matches))
            .unwrap_or_else(|e| panic!("the flags' defaults do not parse: {e}"))
    }

    /// The flags and the environment, with every provider's variables read.
    pub fn load() -> Self {
        let mut config = <Self as clap::Parser>::parse();
        config.read_provider_variables(|name| match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            // Not read as unset: the calls would go to the provider's default host instead.
            Err(std::env::VarError::NotUnicode(_)) => {
                eprintln!("error: {name} is not UTF-8: set it again, or unset it");
                std::process::exit(2)
            }
        });
        config
    }

    /// Reads `REACTSTEP_<NAME>_BASE_URL` for the providers without a flag of their own, and
    /// the variables providers take headers from.
    pub fn read_provider_variables(&mut self, var: impl Fn(&str) -> Option<String>) {
        for provider in crate::llm::Provider::all() {
            let flagged = ["openai", "anthropic", "ollama"].contains(&provider.name());
            if let Some(url) = var(&provider.base_url_variable()).filter(|_| !flagged) {
                self.base_urls.insert(provider.name().to_string(), url);
            }
            for (_, variable) in provider.facts().configured_headers {
                if let Some(value) = var(variable) {
                    self.provider_variables.insert(variable.to_string(), value);
                }
            }
        }
    }

    /// Where the operator sent `provider`'s calls, if anywhere.
    pub fn base_url_for(&self, provider: crate::llm::Provider) -> Option<&str> {
        match provider.name() {
            "openai" => Some(&self.openai_base_url),
            "anthropic" => Some(&self.anthropic_base_url),
            "ollama" => Some(&self.ollama_base_url),
            name => self.base_urls.get(name).map(String::as_str),
        }
    }

    /// How long one step may take in all.
    pub fn step_timeout(&self) -> Duration {
        Duration::from_secs(self.step_timeout_secs)
    }

    /// Between comment lines on a quiet event stream.
    pub fn stream_heartbeat(&self) -> Duration {
        Duration::from_secs(self.stream_heartbeat_secs)
    }

    /// How long one rate-limit check may wait for Redis.
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    pub fn llm_timeout(&self) -> Duration {
        Duration::from_secs(self.llm_timeout_secs)
    }

    /// How long a request's body may take to arrive, from when it is first read.
    pub fn client_timeout(&self) -> Duration {
        Duration::from_secs(self.client_timeout_secs)
    }

    /// How long a connection's first request head may take: the client timeout, but never more
    /// than actix's own 5 s, since a head is a few hundred bytes and a slow one is an attack.
    pub fn head_timeout(&self) -> Duration {
        self.client_timeout().min(Duration::from_secs(5))
    }

    /// The longest a connection may go without the server writing to it: a head, a body and a
    /// whole step, with room to spare. Past it, nothing legitimate is under way, yet actix would
    /// wait on a later request's head (it times only the first) for as long as it trickles in.
    pub fn connection_quiet_limit(&self) -> Duration {
        self.head_timeout() + self.client_timeout() + self.step_timeout() + Duration::from_secs(5)
    }

    pub fn retry_policy(&self) -> crate::llm::RetryPolicy {
        crate::llm::RetryPolicy {
            retries: self.retries,
            base: Duration::from_millis(self.retry_base_ms),
            cap: Duration::from_millis(self.retry_cap_ms),
        }
    }
}

/// What every request is served under, made once at start-up from the flags and shared (by
/// `Arc`) by the handlers and each request's conversion: its limits and switches, the workspace,
/// durations as `Duration`. What start-up alone reads (the listener, the upstream clients, the
/// rate limits) it builds from the flags themselves.
#[derive(Debug)]
pub struct Settings {
    /// Largest request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: u64,
    /// How long a request's body may take to arrive, from when it is first read.
    pub client_timeout: Duration,
    /// Whether requests may carry `mock_response`.
    pub allow_mock_response: bool,
    /// What every step is given: the workspace, the approximation margin.
    pub step: Arc<crate::step::StepSettings>,
    /// How long one step may take in all.
    pub step_timeout: Duration,
    /// Between comment lines on a quiet event stream.
    pub stream_heartbeat: Duration,
    /// Tokens a client must present; empty means none is asked for.
    pub api_tokens: ApiTokens,
}

impl Settings {
    /// The settings of `config`, with the workspace start-up opened at `REACTSTEP_WORKSPACE_ROOT`.
    pub fn new(
        config: &Config,
        workspace: Option<crate::step::context::workspace::Workspace>,
    ) -> Self {
        Self {
            max_body_bytes: config.max_body_bytes,
            client_timeout: config.client_timeout(),
            allow_mock_response: config.allow_mock_response,
            step: Arc::new(crate::step::StepSettings {
                workspace,
                approximation_margin_percent: config.approximation_margin_percent,
            }),
            step_timeout: config.step_timeout(),
            stream_heartbeat: config.stream_heartbeat(),
            api_tokens: config.api_tokens.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Origins as browsers and editor webviews send them are taken as given; any other way of
    /// writing one would never match, and is refused.
    #[test]
    fn origins_are_taken_as_a_browser_sends_them() {
        for taken in [
            "https://app.example.com",
            "http://localhost:3000",
            "http://[::1]:3000",
            "https://xn--bcher-kva.example",
            "vscode-webview://1a2b3c4d",
            "chrome-extension://abcdefghijklmnop",
        ] {
            assert_eq!(cors_origin(taken).as_deref(), Ok(taken));
        }
        for refused in [
            "https://App.Example.com",
            "https://app.example.com:443",
            "http://[0:0::1]:3000",
            "https://bücher.example",
            "https://app.example.com/",
            "https://app.example.com\\",
            "https://app.\texample.com",
            "app.example.com",
            "*",
            "null",
        ] {
            assert!(cors_origin(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn defaults_match_what_the_parser_yields_with_no_flags() {
        let parsed = Config::try_parse_from(["reactstep"]);
        let Ok(parsed) = parsed else {
            panic!("no flags must parse")
        };
        // The environment of the test run may set REACTSTEP_*; compare only when it does not.
        if std::env::vars().all(|(k, _)| !k.starts_with("REACTSTEP_")) {
            assert_eq!(format!("{parsed:?}"), format!("{:?}", Config::defaults()));
        }
    }

    #[test]
    fn mock_response_can_be_switched_off_by_flag() {
        let parsed = Config::try_parse_from(["reactstep", "--allow-mock-response", "false"]);
        assert!(matches!(parsed, Ok(c) if !c.allow_mock_response));
    }

    #[test]
    fn a_zero_timeout_is_refused() {
        assert!(Config::try_parse_from(["reactstep", "--llm-timeout-secs", "0"]).is_err());
    }

    #[test]
    fn the_client_timeout_is_at_least_a_second_and_caps_the_head_at_five() {
        assert!(Config::try_parse_from(["reactstep", "--client-timeout-secs", "0"]).is_err());
        let parsed = Config::try_parse_from(["reactstep", "--client-timeout-secs", "2"]);
        assert!(matches!(parsed, Ok(c) if c.head_timeout() == Duration::from_secs(2)));
        assert_eq!(Config::defaults().head_timeout(), Duration::from_secs(5));
        assert_eq!(Config::defaults().client_timeout(), Duration::from_secs(30));
    }

    #[test]
    fn the_approximation_margin_is_a_percentage() {
        let parse = |v: &str| {
            Config::try_parse_from(["reactstep", "--approximation-margin-percent", v])
                .map(|c| c.approximation_margin_percent)
        };
        assert!(matches!(parse("35"), Ok(Some(35))));
        assert!(parse("201").is_err());
        assert!(parse("-1").is_err());
    }

    #[test]
    fn a_list_that_is_not_addresses_is_refused() {
        assert!("10.0.0.1, 10.1.0.0/16, ::1".parse::<Networks>().is_ok());
        assert!("10.0.0.1, proxy.local".parse::<Networks>().is_err());
        assert!("10.0.0.0/33".parse::<Networks>().is_err());
    }

    #[test]
    fn a_token_list_that_holds_no_token_is_refused() {
        for empty in ["", ",", "  ", " , ,"] {
            let parsed = Config::try_parse_from(["reactstep", "--api-tokens", empty]);
            assert!(
                parsed.is_err(),
                "{empty:?} must not turn authentication off"
            );
        }
        let parsed = Config::try_parse_from(["reactstep", "--api-tokens", "0123456789abcdef, "]);
        assert!(matches!(parsed, Ok(c) if c.api_tokens.as_ref().is_some_and(|t| t.0.len() == 1)));
    }
}
