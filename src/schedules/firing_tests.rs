//! One look of the firing loop acts on several schedules at once, up to
//! `schedules.concurrent_fires` and one per shard, and starts the most
//! urgent first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Barrier;

use super::firing::Firing;
use super::{AddedRun, RunQueue, RunQueueError, Schedules, SchedulesConfig, parse_run_dedup_id};
use crate::clock::{Clock, ManualClock, UnixMillis};
use crate::core::schedules::Cadence;
use crate::store::embedded::EmbeddedStore;
use crate::store::schedules::{RunTemplate, SHARDS, ScheduleRecord, ScheduleStore, shard_of};

/// A queue that notes the schedule of each run as its add starts, and
/// holds every add until `together` adds are in flight; it counts the most
/// adds of one shard in flight at once.
#[derive(Debug)]
struct GatheringQueue {
    started: Mutex<Vec<String>>,
    gate: Barrier,
    in_flight: Mutex<HashMap<u32, usize>>,
    most_of_one_shard: Mutex<usize>,
}

#[async_trait]
impl RunQueue for GatheringQueue {
    async fn prepare(&self, _queue: &str) -> Result<(), RunQueueError> {
        Ok(())
    }

    async fn add_run(&self, _: &RunTemplate, dedup_id: &str, _: UnixMillis) -> Result<AddedRun, RunQueueError> {
        let id = parse_run_dedup_id(dedup_id).expect("a run's dedup id").0.to_owned();
        let shard = shard_of(&id);
        let task_id = {
            let mut started = self.started.lock().unwrap();
            started.push(id);
            started.len() as i64
        };
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let count = in_flight.entry(shard).or_default();
            *count += 1;
            let mut most = self.most_of_one_shard.lock().unwrap();
            *most = (*most).max(*count);
        }
        self.gate.wait().await;
        *self.in_flight.lock().unwrap().get_mut(&shard).expect("counted") -= 1;
        Ok(AddedRun { task_id, duplicate: false })
    }
}

/// A periodic schedule that never ran: due since, and to start by, `created_at`.
fn periodic(id: &str, created_at: UnixMillis) -> ScheduleRecord {
    let cadence = Cadence::Periodic { scheduling_period_ms: 60_000, cooldown_ms: 10_000 };
    super::test_records::record(id, cadence, created_at)
}

/// What one look did: the schedules in the order their adds started, how
/// many it fired, and the most adds of one shard in flight at once.
struct Looked {
    started: Vec<String>,
    fired: usize,
    most_of_one_shard: usize,
}

/// `ids`, due and most urgent first (created in a scrambled order), and one
/// look with `concurrent_fires` against a queue that lets adds through
/// `together` at a time.
async fn look(ids: &[String], concurrent_fires: usize, together: usize) -> Looked {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ScheduleStore> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let mut scrambled: Vec<(usize, &String)> = ids.iter().enumerate().collect();
    scrambled.sort_by_key(|(_, id)| shard_of(id));
    for (urgency, id) in scrambled {
        let created_at = clock.now_ms() - 60_000 + urgency as i64 * 1_000;
        assert!(store.create_schedule(&periodic(id, created_at)).await.unwrap());
    }
    let config = SchedulesConfig { concurrent_fires, ..SchedulesConfig::default() };
    let schedules = Schedules::new(store, clock, config);
    let queue = GatheringQueue {
        started: Mutex::new(Vec::new()),
        gate: Barrier::new(together),
        in_flight: Mutex::new(HashMap::new()),
        most_of_one_shard: Mutex::new(0),
    };
    let shards: Vec<u32> = (0..SHARDS).collect();
    let looked = tokio::time::timeout(Duration::from_secs(10), Firing::default().look(&schedules, &queue, &shards))
        .await
        .unwrap_or_else(|_| panic!("no look ended in 10 s: were {together} adds ever in flight at once?"))
        .unwrap();
    let most_of_one_shard = *queue.most_of_one_shard.lock().unwrap();
    Looked { started: queue.started.into_inner().unwrap(), fired: looked.fired, most_of_one_shard }
}

/// The first `n` ids `s0`, `s1`, … whose shards are all different.
fn ids_in_distinct_shards(n: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    (0..).map(|i| format!("s{i}")).filter(|id| seen.insert(shard_of(id))).take(n).collect()
}

/// Two ids of one shard then two of another, `a` and `b` of each.
fn two_pairs_of_shards() -> Vec<String> {
    let mut by_shard: HashMap<u32, Vec<String>> = HashMap::new();
    let mut pairs = Vec::new();
    for id in (0..).map(|i| format!("x{i}")) {
        let ids = by_shard.entry(shard_of(&id)).or_default();
        ids.push(id);
        if ids.len() == 2 {
            pairs.push(std::mem::take(ids));
            if pairs.len() == 2 {
                break;
            }
        }
    }
    // Most urgent first: both of the first shard, then both of the second.
    pairs.concat()
}

#[tokio::test]
async fn one_at_a_time_the_most_urgent_fires_first() {
    let ids = ids_in_distinct_shards(8);
    let looked = look(&ids, 1, 1).await;
    assert_eq!(looked.started, ids);
    assert_eq!(looked.fired, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_fires_up_to_concurrent_fires_schedules_at_once_most_urgent_started_first() {
    let ids = ids_in_distinct_shards(8);
    let looked = look(&ids, 4, 4).await;
    assert_eq!(looked.fired, 8);
    // Nothing ends before four adds are in flight: the first four started
    // are the four most urgent, in whatever order their adds began.
    let mut first = looked.started[..4].to_vec();
    first.sort_unstable();
    let mut most_urgent = ids[..4].to_vec();
    most_urgent.sort_unstable();
    assert_eq!(first, most_urgent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_of_one_shard_are_acted_on_one_at_a_time() {
    // The two most urgent share a shard: the second waits for the first,
    // and the first of the other shard goes beside it.
    let ids = two_pairs_of_shards();
    let looked = look(&ids, 4, 2).await;
    assert_eq!(looked.fired, 4);
    assert_eq!(looked.most_of_one_shard, 1, "adds of one shard in flight at once (started: {:?})", looked.started);
}
