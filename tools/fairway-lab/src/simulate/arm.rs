//! One arm of the simulation: the real [`Scheduler`] on an in-memory store,
//! driven in virtual time by an event loop (listings, rounds, visit ends),
//! with the queue and loaders of [`super::queue`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use fairway::clock::millis;
use fairway::core::visits::{Policy, VisitResult, VisitStatus};
use fairway::store::visits::memory::MemoryVisitStore;
use fairway::visits::{ListedReport, Scheduler, SchedulerConfig};

use super::eligible;
use super::forge::Forge;
use super::metrics::{ArmSummary, Ending, Tracker};
use super::queue::{Order, SimQueue};

const VISIT_TYPE: &str = "git";
/// Origins per `record_origins` call of a listing.
const BATCH: usize = 1000;
/// From a visit leaving the queue to the loader starting it.
const DISPATCH_MS: i64 = 1000;
/// Chance that a visit of a live origin fails.
pub(super) const FAIL_SHARE: f64 = 0.02;
/// Visit durations: log-normal, median 60 s, σ = 1 (mean ≈ 100 s), kept
/// within 5 s and 2 h; a not-found visit takes 5 to 15 s.
const MEDIAN_VISIT_S: f64 = 60.0;
const SIGMA: f64 = 1.0;
/// How often, in virtual time, the run checks after a round whether a free
/// loader would have had an eligible visit (see [`super::eligible`]).
pub(super) const ELIGIBLE_EVERY_MS: i64 = 30 * 60 * 1000;

/// What differs between the arms.
#[derive(Clone, Debug)]
pub(crate) struct ArmSpec {
    pub name: &'static str,
    pub config: SchedulerConfig,
    pub order: Order,
}

/// What both arms share besides the forge.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Capacity {
    pub loaders: u32,
    pub host_limit: u32,
    /// Whether a loader reports the date of the newest change its
    /// snapshot holds (its latest commit's), as `VisitOutcome.newest_change`.
    pub change_dates: bool,
}

// Events at the same time: visit ends first (they free loaders), then
// listings, then rounds.
const END: u8 = 0;
const LISTING: u8 = 1;
const ROUND: u8 = 2;

/// (time, kind, sequence, lister or origin), earliest first.
type Event = Reverse<(i64, u8, u64, u32)>;

/// Runs one arm to the end of the forge's time; `clock` follows its
/// virtual time (for a progress display).
pub(super) async fn run(
    forge: Arc<Forge>,
    spec: &ArmSpec,
    capacity: Capacity,
    clock: &AtomicI64,
) -> anyhow::Result<ArmSummary> {
    let seed = forge.params.seed;
    let scheduler = Scheduler::new(Arc::new(MemoryVisitStore::new()), spec.config.clone(), seed);
    let queue = SimQueue::new(forge.clone(), spec.order, capacity.host_limit);
    let mut tracker = Tracker::new(&forge);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5157);
    let (start, end) = (forge.params.start, forge.end());

    let mut events: BinaryHeap<Event> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<Event>, at: i64, kind: u8, what: u32| {
        seq += 1;
        events.push(Reverse((at, kind, seq, what)));
    };
    for lister in 0..forge.listers.len() as u32 {
        push(&mut events, start, LISTING, lister);
    }
    push(&mut events, start, ROUND, 0);
    // Running visits: origin → (start, what it finds).
    let mut running: HashMap<u32, (i64, Ending)> = HashMap::new();
    let mut rounds = 0u64;
    let round_interval = millis(spec.config.round_interval);
    let idle_interval = millis(spec.config.idle_interval);
    // Whether visits waited in the queue, and since when the loaders ran as
    // they do now.
    let (mut waiting, mut since) = (false, start);
    // Each lister's due threshold as the last round set it, and when the
    // next check of eligible visits is due; none for an arm whose rounds
    // have no threshold.
    let mut due_chance = BTreeMap::new();
    let measures_eligible = spec.config.policies_for(VISIT_TYPE).iter().any(|(p, _)| *p == Policy::ExpectedValue);
    let mut next_check = start;

    while let Some(Reverse((now, kind, _, what))) = events.pop() {
        if now > end {
            break;
        }
        if waiting {
            tracker.while_waiting(now - since, running.len() as u32, capacity.loaders);
        }
        since = now;
        match kind {
            END => {
                let (started, found) = running.remove(&what).expect("a visit that ends was running");
                let (status, snapshot, newest) = match found {
                    Ending::Version { version, newest } => {
                        (VisitStatus::Successful, Some(version.to_be_bytes().to_vec()), Some(newest))
                    }
                    Ending::Failed => (VisitStatus::Failed, None, None),
                    Ending::NotFound => (VisitStatus::NotFound, None, None),
                };
                let newest_change = newest.filter(|_| capacity.change_dates);
                let outcome = VisitResult { status, snapshot, visit_date: started, newest_change };
                scheduler.record_outcome(VISIT_TYPE, &forge.url(what), &outcome, now).await?;
                queue.finished(what);
            }
            LISTING => {
                list(&forge, &scheduler, &mut tracker, what as usize, now).await?;
                push(&mut events, now + forge.listers[what as usize].period_ms, LISTING, what);
            }
            _ => {
                let mut report = scheduler.run_round(VISIT_TYPE, &queue, now).await.context("a round")?;
                due_chance.append(&mut report.due_chance);
                rounds += 1;
                let next = if report.sent() > 0 { round_interval } else { idle_interval };
                push(&mut events, now + next, ROUND, 0);
            }
        }
        // Free loaders take what they may.
        while running.len() < capacity.loaders as usize {
            let Some(id) = queue.take() else { break };
            let at = now + DISPATCH_MS;
            let origin = forge.origins[id as usize];
            let decided = if origin.dead {
                Some(Ending::NotFound)
            } else if rng.random::<f64>() < FAIL_SHARE {
                Some(Ending::Failed)
            } else {
                None
            };
            let found = tracker.visit(id, at, decided);
            let duration = match found {
                Ending::NotFound => rng.random_range(5_000..15_000),
                _ => visit_duration(&mut rng),
            };
            tracker.busy(at, at + duration);
            running.insert(id, (at, found));
            push(&mut events, at + duration, END, id);
        }
        waiting = queue.waiting() > 0;
        if kind == ROUND && measures_eligible && now >= next_check {
            let store = scheduler.store().as_ref();
            let eligible = eligible::exists(store, VISIT_TYPE, &queue, &due_chance, now).await?;
            tracker.eligible_sample(eligible, running.len() as u32, capacity.loaders);
            next_check = now + ELIGIBLE_EVERY_MS;
        }
        clock.store(now, Ordering::Relaxed);
    }
    clock.store(end, Ordering::Relaxed);
    Ok(tracker.summary(spec.name, rounds, queue.peak_per_host(), capacity.loaders))
}

/// A listing of `lister` at `now`: every origin created by then, with its
/// last update if the lister gives it, in batches, then the listing's end.
async fn list(
    forge: &Forge,
    scheduler: &Scheduler,
    tracker: &mut Tracker<'_>,
    lister: usize,
    now: i64,
) -> anyhow::Result<()> {
    let record = &forge.listers[lister];
    let mut batch = Vec::with_capacity(BATCH);
    for id in record.origins.clone() {
        if forge.origins[id as usize].created > now {
            break; // The rest are newer still.
        }
        let last_update = tracker.listed(id, now);
        batch.push(ListedReport {
            url: forge.url(id),
            visit_type: VISIT_TYPE.to_owned(),
            last_update: record.dated.then_some(last_update),
            is_fork: false,
            extra_loader_arguments: String::new(),
        });
        if batch.len() == BATCH {
            scheduler.record_origins(&record.name, &batch, now).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        scheduler.record_origins(&record.name, &batch, now).await?;
    }
    scheduler.finish_listing(&record.name, now).await?;
    Ok(())
}

/// A log-normal duration in milliseconds.
fn visit_duration(rng: &mut StdRng) -> i64 {
    // Box–Muller.
    let (u, v): (f64, f64) = (rng.random::<f64>(), rng.random::<f64>());
    let normal = (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos();
    let seconds = (MEDIAN_VISIT_S * (SIGMA * normal).exp()).clamp(5.0, 7_200.0);
    (seconds * 1000.0) as i64
}
