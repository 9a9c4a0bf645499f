//! `fairway-lab demo`: weighted fair dispatch, watched live.
//!
//! One process runs a server (embedded store in a temporary directory, or
//! `--store cassandra://…`),
//! preloads a deep backlog for four fairness keys — one of them a noisy
//! neighbour that adds 90% of the tasks — and lets rate-limited workers poll
//! the queue over real gRPC. Halfway through, a fifth key starts adding tasks.
//! The live view shows each key's share of recent dispatches against its
//! weighted target; the summary compares the run with what a FIFO queue would
//! have done.

use std::fmt::Write as _;
use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use fairway::clock::SystemClock;
use fairway::clock::duration_serde;
use fairway::config::{Config, StoreUrl};
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::server::{self, LocalServer};

#[derive(clap::Args, Debug)]
pub(super) struct DemoArgs {
    /// Tasks per second the workers take, all of them together.
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate: u32,
    /// How long the workers run, e.g. 6s or 1m; the late key joins halfway.
    #[arg(long, default_value = "12s", value_parser = duration_serde::parse)]
    duration: Duration,
    /// Concurrent workers polling the queue.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    workers: u32,
    /// Where the demo's queue lives: a fresh temporary directory by default,
    /// or `cassandra://HOST:PORT/KEYSPACE` (the schema is applied if missing).
    #[arg(long)]
    store: Option<String>,
}

/// The queue every producer and worker of the demo uses: a new one each run,
/// so that a run on a kept store (Cassandra) starts from an empty queue.
static QUEUE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("demo-{:06x}", rand::random::<u32>() >> 8));
/// Tasks preloaded per key, over what its share of the workers' rate needs.
const HEADROOM: f64 = 1.25;
/// AddTasks calls in flight while preloading.
const ADD_CALLS_IN_FLIGHT: usize = 4;
/// How long a worker's poll may wait.
const POLL_WAIT: Duration = Duration::from_secs(1);
/// How often the token bucket of the workers is refilled.
const REFILL_PERIOD: Duration = Duration::from_millis(1);
/// How much work the token bucket may save up.
const BURST: Duration = Duration::from_millis(50);
/// How often the live view is refreshed.
const REFRESH: Duration = Duration::from_millis(500);
/// The recent past over which the live view measures shares.
const WINDOW: Duration = Duration::from_secs(2);
/// How often the live view prints a block when stdout is not a terminal, in
/// refreshes: every 2 s.
const LOG_EVERY_FRAMES: u32 = 4;
/// Cells of a live bar for a share of 100%.
const BAR_WIDTH: usize = 30;

type Client = MatchingClient<tonic::transport::Channel>;

/// What a fairness key does in the demo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Preloaded with what it needs at its share.
    Quiet,
    /// Preloaded with nine times the quiet keys together.
    Noisy,
    /// Starts adding tasks halfway through the run.
    Late,
}

#[derive(Debug)]
struct DemoKey {
    name: &'static str,
    weight: f64,
    role: Role,
}

const KEYS: [DemoKey; 5] = [
    DemoKey { name: "alpha", weight: 5.0, role: Role::Quiet },
    DemoKey { name: "beta", weight: 3.0, role: Role::Quiet },
    DemoKey { name: "gamma", weight: 2.0, role: Role::Quiet },
    DemoKey { name: "noisy", weight: 1.0, role: Role::Noisy },
    DemoKey { name: "delta", weight: 2.0, role: Role::Late },
];
const KEY_COUNT: usize = KEYS.len();
/// The index of the key with [`Role::Noisy`] in [`KEYS`].
const NOISY: usize = 3;
/// The index of the key with [`Role::Late`] in [`KEYS`].
const LATE: usize = 4;

/// Counts per key, indexed like [`KEYS`].
type PerKey = [u64; KEY_COUNT];

fn key_index(name: &str) -> Option<usize> {
    KEYS.iter().position(|key| key.name == name)
}

/// A set of indexes into [`KEYS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeySet(u8);

impl KeySet {
    fn with(self, key: usize) -> KeySet {
        KeySet(self.0 | 1 << key)
    }

    fn contains(self, key: usize) -> bool {
        self.0 & (1 << key) != 0
    }

    fn count(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The sum of the weights of the keys in the set.
    fn weight(self) -> f64 {
        (0..KEY_COUNT).filter(|&k| self.contains(k)).map(|k| KEYS[k].weight).sum()
    }

    /// The weighted fair share of `key` among the keys of the set.
    fn target(self, key: usize) -> Option<f64> {
        self.contains(key).then(|| KEYS[key].weight / self.weight())
    }
}

/// Runs the demo: a server, producers, workers, the live view and the summary.
pub(super) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    ensure!(!args.duration.is_zero(), "--duration must be longer than 0s");
    let config = demo_config()?;
    let server = DemoServer::start(&config, args.store.as_deref()).await?;
    let result = demo(&args, &config, &server).await;
    let stopped = server.stop().await;
    result.and(stopped)
}

/// The default config, with the weights of the demo's keys set by the operator.
fn demo_config() -> anyhow::Result<Config> {
    let mut config = Config::default();
    for key in &KEYS {
        config.engine.weights.keys.insert(key.name.to_owned(), key.weight);
    }
    config.validate().context("the demo's config")?;
    Ok(config)
}

/// A server in this process, on a free port of the loopback interface, with
/// an embedded store in a temporary directory unless told otherwise.
struct DemoServer {
    address: SocketAddr,
    store: StoreUrl,
    server: LocalServer,
    /// Deleted when the server has stopped.
    dir: Option<tempfile::TempDir>,
}

impl DemoServer {
    async fn start(config: &Config, store_url: Option<&str>) -> anyhow::Result<DemoServer> {
        let (store_url, dir) = match store_url {
            None => {
                let dir = tempfile::tempdir().context("cannot create a temporary directory for the store")?;
                (StoreUrl::Embedded(dir.path().to_owned()), Some(dir))
            }
            Some(url) => (url.parse().map_err(|e: String| anyhow::anyhow!("--store: {e}"))?, None),
        };
        if let StoreUrl::Cassandra { contact_point, keyspace } = &store_url {
            let cassandra = config.cassandra.in_region(&config.cluster.region);
            let session = fairway::store::cassandra::connect_session(contact_point, &cassandra).await?;
            fairway::store::cassandra::apply_schema(&session, keyspace, &cassandra.replication).await?;
        }
        let store = server::open_store(&store_url, config).await?;
        let server = LocalServer::start(config, store, Arc::new(SystemClock)).await?;
        Ok(DemoServer { address: server.addr, store: store_url, server, dir })
    }

    /// Shuts the server down in its usual order and waits for it.
    async fn stop(self) -> anyhow::Result<()> {
        self.server.stop().await.context("the server")?;
        match self.dir {
            Some(dir) => dir.close().context("removing the store's temporary directory"),
            None => Ok(()),
        }
    }
}

/// Everything between the server's start and its stop.
async fn demo(args: &DemoArgs, config: &Config, server: &DemoServer) -> anyhow::Result<()> {
    let url = format!("http://{}", server.address);
    let client =
        MatchingClient::connect(url.clone()).await.with_context(|| format!("cannot reach the demo server at {url}"))?;
    let tty = std::io::stdout().is_terminal();
    let batch = config.limits.max_batch_tasks;
    let plan = preload_plan(args.rate, args.duration);
    print_intro(args, server, &plan);

    preload(&client, &plan, batch, tty).await?;

    let ledger = SharedLedger::new(plan);
    let stop = CancellationToken::new();
    let started = ledger.lock().started;
    let mut tasks = vec![tokio::spawn(refill(Arc::clone(&ledger.permits), args.rate, stop.clone()))];
    for n in 0..args.workers {
        let worker = work(client.clone(), format!("demo-worker-{n}"), ledger.clone(), stop.clone());
        tasks.push(spawn_stopping_on_error(&stop, worker));
    }
    let late =
        join_late(client.clone(), ledger.clone(), started + args.duration / 2, late_plan(args), batch, stop.clone());
    tasks.push(spawn_stopping_on_error(&stop, late));

    let mut screen = Screen::new(tty, args.duration);
    let watched = watch(&ledger, &mut screen, started + args.duration, &stop).await;
    stop.cancel();
    for joined in futures::future::join_all(tasks).await {
        joined.context("a demo task")??;
    }
    let interrupted = watched?;
    let ledger = ledger.lock();
    screen.finish(&ledger.snapshot())?;
    if interrupted {
        println!("\ninterrupted: the summary covers the run so far");
    }
    print_summary(&ledger);
    Ok(())
}

fn print_intro(args: &DemoArgs, server: &DemoServer, plan: &PerKey) {
    let at = format!("a server on {}, store {}", server.address, server.store);
    for line in intro_lines(&at, args.workers, args.rate, args.duration, plan) {
        println!("{line}");
    }
}

/// What the run will do: `at` says where the server is.
fn intro_lines(at: &str, workers: u32, rate: u32, duration: Duration, plan: &PerKey) -> Vec<String> {
    let mut lines = vec![format!("fairway-lab demo, queue {:?}:", QUEUE.as_str()), format!("  {at}")];
    for (key, tasks) in KEYS.iter().zip(plan) {
        let what = match key.role {
            Role::Quiet => format!("{tasks:>6} tasks preloaded"),
            Role::Noisy => format!("{tasks:>6} tasks preloaded: the noisy one, 90% of them all"),
            Role::Late => format!("starts adding tasks at {}", seconds(duration / 2)),
        };
        lines.push(format!("  {:<6} weight {:<3} {what}", key.name, key.weight));
    }
    lines.push(format!("  {workers} workers poll at most {rate} tasks/s in all, for {}.", seconds(duration)));
    lines.push("  A key's target: its weight over the weights of the keys with tasks waiting.".to_owned());
    lines.push(String::new());
    lines
}

/// Tasks to preload per key so that each stays backlogged for the whole run:
/// a quiet key what it would take at its share of `rate` over `duration`
/// (with [`HEADROOM`]), the noisy key nine times the quiet keys together.
fn preload_plan(rate: u32, duration: Duration) -> PerKey {
    let capacity = f64::from(rate) * duration.as_secs_f64();
    let first_keys: f64 = KEYS.iter().filter(|key| key.role != Role::Late).map(|key| key.weight).sum();
    let mut plan = [0; KEY_COUNT];
    for (tasks, key) in plan.iter_mut().zip(&KEYS) {
        if key.role == Role::Quiet {
            *tasks = with_headroom(capacity * key.weight / first_keys);
        }
    }
    let quiet: u64 = plan.iter().sum();
    for (tasks, key) in plan.iter_mut().zip(&KEYS) {
        if key.role == Role::Noisy {
            *tasks = 9 * quiet;
        }
    }
    plan
}

/// Tasks the late key adds halfway: its share of the second half of the run.
fn late_plan(args: &DemoArgs) -> u64 {
    let capacity = f64::from(args.rate) * args.duration.as_secs_f64() / 2.0;
    let all_keys: f64 = KEYS.iter().map(|key| key.weight).sum();
    with_headroom(capacity * KEYS[LATE].weight / all_keys)
}

fn with_headroom(expected: f64) -> u64 {
    (expected * HEADROOM).ceil().max(1.0) as u64
}

/// The keys of `plan`'s tasks, mixed evenly as independent producers would
/// add them: the n-th of a key's `c` tasks sits at `(n + ½) / c`.
fn interleave(plan: &PerKey) -> Vec<usize> {
    let mut slots: Vec<(f64, usize)> = plan
        .iter()
        .enumerate()
        .flat_map(|(key, &tasks)| (0..tasks).map(move |n| ((n as f64 + 0.5) / tasks as f64, key)))
        .collect();
    slots.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    slots.into_iter().map(|(_, key)| key).collect()
}

/// Adds the tasks of `plan` before any worker starts, with a progress line.
async fn preload(client: &Client, plan: &PerKey, batch: usize, tty: bool) -> anyhow::Result<()> {
    let total: u64 = plan.iter().sum();
    let started = Instant::now();
    let mut done = 0u64;
    if !tty {
        println!("preloading {total} tasks in AddTasks batches of {batch}…");
    }
    add_tasks(client, &interleave(plan), batch, |acked| {
        done += acked.iter().sum::<u64>();
        if tty {
            print!("\rpreloading: {done}/{total} tasks ({:.0}%)", 100.0 * done as f64 / total as f64);
            let _ = std::io::stdout().flush();
        }
    })
    .await
    .context("preloading the backlog")?;
    let elapsed = started.elapsed().as_secs_f64();
    // On a terminal, over the progress line (and clear of its end).
    let (lead, tail) = if tty { ("\r", "\x1b[K") } else { ("", "") };
    println!("{lead}preloaded {total} tasks in {elapsed:.1}s ({:.0} tasks/s){tail}\n", total as f64 / elapsed);
    Ok(())
}

/// Adds one task per entry of `keys`, `batch` to an AddTasks call and
/// [`ADD_CALLS_IN_FLIGHT`] calls at a time; `acked` hears the tasks per key
/// of every batch the server has acknowledged.
async fn add_tasks(
    client: &Client,
    keys: &[usize],
    batch: usize,
    mut acked: impl FnMut(&PerKey),
) -> anyhow::Result<()> {
    let calls = task_batches(keys, batch).into_iter().map(|(specs, counts)| {
        let client = client.clone();
        async move { add_batch(client, specs).await.map(|()| counts) }
    });
    let mut calls = futures::stream::iter(calls).buffer_unordered(ADD_CALLS_IN_FLIGHT);
    while let Some(counts) = calls.next().await {
        acked(&counts?);
    }
    Ok(())
}

/// One task per entry of `keys`, in batches of `batch`, each with its tasks
/// per key. A task's payload names its key and its place among the key's tasks.
fn task_batches(keys: &[usize], batch: usize) -> Vec<(Vec<pb::TaskSpec>, PerKey)> {
    let mut sequence: PerKey = [0; KEY_COUNT];
    keys.chunks(batch)
        .map(|chunk| {
            let mut counts: PerKey = [0; KEY_COUNT];
            let specs = chunk
                .iter()
                .map(|&key| {
                    counts[key] += 1;
                    sequence[key] += 1;
                    pb::TaskSpec {
                        fairness_key: KEYS[key].name.to_owned(),
                        payload: format!("{}-{}", KEYS[key].name, sequence[key]).into_bytes(),
                        ..Default::default()
                    }
                })
                .collect();
            (specs, counts)
        })
        .collect()
}

/// One AddTasks call; fails if the server refused any of its tasks.
async fn add_batch(mut client: Client, tasks: Vec<pb::TaskSpec>) -> anyhow::Result<()> {
    let sent = tasks.len();
    let request = pb::AddTasksRequest { queue: QUEUE.clone(), tasks };
    let results = client.add_tasks(request).await.context("AddTasks")?.into_inner().results;
    ensure!(results.len() == sent, "AddTasks answered {} results for {sent} tasks", results.len());
    for result in results {
        if let Some(pb::add_task_result::Outcome::Error(error)) = result.outcome {
            bail!("AddTasks refused a task: {}", error.message);
        }
    }
    Ok(())
}

/// One task handed to a worker.
#[derive(Clone, Copy, Debug)]
struct Dispatch {
    key: usize,
    /// Since the start of the run.
    at: Duration,
    /// The keys with tasks waiting just before this one was received.
    backlogged: KeySet,
}

/// What the producers added and the workers received, in the order received.
#[derive(Debug)]
struct Ledger {
    started: Instant,
    /// Tasks sent to the server, acknowledged or not.
    added: PerKey,
    /// Whether the server surely holds tasks of the key: an AddTasks call
    /// for it was acknowledged, or one of its tasks was received.
    present: [bool; KEY_COUNT],
    dispatched: PerKey,
    /// When each key started adding tasks, since the start of the run.
    joined: [Option<Duration>; KEY_COUNT],
    log: Vec<Dispatch>,
}

impl Ledger {
    /// A run starting now, after `preloaded` tasks were added.
    fn new(preloaded: PerKey) -> Ledger {
        Ledger {
            started: Instant::now(),
            added: preloaded,
            present: preloaded.map(|tasks| tasks > 0),
            dispatched: [0; KEY_COUNT],
            joined: preloaded.map(|tasks| (tasks > 0).then_some(Duration::ZERO)),
            log: Vec::new(),
        }
    }

    /// The keys that the server surely holds tasks of, not all received yet.
    fn backlogged(&self) -> KeySet {
        (0..KEY_COUNT)
            .filter(|&k| self.present[k] && self.added[k] > self.dispatched[k])
            .fold(KeySet::default(), KeySet::with)
    }

    /// `key` starts adding `tasks` tasks now.
    fn joining(&mut self, key: usize, tasks: u64) {
        self.joined[key] = Some(self.started.elapsed());
        self.added[key] += tasks;
    }

    /// The server acknowledged a batch with these tasks per key.
    fn acknowledged(&mut self, batch: &PerKey) {
        for (present, &tasks) in self.present.iter_mut().zip(batch) {
            *present |= tasks > 0;
        }
    }

    fn dispatched(&mut self, key: usize) {
        // The key of a task received certainly had one waiting, even when
        // the call that added it has not been acknowledged yet.
        self.present[key] = true;
        let backlogged = self.backlogged().with(key);
        self.dispatched[key] += 1;
        self.log.push(Dispatch { key, at: self.started.elapsed(), backlogged });
    }

    /// The state of the run for the live view.
    fn snapshot(&self) -> Snapshot {
        let elapsed = self.started.elapsed();
        let since = elapsed.saturating_sub(WINDOW);
        let mut window = [0; KEY_COUNT];
        for dispatch in self.log.iter().rev().take_while(|d| d.at >= since) {
            window[dispatch.key] += 1;
        }
        Snapshot {
            elapsed,
            window_span: elapsed - since,
            dispatched: self.dispatched,
            window,
            backlogged: self.backlogged(),
            joined: self.joined,
        }
    }
}

/// The ledger and the token bucket that the workers share.
#[derive(Clone, Debug)]
struct SharedLedger {
    ledger: Arc<Mutex<Ledger>>,
    /// One permit per poll a worker may make.
    permits: Arc<Semaphore>,
}

impl SharedLedger {
    fn new(preloaded: PerKey) -> SharedLedger {
        SharedLedger { ledger: Arc::new(Mutex::new(Ledger::new(preloaded))), permits: Arc::new(Semaphore::new(0)) }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `work` on its own task; if it fails, the whole run stops.
fn spawn_stopping_on_error(
    stop: &CancellationToken,
    work: impl Future<Output = anyhow::Result<()>> + Send + 'static,
) -> JoinHandle<anyhow::Result<()>> {
    let stop = stop.clone();
    tokio::spawn(async move {
        let result = work.await;
        if result.is_err() {
            stop.cancel();
        }
        result
    })
}

/// The token bucket of the workers: `rate` permits a second, at most
/// [`BURST`] worth saved up, until `stop`.
async fn refill(permits: Arc<Semaphore>, rate: u32, stop: CancellationToken) -> anyhow::Result<()> {
    let rate = f64::from(rate);
    let burst = (rate * BURST.as_secs_f64()).ceil().max(1.0) as usize;
    let mut ticks = tokio::time::interval(REFILL_PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = Instant::now();
    let mut owed = 0.0;
    loop {
        let now = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            now = ticks.tick() => now,
        };
        owed += rate * now.saturating_duration_since(last).as_secs_f64();
        last = now;
        let whole = owed.floor();
        owed -= whole;
        let room = burst.saturating_sub(permits.available_permits());
        permits.add_permits((whole as usize).min(room));
    }
}

/// A worker: takes a permit, polls, records what it got and completes it,
/// until `stop`. A poll in flight when `stop` comes is finished.
async fn work(
    mut client: Client,
    worker_id: String,
    shared: SharedLedger,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let max_wait = prost_types::Duration::try_from(POLL_WAIT).context("the poll wait")?;
    loop {
        let permit = tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            permit = shared.permits.acquire() => permit.context("the workers' token bucket")?,
        };
        permit.forget();
        let request =
            pb::PollTaskRequest { queue: QUEUE.clone(), worker_id: worker_id.clone(), max_wait: Some(max_wait) };
        let Some(task) = client.poll_task(request).await.context("PollTask")?.into_inner().task else { continue };
        shared.lock().dispatched(task_key(&task)?);
        let done = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
        client.complete_task(done).await.context("CompleteTask")?;
    }
}

/// The index in [`KEYS`] of a task's key.
fn task_key(task: &pb::Task) -> anyhow::Result<usize> {
    key_index(&task.fairness_key)
        .with_context(|| format!("the server handed out a task of unknown key {:?}", task.fairness_key))
}

/// The late key: at `at`, adds `tasks` tasks in batches of `batch`.
async fn join_late(
    client: Client,
    shared: SharedLedger,
    at: Instant,
    tasks: u64,
    batch: usize,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        () = stop.cancelled() => return Ok(()),
        () = tokio::time::sleep_until(at) => {}
    }
    shared.lock().joining(LATE, tasks);
    let keys = vec![LATE; usize::try_from(tasks).context("the late key's tasks")?];
    add_tasks(&client, &keys, batch, |acked| shared.lock().acknowledged(acked))
        .await
        .context("adding the late key's tasks")
}

/// Refreshes the live view until `deadline`, `stop` or Ctrl-C; true after Ctrl-C.
async fn watch(
    shared: &SharedLedger,
    screen: &mut Screen,
    deadline: Instant,
    stop: &CancellationToken,
) -> anyhow::Result<bool> {
    let mut ticks = tokio::time::interval_at(Instant::now() + REFRESH, REFRESH);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = tokio::time::sleep_until(deadline);
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No Ctrl-C handling here: the run ends at the deadline.
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(end, interrupt);
    loop {
        tokio::select! {
            // The deadline first: the final frame is drawn by the caller.
            biased;
            () = &mut end => return Ok(false),
            () = stop.cancelled() => return Ok(false),
            () = &mut interrupt => return Ok(true),
            _ = ticks.tick() => {
                let snapshot = shared.lock().snapshot();
                screen.refresh(&snapshot)?;
            }
        }
    }
}

/// The state of the run at one moment.
#[derive(Debug)]
struct Snapshot {
    elapsed: Duration,
    /// How much of the past the window covers (less than [`WINDOW`] at first).
    window_span: Duration,
    dispatched: PerKey,
    /// Dispatches in the window.
    window: PerKey,
    backlogged: KeySet,
    joined: [Option<Duration>; KEY_COUNT],
}

impl Snapshot {
    /// One header line, one line of column names, one line per key.
    fn lines(&self, duration: Duration, fancy: bool) -> Vec<String> {
        let in_window: u64 = self.window.iter().sum();
        let rate = in_window as f64 / self.window_span.as_secs_f64().max(1e-3);
        let mut lines = vec![
            format!(
                "{:>6} of {}   {} dispatched   {rate:.0} tasks/s over the last {}",
                seconds(self.elapsed),
                seconds(duration),
                self.dispatched.iter().sum::<u64>(),
                seconds(self.window_span)
            ),
            format!(
                "  {:<6} {:>6} {:>10} {:>8} {:>8}   last {}, | = target",
                "key",
                "weight",
                "dispatched",
                "share",
                "target",
                seconds(WINDOW)
            ),
        ];
        for (k, key) in KEYS.iter().enumerate() {
            let share = (in_window > 0 && self.joined[k].is_some()).then(|| self.window[k] as f64 / in_window as f64);
            let target = self.backlogged.target(k);
            let picture = match self.joined[k] {
                None => format!("joins at {}", seconds(duration / 2)),
                Some(_) => bar(share.unwrap_or(0.0), target, fancy),
            };
            lines.push(format!(
                "  {:<6} {:>6} {:>10} {:>8} {:>8}   {picture}",
                key.name,
                key.weight,
                self.dispatched[k],
                percent(share),
                percent(target)
            ));
        }
        lines
    }
}

/// `share` as a bar of [`BAR_WIDTH`] cells for 100%, with `|` at `target`.
fn bar(share: f64, target: Option<f64>, fancy: bool) -> String {
    let cells = |fraction: f64| (fraction.clamp(0.0, 1.0) * BAR_WIDTH as f64).round() as usize;
    let filled = cells(share);
    let mark = target.map(cells);
    let end = filled.max(mark.map_or(0, |m| m + 1));
    let fill = if fancy { '█' } else { '#' };
    (0..end)
        .map(|i| {
            if Some(i) == mark {
                '|'
            } else if i < filled {
                fill
            } else {
                ' '
            }
        })
        .collect()
}

/// Where the live view goes: redrawn in place on a terminal, else a block
/// every [`LOG_EVERY_FRAMES`] refreshes.
#[derive(Debug)]
struct Screen {
    tty: bool,
    duration: Duration,
    /// Lines of the last frame drawn on the terminal.
    drawn: usize,
    /// Frames refreshed so far.
    frames: u32,
}

impl Screen {
    fn new(tty: bool, duration: Duration) -> Screen {
        Screen { tty, duration, drawn: 0, frames: 0 }
    }

    fn refresh(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        self.frames += 1;
        if self.tty {
            self.redraw(snapshot)
        } else if self.frames.is_multiple_of(LOG_EVERY_FRAMES) {
            self.log(snapshot)
        } else {
            Ok(())
        }
    }

    /// The last frame: redrawn on a terminal, printed once more elsewhere.
    fn finish(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        if self.tty { self.redraw(snapshot) } else { self.log(snapshot) }
    }

    fn redraw(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        let lines = snapshot.lines(self.duration, true);
        let mut frame = String::new();
        if self.drawn > 0 {
            write!(frame, "\x1b[{}A", self.drawn)?;
        }
        for line in &lines {
            writeln!(frame, "\x1b[2K{line}")?;
        }
        self.drawn = lines.len();
        emit(&frame)
    }

    fn log(&self, snapshot: &Snapshot) -> anyhow::Result<()> {
        let mut block = snapshot.lines(self.duration, false).join("\n");
        block.push_str("\n\n");
        emit(&block)
    }
}

fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("writing to stdout")
}

/// Dispatches received while one set of keys was backlogged.
#[derive(Debug)]
struct Phase {
    keys: KeySet,
    from: Duration,
    to: Duration,
    counts: PerKey,
    total: u64,
}

impl Phase {
    fn share(&self, key: usize) -> Option<f64> {
        (self.keys.contains(key) && self.total > 0).then(|| self.counts[key] as f64 / self.total as f64)
    }
}

/// The phases of a run, in order of their first dispatch. Sets of backlogged
/// keys seen for under 1% of the dispatches (around an add) are left out.
fn phases(log: &[Dispatch]) -> Vec<Phase> {
    let mut phases: Vec<Phase> = Vec::new();
    for dispatch in log {
        let phase = match phases.iter().position(|p| p.keys == dispatch.backlogged) {
            Some(index) => &mut phases[index],
            None => {
                let keys = dispatch.backlogged;
                phases.push(Phase { keys, from: dispatch.at, to: dispatch.at, counts: [0; KEY_COUNT], total: 0 });
                let last = phases.len() - 1;
                &mut phases[last]
            }
        };
        phase.counts[dispatch.key] += 1;
        phase.total += 1;
        phase.to = dispatch.at;
    }
    let floor = (log.len() as u64 / 100).max(1);
    phases.retain(|phase| phase.total >= floor);
    phases
}

fn print_summary(ledger: &Ledger) {
    for line in summary_lines(ledger) {
        println!("{line}");
    }
}

/// The summary of a run: the shares, how far they came from their targets,
/// and how soon the late key was served.
fn summary_lines(ledger: &Ledger) -> Vec<String> {
    let phases = phases(&ledger.log);
    let mut lines = share_lines(ledger, &phases);
    lines.extend(deviation_lines(ledger, &phases));
    lines.extend(late_key_lines(ledger));
    lines
}

/// The table of shares per key and phase (share/target, in percent),
/// beside a FIFO queue's.
fn share_lines(ledger: &Ledger, phases: &[Phase]) -> Vec<String> {
    let added: u64 = ledger.added.iter().sum();
    let received = ledger.log.len();
    let seconds_run = ledger.log.last().map_or(Duration::ZERO, |d| d.at);
    let mut lines = vec![
        String::new(),
        format!("Summary: {received} tasks dispatched in {}, {added} added.", seconds(seconds_run)),
        "Each key's share/target (%) while a set of keys was backlogged; the target".to_owned(),
        "is w_i / Σ w of that set. FIFO: the share a queue in order of arrival gives.".to_owned(),
        String::new(),
    ];
    let mut header = format!("  {:<6} {:>4} {:>7} {:>7}", "key", "w", "added", "sent");
    let mut spans = format!("  {:<6} {:>4} {:>7} {:>7}", "", "", "", "");
    for phase in phases {
        header.push_str(&format!("  {:>11}", format!("{} keys", phase.keys.count())));
        spans.push_str(&format!("  {:>11}", format!("{}-{}", seconds(phase.from), seconds(phase.to))));
    }
    lines.push(format!("{header}  {:>5}", "FIFO"));
    lines.push(spans);
    for (k, key) in KEYS.iter().enumerate() {
        let mut row = format!("  {:<6} {:>4} {:>7} {:>7}", key.name, key.weight, ledger.added[k], ledger.dispatched[k]);
        for phase in phases {
            let pair = match (phase.share(k), phase.keys.target(k)) {
                (Some(share), Some(target)) => format!("{:.1}/{:.1}", share * 100.0, target * 100.0),
                _ => "-".to_owned(),
            };
            row.push_str(&format!("  {pair:>11}"));
        }
        let fifo = (added > 0).then(|| ledger.added[k] as f64 / added as f64 * 100.0);
        row.push_str(&format!("  {:>5}", fifo.map_or("-".to_owned(), |f| format!("{f:.1}"))));
        lines.push(row);
    }
    lines
}

/// How far the shares came from their targets, and what FIFO would have done.
fn deviation_lines(ledger: &Ledger, phases: &[Phase]) -> Vec<String> {
    let worst = phases
        .iter()
        .flat_map(|phase| (0..KEY_COUNT).map(move |k| (phase, k)))
        .filter_map(|(phase, k)| Some((phase, k, (phase.share(k)? - phase.keys.target(k)?).abs())))
        .max_by(|a, b| a.2.total_cmp(&b.2));
    let Some((phase, key, deviation)) = worst else {
        return vec![String::new(), "No task was dispatched: nothing to compare.".to_owned()];
    };
    let added: u64 = ledger.added.iter().sum();
    vec![
        String::new(),
        format!("Every share was within {:.2} points of its weighted target", deviation * 100.0),
        format!("(the largest gap: {}, {} keys backlogged).", KEYS[key].name, phase.keys.count()),
        format!(
            "A FIFO queue would have given {} {} of the dispatches, weights aside.",
            KEYS[NOISY].name,
            percent((added > 0).then(|| ledger.added[NOISY] as f64 / added as f64)),
        ),
    ]
}

/// How soon the late key was first served after it started adding tasks.
fn late_key_lines(ledger: &Ledger) -> Vec<String> {
    let name = KEYS[LATE].name;
    let Some(joined) = ledger.joined[LATE] else {
        return vec![format!("{name} never joined: the run ended first.")];
    };
    let Some(first) = ledger.log.iter().position(|d| d.key == LATE) else {
        return vec![format!("{name} started adding tasks at {} and none was dispatched.", seconds(joined))];
    };
    let before = ledger.log[..first].iter().filter(|d| d.at >= joined).count();
    vec![
        format!("{name} started adding tasks at {}, behind {} tasks;", seconds(joined), backlog_at(ledger, joined)),
        format!(
            "its first was dispatched {:.1} ms later, after {before} dispatch(es) of other keys.",
            (ledger.log[first].at.saturating_sub(joined)).as_secs_f64() * 1000.0,
        ),
    ]
}

/// Tasks added before `at` and not dispatched by then.
fn backlog_at(ledger: &Ledger, at: Duration) -> u64 {
    let preloaded: u64 =
        (0..KEY_COUNT).filter(|&k| ledger.joined[k] == Some(Duration::ZERO)).map(|k| ledger.added[k]).sum();
    let dispatched = ledger.log.iter().take_while(|d| d.at < at).count() as u64;
    preloaded.saturating_sub(dispatched)
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

fn percent(fraction: Option<f64>) -> String {
    fraction.map_or_else(|| "-".to_owned(), |f| format!("{:.1}%", f * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_late_key_is_the_one_with_the_late_role() {
        assert_eq!(KEYS[LATE].role, Role::Late);
        assert_eq!(KEYS[NOISY].role, Role::Noisy);
        assert_eq!(KEYS.iter().filter(|key| key.role != Role::Quiet).count(), 2);
    }

    #[test]
    fn the_noisy_key_adds_nine_tenths_of_the_preload() {
        let plan = preload_plan(800, Duration::from_secs(12));
        let total: u64 = plan.iter().sum();
        assert_eq!(plan[NOISY] * 10, total * 9);
        assert_eq!(plan[LATE], 0);
        // alpha alone would take 5/11 of 9,600 dispatches.
        assert!(plan[0] as f64 >= 9600.0 * 5.0 / 11.0);
    }

    #[test]
    fn interleaving_keeps_every_task_and_mixes_them() {
        let plan = [5, 3, 2, 90, 0];
        let order = interleave(&plan);
        assert_eq!(order.len(), 100);
        assert_eq!(order.iter().filter(|&&k| k == 0).count(), 5);
        assert!(order[..50].contains(&0) && order[50..].contains(&0));
    }

    #[test]
    fn targets_are_shares_of_the_backlogged_weight() {
        let four = (0..4).fold(KeySet::default(), KeySet::with);
        assert_eq!(four.target(0), Some(5.0 / 11.0));
        assert_eq!(four.target(LATE), None);
        assert_eq!(four.with(LATE).target(3), Some(1.0 / 13.0));
    }

    #[test]
    fn bars_mark_the_target() {
        assert_eq!(bar(0.5, Some(0.25), false), format!("{}|{}", "#".repeat(8), "#".repeat(6)));
        assert_eq!(bar(0.0, Some(0.05), false), "  |");
    }

    /// Everything the demo prints fits a terminal of 80 columns and 24
    /// rows (the live view is redrawn in place: a line that wraps would
    /// break it), with the largest numbers a long run gives.
    #[test]
    fn every_line_fits_80_columns_and_a_view_fits_24_rows() {
        let fits = |lines: &[String], what: &str| {
            for line in lines {
                assert!(line.chars().count() <= 80, "{what}: {} columns: {line:?}", line.chars().count());
            }
        };
        let long = Duration::from_secs(3600);
        let plan = preload_plan(100_000, long);
        let address = "a server on 255.255.255.255:65535, store embedded:/tmp/.tmpAbCdEf";
        fits(&intro_lines(address, 1000, 100_000, long, &plan), "intro");
        let all = (0..KEY_COUNT).fold(KeySet::default(), KeySet::with);
        let snapshot = Snapshot {
            elapsed: long,
            window_span: WINDOW,
            dispatched: [99_999_999; KEY_COUNT],
            window: [1, 0, 0, 0, 0],
            backlogged: all,
            joined: [Some(Duration::ZERO); KEY_COUNT],
        };
        for fancy in [false, true] {
            let lines = snapshot.lines(long, fancy);
            fits(&lines, "live view");
            assert!(lines.len() <= 24);
        }
        // Three phases: four keys, five, then four again.
        let mut ledger = Ledger::new(plan);
        let four = (0..4).fold(KeySet::default(), KeySet::with);
        for i in 0..30_000u32 {
            let backlogged = if (10_000..20_000).contains(&i) { all } else { four };
            let key = (i % 5) as usize % if backlogged == all { 5 } else { 4 };
            ledger.log.push(Dispatch { key, at: Duration::from_millis(u64::from(i) * 120), backlogged });
            ledger.dispatched[key] += 1;
        }
        ledger.joined[LATE] = Some(Duration::from_secs(1200));
        let summary = summary_lines(&ledger);
        fits(&summary, "summary");
        assert!(summary.len() <= 24, "{} lines", summary.len());
    }
}
