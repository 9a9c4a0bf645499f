//! One fair order across the partitions of a queue that one node holds.
//!
//! Each partition orders its own tasks by pass (stride scheduling, see the
//! parent module), but the passes of two partitions are unrelated numbers.
//! [`PartitionClocks`] maps each partition's passes onto one clock per
//! priority level: a partition that starts offering tasks at some level is
//! placed at that level's clock (the rank of the last task dispatched at
//! it), and from then on its tasks rank at their pass plus that partition's
//! offset. Taking the lowest rank across partitions then serves every
//! backlogged key of every partition in turn, as one partition would: a
//! partition's passes advance by `S / W` per task dispatched, `W` the weight
//! of its backlogged keys, so a partition of many keys is offered more
//! turns than one of few.
//!
//! A partition that is not ready for a moment (a read of its backlog or a
//! write in flight) while it still holds tasks keeps its offset, so its
//! tasks rank below the clock when it is ready again and it gets back the
//! turns it missed, up to [`CATCH_UP`] passes (two tasks of each weight-1
//! key): a partition that stalls never loses its share, and one that was
//! away long gains at most that much on the others. A partition with
//! nothing to offer at a level loses its offset there and comes back at the
//! clock, as an idle key comes back at the ack level.
//!
//! Invariants: the clock of a level never goes back; no rank handed out is
//! below its level's clock minus [`CATCH_UP`]; the state is bounded by the
//! partitions the caller keeps (see [`PartitionClocks::retain`]).

use std::collections::HashMap;

use super::STRIDE_SCALE;
use crate::model::{PRIORITY_LEVELS, Priority};

/// How far behind the clock a partition's tasks may rank: two strides of a
/// weight-1 key.
pub const CATCH_UP: i64 = 2 * STRIDE_SCALE;

/// The clocks of one queue's priority levels and each partition's offset
/// onto them. See the module docs.
#[derive(Debug, Default)]
pub struct PartitionClocks {
    clocks: [i64; PRIORITY_LEVELS],
    offsets: HashMap<u32, [Option<i64>; PRIORITY_LEVELS]>,
}

impl PartitionClocks {
    /// Partition `partition` offers nothing at any level more urgent than
    /// `first` (nothing at all when `None`): it loses its offsets there.
    pub fn idle_before(&mut self, partition: u32, first: Option<Priority>) {
        let Some(offsets) = self.offsets.get_mut(&partition) else { return };
        let end = first.map_or(PRIORITY_LEVELS, Priority::index);
        offsets[..end].fill(None);
        if offsets.iter().all(Option::is_none) {
            self.offsets.remove(&partition);
        }
    }

    /// The rank on the clock of `priority` of a task at `pass` that
    /// `partition` offers: placed at the clock if the partition had no
    /// offset at that level, and never below the clock minus [`CATCH_UP`].
    pub fn rank(&mut self, partition: u32, priority: Priority, pass: i64) -> i64 {
        let clock = self.clocks[priority.index()];
        let offset = self.offsets.entry(partition).or_default()[priority.index()]
            .get_or_insert_with(|| clock.saturating_sub(pass));
        let floor = clock.saturating_sub(CATCH_UP);
        let rank = pass.saturating_add(*offset);
        if rank < floor {
            *offset = offset.saturating_add(floor - rank);
            return floor;
        }
        rank
    }

    /// A task of `priority` at `rank` (from [`Self::rank`]) was dispatched.
    pub fn dispatched(&mut self, priority: Priority, rank: i64) {
        let clock = &mut self.clocks[priority.index()];
        *clock = (*clock).max(rank);
    }

    /// Forgets the partitions for which `held` is false.
    pub fn retain(&mut self, held: impl Fn(u32) -> bool) {
        self.offsets.retain(|partition, _| held(*partition));
    }

    /// The partitions with an offset at some level.
    pub fn tracked(&self) -> usize {
        self.offsets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fairness::stride;

    const P: Priority = Priority::LOWEST;

    /// Backlogged partitions, `keys[p]` weight-1 keys each, every key's
    /// tasks a stride apart from `start[p]`: the lowest rank goes, with
    /// `ready(p, round)` saying whether partition p can offer its task at
    /// that round. Returns the tasks dispatched from each partition.
    fn serve(keys: &[i64], start: &[i64], rounds: usize, ready: impl Fn(usize, usize) -> bool) -> Vec<i64> {
        let mut clocks = PartitionClocks::default();
        let step: Vec<i64> = keys.iter().map(|k| STRIDE_SCALE / k).collect();
        let mut pass: Vec<i64> = start.to_vec();
        let mut served = vec![0; keys.len()];
        for round in 0..rounds {
            let mut best: Option<(i64, usize)> = None;
            for (p, &pass) in pass.iter().enumerate() {
                if !ready(p, round) {
                    continue;
                }
                let rank = clocks.rank(p as u32, P, pass);
                if best.is_none_or(|(r, _)| rank < r) {
                    best = Some((rank, p));
                }
            }
            let Some((rank, p)) = best else { continue };
            clocks.dispatched(P, rank);
            pass[p] += step[p];
            served[p] += 1;
        }
        served
    }

    #[test]
    fn partitions_are_served_in_proportion_to_their_backlogged_keys() {
        // Passes start far apart: they mean nothing across partitions.
        let served = serve(&[1, 3, 6], &[0, 1 << 40, 7 << 30], 10_000, |_, _| true);
        for (p, keys) in [1, 3, 6].into_iter().enumerate() {
            let share = 10_000 * keys / 10;
            assert!((served[p] - share).abs() <= 2, "partition {p}: {} of {share}", served[p]);
        }
    }

    #[test]
    fn a_partition_that_stalls_gets_its_missed_turns_back_up_to_the_catch_up() {
        // Two partitions of 100 keys; partition 1 is not ready for rounds
        // 1,000 to 1,099 (it would have had 50 of them): it gets them back.
        let stall = |p: usize, round: usize| p == 0 || !(1_000..1_100).contains(&round);
        let served = serve(&[100, 100], &[0, 0], 4_000, stall);
        assert!((served[1] - 2_000).abs() <= 1, "{served:?}");
        // Stalled for 1,000 rounds (500 turns missed), it gets back what
        // the catch-up allows: two tasks of each of its 100 keys, served
        // first, then turns alternate again over the 3,800 rounds left.
        let stall = |p: usize, round: usize| p == 0 || !(1_000..2_000).contains(&round);
        let served = serve(&[100, 100], &[0, 0], 6_000, stall);
        let catch_up = 200;
        assert!((served[1] - (500 + catch_up + (4_000 - catch_up) / 2)).abs() <= 2, "{served:?}");
    }

    #[test]
    fn a_partition_back_from_idle_starts_at_the_clock() {
        let mut clocks = PartitionClocks::default();
        assert_eq!(clocks.rank(0, P, 5_000), 0, "the first partition is placed at the clock");
        clocks.dispatched(P, 0);
        for pass in (5_000..).step_by(stride(1.0) as usize).take(10) {
            let rank = clocks.rank(0, P, pass);
            clocks.dispatched(P, rank);
        }
        let clock = 9 * STRIDE_SCALE;
        assert_eq!(clocks.rank(1, P, 77), clock, "a new partition enters at the clock");
        // Partition 1 kept its offset, then offered nothing: it comes back at the clock.
        clocks.idle_before(1, None);
        assert_eq!(clocks.tracked(), 1);
        assert_eq!(clocks.rank(1, P, 77 + 3 * STRIDE_SCALE), clock);
        // Back with a lower pass than it left at (another key entered at
        // its ack level): never more than the catch-up below the clock.
        assert_eq!(clocks.rank(1, P, 0), clock - CATCH_UP);
    }

    #[test]
    fn levels_keep_their_own_clocks_and_offsets() {
        let mut clocks = PartitionClocks::default();
        let urgent = Priority::HIGHEST;
        clocks.dispatched(urgent, 40 * STRIDE_SCALE);
        assert_eq!(clocks.rank(0, P, 3), 0);
        assert_eq!(clocks.rank(0, urgent, 3), 40 * STRIDE_SCALE);
        // Offering level 5 first says levels 1 to 4 are idle there.
        clocks.idle_before(0, Some(P));
        clocks.dispatched(urgent, 50 * STRIDE_SCALE);
        assert_eq!(clocks.rank(0, urgent, 3), 50 * STRIDE_SCALE, "urgent offset forgotten");
        assert_eq!(clocks.rank(0, P, 3 + STRIDE_SCALE), STRIDE_SCALE, "level 5 offset kept");
        clocks.retain(|p| p != 0);
        assert_eq!(clocks.tracked(), 0);
    }
}
