use reactstep::config::Config;
use reactstep::startup::Application;
use reactstep::telemetry;

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let config = Config::load();
    telemetry::init(config.log_format);
    let app = Application::build(&config)?;
    tracing::info!(bind = %config.bind, port = app.port(), "reactstep listening");
    app.run_until_stopped().await
}
