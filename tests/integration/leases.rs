//! Worker leases, retries, dead letters, delays, dedup and per-key limits,
//! end to end over gRPC on the embedded store. Time is a manual clock: a
//! lease expires, a backoff ends or a delay passes only when the test moves
//! it; the tests wait on what DescribeQueue reports, never on the wall clock.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{Clock, ManualClock};
use fairway::config::Config;
use fairway::core::engine::TaskPolicy;
use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Backend, Client, TestServer, add, describe, poll, spec, wait};

const QUEUE: &str = "leased";
const START_MS: i64 = 1_700_000_000_000;
/// How long a poll that must come back empty waits.
const EMPTY: Duration = Duration::from_millis(150);
/// How long a poll that must find a task may wait.
const FOUND: Duration = Duration::from_secs(10);

fn policy() -> TaskPolicy {
    TaskPolicy {
        lease_timeout: Duration::from_secs(10),
        max_attempts: 3,
        backoff_initial: Duration::from_secs(2),
        backoff_max: Duration::from_secs(60),
        backoff_jitter: 0.0,
        ..TaskPolicy::default()
    }
}

struct Harness {
    server: TestServer,
    clock: Arc<ManualClock>,
    client: Client,
}

impl Harness {
    async fn start(policy: TaskPolicy) -> Harness {
        let mut config = Config::default();
        config.writer.keeper_interval = Duration::from_millis(20);
        config.tasks = policy;
        let clock = Arc::new(ManualClock::new(START_MS));
        let server = TestServer::start_timed(Backend::Embedded, config, clock.clone()).await;
        let client = server.client.clone();
        Harness { server, clock, client }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn add(&mut self, key: &str) -> i64 {
        add(&mut self.client, QUEUE, spec(key, 0.0, 0, key.as_bytes())).await.expect("AddTask").task_id
    }

    async fn poll(&mut self, max_wait: Duration) -> Option<pb::Task> {
        poll(&mut self.client, QUEUE, max_wait).await
    }

    async fn take(&mut self) -> pb::Task {
        self.poll(FOUND).await.expect("a task is ready")
    }

    async fn complete(&mut self, task: &pb::Task) -> Result<(), tonic::Status> {
        let request = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] };
        self.client.complete_task(request).await.map(drop)
    }

    async fn fail(&mut self, task: &pb::Task, retryable: bool, message: &str) -> pb::FailTaskResponse {
        let request = pb::FailTaskRequest {
            lease_token: task.lease_token.clone(),
            retryable,
            message: message.into(),
            retry_after: None,
        };
        self.client.fail_task(request).await.expect("FailTask").into_inner()
    }

    async fn heartbeat(&mut self, task: &pb::Task) -> Result<pb::HeartbeatTaskResponse, tonic::Status> {
        let request = pb::HeartbeatTaskRequest { lease_token: task.lease_token.clone() };
        self.client.heartbeat_task(request).await.map(|r| r.into_inner())
    }

    /// Waits until the queue's (leased, delayed) counts are `expected`; at
    /// most 30 s, then fails saying what it saw last.
    async fn until_counts(&mut self, expected: (u64, u64)) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let state = describe(&mut self.client, QUEUE).await;
            let counts = state.partitions.iter().fold((0, 0), |(l, d), p| (l + p.leased, d + p.delayed));
            if counts == expected {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "(leased, delayed) still {counts:?} after 30 s, waiting for {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn stop(self) {
        self.server.stop().await;
    }
}

fn millis(timestamp: Option<prost_types::Timestamp>) -> i64 {
    let t = timestamp.expect("a timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

fn assert_stale(result: Result<impl std::fmt::Debug, tonic::Status>) {
    let status = result.expect_err("a stale token must be refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("lease_token"), "{status:?}");
}

#[tokio::test]
async fn an_expired_lease_is_delivered_again_and_its_old_token_refused() {
    let mut h = Harness::start(policy()).await;
    let id = h.add("k").await;
    let first = h.take().await;
    assert_eq!((first.task_id, first.attempt), (id, 1));
    assert_eq!(millis(first.lease_deadline), h.now_ms() + 10_000);

    h.clock.advance(Duration::from_secs(11));
    h.until_counts((0, 1)).await;
    assert!(h.poll(EMPTY).await.is_none(), "not before its backoff (2 s) has passed");
    h.clock.advance(Duration::from_secs(2));
    let second = h.take().await;
    assert_eq!((second.task_id, second.attempt), (id, 2));

    assert_stale(h.complete(&first).await);
    assert_stale(h.heartbeat(&first).await);
    h.complete(&second).await.expect("the current token completes");
    assert_stale(h.complete(&second).await);
    h.until_counts((0, 0)).await;
    h.clock.advance(Duration::from_secs(3600));
    assert!(h.poll(EMPTY).await.is_none(), "a completed task never comes back");
    h.stop().await;
}

#[tokio::test]
async fn a_heartbeat_keeps_a_lease_past_its_first_deadline() {
    let mut h = Harness::start(policy()).await;
    h.add("kept").await;
    h.add("dropped").await;
    let kept = h.take().await;
    let dropped = h.take().await;

    h.clock.advance(Duration::from_secs(8));
    let extended = h.heartbeat(&kept).await.expect("HeartbeatTask");
    assert_eq!(millis(extended.lease_deadline), h.now_ms() + 10_000);
    // Past both first deadlines: the lease without a heartbeat expires (both
    // are judged in the same pass), the other is still held.
    h.clock.advance(Duration::from_secs(3));
    h.until_counts((1, 1)).await;
    h.complete(&kept).await.expect("the heartbeated lease is still held");
    assert_stale(h.complete(&dropped).await);
    h.stop().await;
}

#[tokio::test]
async fn retries_back_off_exponentially_then_the_task_is_a_dead_letter_until_redriven() {
    let mut h = Harness::start(policy()).await;
    let id = h.add("flaky").await;

    let first = h.take().await;
    let failed = h.fail(&first, true, "first").await;
    assert!(failed.will_retry);
    assert_eq!(millis(failed.next_attempt_at), h.now_ms() + 2_000);
    h.clock.advance(Duration::from_millis(1_999));
    assert!(h.poll(EMPTY).await.is_none(), "still backing off");
    h.clock.advance(Duration::from_millis(1));
    let second = h.take().await;
    assert_eq!(second.attempt, 2);

    let failed = h.fail(&second, true, "second").await;
    assert_eq!(millis(failed.next_attempt_at), h.now_ms() + 4_000, "the backoff doubles");
    h.clock.advance(Duration::from_secs(4));
    let third = h.take().await;
    assert_eq!(third.attempt, 3);

    let failed = h.fail(&third, true, "third and last").await;
    assert!(!failed.will_retry, "max_attempts is 3");
    h.until_counts((0, 0)).await;
    h.clock.advance(Duration::from_secs(3600));
    assert!(h.poll(EMPTY).await.is_none(), "a dead letter is not delivered");

    let listed = h
        .client
        .list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 0, filter: None })
        .await
        .expect("ListDeadLetters")
        .into_inner()
        .dead_letters;
    assert_eq!(listed.len(), 1);
    let dead = &listed[0];
    assert_eq!((dead.task_id, dead.attempts, dead.message.as_str()), (id, 3, "third and last"));
    assert_eq!(dead.payload, b"flaky");
    assert_eq!(millis(dead.failed_at), h.now_ms() - 3_600_000);

    let redriven = h
        .client
        .redrive_dead_letters(pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 0, filter: None })
        .await
        .expect("RedriveDeadLetters")
        .into_inner()
        .redriven;
    assert_eq!(redriven, 1);
    let again = h.take().await;
    assert_eq!((again.task_id, again.attempt), (id, 1), "re-driven as a first attempt");
    h.complete(&again).await.unwrap();
    let listed =
        h.client.list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 0, filter: None }).await;
    assert!(listed.unwrap().into_inner().dead_letters.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_redriven_dead_letter_keeps_its_dedup_id() {
    let mut h = Harness::start(policy()).await;
    let with_id = |payload: &[u8]| pb::TaskSpec { dedup_id: "origin-1".into(), ..spec("k", 0.0, 0, payload) };
    let first = add(&mut h.client, QUEUE, with_id(b"first")).await.unwrap().task_id;
    let task = h.take().await;
    h.fail(&task, false, "not found").await;
    let redrive = |client: &mut Client| {
        let mut client = client.clone();
        async move {
            let request = pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 0, filter: None };
            client.redrive_dead_letters(request).await.expect("RedriveDeadLetters").into_inner()
        }
    };

    // Put back while nobody holds the id: it holds it again.
    let done = redrive(&mut h.client).await;
    assert_eq!((done.redriven, done.duplicates), (1, 0));
    let again = add(&mut h.client, QUEUE, with_id(b"again")).await.unwrap();
    assert!(again.duplicate, "the re-driven task holds its dedup id");
    assert_eq!(again.task_id, first);
    let redriven = h.take().await;
    assert_eq!((redriven.task_id, redriven.payload.as_slice()), (first, &b"first"[..]));
    h.fail(&redriven, false, "not found again").await;

    // Buried again, and a new task takes the id: the dead letter is not put
    // back beside it, and is not left to be put back later either.
    let newer = add(&mut h.client, QUEUE, with_id(b"newer")).await.unwrap();
    assert!(!newer.duplicate, "a dead letter does not hold its dedup id");
    let done = redrive(&mut h.client).await;
    assert_eq!((done.redriven, done.duplicates), (0, 1));
    let listed =
        h.client.list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None }).await;
    assert!(listed.unwrap().into_inner().dead_letters.is_empty());
    let only = h.take().await;
    assert_eq!(only.task_id, newer.task_id);
    assert!(h.poll(EMPTY).await.is_none(), "one task per dedup id");
    h.stop().await;
}

#[tokio::test]
async fn a_failure_that_is_not_retryable_is_buried_at_once() {
    let mut h = Harness::start(policy()).await;
    h.add("fatal").await;
    let task = h.take().await;
    let failed = h.fail(&task, false, "not found").await;
    assert!(!failed.will_retry);
    let listed =
        h.client.list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None }).await;
    let listed = listed.unwrap().into_inner().dead_letters;
    assert_eq!((listed.len(), listed[0].attempts), (1, 1));
    h.stop().await;
}

#[tokio::test]
async fn a_delayed_task_is_invisible_until_due() {
    let mut h = Harness::start(policy()).await;
    let mut delayed = spec("later", 0.0, 0, b"later");
    delayed.delay = wait(Duration::from_secs(30));
    let id = add(&mut h.client, QUEUE, delayed).await.unwrap().task_id;
    h.until_counts((0, 1)).await;
    assert!(h.poll(EMPTY).await.is_none());
    h.clock.advance(Duration::from_millis(29_999));
    assert!(h.poll(EMPTY).await.is_none(), "one millisecond early");
    h.clock.advance(Duration::from_millis(1));
    let task = h.take().await;
    assert_eq!((task.task_id, task.attempt), (id, 1));
    h.stop().await;
}

#[tokio::test]
async fn a_dedup_id_admits_one_pending_or_running_task() {
    let mut h = Harness::start(policy()).await;
    let with_id = |payload: &[u8]| pb::TaskSpec { dedup_id: "origin-1".into(), ..spec("k", 0.0, 0, payload) };
    let first = add(&mut h.client, QUEUE, with_id(b"one")).await.unwrap();
    assert!(!first.duplicate);
    let again = add(&mut h.client, QUEUE, with_id(b"two")).await.unwrap();
    assert!(again.duplicate, "pending: the same id is refused");
    assert_eq!(again.task_id, first.task_id);

    let task = h.take().await;
    assert_eq!(task.payload, b"one");
    let running = add(&mut h.client, QUEUE, with_id(b"three")).await.unwrap();
    assert!(running.duplicate, "running: still refused");
    let failed = h.fail(&task, true, "retry").await;
    assert!(failed.will_retry);
    let retrying = add(&mut h.client, QUEUE, with_id(b"four")).await.unwrap();
    assert!(retrying.duplicate, "waiting for a retry: still refused");

    h.clock.advance(Duration::from_secs(2));
    let retry = h.take().await;
    h.complete(&retry).await.unwrap();
    let after = add(&mut h.client, QUEUE, with_id(b"five")).await.unwrap();
    assert!(!after.duplicate, "done: the id is free again");
    assert_ne!(after.task_id, first.task_id);
    h.stop().await;
}

#[tokio::test]
async fn a_key_at_its_rate_limit_waits_for_its_next_token() {
    let mut h = Harness::start(TaskPolicy { key_rate_per_second: 1.0, key_burst: 1, ..policy() }).await;
    for _ in 0..3 {
        h.add("polite").await;
    }
    h.take().await;
    assert!(h.poll(EMPTY).await.is_none(), "no token left this second");
    h.add("other").await;
    assert_eq!(h.take().await.fairness_key, "other", "other keys are not held back");
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(h.take().await.fairness_key, "polite");
    assert!(h.poll(EMPTY).await.is_none());
    h.stop().await;
}

/// One key at its concurrency limit while four others are dispatched at
/// full rate: no poll comes back empty while they have tasks, and the held
/// key keeps its place for when its running task ends.
#[tokio::test]
async fn a_key_at_its_concurrency_limit_does_not_hold_back_the_others() {
    let mut config = Config::default();
    config.engine.buffer_tasks = 64;
    config.engine.reload_at = 8;
    config.queues.insert(QUEUE.into(), TaskPolicy { key_concurrency: 1, ..policy() });
    let server = TestServer::start_timed(Backend::Embedded, config, Arc::new(ManualClock::new(START_MS))).await;
    let mut client = server.client.clone();
    // The held key's tasks come first, so they fill the buffer's front.
    let mut specs: Vec<pb::TaskSpec> = (0..200).map(|_| spec("held", 0.0, 0, b"held")).collect();
    for key in ["a", "b", "c", "d"] {
        specs.extend((0..100).map(|_| spec(key, 0.0, 0, key.as_bytes())));
    }
    crate::support::add_all(&mut client, QUEUE, specs).await;

    let mut running_held = Vec::new();
    let mut others = 0;
    let started = std::time::Instant::now();
    while others < 400 {
        let task = poll(&mut client, QUEUE, EMPTY).await.expect("the other keys are never held back");
        if task.fairness_key == "held" {
            running_held.push(task);
        } else {
            others += 1;
            let done = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
            client.complete_task(done).await.unwrap();
        }
    }
    let elapsed = started.elapsed();
    println!(
        "400 tasks of four keys dispatched and completed in {elapsed:?} ({:.0}/s) beside a key at its limit",
        400.0 / elapsed.as_secs_f64()
    );
    assert_eq!(running_held.len(), 1, "one task of the held key at a time");
    assert!(poll(&mut client, QUEUE, EMPTY).await.is_none(), "the held key waits for its running task");
    let done = pb::CompleteTaskRequest { lease_token: running_held[0].lease_token.clone(), result: vec![] };
    client.complete_task(done).await.unwrap();
    let next = poll(&mut client, QUEUE, FOUND).await.expect("its next task goes once the first is done");
    assert_eq!(next.fairness_key, "held");
    server.stop().await;
}

/// A key held at its concurrency limit while other keys' tasks are
/// dispatched 600 times: its waiting tasks are parked, the ack level moves
/// on (the dispatched marks above it stay near `park_after`), and once its
/// running task completes its tasks come back one at a time, in order.
async fn a_key_held_at_its_limit_is_parked_and_comes_back_in_order(backend: Backend) {
    const PARK_AFTER: usize = 16;
    let mut config = Config::default();
    config.engine.buffer_tasks = 64;
    config.engine.reload_at = 8;
    config.engine.park_after = PARK_AFTER;
    config.queues.insert(QUEUE.into(), TaskPolicy { key_concurrency: 1, ..policy() });
    let server = TestServer::start_timed(backend, config, Arc::new(ManualClock::new(START_MS))).await;
    let mut client = server.client.clone();
    let held: Vec<pb::TaskSpec> = (0..20).map(|n| spec("held", 0.0, 0, format!("held {n}").as_bytes())).collect();
    crate::support::add_all(&mut client, QUEUE, held).await;
    let first = poll(&mut client, QUEUE, FOUND).await.expect("the held key's first task");
    assert_eq!(first.payload, b"held 0");

    let others: Vec<pb::TaskSpec> = (0..600).map(|n| spec(&format!("k{}", n % 30), 0.0, 0, b"other")).collect();
    crate::support::add_all(&mut client, QUEUE, others).await;
    let mut most_marks = 0;
    for _ in 0..600 {
        let task = poll(&mut client, QUEUE, FOUND).await.expect("the other keys are never held back");
        assert_ne!(task.fairness_key, "held", "a second task of the held key while its first runs");
        client.complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] }).await.unwrap();
        let state = describe(&mut client, QUEUE).await;
        most_marks =
            most_marks.max(state.partitions.iter().flat_map(|p| &p.subqueues).map(|s| s.dispatched_above_ack).sum());
    }
    let state = describe(&mut client, QUEUE).await;
    let parked: (u64, u64) = state
        .partitions
        .iter()
        .flat_map(|p| &p.subqueues)
        .fold((0, 0), |(keys, tasks), s| (keys + s.parked_keys, tasks + s.parked_tasks));
    assert_eq!(parked, (1, 19), "the held key's 19 waiting tasks are parked: {state:?}");
    assert!(
        most_marks <= (PARK_AFTER + 32) as u64,
        "{most_marks} tasks dispatched above the ack level at most (park_after {PARK_AFTER})"
    );

    let mut running = first;
    for n in 1..20 {
        client
            .complete_task(pb::CompleteTaskRequest { lease_token: running.lease_token, result: vec![] })
            .await
            .unwrap();
        running = poll(&mut client, QUEUE, FOUND).await.expect("the held key's next task, once its last is done");
        assert_eq!(String::from_utf8_lossy(&running.payload), format!("held {n}"), "the key's own order");
    }
    let state = describe(&mut client, QUEUE).await;
    let keys: u64 = state.partitions.iter().flat_map(|p| &p.subqueues).map(|s| s.parked_keys).sum();
    assert_eq!(keys, 0, "nothing of the key is parked any more");
    server.stop().await;
}

#[tokio::test]
async fn a_key_held_at_its_limit_is_parked_and_comes_back_in_order_embedded() {
    a_key_held_at_its_limit_is_parked_and_comes_back_in_order(Backend::Embedded).await;
}

#[tokio::test]
async fn a_key_held_at_its_limit_is_parked_and_comes_back_in_order_on_cassandra() {
    a_key_held_at_its_limit_is_parked_and_comes_back_in_order(Backend::Cassandra).await;
}
