//! What a step works out from text a loop sends unchanged at every step (the tools segment, the
//! tags, the upstream URL), kept per thread for the last few inputs so that the next step of the
//! loop reuses it.
//! Keys are compared in full, never by hash: a hit is the same input, so the same result. No
//! lock: each HTTP worker keeps its own.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::thread::LocalKey;

/// Inputs longer than this are worked out every time, so that a thread's memo holds at most
/// `ENTRIES × MAX_KEY_BYTES` of keys.
pub const MAX_KEY_BYTES: usize = 32 * 1024;

/// Inputs remembered per memo and thread: as many loops as take turns on one worker.
const ENTRIES: usize = 8;

/// The last [`ENTRIES`] inputs and what was worked out from each, most recent first.
pub struct Memo<V> {
    entries: VecDeque<(Box<[Box<str>]>, V)>,
}

impl<V: Clone> Memo<V> {
    pub const fn new() -> Self {
        Self {
            entries: VecDeque::new(),
        }
    }

    fn get(&mut self, key: &[&str]) -> Option<V> {
        let at = self.entries.iter().position(|(k, _)| {
            k.len() == key.len() && k.iter().zip(key).all(|(a, b)| **a == **b)
        })?;
        let entry = self.entries.remove(at)?;
        let value = entry.1.clone();
        self.entries.push_front(entry);
        Some(value)
    }

    fn put(&mut self, key: &[&str], value: V) {
        if self.entries.len() == ENTRIES {
            self.entries.pop_back();
        }
        self.entries
            .push_front((key.iter().map(|k| Box::from(*k)).collect(), value));
    }
}

/// What `work` gives for `key`, from this thread's `memo` when the same key was seen lately.
pub fn remembered<V: Clone + 'static>(
    memo: &'static LocalKey<RefCell<Memo<V>>>,
    key: &[&str],
    work: impl FnOnce() -> V,
) -> V {
    if key.iter().map(|k| k.len()).sum::<usize>() > MAX_KEY_BYTES {
        return work();
    }
    if let Some(value) = memo.with_borrow_mut(|m| m.get(key)) {
        return value;
    }
    let value = work();
    memo.with_borrow_mut(|m| m.put(key, value.clone()));
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static MEMO: RefCell<Memo<usize>> = const { RefCell::new(Memo::new()) };
    }

    /// How many times `work` ran for these lookups, in order.
    fn runs(keys: &[&[&str]]) -> (Vec<usize>, usize) {
        MEMO.with_borrow_mut(|m| *m = Memo::new());
        let ran = Cell::new(0);
        let values = keys
            .iter()
            .map(|key| {
                remembered(&MEMO, key, || {
                    ran.set(ran.get() + 1);
                    key.iter()
                        .map(|k| k.len() * 10 + k.matches('x').count())
                        .sum()
                })
            })
            .collect();
        (values, ran.get())
    }

    #[test]
    fn the_same_key_is_worked_out_once() {
        let (values, ran) = runs(&[&["ab", "x"], &["ab", "x"], &["ab", "x"]]);
        assert_eq!(values, [31, 31, 31]);
        assert_eq!(ran, 1);
    }

    #[test]
    fn keys_that_join_alike_or_differ_late_are_different_keys() {
        // The same text split differently, one byte changed at the end, one part more.
        let (values, ran) = runs(&[
            &["abx", ""],
            &["ab", "x"],
            &["ab", "y"],
            &["ab", "x", ""],
            &["ab", "x"],
        ]);
        assert_eq!(values, [31, 31, 30, 31, 31]);
        assert_eq!(ran, 4, "only the repeated key is remembered");
    }

    #[test]
    fn the_least_recent_key_goes_first() {
        let keys: Vec<String> = (0..=ENTRIES).map(|i| i.to_string()).collect();
        let mut lookups: Vec<Vec<&str>> = keys.iter().map(|k| vec![k.as_str()]).collect();
        // The first key again, then the second: the second was pushed out by the last.
        lookups.push(vec![keys[0].as_str()]);
        lookups.push(vec![keys[1].as_str()]);
        let slices: Vec<&[&str]> = lookups.iter().map(Vec::as_slice).collect();
        let (_, ran) = runs(&slices);
        assert_eq!(ran, ENTRIES + 1 + 2);
        // Touching a key keeps it: the same again, with the first key read before the last.
        let mut lookups: Vec<Vec<&str>> =
            keys[..ENTRIES].iter().map(|k| vec![k.as_str()]).collect();
        lookups.push(vec![keys[0].as_str()]);
        lookups.push(vec![keys[ENTRIES].as_str()]);
        lookups.push(vec![keys[0].as_str()]);
        let slices: Vec<&[&str]> = lookups.iter().map(Vec::as_slice).collect();
        let (_, ran) = runs(&slices);
        assert_eq!(ran, ENTRIES + 1);
    }

    #[test]
    fn a_long_key_is_not_kept() {
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        let (values, ran) = runs(&[&[&long], &[&long]]);
        assert_eq!(values[0], values[1]);
        assert_eq!(ran, 2);
    }
}
