//! `fairway worker` against a real server, as a new user would run it: each
//! task's command runs with the payload on stdin; exit 0 completes the task,
//! anything else fails it; a command that cannot run, a server restart, a
//! hanging command, signals and a killed worker each have a test.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Client, ServerProcess, add_all, describe, fairway_command, spec};

/// The longest any step of these tests may take.
const DEADLINE: Duration = Duration::from_secs(30);

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
    let worker = Worker::start(&server, queue, &["--concurrency", "2", "--max-tasks", "4"], &["sh", "-c", script]);
    let (status, log) = worker.wait().await;
    assert!(status.success(), "worker: {log}");
    let state = describe(&mut client, queue).await;
    let completed: u64 = state.partitions.iter().map(|p| p.completed).sum();
    let failed: u64 = state.partitions.iter().map(|p| p.failed).sum();
    assert_eq!((completed, failed), (3, 1), "{state:?}");
    // It says what it does: a start line, a line per task, the failing
    // command's stderr, and a summary.
    assert!(log.contains("taking tasks of visits.git from"), "{log}");
    assert_eq!(log.matches(" completed in ").count(), 3, "{log}");
    assert!(log.contains("failed in") && log.contains("cannot load bad (exit status 3)"), "{log}");
    assert!(log.contains("  | cannot load bad"), "the stderr tail: {log}");
    assert!(log.contains("stopped: 3 tasks completed, 1 failed"), "{log}");

    // FAIRWAY_LOG=warn keeps the failures and drops the rest.
    add_all(&mut client, queue, payloads.iter().map(|p| spec("forge", 0.0, 0, p)).collect()).await;
    let quiet =
        Worker::start_with(&server, queue, &["--max-tasks", "4"], &["sh", "-c", script], &[("FAIRWAY_LOG", "warn")]);
    let (status, log) = quiet.wait().await;
    assert!(status.success(), "worker: {log}");
    assert!(!log.contains("completed in") && log.contains("cannot load bad"), "{log}");
}

/// A new user's first try: the README's loader path, which does not exist.
/// The worker used to lease every task and let each die as "lease expired".
#[tokio::test]
async fn a_command_that_does_not_exist_takes_nothing_from_the_queue() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", (0..5).map(|i| spec("k", 0.0, 0, format!("{i}").as_bytes())).collect()).await;
    for missing in ["./no-such-loader.sh", "no-such-loader-in-path"] {
        let (status, log) = Worker::start(&server, "jobs", &["--concurrency", "4"], &[missing]).wait().await;
        assert_eq!(status.code(), Some(1), "{log}");
        assert!(log.contains(&format!("cannot run {missing}")) && log.contains("nothing was taken"), "{log}");
    }
    let state = describe(&mut client, "jobs").await;
    assert_eq!(state.partitions.iter().map(|p| p.dispatched).sum::<u64>(), 0, "{state:?}");
}

/// A command that exists but cannot start what it runs (a shell's 127): one
/// task fails with the real cause, and the worker stops instead of running
/// the queue into its dead letters.
#[tokio::test]
async fn a_command_that_cannot_start_fails_one_task_with_its_cause_and_stops() {
    let data = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", data.path().display());
    let server = ServerProcess::start_on(&store, &[("FAIRWAY_TASKS__MAX_ATTEMPTS", "1")]);
    let mut client = server.client().await;
    add_all(&mut client, "jobs", (0..10).map(|i| spec("k", 0.0, 0, format!("{i}").as_bytes())).collect()).await;
    let (status, log) = Worker::start(&server, "jobs", &[], &["sh", "-c", "exec /no/such/program"]).wait().await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("the command cannot be started") && log.contains("not found"), "{log}");
    let state = describe(&mut client, "jobs").await;
    assert_eq!(state.partitions.iter().map(|p| p.dispatched).sum::<u64>(), 1, "one task taken: {state:?}");
    let dead = dead_letters(&mut client, "jobs").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].message.contains("/no/such/program") && dead[0].message.contains("not found"), "{dead:?}");
}

/// The node restarts (kill -9) under a running worker: the worker says so,
/// waits for it, and takes tasks again. It used to exit 1.
#[tokio::test]
async fn the_worker_waits_for_a_restarted_server() {
    let data = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", data.path().display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let server = ServerProcess::start_listening(&store, &[], &listen);
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"before")]).await;
    let worker = Worker::start(&server, "jobs", &["--max-tasks", "2"], &["sh", "-c", "cat"]);
    wait_for("the first task completed", async || {
        describe(&mut client, "jobs").await.partitions.iter().map(|p| p.completed).sum::<u64>() == 1
    })
    .await;
    server.kill();
    wait_for("the worker says it cannot reach the server", async || worker.log().contains("cannot reach")).await;
    let server = ServerProcess::start_listening(&store, &[], &listen);
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"after")]).await;
    let (status, log) = worker.wait().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("again; taking tasks") && log.contains("stopped: 2 tasks completed"), "{log}");
}

/// A command that hangs is killed, with everything it started, at
/// `--timeout`, and its task failed; it used to hold the lease forever.
#[tokio::test]
async fn a_hanging_command_is_killed_at_its_timeout() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let sleep = long_sleep(1);
    let command = ["sh", "-c", &format!("{sleep}; echo never")];
    let (status, log) = Worker::start(&server, "jobs", &["--max-tasks", "1", "--timeout", "1s"], &command).wait().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("timed out after 1s"), "{log}");
    assert!(!running(&sleep), "the command's child was left running");
    let state = describe(&mut client, "jobs").await;
    assert_eq!(state.partitions.iter().map(|p| p.failed).sum::<u64>(), 1, "{state:?}");
}

/// Five failures in a row slow the worker down, and then it takes tasks
/// again: it used to wait before every poll for ever after.
#[tokio::test]
async fn failures_in_a_row_slow_the_worker_down_without_stopping_it() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    let payloads = ["f1", "f2", "f3", "f4", "f5", "f6", "f7", "ok"];
    add_all(&mut client, "jobs", payloads.iter().map(|p| spec("k", 0.0, 0, p.as_bytes())).collect()).await;
    let script = r#"read p; case "$p" in f*) echo "no luck with $p" >&2; exit 1;; esac; echo done"#;
    let (status, log) = Worker::start(&server, "jobs", &["--max-tasks", "8"], &["sh", "-c", script]).wait().await;
    assert!(status.success(), "{log}");
    // The count of a task that ended can lag one poll behind.
    assert!(log.contains("tasks failed in a row; waiting 1s before taking more"), "{log}");
    assert!(log.contains("stopped: ") && log.matches(" failed in ").count() >= 6, "{log}");
}

/// A process that leaves the command's group (setsid) and keeps its stdout
/// open does not hold the worker: past a bound, the task fails, rather than
/// completing with the output cut short.
#[tokio::test]
async fn output_held_open_by_an_escaped_process_fails_the_task_after_a_bound() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let sleep = long_sleep(5);
    let dir = tempfile::tempdir().unwrap();
    let escaped = dir.path().join("escaped");
    // The command exits once the process it started has left its group.
    let script = format!(
        "setsid sh -c 'touch {0}; exec {sleep}' & i=0; while [ ! -e {0} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; echo result",
        escaped.display()
    );
    let command = ["sh", "-c", &script];
    let (status, log) = Worker::start(&server, "jobs", &["--max-tasks", "1"], &command).wait().await;
    let _ = Command::new("pkill").args(["-KILL", "-f", &sleep]).status();
    assert!(status.success(), "{log}");
    assert!(log.contains("keeps its output open"), "{log}");
    let state = describe(&mut client, "jobs").await;
    let (completed, failed) = state.partitions.iter().fold((0, 0), |(c, f), p| (c + p.completed, f + p.failed));
    assert_eq!((completed, failed), (0, 1), "{log}");
}

/// What a command leaves running when it exits (a process in the
/// background, holding its output open) is killed, and the task completes:
/// the worker used to wait for it to end.
#[tokio::test]
async fn what_a_command_leaves_running_is_killed_when_it_exits() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let sleep = long_sleep(4);
    let command = ["sh", "-c", &format!("{sleep} & echo started")];
    let (status, log) = Worker::start(&server, "jobs", &["--max-tasks", "1"], &command).wait().await;
    assert!(status.success(), "{log}");
    assert!(!running(&sleep), "the background process was left running");
    let state = describe(&mut client, "jobs").await;
    assert_eq!(state.partitions.iter().map(|p| p.completed).sum::<u64>(), 1, "{log}");
}

/// The first SIGTERM lets a running command go on; the second kills it and
/// hands its task back. Both used to be ignored while a command hung.
#[tokio::test]
async fn a_second_signal_kills_the_commands_and_hands_their_tasks_back() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let sleep = long_sleep(2);
    let mut worker = Worker::start(&server, "jobs", &[], &["sh", "-c", &sleep]);
    wait_for("the command runs", async || running(&sleep)).await;
    worker.signal(libc::SIGTERM);
    wait_for("the worker stops taking tasks", async || worker.log().contains("SIGTERM: no more tasks")).await;
    assert!(worker.child.try_wait().unwrap().is_none(), "the worker waits for its command: {}", worker.log());
    assert!(running(&sleep), "the first signal must not stop the command");
    worker.signal(libc::SIGTERM);
    let (status, log) = worker.wait().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("handed back"), "{log}");
    assert!(!running(&sleep), "the command was left running");
    let state = describe(&mut client, "jobs").await;
    let (failed, expired) = state.partitions.iter().fold((0, 0), |(f, e), p| (f + p.failed, e + p.expired));
    assert_eq!((failed, expired), (1, 0), "handed back at once, not left to its lease: {state:?}");
}

/// A worker killed with SIGKILL takes its commands with it: the task is
/// delivered again after its lease, never run by two commands at once.
#[tokio::test]
async fn a_killed_worker_leaves_no_command_running() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let sleep = long_sleep(3);
    let mut worker = Worker::start(&server, "jobs", &[], &["sh", "-c", &sleep]);
    wait_for("the command runs", async || running(&sleep)).await;
    worker.signal(libc::SIGKILL);
    let _ = worker.child.wait();
    wait_for("the command is gone with the worker", async || !running(&sleep)).await;
}

/// Ctrl-C in a terminal signals the whole foreground process group. It used
/// to reach the commands too, which died and used up an attempt; now they
/// finish, as docs/scheduler.md says, and their tasks complete.
#[tokio::test]
async fn ctrl_c_in_a_terminal_lets_the_running_commands_finish() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    add_all(&mut client, "jobs", vec![spec("k", 0.0, 0, b"x")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (started, gate) = (dir.path().join("started"), dir.path().join("open"));
    // The command says it started, then waits (at most a minute) for the
    // test to open the gate.
    let script = format!(
        "touch '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo done",
        started.display(),
        gate.display()
    );
    let worker = Worker::start(&server, "jobs", &[], &["sh", "-c", &script]);
    wait_for("the command runs", async || started.exists()).await;
    // What a terminal does on Ctrl-C: SIGINT to the foreground group.
    // SAFETY: killpg has no memory effects; the group is the worker's own.
    assert_eq!(unsafe { libc::killpg(worker.child.id() as libc::pid_t, libc::SIGINT) }, 0);
    wait_for("the worker stops taking tasks", async || worker.log().contains("SIGINT: no more tasks")).await;
    std::fs::write(&gate, b"").unwrap();
    let (status, log) = worker.wait().await;
    assert!(status.success(), "{log}");
    let state = describe(&mut client, "jobs").await;
    let (completed, failed) = state.partitions.iter().fold((0, 0), |(c, f), p| (c + p.completed, f + p.failed));
    assert_eq!((completed, failed), (1, 0), "{log}\n{state:?}");
}

/// The example loader of the README runs as it says: `git ls-remote` of the
/// payload's URL, and a visit outcome.
#[tokio::test]
async fn the_example_git_loader_reports_a_visit_outcome() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path());
    let mut client = server.client().await;
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git").current_dir(repo.path()).args(args).stdout(Stdio::null()).status();
        assert!(status.expect("run git (a test dependency)").success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "--allow-empty", "-m", "first"]);
    let payload = format!(r#"{{"url": "{}"}}"#, repo.path().display());
    add_all(&mut client, "visits.git", vec![spec("forge", 0.0, 0, payload.as_bytes())]).await;
    let loader = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/load-git.sh");
    let loader = loader.to_str().unwrap();
    let (status, log) = Worker::start(&server, "visits.git", &["--max-tasks", "1"], &[loader]).wait().await;
    assert!(status.success(), "{log}");
    let state = describe(&mut client, "visits.git").await;
    let (completed, failed) = state.partitions.iter().fold((0, 0), |(c, f), p| (c + p.completed, f + p.failed));
    assert_eq!((completed, failed), (1, 0), "{log}");
}

/// A `fairway worker` process whose log goes to a file.
struct Worker {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Worker {
    fn start(server: &ServerProcess, queue: &str, flags: &[&str], command: &[&str]) -> Worker {
        Worker::start_with(server, queue, flags, command, &[])
    }

    fn start_with(
        server: &ServerProcess,
        queue: &str,
        flags: &[&str],
        command: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let child = fairway_command()
            .args(["worker", "--server", &format!("http://{}", server.addr), "--queue", queue])
            .args(flags)
            .arg("--")
            .args(command)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().expect("the log file"))
            // Its own group, as a shell gives a job.
            .process_group(0)
            .spawn()
            .expect("start fairway worker");
        Worker { child, log }
    }

    fn log(&self) -> String {
        let mut text = String::new();
        let _ = self.log.reopen().and_then(|mut f| f.read_to_string(&mut text));
        text
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill has no memory effects; the child is not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0);
    }

    /// Waits for the worker to exit (killing it past the deadline).
    async fn wait(mut self) -> (ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the worker") {
                return (status, self.log());
            }
            if started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!("the worker did not exit within {DEADLINE:?}: {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `condition` holds, panicking past the deadline.
async fn wait_for(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !condition().await {
        assert!(started.elapsed() < DEADLINE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A command that sleeps for days, unique to this test run (`n`, and this
/// process's id) so that leftovers of other runs do not count.
fn long_sleep(n: u32) -> String {
    format!("sleep {n}{:07}", std::process::id())
}

/// Whether a process whose command line contains `marker` is running.
fn running(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline: Vec<u8> = cmdline.iter().map(|&b| if b == 0 { b' ' } else { b }).collect();
        // Not the shells and guards that carry the marker as an argument.
        String::from_utf8_lossy(&cmdline).trim_end().starts_with(marker)
    })
}

async fn dead_letters(client: &mut Client, queue: &str) -> Vec<fairway::proto::v1::DeadLetter> {
    let request = fairway::proto::v1::ListDeadLettersRequest { queue: queue.to_owned(), limit: 100, filter: None };
    client.list_dead_letters(request).await.expect("ListDeadLetters").into_inner().dead_letters
}
