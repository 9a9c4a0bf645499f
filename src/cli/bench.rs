//! `fairway bench`: load over real gRPC against an in-process server, with
//! the raw write rate of the same store measured in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use futures::future::join_all;
use serde::Serialize;

use fairway::clock::SystemClock;
use fairway::config::{Config, StoreUrl};
use fairway::model::{FairLevel, PartitionId, Priority, StoredTask, TaskSpec, validate};
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::store::cassandra::{CassandraStore, apply_schema};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Add → poll → complete per second through one queue, beside the raw
    /// append rate of the store.
    Throughput(ThroughputArgs),
}

#[derive(Args, Debug)]
pub struct ThroughputArgs {
    /// `embedded:DIR` (default: a temporary directory) or
    /// `cassandra://HOST:PORT/KEYSPACE` (the schema is applied if missing).
    #[arg(long)]
    store: Option<String>,
    /// Tasks to push through.
    #[arg(long, default_value_t = 50_000)]
    tasks: u64,
    /// Concurrent producers, each sending AddTasks batches.
    #[arg(long, default_value_t = 4)]
    producers: u64,
    /// Tasks per AddTasks call, and per raw append.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Concurrent workers, each polling and completing one task at a time.
    #[arg(long, default_value_t = 16)]
    workers: u64,
    /// Payload bytes per task.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Partitions of the queue.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Let new tasks skip the store when a worker waits (off: every task is written).
    #[arg(long)]
    sync_match: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Drive these running servers (HOST:PORT, comma-separated) instead of
    /// one in this process; producers and workers spread over them.
    /// `--store` then names their store, for the raw rate.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
}

#[derive(Serialize, Debug)]
struct Row {
    what: String,
    tasks: u64,
    seconds: f64,
    tasks_per_second: f64,
}

impl Row {
    fn new(what: impl Into<String>, tasks: u64, elapsed: Duration) -> Row {
        let seconds = elapsed.as_secs_f64();
        Row { what: what.into(), tasks, seconds, tasks_per_second: tasks as f64 / seconds }
    }
}

#[derive(Serialize, Debug)]
struct Report {
    scenario: &'static str,
    store: String,
    machine: String,
    settings: String,
    rows: Vec<Row>,
    efficiency: f64,
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Throughput(args) => throughput(args).await,
    }
}

/// Where the store lives for the run, and what to clean up after it.
struct BenchStore {
    url: StoreUrl,
    _dir: Option<tempfile::TempDir>,
}

async fn prepare_store(url: Option<&str>, config: &Config) -> anyhow::Result<BenchStore> {
    let Some(url) = url else {
        let dir = tempfile::tempdir().context("a temporary directory")?;
        return Ok(BenchStore { url: StoreUrl::Embedded(dir.path().to_owned()), _dir: Some(dir) });
    };
    let url: StoreUrl = url.parse().map_err(|e: String| anyhow::anyhow!("--store: {e}"))?;
    if let StoreUrl::Cassandra { contact_point, keyspace } = &url {
        let session = fairway::store::cassandra::connect_session(contact_point, &config.cassandra).await?;
        apply_schema(&session, keyspace, &config.cassandra.replication).await?;
    }
    Ok(BenchStore { url, _dir: None })
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".to_owned(), |kb| format!("{} GiB", kb / (1024 * 1024)));
    format!("{} {}, {cores} cores, {memory}", std::env::consts::OS, std::env::consts::ARCH)
}

async fn throughput(args: ThroughputArgs) -> anyhow::Result<()> {
    if args.tasks == 0 || args.producers == 0 || args.workers == 0 || args.batch == 0 {
        bail!("--tasks, --producers, --workers and --batch must be at least 1");
    }
    if args.batch > 1000 {
        bail!("--batch is {}; AddTasks takes at most 1000 tasks", args.batch);
    }
    let mut config = Config::default();
    config.matcher.sync_match = args.sync_match;
    config.matcher.partitions_per_queue = args.partitions;
    config.validate()?;
    let bench_store = prepare_store(args.store.as_deref(), &config).await?;
    let run_id = format!("{:08x}", rand::random::<u32>());

    // 1. The raw append rate of the store: the same batches, no service around them.
    let raw = raw_appends(&bench_store.url, &config, &args, &run_id).await?;

    // 2. End to end over gRPC, on servers given or one in this process.
    let queue = format!("bench-{run_id}");
    let end_to_end = if args.servers.is_empty() {
        let store = fairway::server::open_store(&bench_store.url, &config.cassandra).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server_config = config.clone();
        let server = tokio::spawn(async move {
            fairway::server::serve(listener, &server_config, store, Arc::new(SystemClock), async {
                let _ = stopped.await;
            })
            .await
        });
        let row = end_to_end(vec![connect(&addr.to_string()).await?], &queue, &args).await?;
        let _ = stop.send(());
        server.await??;
        row
    } else {
        let mut clients = Vec::new();
        for server in &args.servers {
            clients.push(connect(server).await?);
        }
        end_to_end(clients, &queue, &args).await?
    };

    let efficiency = end_to_end.tasks_per_second / raw[0].tasks_per_second;
    let mut rows = raw;
    rows.insert(0, end_to_end);
    let report = Report {
        scenario: "throughput",
        store: bench_store.url.to_string(),
        machine: machine(),
        settings: format!(
            "{} node(s), {} tasks, {} producers × AddTasks of {}, {} workers, {}-byte payloads, {} partition(s), sync match {}",
            args.servers.len().max(1),
            args.tasks,
            args.producers,
            args.batch,
            args.workers,
            args.payload,
            args.partitions,
            if args.sync_match { "on" } else { "off" }
        ),
        rows,
        efficiency,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("{}", path.display()))?;
    }
    Ok(())
}

fn print_report(report: &Report) {
    println!();
    println!("store: {}  machine: {}", report.store, report.machine);
    println!("settings: {}", report.settings);
    println!();
    println!("| what | tasks | seconds | tasks/s |");
    println!("|---|---:|---:|---:|");
    for row in &report.rows {
        println!("| {} | {} | {:.2} | {:.0} |", row.what, row.tasks, row.seconds, row.tasks_per_second);
    }
    println!();
    println!("end to end / raw conditional appends: {:.0}%", report.efficiency * 100.0);
}

/// Sequential appends of `batch` tasks into one partition, as the writer
/// of a partition does, but with nothing around them. On Cassandra also the
/// same batches without the range-id condition.
async fn raw_appends(url: &StoreUrl, config: &Config, args: &ThroughputArgs, run_id: &str) -> anyhow::Result<Vec<Row>> {
    let store = fairway::server::open_store(url, &config.cassandra).await?;
    let partition = PartitionId { queue: validate::queue_name("queue", &format!("raw-{run_id}"))?, partition: 0 };
    let range_id = store.take_ownership(&partition, 0, "bench").await?.range_id;
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
        progress.update((b + 1) * args.batch);
    }
    let mut rows = vec![Row::new(
        format!("raw conditional appends of {} (store.append, one partition)", args.batch),
        batches * args.batch,
        started.elapsed(),
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
            progress.update((b + 1) * args.batch);
        }
        rows.push(Row::new(
            format!("raw unconditional batches of {} (one partition)", args.batch),
            batches * args.batch,
            started.elapsed(),
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

/// Waits until every partition of the queue has an active owner.
async fn wait_until_owned(client: &mut MatchingClient<tonic::transport::Channel>, queue: &str) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..600 {
        ticks.tick().await;
        let state = client
            .describe_queue(pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 })
            .await?
            .into_inner();
        if state.partitions.iter().all(|p| p.state == "active" || p.state == "remote") {
            return Ok(());
        }
    }
    bail!("the partitions of {queue} found no owner within a minute")
}

/// A progress line on stderr, redrawn at most every 200 ms.
struct Progress {
    what: &'static str,
    total: u64,
    started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    fn new(what: &'static str, total: u64) -> Progress {
        Progress { what, total, started: Instant::now(), drawn: None }
    }

    fn update(&mut self, done: u64) {
        let now = Instant::now();
        if self.drawn.is_some_and(|at| now - at < Duration::from_millis(200)) && done < self.total {
            return;
        }
        self.drawn = Some(now);
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        eprint!("\r{}: {}/{} ({rate:.0}/s)   ", self.what, done.min(self.total), self.total);
        if done >= self.total {
            eprintln!();
        }
    }
}

async fn connect(server: &str) -> anyhow::Result<MatchingClient<tonic::transport::Channel>> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{server}"))?
        .connect()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    Ok(MatchingClient::new(channel))
}

/// Producers add `tasks` in AddTasks batches while workers poll and complete
/// them, spread over `clients`; the time from the first add to the last completion.
async fn end_to_end(
    clients: Vec<MatchingClient<tonic::transport::Channel>>,
    queue: &str,
    args: &ThroughputArgs,
) -> anyhow::Result<Row> {
    // Create the queue and let its partitions find their owners before the clock starts.
    let mut first = clients[0].clone();
    first.create_queue(pb::CreateQueueRequest { queue: queue.to_owned(), partitions: args.partitions }).await?;
    wait_until_owned(&mut first, queue).await?;
    let client_for = |n: u64| clients[n as usize % clients.len()].clone();
    let completed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let per_producer = args.tasks.div_ceil(args.producers);
    let payload = vec![0x5A; args.payload];
    let producers = (0..args.producers).map(|p| {
        let (mut client, payload) = (client_for(p), payload.clone());
        let queue = queue.to_owned();
        let (batch, tasks) = (args.batch, args.tasks);
        tokio::spawn(async move {
            let first = p * per_producer;
            let last = ((p + 1) * per_producer).min(tasks);
            let mut next = first;
            while next < last {
                let size = batch.min(last - next);
                let specs = (0..size)
                    .map(|i| pb::TaskSpec {
                        fairness_key: format!("key-{}", (next + i) % 16),
                        payload: payload.clone(),
                        ..Default::default()
                    })
                    .collect();
                let response = client.add_tasks(pb::AddTasksRequest { queue: queue.clone(), tasks: specs }).await?;
                for result in response.into_inner().results {
                    if let Some(pb::add_task_result::Outcome::Error(error)) = result.outcome {
                        bail!("an add failed: {}", error.message);
                    }
                }
                next += size;
            }
            anyhow::Ok(())
        })
    });
    let workers = (0..args.workers).map(|w| {
        let mut client = client_for(w);
        let queue = queue.to_owned();
        let (completed, total) = (completed.clone(), args.tasks);
        tokio::spawn(async move {
            while completed.load(Ordering::Relaxed) < total {
                let polled = client
                    .poll_task(pb::PollTaskRequest {
                        queue: queue.clone(),
                        worker_id: "bench".into(),
                        max_wait: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
                    })
                    .await?
                    .into_inner();
                if let Some(task) = polled.task {
                    client
                        .complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] })
                        .await?;
                    completed.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        })
    });
    let watcher = {
        let completed = completed.clone();
        let total = args.tasks;
        tokio::spawn(async move {
            let mut progress = Progress::new("end to end (add → poll → complete)", total);
            let mut ticks = tokio::time::interval(Duration::from_millis(250));
            loop {
                ticks.tick().await;
                let done = completed.load(Ordering::Relaxed);
                progress.update(done);
                if done >= total {
                    return;
                }
            }
        })
    };
    for joined in join_all(producers).await {
        joined??;
    }
    for joined in join_all(workers).await {
        joined??;
    }
    let elapsed = started.elapsed();
    watcher.await?;
    Ok(Row::new("end to end: add → poll → complete over gRPC", args.tasks, elapsed))
}
