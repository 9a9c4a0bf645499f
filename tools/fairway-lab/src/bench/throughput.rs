//! Throughput: producers add, workers poll (in batches) and complete, over
//! gRPC against a server process; the raw write rate of the same store is
//! measured in the same run, for the efficiency ratio of design §10.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use futures::future::join_all;

use fairway::config::{Config, StoreUrl};
use fairway::model::{FairLevel, PartitionId, Priority, StoredTask, TaskSpec, validate};
use fairway::proto::v1 as pb;
use fairway::store::cassandra::CassandraStore;

use super::report::{Bound, Measure, ScenarioReport};
use super::server::{BenchServer, Client, add_batch, complete_all, connect, create_queue, poll_completing};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::progress::Progress;

#[derive(Args, Debug, Clone)]
pub(crate) struct ThroughputArgs {
    #[command(flatten)]
    pub common: Common,
    /// Tasks to push through.
    #[arg(long, default_value_t = 100_000)]
    tasks: u64,
    /// Concurrent producers, each sending AddTasks batches.
    #[arg(long, default_value_t = 4)]
    producers: u64,
    /// Tasks per AddTasks call, and per raw append.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Concurrent workers, each taking up to `--poll-batch` tasks per poll
    /// and completing them.
    #[arg(long, default_value_t = 16)]
    workers: u64,
    /// Tasks per PollTasks call (1: one PollTask-sized poll per task).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    poll_batch: u32,
    /// Complete each task with a CompleteTask call of its own, then poll
    /// again (off: a worker sends the completions of its tasks with its next
    /// PollTasks). On for a server built before PollTasks took completions.
    #[arg(long)]
    complete_apart: bool,
    /// Payload bytes per task.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Partitions of the queue.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Let new tasks skip the store when a worker waits (off: every task is written).
    #[arg(long)]
    sync_match: bool,
    /// Also run the same load with a dedup id of its own on every task (as
    /// every visit task has), on a second queue of the same server after
    /// the plain one: each add looks its id up, each completion frees it.
    #[arg(long)]
    dedup: bool,
    /// With `--dedup`: first push this many tasks with other dedup ids
    /// through the dedup queue (added and completed, not measured), so that
    /// the measured adds meet a partition with that history.
    #[arg(long, default_value_t = 0)]
    dedup_history: u64,
    /// Drive these running servers (HOST:PORT, comma-separated) instead of
    /// starting one; producers and workers spread over them. `--store` then
    /// names their store, for the raw rate.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
}

impl ThroughputArgs {
    pub(crate) fn defaults(common: &Common) -> ThroughputArgs {
        ThroughputArgs {
            common: common.clone(),
            tasks: 100_000,
            producers: 4,
            batch: 100,
            workers: 16,
            poll_batch: 16,
            complete_apart: false,
            payload: 64,
            partitions: 1,
            sync_match: false,
            dedup: false,
            dedup_history: 0,
            servers: Vec::new(),
        }
    }
}

pub(super) async fn run(args: &ThroughputArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    if args.tasks == 0 || args.producers == 0 || args.workers == 0 || args.batch == 0 {
        bail!("--tasks, --producers, --workers and --batch must be at least 1");
    }
    if args.batch > 1000 {
        bail!("--batch is {}; AddTasks takes at most 1000 tasks", args.batch);
    }
    if args.dedup_history > 0 && !args.dedup {
        bail!("--dedup-history is the history of the dedup queue: give --dedup too");
    }
    let settings = format!(
        "{} node(s), {} tasks, {} producers × AddTasks of {}, {} workers × PollTasks of up to {} ({}), \
         {}-byte payloads, 16 keys, {} partition(s), sync match {}, dedup ids {}{}",
        args.servers.len().max(1),
        args.tasks,
        args.producers,
        args.batch,
        args.workers,
        args.poll_batch,
        if args.complete_apart { "completed apart" } else { "completed with the next poll" },
        args.payload,
        args.partitions,
        if args.sync_match { "on" } else { "off" },
        if args.dedup { "on" } else { "off" },
        match args.dedup_history {
            0 => String::new(),
            n => format!(" (after {n} tasks with other dedup ids added and completed on the dedup queue)"),
        }
    );
    repeat("throughput", settings, &args.common, |_| once(args, store)).await
}

async fn once(args: &ThroughputArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let mut config = Config::default();
    config.matcher.partitions_per_queue = args.partitions;
    let run_id = run_id();
    let queue = format!("bench-{run_id}");

    // 1. The raw write rate of the store: the same batches, no service around them.
    let (raw_url, _raw_dir) = store.for_run()?;
    let raw_url: StoreUrl = raw_url.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let raw = raw_appends(&raw_url, &config, args, &run_id).await?;

    // 2. End to end over gRPC, on the servers given or on one started for
    // the run; with `--dedup`, again with dedup ids on a second queue.
    let server = match args.servers.is_empty() {
        true => Some(BenchServer::start(store, &server_config(args.sync_match, &[]))?),
        false => None,
    };
    let mut clients = Vec::new();
    match &server {
        Some(server) => clients.push(server.client().await?),
        None => {
            for server in &args.servers {
                clients.push(connect(server).await?);
            }
        }
    }
    let plain = end_to_end(clients.clone(), &queue, args, args.tasks, None).await?;
    let with_ids = match args.dedup {
        true => {
            let queue = format!("{queue}-dedup");
            if args.dedup_history > 0 {
                end_to_end(clients.clone(), &queue, args, args.dedup_history, Some("earlier")).await?;
            }
            Some(end_to_end(clients, &queue, args, args.tasks, Some("origin")).await?)
        }
        false => None,
    };
    if let Some(server) = server {
        server.stop().await?;
    }
    let (end_to_end, largest_write) = (plain.rate, plain.largest_write.max(with_ids.map_or(0, |f| f.largest_write)));
    // Design §10: ≥ 10,000 tasks/s embedded (one partition); on Cassandra,
    // ≥ 50% of its raw batched-write rate, taken as the conditional batches
    // the service itself must write (range-id fencing).
    let on_cassandra = raw.len() > 1;
    let mut headline = Measure::new("end to end: add → poll → complete over gRPC", "tasks/s", end_to_end);
    if !on_cassandra && args.partitions == 1 {
        headline = headline.target(Bound::AtLeast(10_000.0));
    }
    let mut efficiency = Measure::new("end to end / raw conditional appends", "ratio", end_to_end / raw[0].fairway);
    if on_cassandra {
        efficiency = efficiency.target(Bound::AtLeast(0.5));
    }
    let unconditional =
        raw.get(1).map(|m| Measure::new("end to end / raw unconditional batches", "ratio", end_to_end / m.fairway));
    let largest_write =
        Measure::new("largest write of a partition (served by this node)", "bytes", largest_write as f64)
            .target(Bound::AtMost(config.writer.max_write_bytes as f64));
    let mut measures = vec![headline, largest_write];
    measures.push(Measure::new("adds, beside the polls (AddTasks)", "tasks/s", plain.add_rate));
    if let Some(with_ids) = with_ids {
        measures.push(Measure::new("end to end, a dedup id per task", "tasks/s", with_ids.rate));
        measures.push(Measure::new("adds with a dedup id per task, beside the polls", "tasks/s", with_ids.add_rate));
        let mut ratio = Measure::new("adds with dedup ids / plain adds", "ratio", with_ids.add_rate / plain.add_rate);
        if on_cassandra {
            ratio = ratio.target(Bound::AtLeast(0.5));
        }
        measures.push(ratio);
        measures.push(Measure::new("end to end with dedup ids / plain", "ratio", with_ids.rate / plain.rate));
    }
    measures.extend(raw);
    measures.push(efficiency);
    measures.extend(unconditional);
    Ok(RunOutput { measures, charts: Vec::new() })
}

/// Sequential appends of `batch` tasks into one partition, as the writer
/// of a partition does, but with nothing around them. On Cassandra also the
/// same batches without the range-id condition.
async fn raw_appends(
    url: &StoreUrl,
    config: &Config,
    args: &ThroughputArgs,
    run_id: &str,
) -> anyhow::Result<Vec<Measure>> {
    let store = fairway::server::open_store(url, config).await?.tasks;
    let partition = PartitionId { queue: validate::queue_name("queue", &format!("raw-{run_id}"))?, partition: 0 };
    let range_id = store.take_ownership(&partition, 0, "bench", "").await?.range_id;
    let batches = args.tasks.div_ceil(args.batch);
    let payload = vec![0x5A; args.payload];
    let make_batch = |b: u64| -> Vec<StoredTask> {
        (0..args.batch)
            .map(|i| {
                let spec = TaskSpec::new(format!("key-{}", i % 16), Priority::DEFAULT, payload.clone());
                spec.at_level(FairLevel::new(0, (b * args.batch + i + 1) as i64), 0)
            })
            .collect()
    };
    let started = Instant::now();
    let mut progress = Progress::new("raw conditional appends", batches * args.batch);
    for b in 0..batches {
        store.append(&partition, range_id, &make_batch(b), None).await?;
        progress.update((b + 1) * args.batch, "");
    }
    let mut rows = vec![Measure::new(
        format!("raw conditional appends of {} (store.append, one partition)", args.batch),
        "tasks/s",
        (batches * args.batch) as f64 / started.elapsed().as_secs_f64(),
    )];
    if let StoreUrl::Cassandra { contact_point, keyspace } = url {
        let plain = CassandraStore::connect(contact_point, keyspace, &config.cassandra).await?;
        let insert = plain
            .session()
            .prepare(format!(
                "INSERT INTO {keyspace}.tasks (queue, partition, kind, pass, id, task) VALUES (?, 0, 3, ?, ?, ?)"
            ))
            .await?;
        let started = Instant::now();
        let mut progress = Progress::new("raw unconditional batches", batches * args.batch);
        for b in 0..batches {
            plain_batch(&plain, &insert, &format!("plain-{run_id}"), &make_batch(b)).await?;
            progress.update((b + 1) * args.batch, "");
        }
        rows.push(Measure::new(
            format!("raw unconditional batches of {} (one partition)", args.batch),
            "tasks/s",
            (batches * args.batch) as f64 / started.elapsed().as_secs_f64(),
        ));
    }
    Ok(rows)
}

async fn plain_batch(
    store: &CassandraStore,
    insert: &scylla::statement::prepared::PreparedStatement,
    queue: &str,
    tasks: &[StoredTask],
) -> anyhow::Result<()> {
    use scylla::statement::batch::{Batch, BatchType};
    let mut batch = Batch::new(BatchType::Unlogged);
    let mut values = Vec::with_capacity(tasks.len());
    for task in tasks {
        batch.append_statement(insert.clone());
        values.push((queue, task.level.pass, task.level.id, task.payload.clone()));
    }
    store.session().batch(&batch, values).await?;
    Ok(())
}

/// What one end-to-end run measured.
#[derive(Clone, Copy)]
struct Flow {
    /// Tasks per second from the first add to the last completion.
    rate: f64,
    /// Tasks per second from the first add to the last.
    add_rate: f64,
    /// The largest write of a partition served by these nodes, in bytes.
    largest_write: u64,
}

/// Producers add `tasks` in AddTasks batches (each with a dedup id of its
/// own, named under `dedup`, if given) while workers poll and complete them,
/// spread over `clients`.
async fn end_to_end(
    clients: Vec<Client>,
    queue: &str,
    args: &ThroughputArgs,
    tasks: u64,
    dedup: Option<&'static str>,
) -> anyhow::Result<Flow> {
    // Create the queue and let its partitions find their owners before the clock starts.
    let mut first = clients[0].clone();
    create_queue(&mut first, queue, args.partitions).await?;
    let client_for = |n: u64| clients[n as usize % clients.len()].clone();
    let completed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let per_producer = tasks.div_ceil(args.producers);
    let payload = vec![0x5A; args.payload];
    let producers = (0..args.producers)
        .map(|p| {
            let (mut client, payload) = (client_for(p), payload.clone());
            let queue = queue.to_owned();
            let batch = args.batch;
            tokio::spawn(async move {
                let last = ((p + 1) * per_producer).min(tasks);
                let mut next = p * per_producer;
                while next < last {
                    let size = batch.min(last - next);
                    let specs = (0..size)
                        .map(|i| pb::TaskSpec {
                            fairness_key: format!("key-{}", (next + i) % 16),
                            payload: payload.clone(),
                            dedup_id: dedup
                                .map(|kind| format!("https://forge.example/{queue}/{kind}/{}", next + i))
                                .unwrap_or_default(),
                            ..Default::default()
                        })
                        .collect();
                    add_batch(&mut client, &queue, specs).await?;
                    next += size;
                }
                anyhow::Ok(())
            })
        })
        .collect::<Vec<_>>();
    // Near the end a poll may find nothing and wait out its `max_wait` with
    // the completions it carries: there the workers complete apart.
    let taken = Arc::new(AtomicU64::new(0));
    let tail = args.workers * u64::from(args.poll_batch);
    let workers = (0..args.workers)
        .map(|w| {
            let mut client = client_for(w);
            let queue = queue.to_owned();
            let (completed, taken, total, poll) = (completed.clone(), taken.clone(), tasks, args.poll_batch);
            let apart = args.complete_apart;
            tokio::spawn(async move {
                let mut held: Vec<pb::Task> = Vec::new();
                while completed.load(Ordering::Relaxed) < total {
                    let with_poll = !apart && total.saturating_sub(taken.load(Ordering::Relaxed)) > tail;
                    if !with_poll {
                        complete_all(&client, &held).await?;
                        completed.fetch_add(held.len() as u64, Ordering::Relaxed);
                        held.clear();
                    }
                    let done = std::mem::take(&mut held);
                    held = poll_completing(&mut client, &queue, poll, Duration::from_secs(1), &done).await?;
                    completed.fetch_add(done.len() as u64, Ordering::Relaxed);
                    taken.fetch_add(held.len() as u64, Ordering::Relaxed);
                }
                complete_all(&client, &held).await?;
                anyhow::Ok(())
            })
        })
        .collect::<Vec<_>>();
    let watcher = {
        let completed = completed.clone();
        let total = tasks;
        tokio::spawn(async move {
            let mut progress = Progress::new("end to end (add → poll → complete)", total);
            let mut ticks = tokio::time::interval(Duration::from_millis(250));
            loop {
                ticks.tick().await;
                let done = completed.load(Ordering::Relaxed);
                progress.update(done, "");
                if done >= total {
                    return;
                }
            }
        })
    };
    for joined in join_all(producers).await {
        joined??;
    }
    let added = started.elapsed();
    for joined in join_all(workers).await {
        joined??;
    }
    let elapsed = started.elapsed();
    watcher.await?;
    let state =
        first.describe_queue(pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 }).await?.into_inner();
    let largest_write = state.partitions.iter().map(|p| p.largest_write_bytes).max().unwrap_or(0);
    Ok(Flow { rate: tasks as f64 / elapsed.as_secs_f64(), add_rate: tasks as f64 / added.as_secs_f64(), largest_write })
}
