use reactstep::config::Config;
use reactstep::startup::Application;
use reactstep::telemetry;

fn main() -> std::io::Result<()> {
    // `reactstep run …` drives a loop in the terminal, `reactstep ui …` on a local web page,
    // `reactstep sessions …` looks at the sessions they keep; anything else runs the service.
    // Read as the OS gives it: an argument that is not UTF-8 is the service's parser's to refuse.
    let first = std::env::args_os().nth(1);
    match first.as_ref().and_then(|c| c.to_str()) {
        #[cfg(feature = "driver")]
        Some("run") => command("reactstep run", reactstep::driver::cli::main),
        #[cfg(feature = "driver")]
        Some("ui") => command("reactstep ui", reactstep::driver::ui::main),
        #[cfg(feature = "driver")]
        Some("sessions") => command(
            "reactstep sessions",
            reactstep::driver::memory::command::main,
        ),
        #[cfg(not(feature = "driver"))]
        Some(name @ ("run" | "ui" | "sessions")) => without_driver(name),
        _ => {
            // Said plainly, not as the error's debug form.
            if let Err(e) = actix_web::rt::System::new().block_on(serve()) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// A service-only build asked for a command of the driver: said plainly, and exit code 2 as for
/// any command line that cannot run, rather than starting the service.
#[cfg(not(feature = "driver"))]
fn without_driver(name: &str) -> ! {
    eprintln!(
        "reactstep {name}: this build is the service only (built with --no-default-features); \
         the loop driver's commands are in a build with the `driver` feature, the default"
    );
    std::process::exit(2);
}

#[cfg(feature = "driver")]
/// Runs a command of the driver (`main` given its arguments, the first its name) and exits
/// with its code.
fn command<F: std::future::Future<Output = i32>>(
    name: &str,
    main: impl FnOnce(Vec<String>) -> F,
) -> ! {
    let Some(rest) = std::env::args_os()
        .skip(2)
        .map(|arg| arg.into_string().ok())
        .collect::<Option<Vec<String>>>()
    else {
        eprintln!("{name}: an argument is not UTF-8");
        std::process::exit(2);
    };
    let args = std::iter::once(name.to_string()).chain(rest).collect();
    let runtime = actix_web::rt::System::new();
    let code = runtime.block_on(main(args));
    // The runtime goes first: its tasks are dropped, and with them any child process (an
    // MCP server) still held, which is killed on drop instead of outliving the command.
    drop(runtime);
    std::process::exit(code);
}

async fn serve() -> std::io::Result<()> {
    let config = Config::load();
    let traces = telemetry::logs::init(config.log_format, config.otlp_endpoint.as_deref())?;
    let app = Application::build(&config)?;
    tracing::info!(bind = %config.bind, port = app.port(), "reactstep listening");
    let stopped = app.run_until_stopped().await;
    // After the grace period: the last requests' traces go out before the process ends.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    stopped
}
