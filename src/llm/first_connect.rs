//! One connection attempt at a time to a host whose protocol is not known yet, so that a burst
//! against a cold pool opens one HTTP/2 connection instead of one per call.
//!
//! A call that finds no pooled connection starts its own connect, and keeps waiting for a
//! pooled one at the same time (hyper-util's pool). Over TLS the protocol is only learned once
//! the handshake ends, so every call of a burst that arrives during the first handshake opens a
//! connection of its own: thousands of TLS handshakes on a loaded machine, each ending in an
//! HTTP/2 connection of which one would have served them all (13 KiB of buffers each, about
//! 50 MiB for a 5,000-step burst). Here a connect that finds another to the same destination
//! under way waits for it:
//! - if that one ends in HTTP/2, the waiting call takes the shared connection from the pool, and
//!   this attempt is not made: it stays pending until the connect timeout ends it (hyper-util
//!   keeps a started attempt running only to pool its result);
//! - if it ends in HTTP/1.1 (one call per connection), or fails, the attempt goes ahead, and an
//!   HTTP/1.1 destination is not made to wait again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use hyper_util::client::legacy::connect::Connection;
use tokio::sync::watch;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a connect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Http2,
    Http1,
    Failed,
}

/// What is known of a destination.
#[derive(Debug)]
enum Destination {
    /// A connect is under way; its outcome will be sent.
    Connecting(watch::Receiver<Option<Outcome>>),
    /// It answered over HTTP/1.1: every call needs a connection of its own.
    Http1,
}

type Destinations = Arc<Mutex<HashMap<String, Destination>>>;

/// HTTP/1.1 destinations remembered at most. A base URL pattern the operator allows
/// (`https://*.openai.azure.com`) names any number of hosts; past this many, an HTTP/1.1 one
/// is not remembered, and its connects wait for each other as for an unknown one.
const REMEMBERED_HTTP1: usize = 1024;

/// The layer for `reqwest::ClientBuilder::connector_layer`: one per client, as each client has
/// its own pool.
#[derive(Debug, Clone, Default)]
pub struct FirstConnectLayer {
    destinations: Destinations,
}

impl<S> tower_layer::Layer<S> for FirstConnectLayer {
    type Service = FirstConnect<S>;

    fn layer(&self, inner: S) -> FirstConnect<S> {
        FirstConnect {
            inner,
            destinations: self.destinations.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FirstConnect<S> {
    inner: S,
    destinations: Destinations,
}

/// A connect's part: the first to a destination, one that waits for it, or one on its own.
enum Role {
    First(Reporter),
    Waiting(watch::Receiver<Option<Outcome>>),
    Alone,
}

impl<S, R> tower_service::Service<R> for FirstConnect<S>
where
    S: tower_service::Service<R, Error = BoxError> + Clone + Send + 'static,
    S::Response: Connection + Send,
    S::Future: Send,
    R: std::fmt::Debug + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, destination: R) -> Self::Future {
        // reqwest's destination type is sealed: its debug form (the URI) is the key.
        let role = role_for(&self.destinations, format!("{destination:?}"));
        // The service that was made ready goes with the call; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            match role {
                Role::Alone => inner.call(destination).await,
                Role::First(reporter) => {
                    let connected = inner.call(destination).await;
                    reporter.report(match &connected {
                        Ok(c) if c.connected().is_negotiated_h2() => Outcome::Http2,
                        Ok(_) => Outcome::Http1,
                        Err(_) => Outcome::Failed,
                    });
                    connected
                }
                Role::Waiting(mut outcome) => {
                    let ended = outcome.wait_for(Option::is_some).await.map(|o| *o);
                    if let Ok(Some(Outcome::Http2)) = ended {
                        // The call this attempt was started for takes the shared connection.
                        std::future::pending::<()>().await;
                    }
                    inner.call(destination).await
                }
            }
        })
    }
}

/// The part a new connect to `key` plays, noted in `destinations`.
fn role_for(destinations: &Destinations, key: String) -> Role {
    let Ok(mut known) = destinations.lock() else {
        return Role::Alone;
    };
    match known.get(&key) {
        Some(Destination::Http1) => Role::Alone,
        Some(Destination::Connecting(outcome)) => Role::Waiting(outcome.clone()),
        None => {
            let (sender, receiver) = watch::channel(None);
            known.insert(key.clone(), Destination::Connecting(receiver));
            Role::First(Reporter {
                key,
                sender,
                destinations: destinations.clone(),
                reported: false,
            })
        }
    }
}

/// Tells the connects waiting on the first how it ended, also when it is dropped unfinished
/// (by the connect timeout), so that none waits for an outcome that never comes.
struct Reporter {
    key: String,
    sender: watch::Sender<Option<Outcome>>,
    destinations: Destinations,
    reported: bool,
}

impl Reporter {
    fn report(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome) {
        if self.reported {
            return;
        }
        self.reported = true;
        if let Ok(mut known) = self.destinations.lock() {
            if outcome == Outcome::Http1 && known.len() <= REMEMBERED_HTTP1 {
                known.insert(self.key.clone(), Destination::Http1);
            } else {
                // Unknown again: the next connect, when the pool has none, goes first.
                known.remove(&self.key);
            }
        }
        self.sender.send_replace(Some(outcome));
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.finish(Outcome::Failed);
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    fn first(destinations: &Destinations, key: &str) -> Reporter {
        match role_for(destinations, key.into()) {
            Role::First(reporter) => reporter,
            _ => panic!("{key}: not the first"),
        }
    }

    fn waiting(destinations: &Destinations, key: &str) -> watch::Receiver<Option<Outcome>> {
        match role_for(destinations, key.into()) {
            Role::Waiting(outcome) => outcome,
            _ => panic!("{key}: not waiting"),
        }
    }

    #[test]
    fn a_connect_waits_only_for_one_to_the_same_destination() {
        let destinations = Destinations::default();
        let _a = first(&destinations, "https://a/");
        let _b = first(&destinations, "https://b/");
        let waiter = waiting(&destinations, "https://a/");
        assert_eq!(*waiter.borrow(), None);
    }

    #[test]
    fn an_http2_outcome_is_told_and_the_next_connect_goes_first_again() {
        let destinations = Destinations::default();
        let reporter = first(&destinations, "https://a/");
        let waiter = waiting(&destinations, "https://a/");
        reporter.report(Outcome::Http2);
        assert_eq!(*waiter.borrow(), Some(Outcome::Http2));
        // The pool asks for a connect only when it has none left to share.
        let _again = first(&destinations, "https://a/");
    }

    #[test]
    fn an_http1_destination_is_never_made_to_wait_again() {
        let destinations = Destinations::default();
        let reporter = first(&destinations, "https://a/");
        let waiter = waiting(&destinations, "https://a/");
        reporter.report(Outcome::Http1);
        assert_eq!(*waiter.borrow(), Some(Outcome::Http1));
        assert!(matches!(
            role_for(&destinations, "https://a/".into()),
            Role::Alone
        ));
    }

    #[test]
    fn http1_destinations_past_the_bound_are_not_remembered() {
        let destinations = Destinations::default();
        for n in 0..=REMEMBERED_HTTP1 + 10 {
            first(&destinations, &format!("https://h{n}/")).report(Outcome::Http1);
        }
        assert_eq!(destinations.lock().unwrap().len(), REMEMBERED_HTTP1);
        // One past the bound is unknown again: it goes first, not alone.
        let _ = first(
            &destinations,
            &format!("https://h{}/", REMEMBERED_HTTP1 + 5),
        );
    }

    #[test]
    fn a_first_connect_dropped_unfinished_releases_its_waiters() {
        let destinations = Destinations::default();
        let reporter = first(&destinations, "https://a/");
        let waiter = waiting(&destinations, "https://a/");
        drop(reporter);
        assert_eq!(*waiter.borrow(), Some(Outcome::Failed));
        assert!(destinations.lock().unwrap().is_empty());
    }
}
