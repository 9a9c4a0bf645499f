//! Held key: one key held at its concurrency limit (its running task
//! heartbeated, 1,000 more waiting) while workers take and complete
//! `--dispatches` tasks of other keys. Samples the dispatched marks above the
//! ack level, the parked tasks, the metadata's size and the server's memory:
//! with parking they stay flat; with `--max-parked-keys 0` they grow with
//! every dispatch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use futures::future::join_all;

use fairway::proto::v1 as pb;

use super::report::{Measure, ScenarioReport};
use super::server::{BenchServer, Client, add_batch, complete_all, create_queue, poll_batch};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::plot::{Chart, Series};
use crate::figures::progress::Progress;

#[derive(Args, Debug, Clone)]
pub(crate) struct HeldArgs {
    #[command(flatten)]
    pub common: Common,
    /// Tasks of other keys dispatched and completed beside the held key.
    #[arg(long, default_value_t = 100_000)]
    dispatches: u64,
    /// Keys the other tasks spread over.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Concurrent workers, each taking up to 64 tasks per poll.
    #[arg(long, default_value_t = 16)]
    workers: u64,
    /// `engine.max_parked_keys` of the server (0: no key is parked).
    #[arg(long, default_value_t = 1_000)]
    max_parked_keys: usize,
    /// The same dispatches with no key held: the baseline of memory growth
    /// (the store's page cache, the allocator) that the held key adds to.
    #[arg(long)]
    without_held_key: bool,
}

const HELD: &str = "held";
const WAITING: u64 = 999;
const MIB: f64 = 1024.0 * 1024.0;

pub(super) async fn run(args: &HeldArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    anyhow::ensure!(args.dispatches > 0 && args.keys > 0 && args.workers > 0, "counts must be at least 1");
    let held = if args.without_held_key {
        "no key held (baseline)".to_owned()
    } else {
        format!("key \"{HELD}\" at key_concurrency 1 (its running task heartbeated, {WAITING} waiting)")
    };
    let settings = format!(
        "{held} beside {} dispatches of {} other keys by {} workers × PollTasks of up to 64; one partition; \
         engine.max_parked_keys {}",
        args.dispatches, args.keys, args.workers, args.max_parked_keys
    );
    repeat("held-key", settings, &args.common, |_| once(args, store)).await
}

/// One partition's state as DescribeQueue reports it.
struct Sample {
    dispatched: u64,
    marks: u64,
    parked: u64,
    metadata_bytes: u64,
    rss: u64,
}

async fn sample(client: &mut Client, queue: &str, server: &BenchServer, dispatched: u64) -> anyhow::Result<Sample> {
    let state =
        client.describe_queue(pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 }).await?.into_inner();
    let partition = state.partitions.first().ok_or_else(|| anyhow::anyhow!("the queue has no partition"))?;
    Ok(Sample {
        dispatched,
        marks: partition.subqueues.iter().map(|s| s.dispatched_above_ack).sum(),
        parked: partition.subqueues.iter().map(|s| s.parked_tasks).sum(),
        metadata_bytes: partition.metadata_bytes,
        rss: server.memory().map_or(0, |(rss, _)| rss),
    })
}

/// Adds the held key's tasks and starts its first one, heartbeated until
/// the returned task is aborted.
async fn hold_a_key(client: &mut Client, queue: &str) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    // The held key's tasks come first; its first one runs all along.
    let held = (0..=WAITING)
        .map(|n| pb::TaskSpec { fairness_key: HELD.into(), payload: format!("{n}").into_bytes(), ..Default::default() })
        .collect();
    add_batch(client, queue, held).await?;
    let running = poll_batch(client, queue, 1, Duration::from_secs(5)).await?;
    anyhow::ensure!(running.len() == 1 && running[0].fairness_key == HELD, "the held key's first task did not start");
    let (mut client, lease_token) = (client.clone(), running[0].lease_token.clone());
    Ok(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(10));
        loop {
            ticks.tick().await;
            let request = pb::HeartbeatTaskRequest { lease_token: lease_token.clone() };
            if client.heartbeat_task(request).await.is_err() {
                return;
            }
        }
    }))
}

async fn once(args: &HeldArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let queue = format!("held-{}", run_id());
    let config = format!(
        "{}\n[engine]\nmax_parked_keys = {}\n\n[queues.\"{queue}\"]\nkey_concurrency = 1\nlease_timeout = \"60s\"\n",
        server_config(false, &[]),
        args.max_parked_keys
    );
    let server = BenchServer::start(store, &config)?;
    let mut client = server.client().await?;
    create_queue(&mut client, &queue, 1).await?;

    let heartbeat = if args.without_held_key { None } else { Some(hold_a_key(&mut client, &queue).await?) };
    let before = sample(&mut client, &queue, &server, 0).await?;

    let started = Instant::now();
    let dispatched = Arc::new(AtomicU64::new(0));
    let producer = {
        let (mut client, queue, total, keys) = (client.clone(), queue.clone(), args.dispatches, args.keys);
        tokio::spawn(async move {
            let mut next = 0;
            while next < total {
                let size = 1_000.min(total - next);
                let specs = (next..next + size)
                    .map(|n| pb::TaskSpec { fairness_key: format!("key-{}", n % keys), ..Default::default() })
                    .collect();
                add_batch(&mut client, &queue, specs).await?;
                next += size;
            }
            anyhow::Ok(())
        })
    };
    let workers = (0..args.workers).map(|_| {
        let (mut client, queue, dispatched, total) =
            (client.clone(), queue.clone(), dispatched.clone(), args.dispatches);
        tokio::spawn(async move {
            while dispatched.load(Ordering::Relaxed) < total {
                let tasks = poll_batch(&mut client, &queue, 64, Duration::from_secs(1)).await?;
                anyhow::ensure!(tasks.iter().all(|t| t.fairness_key != HELD), "a second task of the held key started");
                complete_all(&client, &tasks).await?;
                dispatched.fetch_add(tasks.len() as u64, Ordering::Relaxed);
            }
            anyhow::Ok(())
        })
    });
    let workers = tokio::spawn(join_all(workers));
    let mut samples = vec![before];
    let mut progress = Progress::new("dispatches beside the held key", args.dispatches);
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    loop {
        ticks.tick().await;
        let done = dispatched.load(Ordering::Relaxed);
        let now = sample(&mut client, &queue, &server, done).await?;
        progress.update(done, &format!("{} marks above the ack level, {} parked", now.marks, now.parked));
        samples.push(now);
        if done >= args.dispatches {
            break;
        }
    }
    let elapsed = started.elapsed();
    producer.await??;
    for worker in workers.await? {
        worker??;
    }
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    server.stop().await?;

    let last = samples.last().expect("a sample");
    let most = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
    let measures = vec![
        Measure::new("dispatches of other keys", "tasks/s", args.dispatches as f64 / elapsed.as_secs_f64()),
        Measure::new("tasks dispatched above the ack level, at most", "tasks", most(|s| s.marks) as f64),
        Measure::new("tasks dispatched above the ack level, at the end", "tasks", last.marks as f64),
        Measure::new("held key's tasks parked, at the end", "tasks", last.parked as f64),
        Measure::new("partition metadata, at most", "bytes", most(|s| s.metadata_bytes) as f64),
        Measure::new(
            "server memory (VmRSS) growth over the run",
            "MiB",
            (last.rss as f64 - samples[0].rss as f64) / MIB,
        ),
    ];
    let series = |name: &str, f: fn(&Sample) -> u64| {
        Series::new(name, samples.iter().map(|s| (s.dispatched as f64, f(s) as f64)).collect())
    };
    let name = if args.without_held_key { "baseline".to_owned() } else { args.max_parked_keys.to_string() };
    let memory = Chart {
        file: format!("held-key-{name}-memory.png"),
        title: if args.without_held_key {
            "Server memory, no key held".into()
        } else {
            format!("Server memory beside a key held at its limit (max_parked_keys {})", args.max_parked_keys)
        },
        x_label: "tasks of other keys dispatched".into(),
        y_label: "MiB".into(),
        panels: vec![("VmRSS".into(), vec![series("VmRSS", |s| s.rss >> 20)])],
        log_x: false,
        log_y: false,
    };
    let chart = Chart {
        file: format!("held-key-{name}.png"),
        title: format!("A key held at its limit beside other keys (max_parked_keys {})", args.max_parked_keys),
        x_label: "tasks of other keys dispatched".into(),
        y_label: "tasks".into(),
        panels: vec![(
            "above the ack level, and parked".into(),
            vec![
                series("dispatched above the ack level", |s| s.marks),
                series("held key's tasks parked", |s| s.parked),
            ],
        )],
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart, memory] })
}
