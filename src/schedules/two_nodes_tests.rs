//! Two nodes firing the same schedules at once, on one embedded store, with a
//! queue that keeps dedup ids as the real one does: every tick is added
//! once, no schedule has two runs in flight, and every run fired is
//! accounted for (invariants 1 and 2 of [`super`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::firing::Firing;
use super::lifecycle::TaskEnd;
use super::{AddedRun, RunQueue, RunQueueError, Schedules, SchedulesConfig, parse_run_dedup_id};
use crate::clock::{Clock, ManualClock, SharedClock, UnixMillis};
use crate::core::schedules::Cadence;
use crate::store::embedded::EmbeddedStore;
use crate::store::schedules::{RunTemplate, SHARDS, ScheduleRecord, ScheduleStore};

/// A queue that holds one pending or running task per dedup id, as the
/// partitions do.
#[derive(Debug, Default)]
struct DedupQueue {
    state: Mutex<DedupState>,
}

#[derive(Debug, Default)]
struct DedupState {
    next_id: i64,
    /// Tasks pending or running, by dedup id.
    live: HashMap<String, i64>,
    /// Every task added, with its dedup id.
    added: Vec<(i64, String)>,
}

#[async_trait]
impl RunQueue for DedupQueue {
    async fn prepare(&self, _queue: &str) -> Result<(), RunQueueError> {
        Ok(())
    }

    async fn add_run(&self, _: &RunTemplate, dedup_id: &str, _: UnixMillis) -> Result<AddedRun, RunQueueError> {
        // Let the other node's look interleave with this one.
        tokio::task::yield_now().await;
        let mut state = self.state.lock().unwrap();
        if let Some(&task_id) = state.live.get(dedup_id) {
            return Ok(AddedRun { task_id, duplicate: true });
        }
        state.next_id += 1;
        let task_id = state.next_id;
        state.live.insert(dedup_id.to_owned(), task_id);
        state.added.push((task_id, dedup_id.to_owned()));
        Ok(AddedRun { task_id, duplicate: false })
    }
}

/// A schedule every minute, each tick jittered up to 10 s.
fn record(id: &str, created_at: UnixMillis) -> ScheduleRecord {
    let cadence =
        Cadence::Interval { every_ms: 60_000, phase_ms: 0, jitter_ms: 10_000, max_schedule_duration_ms: 60_000 };
    super::test_records::record(id, cadence, created_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_firing_at_once_add_each_tick_once() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ScheduleStore> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let shared: SharedClock = clock.clone();
    for i in 0..40 {
        assert!(store.create_schedule(&record(&format!("s{i:02}"), clock.now_ms())).await.unwrap());
    }
    let nodes: Vec<Arc<Schedules>> =
        (0..2).map(|_| Arc::new(Schedules::new(store.clone(), shared.clone(), SchedulesConfig::default()))).collect();
    let queue = Arc::new(DedupQueue::default());
    let shards: Vec<u32> = (0..SHARDS).collect();
    let (mut first, mut second) = (Firing::default(), Firing::default());

    for round in 0..30 {
        let (a, b) = tokio::join!(
            first.look(&nodes[0], queue.as_ref(), &shards),
            second.look(&nodes[1], queue.as_ref(), &shards)
        );
        a.unwrap();
        b.unwrap();
        // Workers take every live run, half of them on each node's API,
        // and all but every seventh end well.
        let live: Vec<(String, i64)> =
            queue.state.lock().unwrap().live.iter().map(|(d, id)| (d.clone(), *id)).collect();
        for (n, (dedup_id, task_id)) in live.iter().enumerate() {
            let node = &nodes[n % 2];
            node.run_started(dedup_id, *task_id, 1).await.unwrap();
            let end =
                if (task_id + round) % 7 == 0 { TaskEnd::Failed { will_retry: false } } else { TaskEnd::Completed };
            node.run_ended(dedup_id, end).await.unwrap();
            queue.state.lock().unwrap().live.remove(dedup_id);
        }
        clock.advance(Duration::from_secs(50));
    }

    let added = queue.state.lock().unwrap().added.clone();
    let mut per_tick: HashMap<(&str, UnixMillis), usize> = HashMap::new();
    for (_, dedup_id) in &added {
        let (id, nominal) = parse_run_dedup_id(dedup_id).expect("a run's dedup id");
        *per_tick.entry((id, nominal)).or_default() += 1;
    }
    let twice: Vec<_> = per_tick.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks added more than once: {twice:?}");
    let mut fired = 0;
    for i in 0..40 {
        let record = store.schedule(&format!("s{i:02}")).await.unwrap().unwrap();
        assert!(record.stats.runs.is_empty(), "every run ended: {:?}", record.stats.runs);
        fired += record.stats.counts.fired;
        assert!(record.stats.counts.fired >= 1, "{} never fired", record.id);
    }
    assert_eq!(fired as usize, added.len(), "every task added is a run its schedule counts");
    // 25 ticks passed; a failure backs its schedule off by 5 min, two by 1 h.
    assert!(fired > 40 * 5, "only {fired} runs fired");
}
