//! The end-to-end scenarios of the embedded store, on Cassandra.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::ManualClock;
use fairway::config::Config;
use fairway::proto::v1 as pb;
use futures::future::join_all;

use crate::grpc_fairness::three_keys_get_their_weighted_shares_on;
use crate::max_wait::tasks_past_max_wait_pass_a_deep_backlog_on;
use crate::support::{Backend, TestServer, add, poll, spec, wait};

#[tokio::test]
async fn three_keys_get_their_weighted_shares() {
    three_keys_get_their_weighted_shares_on(Backend::Cassandra).await;
}

/// Tasks past `max_wait` are moved to the front by Cassandra's conditional
/// batches (a row deleted and written again in one), behind 100,000 tasks.
#[tokio::test]
async fn tasks_past_max_wait_pass_a_deep_backlog() {
    tasks_past_max_wait_pass_a_deep_backlog_on(Backend::Cassandra, 100_000).await;
}

/// Concurrent large tasks are written in several appends, each a mutation
/// Cassandra accepts.
#[tokio::test]
async fn large_tasks_are_split_into_acceptable_appends() {
    let server = TestServer::start_on(Backend::Cassandra, Config::default()).await;
    let payload = vec![7u8; 1024 * 1024];
    let adds = (0..6).map(|i| {
        let (mut client, payload) = (server.client.clone(), payload.clone());
        async move { add(&mut client, "large", spec(&format!("k{i}"), 0.0, 0, &payload)).await }
    });
    for added in join_all(adds).await {
        added.expect("a 1 MiB task is accepted");
    }
    let mut client = server.client.clone();
    for _ in 0..6 {
        let task = poll(&mut client, "large", Duration::from_secs(5)).await.expect("every task comes back");
        assert_eq!(task.payload.len(), payload.len());
    }
    server.stop().await;
}

/// 40 tasks of 1 MiB become due at the same moment: their promotions, and
/// then their lease records, are split over writes that each fit the byte
/// budget, so the partition keeps writing, a small task added meanwhile goes
/// through, and every task is delivered. (Before the budget counted every
/// record, the one write carrying all 40 promotions was refused by Cassandra
/// again and again, and nothing of the partition was written any more.)
#[tokio::test]
async fn large_delayed_tasks_due_together_do_not_wedge_the_partition() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut config = Config::default();
    config.matcher.sync_match = false;
    config.writer.keeper_interval = Duration::from_millis(50);
    let server = TestServer::start_timed(Backend::Cassandra, config, clock.clone()).await;
    let mut client = server.client.clone();
    let payload = vec![7u8; 1024 * 1024];
    for i in 0..40 {
        let delayed = pb::TaskSpec { delay: wait(Duration::from_secs(3)), ..spec(&format!("k{i}"), 0.0, 0, &payload) };
        add(&mut client, "wedge", delayed).await.expect("a delayed 1 MiB task is accepted");
    }
    clock.advance(Duration::from_secs(3));
    let small = add(&mut client, "wedge", spec("small", 0.0, 0, b"small")).await;
    small.expect("a small task added while the large ones are promoted is written");
    let mut large = 0;
    for _ in 0..41 {
        let task = poll(&mut client, "wedge", Duration::from_secs(30)).await.expect("every task is delivered");
        large += usize::from(task.payload.len() == payload.len());
    }
    assert_eq!(large, 40);
    server.stop().await;
}
