//! Noticing that a client has left while its step runs. actix-web reads nothing from a
//! connection once the request body is in, so a client that disconnects goes unseen until the
//! answer is written, and the upstream call (with its retries, on the user's key) would run on to
//! the deadline. Each connection's socket is remembered when it opens; a step watches a duplicate
//! of it for the peer's close (`EPOLLRDHUP` on Linux), and is dropped, upstream request and all, at once.
//!
//! A client that only half-closes (shuts down its writing side and waits for the answer) counts
//! as gone, as it does for nginx; HTTP clients do not do that.
//!
//! The watch starts [`WATCH_AFTER`] into the step: duplicating the socket, registering it and
//! taking it back out are four system calls, a third of all a step makes, and a step answered
//! sooner (a fast local model, `mock_response`, a refusal) needs none of them. A client that
//! leaves earlier is noticed then.

use std::future::Future;
use std::time::Duration;

use actix_web::dev::Extensions;
use actix_web::HttpRequest;

/// How long a step runs before its client's connection is watched.
pub const WATCH_AFTER: Duration = Duration::from_millis(50);

/// The connection's socket, as a raw descriptor: owned by the connection, which outlives every
/// request handled on it.
#[cfg(unix)]
#[derive(Clone, Copy)]
struct PeerSocket(std::os::fd::RawFd);

/// For `HttpServer::on_connect`: remembers a plain TCP connection's socket.
pub fn remember(connection: &dyn std::any::Any, extensions: &mut Extensions) {
    #[cfg(unix)]
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        use std::os::fd::AsRawFd;
        extensions.insert(PeerSocket(tcp.as_raw_fd()));
    }
    #[cfg(not(unix))]
    let _ = (connection, extensions);
}

/// Resolves once the request's client has closed its connection; never when that cannot be
/// watched. Call it while the request is being handled (its connection is then open).
pub fn gone(req: &HttpRequest) -> impl Future<Output = ()> + 'static {
    use futures_util::FutureExt;
    #[cfg(unix)]
    let socket = req.conn_data::<PeerSocket>().copied();
    #[cfg(not(unix))]
    let socket: Option<()> = None;
    // Not an async block: that would hold the watch twice (captured, and as what it awaits)
    // for as long as the step runs.
    tokio::time::sleep(WATCH_AFTER).then(move |()| match socket.and_then(watch) {
        Some(closed) => futures_util::future::Either::Left(closed),
        None => futures_util::future::Either::Right(std::future::pending()),
    })
}

/// Runs `work` until it ends or the client leaves (`None`); the caller drops it then. `work`
/// comes pinned by reference: an `async fn` keeps its arguments for its whole life, so taking
/// the step's future by value would hold it twice (kilobytes per step in flight).
pub async fn unless_gone<T>(
    req: &HttpRequest,
    work: std::pin::Pin<&mut impl Future<Output = T>>,
) -> Option<T> {
    let gone = gone(req);
    tokio::select! {
        out = work => Some(out),
        () = gone => {
            tracing::info!("the client disconnected; its step was stopped");
            None
        }
    }
}

#[cfg(not(unix))]
fn watch(_: ()) -> Option<std::future::Pending<()>> {
    None
}

#[cfg(unix)]
fn watch(socket: PeerSocket) -> Option<impl Future<Output = ()> + 'static> {
    use std::os::fd::BorrowedFd;
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    // SAFETY: the descriptor belongs to the connection this request arrived on, which is open
    // while the request is handled; the duplicate made here is ours to own and close.
    let own = unsafe { BorrowedFd::borrow_raw(socket.0) }
        .try_clone_to_owned()
        .ok()?;
    // SAFETY: `own` is an `OwnedFd`: open until the `AsyncFd` holding it drops it, and its
    // descriptor never changes.
    let fd = unsafe { AsyncFd::register_with_interest(own, Interest::READABLE) }.ok()?;
    Some(async move {
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            // Readable alone is the next pipelined request's bytes: not a close.
            if ready.ready().is_read_closed() {
                return;
            }
            ready.clear_ready();
        }
    })
}
