//! One scheduling round of a visit type: given the free slots of its queue
//! and the head of each (policy, lister) index, which origins to send.
//!
//! Two ways to share the slots:
//! - **fair** (Fairway's default): the slots are shared among the policies
//!   by weight ([`share_slots`]), then each policy's share equally among the
//!   listers that have origins in it. At both levels a share that cannot be
//!   filled goes to the others. The policy weights say how much each kind
//!   of visit is worth; within a kind, no lister's size crowds out the
//!   others.
//! - **by policy weight** (the reference scheduler's way, kept as the
//!   baseline): each policy gets `floor(slots × weight / Σ weights)` and
//!   takes its origins in its order across all listers; what it cannot
//!   fill stays empty.
//!
//! Invariant: a round sends an origin at most once and never more origins
//! than it has slots.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{IndexEntry, Policy, share_slots};

/// How a round shares its slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharing {
    /// Policy weights, then equal shares per lister; unfilled shares redistributed.
    #[default]
    Fair,
    /// Policy weights only, across listers; unfilled shares stay empty.
    PolicyWeights,
}

/// An origin a round chose, and the policy that chose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The policy that chose it; for `FirstVisitsAfterListing`, not the policy
    /// of `entry`'s index.
    pub policy: Policy,
    /// The index row it came from: its lister and URL.
    pub entry: IndexEntry,
}

/// The heads a round reads: for each policy and lister, the index's first
/// entries in order (for `FirstVisitsAfterListing`, those below the end of
/// the lister's last listing). Each list holds at least as many entries as
/// the round has slots, unless the index has fewer.
pub type Heads = BTreeMap<(Policy, String), Vec<IndexEntry>>;

/// Chooses up to `slots` origins from `heads` for `policies` (with weights).
/// `unit` gives random numbers in `[0, 1)` for the odd slots of fair shares
/// (see [`share_slots`]). `room` is asked before an entry is taken, and
/// counts it if it answers yes: an entry it refuses (its fairness key has
/// enough visits waiting) is passed over and takes no slot.
pub fn plan_round(
    slots: u64,
    policies: &[(Policy, f64)],
    heads: &Heads,
    sharing: Sharing,
    unit: &mut dyn FnMut() -> f64,
    room: &mut dyn FnMut(&IndexEntry) -> bool,
) -> Vec<Choice> {
    let mut taken = Taken { room, choices: Vec::new(), urls: HashSet::new() };
    match sharing {
        Sharing::Fair => {
            // Each policy's candidates, dealt one lister at a time from a
            // random first lister: its first n are an equal split of n
            // among the listers that have candidates.
            let dealt: Vec<Vec<&IndexEntry>> = policies
                .iter()
                .map(|(policy, _)| {
                    let lists: Vec<&Vec<IndexEntry>> =
                        heads.iter().filter(|((p, _), _)| p == policy).map(|(_, entries)| entries).collect();
                    deal(&lists, unit)
                })
                .collect();
            taken.fill(slots, policies, &dealt, true, unit);
        }
        Sharing::PolicyWeights => {
            let merged: Vec<Vec<&IndexEntry>> = policies
                .iter()
                .map(|(policy, _)| {
                    let mut all: Vec<&IndexEntry> =
                        heads.iter().filter(|((p, _), _)| p == policy).flat_map(|(_, entries)| entries).collect();
                    all.sort_by(|a, b| (a.key, &a.url).cmp(&(b.key, &b.url)));
                    all
                })
                .collect();
            taken.fill(slots, policies, &merged, false, unit);
        }
    }
    taken.choices
}

/// The heads a round should read further before planning again, with how
/// many entries to read of each: those read in full (`asked[key]` entries
/// came back) below `most(key)`, while the round has slots left, read
/// twice as far. A head of a lister known to span several fairness keys
/// (`several_keys`) is read on, as entries of other keys may follow those
/// whose keys had no room; another only while one of its entries read last
/// time (at or after `before[key]`) was chosen: its next entries are
/// likely of the key that just filled.
pub fn heads_to_extend(
    slots: u64,
    heads: &Heads,
    asked: &BTreeMap<(Policy, String), (usize, usize)>,
    choices: &[Choice],
    most: impl Fn(&(Policy, String)) -> usize,
    several_keys: impl Fn(&str) -> bool,
) -> Vec<((Policy, String), usize)> {
    if choices.len() as u64 >= slots {
        return Vec::new();
    }
    let chosen: HashSet<&str> = choices.iter().map(|c| c.entry.url.as_str()).collect();
    heads
        .iter()
        .filter_map(|(key, entries)| {
            let &(before, size) = asked.get(key)?;
            let most = most(key);
            let read_in_full = entries.len() >= size && size < most;
            let worth_reading =
                several_keys(&key.1) || entries.iter().skip(before).any(|e| chosen.contains(e.url.as_str()));
            (read_in_full && worth_reading).then(|| (key.clone(), size.saturating_mul(2).min(most)))
        })
        .collect()
}

/// The lists' entries in turns, one from each list that has one left,
/// starting at a random list.
fn deal<'h>(lists: &[&'h Vec<IndexEntry>], unit: &mut dyn FnMut() -> f64) -> Vec<&'h IndexEntry> {
    let mut dealt = Vec::with_capacity(lists.iter().map(|l| l.len()).sum());
    if lists.is_empty() {
        return dealt;
    }
    let first = ((unit() * lists.len() as f64) as usize).min(lists.len() - 1);
    let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    for turn in 0..longest {
        for i in 0..lists.len() {
            if let Some(entry) = lists[(first + i) % lists.len()].get(turn) {
                dealt.push(entry);
            }
        }
    }
    dealt
}

struct Taken<'r, 'h> {
    room: &'r mut dyn FnMut(&IndexEntry) -> bool,
    choices: Vec<Choice>,
    urls: HashSet<&'h str>,
}

impl<'h> Taken<'_, 'h> {
    /// Takes up to `slots` origins from `lists` (one per policy, best first)
    /// by weight; with `redistribute`, a policy's unfilled share goes to the
    /// others, else it is lost (the reference's floor of each share).
    fn fill(
        &mut self,
        slots: u64,
        policies: &[(Policy, f64)],
        lists: &[Vec<&'h IndexEntry>],
        redistribute: bool,
        unit: &mut dyn FnMut() -> f64,
    ) {
        let weights: Vec<f64> = policies.iter().map(|(_, w)| *w).collect();
        let mut cursor = vec![0usize; lists.len()];
        let mut left = slots;
        loop {
            let available: Vec<u64> = lists.iter().zip(&cursor).map(|(l, &c)| (l.len() - c) as u64).collect();
            let shares = if redistribute {
                share_slots(left, &weights, &available, unit)
            } else {
                let total: f64 = weights.iter().sum();
                weights
                    .iter()
                    .map(|w| if total > 0.0 { (slots as f64 * w / total).floor() as u64 } else { 0 })
                    .collect()
            };
            let consumed: usize = cursor.iter().sum();
            for (i, share) in shares.into_iter().enumerate() {
                let mut got = 0;
                while got < share && cursor[i] < lists[i].len() {
                    let entry = lists[i][cursor[i]];
                    cursor[i] += 1;
                    if !self.urls.contains(entry.url.as_str()) && (self.room)(entry) {
                        self.urls.insert(&entry.url);
                        self.choices.push(Choice { policy: policies[i].0, entry: entry.clone() });
                        got += 1;
                    }
                }
                left -= got;
            }
            // Without redistribution one pass is the whole round; with it,
            // go on while duplicates left shares unfilled and entries were read.
            if !redistribute || left == 0 || cursor.iter().sum::<usize>() == consumed {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEVER: Policy = Policy::NeverVisitedOldestUpdateFirst;
    const LAG: Policy = Policy::AlreadyVisitedOrderByLag;

    fn entries(policy: Policy, lister: &str, n: usize) -> ((Policy, String), Vec<IndexEntry>) {
        let list = (0..n)
            .map(|i| IndexEntry {
                policy,
                lister: lister.into(),
                key: i as i64,
                url: format!("{lister}/{policy:?}/{i:03}"),
            })
            .collect();
        ((policy, lister.into()), list)
    }

    fn count(choices: &[Choice], f: impl Fn(&Choice) -> bool) -> usize {
        choices.iter().filter(|c| f(c)).count()
    }

    #[test]
    fn fair_rounds_share_equally_among_listers_whatever_their_size() {
        let heads: Heads = [entries(NEVER, "big", 100), entries(NEVER, "small", 100), entries(NEVER, "tiny", 3)].into();
        let choices = plan_round(60, &[(NEVER, 1.0)], &heads, Sharing::Fair, &mut || 0.5, &mut |_| true);
        assert_eq!(choices.len(), 60);
        assert_eq!(count(&choices, |c| c.entry.lister == "tiny"), 3);
        let (big, small) =
            (count(&choices, |c| c.entry.lister == "big"), count(&choices, |c| c.entry.lister == "small"));
        assert_eq!(big + small, 57, "tiny's unused share is split");
        assert!([28, 29].contains(&big), "the odd slot is drawn: {big}");
        let keys: Vec<i64> = choices.iter().filter(|c| c.entry.lister == "big").map(|c| c.entry.key).collect();
        assert_eq!(keys, (0..big as i64).collect::<Vec<_>>(), "each index is taken from its head, in order");
    }

    #[test]
    fn fair_rounds_keep_the_policy_weights_whatever_the_listers_offer() {
        const BLIND: Policy = Policy::OriginsWithoutLastUpdate;
        let heads: Heads = [entries(NEVER, "dated", 100), entries(BLIND, "blind", 100)].into();
        let weights = [(NEVER, 49.0), (BLIND, 2.0)];
        let choices = plan_round(51, &weights, &heads, Sharing::Fair, &mut || 0.5, &mut |_| true);
        assert_eq!((count(&choices, |c| c.policy == NEVER), count(&choices, |c| c.policy == BLIND)), (49, 2));
        let short: Heads = [entries(NEVER, "dated", 10), entries(BLIND, "blind", 100)].into();
        let choices = plan_round(51, &weights, &short, Sharing::Fair, &mut || 0.5, &mut |_| true);
        assert_eq!(count(&choices, |c| c.policy == BLIND), 41, "what the dated lister cannot fill goes on");
    }

    #[test]
    fn policy_weights_alone_follow_the_merged_order_and_leave_unfilled_shares_empty() {
        let heads: Heads = [entries(NEVER, "big", 100), entries(NEVER, "small", 100), entries(LAG, "big", 2)].into();
        let choices =
            plan_round(10, &[(NEVER, 1.0), (LAG, 1.0)], &heads, Sharing::PolicyWeights, &mut || 0.5, &mut |_| true);
        assert_eq!(count(&choices, |c| c.policy == NEVER), 5);
        assert_eq!(count(&choices, |c| c.policy == LAG), 2, "the lag share's other three slots stay empty");
        let never: Vec<(i64, &str)> =
            choices.iter().filter(|c| c.policy == NEVER).map(|c| (c.entry.key, c.entry.lister.as_str())).collect();
        assert_eq!(never, vec![(0, "big"), (0, "small"), (1, "big"), (1, "small"), (2, "big")]);
    }

    #[test]
    fn a_fair_round_gives_a_short_policy_share_to_the_others() {
        let heads: Heads = [entries(NEVER, "l", 100), entries(LAG, "l", 2)].into();
        let choices = plan_round(10, &[(NEVER, 1.0), (LAG, 1.0)], &heads, Sharing::Fair, &mut || 0.5, &mut |_| true);
        assert_eq!((count(&choices, |c| c.policy == NEVER), count(&choices, |c| c.policy == LAG)), (8, 2));
    }

    #[test]
    fn a_head_is_read_further_only_while_slots_are_left_and_more_may_be_taken() {
        let (key, list) = entries(NEVER, "l", 4);
        let heads: Heads = [(key.clone(), list.clone())].into();
        let take = |n: usize| -> Vec<Choice> {
            list.iter().take(n).map(|e| Choice { policy: NEVER, entry: e.clone() }).collect()
        };
        type Most<'a> = &'a dyn Fn(&(Policy, String)) -> usize;
        type SeveralKeys<'a> = &'a dyn Fn(&str) -> bool;
        let most: Most = &|_| 100;
        let (one_key, several): (SeveralKeys, SeveralKeys) = (&|_| false, &|_| true);
        let extend = |asked: &BTreeMap<_, _>, slots, taken, most: Most, several: SeveralKeys| {
            heads_to_extend(slots, &heads, asked, &take(taken), most, several)
        };
        let first_read = BTreeMap::from([(key.clone(), (0, 4))]);
        assert_eq!(extend(&first_read, 10, 1, most, one_key), vec![(key.clone(), 8)]);
        assert_eq!(extend(&first_read, 10, 0, most, one_key), vec![], "nothing of it was taken");
        assert_eq!(extend(&first_read, 10, 0, most, several), vec![(key.clone(), 8)], "other keys may follow");
        assert_eq!(extend(&first_read, 1, 1, most, several), vec![], "the round is full");
        assert_eq!(extend(&first_read, 10, 1, &|_| 4, several), vec![], "read as far as it may be");
        assert_eq!(extend(&first_read, 10, 1, &|_| 6, several), vec![(key.clone(), 6)]);
        let asked_more = BTreeMap::from([(key.clone(), (0, 8))]);
        assert_eq!(extend(&asked_more, 10, 1, most, several), vec![], "the index has no more");
        let second_read = BTreeMap::from([(key.clone(), (2, 4))]);
        assert_eq!(extend(&second_read, 10, 2, most, one_key), vec![], "only older entries taken");
        assert_eq!(extend(&second_read, 10, 3, most, one_key), vec![(key, 8)]);
    }

    #[test]
    fn an_origin_at_the_head_of_two_policies_is_sent_once() {
        let ((_, l), never) = entries(NEVER, "l", 5);
        let lag: Vec<IndexEntry> = never.iter().map(|e| IndexEntry { policy: LAG, ..e.clone() }).collect();
        let heads: Heads = [((NEVER, l.clone()), never), ((LAG, l), lag)].into();
        let choices = plan_round(4, &[(NEVER, 1.0), (LAG, 1.0)], &heads, Sharing::Fair, &mut || 0.5, &mut |_| true);
        let urls: HashSet<&str> = choices.iter().map(|c| c.entry.url.as_str()).collect();
        assert_eq!((choices.len(), urls.len()), (4, 4));
        assert_eq!(
            plan_round(10, &[(NEVER, 1.0), (LAG, 1.0)], &heads, Sharing::Fair, &mut || 0.5, &mut |_| true).len(),
            5,
            "all there is"
        );
    }
}
