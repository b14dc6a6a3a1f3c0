//! What ends a command early and cleanly: Ctrl-C (SIGINT), and the terminal closing (SIGHUP),
//! a process manager's SIGTERM or SIGQUIT. Each ends the loop as Ctrl-C does, so what it did
//! is reported and, in a session, saved.

use tokio::signal::unix::{signal, Signal, SignalKind};

pub struct Interrupts {
    kinds: Vec<Signal>,
}

impl Interrupts {
    /// Caught from here on, or why they cannot be.
    pub fn catch() -> Result<Self, String> {
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
            SignalKind::quit(),
        ];
        let kinds = kinds
            .into_iter()
            .map(signal)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("Ctrl-C cannot be caught: {e}"))?;
        Ok(Self { kinds })
    }

    /// The next interrupt; `None` once none can come.
    pub async fn recv(&mut self) -> Option<()> {
        let waits = self.kinds.iter_mut().map(|s| Box::pin(s.recv()));
        futures_util::future::select_all(waits).await.0
    }
}
