//! Schedules on three `fairway serve` processes sharing one keyspace of a
//! real Cassandra: 200 periodic schedules of mixed periods fire their runs
//! into one deadline-ordered queue while workers take them; one schedule is
//! paused and a node is killed with runs in flight. Checked: no schedule
//! ever had two runs at once (every tick was added once, whatever node
//! fired it), the paused one fired nothing after its pause, no schedule
//! broke its constraint (the workers had room for all), and once the
//! workers came back after a stop, the waiting runs came out earliest
//! `should_start_by` first (a late one ranked as due 15 minutes from now).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::proto::v1::schedules_client::SchedulesClient;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use super::Keyspace;
use crate::support::{ServerProcess, wait};

const QUEUE: &str = "runs";
const SCHEDULES: usize = 200;
const PAUSED: &str = "s007";
const WORKERS: usize = 8;

/// Fast membership and short leases, as the cluster tests use; looks at the
/// schedules every 200 ms.
const ENV: &[(&str, &str)] = &[
    ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
    ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__FORWARD_TIMEOUT", "2s"),
    ("FAIRWAY_SCHEDULES__SCAN_INTERVAL", "200ms"),
];

/// The run queue's section: deadline order, short leases.
const QUEUE_CONFIG: &str =
    "[queues.runs]\nordering = \"deadline\"\nlease_timeout = \"3s\"\nbackoff_initial = \"100ms\"\n";

/// A run as a worker saw it.
#[derive(Clone, Debug)]
struct Taken {
    schedule: String,
    task_id: i64,
    taken: Instant,
    done: Option<Instant>,
}

fn ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1000 + i64::from(t.nanos / 1_000_000)
}

fn now_ms() -> i64 {
    use fairway::clock::Clock;
    fairway::clock::SystemClock.now_ms()
}

/// A run's place in a deadline-ordered queue at `now`: by deadline while it
/// has not passed; once it has, as if due `tasks.late_slack` (15 min) from now.
fn rank(deadline: i64, now: i64) -> (i64, i64) {
    const LATE_SLACK_MS: i64 = 15 * 60 * 1000;
    (if deadline < now { now + LATE_SLACK_MS } else { deadline }, deadline)
}

/// Periods of 30, 40, 50 and 60 s, a 20 s cooldown: every schedule runs
/// once at the start, and again within a minute.
fn schedule(i: usize) -> pb::CreateScheduleRequest {
    let period = 30 + 10 * (i % 4) as i64;
    pb::CreateScheduleRequest {
        id: format!("s{i:03}"),
        spec: Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: Some(prost_types::Duration { seconds: period, nanos: 0 }),
                cooldown: Some(prost_types::Duration { seconds: 20, nanos: 0 }),
            })),
            ..Default::default()
        }),
        template: Some(pb::RunTemplate {
            queue: QUEUE.into(),
            payload: format!("s{i:03}").into_bytes(),
            ..Default::default()
        }),
        paused_note: String::new(),
    }
}

async fn channel(addr: SocketAddr) -> Option<Channel> {
    Channel::from_shared(format!("http://{addr}")).ok()?.connect().await.ok()
}

/// Workers spread over `nodes`: each takes a run, works 20 to 80 ms, and
/// completes it, while `working` is set; a node that fails a call is left
/// for the next one.
fn workers(
    nodes: Vec<SocketAddr>,
    working: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Taken>>>,
) -> Vec<JoinHandle<()>> {
    (0..WORKERS)
        .map(|w| {
            let (nodes, working, stop, seen) = (nodes.clone(), working.clone(), stop.clone(), seen.clone());
            tokio::spawn(async move {
                let mut turn = w;
                while !stop.load(Ordering::SeqCst) {
                    if !working.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    let addr = nodes[turn % nodes.len()];
                    let Some(channel) = channel(addr).await else {
                        turn += 1;
                        continue;
                    };
                    let mut client = MatchingClient::new(channel);
                    let request = pb::PollTaskRequest {
                        queue: QUEUE.into(),
                        worker_id: format!("w{w}"),
                        max_wait: wait(Duration::from_millis(500)),
                    };
                    let polled = tokio::time::timeout(Duration::from_secs(5), client.poll_task(request)).await;
                    let Ok(Ok(response)) = polled else {
                        turn += 1;
                        continue;
                    };
                    let Some(task) = response.into_inner().task else { continue };
                    let index = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(Taken {
                            schedule: String::from_utf8_lossy(&task.payload).into_owned(),
                            task_id: task.task_id,
                            taken: Instant::now(),
                            done: None,
                        });
                        seen.len() - 1
                    };
                    tokio::time::sleep(Duration::from_millis(20 + (task.task_id % 60) as u64)).await;
                    let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
                    if tokio::time::timeout(Duration::from_secs(5), client.complete_task(complete))
                        .await
                        .is_ok_and(|r| r.is_ok())
                    {
                        seen.lock().unwrap()[index].done = Some(Instant::now());
                    } else {
                        turn += 1;
                    }
                }
            })
        })
        .collect()
}

/// Lists every schedule through `addr`.
async fn list(addr: SocketAddr) -> Vec<pb::ScheduleInfo> {
    let mut client = SchedulesClient::new(channel(addr).await.expect("a live node"));
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let request = pb::ListSchedulesRequest { page_size: 1000, page_token: token, ..Default::default() };
        let page = client.list_schedules(request).await.expect("list").into_inner();
        all.extend(page.schedules);
        token = page.next_page_token;
        if token.is_empty() {
            return all;
        }
    }
}

/// Waits (every 200 ms, at most `limit`) until `done` holds of the schedules.
async fn until(addr: SocketAddr, what: &str, limit: Duration, done: impl Fn(&[pb::ScheduleInfo]) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        let schedules = list(addr).await;
        if done(&schedules) {
            return;
        }
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedules_fire_once_per_tick_across_three_nodes_and_catch_up_in_deadline_order() {
    let keyspace = Keyspace::create().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fairway.toml");
    std::fs::write(&config, QUEUE_CONFIG).unwrap();
    let config = config.display().to_string();
    let env: Vec<(&str, &str)> = ENV.iter().copied().chain([("FAIRWAY_CONFIG", config.as_str())]).collect();
    let mut nodes: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::start_on(&keyspace.store_url(), &env)).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let mut first = MatchingClient::new(channel(addrs[0]).await.expect("node 0"));
    let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() };
    first.create_queue(create).await.expect("create the run queue");
    for i in 0..SCHEDULES {
        let mut client = SchedulesClient::new(channel(addrs[i % 3]).await.expect("a node"));
        client.create_schedule(schedule(i)).await.unwrap_or_else(|e| panic!("create s{i:03}: {e:?}"));
    }
    let (working, stop) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let crew = workers(addrs.clone(), working.clone(), stop.clone(), seen.clone());

    // Half the first round done: pause one schedule, kill a node with runs in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().iter().filter(|t| t.done.is_some()).count() < SCHEDULES / 2 {
        assert!(Instant::now() < deadline, "the first runs did not come");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = SchedulesClient::new(channel(addrs[0]).await.unwrap());
    let pause = pb::PauseScheduleRequest { id: PAUSED.into(), paused: true, note: "held by the test".into() };
    client.pause_schedule(pause).await.expect("pause");
    let paused_at = Instant::now();
    nodes.remove(1).kill();
    let live = [addrs[0], addrs[2]];

    // Every schedule but the paused one runs once more, after its cooldown,
    // fired by whichever node holds its shard now.
    until(live[0], "a second good run of every schedule", Duration::from_secs(120), |all| {
        all.iter().filter(|s| s.id != PAUSED).all(|s| s.counts.as_ref().is_some_and(|c| c.succeeded >= 2))
    })
    .await;

    // While the workers had room (before they stop on purpose below), no
    // schedule broke its constraint, the killed node's included.
    let all = list(live[0]).await;
    let broken: Vec<String> = all
        .iter()
        .filter(|s| s.id != PAUSED && s.health == pb::Health::Error as i32)
        .map(|s| format!("{}: {}", s.id, s.health_reason))
        .collect();
    assert!(broken.is_empty(), "schedules broke their constraint though the workers had room: {broken:?}");

    // The workers stop until every schedule has a run waiting again; then
    // one worker takes them all, and they come earliest deadline first.
    working.store(false, Ordering::SeqCst);
    until(live[0], "a waiting run of every schedule", Duration::from_secs(120), |all| {
        all.iter()
            .filter(|s| s.id != PAUSED)
            .all(|s| !s.runs.is_empty() && s.runs.iter().all(|r| r.started_at.is_none()))
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for worker in crew {
        worker.await.unwrap();
    }
    // Paused, the schedules fire nothing new during the drain: the runs
    // taken are those that waited, whatever the drain's pace.
    let mut client = SchedulesClient::new(channel(live[0]).await.unwrap());
    for i in (0..SCHEDULES).filter(|i| format!("s{i:03}") != PAUSED) {
        let pause = pb::PauseScheduleRequest { id: format!("s{i:03}"), paused: true, note: "the drain".into() };
        client.pause_schedule(pause).await.expect("pause for the drain");
    }
    let mut drained = Vec::new();
    let mut client = MatchingClient::new(channel(live[1]).await.unwrap());
    while drained.len() < SCHEDULES - 1 {
        let request = pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "drain".into(),
            max_wait: wait(Duration::from_secs(5)),
        };
        let before = now_ms();
        let Some(task) = client.poll_task(request).await.expect("poll").into_inner().task else {
            panic!("only {} of {} waiting runs came", drained.len(), SCHEDULES - 1);
        };
        let deadline = task.deadline.as_ref().map_or(i64::MAX, ms);
        let at = (before, now_ms());
        drained.push((String::from_utf8_lossy(&task.payload).into_owned(), deadline, task.task_id, at));
        let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
        client.complete_task(complete).await.expect("complete");
    }

    // Checks.
    let seen = seen.lock().unwrap().clone();
    let mut by_schedule: HashMap<&str, Vec<&Taken>> = HashMap::new();
    for taken in &seen {
        by_schedule.entry(&taken.schedule).or_default().push(taken);
    }
    for (schedule, runs) in &by_schedule {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                if a.task_id == b.task_id {
                    continue; // the same run delivered again after a lost lease
                }
                let a_end = a.done.unwrap_or(b.taken);
                assert!(
                    a_end <= b.taken || b.done.is_some_and(|end| end <= a.taken),
                    "{schedule}: runs {} and {} were in flight at once",
                    a.task_id,
                    b.task_id
                );
            }
        }
    }
    let after_pause = seen.iter().filter(|t| t.schedule == PAUSED && t.taken > paused_at).count();
    assert!(
        after_pause <= 1,
        "the paused schedule fired after its pause ({after_pause} runs; one may have been added before)"
    );
    assert!(drained.iter().all(|(s, ..)| s != PAUSED), "the paused schedule fired while paused");
    // Each run taken went first by deadline among those still waiting, at
    // the time it was taken (a deadline not yet passed before every one
    // passed): at some instant of the poll, between its start and its end.
    // The order of two runs changes only where one of their deadlines
    // passes, so those instants and the poll's ends are the ones to check
    // (a poll that spans a deadline may rightly take the other run first).
    for (i, (schedule, deadline, _, (before, after))) in drained.iter().enumerate() {
        for (other, later, ..) in &drained[i + 1..] {
            let first_at = |t: i64| rank(*deadline, t) <= rank(*later, t);
            let instants = [*before, *after, deadline.saturating_add(1), later.saturating_add(1)];
            assert!(
                instants.into_iter().filter(|t| (*before..=*after).contains(t)).any(first_at),
                "{schedule} (deadline {deadline}) was taken before {other} (deadline {later}) at {before}..{after}"
            );
        }
    }
    let all = list(live[0]).await;
    // Every task a worker saw is a run some schedule fired, and every run
    // fired was seen or is still in flight: a tick added twice would be a
    // task no fire accounts for.
    let fired: u64 = all.iter().filter_map(|s| s.counts.as_ref()).map(|c| c.fired).sum();
    let in_flight: usize = all.iter().map(|s| s.runs.len()).sum();
    let distinct: std::collections::HashSet<i64> =
        seen.iter().map(|t| t.task_id).chain(drained.iter().map(|(_, _, id, _)| *id)).collect();
    assert_eq!(fired as usize, distinct.len() + in_flight, "runs fired against runs seen and in flight");
    drop(keyspace);
}
