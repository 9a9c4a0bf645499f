//! What one client connection may carry: any number of concurrent requests,
//! and responses no larger than a client accepts by default. Within the
//! documented limits a client never sees its connection dropped nor a
//! response it cannot decode.

use futures::future::join_all;
use prost::Message;

use fairway::proto::v1 as pb;

use crate::support::{TestServer, add_all, spec, wait};

/// Many small requests at once on one channel, as a worker pool that
/// completes its batches concurrently sends them. Each is a small DATA
/// frame that HTTP/2 (h2) buffers until the request is read; too many of
/// them buffered at once used to make the server close the connection
/// (GOAWAY `ENHANCE_YOUR_CALM`, "too_many_data_frames"), so that every
/// request on it failed with a transport error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_on_one_connection_are_all_answered() {
    let server = TestServer::start().await;
    let requests = (0..20_000).map(|_| {
        let mut client = server.client.clone();
        async move {
            client.complete_task(pb::CompleteTaskRequest { lease_token: "not-a-token".into(), result: vec![] }).await
        }
    });
    for answered in join_all(requests).await {
        let status = answered.expect_err("a lease token that is not one");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "answered by the service, not the transport: {status}");
    }
    server.stop().await;
}

/// The largest PollTasks a client may ask for, on the largest payloads,
/// stays within what a gRPC client decodes by default (4 MiB); the tasks
/// left out are there for the next poll.
#[tokio::test]
async fn poll_tasks_responses_stay_within_the_response_limit() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let payload = vec![0x5A; 1024 * 1024];
    add_all(&mut client, "big", (0..8).map(|_| spec("k", 0.0, 0, &payload)).collect()).await;
    let mut taken = 0;
    while taken < 8 {
        let response = client
            .poll_tasks(pb::PollTasksRequest {
                queue: "big".into(),
                worker_id: "test".into(),
                max_wait: wait(std::time::Duration::from_secs(5)),
                max_tasks: 256,
            })
            .await
            .expect("a response the client can decode")
            .into_inner();
        assert!(!response.tasks.is_empty(), "the tasks left out are ready for the next poll");
        assert!(response.encoded_len() <= 4 * 1024 * 1024, "{} bytes", response.encoded_len());
        taken += response.tasks.len();
    }
    assert_eq!(taken, 8);
    server.stop().await;
}
