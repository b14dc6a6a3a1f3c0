//! The person at the terminal, as lines of input: approvals and an MCP server's questions are
//! read from it. The input is read on a thread of its own, so a person who never answers holds
//! up neither Ctrl-C, nor the loop's deadline, nor the exit.

use std::io::BufRead;

use tokio::sync::{mpsc, Mutex, MutexGuard};

/// Lines typed so far and to come; `None` from [`Conversation::line`] once the input has ended.
pub struct Terminal {
    lines: Mutex<mpsc::Receiver<String>>,
}

/// The terminal held by one exchange (a question and its follow-ups), so two never interleave.
pub struct Conversation<'a>(MutexGuard<'a, mpsc::Receiver<String>>);

impl Conversation<'_> {
    /// The next line typed; `None` once the input has ended, when the prompt that asked for it
    /// gets its line ended, so what is printed next starts a line of its own.
    pub async fn line(&mut self) -> Option<String> {
        let line = self.0.recv().await;
        if line.is_none() {
            eprintln!();
        }
        line
    }
}

impl Terminal {
    pub fn stdin() -> Self {
        Self::reading(std::io::BufReader::new(std::io::stdin()))
    }

    pub fn reading(input: impl BufRead + Send + 'static) -> Self {
        let (sender, lines) = mpsc::channel(16);
        let spawned = std::thread::Builder::new()
            .name("reactstep-terminal".into())
            .spawn(move || {
                for line in input.lines() {
                    let Ok(line) = line else { break };
                    if sender.blocking_send(line).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            // The sender went with the closure: the input reads as ended.
            tracing::warn!("the terminal cannot be read: {e}");
        }
        Self {
            lines: Mutex::new(lines),
        }
    }

    pub async fn conversation(&self) -> Conversation<'_> {
        Conversation(self.lines.lock().await)
    }
}
