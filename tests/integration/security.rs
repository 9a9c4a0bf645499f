//! What a hostile client cannot do over real gRPC with TLS on: act on a
//! lease it was not given by editing its token, pass for a node with routing
//! metadata, create queues by reading them, send what does not decode or is
//! too large, park polls past the bounds.

use std::time::Duration;

use fairway::proto::v1 as pb;
use tonic::Code;
use tonic::metadata::MetadataValue;

use crate::support::{ServerProcess, TestServer, add, describe, poll, spec};

const QUEUE: &str = "guarded";

/// Every part of a token edited, and tokens of another cluster: each is
/// refused with the one error, and the real holder still completes its task.
#[tokio::test]
async fn edited_lease_tokens_complete_nothing() {
    let server = TestServer::start_secure(fairway::config::Config::default()).await;
    let other_cluster = TestServer::start_secure(fairway::config::Config::default()).await;
    let mut client = server.client.clone();
    let mut elsewhere = other_cluster.client.clone();
    for n in 0..3 {
        add(&mut client, QUEUE, spec("k", 1.0, 3, format!("task {n}").as_bytes())).await.unwrap();
        add(&mut elsewhere, QUEUE, spec("k", 1.0, 3, b"there")).await.unwrap();
    }
    let held: Vec<String> = {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("a task").lease_token);
        }
        held
    };
    let foreign = poll(&mut elsewhere, QUEUE, Duration::from_secs(5)).await.expect("a task").lease_token;
    let token = &held[0];
    let parts: Vec<&str> = token.splitn(6, '/').collect();
    assert_eq!(parts.len(), 6, "{token}");
    let tag_of = |token: &str| token.split('/').nth(4).unwrap().to_owned();
    // Another held lease's tag on this one's fields.
    let swapped = token.replacen(&tag_of(token), &tag_of(&held[1]), 1);
    let mut forged = vec![foreign, swapped];
    for (i, part) in parts.iter().enumerate() {
        let edits = match i {
            0 => vec!["v1".to_owned(), "v3".to_owned()],
            4 => {
                // The last digit changed: to "1" where it is "0", else to "0".
                let last = if part.ends_with('0') { '1' } else { '0' };
                vec!["0".repeat(part.len()), format!("{}{last}", &part[..part.len() - 1])]
            }
            5 => vec![format!("{part}x"), "other".to_owned()],
            _ => {
                let n: i64 = part.parse().unwrap();
                vec![(n + 1).to_string(), (n - 1).to_string(), format!("0{part}")]
            }
        };
        for edit in edits {
            let mut edited = parts.clone();
            edited[i] = &edit;
            forged.push(edited.join("/"));
        }
    }
    assert!(forged.iter().all(|f| !held.contains(f)), "an edit left a real token as it was: {forged:?}");
    let mut messages = std::collections::BTreeSet::new();
    for token in &forged {
        for result in [
            client
                .complete_task(pb::CompleteTaskRequest { lease_token: token.clone(), result: vec![] })
                .await
                .map(drop),
            client
                .fail_task(pb::FailTaskRequest { lease_token: token.clone(), retryable: false, ..Default::default() })
                .await
                .map(drop),
            client.heartbeat_task(pb::HeartbeatTaskRequest { lease_token: token.clone() }).await.map(drop),
        ] {
            let status = result.expect_err(&format!("a forged token {token:?} was taken"));
            assert_eq!(status.code(), Code::InvalidArgument, "{token:?}: {status:?}");
            messages.insert(status.message().to_owned());
        }
    }
    assert_eq!(messages.len(), 1, "one error whatever was edited: {messages:?}");
    let partition = &describe(&mut client, QUEUE).await.partitions[0];
    assert_eq!((partition.completed, partition.failed), (0, 0), "a forged token finished a task");
    for token in held {
        client.complete_task(pb::CompleteTaskRequest { lease_token: token, result: vec![] }).await.expect("held");
    }
    assert_eq!(describe(&mut client, QUEUE).await.partitions[0].completed, 3);
    other_cluster.stop().await;
    server.stop().await;
}

/// A client that names a partition or says it was forwarded, with no proof
/// or a made-up one, is refused, and nothing is written.
#[tokio::test]
async fn routing_metadata_from_a_client_is_refused_and_changes_nothing() {
    let server = TestServer::start_secure(fairway::config::Config::default()).await;
    let mut client = server.client.clone();
    client
        .create_queue(pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 2, home: String::new() })
        .await
        .expect("create the queue");
    let mut once = spec("k", 1.0, 3, b"x");
    once.dedup_id = "origin-1".into();
    let first = add(&mut client, QUEUE, once.clone()).await.unwrap();
    let headers: [&[(&str, &str)]; 5] = [
        &[("fairway-partition", "0")],
        &[("fairway-partition", "1")],
        &[("fairway-forwarded", "1")],
        &[("fairway-partition", "1"), ("fairway-node-proof", "00000000000000000000000000000000")],
        &[("fairway-forwarded", "1"), ("fairway-node-proof", "not hex")],
    ];
    for entries in headers {
        let mut request = tonic::Request::new(pb::AddTaskRequest { queue: QUEUE.into(), task: Some(once.clone()) });
        for (name, value) in entries {
            request.metadata_mut().insert(*name, MetadataValue::try_from(*value).unwrap());
        }
        let status = client.add_task(request).await.expect_err("routing metadata from a client");
        assert_eq!(status.code(), Code::PermissionDenied, "{entries:?}: {status:?}");
        assert!(status.message().contains("fairway-node-proof"), "{status:?}");
    }
    let again = add(&mut client, QUEUE, once).await.unwrap();
    assert!(again.duplicate && again.task_id == first.task_id, "the dedup id still holds: {again:?}");
    let added: u64 = describe(&mut client, QUEUE).await.partitions.iter().map(|p| p.added).sum();
    assert_eq!(added, 1, "one task in all");

    let task = poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("the task");
    let mut complete = tonic::Request::new(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] });
    complete.metadata_mut().insert("fairway-forwarded", MetadataValue::from_static("1"));
    let status = client.complete_task(complete).await.expect_err("routing metadata from a client");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    server.stop().await;
}

/// Reads, polls and lease requests on a queue that was never created get
/// `NOT_FOUND` and create nothing: a later CreateQueue sets its partitions.
#[tokio::test]
async fn reads_of_an_unknown_queue_create_nothing() {
    let server = TestServer::start_secure(fairway::config::Config::default()).await;
    let mut client = server.client.clone();
    let typo = "typo";
    let not_found = |result: Result<(), tonic::Status>, what: &str| {
        let status = result.expect_err(what);
        assert_eq!(status.code(), Code::NotFound, "{what}: {status:?}");
        assert!(status.message().contains(typo), "{what}: {status:?}");
    };
    let describe = pb::DescribeQueueRequest { queue: typo.into(), top_keys: 0 };
    not_found(client.describe_queue(describe.clone()).await.map(drop), "DescribeQueue");
    not_found(
        client
            .list_dead_letters(pb::ListDeadLettersRequest { queue: typo.into(), limit: 1, filter: None })
            .await
            .map(drop),
        "ListDeadLetters",
    );
    not_found(
        client
            .redrive_dead_letters(pb::RedriveDeadLettersRequest { queue: typo.into(), limit: 1, filter: None })
            .await
            .map(drop),
        "RedriveDeadLetters",
    );
    let wait = Some(prost_types::Duration { seconds: 0, nanos: 0 });
    let poll = pb::PollTaskRequest { queue: typo.into(), worker_id: "w".into(), max_wait: wait };
    not_found(client.poll_task(poll).await.map(drop), "PollTask");
    let polls = pb::PollTasksRequest {
        queue: typo.into(),
        worker_id: "w".into(),
        max_wait: wait,
        max_tasks: 2,
        completions: Vec::new(),
    };
    not_found(client.poll_tasks(polls).await.map(drop), "PollTasks");
    let created = client
        .create_queue(pb::CreateQueueRequest { queue: typo.into(), partitions: 4, home: String::new() })
        .await
        .unwrap();
    assert_eq!(created.into_inner().partitions, 4, "no read fixed the queue's partitions before");
    assert_eq!(client.describe_queue(describe).await.unwrap().into_inner().partitions.len(), 4);
    server.stop().await;
}

/// `matcher.create_on_add` says which queues an add may create; the others
/// must be created on purpose. Past `matcher.max_queues` and
/// `matcher.max_partitions` nothing more is created, and the server goes on.
#[tokio::test]
async fn queues_are_created_within_the_configured_names_and_limits() {
    let mut config = fairway::config::Config::default();
    config.matcher.create_on_add = vec!["jobs.*".into()];
    config.matcher.max_queues = 3;
    config.matcher.max_partitions = 10;
    let server = TestServer::start_secure(config).await;
    let mut client = server.client.clone();
    add(&mut client, "jobs.a", spec("k", 1.0, 3, b"x")).await.expect("jobs.* may be created by an add");
    let status = add(&mut client, "other", spec("k", 1.0, 3, b"x")).await.expect_err("other may not");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let create =
        |queue: &str, partitions| pb::CreateQueueRequest { queue: queue.into(), partitions, home: String::new() };
    let status = client.create_queue(create("wide", 10)).await.expect_err("1 + 10 partitions");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("matcher.max_partitions"), "{status:?}");
    client.create_queue(create("other", 2)).await.expect("created on purpose");
    add(&mut client, "other", spec("k", 1.0, 3, b"x")).await.expect("an existing queue takes adds");
    client.create_queue(create("third", 1)).await.expect("the third queue");
    let status = client.create_queue(create("fourth", 1)).await.expect_err("past matcher.max_queues");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("matcher.max_queues (3)"), "{status:?}");
    let status = add(&mut client, "jobs.b", spec("k", 1.0, 3, b"x")).await.expect_err("past matcher.max_queues");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(client.create_queue(create("other", 7)).await.unwrap().into_inner().partitions, 2, "existing");
    assert_eq!(describe(&mut client, "jobs.a").await.partitions[0].added, 1, "the server goes on");
    server.stop().await;
}

/// Bytes that are not a protobuf message, sent to every method of both
/// services: `INVALID_ARGUMENT` each time, and the server goes on.
#[tokio::test]
async fn garbage_request_bytes_are_invalid_arguments() {
    const METHODS: [&str; 17] = [
        "Matching/AddTask",
        "Matching/AddTasks",
        "Matching/PollTask",
        "Matching/PollTasks",
        "Matching/CompleteTask",
        "Matching/FailTask",
        "Matching/HeartbeatTask",
        "Matching/ListDeadLetters",
        "Matching/RedriveDeadLetters",
        "Matching/DescribeQueue",
        "Matching/CreateQueue",
        "Scheduler/RecordOrigins",
        "Scheduler/FinishListing",
        "Scheduler/RequestVisit",
        "Scheduler/GetVisitStats",
        "Scheduler/GetListerMetrics",
        "Scheduler/RunRound",
    ];
    let server = TestServer::start_secure(fairway::config::Config::default()).await;
    let mut grpc = tonic::client::Grpc::new(server.channel());
    // A varint that never ends, then a field of wire type 7 (there is none).
    let garbage: [&[u8]; 2] = [&[0xff; 16], &[0x0f, 0x01]];
    for method in METHODS {
        for bytes in garbage {
            grpc.ready().await.unwrap();
            let path = format!("/fairway.v1.{method}").parse().unwrap();
            let sent = grpc.unary(tonic::Request::new(bytes.to_vec()), path, RawCodec).await;
            let status = sent.expect_err(method);
            assert_eq!(status.code(), Code::InvalidArgument, "{method} {bytes:?}: {status:?}");
        }
    }
    let mut client = server.client.clone();
    add(&mut client, QUEUE, spec("k", 1.0, 3, b"x")).await.expect("the server goes on");
    server.stop().await;
}

/// Sends bytes as they are; decodes nothing (the tests expect errors).
#[derive(Clone, Copy, Debug, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = ();
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf;
        buf.advance(buf.remaining());
        Ok(Some(()))
    }
}

/// A request over `limits.max_request_bytes` is refused before it is
/// decoded, whatever it holds, and stores nothing; a task of the largest
/// payload still fits alone.
#[tokio::test]
async fn requests_over_the_size_limit_are_refused_whole() {
    let server = TestServer::start_secure(fairway::config::Config::default()).await;
    let mut client = server.client.clone();
    let limits = fairway::model::validate::Limits::default();
    let largest = spec("k", 1.0, 3, &vec![7; limits.max_payload_bytes]);
    let over = limits.max_request_bytes / limits.max_payload_bytes + 1;
    let request = pb::AddTasksRequest { queue: QUEUE.into(), tasks: vec![largest.clone(); over] };
    let status = client.add_tasks(request).await.expect_err("a request over the limit");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains(&limits.max_request_bytes.to_string()), "{status:?}");
    let described = client.describe_queue(pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 }).await;
    assert_eq!(described.expect_err("nothing was created").code(), Code::NotFound);
    add(&mut client, QUEUE, largest).await.expect("the largest task alone fits");
    server.stop().await;
}

/// The real binary starts with what Kubernetes puts in every pod of a
/// Service named `fairway`, serves, and names the variables it ignored.
#[tokio::test]
async fn the_server_starts_with_kubernetes_service_link_variables() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let service_links = [
        ("FAIRWAY_SERVICE_HOST", "10.96.0.12"),
        ("FAIRWAY_SERVICE_PORT", "7070"),
        ("FAIRWAY_SERVICE_PORT_GRPC", "7070"),
        ("FAIRWAY_PORT", "tcp://10.96.0.12:7070"),
        ("FAIRWAY_PORT_7070_TCP", "tcp://10.96.0.12:7070"),
        ("FAIRWAY_PORT_7070_TCP_PROTO", "tcp"),
        ("FAIRWAY_PORT_7070_TCP_PORT", "7070"),
        ("FAIRWAY_PORT_7070_TCP_ADDR", "10.96.0.12"),
    ];
    let server = ServerProcess::start_on(&store, &service_links);
    let mut client = server.client().await;
    add(&mut client, QUEUE, spec("k", 1.0, 3, b"x")).await.expect("the server serves");
    // Off the runtime: the orderly shutdown waits for this test's connection
    // to answer, which needs the runtime free.
    let log = tokio::task::spawn_blocking(move || server.terminate()).await.expect("terminate");
    assert!(log.contains("FAIRWAY_* variables that name no config key are ignored"), "{log}");
    assert!(log.contains("FAIRWAY_PORT_7070_TCP_ADDR"), "{log}");
}

/// Parked polls are bounded per connection (`limits.max_polls_per_connection`)
/// and per queue (`matcher.max_parked_polls`); a poll past a bound is
/// refused at once, and the server goes on serving the others.
#[tokio::test]
async fn parked_polls_are_bounded_per_connection_and_per_queue() {
    let mut config = fairway::config::Config::default();
    config.limits.max_polls_per_connection = 3;
    config.matcher.max_parked_polls = 4;
    let server = TestServer::start_secure(config).await;
    let mut admin = server.client.clone();
    crate::support::create(&mut admin, QUEUE, 1).await;
    crate::support::create(&mut admin, "other", 1).await;
    let (a, b, c) = (server.connect().await, server.connect().await, server.connect().await);
    let park = |client: &crate::support::Client, queue: &'static str| {
        let mut client = client.clone();
        tokio::spawn(async move { try_poll(&mut client, queue).await.expect("a parked poll") })
    };
    let watcher = admin.clone();
    let waiting = |n: u32| {
        let mut admin = watcher.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while describe(&mut admin, QUEUE).await.waiting_pollers != n {
                assert!(tokio::time::Instant::now() < deadline, "{n} polls did not park");
                tokio::task::yield_now().await;
            }
        }
    };
    let mut parked = Vec::new();
    for _ in 0..3 {
        parked.push(park(&a, QUEUE));
    }
    waiting(3).await;
    let refused = try_poll(&mut a.clone(), "other").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "a 4th poll on one connection: {refused:?}");
    assert!(refused.message().contains("limits.max_polls_per_connection"), "{}", refused.message());

    parked.push(park(&b, QUEUE));
    waiting(4).await;
    let refused = try_poll(&mut c.clone(), QUEUE).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "a 5th parked poll of the queue: {refused:?}");
    assert!(refused.message().contains("matcher.max_parked_polls"), "{}", refused.message());
    let elsewhere = park(&c, "other");

    // Served in arrival order; a connection's slot comes back with its answer.
    add(&mut admin, QUEUE, spec("k", 1.0, 3, b"for the oldest poll")).await.unwrap();
    let served = parked.remove(0).await.unwrap().expect("the oldest poll is served");
    assert_eq!(served.payload, b"for the oldest poll");
    waiting(3).await;
    parked.push(park(&a, QUEUE));
    waiting(4).await;
    add(&mut admin, "other", spec("k", 1.0, 3, b"x")).await.unwrap();
    assert!(elsewhere.await.unwrap().is_some(), "the other queue's poll is served");
    server.stop().await;
    for poll in parked {
        assert!(poll.await.unwrap().is_none(), "parked polls are answered empty at shutdown");
    }
}

/// A PollTask that may wait a minute, and its error if refused.
async fn try_poll(client: &mut crate::support::Client, queue: &str) -> Result<Option<pb::Task>, tonic::Status> {
    let request = pb::PollTaskRequest {
        queue: queue.into(),
        worker_id: "test".into(),
        max_wait: crate::support::wait(Duration::from_secs(60)),
    };
    Ok(client.poll_task(request).await?.into_inner().task)
}
