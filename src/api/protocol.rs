//! The HTTP/1 connection itself: slow clients and requests that are not valid HTTP.
//!
//! actix-http's dispatcher answers some requests on its own, before any app code, middleware or
//! error handler runs: a request it cannot parse (400: a control character in a header, a
//! duplicate or invalid Content-Length, a bad chunk size), a head over its 128 KiB buffer or 96
//! header fields (431), and a first head that did not arrive within the head timeout (408). It
//! writes these as a bare head with `content-length: 0` and closes the connection. [`Conn`] wraps
//! each connection's socket and replaces such a head, as it is written, by the same status with
//! the documented JSON error body. Nothing else can take that shape: every response of the app
//! carries a body, so the normal path only pays for a check of the last four bytes written.
//!
//! A body that is still unread when the answer is ready (a 408 for a slow body, a 401 or 413
//! given before reading it) must close the connection: actix-http would otherwise read and
//! discard a chunked body to its end, with no timer, so a trickle could hold the connection
//! forever. [`hold_payload`] keeps the request's payload alive in the response body, which makes
//! the dispatcher close the connection after the answer (with its 1 s linger).

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest};
use actix_web::error::PayloadError;
use actix_web::rt::net::TcpStream;
use actix_web::web::Bytes;
use actix_web::HttpMessage;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::{ApiError, Echo, ErrorKind};

/// How long a request body may take to arrive, from when the handler starts reading it (app
/// data; `body::read` falls back to 30 s without it).
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

/// A connection's socket, with the dispatcher's bare error heads replaced as they are written.
pub struct Conn {
    tcp: TcpStream,
    head_timeout_secs: u64,
    swap: Option<Swap>,
}

/// A JSON response standing in for a bare error head of `covers` bytes, written `written` far.
struct Swap {
    bytes: Vec<u8>,
    written: usize,
    covers: usize,
}

impl Conn {
    pub fn new(tcp: TcpStream, head_timeout: Duration) -> Self {
        Self {
            tcp,
            head_timeout_secs: head_timeout.as_secs(),
            swap: None,
        }
    }

    /// The socket, for `client_gone::remember`.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Writes the replacement; done, it reports the bare head it stands for as written.
    fn drain_swap(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some(swap) = self.swap.as_mut() {
            if swap.written == swap.bytes.len() {
                let covers = swap.covers;
                self.swap = None;
                return Poll::Ready(Ok(covers));
            }
            match Pin::new(&mut self.tcp).poll_write(cx, &swap.bytes[swap.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(n)) => swap.written += n,
                other => return other,
            }
        }
        Poll::Ready(Ok(0))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.swap.is_none() {
            match bare_error_at(buf) {
                None => return Pin::new(&mut this.tcp).poll_write(cx, buf),
                // What precedes it (a pipelined answer) goes out as it is, first.
                Some((start, _)) if start > 0 => {
                    return Pin::new(&mut this.tcp).poll_write(cx, &buf[..start])
                }
                Some((_, kind)) => {
                    this.swap = Some(Swap {
                        bytes: replacement(buf, kind, this.head_timeout_secs),
                        written: 0,
                        covers: buf.len(),
                    });
                }
            }
        }
        this.drain_swap(cx)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The dispatcher's own answers, by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bare {
    BadRequest,
    Timeout,
    TooLarge,
}

/// The longest bare head: a status line, `content-length: 0`, `connection: close` and a date.
const MAX_BARE_HEAD: usize = 192;

/// Where a bare error head that ends `buf` starts, and which it is.
fn bare_error_at(buf: &[u8]) -> Option<(usize, Bare)> {
    // Every write that ends an app response ends with its body, never with a blank line.
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let from = buf.len().saturating_sub(MAX_BARE_HEAD);
    let start = from + buf[from..].windows(5).rposition(|w| w == b"HTTP/")?;
    bare_error(&buf[start..]).map(|kind| (start, kind))
}

/// Which bare error `head` is, if it is exactly one: 400, 408 or 431 with `content-length: 0`
/// and nothing but `connection` and `date` besides.
fn bare_error(head: &[u8]) -> Option<Bare> {
    let text = std::str::from_utf8(head).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let (version, status) = lines.next()?.split_once(' ')?;
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return None;
    }
    let kind = match status.get(..4)? {
        "400 " => Bare::BadRequest,
        "408 " => Bare::Timeout,
        "431 " => Bare::TooLarge,
        _ => return None,
    };
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(": ")?;
        if name.eq_ignore_ascii_case("content-length") && value == "0" {
            empty = true;
        } else if !name.eq_ignore_ascii_case("connection") && !name.eq_ignore_ascii_case("date") {
            return None;
        }
    }
    empty.then_some(kind)
}

/// The complete response that replaces `head`: its status line and date, the JSON error body,
/// and `connection: close` (the dispatcher closes the connection after any of these).
fn replacement(head: &[u8], kind: Bare, head_timeout_secs: u64) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let date = lines
        .find(|l| l.get(..5).is_some_and(|n| n.eq_ignore_ascii_case("date:")))
        .unwrap_or_default();
    let request_id = uuid::Uuid::new_v4().to_string();
    let kind = match kind {
        Bare::BadRequest => ErrorKind::InvalidRequest {
            message: "the request is not valid HTTP/1.1: a malformed request line or header \
                      (a control character, a duplicate or invalid Content-Length, a bad chunk \
                      size)"
                .into(),
            fields: Vec::new(),
        },
        Bare::Timeout => ErrorKind::RequestTimeout {
            what: "head",
            seconds: head_timeout_secs,
        },
        Bare::TooLarge => ErrorKind::HeadersTooLarge,
    };
    let error = ApiError::new(
        kind,
        Echo {
            request_id: request_id.clone(),
            ..Echo::default()
        },
    );
    tracing::warn!(%request_id, error.type = error.kind.status().1, error = %error.kind, "request refused by the HTTP layer");
    let body = serde_json::to_vec(&error.body()).unwrap_or_default();
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\nx-request-id: {request_id}\r\n{date}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The request's payload, shared between the handler (which reads it) and the response body
/// (which keeps it alive until the answer is written).
#[derive(Clone)]
pub struct SharedPayload(Rc<RefCell<Payload>>);

impl Stream for SharedPayload {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_next(cx)
    }
}

/// A response body that holds its request's payload until it is dropped.
pub struct HeldBody {
    body: BoxBody,
    _payload: Option<SharedPayload>,
}

impl MessageBody for HeldBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

/// For a middleware: gives the handler a shared view of the request's payload, and returns what
/// [`held`] needs to keep it alive in the response. Requests without a body are left alone.
pub fn hold_payload(req: &mut ServiceRequest) -> Option<SharedPayload> {
    match req.take_payload() {
        Payload::None => None,
        payload => {
            let shared = SharedPayload(Rc::new(RefCell::new(payload)));
            req.set_payload(Payload::Stream {
                payload: Box::pin(shared.clone()),
            });
            Some(shared)
        }
    }
}

/// The response body, holding the request's payload (see [`hold_payload`]).
pub fn held<B: MessageBody + 'static>(body: B, payload: Option<SharedPayload>) -> HeldBody {
    HeldBody {
        body: body.boxed(),
        _payload: payload,
    }
}
