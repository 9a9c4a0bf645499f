//! Task ids: each range id owns a block of ids, so a new owner's ids are
//! above every id a previous owner could have used, and no id is handed
//! out twice in a partition.

/// Task ids per range id: range id `r` owns the ids
/// `[(r - 1) · ID_BLOCK_SIZE + 1, r · ID_BLOCK_SIZE]`. A new owner increments
/// the range id, so its ids are above every id a previous owner could have
/// used, and ids grow with time within a partition.
pub const ID_BLOCK_SIZE: i64 = 1 << 20;

/// The unused ids of the current block. Ids of a failed append are not reused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdBlock {
    next: i64,
    end: i64,
}

impl IdBlock {
    /// The ids of range id `range_id` (1 or more), none of them used yet.
    pub fn for_range(range_id: i64) -> IdBlock {
        assert!(range_id >= 1, "range ids start at 1");
        IdBlock { next: (range_id - 1) * ID_BLOCK_SIZE + 1, end: range_id * ID_BLOCK_SIZE }
    }

    /// How many ids are left to take.
    pub fn remaining(&self) -> i64 {
        self.end - self.next + 1
    }

    /// The lowest id not handed out yet: every id handed out in the
    /// partition is below it.
    pub fn next_unused(&self) -> i64 {
        self.next
    }

    /// The next id, if the block is not used up.
    pub fn take(&mut self) -> Option<i64> {
        (self.next <= self.end).then(|| {
            self.next += 1;
            self.next - 1
        })
    }
}

#[cfg(test)]
impl IdBlock {
    /// Uses every id of the block but the last `left` (for tests of a block
    /// that runs out).
    pub fn use_all_but(&mut self, left: i64) {
        self.next = self.next.max(self.end - left + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_do_not_overlap_and_grow() {
        let mut first = IdBlock::for_range(1);
        let mut second = IdBlock::for_range(2);
        assert_eq!(first.take(), Some(1));
        assert_eq!(second.take(), Some(ID_BLOCK_SIZE + 1));
        assert_eq!(first.remaining(), ID_BLOCK_SIZE - 1);
        first.use_all_but(3);
        assert_eq!(first.remaining(), 3);
    }

    #[test]
    fn a_block_runs_out() {
        let mut block = IdBlock::for_range(1);
        for _ in 0..ID_BLOCK_SIZE {
            assert!(block.take().is_some());
        }
        assert_eq!(block.take(), None);
    }
}
