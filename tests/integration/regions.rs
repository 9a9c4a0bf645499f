//! Queues homed in one region of a real Cassandra cluster of two
//! datacenters (the test cluster: dc1 = 127.0.0.11 and .12, dc2 =
//! 127.0.0.13), with every node fenced by its own region's Paxos
//! (`LOCAL_SERIAL`, `LOCAL_QUORUM`): only the home region's nodes own the
//! queue's partitions, a node of the other region serves it by forwarding,
//! and a graceful move of the home loses and duplicates nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fairway::model::{PartitionId, validate};
use fairway::proto::v1 as pb;
use fairway::store::cassandra::{CassandraConfig, CassandraStore, apply_schema, connect_session};
use fairway::store::{PartitionStore, SecretStore};

use crate::support::{Client, ServerProcess, spec, wait};

/// The test Cassandra cluster of three nodes (dc1, dc1, dc2).
fn cluster_contact_point() -> String {
    std::env::var("FAIRWAY_TEST_CASSANDRA_CLUSTER").unwrap_or_else(|_| "127.0.0.11:9042".to_owned())
}

/// One region test or chaos run (tools/fairway-lab/tests/chaos.rs, another
/// test binary: they share the cluster) at a time: each starts three nodes
/// and a workload, and two at once on two cores starve both. The same lock
/// file as the chaos runs take, in the workspace's target directory.
fn one_run_at_a_time() -> std::fs::File {
    let lock = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("three-node-runs.lock");
    fairway::test_util::take_turn(&lock).expect("the lock of the three-node runs")
}

const QUEUE: &str = "homed";
const PARTITIONS: u32 = 4;

/// A node of `region` under manual failover: fenced in its region's Paxos.
fn env(region: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("FAIRWAY_CASSANDRA__CONSISTENCY", "LOCAL_QUORUM"),
        ("FAIRWAY_CASSANDRA__SERIAL_CONSISTENCY", "LOCAL_SERIAL"),
    ];
    env.extend(common(region));
    env
}

/// A node of `region` under automatic failover: `QUORUM` and `SERIAL`.
fn automatic(region: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![("FAIRWAY_CLUSTER__FAILOVER", "automatic")];
    env.extend(common(region));
    env
}

fn common(region: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("FAIRWAY_CLUSTER__REGION", region),
        ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
        ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
        ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
        ("FAIRWAY_TASKS__LEASE_TIMEOUT", "5s"),
    ]
}

/// Each partition's owner as `client`'s node reports it ("" while none).
async fn owners(client: &mut Client) -> Vec<String> {
    let request = pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 };
    let Ok(described) = client.describe_queue(request).await else { return Vec::new() };
    described
        .into_inner()
        .partitions
        .into_iter()
        .map(|p| if p.state == "active" || p.state == "remote" { p.owner } else { String::new() })
        .collect()
}

/// Waits (every 100 ms, at most two minutes) until every partition is owned
/// by one of `nodes`, as `client`'s node reports it.
async fn until_owned_by(client: &mut Client, nodes: &[&ServerProcess], what: &str) {
    let names: BTreeSet<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let owners = owners(client).await;
        if owners.len() == PARTITIONS as usize && owners.iter().all(|o| names.contains(o)) {
            return;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = nodes.iter().map(|n| format!("--- {}\n{}", n.addr, n.log())).collect();
            panic!("{what}: owners still {owners:?}, expected among {names:?}\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the queue homed in `home`, once the node `client` calls has seen
/// a node of `home` live (FAILED_PRECONDITION until then, at most 30 s).
async fn create_homed(client: &mut Client, home: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: PARTITIONS, home: home.into() };
        match client.create_queue(create).await {
            Ok(created) => return assert_eq!(created.into_inner().home, home),
            Err(status) if status.code() == tonic::Code::FailedPrecondition && Instant::now() < deadline => {
                assert!(status.message().contains("no live node runs in region"), "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("CreateQueue: {status:?}"),
        }
    }
}

/// Adds `count` tasks through `client`; their ids, by payload. An add
/// refused with UNAVAILABLE (nothing written: a partition changing owner)
/// is sent again, as clients do, at most 50 times.
async fn add(client: &mut Client, from: usize, count: usize) -> BTreeMap<String, i64> {
    let mut added = BTreeMap::new();
    for n in from..from + count {
        let payload = format!("task-{n}");
        let request = || pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec("k", 1.0, 0, payload.as_bytes())) };
        let mut refusals = 0;
        let response = loop {
            match client.add_task(request()).await {
                Ok(response) => break response.into_inner(),
                Err(status) if status.code() == tonic::Code::Unavailable && refusals < 50 => {
                    refusals += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(status) => panic!("AddTask: {status:?}"),
            }
        };
        added.insert(payload, response.task_id);
    }
    added
}

/// Polls through `client` until `expected` tasks came, completing each;
/// how many times each payload came.
async fn drain(client: &mut Client, expected: usize) -> BTreeMap<String, u32> {
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.values().sum::<u32>() < expected as u32 {
        assert!(Instant::now() < deadline, "only {} of {expected} tasks came: {seen:?}", seen.len());
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "regions".into(),
            max_wait: wait(Duration::from_secs(1)),
            max_tasks: 50,
            completions: Vec::new(),
        };
        for task in client.poll_tasks(request).await.expect("PollTasks").into_inner().tasks {
            *seen.entry(String::from_utf8_lossy(&task.payload).into_owned()).or_default() += 1;
            let done = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
            client.complete_task(done).await.expect("CompleteTask");
        }
    }
    seen
}

fn each_once(added: &BTreeMap<String, i64>, seen: &BTreeMap<String, u32>) {
    let missing: Vec<&String> = added.keys().filter(|k| !seen.contains_key(*k)).collect();
    assert!(missing.is_empty(), "acknowledged but never delivered: {missing:?}");
    let twice: Vec<(&String, &u32)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

/// A keyspace replicated twice in dc1 and once in dc2, on the test cluster:
/// its session, name and store URL.
async fn two_region_keyspace() -> (scylla::client::session::Session, String, String) {
    let contact = cluster_contact_point();
    let session = connect_session(&contact, &CassandraConfig::default()).await.unwrap_or_else(|error| {
        panic!(
            "{error}\nThis test needs the Cassandra cluster of two datacenters at {contact}: `bash scripts/test.sh` \
             starts it, or `CASSANDRA_DEV_HOME=.deploy/cassandra-cluster CASSANDRA_DEV_FIRST=11 \
             CASSANDRA_DEV_DCS='dc1 dc1 dc2' deploy/cassandra/cassandra.sh start 3`."
        )
    });
    let keyspace = format!("fw_regions_{:012x}", rand::random::<u64>() >> 16);
    apply_schema(&session, &keyspace, "{'class': 'NetworkTopologyStrategy', 'dc1': 2, 'dc2': 1}")
        .await
        .unwrap_or_else(|error| panic!("{error}\nthe test cluster must have datacenters dc1 and dc2 (see above), its nodes agreeing on one schema"));
    let store = format!("cassandra://{contact}/{keyspace}");
    (session, keyspace, store)
}

/// Nodes of two regions fencing at `LOCAL_SERIAL` that start at once still
/// agree on one cluster secret (at `LOCAL_SERIAL`, each region's Paxos could
/// store its own, and the nodes would refuse each other's forwarded calls).
#[test]
fn regions_starting_at_once_store_one_cluster_secret() {
    let _one = one_run_at_a_time();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let (session, keyspace, _) = two_region_keyspace().await;
        let contact = cluster_contact_point();
        let in_region = |dc: &str| CassandraConfig {
            local_datacenter: dc.into(),
            consistency: "LOCAL_QUORUM".into(),
            serial_consistency: "LOCAL_SERIAL".into(),
            ..CassandraConfig::default()
        };
        let dc1 = CassandraStore::connect(&contact, &keyspace, &in_region("dc1")).await.expect("connect in dc1");
        let dc2 = CassandraStore::connect(&contact, &keyspace, &in_region("dc2")).await.expect("connect in dc2");
        let racers = (1..=8u8).map(|n| {
            let store = if n % 2 == 0 { &dc1 } else { &dc2 };
            // As the contract says (and as a starting node does): after an
            // error (here, Paxos contention between eight racers, or a node
            // of the cluster not seen up yet), call again, a little later
            // each time (22 s in all).
            async move {
                let mut attempts = 0;
                loop {
                    match store.cluster_secrets(&[n; 32]).await {
                        Ok(secrets) => break secrets.current,
                        Err(error) if attempts < 10 => {
                            attempts += 1;
                            eprintln!("racer {n}: {error}; calling again");
                            tokio::time::sleep(Duration::from_millis(400 * attempts)).await;
                        }
                        Err(error) => panic!("the cluster secret, after {attempts} attempts: {error}"),
                    }
                }
            }
        });
        let secrets = futures::future::join_all(racers).await;
        assert!(secrets.iter().all(|s| *s == secrets[0]), "two regions stored two secrets: {secrets:?}");
        session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await.ok();
    });
}

#[test]
fn a_queue_is_owned_in_its_home_region_served_from_the_other_and_moved_without_loss() {
    let _one = one_run_at_a_time();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(homed_queue_scenario());
}

/// Automatic failover: the home's last node dies and the other region's
/// nodes take the queue with everything acknowledged; a node of the home
/// that comes back takes it back.
#[test]
fn under_automatic_failover_another_region_takes_a_queue_whose_home_died() {
    let _one = one_run_at_a_time();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(automatic_failover_scenario());
}

async fn automatic_failover_scenario() {
    let (session, keyspace, store) = two_region_keyspace().await;
    let a1 = ServerProcess::start_on(&store, &automatic("dc1"));
    let b1 = ServerProcess::start_on(&store, &automatic("dc2"));
    let mut to_a1 = a1.client().await;
    create_homed(&mut to_a1, "dc2").await;
    until_owned_by(&mut to_a1, &[&b1], "homed in dc2").await;
    let backlog = add(&mut to_a1, 0, 60).await;

    // The home's only node dies: dc1 takes every partition, and every task.
    b1.kill();
    until_owned_by(&mut to_a1, &[&a1], "failed over to dc1").await;
    let more = add(&mut to_a1, 100, 20).await;
    let mut all = backlog.clone();
    all.extend(more);
    let seen = drain(&mut to_a1, all.len()).await;
    each_once(&all, &seen);

    // The home comes back: it takes its queue back.
    let b2 = ServerProcess::start_on(&store, &automatic("dc2"));
    until_owned_by(&mut to_a1, &[&b2], "back home in dc2").await;
    let after = add(&mut to_a1, 200, 20).await;
    let seen = drain(&mut to_a1, after.len()).await;
    each_once(&after, &seen);

    for node in [a1, b2] {
        node.terminate();
    }
    session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await.ok();
}

async fn homed_queue_scenario() {
    let contact = cluster_contact_point();
    let (session, keyspace, store) = two_region_keyspace().await;
    let a1 = ServerProcess::start_on(&store, &env("dc1"));
    let a2 = ServerProcess::start_on(&store, &env("dc1"));
    let b1 = ServerProcess::start_on(&store, &env("dc2"));
    let (mut to_a1, mut to_b1) = (a1.client().await, b1.client().await);

    // Created from region dc2, homed in dc1: owned there only.
    create_homed(&mut to_b1, "dc1").await;
    until_owned_by(&mut to_b1, &[&a1, &a2], "homed in dc1").await;

    // A client of dc2 adds and polls through its own node.
    let added = add(&mut to_b1, 0, 40).await;
    let seen = drain(&mut to_b1, added.len()).await;
    each_once(&added, &seen);
    assert!(owners(&mut to_b1).await.iter().all(|o| *o != b1.addr.to_string()), "dc2 took a partition");

    // A backlog in dc1, then a graceful move to dc2: every task is there.
    let backlog = add(&mut to_a1, 1000, 60).await;
    let moved = to_a1
        .move_queue(pb::MoveQueueRequest {
            queue: QUEUE.into(),
            home: "dc2".into(),
            force: false,
            abandon_previous: false,
        })
        .await
        .expect("MoveQueue")
        .into_inner();
    assert_eq!((moved.home.as_str(), moved.partitions), ("dc2", PARTITIONS));
    until_owned_by(&mut to_a1, &[&b1], "moved to dc2").await;
    let seen = drain(&mut to_a1, backlog.len()).await;
    each_once(&backlog, &seen);

    // A region the cluster does not have is a configuration error, naming the datacenters.
    let nowhere = CassandraConfig { local_datacenter: "dc9".into(), ..CassandraConfig::default() };
    let refused = CassandraStore::connect(&contact, &keyspace, &nowhere).await.expect_err("no datacenter dc9");
    assert!(refused.to_string().contains("no such datacenter (it has dc1, dc2)"), "{refused}");

    // The store says so: every partition is dc2's, caught up.
    let config = CassandraConfig { local_datacenter: "dc2".into(), ..CassandraConfig::default() };
    let cassandra = CassandraStore::connect(&contact, &keyspace, &config).await.expect("connect in dc2");
    for partition in 0..PARTITIONS {
        let id = PartitionId { queue: validate::queue_name("queue", QUEUE).unwrap(), partition };
        let meta = cassandra.load_partition(&id).await.unwrap().expect("the partition exists");
        assert_eq!((meta.region.as_str(), meta.moved_from.as_str()), ("dc2", ""), "partition {partition}");
        assert_eq!(meta.owner, b1.addr.to_string(), "partition {partition}");
    }

    // A home where no node runs is refused, naming the live regions.
    let refused = to_a1
        .move_queue(pb::MoveQueueRequest {
            queue: QUEUE.into(),
            home: "dc3".into(),
            force: false,
            abandon_previous: false,
        })
        .await
        .expect_err("no node in dc3");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("dc1, dc2"), "{refused:?}");

    let b1_log = b1.terminate();
    assert!(b1_log.contains("caught up with the region it was handed over from"), "{b1_log}");
    for node in [a1, a2] {
        node.terminate();
    }
    session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await.ok();
}

/// Forced failover under manual failover: the home's only node dies, its
/// queue is forced to the other region, which serves a new generation at
/// once with every task it had replicated (leased ones delivered again);
/// when the old home's node returns it hands the old generation over, the
/// last pass finds nothing more, and the old partitions are closed.
#[test]
fn a_forced_failover_serves_at_once_and_closes_the_old_generation_when_its_region_returns() {
    let _one = one_run_at_a_time();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(forced_failover_scenario());
}

/// MoveQueue with force through `client` until the node sees no live node
/// in the old home (FAILED_PRECONDITION until then, at most 30 s).
async fn force_to(client: &mut Client, home: &str) -> pb::MoveQueueResponse {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request =
            pb::MoveQueueRequest { queue: QUEUE.into(), home: home.into(), force: true, abandon_previous: false };
        match client.move_queue(request).await {
            Ok(moved) => return moved.into_inner(),
            Err(status) if status.code() == tonic::Code::FailedPrecondition && Instant::now() < deadline => {
                assert!(status.message().contains("has a live node"), "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("MoveQueue --force: {status:?}"),
        }
    }
}

async fn forced_failover_scenario() {
    let contact = cluster_contact_point();
    let (session, keyspace, store) = two_region_keyspace().await;
    // Two nodes in dc1: tasks and completions of the new generation are
    // forwarded between them (their lease tokens name its partitions).
    let a1 = ServerProcess::start_on(&store, &env("dc1"));
    let a2 = ServerProcess::start_on(&store, &env("dc1"));
    let b1 = ServerProcess::start_on(&store, &env("dc2"));
    let mut to_a1 = a1.client().await;
    create_homed(&mut to_a1, "dc2").await;
    until_owned_by(&mut to_a1, &[&b1], "homed in dc2").await;
    let backlog = add(&mut to_a1, 0, 60).await;
    // Ten of them leased in dc2 and never completed.
    let lease = pb::PollTasksRequest {
        queue: QUEUE.into(),
        worker_id: "dies-with-dc2".into(),
        max_wait: wait(Duration::from_secs(1)),
        max_tasks: 10,
        completions: Vec::new(),
    };
    let leased = to_a1.poll_tasks(lease).await.expect("PollTasks").into_inner().tasks.len();
    assert!(leased > 0, "nothing was leased");

    // While the home lives, force is refused: a graceful move loses nothing.
    let refused = to_a1
        .move_queue(pb::MoveQueueRequest {
            queue: QUEUE.into(),
            home: "dc1".into(),
            force: true,
            abandon_previous: false,
        })
        .await
        .expect_err("force while dc2 is live");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");

    // dc2's only node dies: once dc1 counts it dead, a poll there says the
    // queue's home has no live node (rather than wait for nothing).
    b1.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "regions".into(),
            max_wait: wait(Duration::from_millis(200)),
        };
        // Until dc1 counts b1 dead, polls are forwarded to it and fail otherwise.
        match to_a1.poll_task(request).await {
            Err(status) if status.message().contains("where no node is live") => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                break;
            }
            other => assert!(Instant::now() < deadline, "a poll with the home dead: {other:?}"),
        }
    }
    // The queue is forced to dc1 and served at once.
    let moved = force_to(&mut to_a1, "dc1").await;
    assert_eq!((moved.home.as_str(), moved.generation), ("dc1", 1));
    until_owned_by(&mut to_a1, &[&a1, &a2], "forced to dc1").await;
    let owners = owners(&mut to_a1).await;
    assert!(owners.contains(&a2.addr.to_string()), "a2 owns no partition: {owners:?}");
    let more = add(&mut to_a1, 100, 20).await;
    let mut all = backlog.clone();
    all.extend(more);
    let seen = drain(&mut to_a1, all.len()).await;
    each_once(&all, &seen);

    // The old generation is not closed while its region is gone.
    let dc1 = CassandraConfig { local_datacenter: "dc1".into(), ..CassandraConfig::default() };
    let cassandra = CassandraStore::connect(&contact, &keyspace, &dc1).await.expect("connect in dc1");
    let queue = validate::queue_name("queue", QUEUE).unwrap();
    let old = |partition| PartitionId { queue: queue.clone(), partition };
    for partition in 0..PARTITIONS {
        let meta = cassandra.load_partition(&old(partition)).await.unwrap().expect("the old partition");
        assert_eq!((meta.region.as_str(), meta.drained), ("dc2", false), "old partition {partition}");
    }

    // dc2 returns: it hands the old generation over, dc1 closes it.
    let b2 = ServerProcess::start_on(&store, &env("dc2"));
    let deadline = Instant::now() + Duration::from_secs(120);
    for partition in 0..PARTITIONS {
        loop {
            let meta = cassandra.load_partition(&old(partition)).await.unwrap().expect("the old partition");
            if meta.drained {
                assert_eq!(meta.region, "dc1", "old partition {partition} was closed in dc1");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "old partition {partition} not drained: {meta:?}\n{}\n{}",
                a1.log(),
                a2.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Nothing of the old generation comes a second time.
    let late = pb::PollTasksRequest {
        queue: QUEUE.into(),
        worker_id: "late".into(),
        max_wait: wait(Duration::from_secs(3)),
        max_tasks: 50,
        completions: Vec::new(),
    };
    let late = to_a1.poll_tasks(late).await.expect("PollTasks").into_inner().tasks;
    assert!(late.is_empty(), "delivered again after the last pass: {late:?}");
    let drained_logs = format!("{}{}", a1.terminate(), a2.terminate());
    assert!(drained_logs.contains("last pass over the previous generation"), "{drained_logs}");
    let b2_log = b2.terminate();
    assert!(b2_log.contains("handed a partition of the previous generation over"), "{b2_log}");
    session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await.ok();
}
