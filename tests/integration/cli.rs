//! The `fairway` client commands as a person runs them, against a server.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::support::{TestServer, create, fairway_command, poll};

const QUEUE: &str = "cli";

/// Runs `fairway ARGS --server URL` with `stdin`, for 30 s at most.
async fn run(server: &TestServer, args: &[&str], stdin: &[u8]) -> Output {
    let url = format!("http://{}", server.addr);
    let mut command = tokio::process::Command::from(fairway_command());
    command.args(args).args(["--server", &url]).kill_on_drop(true);
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run fairway");
    let mut input = child.stdin.take().expect("a stdin");
    input.write_all(stdin).await.expect("write stdin");
    drop(input);
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("fairway {args:?} did not end within 30 s"))
        .expect("fairway ends")
}

fn ok(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A payload too large for an argument, and not text, comes from a file or
/// from standard input whole; a missing file is named.
#[tokio::test]
async fn payloads_come_from_a_file_or_standard_input() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let file = dir.path().join("big.bin");
    std::fs::write(&file, &big).unwrap();
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--payload-file", file.to_str().unwrap()], b"").await);
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--payload-file", "-"], &[0xff, 0, 0xfe]).await);
    let first = poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("the file's task");
    assert!(first.payload == big, "the 1 MiB payload came back as {} bytes", first.payload.len());
    let second = poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("standard input's task");
    assert_eq!(second.payload, [0xff, 0, 0xfe]);

    let missing = dir.path().join("missing.bin");
    let output =
        run(&server, &["task", "add", "--queue", QUEUE, "--payload-file", missing.to_str().unwrap()], b"").await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("--payload-file") && stderr.contains("missing.bin"),
        "{stderr}"
    );
    let both = run(&server, &["task", "add", "--queue", QUEUE, "--payload", "x", "--payload-file", "-"], b"").await;
    assert!(!both.status.success(), "--payload with --payload-file was taken");
    server.stop().await;
}

/// Times are local dates with how far they are, not Unix seconds.
#[tokio::test]
async fn times_are_dates_with_how_far_they_are() {
    let server = TestServer::start().await;
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--payload", "p"], b"").await);
    let polled = ok(&run(&server, &["task", "poll", "--queue", QUEUE, "--wait", "5s"], b"").await);
    let line = polled.lines().find(|l| l.starts_with("lease until:")).unwrap_or_else(|| panic!("{polled}"));
    let year = chrono::Local::now().format("%Y-").to_string();
    assert!(line.contains(&year) && line.contains("(in ") && !line.contains("Unix"), "{line}");
    server.stop().await;
}

/// Task ids are numbered per partition; the CLI names a task by both, so
/// six tasks of a 4-partition queue get six names.
#[tokio::test]
async fn a_task_is_named_by_its_partition_and_id() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    create(&mut client, "four", 4).await;
    let mut names = std::collections::BTreeSet::new();
    for i in 0..6 {
        let added = ok(&run(&server, &["task", "add", "--queue", "four", "--key", &format!("k{i}")], b"").await);
        let name = added.trim().strip_prefix("added ").unwrap_or_else(|| panic!("{added}")).to_owned();
        assert!(name.starts_with("task ") && name.contains(" of partition "), "{added}");
        names.insert(name);
    }
    assert_eq!(names.len(), 6, "{names:?}");
    server.stop().await;
}

/// `queue describe` leads with what a person asks: tasks waiting, running
/// and delayed, and how long the oldest has waited, before the levels.
#[tokio::test]
async fn queue_describe_leads_with_waiting_running_and_the_oldest_wait() {
    let server = TestServer::start().await;
    for payload in ["a", "b", "c"] {
        ok(&run(&server, &["task", "add", "--queue", QUEUE, "--payload", payload], b"").await);
    }
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--delay", "1h"], b"").await);
    ok(&run(&server, &["task", "poll", "--queue", QUEUE, "--wait", "5s"], b"").await);
    let described = ok(&run(&server, &["queue", "describe", "--queue", QUEUE], b"").await);
    let mut lines = described.lines();
    let first = lines.next().unwrap_or_default();
    assert!(first.starts_with("queue cli: 2 waiting, 1 running, 1 delayed, in 1 partition(s)"), "{described}");
    let second = lines.next().unwrap_or_default();
    assert!(second.contains("the oldest task waiting has waited") && second.contains("ago)"), "{described}");
    server.stop().await;
}

/// An add to a queue that does not exist creates it, and says so, so that
/// a mistyped name does not go unnoticed; the next add says nothing.
#[tokio::test]
async fn an_add_that_creates_a_queue_says_so() {
    let server = TestServer::start().await;
    let first = run(&server, &["task", "add", "--queue", "jbos", "--payload", "p"], b"").await;
    ok(&first);
    let note = String::from_utf8_lossy(&first.stderr);
    assert!(note.contains("queue \"jbos\" did not exist; this add created it"), "{note}");
    let second = run(&server, &["task", "add", "--queue", "jbos", "--payload", "p"], b"").await;
    ok(&second);
    assert!(second.stderr.is_empty(), "{}", String::from_utf8_lossy(&second.stderr));
    server.stop().await;
}

/// The read commands answer in JSON with `--json`: the proto3 mapping of
/// their response, which a script parses.
#[tokio::test]
async fn read_commands_answer_in_json_when_asked() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    create(&mut client, QUEUE, 1).await;
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--key", "k", "--payload", "one"], b"").await);
    ok(&run(&server, &["task", "add", "--queue", QUEUE, "--key", "k", "--payload", "two"], b"").await);
    let parse = |output: &Output| -> serde_json::Value {
        let text = ok(output);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };

    let listed = parse(&run(&server, &["queue", "list", "--json"], b"").await);
    assert_eq!(listed["queues"][0]["queue"], QUEUE, "{listed}");
    assert_eq!(listed["queues"][0]["backlog"], "2", "{listed}");
    let described = parse(&run(&server, &["queue", "describe", "--queue", QUEUE, "--json"], b"").await);
    assert_eq!(described["partitions"][0]["subqueues"][2]["backlog"], "2", "{described}");
    let polled = parse(&run(&server, &["task", "poll", "--queue", QUEUE, "--wait", "5s", "--json"], b"").await);
    let task = &polled["task"];
    assert_eq!(task["payload"], "b25l", "bytes are base64 ('one'): {polled}");
    assert!(task["leaseDeadline"].as_str().is_some_and(|t| t.ends_with('Z')), "{polled}");
    let token = task["leaseToken"].as_str().unwrap().to_owned();
    ok(&run(&server, &["task", "fail", "--lease-token", &token, "--fatal", "--message", "bad"], b"").await);
    let dead = parse(&run(&server, &["queue", "dead-letters", "--queue", QUEUE, "--json"], b"").await);
    assert_eq!(dead["deadLetters"][0]["message"], "bad", "{dead}");
    let empty = parse(&run(&server, &["queue", "list", "--prefix", "none", "--json"], b"").await);
    assert_eq!(empty["queues"], serde_json::json!([]), "{empty}");

    // Pauses and settings from the command line, as `describe` shows them.
    let paused = ok(&run(&server, &["queue", "pause", "--queue", QUEUE, "--key", "k"], b"").await);
    assert!(paused.contains("key \"k\" paused"), "{paused}");
    let updated = ok(&run(&server, &["queue", "update", "--queue", QUEUE, "--max-attempts", "7"], b"").await);
    assert!(updated.contains("max_attempts = 7"), "{updated}");
    let described = parse(&run(&server, &["queue", "describe", "--queue", QUEUE, "--json"], b"").await);
    assert_eq!(described["settings"]["pausedKeys"], serde_json::json!(["k"]), "{described}");
    assert_eq!(described["settings"]["maxAttempts"], 7, "{described}");
    let refused = run(&server, &["queue", "update", "--queue", QUEUE, "--lease-timeout", "100ms"], b"").await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("settings.lease_timeout"), "{refused:?}");
    server.stop().await;
}
