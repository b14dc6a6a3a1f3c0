use reactstep::config::Config;
use reactstep::startup::Application;
use reactstep::telemetry;

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    // `reactstep run …` drives a loop in the terminal; anything else runs the service.
    if std::env::args().nth(1).as_deref() == Some("run") {
        let args = std::iter::once("reactstep run".to_string()).chain(std::env::args().skip(2));
        let code = reactstep::driver::cli::main(args).await;
        std::process::exit(code);
    }
    let config = Config::load();
    telemetry::init(config.log_format);
    let app = Application::build(&config)?;
    tracing::info!(bind = %config.bind, port = app.port(), "reactstep listening");
    app.run_until_stopped().await
}
