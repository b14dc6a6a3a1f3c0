//! When the service stops. A stop signal gives the requests in flight the grace period
//! (`REACTSTEP_SHUTDOWN_GRACE_SECS`); at its end the server drops their connections. A step still
//! running by then would end with no answer at all (a stream without its terminal event), so
//! each is answered `shutting_down`, retryable, a little before: the client tries again, on a
//! replica that is not stopping.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The moment requests in flight are cut at, once the service is stopping; read by handlers.
#[derive(Clone, Debug)]
pub struct Stopping(watch::Receiver<Option<Instant>>);

/// Sets when the service stops; held by what catches the stop signal.
#[derive(Debug)]
pub struct Stopper(watch::Sender<Option<Instant>>);

/// A pair that never stops until [`Stopper::stop`] is called.
pub fn stopping() -> (Stopper, Stopping) {
    let (sender, receiver) = watch::channel(None);
    (Stopper(sender), Stopping(receiver))
}

/// What is left of the grace period for the cut answer to be written: a second, or half of a
/// shorter grace period.
fn margin(grace: Duration) -> Duration {
    (grace / 2).min(Duration::from_secs(1))
}

impl Stopper {
    /// The service stops now, with `grace` for the requests in flight.
    pub fn stop(&self, grace: Duration) {
        // The setting is bounded to a day; a grace past the clock's end is a day too.
        let now = Instant::now();
        let cut = now
            .checked_add(grace.saturating_sub(margin(grace)))
            .unwrap_or(now + Duration::from_secs(86_400));
        self.0.send_replace(Some(cut));
    }
}

impl Stopping {
    /// `work`'s output, or `None` once the stop cuts it. The wait for the cut is boxed: every
    /// step in flight holds this future while the model answers, and unboxed the wait (a
    /// timer, a channel's receiver) made it some 700 bytes larger.
    /// `work` is pinned where it is: moved in, it would be held twice.
    pub async fn before_cut<F: std::future::Future + ?Sized>(
        &self,
        work: std::pin::Pin<&mut F>,
    ) -> Option<F::Output> {
        let cut = Box::pin(self.clone().cut());
        tokio::select! {
            done = work => Some(done),
            () = cut => None,
        }
    }

    /// Resolves when a request still in flight must be answered: never, unless the service
    /// stops.
    pub async fn cut(self) {
        let mut receiver = self.0;
        let at = loop {
            if let Some(at) = *receiver.borrow_and_update() {
                break at;
            }
            if receiver.changed().await.is_err() {
                // No stopper left: nothing will stop the service from here.
                std::future::pending::<()>().await;
            }
        };
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_leaves_a_second_or_half_the_grace_to_answer() {
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(margin(Duration::from_secs(1)), Duration::from_millis(500));
        assert_eq!(margin(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_cut_only_once_the_service_stops_and_before_the_grace_ends() {
        let (stopper, stopping) = stopping();
        let waiting = tokio::spawn(stopping.clone().cut());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!waiting.is_finished(), "cut with no stop");
        let stopped = Instant::now();
        stopper.stop(Duration::from_secs(10));
        waiting.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stopped.elapsed(), Duration::from_secs(9));
        // A request that arrives once the cut has passed is cut at once.
        let never = std::pin::pin!(std::future::pending::<()>());
        assert_eq!(stopping.before_cut(never).await, None);
        assert_eq!(stopped.elapsed(), Duration::from_secs(9));
    }
}
