//! Latency: pollers wait, a producer adds tasks one by one at a steady rate
//! (open loop), and each task's time from the add being sent to its receipt
//! by a poller is recorded, beside the time of each AddTask call as the
//! producer sees it. With pollers waiting and no backlog, tasks go by sync
//! match: the figure is the dispatch latency of design §10.
//!
//! By default each run starts its own server. With `--server` the runs go
//! through a node that is already running (one of a deployment, a region of
//! `deploy/regions`): the client may sit in one region and the queue's home
//! in another, so that the figures include the forwarding between them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use fairway::model::validate;
use fairway::proto::v1 as pb;

use super::report::{Bound, Measure, ScenarioReport};
use super::server::{BenchServer, Client, connect, create_queue_in, wait_for_owners};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::plot::{Chart, Series};
use crate::figures::progress::Progress;
use crate::figures::stats::{Pace, cdf, quantile, sorted};

/// How long the pollers may wait for the next task, and the run for its
/// pollers to be waiting, before the run fails.
const STALL: Duration = Duration::from_secs(60);

#[derive(Args, Debug, Clone)]
pub(crate) struct LatencyArgs {
    #[command(flatten)]
    pub common: Common,
    /// Tasks added, one AddTask each.
    #[arg(long, default_value_t = 5_000)]
    tasks: u64,
    /// Adds per second.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Pollers waiting. Enough that one is waiting for every task added while
    /// a lease write is in flight (rate × write latency), or tasks queue up;
    /// through a node that forwards to another region, add the round trips a
    /// poller spends away after each task (rate × 3 round trips).
    #[arg(long, default_value_t = 64)]
    pollers: u32,
    /// Measure through a running node at HOST:PORT (plain gRPC) instead of
    /// starting a server per run: the producer and the pollers all call it.
    /// Not with --store, --server-binary or --secure (the node has its own
    /// store and settings).
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// With --server: the queue to measure, the same for every run. It must
    /// exist unless --create-home is given. Default: a fresh queue per run
    /// (latency-…), created through the server.
    #[arg(long, value_name = "NAME")]
    queue: Option<String>,
    /// With --server: create the queue homed in REGION (a region with a live
    /// node); a --queue that exists already must be homed there. Default: the
    /// server's cluster.default_home, else its region.
    #[arg(long, value_name = "REGION")]
    create_home: Option<String>,
    /// Partitions of a queue the bench creates (1 to 256; default 1). A
    /// --queue that exists already must have as many, if given.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    partitions: Option<u32>,
}

impl LatencyArgs {
    pub(crate) fn defaults(common: &Common) -> LatencyArgs {
        LatencyArgs {
            common: common.clone(),
            tasks: 5_000,
            rate: 500.0,
            pollers: 64,
            server: None,
            queue: None,
            create_home: None,
            partitions: None,
        }
    }

    /// Checks the flags together; the error names the flag at fault. Before
    /// anything is prepared, so that a bad combination touches no store.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.tasks == 0 {
            bail!("--tasks must be at least 1");
        }
        if self.pollers == 0 {
            bail!("--pollers must be at least 1");
        }
        if !(self.rate > 0.0 && self.rate <= 100_000.0) {
            bail!("--rate must be in (0, 100000], not {}", self.rate);
        }
        self.remote().map(|_| ())
    }

    /// The running node to measure through, with `--server`.
    fn remote(&self) -> anyhow::Result<Option<Remote>> {
        let Some(raw) = &self.server else {
            for (flag, given) in [("--queue", self.queue.is_some()), ("--create-home", self.create_home.is_some())] {
                if given {
                    bail!(
                        "{flag} goes with --server: without it the bench starts its own server and a fresh queue per run"
                    );
                }
            }
            return Ok(None);
        };
        let server = server_address(raw)?;
        let not_with = |flag: &str, why: &str| anyhow::anyhow!("{flag} does not go with --server: {why}");
        if self.common.store.is_some() {
            return Err(not_with("--store", "the node at --server serves its own store"));
        }
        if self.common.server_binary.is_some() {
            return Err(not_with("--server-binary", "the bench starts no server"));
        }
        if self.common.secure {
            return Err(not_with(
                "--secure",
                "the bench calls the node in plain gRPC (it makes no certificates for it)",
            ));
        }
        let queue = match &self.queue {
            Some(name) => Some(validate::queue_name("--queue", name).map_err(|e| anyhow::anyhow!("{e}"))?.to_string()),
            None => None,
        };
        let home = match &self.create_home {
            Some(region) if region.is_empty() => bail!("--create-home: give a region, e.g. --create-home a"),
            Some(region) => Some(validate::region("--create-home", region).map_err(|e| anyhow::anyhow!("{e}"))?),
            None => None,
        };
        Ok(Some(Remote { server, queue, home, partitions: self.partitions }))
    }

    /// The node `--server` names, if given (for the report).
    pub(crate) fn measured_server(&self) -> Option<&str> {
        self.server.as_deref()
    }
}

/// `--server` as HOST:PORT (an `http://` in front is allowed).
fn server_address(raw: &str) -> anyhow::Result<String> {
    let example = "give HOST:PORT, e.g. --server 10.210.1.2:7070";
    let address = raw.trim().strip_prefix("http://").unwrap_or(raw.trim()).trim_end_matches('/');
    if address.contains("://") {
        bail!("--server {raw:?}: {example} (plain gRPC: the bench does not call a server over TLS)");
    }
    let Some((host, port)) = address.rsplit_once(':') else { bail!("--server {raw:?}: no port; {example}") };
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        bail!("--server {raw:?}: no host; {example}");
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(address.to_owned()),
        _ => bail!("--server {raw:?}: the port must be 1 to 65535; {example}"),
    }
}

/// A running node the runs go through.
#[derive(Debug, Clone, PartialEq)]
struct Remote {
    server: String,
    /// `--queue`: the same for every run; none: a fresh one per run.
    queue: Option<String>,
    /// `--create-home`.
    home: Option<String>,
    /// `--partitions`.
    partitions: Option<u32>,
}

impl Remote {
    async fn connect(&self) -> anyhow::Result<Client> {
        tokio::time::timeout(Duration::from_secs(10), connect(&self.server))
            .await
            .with_context(|| format!("--server {}: no connection within 10 s", self.server))?
            .with_context(|| format!("--server {}", self.server))
    }

    /// What creating `queue` is, for its errors.
    fn creating(&self, queue: &str) -> String {
        match &self.home {
            Some(home) => format!("--create-home {home}: create queue {queue} homed in {home} through {}", self.server),
            None => format!("create queue {queue} through {} (homed where the server says)", self.server),
        }
    }

    /// The queue of a run: `--queue` as it is (created if missing with
    /// `--create-home`, and checked against the flags), or a fresh one.
    async fn queue(&self, client: &mut Client) -> anyhow::Result<(String, pb::DescribeQueueResponse)> {
        let home = self.home.as_deref().unwrap_or("");
        let partitions = self.partitions.unwrap_or(1);
        let Some(queue) = &self.queue else {
            let queue = format!("latency-{}", run_id());
            create_queue_in(client, &queue, partitions, home).await.with_context(|| self.creating(&queue))?;
            return Ok((queue.clone(), describe(client, &queue).await?));
        };
        let existing = client.describe_queue(pb::DescribeQueueRequest { queue: queue.clone(), top_keys: 0 }).await;
        match existing {
            Ok(_) => wait_for_owners(client, queue).await?,
            Err(status) if status.code() == tonic::Code::NotFound && self.home.is_some() => {
                create_queue_in(client, queue, partitions, home).await.with_context(|| self.creating(queue))?;
            }
            Err(status) if status.code() == tonic::Code::NotFound => {
                bail!("--queue {queue}: no such queue at {}; give --create-home REGION to create it", self.server)
            }
            Err(status) => bail!("--queue {queue}: DescribeQueue at {}: {}", self.server, status.message()),
        }
        let state = describe(client, queue).await?;
        if let Some(home) = &self.home
            && state.home != *home
        {
            bail!("--create-home {home}: queue {queue} exists already, homed in {:?}", state.home);
        }
        if let Some(partitions) = self.partitions
            && state.partitions.len() != partitions as usize
        {
            bail!(
                "--partitions {partitions}: queue {queue} exists already, with {} partitions",
                state.partitions.len()
            );
        }
        Ok((queue.clone(), state))
    }
}

async fn describe(client: &mut Client, queue: &str) -> anyhow::Result<pb::DescribeQueueResponse> {
    let request = pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 };
    Ok(client.describe_queue(request).await.with_context(|| format!("DescribeQueue {queue}"))?.into_inner())
}

/// Where the runs go: servers the bench starts, or a running node.
enum Target<'a> {
    Started(&'a BenchStore),
    Remote(&'a Remote),
}

pub(crate) async fn run(args: &LatencyArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    args.check()?;
    let remote = args.remote()?;
    let pace = format!(
        "{} tasks added one by one at {}/s (open loop), {} pollers waiting (each completes its task aside and \
         polls again at once), sync match on",
        args.tasks, args.rate, args.pollers
    );
    let partitions = args.partitions.unwrap_or(1);
    let Some(remote) = remote else {
        let settings = match partitions {
            1 => format!("{pace}, one partition"),
            n => format!("{pace}, {n} partitions"),
        };
        let target_ms = Some(if store.url().is_some() { 20.0 } else { 5.0 });
        let target = Target::Started(store);
        return repeat("latency (sync match)", settings, &args.common, |run| once(args, &target, run, target_ms)).await;
    };
    // The queue as it is before the first run, for the report.
    let mut client = remote.connect().await?;
    let queue = match &remote.queue {
        Some(name) => {
            let (_, state) = remote.queue(&mut client).await?;
            format!("queue {name} ({})", describe_layout(&state, &remote.server))
        }
        None => format!(
            "a fresh queue per run ({} partition(s), home {})",
            partitions,
            remote.home.as_deref().map_or("the server's default".to_owned(), |h| format!("{h:?}"))
        ),
    };
    let settings = format!(
        "{pace}; through the running node {} (not started by the bench; its store and config are its own), {queue}",
        remote.server
    );
    let target = Target::Remote(&remote);
    repeat("latency (sync match)", settings, &args.common, |run| once(args, &target, run, None)).await
}

/// "home "a", 1 partition(s) owned by 10.210.1.2:7070 (forwarded)".
fn describe_layout(state: &pb::DescribeQueueResponse, server: &str) -> String {
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for partition in &state.partitions {
        let owner = match (partition.state.as_str(), partition.owner.as_str()) {
            ("active", _) => format!("{server} itself"),
            (_, "") => "nobody".to_owned(),
            (_, owner) => format!("{owner} (forwarded)"),
        };
        *owners.entry(owner).or_default() += 1;
    }
    let owners: Vec<String> = owners.into_iter().map(|(owner, n)| format!("{n} by {owner}")).collect();
    format!(
        "home {:?}, {} partition(s) owned: {}",
        state.home,
        state.partitions.len(),
        if owners.is_empty() { "none".to_owned() } else { owners.join(", ") }
    )
}

/// Pollers waiting for tasks of `queue`: at the node `client` calls, and at
/// the other nodes that own the queue's partitions, where that node forwards
/// its polls. `None` when an owner cannot be asked.
async fn waiting_pollers(
    client: &mut Client,
    queue: &str,
    owners: &mut BTreeMap<String, Option<Client>>,
) -> anyhow::Result<Option<u32>> {
    let state = describe(client, queue).await?;
    let mut waiting = state.waiting_pollers;
    let elsewhere: Vec<String> = state
        .partitions
        .iter()
        .filter(|p| p.state != "active" && !p.owner.is_empty())
        .map(|p| p.owner.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for owner in elsewhere {
        let connection = match owners.get(&owner) {
            Some(connection) => connection.clone(),
            None => {
                let connected = match tokio::time::timeout(Duration::from_secs(3), connect(&owner)).await {
                    Ok(Ok(client)) => Some(client),
                    _ => {
                        eprintln!(
                            "warning: cannot reach {owner}, owner of a partition of {queue}, to see its waiting pollers"
                        );
                        None
                    }
                };
                owners.insert(owner.clone(), connected.clone());
                connected
            }
        };
        let Some(mut owner_client) = connection else { return Ok(None) };
        waiting += describe(&mut owner_client, queue).await?.waiting_pollers;
    }
    Ok(Some(waiting))
}

/// The server the runs call, for errors.
fn server_name(target: &Target<'_>, started: Option<&BenchServer>) -> String {
    match (target, started) {
        (Target::Remote(remote), _) => remote.server.clone(),
        (Target::Started(_), Some(server)) => server.addr.clone(),
        (Target::Started(_), None) => "the server".to_owned(),
    }
}

/// A CompleteTask sent aside.
type Completion = JoinHandle<Result<(), tonic::Status>>;

/// Nanoseconds since `epoch`.
fn nanos_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

async fn once(args: &LatencyArgs, target: &Target<'_>, run: u32, target_ms: Option<f64>) -> anyhow::Result<RunOutput> {
    let partitions = args.partitions.unwrap_or(1);
    let (server, mut client, queue) = match target {
        Target::Started(store) => {
            let server = BenchServer::start(store, &server_config(true, &[]))?;
            let queue = format!("latency-{}", run_id());
            let mut client = server.client().await?;
            create_queue_in(&mut client, &queue, partitions, "").await?;
            (Some(server), client, queue)
        }
        Target::Remote(remote) => {
            let mut client = remote.connect().await?;
            let (queue, _) = remote.queue(&mut client).await?;
            (None, client, queue)
        }
    };
    // Tasks carry this run's tag: those of another (a shared queue, a lease
    // of an earlier run that ran out) are completed and not counted.
    let tag: u64 = rand::random();

    let epoch = Instant::now();
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(args.tasks as usize)));
    let received = Arc::new(AtomicU64::new(0));
    let foreign = Arc::new(AtomicU64::new(0));
    // When the adds began or a task last came (ns since epoch); 0: not yet.
    let progressed = Arc::new(AtomicU64::new(0));
    let completions: Arc<Mutex<Vec<Completion>>> = Arc::default();
    let pollers: Vec<_> = (0..args.pollers)
        .map(|_| {
            let (mut client, queue) = (client.clone(), queue.clone());
            let (latencies, received, total) = (latencies.clone(), received.clone(), args.tasks);
            let (foreign, progressed, completions) = (foreign.clone(), progressed.clone(), completions.clone());
            tokio::spawn(async move {
                while received.load(Ordering::Relaxed) < total {
                    let last = progressed.load(Ordering::Relaxed);
                    if last > 0 && nanos_since(epoch).saturating_sub(last) > STALL.as_nanos() as u64 {
                        bail!(
                            "no task received for {} s ({} of {total} received)",
                            STALL.as_secs(),
                            received.load(Ordering::Relaxed)
                        );
                    }
                    let request = pb::PollTaskRequest {
                        queue: queue.clone(),
                        worker_id: "latency".into(),
                        max_wait: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
                    };
                    let Some(task) = client.poll_task(request).await?.into_inner().task else { continue };
                    let now = nanos_since(epoch);
                    let ours = task.payload.len() == 16 && task.payload[8..16] == tag.to_le_bytes();
                    if ours {
                        let sent = u64::from_le_bytes(task.payload[..8].try_into()?);
                        latencies.lock().await.push(now.saturating_sub(sent) as f64 / 1e6);
                        received.fetch_add(1, Ordering::Relaxed);
                        progressed.store(now, Ordering::Relaxed);
                    } else {
                        foreign.fetch_add(1, Ordering::Relaxed);
                    }
                    // Completed aside, so that the poller waits again at once.
                    let mut completer = client.clone();
                    let completion = tokio::spawn(async move {
                        let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
                        completer.complete_task(complete).await.map(|_| ())
                    });
                    // Another run's task is not this run's business if its lease is gone.
                    if ours {
                        completions.lock().await.push(completion);
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    // The pollers wait before the first add.
    let mut owners = BTreeMap::new();
    let waiting_since = Instant::now();
    loop {
        // A poller that ended before the first add met an error: it is the run's.
        if let Some(ended) = pollers.iter().position(JoinHandle::is_finished) {
            let outcome = pollers.into_iter().nth(ended).expect("a poller").await?;
            return Err(outcome.err().unwrap_or_else(|| anyhow::anyhow!("a poller ended before the first add")))
                .with_context(|| format!("polling {queue} through {}", server_name(target, server.as_ref())));
        }
        match waiting_pollers(&mut client, &queue, &mut owners).await? {
            Some(waiting) if waiting >= args.pollers => break,
            Some(waiting) if waiting_since.elapsed() > STALL => {
                bail!("only {waiting} of the {} pollers wait on {queue} after {} s", args.pollers, STALL.as_secs())
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            None => {
                // An owner out of reach: give the pollers time to get there.
                tokio::time::sleep(Duration::from_secs(3)).await;
                break;
            }
        }
    }
    let pace = Pace::new(args.rate);
    let sync_matched = Arc::new(AtomicU64::new(0));
    let mut adds = Vec::with_capacity(args.tasks as usize);
    let mut progress = Progress::new(format!("latency, run {}", run + 1), args.tasks);
    progressed.store(nanos_since(epoch).max(1), Ordering::Relaxed);
    for n in 0..args.tasks {
        pace.wait_for(n).await;
        let (mut client, queue, sync_matched) = (client.clone(), queue.clone(), sync_matched.clone());
        adds.push(tokio::spawn(async move {
            let sent = nanos_since(epoch);
            let mut payload = sent.to_le_bytes().to_vec();
            payload.extend_from_slice(&tag.to_le_bytes());
            let spec = pb::TaskSpec { fairness_key: format!("k{}", n % 16), payload, ..Default::default() };
            let added = client.add_task(pb::AddTaskRequest { queue, task: Some(spec) }).await?.into_inner();
            let took = nanos_since(epoch).saturating_sub(sent);
            if added.sync_matched {
                sync_matched.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(took as f64 / 1e6)
        }));
        progress.update(received.load(Ordering::Relaxed), "");
    }
    let mut add_times = Vec::with_capacity(adds.len());
    for add in adds {
        add_times.push(add.await??);
    }
    for poller in pollers {
        poller.await??;
    }
    progress.update(args.tasks, "");
    // Every lease ended, so that no task of this run comes back to another.
    for completion in std::mem::take(&mut *completions.lock().await) {
        completion.await?.context("CompleteTask")?;
    }
    if let Some(server) = server {
        server.stop().await?;
    }
    let foreign = foreign.load(Ordering::Relaxed);
    if foreign > 0 {
        eprintln!("note: {foreign} task(s) of {queue} not added by this run were received and completed");
    }

    let latencies = sorted(std::mem::take(&mut *latencies.lock().await));
    let add_times = sorted(add_times);
    let p99 = Measure::new("p99 add → receipt", "ms", quantile(&latencies, 0.99));
    let measures = vec![
        Measure::new("p50 add → receipt", "ms", quantile(&latencies, 0.5)),
        match target_ms {
            Some(target_ms) => p99.target(Bound::AtMost(target_ms)),
            None => p99,
        },
        Measure::new("p99.9 add → receipt", "ms", quantile(&latencies, 0.999)),
        Measure::new("max add → receipt", "ms", quantile(&latencies, 1.0)),
        Measure::new(
            "tasks handed over by sync match",
            "%",
            100.0 * sync_matched.load(Ordering::Relaxed) as f64 / args.tasks as f64,
        ),
        Measure::new("p50 AddTask call", "ms", quantile(&add_times, 0.5)),
        Measure::new("p99 AddTask call", "ms", quantile(&add_times, 0.99)),
        Measure::new("max AddTask call", "ms", quantile(&add_times, 1.0)),
    ];
    let through = match target {
        Target::Started(_) => String::new(),
        Target::Remote(remote) => format!(" through {}", remote.server),
    };
    let chart = Chart {
        file: "latency-cdf.png".into(),
        title: "Sync-match dispatch latency (add sent → task received) and AddTask call time".into(),
        x_label: "milliseconds (log scale)".into(),
        y_label: "fraction of tasks".into(),
        panels: vec![(
            format!("{} tasks at {}/s, {} pollers{through}", args.tasks, args.rate, args.pollers),
            vec![Series::new("sync match", cdf(&latencies)), Series::new("AddTask call", cdf(&add_times))],
        )],
        log_x: true,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: LatencyArgs,
    }

    fn parse(line: &[&str]) -> Result<LatencyArgs, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("latency").chain(line.iter().copied())).map_err(|e| e.to_string())?;
        cli.args.check().map_err(|e| e.to_string())?;
        Ok(cli.args)
    }

    fn refused(line: &[&str], flag: &str) {
        let error = parse(line).expect_err("refused");
        assert!(error.contains(flag), "{line:?}: {error:?} names {flag}");
    }

    #[test]
    fn without_server_the_bench_starts_its_own() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.remote().unwrap(), None);
        assert_eq!(args.measured_server(), None);
        refused(&["--queue", "q"], "--queue");
        refused(&["--create-home", "a"], "--create-home");
        refused(&["--tasks", "0"], "--tasks");
        refused(&["--rate", "0"], "--rate");
    }

    #[test]
    fn a_server_is_host_and_port() {
        let args = parse(&["--server", "10.210.2.2:7070", "--queue", "q", "--create-home", "a"]).unwrap();
        let remote = args.remote().unwrap().unwrap();
        assert_eq!(remote.server, "10.210.2.2:7070");
        assert_eq!((remote.queue.as_deref(), remote.home.as_deref()), (Some("q"), Some("a")));
        assert_eq!(
            parse(&["--server", "http://localhost:7070/"]).unwrap().remote().unwrap().unwrap().server,
            "localhost:7070"
        );
        for bad in ["10.210.2.2", ":7070", "10.210.2.2:0", "10.210.2.2:x", "https://10.210.2.2:7070", ""] {
            refused(&["--server", bad], "--server");
        }
    }

    #[test]
    fn flags_of_started_servers_do_not_go_with_a_server() {
        let server = ["--server", "127.0.0.1:7070"];
        refused(&[&server[..], &["--store", "cassandra://127.0.0.1:9042/x"]].concat(), "--store");
        refused(&[&server[..], &["--server-binary", "/bin/true"]].concat(), "--server-binary");
        refused(&[&server[..], &["--secure"]].concat(), "--secure");
        refused(&[&server[..], &["--queue", "no spaces"]].concat(), "--queue");
        refused(&[&server[..], &["--create-home", "a b"]].concat(), "--create-home");
        refused(&[&server[..], &["--create-home", ""]].concat(), "--create-home");
        refused(&[&server[..], &["--partitions", "0"]].concat(), "--partitions");
        refused(&[&server[..], &["--partitions", "257"]].concat(), "--partitions");
    }
}
