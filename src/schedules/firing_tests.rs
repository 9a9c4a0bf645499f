//! One look of the firing loop acts on several schedules at once, up to
//! `schedules.concurrent_fires`, and starts the most urgent first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Barrier;

use super::firing::Firing;
use super::{AddedRun, RunQueue, RunQueueError, Schedules, SchedulesConfig, parse_run_dedup_id};
use crate::clock::{Clock, ManualClock, UnixMillis};
use crate::core::schedules::Cadence;
use crate::store::embedded::EmbeddedStore;
use crate::store::schedules::{RunTemplate, SHARDS, ScheduleRecord, ScheduleStore};

/// A queue that notes the schedule of each run as its add starts, and
/// holds every add until `together` adds are in flight.
#[derive(Debug)]
struct GatheringQueue {
    started: Mutex<Vec<String>>,
    gate: Barrier,
}

#[async_trait]
impl RunQueue for GatheringQueue {
    async fn prepare(&self, _queue: &str) -> Result<(), RunQueueError> {
        Ok(())
    }

    async fn add_run(&self, _: &RunTemplate, dedup_id: &str, _: UnixMillis) -> Result<AddedRun, RunQueueError> {
        let task_id = {
            let mut started = self.started.lock().unwrap();
            started.push(parse_run_dedup_id(dedup_id).expect("a run's dedup id").0.to_owned());
            started.len() as i64
        };
        self.gate.wait().await;
        Ok(AddedRun { task_id, duplicate: false })
    }
}

/// A periodic schedule that never ran: due since, and to start by, `created_at`.
fn periodic(id: &str, created_at: UnixMillis) -> ScheduleRecord {
    let cadence = Cadence::Periodic { scheduling_period_ms: 60_000, cooldown_ms: 10_000 };
    super::test_records::record(id, cadence, created_at)
}

/// Eight due schedules, `s0` the most urgent (created first) and `s7` the
/// least, created in a scrambled order; one look with `concurrent_fires`,
/// against a queue that lets adds through `together` at a time. Returns
/// the schedules in the order their adds started, and how many the look fired.
async fn look(concurrent_fires: usize, together: usize) -> (Vec<String>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ScheduleStore> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    for i in [5, 2, 7, 0, 3, 6, 1, 4] {
        let created_at = clock.now_ms() - 60_000 + i * 1_000;
        assert!(store.create_schedule(&periodic(&format!("s{i}"), created_at)).await.unwrap());
    }
    let config = SchedulesConfig { concurrent_fires, ..SchedulesConfig::default() };
    let schedules = Schedules::new(store, clock, config);
    let queue = GatheringQueue { started: Mutex::new(Vec::new()), gate: Barrier::new(together) };
    let shards: Vec<u32> = (0..SHARDS).collect();
    let looked = tokio::time::timeout(Duration::from_secs(10), Firing::default().look(&schedules, &queue, &shards))
        .await
        .unwrap_or_else(|_| panic!("no look ended in 10 s: were {together} adds ever in flight at once?"))
        .unwrap();
    (queue.started.into_inner().unwrap(), looked.fired)
}

#[tokio::test]
async fn one_at_a_time_the_most_urgent_fires_first() {
    let (started, fired) = look(1, 1).await;
    assert_eq!(started, ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"]);
    assert_eq!(fired, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_fires_up_to_concurrent_fires_schedules_at_once_most_urgent_started_first() {
    let (started, fired) = look(4, 4).await;
    assert_eq!(fired, 8);
    // Nothing ends before four adds are in flight: the first four started
    // are the four most urgent, in whatever order their adds began.
    let mut first: Vec<&str> = started[..4].iter().map(String::as_str).collect();
    first.sort_unstable();
    assert_eq!(first, ["s0", "s1", "s2", "s3"]);
}
