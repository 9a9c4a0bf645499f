//! [`FairLevel`]: the position of a task in its subqueue, `(pass, id)`.
//!
//! Invariant: levels are ordered lexicographically, and that is the order
//! in which stores return tasks and the matcher dispatches them.

use std::fmt;

/// The position of a task in its subqueue: `(pass, id)`, ordered
/// lexicographically. Stores return tasks in this order and the matcher
/// dispatches in it; the pass spreads the tasks of each fairness key, the id
/// breaks ties in write order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FairLevel {
    /// The pass of stride scheduling (see [`crate::core::fairness`]): lower
    /// passes are dispatched first.
    pub pass: i64,
    /// An id from the owner's id block: unique in the partition, growing
    /// with write order.
    pub id: i64,
}

impl FairLevel {
    /// Below every level a task can have; the ack level of a new subqueue.
    pub const ZERO: FairLevel = FairLevel { pass: 0, id: 0 };
    /// Above every level a task can have.
    pub const MAX: FairLevel = FairLevel { pass: i64::MAX, id: i64::MAX };

    /// The level `(pass, id)`.
    pub const fn new(pass: i64, id: i64) -> Self {
        FairLevel { pass, id }
    }

    /// The greatest level strictly below `self`: reading "after" it returns
    /// `self` again. Used to make a reader look at a level once more.
    pub fn predecessor(self) -> FairLevel {
        if self.id > i64::MIN {
            FairLevel::new(self.pass, self.id - 1)
        } else {
            FairLevel::new(self.pass - 1, i64::MAX)
        }
    }
}

impl fmt::Display for FairLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.pass, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_pass_then_id() {
        assert!(FairLevel::new(1, 9) < FairLevel::new(2, 1));
        assert!(FairLevel::new(2, 1) < FairLevel::new(2, 2));
        assert!(FairLevel::ZERO < FairLevel::new(0, 1));
    }

    #[test]
    fn predecessor_is_just_below() {
        let level = FairLevel::new(5, 7);
        assert!(level.predecessor() < level);
        assert_eq!(level.predecessor(), FairLevel::new(5, 6));
        assert!(FairLevel::new(5, i64::MIN).predecessor() < FairLevel::new(5, i64::MIN));
    }
}
