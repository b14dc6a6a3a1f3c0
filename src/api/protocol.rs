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
use std::future::Future;
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

/// A connection's socket, with the dispatcher's bare error heads replaced as they are written,
/// and closed when it has been quiet too long.
pub struct Conn<T = TcpStream> {
    tcp: T,
    head_timeout_secs: u64,
    swap: Option<Swap>,
    quiet: Option<Quiet>,
}

/// actix times a connection's first request head only: a later one, trickled in on a kept-alive
/// connection, would hold it until the 128 KiB head limit. So a connection the server has not
/// written to for longer than any head, body and step can take fails its next read, and the
/// dispatcher drops it.
struct Quiet {
    limit: Duration,
    last_write: tokio::time::Instant,
    /// Wakes the reader when the limit may have passed; made on the first read, in the runtime.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Quiet {
    /// Whether the limit has passed; otherwise the timer is set to wake the reader when it may.
    fn over(&mut self, cx: &mut Context<'_>) -> bool {
        let due = self.last_write + self.limit;
        if tokio::time::Instant::now() >= due {
            return true;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        // Only to register the waker: the clock above decides.
        let _ = timer.as_mut().poll(cx);
        false
    }
}

/// A JSON response standing in for a bare error head of `covers` bytes, written `written` far.
struct Swap {
    bytes: Vec<u8>,
    written: usize,
    covers: usize,
}

impl<T> Conn<T> {
    /// Generic over the socket so that partial writes can be tested with a stingy writer.
    pub fn new(tcp: T, head_timeout: Duration) -> Self {
        Self {
            tcp,
            head_timeout_secs: head_timeout.as_secs(),
            swap: None,
            quiet: None,
        }
    }

    /// Closes the connection once the server has written nothing to it for `limit`.
    pub fn with_quiet_limit(mut self, limit: Duration) -> Self {
        self.quiet = Some(Quiet {
            limit,
            last_write: tokio::time::Instant::now(),
            timer: None,
        });
        self
    }

    /// The socket, for `client_gone::remember`.
    pub fn tcp(&self) -> &T {
        &self.tcp
    }
}

impl<T: AsyncWrite + Unpin> Conn<T> {
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

impl<T: AsyncRead + Unpin> AsyncRead for Conn<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.quiet.as_mut().is_some_and(|q| q.over(cx)) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection was quiet for longer than any request takes",
            )));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Conn<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(quiet) = this.quiet.as_mut() {
            quiet.last_write = tokio::time::Instant::now();
        }
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

/// Counted with every other answer, under the label of paths the contract does not name: the
/// path of a request that is not valid HTTP is not known.
fn count(error: &ApiError) {
    crate::telemetry::metrics::count_request("other", error.kind.status().0.as_u16());
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
    count(&error);
    let body = serde_json::to_vec(&error.body()).unwrap_or_default();
    // No phase was reached: the same headers as every response, with zeros.
    let timing = crate::telemetry::timing::PhaseTimes::default().summary();
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\nx-request-id: {request_id}\r\nserver-timing: {}\r\n\
         x-reactstep-overhead-ms: {}\r\n{date}\r\n\r\n",
        body.len(),
        timing.header(),
        timing.overhead(),
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

#[cfg(test)]
mod tests {
    use super::*;

    const BARE_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: Mon, 23 Nov 2026 04:29:39 GMT\r\n\r\n";
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\ndate: Mon, 23 Nov 2026 04:29:39 GMT\r\n\r\n{}";

    /// Takes at most `max` bytes per write, and refuses every other call as not ready.
    struct Stingy {
        written: Vec<u8>,
        max: usize,
        calls: usize,
    }

    impl AsyncWrite for Stingy {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.calls += 1;
            if this.calls.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = buf.len().min(this.max);
            this.written.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Writes `buf` as the dispatcher does: again from where the last accepted write ended.
    fn write_all(conn: &mut Conn<Stingy>, buf: &[u8]) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut done = 0;
        while done < buf.len() {
            if let Poll::Ready(n) = Pin::new(&mut *conn).poll_write(&mut cx, &buf[done..]) {
                let n = n.unwrap_or(0);
                assert!(n > 0, "a write made no progress");
                done += n;
            }
        }
    }

    fn stingy(max: usize) -> Conn<Stingy> {
        let writer = Stingy {
            written: Vec::new(),
            max,
            calls: 0,
        };
        Conn::new(writer, Duration::from_secs(5))
    }

    #[test]
    fn the_bare_heads_of_the_dispatcher_are_recognised() {
        assert_eq!(bare_error_at(BARE_400), Some((0, Bare::BadRequest)));
        let timeout = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_at(timeout), Some((0, Bare::Timeout)));
        let large =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_at(large), Some((0, Bare::TooLarge)));
        let pipelined = [OK, BARE_400].concat();
        assert_eq!(
            bare_error_at(&pipelined),
            Some((OK.len(), Bare::BadRequest))
        );
    }

    #[test]
    fn nothing_else_is_taken_for_one() {
        assert_eq!(bare_error_at(OK), None);
        // An SSE head flushed before its first event, and a chunked body's last chunk.
        let sse = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(bare_error_at(sse), None);
        assert_eq!(bare_error_at(b"0\r\n\r\n"), None);
        // A 400 of the app, head flushed alone, carries its body's length or another header.
        let app_head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 472\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_at(app_head), None);
        let with_id = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nx-request-id: a\r\n\r\n";
        assert_eq!(bare_error_at(with_id), None);
        let not_found = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_at(not_found), None);
    }

    #[test]
    fn a_replacement_written_in_pieces_is_whole_and_reported_as_the_bare_head() {
        for max in [1, 3, 64, 4096] {
            let mut conn = stingy(max);
            let written = [OK, BARE_400].concat();
            write_all(&mut conn, &written);
            let out = String::from_utf8(conn.tcp.written.clone()).unwrap_or_default();
            let (ok, replaced) = out.split_at(OK.len());
            assert_eq!(ok.as_bytes(), OK);
            assert!(
                replaced
                    .starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"),
                "{replaced}"
            );
            let Some((head, body)) = replaced.split_once("\r\n\r\n") else {
                panic!("no head in {replaced}")
            };
            assert!(
                head.contains(&format!("content-length: {}", body.len())),
                "{head}"
            );
            assert!(
                head.contains("date: Mon, 23 Nov 2026 04:29:39 GMT"),
                "{head}"
            );
            let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            assert_eq!(body["error"]["type"], "invalid_request");
            assert!(conn.swap.is_none(), "the replacement is done");
        }
    }

    #[test]
    fn ordinary_writes_pass_through_untouched() {
        let mut conn = stingy(5);
        write_all(&mut conn, OK);
        assert_eq!(conn.tcp.written, OK);
    }
}
