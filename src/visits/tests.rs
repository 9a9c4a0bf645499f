//! The scheduler's shell on the in-memory store and a model queue: what a
//! round sends, what it marks, and how listings and outcomes move origins.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::*;
use crate::core::visits::value::BANDS;
use crate::core::visits::{DAY_MS, VisitStatus};
use crate::store::StoreResult;
use crate::store::visits::memory::MemoryVisitStore;

const NOW: i64 = 20_000 * DAY_MS;

/// A queue that holds what it is given, refusing once each URL in `refuse`.
#[derive(Default)]
struct ModelQueue {
    queued: Mutex<Vec<Visit>>,
    refuse: Mutex<BTreeSet<String>>,
}

#[async_trait]
impl VisitQueue for ModelQueue {
    async fn backlog(&self, _: &str) -> Result<Backlog, VisitQueueError> {
        let queued = self.queued.lock().unwrap();
        let mut by_key = std::collections::HashMap::new();
        for visit in queued.iter() {
            *by_key.entry(visit.fairness_key.clone()).or_default() += 1;
        }
        Ok(Backlog { total: queued.len() as u64, by_key })
    }

    async fn enqueue(&self, _: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError> {
        let mut queued = self.queued.lock().unwrap();
        Ok(visits
            .iter()
            .map(|v| {
                let ok = !self.refuse.lock().unwrap().remove(&v.url);
                if ok {
                    queued.push(v.clone());
                }
                ok
            })
            .collect())
    }
}

impl ModelQueue {
    fn take(&self) -> Vec<Visit> {
        std::mem::take(&mut *self.queued.lock().unwrap())
    }
}

fn report(url: &str, last_update: Option<i64>) -> ListedReport {
    ListedReport {
        url: url.into(),
        visit_type: "git".into(),
        last_update,
        is_fork: false,
        extra_loader_arguments: String::new(),
    }
}

fn scheduler(config: SchedulerConfig) -> (Scheduler, Arc<MemoryVisitStore>) {
    let store = Arc::new(MemoryVisitStore::new());
    (Scheduler::new(store.clone(), config, 7), store)
}

/// The defaults, with the reference scheduler's policy weights.
fn reference() -> SchedulerConfig {
    SchedulerConfig { mode: RoundMode::ReferenceWeights, ..SchedulerConfig::default() }
}

fn failure(at: i64) -> VisitResult {
    VisitResult { status: VisitStatus::Failed, snapshot: None, visit_date: at, newest_change: None }
}

#[tokio::test]
async fn a_round_shares_slots_equally_among_listers_and_marks_only_what_was_queued() {
    let config = SchedulerConfig { queue_length: 10, ..reference() };
    let (scheduler, _) = scheduler(config);
    let big: Vec<ListedReport> =
        (0..100).map(|i| report(&format!("https://big/{i:03}"), Some(NOW - i * 1000))).collect();
    scheduler.record_origins("big", &big, NOW).await.unwrap();
    scheduler
        .record_origins("small", &[report("https://small/a", Some(NOW)), report("https://small/b", Some(NOW - 1))], NOW)
        .await
        .unwrap();
    let queue = ModelQueue { refuse: Mutex::new(BTreeSet::from(["https://small/b".into()])), ..ModelQueue::default() };
    let round = scheduler.run_round("git", &queue, NOW).await.unwrap();
    assert_eq!(round.slots, 10);
    assert_eq!(round.by_lister, BTreeMap::from([("big".into(), 8), ("small".into(), 1)]), "small/b was refused");
    let sent: BTreeSet<String> = queue.take().into_iter().map(|v| v.url).collect();
    let mut expected: BTreeSet<String> = (92..100).map(|i| format!("https://big/{i:03}")).collect();
    expected.insert("https://small/a".into());
    assert_eq!(sent, expected, "each lister's oldest updates first");
    let refused = scheduler.origin("git", "https://small/b").await.unwrap().unwrap();
    assert_eq!(refused.stats.last_scheduled, None, "not marked: it was not queued");
    let next = scheduler.run_round("git", &queue, NOW + 1).await.unwrap();
    assert_eq!(next.by_lister.get("small"), Some(&1), "the refused origin is offered again");
}

#[tokio::test]
async fn relisting_enables_a_disabled_origin_again() {
    let (scheduler, store) = scheduler(SchedulerConfig::default());
    scheduler.record_origins("l", &[report("u", None)], NOW).await.unwrap();
    for day in 1..=3 {
        assert!(scheduler.record_outcome("git", "u", &failure(NOW + day * DAY_MS), NOW + day * DAY_MS).await.unwrap());
    }
    let disabled = scheduler.origin("git", "u").await.unwrap().unwrap();
    assert!(!disabled.stats.enabled);
    assert_eq!(disabled.placement.keys, Vec::new());
    assert!(store.read_wakes("git", i64::MAX, 10).await.unwrap().is_empty(), "a disabled origin waits for nothing");
    assert!(
        !scheduler.record_outcome("git", "unknown", &failure(NOW), NOW).await.unwrap(),
        "unknown origins are ignored"
    );

    let later = NOW + 30 * DAY_MS;
    scheduler.record_origins("l", &[report("u", None)], later).await.unwrap();
    let enabled = scheduler.origin("git", "u").await.unwrap().unwrap();
    assert!(enabled.stats.enabled);
    assert_eq!(enabled.placement.wake_at, None, "14 days after the last failure: indexed at once");
    assert!(!enabled.placement.keys.is_empty());
    assert_eq!(enabled.origin.first_seen, NOW, "first seen is kept");
}

#[tokio::test]
async fn a_wake_up_row_its_origin_no_longer_holds_is_deleted_alone() {
    let (scheduler, store) = scheduler(SchedulerConfig::default());
    scheduler.record_origins("l", &[report("u", None)], NOW).await.unwrap();
    let state = scheduler.origin("git", "u").await.unwrap().unwrap();
    // A row left behind by a write whose outcome was uncertain.
    let stray = OriginWrite {
        state: state.clone(),
        unindex: Vec::new(),
        index: Vec::new(),
        unwake: None,
        wake: Some(NOW - 5),
        metrics: Vec::new(),
    };
    store.apply(&[stray]).await.unwrap();
    let round = scheduler.run_round("git", &ModelQueue::default(), NOW).await.unwrap();
    assert_eq!(round.woken, 0);
    assert!(store.read_wakes("git", NOW, 10).await.unwrap().is_empty(), "the stray row is gone");
    assert_eq!(round.sent(), 1, "the origin itself was untouched and is sent");
}

#[tokio::test]
async fn the_queue_clock_follows_the_blind_origins_scheduled() {
    let config = SchedulerConfig { blind_visits: BlindVisits::QueueClock, ..reference() };
    let (scheduler, store) = scheduler(config);
    scheduler.record_origins("l", &[report("a", None), report("b", None)], NOW).await.unwrap();
    let queue = ModelQueue::default();
    scheduler.run_round("git", &queue, NOW).await.unwrap();
    assert_eq!(store.queue_position("git").await.unwrap(), 0, "unset positions do not move the clock");
    let visit = VisitResult {
        status: VisitStatus::Successful,
        snapshot: Some(vec![1]),
        visit_date: NOW + 1,
        newest_change: None,
    };
    scheduler.record_outcome("git", "a", &visit, NOW + 1).await.unwrap();
    let a = scheduler.origin("git", "a").await.unwrap().unwrap();
    let position = a.stats.next_visit_queue_position.unwrap();
    assert!((position - 2 * DAY_MS).abs() <= DAY_MS / 5, "from the clock at 0: {position}");
    queue.take();
    let later = NOW + DAY_MS;
    scheduler.run_round("git", &queue, later).await.unwrap();
    assert_eq!(store.queue_position("git").await.unwrap(), position, "the clock moved to the position scheduled");
}

/// A store that counts the rows its reads return.
#[derive(Debug, Default)]
struct CountingStore {
    inner: MemoryVisitStore,
    rows_read: std::sync::atomic::AtomicUsize,
}

impl CountingStore {
    fn count(&self, n: usize) {
        self.rows_read.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn take(&self) -> usize {
        self.rows_read.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl VisitStore for CountingStore {
    async fn read_origins(&self, visit_type: &str, urls: &[String]) -> StoreResult<Vec<Option<OriginState>>> {
        self.count(urls.len());
        self.inner.read_origins(visit_type, urls).await
    }
    async fn apply(&self, writes: &[OriginWrite]) -> StoreResult<()> {
        self.inner.apply(writes).await
    }
    async fn read_index(
        &self,
        visit_type: &str,
        policy: Policy,
        lister: &str,
        keys: crate::core::visits::KeyRange,
        limit: usize,
    ) -> StoreResult<Vec<crate::core::visits::IndexEntry>> {
        let rows = self.inner.read_index(visit_type, policy, lister, keys, limit).await?;
        self.count(rows.len());
        Ok(rows)
    }
    async fn read_wakes(
        &self,
        visit_type: &str,
        through: UnixMillis,
        limit: usize,
    ) -> StoreResult<Vec<(UnixMillis, String)>> {
        let rows = self.inner.read_wakes(visit_type, through, limit).await?;
        self.count(rows.len());
        Ok(rows)
    }
    async fn add_lister(&self, lister: &str, visit_types: &[String]) -> StoreResult<()> {
        self.inner.add_lister(lister, visit_types).await
    }
    async fn finish_listing(&self, lister: &str, at: UnixMillis) -> StoreResult<()> {
        self.inner.finish_listing(lister, at).await
    }
    async fn listers(&self) -> StoreResult<Vec<crate::store::visits::ListerRecord>> {
        self.inner.listers().await
    }
    async fn metrics(&self, lister: &str) -> StoreResult<Vec<(String, crate::core::visits::ListerMetrics)>> {
        self.inner.metrics(lister).await
    }
    async fn queue_position(&self, visit_type: &str) -> StoreResult<i64> {
        self.inner.queue_position(visit_type).await
    }
    async fn set_queue_position(&self, visit_type: &str, position: i64) -> StoreResult<()> {
        self.inner.set_queue_position(visit_type, position).await
    }
}

/// The rows a round reads depend on its free slots, its policies and the
/// listers, never on how many origins there are.
#[tokio::test]
async fn a_round_reads_rows_in_proportion_to_its_slots_not_to_the_origins() {
    let mut read = Vec::new();
    for origins in [1_000, 20_000] {
        let store = Arc::new(CountingStore::default());
        let config = SchedulerConfig { queue_length: 50, ..SchedulerConfig::default() };
        let scheduler = Scheduler::new(store.clone(), config, 1);
        for lister in ["a", "b"] {
            let reports: Vec<ListedReport> = (0..origins / 2)
                .map(|i| report(&format!("https://{lister}/{i}"), (i % 3 != 0).then_some(NOW - i as i64 * 1000)))
                .collect();
            scheduler.record_origins(lister, &reports, NOW).await.unwrap();
        }
        store.take();
        let round = scheduler.run_round("git", &ModelQueue::default(), NOW).await.unwrap();
        assert_eq!(round.sent(), 50);
        read.push(store.take());
    }
    // 2 listers × (the due heads and the spare heads) × at most 50 rows of
    // each band of each kind, plus the point reads of 50 sent and up to 50
    // spares.
    let bound = 2 * 2 * 2 * usize::from(BANDS) * 50 + 2 * 50;
    assert!(read.iter().all(|&rows| rows <= bound), "{read:?} rows, above {bound}");
    assert!(read[1] < 2 * read[0], "twenty times the origins, about the same reads: {read:?}");
}

fn success(snapshot: &[u8], at: i64) -> VisitResult {
    VisitResult {
        status: VisitStatus::Successful,
        snapshot: Some(snapshot.to_vec()),
        visit_date: at,
        newest_change: None,
    }
}

/// Visits `url` every `gap` from `from`, `changes` of them finding a new
/// snapshot (the first visits), the others the same one; returns when the
/// last one ended.
async fn history(scheduler: &Scheduler, url: &str, from: i64, gap: i64, visits: i64, changes: i64) -> i64 {
    let mut at = from;
    for i in 0..visits {
        let snapshot = i.min(changes).to_be_bytes();
        scheduler.record_outcome("git", url, &success(&snapshot, at), at + 60_000).await.unwrap();
        at += gap;
    }
    at
}

#[tokio::test]
async fn rounds_by_expected_value_take_what_most_likely_changed_first() {
    let config = SchedulerConfig { queue_length: 3, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config);
    let start = NOW - 200 * DAY_MS;
    let urls = ["https://h/busy", "https://h/quiet", "https://h/dated", "https://h/new"];
    let undated: Vec<ListedReport> = urls[..2].iter().map(|u| report(u, None)).collect();
    scheduler.record_origins("blind", &undated, start).await.unwrap();
    scheduler.record_origins("dated", &[report(urls[2], Some(start - DAY_MS))], start).await.unwrap();
    // Every other day: "busy" changed each time, "quiet" never after its first.
    history(&scheduler, urls[0], start, 2 * DAY_MS, 40, 40).await;
    history(&scheduler, urls[1], start, 2 * DAY_MS, 40, 0).await;
    let last = history(&scheduler, urls[2], start, 2 * DAY_MS, 40, 0).await;
    let busy = scheduler.origin("git", urls[0]).await.unwrap().unwrap();
    let quiet = scheduler.origin("git", urls[1]).await.unwrap().unwrap();
    assert!(busy.stats.rate.unwrap() > 0.5, "changed at every visit 2 days apart: {:?}", busy.stats.rate);
    assert!(quiet.stats.rate.unwrap() < 0.02, "no change in 80 days: {:?}", quiet.stats.rate);

    // A day after the last visits, with a listed change of "dated" and a new origin.
    let now = last + DAY_MS;
    scheduler.record_origins("dated", &[report(urls[2], Some(now - 1000))], now).await.unwrap();
    scheduler.record_origins("blind", &[report(urls[3], None)], now).await.unwrap();
    let queue = ModelQueue::default();
    let round = scheduler.run_round("git", &queue, now).await.unwrap();
    assert_eq!(round.by_policy, BTreeMap::from([(Policy::ExpectedValue, 3)]));
    let sent: BTreeSet<String> = queue.take().into_iter().map(|v| v.url).collect();
    let expected: BTreeSet<String> = [urls[0], urls[2], urls[3]].map(String::from).into();
    assert_eq!(sent, expected, "the likely change, the listed change and the new origin; not the quiet one");
}

/// When more origins are due than a round has slots, it sends the one whose
/// visit is expected to find the most, not the one due the longest.
#[tokio::test]
async fn under_contention_a_round_takes_the_most_expected_changes_first() {
    // Due at a 50% chance, so that the slow one is due too.
    let config = SchedulerConfig { queue_length: 1, due_chance: 0.5, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config);
    let (slow, fast) = ("https://h/slow", "https://h/fast");
    let start = NOW - 300 * DAY_MS;
    scheduler.record_origins("blind", &[report(slow, None), report(fast, None)], start).await.unwrap();
    // "slow": 40 visits two days apart found nothing new; its last was 150
    // days ago. "fast": changed at each of 40 visits half a day apart; its
    // last was half a day ago.
    history(&scheduler, slow, start, 2 * DAY_MS, 40, 0).await;
    history(&scheduler, fast, NOW - 20 * DAY_MS, DAY_MS / 2, 40, 40).await;
    let (slow_state, fast_state) =
        (scheduler.origin("git", slow).await.unwrap().unwrap(), scheduler.origin("git", fast).await.unwrap().unwrap());
    let (slow_rate, fast_rate) = (f64::from(slow_state.stats.rate.unwrap()), f64::from(fast_state.stats.rate.unwrap()));
    let (slow_known, fast_known) =
        (Freshness::of(&slow_state.origin, &slow_state.stats), Freshness::of(&fast_state.origin, &fast_state.stats));
    let seconds = |s: &OriginState| s.stats.visit_seconds.map(f64::from);
    let slow_due = Worth::of(slow_known, Some(slow_rate), seconds(&slow_state)).due;
    let fast_due = Worth::of(fast_known, Some(fast_rate), seconds(&fast_state)).due;
    assert!(slow_due < fast_due && fast_due <= NOW, "both due, the slow one for longer: {slow_due} {fast_due}");
    assert!(
        fast_known.pending(Some(fast_rate), NOW) > 2.0 * slow_known.pending(Some(slow_rate), NOW),
        "the fast one holds more changes: {fast_rate}/day, {slow_rate}/day"
    );
    let queue = ModelQueue::default();
    assert_eq!(scheduler.run_round("git", &queue, NOW).await.unwrap().sent(), 1);
    assert_eq!(queue.take().into_iter().map(|v| v.url).collect::<Vec<_>>(), vec![fast]);
    assert_eq!(scheduler.run_round("git", &queue, NOW).await.unwrap().sent(), 1);
    assert_eq!(queue.take().into_iter().map(|v| v.url).collect::<Vec<_>>(), vec![slow], "then the other");
}

#[tokio::test]
async fn a_key_with_enough_visits_waiting_leaves_the_queue_to_the_others() {
    // key_concurrency 2 × queued_per_key 3: at most 6 of a lister's visits wait.
    let config =
        SchedulerConfig { queue_length: 100, key_concurrency: 2, queued_per_key: 3, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config);
    let big: Vec<ListedReport> = (0..50).map(|i| report(&format!("https://big/{i:02}"), Some(NOW))).collect();
    let small: Vec<ListedReport> = (0..50).map(|i| report(&format!("https://small/{i:02}"), Some(NOW))).collect();
    scheduler.record_origins("big", &big, NOW).await.unwrap();
    scheduler.record_origins("small", &small, NOW).await.unwrap();
    let queue = ModelQueue::default();
    let round = scheduler.run_round("git", &queue, NOW).await.unwrap();
    assert_eq!(round.by_lister, BTreeMap::from([("big".into(), 6), ("small".into(), 6)]));
    // Two of big's visits leave the queue: two more may wait.
    let mut waiting = queue.take();
    for _ in 0..2 {
        let first_big = waiting.iter().position(|v| v.fairness_key == "big").unwrap();
        waiting.remove(first_big);
    }
    *queue.queued.lock().unwrap() = waiting;
    let round = scheduler.run_round("git", &queue, NOW + 1).await.unwrap();
    assert_eq!(round.by_lister, BTreeMap::from([("big".into(), 2)]));
    let unbounded = SchedulerConfig { queued_per_key: 0, queue_length: 100, ..SchedulerConfig::default() };
    let (scheduler, _) = self::scheduler(unbounded);
    scheduler.record_origins("big", &big, NOW).await.unwrap();
    assert_eq!(scheduler.run_round("git", &ModelQueue::default(), NOW).await.unwrap().sent(), 50, "0: no bound");
}

/// With the host as the fairness key, a lister spread over many hosts gets
/// each host's room, though a round reads it a key's room at first.
#[tokio::test]
async fn with_host_keys_a_round_fills_the_room_of_every_host_of_a_lister() {
    // key_concurrency 2 × queued_per_key 3: at most 6 visits of a host wait.
    let config = SchedulerConfig {
        queue_length: 1000,
        key_concurrency: 2,
        queued_per_key: 3,
        fairness_key: FairnessKeyOf::Host,
        ..SchedulerConfig::default()
    };
    let (scheduler, _) = scheduler(config);
    let spread: Vec<ListedReport> =
        (0..200).map(|i| report(&format!("https://h{}.spread/{i:03}", i % 10), Some(NOW))).collect();
    scheduler.record_origins("spread", &spread, NOW).await.unwrap();
    let queue = ModelQueue::default();
    let round = scheduler.run_round("git", &queue, NOW).await.unwrap();
    assert_eq!(round.sent(), 60, "6 on each of 10 hosts");
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for visit in queue.take() {
        *per_host.entry(visit.fairness_key).or_default() += 1;
    }
    assert_eq!(per_host, (0..10).map(|h| (format!("h{h}.spread"), 6)).collect());
}

/// With the host as the fairness key, what a round reads of a lister whose
/// one host has no room left is bounded by that room, not by the free slots.
#[tokio::test]
async fn with_host_keys_a_round_reads_a_full_host_no_further_than_its_room() {
    let mut read = Vec::new();
    for queue_length in [1_000, 10_000] {
        let store = Arc::new(CountingStore::default());
        let config = SchedulerConfig {
            queue_length,
            key_concurrency: 2,
            queued_per_key: 3,
            fairness_key: FairnessKeyOf::Host,
            spare_chance: 1.0,
            ..SchedulerConfig::default()
        };
        let scheduler = Scheduler::new(store.clone(), config, 1);
        let one: Vec<ListedReport> = (0..20_000).map(|i| report(&format!("https://one/{i:05}"), Some(NOW))).collect();
        scheduler.record_origins("one", &one, NOW).await.unwrap();
        store.take();
        let round = scheduler.run_round("git", &ModelQueue::default(), NOW).await.unwrap();
        assert_eq!(round.sent(), 6, "the host's room");
        read.push(store.take());
    }
    // Each band read at 6 rows, then at 12 (the 6 taken may have more
    // behind them), and the 6 sent read again.
    let bound = usize::from(BANDS) * (6 + 12) + 6;
    assert!(read.iter().all(|&rows| rows <= bound), "{read:?} rows, above {bound}");
}

/// New origins and listed changes hold a change for certain: whatever the
/// chance at which the others are due, they are due from when it became
/// known, and go as due visits, not as spares.
#[tokio::test]
async fn new_origins_and_listed_changes_are_due_at_once_at_any_due_chance() {
    for due_chance in [0.1, 0.5, 0.7, 0.95] {
        let config = SchedulerConfig { queue_length: 5, spare_chance: 1.0, due_chance, ..SchedulerConfig::default() };
        let (scheduler, _) = scheduler(config.clone());
        let (dated, new) = ("https://h/dated", "https://h/new");
        let start = NOW - 100 * DAY_MS;
        scheduler.record_origins("dated", &[report(dated, Some(start - DAY_MS))], start).await.unwrap();
        history(&scheduler, dated, start, 2 * DAY_MS, 10, 0).await;
        scheduler.record_origins("dated", &[report(dated, Some(NOW - 1000))], NOW).await.unwrap();
        scheduler.record_origins("blind", &[report(new, None)], NOW).await.unwrap();
        let queue = ModelQueue::default();
        let round = scheduler.run_round("git", &queue, NOW).await.unwrap();
        assert_eq!(round.by_policy, BTreeMap::from([(Policy::ExpectedValue, 2)]), "at due_chance {due_chance}");
        let sent = queue.take();
        assert!(sent.iter().all(|v| v.priority == config.priority), "as due visits at due_chance {due_chance}");
    }
}

/// Spare capacity goes to origins not due yet, whether their lister gives
/// dates or not: a visit before the listing finds the changes made since
/// it, with the chance their rate gives.
#[tokio::test]
async fn spare_capacity_speculates_on_origins_with_dates_or_without() {
    let config = SchedulerConfig { queue_length: 100, spare_chance: 0.01, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config.clone());
    let (dated, blind) = ("https://h/dated", "https://h/blind");
    let start = NOW - 40 * DAY_MS;
    scheduler.record_origins("dated", &[report(dated, Some(start - DAY_MS))], start).await.unwrap();
    scheduler.record_origins("blind", &[report(blind, None)], start).await.unwrap();
    // Both changed at each of 10 visits a day apart, the last ones an hour
    // ago: a chance of change of some percent, not due.
    for url in [dated, blind] {
        history(&scheduler, url, NOW - 9 * DAY_MS - 3_600_000, DAY_MS, 10, 10).await;
    }
    let queue = ModelQueue::default();
    let round = scheduler.run_round("git", &queue, NOW).await.unwrap();
    let sent = queue.take();
    let mut urls: Vec<&str> = sent.iter().map(|v| v.url.as_str()).collect();
    urls.sort_unstable();
    assert_eq!(urls, vec![blind, dated], "{round:?}");
    assert!(sent.iter().all(|v| v.priority == config.spare_priority));
}

/// A lister whose due visits do not all fit finds its loaders busy: its
/// threshold rises and its next round sends the sure visit (a new origin)
/// before one that may find nothing, though that one is worth more; once
/// every due visit of it goes, the threshold falls back.
#[tokio::test]
async fn a_lister_with_more_due_than_room_sends_sure_visits_first_then_relaxes() {
    let config = SchedulerConfig { queue_length: 1, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config.clone());
    let (fast1, fast2, new) = ("https://h/fast1", "https://h/fast2", "https://h/new");
    scheduler.record_origins("blind", &[report(fast1, None), report(fast2, None)], NOW - 30 * DAY_MS).await.unwrap();
    // Both changed at each of 40 visits half a day apart, the last two days ago.
    for url in [fast1, fast2] {
        history(&scheduler, url, NOW - 22 * DAY_MS, DAY_MS / 2, 40, 40).await;
    }
    scheduler.record_origins("blind", &[report(new, None)], NOW).await.unwrap();
    let queue = ModelQueue::default();
    let idle = config.due_chance;

    let first = scheduler.run_round("git", &queue, NOW).await.unwrap();
    assert_eq!(first.due_chance.get("blind"), Some(&idle));
    let sent: Vec<String> = queue.take().into_iter().map(|v| v.url).collect();
    assert!(
        sent == [fast1] || sent == [fast2],
        "by worth, a fast origin two days unvisited before the new one: {sent:?}"
    );
    let other = if sent == [fast1] { fast2 } else { fast1 };

    let second = scheduler.run_round("git", &queue, NOW + 1000).await.unwrap();
    let raised = second.due_chance["blind"];
    assert!(raised > idle, "two due visits were left for one slot: {raised}");
    let sent: Vec<String> = queue.take().into_iter().map(|v| v.url).collect();
    assert_eq!(sent, vec![new.to_owned()], "busy: the sure visit first, though {other} is worth as much as the first");

    scheduler.run_round("git", &queue, NOW + 2000).await.unwrap();
    assert_eq!(queue.take().into_iter().map(|v| v.url).collect::<Vec<_>>(), vec![other.to_owned()]);
    // Nothing due is left, and the slot is free.
    let fourth = scheduler.run_round("git", &queue, NOW + 3000).await.unwrap();
    assert!(queue.take().is_empty());
    let fifth = scheduler.run_round("git", &queue, NOW + 4000).await.unwrap();
    assert!(fifth.due_chance["blind"] < fourth.due_chance["blind"], "every due visit went: it falls back");
    assert!(fifth.due_chance["blind"] >= idle);
}

/// An origin whose lister gives dates is due later than one whose lister
/// does not, at the same chance of change: its next listing would show the
/// change, so a visit before it is credited with part of its rate.
#[tokio::test]
async fn a_listed_origin_waits_for_a_surer_chance_than_an_unlisted_one() {
    let config = SchedulerConfig { queue_length: 100, ..SchedulerConfig::default() };
    let (scheduler, _) = scheduler(config.clone());
    let (dated, blind) = ("https://h/dated", "https://h/blind");
    let start = NOW - 40 * DAY_MS;
    scheduler.record_origins("dated", &[report(dated, Some(start - DAY_MS))], start).await.unwrap();
    scheduler.record_origins("blind", &[report(blind, None)], start).await.unwrap();
    let last = NOW - DAY_MS;
    for url in [dated, blind] {
        history(&scheduler, url, last - 9 * DAY_MS, DAY_MS, 10, 10).await;
    }
    let rate = |state: &OriginState| f64::from(state.stats.rate.unwrap());
    let (dated_rate, blind_rate) = (
        rate(&scheduler.origin("git", dated).await.unwrap().unwrap()),
        rate(&scheduler.origin("git", blind).await.unwrap().unwrap()),
    );
    // The first time each origin's own chance of a change since its last
    // visit reaches `chance`.
    let when = |rate: f64, chance: f64| last + ((-(1.0 - chance).ln() / rate) * DAY_MS as f64).ceil() as i64;
    let queue = ModelQueue::default();

    // Both at an 80% chance or more, the dated one below 90%.
    let now = when(blind_rate, 0.8).max(when(dated_rate, 0.8));
    assert!(now < when(dated_rate, 0.9), "rates {dated_rate} and {blind_rate} too far apart for the test");
    let round = scheduler.run_round("git", &queue, now).await.unwrap();
    let sent: Vec<String> = queue.take().into_iter().map(|v| v.url).collect();
    assert_eq!(sent, vec![blind.to_owned()], "only the origin no listing would tell of: {round:?}");

    // At a 97% chance the listed one is due too.
    let now = when(dated_rate, 0.97);
    scheduler.run_round("git", &queue, now).await.unwrap();
    let sent: Vec<String> = queue.take().into_iter().map(|v| v.url).collect();
    assert_eq!(sent, vec![dated.to_owned()]);
}
