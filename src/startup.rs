//! Builds the application and binds its listener in one place, so that `main` and the tests
//! start the very same server (tests bind port 0 and ask for the port).

use std::net::TcpListener;

use std::future::ready;
use std::time::Duration;

use actix_http::error::DispatchError;
use actix_http::HttpService;
use actix_server::ServerBuilder;
use actix_service::{map_config, IntoServiceFactory, ServiceFactoryExt};
use actix_web::dev::{
    fn_service, AppConfig, Extensions, Server, Service, ServiceFactory, ServiceRequest,
    ServiceResponse,
};
use actix_web::rt::net::TcpStream;
use actix_web::{web, App};
use tracing_actix_web::TracingLogger;

use crate::api::{self, AppState};
use crate::config::{Config, Settings};
use crate::llm::{LlmClients, LlmSettings, Provider};
use crate::step::context::workspace::Workspace;
use reqwest::header::{HeaderName, HeaderValue};

pub struct Application {
    port: u16,
    server: Server,
}

impl Application {
    pub fn build(config: &Config) -> std::io::Result<Self> {
        // First, so that a wrong table stops start-up before anything slow is done.
        let prices = prices(config)?;
        warm_up(config);
        let workers = match config.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| usize::from(n).min(512)),
            n => n,
        };
        let descriptors = descriptor_budget(config, workers);
        let listener = TcpListener::bind(config.bind)?;
        let port = listener.local_addr()?.port();
        let (stopper, stopping) = crate::runtime::stopping::stopping();
        let state = web::Data::new(app_state(config, prices, descriptors.steps, stopping)?);
        if !config.bind.ip().is_loopback() && config.api_tokens.is_none() {
            tracing::warn!(bind = %config.bind, "listening beyond loopback without REACTSTEP_API_TOKENS: anyone who can reach this address can spend the keys sent to it and use the service");
        }
        let origins: Vec<String> = config
            .cors_origins
            .iter()
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty())
            .collect();
        let app = move || {
            App::new()
                .wrap(actix_web::middleware::Condition::new(
                    !origins.is_empty(),
                    cors(&origins),
                ))
                .wrap(TracingLogger::<api::request_log::RequestLog>::new())
                // Outermost, so that everything after sees the fitted map.
                .wrap_fn(|mut req, app| {
                    api::headers::fit(req.headers_mut());
                    app.call(req)
                })
                // A body left unread closes the connection after the answer (see protocol.rs).
                .wrap_fn(|mut req, app| {
                    let payload = api::protocol::hold_payload(&mut req);
                    let response = app.call(req);
                    async move {
                        Ok(response
                            .await?
                            .map_body(|_, body| api::protocol::held(body, payload)))
                    }
                })
                // What the service's phases took, on every response.
                .wrap_fn(|req, app| {
                    let started = std::time::Instant::now();
                    let response = app.call(req);
                    async move {
                        let mut response = response.await?;
                        api::server_timing::tell(&mut response, started);
                        Ok(response)
                    }
                })
                .app_data(state.clone())
                .configure(api::routes)
                .default_service(api::default_service())
        };
        let mut server = serve(listener, config, app)?;
        server = server.shutdown_timeout(config.shutdown_grace_secs);
        server = server.workers(workers);
        // actix stops at once on SIGINT; the service stops gracefully on either (below).
        server = server.disable_signals();
        // Per worker; past it, connections wait in the listener's queue, holding no descriptor.
        server = server.max_concurrent_connections(descriptors.connections.div_ceil(workers));
        let server = server.run();
        if config.stops_on_signals {
            stop_on_signals(server.handle(), config.shutdown_grace_secs, stopper);
        }
        Ok(Self { port, server })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

/// The operator's price table, if one is named: a table that is not exactly right stops
/// start-up.
fn prices(config: &Config) -> std::io::Result<crate::prices::Prices> {
    let Some(path) = &config.prices_file else {
        return Ok(crate::prices::Prices::default());
    };
    let prices = crate::prices::Prices::load(path).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("REACTSTEP_PRICES_FILE {} {e}", path.display()),
        )
    })?;
    tracing::info!(models = prices.len(), "price table loaded");
    Ok(prices)
}

/// The heap's settings, the token-count cache and the token encoders, made ready before the
/// first request.
fn warm_up(config: &Config) {
    crate::runtime::heap_trim::fix_mmap_threshold();
    crate::step::context::token_cache::configure(config.token_cache_mib);
    crate::step::context::tokens::warm_up();
    let released = crate::runtime::resident::release_compiled_in_data();
    tracing::debug!(
        mib = released >> 20,
        "encoder tables built; their compiled-in source paged out"
    );
    crate::runtime::heap_trim::keep_trimming();
}

/// What every handler shares: the LLM clients, the workspace, the limits and the prices.
fn app_state(
    config: &Config,
    prices: crate::prices::Prices,
    steps_in_flight: usize,
    stopping: crate::runtime::stopping::Stopping,
) -> std::io::Result<AppState> {
    let memory = crate::runtime::memory_budget::MemoryBudget::new(config.memory_budget_bytes());
    let llm = LlmClients::new(LlmSettings {
        base_urls: provider_base_urls(config)?,
        headers: provider_headers(config)?,
        timeout: config.llm_timeout(),
        retry: config.retry_policy(),
        extra_roots: match &config.upstream_ca_file {
            Some(path) => upstream_roots(path)?,
            None => Vec::new(),
        },
        pools: config.upstream_pools.into(),
        memory: memory.clone(),
    })
    .map_err(|e| clients_refused(config, &e))?;
    let workspace = match &config.workspace_root {
        Some(root) => Some(
            Workspace::new(root, config.workspace_max_file_bytes).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("REACTSTEP_WORKSPACE_ROOT {}: {e}", root.display()),
                )
            })?,
        ),
        None => None,
    };
    let unplaced = Provider::all()
        .filter(|p| llm.base_url(*p).trim().is_empty())
        .collect();
    Ok(AppState {
        settings: std::sync::Arc::new(Settings::new(config, workspace)),
        llm,
        memory,
        rate_limits: rate_limits(config).map_err(std::io::Error::other)?,
        trusted_proxies: api::TrustedProxies::new(config.trusted_proxies.0.clone()),
        prices,
        destinations: std::sync::Arc::new(api::Destinations {
            allowed: api::AllowedBaseUrls::parse(&config.allowed_base_urls)
                .map_err(std::io::Error::other)?,
            unplaced,
        }),
        step_slots: api::StepSlots::new(steps_in_flight),
        stopping,
    })
}

/// The server, built from its parts as actix-web's `HttpServer::listen` builds it (same
/// timeouts, graceful shutdown and `on_connect`), but over [`api::protocol::Conn`] so that the
/// HTTP layer's own error answers get the JSON body. HTTP/1 only, as before (no `http2` feature).
fn serve<F, T>(listener: TcpListener, config: &Config, app: F) -> std::io::Result<ServerBuilder>
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<api::protocol::HeldBody>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
{
    let builder = actix_server::Server::build();
    let shutdown = builder.graceful_shutdown_signal();
    let addr = listener.local_addr()?;
    let head_timeout = config.head_timeout();
    let quiet_limit = config.connection_quiet_limit();
    builder.listen("reactstep", listener, move || {
        let shutdown = shutdown.clone();
        let app = app().into_factory().map_err(|err| err.error_response());
        let http = HttpService::build()
            .graceful_shutdown_signal(move || {
                let signal = shutdown.clone();
                async move { signal.notified().await }
            })
            .client_request_timeout(head_timeout)
            // HttpServer's default: a closing client gets 1 s to read the answer.
            .client_disconnect_timeout(Duration::from_secs(1))
            .local_addr(addr)
            .on_connect_ext(|conn: &api::protocol::Conn, ext: &mut Extensions| {
                api::client_gone::remember(conn.tcp(), ext)
            })
            // The app reads no host or address from its config (HttpServer would put the
            // listening address there); the public default serves.
            .h1(map_config(app, |_| AppConfig::default()));
        fn_service(move |tcp: TcpStream| {
            let peer = tcp.peer_addr().ok();
            ready(Ok::<_, DispatchError>((
                api::protocol::Conn::new(tcp, head_timeout).with_quiet_limit(quiet_limit),
                peer,
            )))
        })
        .and_then(http)
    })
}

/// Raises the descriptor limit as far as allowed and sizes steps and connections to it.
fn descriptor_budget(config: &Config, workers: usize) -> crate::descriptors::Budget {
    use crate::descriptors::{held, raise_limit, Budget, PER_STEP};
    let Some((soft, hard)) = raise_limit() else {
        tracing::info!(
            "the file descriptor limit cannot be read: steps in flight are not bounded by it"
        );
        return Budget::within(u64::MAX, 0, config.max_steps_in_flight);
    };
    let held = held(workers, config.upstream_pools);
    let budget = Budget::within(soft, held, config.max_steps_in_flight);
    tracing::info!(
        soft_limit = soft,
        hard_limit = hard,
        per_step = PER_STEP,
        steps_in_flight = budget.steps,
        connections = budget.connections,
        "file descriptors: steps in flight and connections bounded to fit the limit"
    );
    if config.max_steps_in_flight > budget.steps {
        tracing::warn!(
            asked = config.max_steps_in_flight,
            kept = budget.steps,
            "REACTSTEP_MAX_STEPS_IN_FLIGHT is more than the file descriptor limit allows: cut"
        );
    }
    budget
}

/// The rate limits: in this process, or in Redis with `REACTSTEP_REDIS_URL`.
fn rate_limits(config: &Config) -> Result<crate::api::RateLimits, String> {
    let (per_client, per_session) = (config.rate_limit_per_client, config.rate_limit_per_session);
    let ipv6_prefix = config.rate_limit_ipv6_prefix;
    let Some(url) = &config.redis_url else {
        return Ok(crate::api::RateLimits::new(
            per_client,
            per_session,
            ipv6_prefix,
        ));
    };
    let settings = crate::api::SharedSettings {
        url: url.0.clone(),
        fail_open: config.redis_fail_open,
        timeout: config.redis_timeout(),
        key_prefix: config.redis_key_prefix.clone(),
    };
    tracing::info!(
        fail_open = config.redis_fail_open,
        "rate limits are shared through Redis"
    );
    crate::api::RateLimits::shared(per_client, per_session, ipv6_prefix, settings)
}

/// Browsers on the configured origins may call the API (POST with a JSON body and the
/// operator's bearer token); nothing is allowed when none is configured.
/// Stops the server gracefully on SIGTERM or SIGINT, telling the requests in flight when they
/// will be cut (`runtime::stopping`).
fn stop_on_signals(
    handle: actix_web::dev::ServerHandle,
    grace: u64,
    stopper: crate::runtime::stopping::Stopper,
) {
    tokio::spawn(async move {
        if let Ok(signal) = stop_signal().await {
            tracing::info!(
                signal,
                grace_secs = grace,
                "graceful shutdown: no new requests; those in flight get the grace period"
            );
            stopper.stop(std::time::Duration::from_secs(grace));
            handle.stop(true).await;
        }
    });
}

/// SIGTERM or SIGINT: both stop the service gracefully (in-flight requests get the grace
/// period, as the documentation says; actix's own handling stops at once on SIGINT).
#[cfg(unix)]
async fn stop_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

#[cfg(not(unix))]
async fn stop_signal() -> std::io::Result<&'static str> {
    tokio::signal::ctrl_c().await.map(|()| "Ctrl-C")
}

fn cors(origins: &[String]) -> actix_cors::Cors {
    origins
        .iter()
        .fold(actix_cors::Cors::default(), |cors, origin| {
            cors.allowed_origin(origin)
        })
        .allowed_methods(["GET", "POST"])
        .allowed_headers([
            "content-type",
            "authorization",
            "x-request-id",
            "traceparent",
            "tracestate",
        ])
        .expose_headers(["x-request-id", "retry-after"])
        .max_age(600)
}

/// Each provider's base URL as the operator configured it; the rest keep their defaults. One
/// that is not an http or https URL with a host, or that holds a query or a fragment (the API's
/// path is added after it), stops start-up: every call to it would fail.
fn provider_base_urls(
    config: &Config,
) -> std::io::Result<std::collections::HashMap<&'static str, String>> {
    if config
        .ollama_base_url
        .trim_end_matches('/')
        .ends_with("/v1")
    {
        tracing::info!("REACTSTEP_OLLAMA_BASE_URL ends in /v1: Ollama's native API at the server's root is used instead");
    }
    let mut urls = std::collections::HashMap::new();
    for provider in Provider::all() {
        let Some(url) = config.base_url_for(provider).map(str::trim) else {
            continue;
        };
        let usable = reqwest::Url::parse(url).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host().is_some()
                && u.query().is_none()
                && u.fragment().is_none()
        });
        if !url.is_empty() && !usable {
            // Not quoted: it may hold a password.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is not an http or https URL with a host, and without a query or a fragment",
                    provider.base_url_variable()
                ),
            ));
        }
        urls.insert(provider.name(), url.to_string());
    }
    Ok(urls)
}

/// The headers the operator configured for providers' calls (OpenRouter's attribution).
fn provider_headers(
    config: &Config,
) -> std::io::Result<std::collections::HashMap<&'static str, Vec<(HeaderName, HeaderValue)>>> {
    let mut all = std::collections::HashMap::new();
    for provider in Provider::all() {
        let mut headers = Vec::new();
        for (header, variable) in provider.facts().configured_headers {
            let Some(value) = config.provider_variables.get(*variable) else {
                continue;
            };
            let value = HeaderValue::from_str(value.trim()).map_err(|_| {
                std::io::Error::other(format!("{variable} is not a valid header value"))
            })?;
            headers.push((HeaderName::from_static(header), value));
        }
        if !headers.is_empty() {
            all.insert(provider.name(), headers);
        }
    }
    Ok(all)
}

/// A CA bundle holds a few hundred KiB at most (all of Mozilla's roots are about 200 KiB).
const MAX_CA_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The HTTP clients could not be built: with a CA file, most likely one of its certificates,
/// which reqwest reads only then (its error says only "builder error"; the cause is its source).
fn clients_refused(config: &Config, e: &reqwest::Error) -> std::io::Error {
    let cause = std::error::Error::source(e).map_or(e.to_string(), ToString::to_string);
    let message = match &config.upstream_ca_file {
        Some(path) => format!(
            "REACTSTEP_UPSTREAM_CA_FILE {}: a certificate could not be used: {cause}",
            path.display()
        ),
        None => format!("the HTTP clients could not be built: {cause}"),
    };
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// The certificates of the operator's CA file; a file that holds none is a mistake worth
/// refusing to start over, not a silent fall-back to the web roots.
fn upstream_roots(path: &std::path::Path) -> std::io::Result<Vec<reqwest::Certificate>> {
    let context = |what: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("REACTSTEP_UPSTREAM_CA_FILE {}: {what}", path.display()),
        )
    };
    let pem = crate::start_file::read(path, MAX_CA_FILE_BYTES).map_err(context)?;
    // reqwest's error says only "builder error"; what went wrong is in its source.
    let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        let cause = std::error::Error::source(&e).map_or(e.to_string(), ToString::to_string);
        context(cause)
    })?;
    if roots.is_empty() {
        return Err(context("holds no PEM certificate".into()));
    }
    Ok(roots)
}
