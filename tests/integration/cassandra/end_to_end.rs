//! The end-to-end scenarios of the embedded store, on Cassandra.

use std::time::Duration;

use fairway::config::Config;
use futures::future::join_all;

use crate::grpc_fairness::three_keys_get_their_weighted_shares_on;
use crate::support::{Backend, TestServer, add, poll, spec};

#[tokio::test]
async fn three_keys_get_their_weighted_shares() {
    three_keys_get_their_weighted_shares_on(Backend::Cassandra).await;
}

/// Concurrent large tasks are written in several appends, each a mutation
/// Cassandra accepts (the test node takes at most 4 MiB per mutation).
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
