//! A bounded sketch of next passes for keys not tracked exactly: it may
//! delay a key, never advance it.

use crate::hash::{fnv1a, splitmix64};

/// A count-min-shaped sketch of next passes for keys not tracked exactly.
///
/// Each of `DEPTH` rows maps a key to one cell by its own hash; a cell holds
/// the largest next pass written to it. A key's estimate is the smallest of
/// its cells, so it is never below the key's true next pass (conservative
/// update: every cell of a key is raised to at least its value). A key whose
/// cell in some row holds no other key is estimated exactly; only a key that
/// shares a cell in every row can be delayed, and never advanced.
#[derive(Clone, Debug)]
pub struct PassSketch {
    width: usize,
    cells: Vec<i64>,
    max_value: i64,
}

/// Rows of the sketch.
pub(super) const DEPTH: usize = 4;

impl PassSketch {
    /// An empty sketch of `width` cells per row; panics if `width` is 0.
    pub fn new(width: usize) -> Self {
        assert!(width > 0, "sketch width must be positive");
        PassSketch { width, cells: vec![i64::MIN; width * DEPTH], max_value: i64::MIN }
    }

    /// Cells per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The cell index of `key` in each row.
    pub fn cells_of(&self, key: &str) -> [usize; DEPTH] {
        let h = fnv1a(key.bytes());
        std::array::from_fn(|row| {
            let mixed = splitmix64(h ^ (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            row * self.width + (mixed % self.width as u64) as usize
        })
    }

    /// An upper bound of the key's next pass; `None` if no key was written to
    /// any of its cells.
    pub fn estimate(&self, key: &str) -> Option<i64> {
        let est = self.cells_of(key).iter().map(|&c| self.cells[c]).min().expect("DEPTH > 0");
        (est != i64::MIN).then_some(est)
    }

    /// Raises every cell of `key` to at least `next_pass`.
    pub fn raise(&mut self, key: &str, next_pass: i64) {
        for c in self.cells_of(key) {
            let cell = &mut self.cells[c];
            *cell = (*cell).max(next_pass);
        }
        self.max_value = self.max_value.max(next_pass);
    }

    /// True when no estimate can exceed `base`: the sketch then says nothing
    /// that `max(base, …)` would not, and can be dropped.
    pub fn is_spent(&self, base: i64) -> bool {
        self.max_value <= base
    }

    /// The memory the cells take, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<i64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_never_below_what_was_written() {
        let mut sketch = PassSketch::new(8);
        for i in 0..200 {
            sketch.raise(&format!("k{i}"), i);
        }
        for i in 0..200 {
            assert!(sketch.estimate(&format!("k{i}")).unwrap() >= i);
        }
    }

    #[test]
    fn a_lone_key_is_exact() {
        let mut sketch = PassSketch::new(1024);
        sketch.raise("only", 42);
        assert_eq!(sketch.estimate("only"), Some(42));
        assert!(sketch.is_spent(42));
        assert!(!sketch.is_spent(41));
    }
}
