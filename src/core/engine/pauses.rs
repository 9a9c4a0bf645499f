//! The fairness keys of a partition that the operator paused (`PauseQueue`,
//! the whole queue or some keys): none of their tasks is handed out, and
//! the others go on as past a key at its limits. A paused key is held like
//! one at its concurrency limit: its tasks stay in the buffer, and once it
//! holds the ack level back with `engine.park_after` tasks dispatched above
//! it, they are parked (docs/fairness.md §5c), so that the ack level moves
//! on. On resume they come back as a parked key's do.
//!
//! Invariant: pauses are a filter on which keys may start a task; they move
//! no task and change no pass.

use std::collections::BTreeSet;

/// Which keys are paused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pauses {
    all: bool,
    keys: BTreeSet<String>,
}

impl Pauses {
    /// Every key paused when `all`, else those of `keys`.
    pub fn new(all: bool, keys: impl IntoIterator<Item = String>) -> Pauses {
        Pauses { all, keys: keys.into_iter().collect() }
    }

    /// Whether any key is paused.
    pub fn any(&self) -> bool {
        self.all || !self.keys.is_empty()
    }

    /// Whether the whole queue is paused.
    pub fn holds_all(&self) -> bool {
        self.all
    }

    /// Whether `key` is paused.
    pub fn holds(&self, key: &str) -> bool {
        self.all || (!self.keys.is_empty() && self.keys.contains(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_holds_its_keys_and_a_whole_queue_pause_holds_every_key() {
        let none = Pauses::default();
        assert!(!none.any() && !none.holds(""));
        let some = Pauses::new(false, [String::new(), "acme".to_owned()]);
        assert!(some.any() && some.holds("") && some.holds("acme") && !some.holds("acme/2"));
        let all = Pauses::new(true, []);
        assert!(all.any() && all.holds("anything"));
    }
}
