//! Whether the scheduler left a visit that a free loader could run: the
//! "eligible visits" of "loaders busy while eligible visits exist".
//!
//! A visit is eligible when the scheduler holds it due (an `expected_value`
//! entry whose worth reached its lister's due threshold, the one the last
//! round used) or has queued it, and its host is below its politeness limit
//! with the origin neither queued nor running (or, queued, it waits for a
//! loader). Visits the scheduler does not hold due are not eligible: it
//! leaves loaders idle rather than spend them on visits likely to find
//! nothing, and this measure does not count that choice against it. What
//! it does count is a due visit held back for want of room in its key's
//! share of the queue while its own host could run it: the clog of
//! politeness-bound hosts.
//!
//! Arms whose rounds do not read the `expected_value` index (the reference's
//! policies) have no due threshold, so nothing is measured for them.

use std::collections::BTreeMap;

use fairway::core::visits::value::{Worth, worth_of_chance};
use fairway::core::visits::{KeyRange, Policy};
use fairway::store::visits::VisitStore;

use super::forge::Forge;
use super::queue::SimQueue;

/// Entries read per key range of a lister's index at most: a check stops at
/// the first eligible visit, and one that reads this many due entries of
/// hosts at their limit calls the lister's visits ineligible.
const READ_LIMIT: usize = 2_000;

/// Whether a visit of `visit_type` is eligible at `now` (see the module
/// doc), with `due_chance` each lister's threshold as the last round set it.
pub(super) async fn exists(
    store: &dyn VisitStore,
    visit_type: &str,
    queue: &SimQueue,
    due_chance: &BTreeMap<String, f64>,
    now: i64,
) -> anyhow::Result<bool> {
    if queue.runnable() {
        return Ok(true);
    }
    for (lister, &chance) in due_chance {
        let due_worth = worth_of_chance(chance);
        for (from, below) in Worth::ranges(Some(due_worth), now) {
            let keys = KeyRange::between(from, below);
            let entries = store.read_index(visit_type, Policy::ExpectedValue.index(), lister, keys, READ_LIMIT).await?;
            let runnable = entries
                .iter()
                .filter(|e| Worth::of_key(e.key).at(now, due_worth) >= due_worth)
                .filter_map(|e| Forge::id_of(&e.url))
                .any(|origin| queue.could_run(origin));
            if runnable {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fairway::store::visits::memory::MemoryVisitStore;
    use fairway::visits::{FairnessKeyOf, ListedReport, Scheduler, SchedulerConfig, Visit, VisitQueue};

    use super::*;
    use crate::simulate::queue::Order;

    const NOW: i64 = 1_000_000;

    /// Two never-visited origins of one host, listed: certain, so due.
    async fn setup() -> (Arc<Forge>, Scheduler, SimQueue, [u32; 2], String) {
        let forge = Arc::new(Forge::tiny());
        let lister = &forge.listers[0];
        let ids: Vec<u32> = lister.origins.clone().collect();
        let first = ids[0];
        let host = forge.origins[first as usize].host;
        let second = *ids[1..].iter().find(|&&id| forge.origins[id as usize].host == host).expect("a host of two");
        let scheduler = Scheduler::new(Arc::new(MemoryVisitStore::new()), SchedulerConfig::default(), 1);
        let reports: Vec<ListedReport> = [first, second]
            .iter()
            .map(|&id| ListedReport {
                url: forge.url(id),
                visit_type: "git".into(),
                last_update: None,
                is_fork: false,
                extra_loader_arguments: String::new(),
            })
            .collect();
        scheduler.record_origins(&lister.name, &reports, NOW - 1).await.unwrap();
        scheduler.finish_listing(&lister.name, NOW - 1).await.unwrap();
        let queue = SimQueue::new(forge.clone(), Order::Fair, 1);
        let name = lister.name.clone();
        (forge, scheduler, queue, [first, second], name)
    }

    #[tokio::test]
    async fn a_due_visit_of_a_free_host_is_eligible_and_one_of_a_host_at_its_limit_is_not() {
        let (forge, scheduler, queue, [first, _second], lister) = setup().await;
        let store = scheduler.store().as_ref();
        let due = BTreeMap::from([(lister.clone(), 0.75)]);
        assert!(exists(store, "git", &queue, &due, NOW).await.unwrap(), "due, and its host runs nothing");
        assert!(!exists(store, "git", &queue, &BTreeMap::new(), NOW).await.unwrap(), "no lister has a threshold");
        // A loader runs the first on their host, whose limit is 1: the
        // second, due and neither queued nor running, cannot start.
        let state = scheduler.origin("git", &forge.url(first)).await.unwrap().expect("recorded");
        let visit = Visit::of(&state.origin, FairnessKeyOf::Lister, 3);
        queue.enqueue("git", &[visit]).await.unwrap();
        assert!(queue.runnable(), "queued on a free host: a loader would take it");
        assert!(exists(store, "git", &queue, &due, NOW).await.unwrap());
        assert_eq!(queue.take(), Some(first));
        assert!(!exists(store, "git", &queue, &due, NOW).await.unwrap(), "the host is at its limit");
        queue.finished(first);
        assert!(exists(store, "git", &queue, &due, NOW).await.unwrap(), "the host is free again");
    }
}
