//! Strict priority levels: a [`Priority`] is 1 (highest) to
//! [`PRIORITY_LEVELS`] (lowest), each level a subqueue of its own.
//!
//! Invariant: a `Priority` is always within 1..=[`PRIORITY_LEVELS`] (its
//! constructor refuses any other value).

use std::fmt;

/// How many strict priority levels a queue has.
pub const PRIORITY_LEVELS: usize = 5;

/// A strict priority level, 1 (highest) to 5 (lowest). Every level of a
/// partition is its own subqueue with its own levels and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// Priority 1, dispatched before every other level.
    pub const HIGHEST: Priority = Priority(1);
    /// Priority 3, what a task gets when it names none (0).
    pub const DEFAULT: Priority = Priority(3);
    /// Priority 5, dispatched only when every other level is empty.
    pub const LOWEST: Priority = Priority(PRIORITY_LEVELS as u8);

    /// `None` unless `value` is in 1..=5.
    pub fn new(value: u32) -> Option<Priority> {
        (1..=PRIORITY_LEVELS as u32).contains(&value).then_some(Priority(value as u8))
    }

    /// The level's number, 1 (highest) to 5 (lowest).
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }

    /// 0 for the highest level: the index of its subqueue.
    pub fn index(self) -> usize {
        usize::from(self.0 - 1)
    }

    /// The priority whose subqueue index is `index` (0 for the highest); panics
    /// unless `index` is below [`PRIORITY_LEVELS`].
    pub fn from_index(index: usize) -> Priority {
        assert!(index < PRIORITY_LEVELS, "priority index {index} out of range");
        Priority(index as u8 + 1)
    }

    /// Every priority, highest first.
    pub fn all() -> impl Iterator<Item = Priority> {
        (0..PRIORITY_LEVELS).map(Priority::from_index)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
