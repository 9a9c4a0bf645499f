//! A group's lead: how much work a group of keys may be dispatched ahead of
//! its share so that its keys with nothing waiting go at the front.
//!
//! Inside a group (docs/fairness.md §2a) tasks take passes from the group's
//! one counter, so a tenant's keys go first come, first served: a tenant's
//! 100-record job waits behind its own million-record one. With a lead, a
//! task of a key of the group that has nothing waiting ahead of the front
//! takes the front's pass instead, as a key of its own would, and the group
//! is charged for it at the end of its order as before. The task is then
//! *ahead of its group's order* from its pass until the ack level reaches the
//! pass the group's order would have given it; meanwhile the group has that
//! task's cost more than its share.
//!
//! Invariant kept by [`GroupLeads`]: for each group, the costs of its tasks
//! that went ahead of its order and whose place in that order lies above the
//! ack level's pass sum to at most the lead. So a group is never more than
//! its lead of work ahead of its share (§7e).

use std::collections::{HashMap, VecDeque};

use super::KeyCounters;

/// A task of a group's key, as its group is charged for it.
#[derive(Clone, Copy, Debug)]
pub struct GroupTask<'a> {
    /// The group's name (its prefix), whose counter holds the group's order.
    pub group: &'a str,
    /// The task's own fairness key, under the group's prefix.
    pub key: &'a str,
    /// The passes the task moves its group on (its cost in strides).
    pub advance: i64,
    /// Its cost, which it owes while ahead of the group's order.
    pub cost: u32,
}

/// The debts of a group: where in its order each task that went ahead
/// would have been, oldest first, with its cost.
#[derive(Clone, Debug, Default)]
struct Debt {
    /// `(pass in the group's order, cost)`, passes rising.
    owed: VecDeque<(i64, u64)>,
    /// The sum of the costs in `owed`.
    total: u64,
}

/// At most this many debts are kept per group; past it, the two newest are
/// merged into one (the later pass, both costs), which repays them later,
/// never sooner.
const DEBTS_PER_GROUP: usize = 64;

/// The outstanding debts of the groups of one subqueue. Memory: a group is
/// tracked only while it owes something, with at most [`DEBTS_PER_GROUP`]
/// entries.
#[derive(Clone, Debug, Default)]
pub struct GroupLeads {
    groups: HashMap<String, Debt>,
}

impl GroupLeads {
    /// The pass of `task` with the ack level at pass `base`. The group's
    /// counter moves on by the task's advance whatever happens (the group
    /// pays for every task at the end of its order). The task takes `base`,
    /// ahead of that order, if its key has nothing waiting ahead of `base`
    /// (its own counter is at or below it) and the group's debts stay within
    /// `lead`; otherwise it takes its place in the group's order (or later,
    /// to stay behind its key's own tasks). Either way its key's own
    /// counter moves past it, so a key's tasks keep their order.
    pub fn next_pass(&mut self, counters: &mut KeyCounters, task: GroupTask<'_>, base: i64, lead: u64) -> i64 {
        let in_order = counters.next_pass(task.group, base, task.advance);
        if task.key == task.group {
            // The group's own name: its counter is the group's.
            return in_order;
        }
        let key_idle = counters.peek(task.key).is_none_or(|next| next <= base);
        let ahead = key_idle && in_order > base && self.try_go_ahead(task.group, task.cost, in_order, base, lead);
        counters.next_pass(task.key, if ahead { base } else { in_order }, task.advance)
    }

    /// Whether a task of `cost` of `group` may go ahead of the group's order,
    /// where it would have taken pass `in_order`, with the ack level at pass
    /// `base` and a lead of `lead`; if so, the debt is recorded. Debts whose
    /// place in the order the ack level has reached are repaid first.
    pub fn try_go_ahead(&mut self, group: &str, cost: u32, in_order: i64, base: i64, lead: u64) -> bool {
        let cost = u64::from(cost.max(1));
        let owed = match self.groups.get_mut(group) {
            Some(debt) => {
                debt.repay_through(base);
                debt.total
            }
            None => 0,
        };
        if owed + cost > lead {
            if owed == 0 {
                self.groups.remove(group);
            }
            return false;
        }
        let debt = self.groups.entry(group.to_owned()).or_default();
        debt.owed.push_back((in_order, cost));
        debt.total += cost;
        if debt.owed.len() > DEBTS_PER_GROUP {
            let (pass, newer) = debt.owed.pop_back().expect("over the limit");
            let older = debt.owed.back_mut().expect("over the limit");
            *older = (older.0.max(pass), older.1 + newer);
        }
        true
    }

    /// What `group` owes with the ack level at pass `base`.
    pub fn owed(&self, group: &str, base: i64) -> u64 {
        self.groups.get(group).map_or(0, |debt| debt.owed.iter().filter(|(pass, _)| *pass > base).map(|d| d.1).sum())
    }

    /// Groups tracked, and their debts in all.
    pub fn len(&self) -> (usize, usize) {
        (self.groups.len(), self.groups.values().map(|debt| debt.owed.len()).sum())
    }
}

impl Debt {
    fn repay_through(&mut self, base: i64) {
        while let Some(&(pass, cost)) = self.owed.front() {
            if pass > base {
                break;
            }
            self.owed.pop_front();
            self.total -= cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::core::fairness::CounterConfig;

    fn pass(leads: &mut GroupLeads, counters: &mut KeyCounters, key: &str, base: i64, lead: u64) -> i64 {
        let task = GroupTask { group: "t/", key, advance: 10, cost: 1 };
        leads.next_pass(counters, task, base, lead)
    }

    #[test]
    fn an_idle_key_goes_ahead_of_its_groups_backlog_and_a_busy_one_queues() {
        let mut counters = KeyCounters::new(CounterConfig::default());
        let mut leads = GroupLeads::default();
        let big: Vec<i64> = (0..5).map(|_| pass(&mut leads, &mut counters, "t/big", 0, 2)).collect();
        assert_eq!(big, [0, 10, 20, 30, 40], "the group's order");
        assert_eq!(pass(&mut leads, &mut counters, "t/small", 0, 2), 0, "idle: at the front");
        assert_eq!(pass(&mut leads, &mut counters, "t/small", 0, 2), 60, "not idle now: in the group's order");
        assert_eq!(pass(&mut leads, &mut counters, "t/other", 0, 2), 0, "the lead has room for one more");
        assert_eq!(pass(&mut leads, &mut counters, "t/third", 0, 2), 80, "the lead is spent");
        // Once the ack level passes where they would have gone, the debts are repaid.
        assert_eq!(pass(&mut leads, &mut counters, "t/fourth", 70, 2), 70, "at the front again");
        assert_eq!(pass(&mut leads, &mut counters, "t/big", 70, 0), 100, "no lead: in the group's order");
        assert_eq!(pass(&mut leads, &mut counters, "t/", 200, 2), 200, "the group's own name has no lane");
    }

    #[test]
    fn a_group_goes_ahead_within_its_lead_and_again_once_repaid() {
        let mut leads = GroupLeads::default();
        assert!(leads.try_go_ahead("a/", 400, 1_000, 0, 1_000));
        assert!(leads.try_go_ahead("a/", 600, 2_000, 0, 1_000));
        assert!(!leads.try_go_ahead("a/", 1, 3_000, 0, 1_000), "the lead is spent");
        assert!(leads.try_go_ahead("b/", 1_000, 3_000, 0, 1_000), "each group has its own");
        assert_eq!(leads.owed("a/", 0), 1_000);
        // The ack level reaches the first debt's place: its 400 are repaid.
        assert!(leads.try_go_ahead("a/", 400, 3_000, 1_000, 1_000));
        assert!(!leads.try_go_ahead("a/", 1, 3_000, 1_000, 1_000));
        assert_eq!(leads.owed("a/", 2_000), 400);
        assert!(leads.try_go_ahead("a/", 1_000, 4_000, 3_000, 1_000));
        assert!(!leads.try_go_ahead("a/", 1, 4_000, 3_000, 0), "no lead, never ahead");
    }

    #[test]
    fn debts_per_group_stay_bounded_and_are_repaid_no_sooner() {
        let mut leads = GroupLeads::default();
        for i in 0..1_000 {
            assert!(leads.try_go_ahead("a/", 1, 10 * (i + 1), 0, u64::MAX));
        }
        assert_eq!(leads.len(), (1, DEBTS_PER_GROUP));
        assert_eq!(leads.owed("a/", 0), 1_000);
        // Merged debts are repaid at the latest of their places.
        assert_eq!(leads.owed("a/", 9_990), 1_000 - (DEBTS_PER_GROUP as u64 - 1));
        assert!(leads.try_go_ahead("a/", 1, 20_000, 10_000, u64::MAX));
        assert_eq!(leads.len(), (1, 1), "repaid debts are forgotten");
    }
}
