//! Fairness across nodes: two nodes on one Cassandra keyspace own two
//! partitions each of one queue, every partition has a backlog, and every
//! worker polls the first node. What is measured is whether a partition
//! owned by the node nobody polls is served in its turn: the longest time
//! any partition went without a dispatch, and the second node's share of
//! the dispatches (half, by the partitions it owns).
//!
//! With `--nodes-beside BINARY` each run measures that build too, on the
//! same keyspace right after (the order alternating run by run), so that
//! the two are compared in the same session.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::Mutex;

use fairway::proto::v1 as pb;

use super::report::{Bound, Measure};
use super::server::{BenchServer, Client, add_batch, complete_all, create_queue, poll_batch};
use super::{BenchStore, RunOutput, run_id, server_config};
use crate::figures::plot::{Chart, Series};

/// The queue's partitions: two a node.
const PARTITIONS: u32 = 4;
/// Workers, all polling the first node, and the tasks each takes a poll.
const WORKERS: usize = 4;
const POLL_BATCH: u32 = 16;
/// Tasks added at each node before the workers start (each node's adds go
/// to its own partitions): more than the workers take in a run.
const BACKLOG_PER_NODE: u64 = 60_000;
const ADD_BATCH: u64 = 500;

/// What one build did in one run.
struct Outcome {
    /// The longest time a partition went without a dispatch (seconds).
    longest_gap: f64,
    /// The share of dispatches from the partitions of the node not polled.
    other_share: f64,
    rate: f64,
    /// Dispatches per partition per second, for the chart.
    per_second: BTreeMap<u32, Vec<(f64, f64)>>,
}

/// One run: the bench's build, and the one beside it if given.
pub(super) async fn run(
    store: &BenchStore,
    seconds: u64,
    beside: Option<&PathBuf>,
    run: u32,
) -> anyhow::Result<RunOutput> {
    anyhow::ensure!(
        store.cassandra.is_some(),
        "the nodes scenario needs two nodes on one keyspace: give --store cassandra://HOST:PORT/KEYSPACE"
    );
    let duration = Duration::from_secs(seconds);
    let (this, other) = match beside {
        None => (once(store, duration).await?, None),
        Some(binary) => {
            let other_store = store.with_binary(binary.clone());
            // Alternated, so that neither build always runs on a keyspace the other just loaded.
            if run.is_multiple_of(2) {
                let this = once(store, duration).await?;
                (this, Some(once(&other_store, duration).await?))
            } else {
                let other = once(&other_store, duration).await?;
                (once(store, duration).await?, Some(other))
            }
        }
    };
    let measure = |name: &str, unit: &'static str, pick: fn(&Outcome) -> f64| match &other {
        Some(other) => Measure::beside_fifo(name, unit, pick(&this), pick(other)),
        None => Measure::new(name, unit, pick(&this)),
    };
    let measures = vec![
        measure("longest time a partition went without a dispatch", "s", |o| o.longest_gap).target(Bound::AtMost(1.0)),
        measure("share of dispatches from the node not polled (it owns half the partitions)", "fraction", |o| {
            o.other_share
        }),
        measure("dispatch rate", "tasks/s", |o| o.rate),
    ];
    let panel = |outcome: &Outcome| -> Vec<Series> {
        outcome.per_second.iter().map(|(p, points)| Series::new(format!("partition {p}"), points.clone())).collect()
    };
    let mut panels = vec![("this build".to_owned(), panel(&this))];
    if let Some(other) = &other {
        panels.push(("the build beside (--nodes-beside)".to_owned(), panel(other)));
    }
    let chart = Chart {
        file: "fairness-nodes.png".into(),
        title: "Dispatches per second of each partition, every worker polling the first node".into(),
        x_label: "seconds".into(),
        y_label: "tasks/s".into(),
        panels,
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

async fn once(store: &BenchStore, duration: Duration) -> anyhow::Result<Outcome> {
    let queue = format!("nodes-{}", run_id());
    let first = BenchServer::start(store, &server_config(true, &[]))?;
    let mut polled = first.client().await?;
    create_queue(&mut polled, &queue, PARTITIONS).await?;
    let second = BenchServer::start(store, &server_config(true, &[]))?;
    let mut unpolled = second.client().await?;
    let owners = two_a_node(&mut polled, &mut unpolled, &queue, [&first.addr, &second.addr]).await?;
    for client in [&mut polled, &mut unpolled] {
        for batch in 0..BACKLOG_PER_NODE / ADD_BATCH {
            let specs = (0..ADD_BATCH)
                .map(|i| pb::TaskSpec {
                    fairness_key: format!("k{}", (batch * ADD_BATCH + i) % 100),
                    payload: b"nodes".to_vec(),
                    ..Default::default()
                })
                .collect();
            add_batch(client, &queue, specs).await?;
        }
    }
    let dispatched = Arc::new(Mutex::new(Vec::<(f64, u32)>::new()));
    let epoch = Instant::now();
    let workers = (0..WORKERS).map(|_| {
        let (mut client, queue, dispatched) = (polled.clone(), queue.clone(), dispatched.clone());
        async move {
            while epoch.elapsed() < duration {
                let tasks = poll_batch(&mut client, &queue, POLL_BATCH, Duration::from_secs(1)).await?;
                let at = epoch.elapsed().as_secs_f64();
                dispatched.lock().await.extend(tasks.iter().map(|t| (at, t.partition)));
                complete_all(&client, &tasks).await?;
            }
            anyhow::Ok(())
        }
    });
    for worker in futures::future::join_all(workers).await {
        worker?;
    }
    let seconds = epoch.elapsed().as_secs_f64();
    let left = backlogs([&mut polled, &mut unpolled], &queue).await?;
    let second_addr = second.addr.clone();
    first.stop().await?;
    second.stop().await?;
    if let Some(partition) = (0..PARTITIONS).find(|p| left.get(p).is_none_or(|backlog| *backlog == 0)) {
        bail!(
            "partition {partition} ran out of tasks (or lost its owner) before the end: its gaps would not be those of a backlog"
        );
    }
    let dispatched = dispatched.lock().await;
    let mut times: BTreeMap<u32, Vec<f64>> = (0..PARTITIONS).map(|p| (p, Vec::new())).collect();
    for &(at, partition) in dispatched.iter() {
        times.entry(partition).or_default().push(at);
    }
    let longest_gap = times
        .values_mut()
        .map(|at| {
            at.sort_by(f64::total_cmp);
            let edges = std::iter::once(0.0).chain(at.iter().copied()).chain(std::iter::once(seconds));
            edges.clone().zip(edges.skip(1)).map(|(a, b)| b - a).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max);
    let other: BTreeSet<u32> = (0..PARTITIONS).filter(|p| owners[*p as usize] == second_addr).collect();
    let from_other = dispatched.iter().filter(|(_, p)| other.contains(p)).count();
    let per_second = times
        .iter()
        .map(|(p, at)| {
            let last = (seconds.ceil() as usize).max(1) - 1;
            let mut buckets = vec![0.0; last + 1];
            for t in at {
                buckets[(*t as usize).min(last)] += 1.0;
            }
            (*p, buckets.into_iter().enumerate().map(|(s, n)| (s as f64 + 1.0, n)).collect())
        })
        .collect();
    Ok(Outcome {
        longest_gap,
        other_share: from_other as f64 / dispatched.len().max(1) as f64,
        rate: dispatched.len() as f64 / seconds,
        per_second,
    })
}

/// Waits (at most a minute) until both nodes see two partitions active at
/// each of them; the owner of each partition.
async fn two_a_node(
    polled: &mut Client,
    unpolled: &mut Client,
    queue: &str,
    nodes: [&String; 2],
) -> anyhow::Result<Vec<String>> {
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..600 {
        ticks.tick().await;
        let mut seen = Vec::new();
        for client in [&mut *polled, &mut *unpolled] {
            let request = pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 };
            let state = client.describe_queue(request).await?.into_inner();
            let ready = state.partitions.iter().all(|p| p.state == "active" || p.state == "remote");
            seen.push(ready.then(|| state.partitions.iter().map(|p| p.owner.clone()).collect::<Vec<_>>()));
        }
        if let [Some(a), Some(b)] = &seen[..]
            && a == b
            && nodes.iter().all(|node| a.iter().filter(|owner| owner == node).count() == 2)
        {
            return Ok(a.clone());
        }
    }
    bail!("the partitions of {queue} were not spread two a node over {nodes:?} within a minute")
}

/// Each partition's backlog, as its owner reports it.
async fn backlogs(clients: [&mut Client; 2], queue: &str) -> anyhow::Result<BTreeMap<u32, u64>> {
    let mut backlogs = BTreeMap::new();
    for client in clients {
        let request = pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 };
        let state = client.describe_queue(request).await.context("describe the queue at the end")?.into_inner();
        let held = state.partitions.iter().filter(|p| p.state == "active");
        backlogs.extend(held.map(|p| (p.partition, p.subqueues.iter().map(|s| s.backlog).sum::<u64>())));
    }
    Ok(backlogs)
}
