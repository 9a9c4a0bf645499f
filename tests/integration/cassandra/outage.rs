//! Cassandra goes away while producers and workers run: first paused
//! (SIGSTOP, then SIGCONT), then killed (SIGKILL, then restarted on its
//! data). Callers get UNAVAILABLE (nothing written) or UNKNOWN (may have been
//! written) meanwhile, the service recovers when Cassandra returns, and every
//! acknowledged task is dispatched. Workers complete what they get; a task
//! whose lease was written but never reached a worker (its poll failed
//! meanwhile) comes back when the lease expires, so the leases are short here.
//! While it is paused, the wait for schema agreement ends within its bound,
//! and a schema being applied when it paused is applied whole once it
//! resumes (its statement in flight timed out and was sent again).
//!
//! It controls the node started by `deploy/cassandra/cassandra.sh`, so it
//! holds every other Cassandra test off while it runs.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairway::config::Config;
use fairway::proto::v1 as pb;
use fairway::store::cassandra::{CassandraConfig, SchemaError, apply_schema, await_schema_agreement, connect_session};
use tokio::sync::watch;
use tonic::Code;

use super::exclusive;
use crate::support::{Backend, TestServer, add, create, poll, spec};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/cassandra/cassandra.sh")
}

fn node_pid() -> i32 {
    let output = Command::new("bash").arg(script()).args(["pid", "1"]).output().expect("run cassandra.sh pid");
    let pid = String::from_utf8_lossy(&output.stdout).trim().parse().ok();
    pid.filter(|_| output.status.success()).unwrap_or_else(|| {
        panic!(
            "the outage test pauses and kills the Cassandra node that deploy/cassandra/cassandra.sh started, \
             and found none (`cassandra.sh pid 1`: {}). Run it through `bash scripts/test.sh`.",
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })
}

fn signal(pid: i32, name: &str) {
    let status = Command::new("kill").args([format!("-{name}"), pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// What the producers and workers saw.
#[derive(Default)]
struct Observed {
    acknowledged: HashSet<i64>,
    errors: HashMap<Code, u64>,
    dispatched: HashMap<i64, u32>,
}

/// Waits until `done` holds for what was observed, re-checking on every change.
async fn until(changes: &mut watch::Receiver<()>, observed: &Mutex<Observed>, done: impl Fn(&Observed) -> bool) {
    loop {
        if done(&observed.lock().unwrap()) {
            return;
        }
        tokio::time::timeout(Duration::from_secs(180), changes.changed())
            .await
            .expect("nothing changed for three minutes")
            .expect("the observers stopped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_tasks_survive_a_paused_and_a_killed_cassandra() {
    let _alone = exclusive().await;
    let pid = node_pid();
    let mut config = Config::default();
    config.cassandra.request_timeout = Duration::from_secs(3);
    config.tasks.lease_timeout = Duration::from_secs(3);
    config.tasks.backoff_initial = Duration::from_millis(100);
    let server = TestServer::start_on(Backend::CassandraHeldAlone, config).await;
    let schema_session = super::session().await;
    await_schema_agreement(&schema_session, Duration::from_secs(60)).await.expect("one node agrees with itself");
    // Before the workers poll it.
    create(&mut server.client.clone(), "outage", 1).await;
    let observed = Arc::new(Mutex::new(Observed::default()));
    let (changed, mut changes) = watch::channel(());
    let changed = Arc::new(changed);
    let producing = Arc::new(AtomicBool::new(true));

    let mut producers = Vec::new();
    for p in 0..4 {
        let (mut client, observed, changed, producing) =
            (server.client.clone(), observed.clone(), changed.clone(), producing.clone());
        producers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while producing.load(Ordering::Relaxed) {
                n += 1;
                let outcome =
                    add(&mut client, "outage", spec(&format!("p{p}"), 0.0, 0, format!("{p}/{n}").as_bytes())).await;
                let seen_ok = outcome.is_ok();
                {
                    let mut seen = observed.lock().unwrap();
                    match outcome {
                        Ok(added) => {
                            seen.acknowledged.insert(added.task_id);
                        }
                        Err(status) => *seen.errors.entry(status.code()).or_default() += 1,
                    }
                }
                changed.send_replace(());
                if !seen_ok {
                    // Backoff before retrying, as a real producer would.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (mut client, observed, changed, producing) =
            (server.client.clone(), observed.clone(), changed.clone(), producing.clone());
        workers.push(tokio::spawn(async move {
            // After the producers stop: drain until every acknowledged task
            // was seen, or until nothing came for 30 s (the assertions below
            // then say what is missing).
            let mut idle_since = None;
            loop {
                match poll(&mut client, "outage", Duration::from_secs(1)).await {
                    Some(task) => {
                        *observed.lock().unwrap().dispatched.entry(task.task_id).or_default() += 1;
                        let done = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
                        let _ = client.complete_task(done).await;
                        idle_since = None;
                    }
                    None if !producing.load(Ordering::Relaxed) => {
                        let seen = observed.lock().unwrap();
                        if seen.acknowledged.iter().all(|id| seen.dispatched.contains_key(id)) {
                            return;
                        }
                        let idle = idle_since.get_or_insert_with(std::time::Instant::now);
                        if idle.elapsed() > Duration::from_secs(30) {
                            return;
                        }
                    }
                    None => {}
                }
                changed.send_replace(());
            }
        }));
    }
    let acknowledged = |o: &Observed| o.acknowledged.len();
    let failed = |o: &Observed| o.errors.values().sum::<u64>();

    until(&mut changes, &observed, |o| acknowledged(o) >= 300).await;

    // A pause: requests time out, then all is well again.
    let applying = a_schema_being_applied(&schema_session).await;
    let errors_before = failed(&observed.lock().unwrap());
    signal(pid, "STOP");
    let mid_apply = !applying.task.is_finished();
    until(&mut changes, &observed, |o| failed(o) > errors_before).await;
    the_wait_for_schema_agreement_is_bounded(&schema_session).await;
    signal(pid, "CONT");
    applying.ends_whole(&schema_session, mid_apply).await;
    let resumed_at = acknowledged(&observed.lock().unwrap());
    until(&mut changes, &observed, |o| acknowledged(o) >= resumed_at + 300).await;

    // A crash: connections drop; the node comes back on its data.
    let errors_before = failed(&observed.lock().unwrap());
    signal(pid, "KILL");
    until(&mut changes, &observed, |o| failed(o) > errors_before).await;
    let restart = tokio::task::spawn_blocking(|| {
        Command::new("bash").arg(script()).args(["restart-node", "1"]).status().expect("run cassandra.sh")
    });
    assert!(restart.await.unwrap().success(), "the Cassandra node did not restart");
    let restarted_at = acknowledged(&observed.lock().unwrap());
    until(&mut changes, &observed, |o| acknowledged(o) >= restarted_at + 300).await;

    producing.store(false, Ordering::Relaxed);
    for producer in producers {
        producer.await.unwrap();
    }
    for worker in workers {
        worker.await.unwrap();
    }
    server.stop().await;

    let seen = observed.lock().unwrap();
    let lost: Vec<_> = seen.acknowledged.iter().filter(|id| !seen.dispatched.contains_key(id)).collect();
    let duplicates: u32 = seen.dispatched.values().map(|n| n - 1).sum();
    println!(
        "acknowledged {}, dispatched {} distinct ({duplicates} duplicates), errors by code {:?}",
        seen.acknowledged.len(),
        seen.dispatched.len(),
        seen.errors
    );
    assert!(lost.is_empty(), "{} acknowledged tasks were never dispatched: {lost:?}", lost.len());
    for code in seen.errors.keys() {
        assert!(matches!(code, Code::Unavailable | Code::Unknown), "callers saw {code:?}: {:?}", seen.errors);
    }
}

/// While the node is paused, the wait for the nodes to agree on the schema
/// (before every statement of the schema) gives up after its bound, saying
/// that no node told its version, instead of hanging.
async fn the_wait_for_schema_agreement_is_bounded(session: &scylla::client::session::Session) {
    let waited =
        tokio::time::timeout(Duration::from_secs(120), await_schema_agreement(session, Duration::from_secs(1)))
            .await
            .expect("the wait for schema agreement ended, bounded although the node never answers");
    match waited {
        Err(SchemaError::Disagreement { versions, .. }) => {
            assert!(versions.contains("no node told its version"), "{versions}")
        }
        other => panic!("a paused node's schema is not known: {other:?}"),
    }
}

/// A schema applied to a fresh keyspace, through a session whose requests
/// time out after 1 s, seen to have begun (the keyspace exists).
struct Applying {
    keyspace: String,
    task: tokio::task::JoinHandle<Result<(), SchemaError>>,
}

async fn a_schema_being_applied(session: &scylla::client::session::Session) -> Applying {
    let keyspace = format!("fw_outage_{:08x}", rand::random::<u32>());
    let config = CassandraConfig { request_timeout: Duration::from_secs(1), ..CassandraConfig::default() };
    let applier = connect_session(&super::contact_point(), &config).await.expect("a session to apply a schema");
    let name = keyspace.clone();
    let task = tokio::spawn(async move {
        apply_schema(&applier, &name, "{'class': 'SimpleStrategy', 'replication_factor': 1}").await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tables(session, &keyspace).await.is_none() {
        assert!(std::time::Instant::now() < deadline, "the keyspace {keyspace} was not created within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Applying { keyspace, task }
}

impl Applying {
    /// The apply ends without error (at most its bound of 3 min a
    /// statement, plus a margin) and every table of the schema is there.
    async fn ends_whole(self, session: &scylla::client::session::Session, mid_apply: bool) {
        let applied = tokio::time::timeout(Duration::from_secs(240), self.task)
            .await
            .expect("a schema paused mid-apply was never applied")
            .expect("the apply's task");
        applied.unwrap_or_else(|error| panic!("a schema paused mid-apply (paused mid-apply: {mid_apply}): {error}"));
        let tables = tables(session, &self.keyspace).await.unwrap_or_default();
        println!(
            "schema applied to {} across the pause (paused mid-apply: {mid_apply}): {tables} tables",
            self.keyspace
        );
        let schema = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.cql"));
        assert_eq!(tables, schema.matches("CREATE TABLE").count(), "tables of {}", self.keyspace);
        let _ = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", self.keyspace), ()).await;
    }
}

/// How many tables `keyspace` has; `None` while it does not exist.
async fn tables(session: &scylla::client::session::Session, keyspace: &str) -> Option<usize> {
    let exists = session
        .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", (keyspace,))
        .await
        .ok()?
        .into_rows_result()
        .ok()?
        .rows_num();
    if exists == 0 {
        return None;
    }
    let result = session
        .query_unpaged("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", (keyspace,))
        .await
        .ok()?;
    Some(result.into_rows_result().ok()?.rows_num())
}
