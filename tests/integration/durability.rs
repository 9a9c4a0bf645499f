//! Crash safety with the real binary: SIGKILL after acknowledged adds, and
//! the data directory lock.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;

use crate::support::{ServerProcess, add, poll, spec};

/// Every AddTask acknowledged before a SIGKILL is dispatched after a restart
/// on the same data directory.
#[tokio::test]
async fn acknowledged_adds_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
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

    let restarted = ServerProcess::start(dir.path());
    let mut client = restarted.client().await;
    let mut dispatched = HashSet::new();
    while let Some(task) = poll(&mut client, "durable", Duration::from_millis(500)).await {
        dispatched.insert(task.task_id);
    }
    let lost: Vec<_> = acknowledged.difference(&dispatched).collect();
    assert!(lost.is_empty(), "{} acknowledged tasks lost: {lost:?}", lost.len());
}

/// A second server on the same data directory exits with a clear error.
#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = ServerProcess::start(dir.path());
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(format!("embedded:{}", dir.path().display()))
        .output()
        .expect("run a second fairway serve");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another process has it open"), "{stderr}");
}
