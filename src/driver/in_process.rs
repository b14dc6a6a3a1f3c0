//! The service `reactstep run` starts in its own process when no `--server` is named, and the
//! window every step is sent with: the flags, else what a local model server says, else a
//! hosted model's.

use super::args::LoopArgs;
use super::window;
use crate::config::Config;
use crate::llm::Provider;
use crate::startup::Application;

/// What the in-process service runs on: the defaults, one worker on an ephemeral loopback
/// port, and the providers' base URLs from the environment (`REACTSTEP_OLLAMA_BASE_URL`,
/// `REACTSTEP_OPENAI_COMPATIBLE_BASE_URL` …), so a local model server can be named.
pub(super) fn service_config(args: &LoopArgs) -> Config {
    let mut config = Config::defaults();
    config.bind = ([127, 0, 0, 1], 0).into();
    config.workers = 1;
    // The loop ends on a signal first, and needs the service to tell its end.
    config.stops_on_signals = false;
    config.read_provider_variables(|name| std::env::var(name).ok());
    if let Ok(url) = std::env::var("REACTSTEP_OLLAMA_BASE_URL") {
        config.ollama_base_url = url;
    }
    let local = local_provider(args).is_some();
    if let Some(secs) = args.llm_timeout.or(local.then_some(LOCAL_LLM_TIMEOUT_SECS)) {
        config.llm_timeout_secs = secs;
        // A repair round is a second call: the step may hold two and the waits between.
        config.step_timeout_secs = config.step_timeout_secs.max((secs * 2 + 30).min(3600));
    }
    config
}

/// Seconds a local model's call may take unless `--llm-timeout` says: a small model on a CPU
/// reads a 4,000-token prompt in tens of seconds before its first word.
const LOCAL_LLM_TIMEOUT_SECS: u64 = 300;

/// `--provider` when it names a model server of the user's own.
pub(crate) fn local_provider(args: &LoopArgs) -> Option<&str> {
    args.provider
        .as_deref()
        .filter(|p| ["ollama", "openai_compatible"].contains(p))
}

/// A hosted model's window, sent when nothing says otherwise.
const HOSTED_TOKEN_LIMIT: u32 = 128_000;
/// A local model server's window when it does not say: small enough for any of them.
const LOCAL_TOKEN_LIMIT: u32 = 8_192;

/// `tokenLimit` and `reservedOutputTokens` for every step: the flags, else what a local model
/// server says of its window, else a hosted model's.
pub(super) async fn budget(args: &LoopArgs, config: &Config) -> Result<(u32, u32), String> {
    let token_limit = match args.token_limit {
        Some(n) => n,
        None => local_window(args, config)
            .await
            .unwrap_or(HOSTED_TOKEN_LIMIT),
    };
    let reserved = args
        .reserved_output_tokens
        .unwrap_or_else(|| window::reserved_for(token_limit));
    if reserved == 0 || reserved >= token_limit {
        return Err(format!(
            "--reserved-output-tokens {reserved} must be at least 1 and leave room in a window of {token_limit} tokens for the prompt"
        ));
    }
    Ok((token_limit, reserved))
}

/// The window of a local model (`--provider ollama` or `openai_compatible`), as its server
/// tells it; said on stderr either way.
async fn local_window(args: &LoopArgs, config: &Config) -> Option<u32> {
    let provider = local_provider(args)?;
    if args.mock_responses.is_some() {
        return None;
    }
    let base_url = Provider::named(provider).and_then(|p| config.base_url_for(p));
    let asked = match base_url {
        Some(url) => window::ask(provider, url, &args.model).await,
        None => Err(format!(
            "no base URL for {provider} (REACTSTEP_OPENAI_COMPATIBLE_BASE_URL)"
        )),
    };
    match asked {
        Ok(window) => {
            eprintln!(
                "{}: a window of {} tokens ({})",
                args.model, window.tokens, window.source
            );
            Some(window.tokens)
        }
        Err(why) => {
            eprintln!(
                "{}: the model server did not say its window ({why}); {LOCAL_TOKEN_LIMIT} tokens assumed, --token-limit sets it",
                args.model
            );
            Some(LOCAL_TOKEN_LIMIT)
        }
    }
}

/// Starts the service on an ephemeral loopback port; its base URL and body limit.
pub(super) fn start_service(config: Config) -> Result<(String, usize), String> {
    let app = Application::build(&config).map_err(|e| format!("the service: {e}"))?;
    let url = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());
    let max_body = usize::try_from(config.max_body_bytes).unwrap_or(usize::MAX);
    Ok((url, max_body))
}
