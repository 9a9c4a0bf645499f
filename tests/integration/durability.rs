//! Crash safety with the real binary: SIGKILL after acknowledged adds, with
//! tasks out with workers, with dedup ids held; and the data directory lock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fairway::proto::v1 as pb;
use futures::future::join_all;

use crate::support::{Client, ServerProcess, add, add_all, describe, poll, spec};

/// Every AddTask acknowledged before a SIGKILL is dispatched after a restart
/// on the same data directory: at once, but for tasks held for a poll at
/// the crash (matched in their turn, docs/fairness.md §7a), which come once
/// their lease runs out (2 s here).
#[tokio::test]
async fn acknowledged_adds_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let env = [("FAIRWAY_TASKS__LEASE_TIMEOUT", "2s")];
    let server = ServerProcess::start_on(&store, &env);
    let client = server.client().await;
    // Eight concurrent producers, so that appends are grouped.
    let producers = (0..8).map(|p| {
        let mut client = client.clone();
        async move {
            let mut ids = Vec::new();
            for i in 0..60 {
                let payload = format!("{p}-{i}");
                let added =
                    add(&mut client, "durable", spec(&format!("producer-{p}"), 0.0, 1 + i % 5, payload.as_bytes()))
                        .await
                        .expect("AddTask");
                ids.push(added.task_id);
            }
            ids
        }
    });
    let acknowledged: HashSet<i64> = join_all(producers).await.into_iter().flatten().collect();
    assert_eq!(acknowledged.len(), 480);
    server.kill();

    let restarted = ServerProcess::start_on(&store, &env);
    let mut client = restarted.client().await;
    let mut dispatched = HashSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !acknowledged.is_subset(&dispatched) && std::time::Instant::now() < deadline {
        if let Some(task) = poll(&mut client, "durable", Duration::from_millis(500)).await {
            dispatched.insert(task.task_id);
        }
    }
    let lost: Vec<_> = acknowledged.difference(&dispatched).collect();
    assert!(lost.is_empty(), "{} acknowledged tasks lost: {lost:?}", lost.len());
}

/// A second server on the same data directory exits with a clear error.
#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = ServerProcess::start(dir.path());
    let second = crate::support::fairway_command()
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(format!("embedded:{}", dir.path().display()))
        .output()
        .expect("run a second fairway serve");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another process has it open"), "{stderr}");
}

/// SIGTERM and wait, off the runtime: the orderly shutdown waits for this
/// test's connections to answer, which needs the runtime free.
async fn stop(server: ServerProcess) {
    tokio::task::spawn_blocking(move || server.terminate()).await.expect("terminate");
}

async fn complete(client: &mut Client, task: &pb::Task) -> Result<(), tonic::Status> {
    let request = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] };
    client.complete_task(request).await.map(drop)
}

/// `kill -9` of the server while many tasks are out with workers: after a
/// restart on the same data directory every task is completed, none is
/// lost, a task completed before the crash never comes back, and only the
/// tasks whose leases were out at the crash are delivered twice (once their
/// leases expire). A worker that finishes right after the restart still
/// holds its lease: the new process took it over; one whose Complete landed
/// just before the crash and tries again is told the lease is gone. At the
/// end the queue shows nothing waiting and nothing out.
#[tokio::test]
async fn tasks_out_with_workers_at_a_sigkill_are_all_completed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let env = [("FAIRWAY_TASKS__LEASE_TIMEOUT", "4s"), ("FAIRWAY_TASKS__BACKOFF_INITIAL", "100ms")];
    let server = ServerProcess::start_on(&store, &env);
    let mut client = server.client().await;
    let specs = (0..300).map(|i| spec(&format!("key-{}", i % 7), 0.0, 0, format!("{i}").as_bytes())).collect();
    let all: HashSet<i64> = add_all(&mut client, "crash", specs).await.into_iter().collect();
    assert_eq!(all.len(), 300);

    let mut deliveries: HashMap<i64, u32> = HashMap::new();
    let mut out = Vec::new();
    for _ in 0..100 {
        let task = poll(&mut client, "crash", Duration::from_secs(5)).await.expect("a task");
        *deliveries.entry(task.task_id).or_default() += 1;
        out.push(task);
    }
    let mut completed = HashSet::new();
    let done_before: Vec<pb::Task> = out[..40].to_vec();
    for task in out.drain(..40) {
        complete(&mut client, &task).await.expect("CompleteTask");
        completed.insert(task.task_id);
    }
    let in_flight: HashSet<i64> = out.iter().map(|t| t.task_id).collect();
    server.kill();

    let restarted = ServerProcess::start_on(&store, &env);
    let mut client = restarted.client().await;
    // A worker whose answer to a Complete was lost in the crash tries again:
    // refused, the task stays done.
    for task in &done_before[..5] {
        let refused = complete(&mut client, task).await.expect_err("a lease finished before the crash");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    }
    // Workers that were running carry on: the first ten finish now.
    for task in out.drain(..10) {
        complete(&mut client, &task).await.expect("a lease survives the restart of its owner");
        completed.insert(task.task_id);
    }
    let mut empty_polls = 0;
    while completed.len() < all.len() {
        let Some(task) = poll(&mut client, "crash", Duration::from_secs(1)).await else {
            empty_polls += 1;
            assert!(empty_polls < 30, "{} tasks never came back", all.len() - completed.len());
            continue;
        };
        empty_polls = 0;
        *deliveries.entry(task.task_id).or_default() += 1;
        complete(&mut client, &task).await.expect("CompleteTask");
        completed.insert(task.task_id);
    }
    assert_eq!(completed, all, "every task completed, nothing else");
    let twice: HashSet<i64> = deliveries.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    assert!(twice.is_subset(&in_flight), "only leases out at the crash are delivered again: {twice:?}");
    assert!(deliveries.values().all(|n| *n <= 2));
    println!("delivered twice after the crash: {} of {} out", twice.len(), in_flight.len());
    // And the queue says so: nothing waiting, nothing out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = describe(&mut client, "crash").await;
        let backlog: u64 = info.partitions.iter().flat_map(|p| &p.subqueues).map(|s| s.backlog).sum();
        let leased: u64 = info.partitions.iter().map(|p| p.leased).sum();
        if backlog == 0 && leased == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue still shows {backlog} waiting, {leased} out: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(restarted).await;
}

/// A dedup id still holds after a `kill -9` and a restart, and is free again
/// once its task is done.
#[tokio::test]
async fn dedup_ids_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let with_id = |id: &str| pb::TaskSpec { dedup_id: id.into(), ..spec("k", 0.0, 0, id.as_bytes()) };
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    let mut first = HashMap::new();
    for n in 0..50 {
        let id = format!("origin-{n}");
        let added = add(&mut client, "dedup", with_id(&id)).await.unwrap();
        assert!(!added.duplicate);
        first.insert(id, added.task_id);
    }
    server.kill();

    let restarted = ServerProcess::start(dir.path());
    let mut client = restarted.client().await;
    for (id, task_id) in &first {
        let again = add(&mut client, "dedup", with_id(id)).await.unwrap();
        assert!(again.duplicate, "{id} is still pending after the restart");
        assert_eq!(again.task_id, *task_id);
    }
    for _ in 0..50 {
        let task = poll(&mut client, "dedup", Duration::from_secs(5)).await.expect("a task");
        complete(&mut client, &task).await.unwrap();
    }
    assert!(poll(&mut client, "dedup", Duration::from_millis(200)).await.is_none(), "no duplicate was stored");
    let freed = add(&mut client, "dedup", with_id("origin-0")).await.unwrap();
    assert!(!freed.duplicate, "done: the id is free again");
    stop(restarted).await;
}
