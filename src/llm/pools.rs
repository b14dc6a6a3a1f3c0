//! The connection pools upstream calls are spread over. Over HTTP/2 a pool keeps one connection
//! per host, and when the server's limit on streams per connection is reached hyper queues the
//! next call on that connection instead of opening another. One pool would therefore cap a busy
//! service at one provider's streams per connection (commonly 100 to 256); several pools, taken
//! in turn, multiply that cap. Over HTTP/1.1 nothing changes but which pool a connection sits in.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct Pools {
    clients: Box<[reqwest::Client]>,
    next: AtomicUsize,
}

impl Pools {
    /// `count` pools (at least one), each client made by `build`.
    pub fn new(
        count: usize,
        build: impl Fn() -> Result<reqwest::Client, reqwest::Error>,
    ) -> Result<Self, reqwest::Error> {
        let clients = (0..count.max(1))
            .map(|_| build())
            .collect::<Result<_, _>>()?;
        Ok(Self {
            clients,
            next: AtomicUsize::new(0),
        })
    }

    /// The pool for the next call.
    pub fn next(&self) -> &reqwest::Client {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        &self.clients[turn % self.clients.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_take_the_pools_in_turn() {
        let pools = Pools::new(3, || reqwest::Client::builder().build()).unwrap_or_else(|e| {
            panic!("a client builds: {e}");
        });
        let first: Vec<*const reqwest::Client> = (0..3).map(|_| pools.next() as *const _).collect();
        let second: Vec<*const reqwest::Client> =
            (0..3).map(|_| pools.next() as *const _).collect();
        assert_eq!(first, second, "the fourth call goes where the first went");
        assert!(first[0] != first[1] && first[1] != first[2] && first[0] != first[2]);
    }

    #[test]
    fn zero_pools_means_one() {
        let pools = Pools::new(0, || reqwest::Client::builder().build()).unwrap_or_else(|e| {
            panic!("a client builds: {e}");
        });
        assert!(std::ptr::eq(pools.next(), pools.next()));
    }
}
