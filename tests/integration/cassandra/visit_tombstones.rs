//! The scheduler's reads of its index and wake-up heads, where each round
//! deletes what it takes, draw no warning from Cassandra at a threshold of
//! 100 tombstones: each head read is followed by a range delete under its
//! first live row. The control: the same history with the range deletes
//! timestamped an hour before each read (so that they cover nothing) draws
//! warnings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fairway::store::cassandra::CassandraConfig;
use fairway::visits::{
    Backlog, ListedReport, RoundMode, Scheduler, SchedulerConfig, Visit, VisitQueue, VisitQueueError,
};

use super::Keyspace;
use super::tombstones::{TOMBSTONE_BUDGET, check_warn_threshold};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Simulated time of the first round.
const START: i64 = 20_000 * DAY_MS;
const ORIGINS: usize = 2_000;
/// Slots per round: what each round takes from the heads.
const ROUND: u64 = 100;

/// A queue that takes every visit and is always empty again.
#[derive(Default)]
struct Sink {
    sent: Mutex<Vec<String>>,
}

#[async_trait]
impl VisitQueue for Sink {
    async fn backlog(&self, _: &str) -> Result<Backlog, VisitQueueError> {
        Ok(Backlog::default())
    }

    async fn enqueue(&self, _: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError> {
        self.sent.lock().unwrap().extend(visits.iter().map(|v| v.url.clone()));
        Ok(vec![true; visits.len()])
    }
}

impl Sink {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

/// Origins `from..from + count` of one lister, one in ten without an
/// update date, the others updated `update_age` and more before `START`.
fn reports(from: usize, count: usize, update_age: i64) -> Vec<ListedReport> {
    (from..from + count)
        .map(|i| ListedReport {
            url: format!("https://forge.example/origin/{i}"),
            visit_type: "git".into(),
            last_update: (i % 10 != 0).then(|| START - update_age - i as i64 * 1000),
            is_fork: false,
            extra_loader_arguments: String::new(),
        })
        .collect()
}

/// Lists 2,000 origins; schedules 1,900 of them, 100 a round an hour
/// apart; lists 100 more whose entries go below the heads already read,
/// and checks that the next round sends them; then, once the first
/// cooldowns end, runs 20 rounds that each wake 100 origins and schedule
/// 100. Returns how many warnings Cassandra sent on the store's reads.
async fn schedule_history(config: CassandraConfig) -> u64 {
    let keyspace = Keyspace::create().await;
    check_warn_threshold(keyspace.session()).await;
    let cassandra = Arc::new(keyspace.store_with(&config).await);
    // The reference's weighted policies, whose index heads this follows, and
    // no bound per key (the one lister would get 30 a round).
    let scheduler_config = SchedulerConfig {
        queue_length: ROUND,
        mode: RoundMode::ReferenceWeights,
        queued_per_key: 0,
        ..SchedulerConfig::default()
    };
    let scheduler = Scheduler::new(cassandra.clone(), scheduler_config.clone(), 7);
    let sink = Sink::default();
    for chunk in reports(0, ORIGINS, DAY_MS).chunks(500) {
        scheduler.record_origins("lister", chunk, START).await.expect("list origins");
    }
    let mut now = START;
    for _ in 0..(ORIGINS - 100) / ROUND as usize {
        now += HOUR_MS;
        let round = scheduler.run_round("git", &sink, now).await.expect("a round");
        assert_eq!(round.by_policy.values().sum::<u64>(), ROUND, "a round fills its slots");
    }
    sink.take();

    // Updated long before the others: their entries sort first, below every
    // head the rounds read and pruned.
    scheduler.record_origins("lister", &reports(ORIGINS, 100, 1_000 * DAY_MS), now).await.expect("list more");
    now += HOUR_MS;
    scheduler.run_round("git", &sink, now).await.expect("a round");
    let sent = sink.take();
    let listed_last = |url: &&String| url.rsplit('/').next().and_then(|i| i.parse::<usize>().ok()) >= Some(ORIGINS);
    let late = sent.iter().filter(listed_last).count();
    assert_eq!(late, 90, "the 90 origins listed last with an update date are the oldest of their index: {sent:?}");

    now = START + scheduler_config.cooldowns.scheduled.as_millis() as i64 + HOUR_MS / 2;
    for _ in 0..20 {
        now += HOUR_MS;
        let round = scheduler.run_round("git", &sink, now).await.expect("a round");
        assert_eq!(round.woken, ROUND as usize, "each round wakes the origins scheduled a cooldown before");
    }
    let warnings = cassandra.read_warnings();
    eprintln!("{warnings} warnings on reads; {late} of the origins listed last sent first");
    keyspace.drop_keyspace().await;
    warnings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visit_index_and_wake_heads_draw_no_warning() {
    // No margin: each round's writes are acknowledged before the next read.
    let config = CassandraConfig { visit_prune_margin: Duration::ZERO, ..CassandraConfig::default() };
    let warnings = schedule_history(config).await;
    assert_eq!(
        warnings, 0,
        "Cassandra warned that scheduler reads crossed more than {TOMBSTONE_BUDGET} tombstones at index or wake-up heads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pruning_the_visit_heads_draw_warnings() {
    // Range deletes timestamped an hour before each read cover none of the
    // rows the rounds deleted.
    let config = CassandraConfig { visit_prune_margin: Duration::from_secs(3600), ..CassandraConfig::default() };
    let warnings = schedule_history(config).await;
    assert!(warnings > 0, "the same history without pruning drew no warning: is the check blind?");
}
