//! `fairway worker` against a real server: each task's command runs with
//! the payload on stdin; exit 0 completes the task, anything else fails it.

use crate::support::{ServerProcess, add_all, describe, fairway_command, spec};

#[tokio::test]
async fn the_worker_completes_what_succeeds_and_fails_what_does_not() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    let queue = "visits.git";
    let payloads: Vec<&[u8]> = vec![
        br#"{"url": "https://a.example/x"}"#,
        b"bad",
        br#"{"url": "https://b.example/y"}"#,
        br#"{"url": "https://c.example/z"}"#,
    ];
    add_all(&mut client, queue, payloads.iter().map(|p| spec("forge", 0.0, 0, p)).collect()).await;
    // Reads the payload from stdin; "bad" exits 3, a URL prints an eventful
    // outcome (the worker adds the payload's URL to it).
    let script = r#"read url; if [ "$url" = bad ]; then echo "cannot load $url" >&2; exit 3; fi; echo "loading $url (attempt $FAIRWAY_ATTEMPT)"; echo '{"status": "eventful", "snapshot": "00ff"}'"#;
    let worker = tokio::task::spawn_blocking({
        let address = format!("http://{}", server.addr);
        move || {
            fairway_command()
                .args(["worker", "--server", &address, "--queue", queue, "--concurrency", "2", "--max-tasks", "4"])
                .args(["--", "sh", "-c", script])
                .output()
                .expect("run fairway worker")
        }
    });
    let output = worker.await.unwrap();
    assert!(output.status.success(), "worker: {}", String::from_utf8_lossy(&output.stderr));
    let state = describe(&mut client, queue).await;
    let completed: u64 = state.partitions.iter().map(|p| p.completed).sum();
    let failed: u64 = state.partitions.iter().map(|p| p.failed).sum();
    assert_eq!((completed, failed), (3, 1), "{state:?}");
    // The server's shutdown waits for open connections; this runtime must keep serving ours.
    tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
}
