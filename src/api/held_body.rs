//! An answer's bytes, still counted against the memory budget while the connection writes them:
//! a client that never reads its answer would otherwise leave the bytes in the server's buffers
//! uncounted, and 60 such clients held 777 MiB under a budget of 256 MiB. Small answers are
//! not counted: a typical step's (5 KB) goes out at once, and counting it costs a step.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;

use crate::runtime::memory_budget::{Held, MemoryBudget};

/// Below this, an answer is written as plain bytes.
pub(super) const COUNTED_FROM: usize = 64 * 1024;

pub struct HeldBody {
    bytes: Option<Bytes>,
    len: u64,
    /// The answer's own bytes, given back once it is written.
    answer: Option<Held>,
    /// The request body's hold, kept as long.
    body: Option<Arc<Held>>,
}

impl HeldBody {
    /// `bytes`, counted (with the request body's hold) until they are written when large.
    pub fn new(bytes: Bytes, memory: &Arc<MemoryBudget>, body: Option<Arc<Held>>) -> Self {
        let mut this = Self::keeping(bytes, body);
        if this.len >= COUNTED_FROM as u64 {
            this.answer = Some(memory.hold_anyway(this.len as usize));
        }
        this
    }

    /// `bytes` (an error's answer, which echoes the request's history), with only the request
    /// body's hold kept until they are written when large.
    pub fn keeping(bytes: Bytes, body: Option<Arc<Held>>) -> Self {
        let len = bytes.len();
        Self {
            bytes: Some(bytes),
            len: len as u64,
            answer: None,
            body: body.filter(|_| len >= COUNTED_FROM),
        }
    }
}

impl MessageBody for HeldBody {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        BodySize::Sized(self.len)
    }

    fn poll_next(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Poll::Ready(self.get_mut().bytes.take().map(Ok))
    }

    fn try_into_bytes(self) -> Result<Bytes, Self> {
        match (&self.answer, &self.body, &self.bytes) {
            (None, None, Some(bytes)) => Ok(bytes.clone()),
            _ => Err(self),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_large_answer_is_held_until_written_and_a_small_one_not_at_all() {
        let memory = MemoryBudget::new(1 << 30);
        let body = Some(Arc::new(memory.hold(1000).unwrap()));
        let large = HeldBody::new(Bytes::from(vec![b'x'; 100_000]), &memory, body);
        assert_eq!(memory.held(), 101_000);
        let written = actix_web::body::to_bytes(large).await.unwrap();
        assert_eq!(written.len(), 100_000);
        assert_eq!(memory.held(), 0, "given back once written");
        let small = HeldBody::new(Bytes::from_static(b"{}"), &memory, None);
        assert_eq!(memory.held(), 0);
        assert_eq!(small.try_into_bytes().ok(), Some(Bytes::from_static(b"{}")));
    }
}
