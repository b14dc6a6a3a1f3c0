use reactstep::config::Config;
use reactstep::startup::Application;
use reactstep::telemetry;

fn main() -> std::io::Result<()> {
    // `reactstep run …` drives a loop in the terminal; anything else runs the service.
    if std::env::args().nth(1).as_deref() == Some("run") {
        let args = std::iter::once("reactstep run".to_string()).chain(std::env::args().skip(2));
        let runtime = actix_web::rt::System::new();
        let code = runtime.block_on(reactstep::driver::cli::main(args));
        // The runtime goes first: its tasks are dropped, and with them any child process (an
        // MCP server) still held, which is killed on drop instead of outliving the command.
        drop(runtime);
        std::process::exit(code);
    }
    actix_web::rt::System::new().block_on(serve())
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
