//! The origin-visit scheduler's async shell: it records what listers report
//! and what visits find, and runs the rounds that fill the `visits.<type>`
//! queues. The rules are the pure [`crate::core::visits`]; the data is a
//! [`VisitStore`]; the queues are a [`VisitQueue`].
//!
//! Invariants kept here:
//! 1. Every change of an origin is a read, the pure rules, and one
//!    [`OriginWrite`], under the scheduler's lock: this process never
//!    interleaves two changes of one origin.
//! 2. An origin is marked scheduled only after its visit is in the queue
//!    (or already was: the dedup id is the origin). A crash between the
//!    two leaves a queued visit whose outcome is recorded as usual.
//! 3. A round adds no visit of a fairness key that already has
//!    `queued_per_key × key_concurrency` visits waiting, as far as the
//!    queue's backlog per key tells.
//! 4. An origin's change-rate estimate is refreshed at each of its writes
//!    from its evidence and its lister's mean (read at most once a minute).

pub mod config;
pub mod origin_url;
pub mod queue;
mod runner;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

pub use config::{BlindVisits, FairnessKeyOf, RoundMode, SchedulerConfig};
pub use queue::{Backlog, Visit, VisitQueue, VisitQueueError, key_of};
pub use runner::run_rounds;

use crate::clock::UnixMillis;
use crate::core::visits::value::{Spare, Worth, pick_spares, rank_by_worth, worth_of_chance};
use crate::core::visits::{
    Choice, DueThreshold, Freshness, Heads, IndexEntry, KeyRange, ListedOrigin, OriginState, OriginWrite, Policy,
    RoundLoad, VisitResult, VisitStats, heads_to_extend, plan_round,
};
use crate::store::StoreError;
use crate::store::visits::{ListerRecord, MAX_READ, VisitStore};

/// The prefix of the queues visits go to: `visits.<type>`.
pub const QUEUE_PREFIX: &str = "visits.";

/// The queue a visit type's visits go to.
pub fn queue_name(visit_type: &str) -> String {
    format!("{QUEUE_PREFIX}{visit_type}")
}

/// The visit type of a `visits.<type>` queue.
pub fn visit_type_of(queue: &str) -> Option<&str> {
    queue.strip_prefix(QUEUE_PREFIX).filter(|t| !t.is_empty())
}

/// An origin as a lister reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedReport {
    /// The origin's URL.
    pub url: String,
    /// The kind of loader that visits it, e.g. `git`: its visits go to the
    /// queue `visits.<type>`.
    pub visit_type: String,
    /// When the forge says the origin last changed, in ms since the Unix epoch,
    /// if it says.
    pub last_update: Option<UnixMillis>,
    /// Whether the forge says it is a fork of another origin.
    pub is_fork: bool,
    /// Extra arguments for the loader, a JSON object as text (empty: none).
    pub extra_loader_arguments: String,
}

/// Why the scheduler could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The visit store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The visit queue could not be reached.
    #[error("queue: {0}")]
    Queue(#[from] VisitQueueError),
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    /// Origins whose cooldowns ended and went back into the indexes.
    pub woken: usize,
    /// The chance of a change at which origins were due, per lister.
    pub due_chance: BTreeMap<String, f64>,
    /// Free slots of the queue.
    pub slots: u64,
    /// Visits sent, per policy and per lister.
    pub by_policy: BTreeMap<Policy, u64>,
    /// Visits sent, per lister.
    pub by_lister: BTreeMap<String, u64>,
}

impl RoundReport {
    /// Visits sent in all.
    pub fn sent(&self) -> u64 {
        self.by_policy.values().sum()
    }
}

/// The origin-visit scheduler of one process.
#[derive(Debug)]
pub struct Scheduler {
    store: Arc<dyn VisitStore>,
    config: SchedulerConfig,
    /// Held across every read-modify-write of origins (invariant 1).
    lock: Mutex<Locked>,
}

/// What the scheduler's lock guards besides the origins' writes.
#[derive(Debug)]
struct Locked {
    rng: StdRng,
    /// Each (lister, visit type)'s mean change rate, and when it was read.
    priors: HashMap<(String, String), (f64, UnixMillis)>,
    /// Each (visit type, lister)'s due threshold, as the rounds on this node
    /// moved it.
    thresholds: HashMap<(String, String), DueThreshold>,
    /// The (visit type, lister)s whose index entries a round found on two
    /// fairness keys or more: with the host as the key, a lister of many
    /// hosts, read past the entries of hosts that have no room.
    several_keys: HashSet<(String, String)>,
}

/// How a round reads an `expected_value` index: due at which worth, only
/// the due entries or all, and whether certain entries rank first.
#[derive(Clone, Copy, Debug)]
struct Reading {
    due_worth: f64,
    due_only: bool,
    certain_first: bool,
}

/// What a round plans from.
#[derive(Clone, Copy)]
struct RoundInputs<'a> {
    visit_type: &'a str,
    /// Free slots of the queue.
    slots: u64,
    policies: &'a [(Policy, f64)],
    listers: &'a [ListerRecord],
    backlog: &'a Backlog,
    now: UnixMillis,
}

/// A round's plan: the heads it read, what it chose of them, and the
/// visits then waiting per fairness key.
struct Plan {
    heads: Heads,
    choices: Vec<Choice>,
    waiting: HashMap<String, u64>,
}

/// Whether a round may queue one more visit of `entry`'s fairness key, at
/// most `key_limit` of which may wait (invariant 3); counts it if so.
/// `waiting` holds the visits waiting per key.
fn has_room(
    waiting: &mut HashMap<String, u64>,
    key_limit: Option<u64>,
    fairness_key: FairnessKeyOf,
    entry: &IndexEntry,
) -> bool {
    let Some(limit) = key_limit else { return true };
    let count = waiting.entry(key_of(fairness_key, &entry.lister, &entry.url)).or_default();
    *count += 1;
    *count <= limit || {
        *count -= 1;
        false
    }
}

/// How long a lister's mean change rate is used before it is read again.
const PRIOR_REFRESH_MS: i64 = 60_000;

impl Scheduler {
    /// `seed` drives the ±10% jitter of the intervals.
    pub fn new(store: Arc<dyn VisitStore>, config: SchedulerConfig, seed: u64) -> Scheduler {
        let locked = Locked {
            rng: StdRng::seed_from_u64(seed),
            priors: HashMap::new(),
            thresholds: HashMap::new(),
            several_keys: HashSet::new(),
        };
        Scheduler { store, config, lock: Mutex::new(locked) }
    }

    /// The change rate (per day) taken for `lister`'s origins of
    /// `visit_type` before their own evidence: the mean of its origins'
    /// estimates, read at most once a minute, or `prior_rate`.
    async fn prior(
        &self,
        locked: &mut Locked,
        lister: &str,
        visit_type: &str,
        now: UnixMillis,
    ) -> Result<f64, StoreError> {
        let key = (lister.to_owned(), visit_type.to_owned());
        if let Some(&(rate, read)) = locked.priors.get(&key)
            && now - read < PRIOR_REFRESH_MS
            && now >= read
        {
            return Ok(rate);
        }
        let metrics = self.store.metrics(lister).await?;
        let mean = metrics.iter().find(|(t, _)| t == visit_type).and_then(|(_, m)| m.mean_rate());
        let rate = mean.unwrap_or(self.config.prior_rate);
        locked.priors.insert(key, (rate, now));
        Ok(rate)
    }

    /// The settings it runs with.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The store it records origins in and reads them from.
    pub fn store(&self) -> &Arc<dyn VisitStore> {
        &self.store
    }

    /// Records a batch of origins from `lister`: new ones are created, known
    /// ones updated (and enabled again if they were disabled). Returns how
    /// many were new.
    pub async fn record_origins(
        &self,
        lister: &str,
        batch: &[ListedReport],
        now: UnixMillis,
    ) -> Result<usize, StoreError> {
        let mut locked = self.lock.lock().await;
        let mut by_type: BTreeMap<&str, Vec<&ListedReport>> = BTreeMap::new();
        for report in batch {
            by_type.entry(&report.visit_type).or_default().push(report);
        }
        let visit_types: Vec<String> = by_type.keys().map(|t| t.to_string()).collect();
        self.store.add_lister(lister, &visit_types).await?;
        let mut new = 0;
        for (visit_type, reports) in by_type {
            let urls: Vec<String> = reports.iter().map(|r| r.url.clone()).collect();
            let olds = self.store.read_origins(visit_type, &urls).await?;
            let mut writes = Vec::with_capacity(reports.len());
            let prior = self.prior(&mut locked, lister, visit_type, now).await?;
            // A URL given twice in one batch: the last report wins.
            let mut seen = BTreeSet::new();
            for (report, old) in reports.iter().zip(&olds).rev() {
                if !seen.insert(&report.url) {
                    continue;
                }
                new += usize::from(old.is_none());
                let origin = ListedOrigin {
                    url: report.url.clone(),
                    visit_type: visit_type.to_owned(),
                    lister: lister.to_owned(),
                    last_update: report.last_update,
                    first_seen: old.as_ref().map_or(now, |o| o.origin.first_seen),
                    last_seen: now,
                    is_fork: report.is_fork,
                    extra_loader_arguments: report.extra_loader_arguments.clone(),
                };
                let mut stats = old.as_ref().map_or_else(VisitStats::default, |o| o.stats.clone());
                stats.relisted();
                if let Some(update) = report.last_update {
                    stats.evidence.listed(update, now);
                }
                stats.rate = Some(stats.evidence.estimate(prior) as f32);
                writes.push(OriginWrite::new(old.as_ref(), origin, stats, &self.config.cooldowns, now));
            }
            self.store.apply(&writes).await?;
        }
        Ok(new)
    }

    /// Records that `lister` finished a listing at `now`:
    /// `first_visits_after_listing` then visits its origins not scheduled
    /// since.
    pub async fn finish_listing(&self, lister: &str, now: UnixMillis) -> Result<(), StoreError> {
        self.store.finish_listing(lister, now).await
    }

    /// Feeds a visit's outcome back. False when the origin is unknown or the
    /// outcome is no newer than the last one recorded (nothing changes).
    pub async fn record_outcome(
        &self,
        visit_type: &str,
        url: &str,
        outcome: &VisitResult,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut locked = self.lock.lock().await;
        let Some(Some(old)) = self.store.read_origins(visit_type, &[url.to_owned()]).await?.pop() else {
            return Ok(false);
        };
        let clock = self.queue_clock(visit_type, now).await?;
        let prior = self.prior(&mut locked, &old.origin.lister, visit_type, now).await?;
        let mut stats = old.stats.clone();
        stats.learn(outcome, now, old.origin.last_update.is_some());
        if !stats.record(outcome, clock, locked.rng.random::<f64>()) {
            return Ok(false);
        }
        stats.rate = Some(stats.evidence.estimate(prior) as f32);
        let write = OriginWrite::new(Some(&old), old.origin.clone(), stats, &self.config.cooldowns, now);
        self.store.apply(&[write]).await?;
        Ok(true)
    }

    /// The clock of origins without an update date.
    async fn queue_clock(&self, visit_type: &str, now: UnixMillis) -> Result<i64, StoreError> {
        match self.config.blind_visits {
            BlindVisits::WhenDue => Ok(now),
            BlindVisits::QueueClock => self.store.queue_position(visit_type).await,
        }
    }

    /// An origin's state, if it was ever listed.
    pub async fn origin(&self, visit_type: &str, url: &str) -> Result<Option<OriginState>, StoreError> {
        Ok(self.store.read_origins(visit_type, &[url.to_owned()]).await?.pop().flatten())
    }

    /// The visit types some lister has listed.
    pub async fn visit_types(&self) -> Result<BTreeSet<String>, StoreError> {
        Ok(self.store.listers().await?.into_iter().flat_map(|l| l.visit_types).collect())
    }

    /// One round of `visit_type` at `now`: wakes the origins whose cooldowns
    /// ended, fills the queue's free slots by the policies, marks what it
    /// sent as scheduled.
    pub async fn run_round(
        &self,
        visit_type: &str,
        queue: &dyn VisitQueue,
        now: UnixMillis,
    ) -> Result<RoundReport, SchedulerError> {
        let mut locked = self.lock.lock().await;
        let mut report = RoundReport { woken: self.wake(visit_type, now).await?, ..RoundReport::default() };
        let backlog = queue.backlog(visit_type).await?;
        report.slots = self.config.queue_length.saturating_sub(backlog.total);
        let (idle, busy) = (self.config.due_chance, self.config.due_chance_busy);
        let policies = self.config.policies_for(visit_type);
        if report.slots == 0 || policies.is_empty() {
            if report.slots == 0 {
                // A full queue: every lister's loaders are busy.
                for ((of_type, _), threshold) in locked.thresholds.iter_mut() {
                    if of_type == visit_type {
                        threshold.after_round(RoundLoad::Busy, idle, busy);
                    }
                }
            }
            return Ok(report);
        }
        let listers: Vec<_> =
            self.store.listers().await?.into_iter().filter(|l| l.visit_types.contains(visit_type)).collect();
        for lister in &listers {
            let key = (visit_type.to_owned(), lister.name.clone());
            let chance = locked.thresholds.entry(key).or_insert_with(|| DueThreshold::new(idle)).chance();
            report.due_chance.insert(lister.name.clone(), chance);
        }
        // Each lister's reading at its threshold; one whose loaders were
        // found busy lately (above `idle`) takes sure visits first.
        let reading = |lister: &str, due_only: bool| {
            let chance = report.due_chance.get(lister).copied().unwrap_or(idle);
            Reading { due_worth: worth_of_chance(chance), due_only, certain_first: chance > idle }
        };
        let limit = usize::try_from(report.slots).unwrap_or(MAX_READ).min(MAX_READ);
        let key_limit = self.config.queued_key_limit();
        let fairness_key = self.config.fairness_key;
        // A lister that is its visits' fairness key needs no more entries
        // than its key has room for.
        let read_limit = |lister: &str| match (fairness_key, key_limit) {
            (FairnessKeyOf::Lister, Some(key_limit)) => {
                let waiting = backlog.by_key.get(&key_of(FairnessKeyOf::Lister, lister, "")).copied();
                limit.min(usize::try_from(key_limit.saturating_sub(waiting.unwrap_or(0))).unwrap_or(limit))
            }
            _ => limit,
        };
        let inputs = RoundInputs {
            visit_type,
            slots: report.slots,
            policies: &policies,
            listers: &listers,
            backlog: &backlog,
            now,
        };
        let Plan { heads, mut choices, mut waiting } = self.plan(&inputs, &mut locked, &reading, &read_limit).await?;
        // A lister is busy when its key had no room, or when due visits of
        // it were left; idle when every due visit of it went.
        let mut sent: HashMap<&str, usize> = HashMap::new();
        for choice in &choices {
            *sent.entry(choice.entry.lister.as_str()).or_default() += 1;
        }
        for lister in &listers {
            let due = heads.get(&(Policy::ExpectedValue, lister.name.clone())).map_or(0, Vec::len);
            let full = read_limit(&lister.name) == 0 || choices.len() as u64 >= report.slots;
            let load = if full || sent.get(lister.name.as_str()).copied().unwrap_or(0) < due {
                RoundLoad::Busy
            } else {
                RoundLoad::Idle
            };
            if let Some(threshold) = locked.thresholds.get_mut(&(visit_type.to_owned(), lister.name.clone())) {
                threshold.after_round(load, idle, busy);
            }
        }
        // While the queue runs short (below a tenth of its length), to the
        // origins not due yet most worth a visit, at a lower priority, so
        // that due ones go first.
        let short = usize::try_from(self.config.queue_length / 10).unwrap_or(MAX_READ);
        let queued = usize::try_from(backlog.total).unwrap_or(usize::MAX).saturating_add(choices.len());
        let left = short.saturating_sub(queued).min(MAX_READ);
        let mut spares = HashSet::new();
        if left > 0 && policies.iter().any(|(p, _)| *p == Policy::ExpectedValue) && self.config.spare_chance < 1.0 {
            let taken: HashSet<&str> = choices.iter().map(|c| c.entry.url.as_str()).collect();
            let mut candidates = Vec::new();
            for lister in &listers {
                let reading = reading(&lister.name, false);
                let wanted = read_limit(&lister.name).min(left);
                if wanted == 0 {
                    continue;
                }
                let due = heads.get(&(Policy::ExpectedValue, lister.name.clone())).map_or(0, Vec::len);
                let ranked = self.read_by_worth(visit_type, &lister.name, reading, due + wanted, now).await?;
                let due_worth = reading.due_worth;
                let later = ranked.into_iter().filter(|e| Worth::of_key(e.key).at(now, due_worth) < due_worth);
                candidates.extend(later.filter(|e| !taken.contains(e.url.as_str())).take(wanted));
            }
            let urls: Vec<String> = candidates.iter().map(|e| e.url.clone()).collect();
            let states = self.store.read_origins(visit_type, &urls).await?;
            let worth = candidates.into_iter().zip(states).filter_map(|(entry, state)| {
                let state = state?;
                let freshness = Freshness::of(&state.origin, &state.stats);
                let chance = freshness.chance(state.stats.rate.map(f64::from), now);
                let worth = Worth::of_key(entry.key).at(now, reading(&entry.lister, false).due_worth);
                Some(Spare { item: entry, chance, worth })
            });
            for entry in pick_spares(worth.collect(), left, self.config.spare_chance, &mut |entry| {
                has_room(&mut waiting, key_limit, fairness_key, entry)
            }) {
                spares.insert(entry.url.clone());
                choices.push(Choice { policy: Policy::ExpectedValue, entry });
            }
        }
        if choices.is_empty() {
            return Ok(report);
        }
        let urls: Vec<String> = choices.iter().map(|c| c.entry.url.clone()).collect();
        let states = self.store.read_origins(visit_type, &urls).await?;
        let mut visits = Vec::with_capacity(choices.len());
        let mut chosen = Vec::with_capacity(choices.len());
        for (choice, state) in choices.into_iter().zip(states) {
            // An entry whose origin no longer holds it (an earlier write of
            // uncertain outcome) is skipped; the origin's next write fixes it.
            let Some(state) = state.filter(|s| s.placement.keys.contains(&(choice.entry.policy, choice.entry.key)))
            else {
                continue;
            };
            let priority = if choice.policy == Policy::FirstVisitsAfterListing {
                self.config.first_visits_priority
            } else if spares.contains(&choice.entry.url) {
                self.config.spare_priority
            } else {
                self.config.priority
            };
            visits.push(Visit::of(&state.origin, self.config.fairness_key, priority));
            chosen.push((choice, state));
        }
        let queued = queue.enqueue(visit_type, &visits).await?;
        let mut writes = Vec::with_capacity(chosen.len());
        let mut position = None;
        for ((choice, state), ok) in chosen.into_iter().zip(queued) {
            if !ok {
                continue;
            }
            *report.by_policy.entry(choice.policy).or_default() += 1;
            *report.by_lister.entry(state.origin.lister.clone()).or_default() += 1;
            let clocked = self.config.blind_visits == BlindVisits::QueueClock;
            if clocked && choice.policy == Policy::OriginsWithoutLastUpdate && choice.entry.key != i64::MIN {
                position = position.max(Some(choice.entry.key));
            }
            let stats = VisitStats { last_scheduled: Some(now), ..state.stats.clone() };
            writes.push(OriginWrite::new(Some(&state), state.origin.clone(), stats, &self.config.cooldowns, now));
        }
        self.store.apply(&writes).await?;
        if let Some(position) = position {
            let clock = self.store.queue_position(visit_type).await?;
            if position > clock {
                self.store.set_queue_position(visit_type, position).await?;
            }
        }
        Ok(report)
    }

    /// A round's plan: reads each (policy, lister) head, a key's room of it
    /// first with host keys (see `first_read`), plans the round, and reads
    /// further the heads [`heads_to_extend`] names, until none.
    async fn plan(
        &self,
        inputs: &RoundInputs<'_>,
        locked: &mut Locked,
        reading: &(dyn Fn(&str, bool) -> Reading + Sync),
        read_limit: &(dyn Fn(&str) -> usize + Sync),
    ) -> Result<Plan, StoreError> {
        let RoundInputs { visit_type, slots, policies, listers, backlog, now } = *inputs;
        let key_limit = self.config.queued_key_limit();
        let fairness_key = self.config.fairness_key;
        let limit = usize::try_from(slots).unwrap_or(MAX_READ).min(MAX_READ);
        // With the host as the key, a lister is read a key's room at first,
        // and further while the round has slots left and more of it may be
        // taken (see `heads_to_extend`): a lister of one host stops at its
        // host's room, one of many reads past its full hosts.
        let first_read = |lister: &str| match (fairness_key, key_limit) {
            (FairnessKeyOf::Host, Some(key_limit)) => {
                read_limit(lister).min(usize::try_from(key_limit).unwrap_or(limit))
            }
            _ => read_limit(lister),
        };
        let mut to_read: Vec<((Policy, String), usize)> = policies
            .iter()
            .flat_map(|(policy, _)| listers.iter().map(|l| ((*policy, l.name.clone()), first_read(&l.name))))
            .collect();
        let (mut heads, mut asked) = (Heads::new(), BTreeMap::new());
        loop {
            for ((policy, lister_name), size) in to_read {
                let Some(lister) = listers.iter().find(|l| l.name == lister_name) else { continue };
                let before = heads.get(&(policy, lister_name.clone())).map_or(0, Vec::len);
                asked.insert((policy, lister_name.clone()), (before, size));
                if size == 0 {
                    continue;
                }
                let entries =
                    self.read_head(visit_type, policy, lister, reading(&lister.name, true), size, now).await?;
                let mut hosts = entries.iter().map(|e| queue::host_of(&e.url));
                if fairness_key == FairnessKeyOf::Host && hosts.next().is_some_and(|first| hosts.any(|h| h != first)) {
                    locked.several_keys.insert((visit_type.to_owned(), lister_name.clone()));
                }
                if entries.is_empty() {
                    heads.remove(&(policy, lister_name));
                } else {
                    heads.insert((policy, lister_name), entries);
                }
            }
            // At most `queued_key_limit` visits of a key wait in the queue.
            let mut waiting = backlog.by_key.clone();
            let rng = &mut locked.rng;
            let choices =
                plan_round(slots, policies, &heads, self.config.sharing, &mut || rng.random::<f64>(), &mut |entry| {
                    has_room(&mut waiting, key_limit, fairness_key, entry)
                });
            let several_keys = |lister: &str| locked.several_keys.contains(&(visit_type.to_owned(), lister.to_owned()));
            to_read = heads_to_extend(slots, &heads, &asked, &choices, |(_, lister)| read_limit(lister), several_keys);
            if to_read.is_empty() {
                return Ok(Plan { heads, choices, waiting });
            }
        }
    }

    /// The first `limit` entries of `lister`'s index of `policy` a round
    /// chooses from: for first visits, those below the end of its last
    /// listing; for expected value, the due ones, most worth first.
    async fn read_head(
        &self,
        visit_type: &str,
        policy: Policy,
        lister: &ListerRecord,
        reading: Reading,
        limit: usize,
        now: UnixMillis,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        let keys = match policy {
            Policy::FirstVisitsAfterListing => match lister.listing_finished {
                Some(finished) => KeyRange::below(finished),
                None => return Ok(Vec::new()),
            },
            Policy::OriginsWithoutLastUpdate if self.config.blind_visits == BlindVisits::WhenDue => {
                KeyRange::below(now.saturating_add(1))
            }
            Policy::ExpectedValue => return self.read_by_worth(visit_type, &lister.name, reading, limit, now).await,
            _ => KeyRange::ALL,
        };
        self.store.read_index(visit_type, policy.index(), &lister.name, keys, limit).await
    }

    /// Up to `limit` entries of `lister`'s `expected_value` index, most worth
    /// at `now` first: the head of each band of growth (only its entries
    /// due at `due_worth` if `due_only`), ranked together (see
    /// [`rank_by_worth`]).
    async fn read_by_worth(
        &self,
        visit_type: &str,
        lister: &str,
        reading: Reading,
        limit: usize,
        now: UnixMillis,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        let Reading { due_worth, due_only, certain_first } = reading;
        // A band where nothing can be due yet is not read.
        let ranges = Worth::ranges(due_only.then_some(due_worth), now);
        let reads = ranges.into_iter().map(|(from, below)| {
            self.store.read_index(visit_type, Policy::ExpectedValue, lister, KeyRange::between(from, below), limit)
        });
        let entries = futures::future::try_join_all(reads).await?.into_iter().flatten().collect();
        Ok(rank_by_worth(entries, now, due_worth, certain_first)
            .into_iter()
            .take(limit)
            .map(|(entry, _)| entry)
            .collect())
    }

    /// Puts back into the indexes the origins whose cooldowns ended.
    async fn wake(&self, visit_type: &str, now: UnixMillis) -> Result<usize, StoreError> {
        let mut woken = 0;
        loop {
            let due = self.store.read_wakes(visit_type, now, MAX_READ).await?;
            if due.is_empty() {
                return Ok(woken);
            }
            let urls: Vec<String> = due.iter().map(|(_, url)| url.clone()).collect();
            let states = self.store.read_origins(visit_type, &urls).await?;
            // A row that is not where its origin says it waits was left by a
            // write of uncertain outcome: it is only deleted, before the
            // origin's own write.
            let (mut writes, mut current) = (Vec::new(), Vec::new());
            for ((at, _), old) in due.iter().zip(&states) {
                let Some(old) = old else { continue };
                if old.placement.wake_at == Some(*at) {
                    let stats = old.stats.clone();
                    current.push(OriginWrite::new(Some(old), old.origin.clone(), stats, &self.config.cooldowns, now));
                } else {
                    writes.push(OriginWrite {
                        state: old.clone(),
                        unindex: Vec::new(),
                        index: Vec::new(),
                        unwake: Some(*at),
                        wake: None,
                        metrics: Vec::new(),
                    });
                }
            }
            woken += current.len();
            writes.append(&mut current);
            if writes.is_empty() {
                return Ok(woken);
            }
            self.store.apply(&writes).await?;
            if due.len() < MAX_READ {
                return Ok(woken);
            }
        }
    }
}
