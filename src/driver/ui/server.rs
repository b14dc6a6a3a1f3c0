//! The page's HTTP server: the page itself (`/`, `app.js`, `style.css`, built into the binary),
//! what the command was started with (`api/info`), a task run with its events streamed back as
//! lines of JSON (`POST api/run`), the Stop button (`POST api/stop`), the person's approval
//! of a call (`POST api/approval`), and the sessions the runs are saved in (`api/sessions`,
//! `api/sessions/{name}`). Every request passes the guard (`guard.rs`) first.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::error::InternalError;
use actix_web::http::{header, Method};
use actix_web::{web, App, HttpResponse};
use bytes::Bytes;
use futures_util::future::{ready, Either};
use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::approver::{Answered, Approvals};
use super::guard::{refused_host, refused_origin, refused_token, TOKEN_HEADER};
use super::runner::{Job, Runs};
use crate::driver::approval::{edited_arguments, Decision};
use crate::driver::memory::{session_name, SessionStore};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// The page's own sources only: no other site's script, style or connection, and no inline
/// script. No `frame-ancestors`: an editor's webview may embed the page.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'";

/// The longest task taken.
const MAX_TASK_BYTES: usize = 64 * 1024;
/// The largest request body read.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// A line written to the stream while nothing happens, so a page that went away is noticed
/// (the write fails) and its run cancelled, even while a call waits for approval.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// What every request of the page shares.
pub struct Page {
    pub runs: Arc<Runs>,
    pub approvals: Arc<Approvals>,
    /// What `api/info` answers: the model, the workspace, whether the key is missing.
    pub info: Value,
    /// The address the server listens on.
    pub bound: IpAddr,
    /// Where the runs are saved, in sessions.
    pub store: Arc<dyn SessionStore>,
    /// What every request of the API must carry (`guard::new_token`).
    pub token: String,
}

/// The application for one worker.
pub fn app(
    page: web::Data<Page>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<BoxBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let guarded = page.clone();
    let json = web::JsonConfig::default()
        .limit(MAX_BODY_BYTES)
        .error_handler(|err, _| {
            let message = format!("the request is not what the page sends: {err}");
            InternalError::from_response(
                err,
                refusal(actix_web::http::StatusCode::BAD_REQUEST, &message),
            )
            .into()
        });
    App::new()
        .app_data(page)
        .app_data(json)
        .wrap_fn(move |req, service| match refused(&req, &guarded) {
            Some(why) => {
                let response =
                    req.into_response(refusal(actix_web::http::StatusCode::FORBIDDEN, &why));
                Either::Left(ready(Ok(response)))
            }
            None => Either::Right(
                service
                    .call(req)
                    .map(|r| r.map(ServiceResponse::map_into_boxed_body)),
            ),
        })
        .route(
            "/",
            web::get().to(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/app.js",
            web::get().to(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/style.css",
            web::get().to(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/api/info", web::get().to(info))
        .route("/api/run", web::post().to(run))
        .route("/api/stop", web::post().to(stop))
        .route("/api/approval", web::post().to(approval))
        .route("/api/sessions", web::get().to(sessions))
        .route("/api/sessions/{name}", web::get().to(session))
        .default_service(web::to(|| async {
            refusal(actix_web::http::StatusCode::NOT_FOUND, "no such page")
        }))
}

/// The paths served without the page's token, exactly as sent.
const PUBLIC: [&str; 3] = ["/", "/app.js", "/style.css"];

/// Why `req` is refused, if it is (`guard.rs`). The page and its script and style hold nothing
/// of the user's, so they are served without the token, and the page can say what is missing.
/// Every other path needs it: the router matches a path decoded (`/%61pi/run` is `/api/run`),
/// so the public ones are named as sent, and anything else is not public.
fn refused(req: &ServiceRequest, page: &Page) -> Option<String> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if let Some(why) = refused_host(host, page.bound) {
        return Some(why);
    }
    if !PUBLIC.contains(&req.path()) {
        let sent = req.headers().get(TOKEN_HEADER).map(|h| h.as_bytes());
        if let Some(why) = refused_token(sent, &page.token) {
            return Some(why);
        }
    }
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return None;
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|h| h.to_str().ok());
    refused_origin(origin, host.unwrap_or_default())
}

/// An error the page shows as it is: `{"error": "…"}`.
fn refusal(status: actix_web::http::StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({ "error": message }))
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CONTENT_SECURITY_POLICY, POLICY))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(body)
}

async fn info(page: web::Data<Page>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(&page.info)
}

#[derive(Deserialize)]
struct RunRequest {
    task: String,
    /// The session the run continues and is saved in; none (or empty): not saved.
    #[serde(default)]
    session: Option<String>,
}

/// Runs the task; its events, one JSON object a line, as they happen, the last one `end`.
async fn run(page: web::Data<Page>, request: web::Json<RunRequest>) -> HttpResponse {
    use actix_web::http::StatusCode;
    let RunRequest { task, session } = request.into_inner();
    let session = match session.filter(|name| !name.trim().is_empty()) {
        Some(name) => match session_name(&name) {
            Ok(name) => Some(name),
            Err(why) => return refusal(StatusCode::BAD_REQUEST, &why),
        },
        None => None,
    };
    if task.trim().is_empty() {
        return refusal(
            StatusCode::BAD_REQUEST,
            "Type a task first: the task is empty.",
        );
    }
    if task.len() > MAX_TASK_BYTES {
        let message = format!("the task is over {MAX_TASK_BYTES} bytes: shorten it");
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, &message);
    }
    let (events, stream) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        task,
        session,
        events,
    };
    if let Err(why) = page.runs.start(job) {
        return refusal(StatusCode::CONFLICT, &why);
    }
    HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .streaming(lines(stream))
}

/// The events as lines of JSON, with a heartbeat line while none comes.
fn lines(
    events: tokio::sync::mpsc::UnboundedReceiver<Value>,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let heartbeat = tokio::time::interval(HEARTBEAT);
    futures_util::stream::unfold(
        (events, heartbeat),
        |(mut events, mut heartbeat)| async move {
            let event = tokio::select! {
                event = events.recv() => event?,
                _ = heartbeat.tick() => json!({"type": "heartbeat"}),
            };
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            Some((Ok(Bytes::from(line)), (events, heartbeat)))
        },
    )
}

async fn stop(page: web::Data<Page>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "stopped": page.runs.stop() }))
}

#[derive(Deserialize)]
struct ApprovalAnswer {
    id: u64,
    /// `approve`, `deny` or `edit` (a call run with `arguments` instead of the proposed ones).
    decision: String,
    reason: Option<String>,
    arguments: Option<Value>,
}

/// The decision an answer posts, or why it is not one.
fn decision_of(answer: ApprovalAnswer) -> Result<Decision, String> {
    match answer.decision.as_str() {
        "approve" => Ok(Decision::Approve),
        "deny" => {
            let reason = answer.reason.unwrap_or_default();
            let reason = reason.trim();
            Ok(Decision::Deny(if reason.is_empty() {
                "no reason was given".into()
            } else {
                reason.chars().take(2_000).collect()
            }))
        }
        "edit" => match answer.arguments {
            Some(arguments) => edited_arguments(arguments).map(Decision::Edit),
            None => Err("an edit names its arguments (a JSON object)".into()),
        },
        other => Err(format!(
            "a decision is approve, deny or edit, not {other:?}"
        )),
    }
}

async fn approval(page: web::Data<Page>, answer: web::Json<ApprovalAnswer>) -> HttpResponse {
    use actix_web::http::StatusCode;
    let answer = answer.into_inner();
    let id = answer.id;
    let decision = match decision_of(answer) {
        Ok(decision) => decision,
        Err(why) => return refusal(StatusCode::BAD_REQUEST, &why),
    };
    match page.approvals.answer(id, decision) {
        Answered::Taken => HttpResponse::Ok().json(json!({ "answered": id })),
        Answered::NotWaiting => {
            let message = "nothing waits for that decision (the run ended, or it was answered)";
            refusal(StatusCode::NOT_FOUND, message)
        }
        Answered::NotEditable => {
            let message = "a plan is approved or rejected, not edited";
            refusal(StatusCode::BAD_REQUEST, message)
        }
    }
}

/// The sessions, the most recently active first.
async fn sessions(page: web::Data<Page>) -> HttpResponse {
    match page.store.list().await {
        Ok(list) => HttpResponse::Ok()
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(json!({ "store": page.store.describe(), "sessions": list })),
        Err(why) => refusal(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, &why),
    }
}

/// One session and its runs, oldest first.
async fn session(page: web::Data<Page>, name: web::Path<String>) -> HttpResponse {
    use actix_web::http::StatusCode;
    match page.store.show(&name).await {
        Ok(Some(session)) => HttpResponse::Ok()
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(session),
        Ok(None) => refusal(
            StatusCode::NOT_FOUND,
            &format!("no session {:?}", name.as_str()),
        ),
        Err(why) => refusal(StatusCode::SERVICE_UNAVAILABLE, &why),
    }
}
