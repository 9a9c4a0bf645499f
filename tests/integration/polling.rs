//! Long polls: empty on timeout, sync match, answered at shutdown, and
//! several partitions served as one queue.

use std::sync::Arc;
use std::time::Duration;

use fairway::config::Config;
use fairway::proto::v1 as pb;

use crate::support::{TestServer, add, add_all, create, describe, poll, spec, wait};

#[tokio::test]
async fn a_poll_that_finds_nothing_ends_empty_not_in_error() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    create(&mut client, "empty", 1).await;
    assert!(poll(&mut client, "empty", Duration::from_millis(100)).await.is_none());
    server.stop().await;
}

/// A waiting poller gets a new task straight away, without storage, while
/// the backlog is negligible.
#[tokio::test]
async fn a_waiting_poller_gets_a_new_task_by_sync_match() {
    let server = TestServer::start().await;
    let mut poller = server.client.clone();
    let mut producer = server.client.clone();
    // Create the queue first, so the poll below parks on it.
    create(&mut producer, "sync", 1).await;
    let waiting = tokio::spawn(async move { poll(&mut poller, "sync", Duration::from_secs(30)).await });
    // Wait, by asking the server, until the poller is parked and the reader
    // has seen that nothing else is queued (the backlog is negligible); at
    // most 30 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = describe(&mut producer, "sync").await;
        let all_read = state.partitions.iter().flat_map(|p| &p.subqueues).all(|s| s.reader_at_end);
        if state.waiting_pollers > 0 && all_read {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 30 s: {} waiting pollers, every reader at the end: {all_read}",
            state.waiting_pollers
        );
        tokio::task::yield_now().await;
    }
    let added = add(&mut producer, "sync", spec("k", 0.0, 0, b"now")).await.unwrap();
    assert!(added.sync_matched);
    let task = waiting.await.unwrap().expect("the parked poll gets the task");
    assert_eq!(task.task_id, added.task_id);
    assert_eq!(task.payload, b"now");
    let state = describe(&mut producer, "sync").await;
    let partition = &state.partitions[0];
    assert_eq!((partition.added, partition.dispatched), (1, 1));
    let untouched = Some(pb::FairLevel { pass: 0, id: 0 });
    assert!(partition.subqueues.iter().all(|s| s.max_level == untouched), "a sync-matched task is not stored");
    server.stop().await;
}

/// Shutdown answers parked polls with an empty response at once.
#[tokio::test]
async fn shutdown_answers_parked_polls() {
    let server = TestServer::start().await;
    let mut poller = server.client.clone();
    let mut observer = server.client.clone();
    create(&mut observer, "parked", 1).await;
    let waiting = tokio::spawn(async move { poll(&mut poller, "parked", Duration::from_secs(300)).await });
    while describe(&mut observer, "parked").await.waiting_pollers == 0 {
        tokio::task::yield_now().await;
    }
    server.stop().await;
    assert!(waiting.await.unwrap().is_none());
}

/// A queue of four partitions: tasks spread over them, and every task is
/// dispatched once.
#[tokio::test]
async fn a_queue_of_several_partitions_serves_all_of_them() {
    let mut config = Config::default();
    config.matcher.partitions_per_queue = 4;
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    let specs = (0..200).map(|i| spec(&format!("k{}", i % 7), 0.0, 0, b"x")).collect();
    let ids = add_all(&mut client, "wide", specs).await;
    let state = describe(&mut client, "wide").await;
    assert_eq!(state.partitions.len(), 4);
    assert!(state.partitions.iter().all(|p| p.added > 0), "round robin reaches every partition");
    assert!(state.partitions.iter().all(|p| p.state == "active" && p.owner.starts_with("127.0.0.1:")), "{state:?}");
    let mut seen = std::collections::HashSet::new();
    while let Some(task) = poll(&mut client, "wide", Duration::from_millis(200)).await {
        assert!(seen.insert((task.partition, task.task_id)), "dispatched twice");
    }
    assert_eq!(seen.len(), ids.len());
    server.stop().await;
}

/// PollTasks takes what is ready, up to its maximum, each task with its own
/// lease; a parked PollTasks wakes for the first task added.
#[tokio::test]
async fn poll_tasks_takes_up_to_its_maximum_each_with_a_lease() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let ids = add_all(&mut client, "batch", (0..10).map(|i| spec(&format!("k{i}"), 0.0, 0, b"x")).collect()).await;
    let poll_batch = |max_tasks| {
        let mut client = server.client.clone();
        async move {
            let request = pb::PollTasksRequest {
                queue: "batch".into(),
                worker_id: "w".into(),
                max_wait: wait(Duration::from_secs(30)),
                max_tasks,
                completions: Vec::new(),
            };
            client.poll_tasks(request).await.unwrap().into_inner().tasks
        }
    };
    let first = poll_batch(4).await;
    let rest = poll_batch(100).await;
    assert_eq!((first.len(), rest.len()), (4, 6));
    let mut taken: Vec<i64> = first.iter().chain(&rest).map(|t| t.task_id).collect();
    taken.sort();
    assert_eq!(taken, ids);
    let tokens: std::collections::HashSet<&str> = first.iter().chain(&rest).map(|t| t.lease_token.as_str()).collect();
    assert_eq!(tokens.len(), 10, "one lease per task");
    for task in first.iter().chain(&rest) {
        client
            .complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] })
            .await
            .unwrap();
    }
    let parked = tokio::spawn(poll_batch(8));
    while describe(&mut client, "batch").await.waiting_pollers == 0 {
        tokio::task::yield_now().await;
    }
    let added = add(&mut client, "batch", spec("late", 0.0, 0, b"y")).await.unwrap();
    let woken = parked.await.unwrap();
    assert_eq!(woken.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![added.task_id]);
    server.stop().await;
}

/// A worker sends the completions of the tasks it finished with its next
/// poll: each is made as CompleteTask makes it, its outcome in the
/// response in request order, a bad one failing alone; past the limit the
/// call is refused whole, with nothing completed.
#[tokio::test]
async fn a_poll_carries_the_completions_of_the_tasks_before_it() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    add_all(&mut client, "carry", (0..4).map(|i| spec(&format!("k{i}"), 0.0, 0, b"x")).collect()).await;
    let request = |max_tasks, completions| pb::PollTasksRequest {
        queue: "carry".into(),
        worker_id: "w".into(),
        max_wait: wait(Duration::from_secs(30)),
        max_tasks,
        completions,
    };
    let done = |task: &pb::Task| pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] };
    let first = client.poll_tasks(request(3, Vec::new())).await.unwrap().into_inner();
    assert_eq!((first.tasks.len(), first.completions.len()), (3, 0));
    let held = &first.tasks;
    let completed = |state: pb::DescribeQueueResponse| state.partitions.iter().map(|p| p.completed).sum::<u64>();

    let refused = client.poll_tasks(request(1, vec![done(&held[0]); 257])).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("completions") && refused.message().contains("256"), "{refused:?}");
    assert_eq!(completed(describe(&mut client, "carry").await), 0, "a refused call completes nothing");

    client.complete_task(done(&held[2])).await.unwrap();
    let not_a_token = pb::CompleteTaskRequest { lease_token: "not-a-token".into(), result: vec![] };
    let completions = vec![done(&held[0]), done(&held[1]), done(&held[2]), not_a_token];
    let second = client.poll_tasks(request(3, completions)).await.unwrap().into_inner();
    let codes: Vec<i32> = second.completions.iter().map(|c| c.error.as_ref().map_or(0, |e| e.code)).collect();
    let expected = [tonic::Code::Ok, tonic::Code::Ok, tonic::Code::FailedPrecondition, tonic::Code::InvalidArgument];
    assert_eq!(codes, expected.map(|code| code as i32), "{:?}", second.completions);
    let last: Vec<i64> = second.tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(last.len(), 1, "the one task left, beside the completions");
    assert!(held.iter().all(|t| t.task_id != last[0]));
    assert_eq!(completed(describe(&mut client, "carry").await), 3);
    let last_poll =
        pb::PollTasksRequest { max_wait: wait(Duration::from_millis(50)), ..request(1, vec![done(&second.tasks[0])]) };
    let third = client.poll_tasks(last_poll).await.unwrap().into_inner();
    assert!(third.tasks.is_empty() && third.completions[0].error.is_none(), "{third:?}");
    assert_eq!(completed(describe(&mut client, "carry").await), 4);
    server.stop().await;
}

/// Two partitions of one node, both backlogged, one far ahead in its passes
/// (it has served a key for a while): dispatch goes to both, in turn. Passes
/// of different partitions do not compare; when they were compared, the
/// partition behind took every dispatch until it was empty (a chaos run saw
/// a partition wait 134 s).
#[tokio::test]
async fn backlogged_partitions_are_served_in_turn_whatever_their_passes() {
    use fairway::clock::SystemClock;
    use fairway::core::engine::Outcome;
    use fairway::matcher::{Queues, Settings};
    use fairway::model::{Priority, TaskSpec, validate};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(fairway::store::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let mut settings = Settings::default();
    settings.matcher.sync_match = false;
    let queues = Queues::new(store, Arc::new(SystemClock), settings);
    let queue = validate::queue_name("queue", "two").unwrap();
    let matcher = queues.create(&queue, 2, None).await.unwrap();
    let spec = |key: &str| TaskSpec::new(key, Priority::DEFAULT, b"x".to_vec());
    // Partition 0 serves one key 50 times: its passes move 50 ahead.
    for _ in 0..50 {
        matcher.add(spec("ahead"), Some(0)).await.unwrap();
    }
    while let Some(task) = matcher.try_take().await {
        matcher.finish(&task.token, Outcome::Complete).await.unwrap();
    }
    for _ in 0..20 {
        matcher.add(spec("new-0"), Some(0)).await.unwrap();
        matcher.add(spec("new-1"), Some(1)).await.unwrap();
    }
    let mut served = [0u32; 2];
    for _ in 0..20 {
        let task = matcher.try_take().await.expect("a task");
        served[task.partition as usize] += 1;
    }
    assert!(served[0] >= 8 && served[1] >= 8, "20 dispatches went {served:?} to partitions 0 and 1");
    queues.close().await;
}

/// A client that opens a request and never sends the rest of it (or stops
/// reading) holds no shutdown: after `shutdown_grace` the server closes what
/// is left and goes on to hand its partitions over.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_client_that_never_finishes_its_request() {
    let config = Config { shutdown_grace: Duration::from_secs(1), ..Config::default() };
    let server = TestServer::start_with(config).await;
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut client, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let mut ping = connection.ping_pong().expect("a ping handle");
    tokio::spawn(connection);
    let request = hyper::Request::post(format!("http://{}/fairway.v1.Matching/AddTask", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, _body_never_sent) = client.send_request(request, false).unwrap();
    // Frames arrive in order: once the ping is answered, the server has the request's headers.
    ping.ping(h2::Ping::opaque()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), server.stop())
        .await
        .expect("the shutdown waited for a client that never finished its request");
    let closed = tokio::time::timeout(Duration::from_secs(60), response).await.expect("the connection is left open");
    assert!(closed.is_err(), "the request was answered, not cut off: {closed:?}");
}

/// A take of many tasks asks, before each, whether the next best fits, by
/// its own size (payload and fairness key), and stops at the first that
/// does not: nothing is taken out of order, and the rest comes next. (Sized
/// at the largest payload allowed, PollTasks leased three tasks a step.)
#[tokio::test]
async fn a_take_stops_at_the_first_task_that_does_not_fit_and_keeps_the_order() {
    use fairway::clock::SystemClock;
    use fairway::matcher::{Queues, Settings};
    use fairway::model::{Priority, TaskSpec, validate};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(fairway::store::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let queues = Queues::new(store, Arc::new(SystemClock), Settings::default());
    let queue = validate::queue_name("queue", "sized").unwrap();
    let matcher = queues.create(&queue, 1, None).await.unwrap();
    for size in [10, 10, 10, 500, 10] {
        matcher.add(TaskSpec::new("k", Priority::DEFAULT, vec![b'x'; size]), Some(0)).await.unwrap();
    }
    let take = |budget: usize| {
        let matcher = matcher.clone();
        async move {
            let (mut used, mut offered) = (0, Vec::new());
            let mut fits = |candidate: &fairway::core::engine::Candidate| {
                offered.push(candidate.bytes);
                used += candidate.bytes;
                used <= budget
            };
            let taken = matcher.take_ready(256, &mut fits).await;
            (taken.into_iter().map(|t| t.task.payload.len()).collect::<Vec<_>>(), offered)
        }
    };
    let (taken, offered) = take(100).await;
    assert_eq!(taken, vec![10, 10, 10]);
    assert_eq!(offered, vec![11, 11, 11, 501], "payload and key, the refused one last");
    let (taken, _) = take(1000).await;
    assert_eq!(taken, vec![500, 10], "the rest, in order");
    queues.close().await;
}
