//! The visit scheduler's rounds on three `fairway serve` processes sharing
//! one keyspace of a real Cassandra, all three with `scheduler.rounds` on:
//! a lister records origins while pollers take the `visits.git` tasks and
//! report each visit at once. The node holding the lease `rounds/git` is
//! killed (SIGKILL: no release); another node must hold the lease within
//! 10 s, and send visits of origins listed after the kill within 20 s.
//!
//! Checked: until the kill, the holder alone took the lease and ran rounds
//! (each node logs the rounds that sent visits, and its takes of the
//! lease); after it, the new holder alone; the third node never.
//!
//! Checked over the whole run too: no origin was queued twice, as the
//! pollers see it. Every visit is completed as soon as a poller takes it,
//! which frees its dedup id, and an origin scheduled once waits 12 hours
//! before it may be scheduled again; so a second task (another task id)
//! for one URL is a second queueing, which two nodes running rounds at once
//! could make (both read the same index heads; the visit one queued is
//! done before the other queues it). Rarely, though: the dedup id absorbs
//! the second queueing while the first visit is still queued or running,
//! so the logs above are the sharper check (with the lease bypassed, all
//! three nodes ran rounds and no origin was seen queued twice).
//!
//! One exception is allowed, the one a crash makes by design: the killed
//! node's last round may have queued visits and died before it marked the
//! origins scheduled; the new holder queues those again. So an origin
//! listed before the kill, first seen in its last seconds or after it, may
//! have a second task after it, as many as one round sends.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::proto::v1::scheduler_client::SchedulerClient;
use fairway::store::leases::{Lease, LeaseStore};
use prost::Message;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use super::Keyspace;
use crate::support::{ServerProcess, wait};

const LEASE: &str = "rounds/git";
const QUEUE: &str = "visits.git";
/// Visits waiting in the queue: small, so that rounds refill it often.
const QUEUE_LENGTH: usize = 5;
const POLLERS: usize = 6;

/// Fast membership, as the cluster tests use; rounds every 300 ms; the
/// rounds' lease at its default (6 s).
const ENV: &[(&str, &str)] = &[
    ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
    ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__FORWARD_TIMEOUT", "2s"),
    ("FAIRWAY_SCHEDULER__ROUNDS", "true"),
    ("FAIRWAY_SCHEDULER__ROUND_INTERVAL", "300ms"),
    ("FAIRWAY_SCHEDULER__IDLE_INTERVAL", "300ms"),
    ("FAIRWAY_SCHEDULER__QUEUE_LENGTH", "5"),
];

/// What a node logs when it takes the rounds' lease.
const TOOK: &str = "took the rounds' lease";

/// The rounds that sent visits a node's log tells of (`visits::runner`
/// logs each).
fn rounds_in(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("fairway::visits::runner") && l.contains(" sent=") && l.contains(" slots="))
        .count()
}

/// A visit as a poller saw it.
#[derive(Clone, Debug)]
struct Seen {
    url: String,
    task_id: i64,
    at: Instant,
}

async fn channel(addr: SocketAddr) -> Option<Channel> {
    Channel::from_shared(format!("http://{addr}")).ok()?.connect().await.ok()
}

/// An origin updated `days_ago` days before 2026-01-01: never visited, so
/// `never_visited_oldest_update_first` sends the oldest first.
fn listed(url: &str, days_ago: i64) -> pb::ListedOrigin {
    pb::ListedOrigin {
        url: url.into(),
        visit_type: "git".into(),
        last_update: Some(prost_types::Timestamp { seconds: 1_767_225_600 - days_ago * 86_400, nanos: 0 }),
        is_fork: false,
        extra_loader_arguments: String::new(),
    }
}

/// Records a batch of origins through the first live node that takes it:
/// those listed after the kill as updated longer ago, so that they go
/// before any listed earlier and still waiting.
async fn record(live: &Mutex<Vec<SocketAddr>>, phase: &str, batch: usize) {
    let days_ago = if phase == "after" { 1_000 } else { 1 };
    let origins = (0..5).map(|i| listed(&format!("https://forge.example/{phase}/{batch}/{i}"), days_ago)).collect();
    let request = pb::RecordOriginsRequest { lister: "forge/one".into(), origins };
    let nodes = live.lock().unwrap().clone();
    for addr in nodes {
        let Some(channel) = channel(addr).await else { continue };
        let request = request.clone();
        if SchedulerClient::new(channel).record_origins(request).await.is_ok() {
            return;
        }
    }
    panic!("no live node recorded the origins");
}

fn url_of(task: &pb::Task) -> String {
    let payload: serde_json::Value = serde_json::from_slice(&task.payload).expect("a JSON payload");
    payload["url"].as_str().expect("a url").to_owned()
}

/// Pollers over the live nodes: each takes a visit, remembers it, and
/// completes it at once with an eventful outcome.
fn pollers(
    live: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Vec<JoinHandle<()>> {
    (0..POLLERS)
        .map(|p| {
            let (live, stop, seen) = (live.clone(), stop.clone(), seen.clone());
            tokio::spawn(async move {
                let mut turn = p;
                while !stop.load(Ordering::SeqCst) {
                    let addr = {
                        let live = live.lock().unwrap();
                        live[turn % live.len()]
                    };
                    let Some(channel) = channel(addr).await else {
                        turn += 1;
                        continue;
                    };
                    let mut client = MatchingClient::new(channel);
                    let request = pb::PollTaskRequest {
                        queue: QUEUE.into(),
                        worker_id: format!("p{p}"),
                        max_wait: wait(Duration::from_millis(500)),
                    };
                    let polled = tokio::time::timeout(Duration::from_secs(5), client.poll_task(request)).await;
                    let Ok(Ok(response)) = polled else {
                        turn += 1;
                        continue;
                    };
                    let Some(task) = response.into_inner().task else {
                        turn += 1;
                        continue;
                    };
                    let url = url_of(&task);
                    seen.lock().unwrap().push(Seen { url: url.clone(), task_id: task.task_id, at: Instant::now() });
                    let outcome = pb::VisitOutcome {
                        origin_url: url,
                        status: pb::VisitStatus::Eventful.into(),
                        snapshot: vec![1],
                        visit_date: None,
                        newest_change: None,
                    };
                    let complete =
                        pb::CompleteTaskRequest { lease_token: task.lease_token, result: outcome.encode_to_vec() };
                    // A completion that fails (its node died) leaves the
                    // task to come back, under the same task id.
                    let _ = tokio::time::timeout(Duration::from_secs(5), client.complete_task(complete)).await;
                }
            })
        })
        .collect()
}

async fn lease(store: &fairway::store::cassandra::CassandraStore) -> Option<Lease> {
    store.read(LEASE).await.expect("read the rounds' lease")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_node_takes_the_rounds_over_within_ten_seconds_and_no_origin_is_queued_twice() {
    let keyspace = Keyspace::create().await;
    let store = keyspace.store().await;
    let mut nodes: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::start_on(&keyspace.store_url(), ENV)).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let live = Arc::new(Mutex::new(addrs.clone()));
    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::<Seen>::new())));
    let crew = pollers(live.clone(), stop.clone(), seen.clone());

    // Before the kill: origins listed in batches while the rounds send them.
    let started = Instant::now();
    let mut batch = 0;
    while started.elapsed() < Duration::from_secs(12) || seen.lock().unwrap().len() < 40 {
        if started.elapsed() > Duration::from_secs(60) {
            // Say why: who holds the lease, and what each node last logged.
            let tails: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let log = n.log();
                    let lines: Vec<&str> = log.lines().rev().take(15).collect();
                    format!("--- {}\n{}", n.addr, lines.into_iter().rev().collect::<Vec<_>>().join("\n"))
                })
                .collect();
            let visits = seen.lock().unwrap().len();
            let held = lease(&store).await;
            panic!("only {visits} visits in 60 s, {batch} batches listed; the lease: {held:?}\n{}", tails.join("\n"));
        }
        record(&live, "before", batch).await;
        batch += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let held = lease(&store).await.expect("a node holds the rounds' lease");
    let holder = addrs.iter().position(|a| a.to_string() == held.holder).unwrap_or_else(|| {
        panic!("the lease names {}, not one of the nodes {addrs:?}", held.holder);
    });

    // Until now, the holder alone ran rounds: the others never took the
    // lease, and logged no round (a node logs each round that sent visits).
    for node in nodes.iter().filter(|n| n.addr != addrs[holder]) {
        let log = node.log();
        assert!(!log.contains(TOOK), "{} took the lease while {} held it:\n{log}", node.addr, held.holder);
        assert_eq!(rounds_in(&log), 0, "{} ran rounds while {} held the lease:\n{log}", node.addr, held.holder);
    }
    assert!(rounds_in(&nodes[holder].log()) > 0, "the holder logged its rounds");

    // SIGKILL the holder: no release; the lease runs out on its own.
    nodes.remove(holder).kill();
    let killed = Instant::now();
    live.lock().unwrap().retain(|a| *a != addrs[holder]);
    // Another node holds the lease within 10 s of the kill...
    let taken_over = loop {
        let now_held = lease(&store).await;
        if let Some(now_held) = now_held.clone().filter(|l| l.holder != held.holder) {
            assert!(addrs.iter().any(|a| a.to_string() == now_held.holder), "{now_held:?}");
            assert!(now_held.token > held.token, "a new holding, a new token: {now_held:?} after {held:?}");
            break now_held;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "10 s after the kill the lease is still {now_held:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = killed.elapsed();
    // ...and its rounds send visits of origins listed after the kill (the
    // bound is looser: it adds a listing, a round and a poll, on a machine
    // the rest of the test suite loads).
    let mut after = 0;
    let first_new_visit = loop {
        record(&live, "after", after).await;
        after += 1;
        let new_visit = seen.lock().unwrap().iter().find(|s| s.url.contains("/after/") && s.at > killed).map(|s| s.at);
        if let Some(at) = new_visit {
            break at - killed;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "20 s after the kill, no visit of an origin listed after it; lease {:?}",
            lease(&store).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lease(&store).await.map(|l| l.token), Some(taken_over.token), "the new holder sent them");
    eprintln!(
        "taken over by {} (token {}) {took:?} after the kill; first new visit {first_new_visit:?} after it",
        taken_over.holder, taken_over.token
    );

    // A few more seconds under the new holder.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        record(&live, "after", after).await;
        after += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for poller in crew {
        poller.await.unwrap();
    }
    let still = lease(&store).await.expect("the lease");
    assert_eq!(still.token, taken_over.token, "held without a gap since the takeover: {still:?}");
    // The third node never held the lease nor ran a round; the new holder did.
    for node in &nodes {
        let log = node.log();
        if node.addr.to_string() == taken_over.holder {
            assert!(rounds_in(&log) > 0, "the new holder logged its rounds");
        } else {
            assert!(!log.contains(TOOK), "{} took the lease too:\n{log}", node.addr);
            assert_eq!(rounds_in(&log), 0, "{} ran rounds without the lease:\n{log}", node.addr);
        }
    }

    // No origin queued twice, but as a crash of the holder mid-round may.
    let seen = seen.lock().unwrap().clone();
    let mut by_url: BTreeMap<&str, Vec<&Seen>> = BTreeMap::new();
    for s in &seen {
        by_url.entry(&s.url).or_default().push(s);
    }
    let mut crash_requeued = BTreeSet::new();
    for (url, visits) in &by_url {
        let tasks: BTreeSet<i64> = visits.iter().map(|s| s.task_id).collect();
        if tasks.len() == 1 {
            continue;
        }
        // Listed before the kill, first seen in its last seconds or after
        // it (a visit the killed node's last round queued in a partition
        // it owned comes out only once another node took that over), and
        // seen again after the kill.
        let first = visits.iter().map(|s| s.at).min().unwrap();
        let by_crash = url.contains("/before/")
            && tasks.len() == 2
            && (first > killed || killed.duration_since(first) < Duration::from_secs(3))
            && visits.iter().any(|s| s.at > killed);
        assert!(by_crash, "{url} was queued {} times: {visits:?} (killed at {killed:?})", tasks.len());
        crash_requeued.insert(*url);
    }
    assert!(
        crash_requeued.len() <= QUEUE_LENGTH,
        "more origins queued again after the kill than one round sends: {crash_requeued:?}"
    );
    let before = seen.iter().filter(|s| s.url.contains("/before/")).count();
    let after_kill = seen.iter().filter(|s| s.url.contains("/after/")).count();
    eprintln!(
        "{} visits of {} origins ({before} listed before the kill, {after_kill} after); queued again after the crash: {}",
        seen.len(),
        by_url.len(),
        crash_requeued.len()
    );
    assert!(after_kill >= 10, "the new holder kept sending: {after_kill} visits");
    drop(nodes);
    keyspace.drop_keyspace().await;
}
