//! Dead letters chosen by key, failure message and age: listed, and put
//! back, over gRPC on both stores. Time is a manual clock, so each
//! letter's failure time is known; the tests wait on answers, never on the
//! wall clock.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::ManualClock;
use fairway::config::Config;
use fairway::core::engine::TaskPolicy;
use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Backend, Client, TestServer, add, create, poll, spec};

const QUEUE: &str = "letters";
const START_MS: i64 = 1_700_000_000_000;
const FOUND: Duration = Duration::from_secs(10);
const EMPTY: Duration = Duration::from_millis(150);

struct Harness {
    server: TestServer,
    clock: Arc<ManualClock>,
    client: Client,
}

impl Harness {
    async fn start(backend: Backend, max_dead_letters_read: usize) -> Harness {
        let mut config = Config { tasks: TaskPolicy { max_attempts: 1, ..TaskPolicy::default() }, ..Config::default() };
        config.limits.max_dead_letters_read = max_dead_letters_read;
        let clock = Arc::new(ManualClock::new(START_MS));
        let server = TestServer::start_timed(backend, config, clock.clone()).await;
        let mut client = server.client.clone();
        create(&mut client, QUEUE, 1).await;
        Harness { server, clock, client }
    }

    /// Adds a task of `key` and fails it with `message`: a dead letter,
    /// failed now; then 10 ms pass (no more: on Cassandra, jumps of
    /// seconds of this clock left the node's partition "remote", as if its
    /// ownership had lapsed). Returns its id.
    async fn bury(&mut self, key: &str, message: &str) -> i64 {
        let id = add(&mut self.client, QUEUE, spec(key, 0.0, 0, key.as_bytes())).await.expect("AddTask").task_id;
        let Some(task) = poll(&mut self.client, QUEUE, FOUND).await else {
            let state = crate::support::describe(&mut self.client, QUEUE).await;
            panic!("task {id} of key {key:?} is not ready: {state:#?}");
        };
        assert_eq!(task.task_id, id);
        let request = pb::FailTaskRequest {
            lease_token: task.lease_token,
            retryable: false,
            message: message.into(),
            retry_after: None,
        };
        assert!(!self.client.fail_task(request).await.expect("FailTask").into_inner().will_retry);
        self.clock.advance(Duration::from_millis(10));
        id
    }

    async fn list(&mut self, filter: Option<pb::DeadLetterFilter>) -> (Vec<i64>, bool) {
        let request = pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 100, filter };
        let listed = self.client.list_dead_letters(request).await.expect("ListDeadLetters").into_inner();
        (listed.dead_letters.iter().map(|d| d.task_id).collect(), listed.more)
    }

    async fn redrive(&mut self, limit: u32, filter: Option<pb::DeadLetterFilter>) -> pb::RedriveDeadLettersResponse {
        let request = pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit, filter };
        self.client.redrive_dead_letters(request).await.expect("RedriveDeadLetters").into_inner()
    }

    /// The ids of the tasks ready now, taken and completed.
    async fn drain(&mut self) -> Vec<i64> {
        let mut ids = Vec::new();
        while let Some(task) = poll(&mut self.client, QUEUE, EMPTY).await {
            assert_eq!(task.attempt, 1, "a letter put back is a first attempt");
            let request = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
            self.client.complete_task(request).await.expect("CompleteTask");
            ids.push(task.task_id);
        }
        ids.sort();
        ids
    }
}

fn key(key: &str) -> Option<pb::DeadLetterFilter> {
    Some(pb::DeadLetterFilter { fairness_key: Some(key.into()), ..Default::default() })
}

fn message(text: &str) -> Option<pb::DeadLetterFilter> {
    Some(pb::DeadLetterFilter { message_contains: text.into(), ..Default::default() })
}

fn at(unix_ms: i64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds: unix_ms / 1000, nanos: (unix_ms % 1000) as i32 * 1_000_000 })
}

async fn letters_chosen_by_key_message_and_age_are_listed_and_put_back_and_the_rest_stay(backend: Backend) {
    let mut h = Harness::start(backend, 10_000).await;
    let first = h.bury("forge.a", "timeout connecting").await;
    let second = h.bury("forge.b", "refused").await;
    let third = h.bury("forge.a", "timeout reading").await;
    let fourth = h.bury("", "refused").await;

    assert_eq!(h.list(None).await, (vec![first, second, third, fourth], false));
    assert_eq!(h.list(key("forge.a")).await.0, vec![first, third]);
    assert_eq!(h.list(key("")).await.0, vec![fourth], "the empty key is a key");
    assert_eq!(h.list(message("timeout")).await.0, vec![first, third]);
    assert_eq!(h.list(message("Timeout")).await.0, Vec::<i64>::new(), "case matters");
    let before = Some(pb::DeadLetterFilter { failed_before: at(START_MS + 15), ..Default::default() });
    assert_eq!(h.list(before).await.0, vec![first, second]);
    let span =
        pb::DeadLetterFilter { failed_from: at(START_MS + 15), failed_before: at(START_MS + 25), ..Default::default() };
    assert_eq!(h.list(Some(span)).await.0, vec![third]);

    // The second letter, behind the first: put back alone, and the others
    // stay listed in their order.
    let done = h.redrive(0, key("forge.b")).await;
    assert_eq!((done.redriven, done.duplicates, done.passed_over, done.more), (1, 0, 3, false));
    assert_eq!(h.drain().await, vec![second]);
    assert_eq!(h.list(None).await.0, vec![first, third, fourth]);

    // At most one: the oldest that matches, and the answer says more may.
    let done = h.redrive(1, message("timeout")).await;
    assert_eq!((done.redriven, done.more), (1, true));
    assert_eq!(h.drain().await, vec![first]);
    let done = h.redrive(0, message("timeout")).await;
    assert_eq!((done.redriven, done.passed_over, done.more), (1, 1, false));
    assert_eq!(h.drain().await, vec![third]);
    assert_eq!(h.list(None).await.0, vec![fourth]);

    // The rest, unfiltered; nothing is left, and nothing comes back twice.
    let done = h.redrive(0, None).await;
    assert_eq!((done.redriven, done.passed_over), (1, 0));
    assert_eq!(h.drain().await, vec![fourth]);
    assert_eq!(h.list(None).await, (Vec::new(), false));
    assert_eq!(h.redrive(0, None).await.redriven, 0);

    // A letter buried after all this is listed and put back as any.
    let fifth = h.bury("forge.b", "refused").await;
    assert_eq!(h.list(key("forge.b")).await.0, vec![fifth]);
    assert_eq!(h.redrive(0, key("forge.b")).await.redriven, 1);
    assert_eq!(h.drain().await, vec![fifth]);
    h.server.stop().await;
}

#[tokio::test]
async fn letters_chosen_by_key_message_and_age_are_listed_and_put_back_and_the_rest_stay_embedded() {
    letters_chosen_by_key_message_and_age_are_listed_and_put_back_and_the_rest_stay(Backend::Embedded).await;
}

#[tokio::test]
async fn letters_chosen_by_key_message_and_age_are_listed_and_put_back_and_the_rest_stay_on_cassandra() {
    letters_chosen_by_key_message_and_age_are_listed_and_put_back_and_the_rest_stay(Backend::Cassandra).await;
}

#[tokio::test]
async fn one_call_reads_at_most_its_bound_of_letters_and_says_there_may_be_more() {
    let mut h = Harness::start(Backend::Embedded, 3).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(h.bury("common", "refused").await);
    }
    let rare = h.bury("rare", "refused").await;

    // Three letters read, none of them the rare key's: not found, and said so.
    assert_eq!(h.list(key("rare")).await, (Vec::new(), true));
    let done = h.redrive(0, key("rare")).await;
    assert_eq!((done.redriven, done.passed_over, done.more), (0, 3, true));

    // Once two of the others are put back, it is within reach.
    let done = h.redrive(2, None).await;
    assert_eq!((done.redriven, done.more), (2, true));
    assert_eq!(h.drain().await, ids[..2].to_vec());
    assert_eq!(h.list(key("rare")).await.0, vec![rare]);
    let done = h.redrive(0, key("rare")).await;
    assert_eq!((done.redriven, done.passed_over), (1, 2));
    assert_eq!(h.drain().await, vec![rare]);
    assert_eq!(h.list(None).await, (ids[2..].to_vec(), false));
    h.server.stop().await;
}

#[tokio::test]
async fn a_filter_that_cannot_be_met_is_refused_naming_its_field() {
    let mut h = Harness::start(Backend::Embedded, 10_000).await;
    let cases = [
        (
            pb::DeadLetterFilter { failed_from: at(START_MS), failed_before: at(START_MS), ..Default::default() },
            "filter.failed_before",
        ),
        (pb::DeadLetterFilter { message_contains: "x".repeat(4097), ..Default::default() }, "filter.message_contains"),
        (pb::DeadLetterFilter { fairness_key: Some("k".repeat(10_000)), ..Default::default() }, "filter.fairness_key"),
        (
            pb::DeadLetterFilter {
                failed_from: Some(prost_types::Timestamp { seconds: 0, nanos: -1 }),
                ..Default::default()
            },
            "filter.failed_from",
        ),
    ];
    for (filter, field) in cases {
        let list = pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: Some(filter.clone()) };
        let status = h.client.list_dead_letters(list).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{field}: {status:?}");
        let redrive = pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: Some(filter) };
        let status = h.client.redrive_dead_letters(redrive).await.expect_err("refused");
        assert!(status.message().contains(field), "{field}: {status:?}");
    }
    h.server.stop().await;
}
