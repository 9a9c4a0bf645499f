//! `fairway chaos`: several `fairway serve` nodes on one Cassandra
//! keyspace, clients that record every operation in a history, a nemesis
//! that injects faults on a schedule, and the checker's verdict.
//!
//! `fairway chaos run --scenario S --duration D` runs one scenario;
//! `fairway chaos check HISTORY` checks a history again.

mod nodes;
mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use rand::Rng;
use rand::SeedableRng;

use fairway::chaos::checker::{self, Report};
use fairway::chaos::history::{self, Entry};
use fairway::proto::v1 as pb;

use self::nodes::{MEMBER_TIMEOUT_MS, Node};
use self::workload::{Client, QUEUE, Recorder};

#[derive(Subcommand, Debug)]
pub enum ChaosCommand {
    /// Run a scenario and check its history.
    Run(RunArgs),
    /// Check a history file written by a run.
    Check(CheckArgs),
}

/// The faults of a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Every 10 s, `kill -9` of a random node, started again 3 s later at its address.
    Kill,
    /// Every 10 s, `SIGSTOP` of a random node for 2 s (less than the member timeout).
    Pause,
    /// Every 15 s, `SIGSTOP` of the owner of partition 0 for 8 s (past the
    /// 3 s member timeout) while new keys are added through the others,
    /// then `SIGCONT`: the deposed owner wakes up with its keeper overdue.
    PauseOwner,
}

impl Scenario {
    /// The nodes' lease timeout. Pausing an owner hurts most with leases
    /// longer than the pause (visits run for minutes): it then wakes up with
    /// no expiry to write, and its keeper runs before any write of its
    /// finds it fenced.
    fn lease_timeout(self) -> Duration {
        match self {
            Scenario::PauseOwner => Duration::from_secs(20),
            Scenario::Kill | Scenario::Pause => Duration::from_secs(3),
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// How long faults are injected (then the run heals and drains), e.g. `5m`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// `cassandra://HOST:PORT/KEYSPACE`; the schema is applied if missing, and the
    /// run's queue is removed from it first.
    #[arg(long, default_value = "cassandra://127.0.0.1:9042/fairway_chaos")]
    store: String,
    /// Fairway nodes (2 to 5).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=5))]
    nodes: u32,
    /// Where the history, the node logs and the report go.
    #[arg(long, default_value = "chaos-results")]
    out: PathBuf,
    /// Seed of the nemesis's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A `history.jsonl` written by `fairway chaos run`.
    history: PathBuf,
    /// The lease timeout of the run's nodes.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    lease_timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    fairway::config::duration_serde::parse(text).map_err(|e| format!("{text:?}: {e} (e.g. 90s, 5m)"))
}

pub async fn run(command: ChaosCommand) -> anyhow::Result<()> {
    let report = match command {
        ChaosCommand::Check(args) => {
            let text =
                std::fs::read_to_string(&args.history).with_context(|| format!("read {}", args.history.display()))?;
            let entries = history::parse(&text).map_err(anyhow::Error::msg)?;
            checker::check(&entries, args.lease_timeout.as_millis() as u64)
        }
        ChaosCommand::Run(args) => run_scenario(&args).await?,
    };
    print!("{}", report.table());
    if !report.passed() {
        bail!("the checker found a violation");
    }
    Ok(())
}

async fn run_scenario(args: &RunArgs) -> anyhow::Result<Report> {
    if args.duration < Duration::from_secs(5) || args.duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be 5s to 24h, not {:?}", args.duration);
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    prepare_store(&args.store).await?;
    let mut nodes = Vec::new();
    for n in 0..args.nodes {
        nodes.push(Node::start(&args.store, args.out.join(format!("node{n}.log")), args.scenario.lease_timeout())?);
    }
    let addresses: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let mut admin = Client::new(addresses.clone(), 0);
    create_queue(&mut admin).await?;

    let began = Instant::now();
    let (recorder, mut received) = Recorder::new(began);
    let history_path = args.out.join("history.jsonl");
    let mut file = std::fs::File::create(&history_path).context("create the history")?;
    let collector = tokio::spawn(async move {
        let mut entries: Vec<Entry> = Vec::new();
        while let Some(entry) = received.recv().await {
            let _ = writeln!(file, "{}", history::line(&entry));
            entries.push(entry);
        }
        entries
    });

    let adding = Arc::new(AtomicBool::new(false));
    let polling = Arc::new(AtomicBool::new(false));
    // Workers slower than the producers while faults run: a backlog waits.
    let slow = Arc::new(AtomicBool::new(true));
    let mut clients = tokio::task::JoinSet::new();
    for p in 1..=4u32 {
        let client = Client::new(addresses.clone(), p as usize);
        clients.spawn(workload::produce(p, client, recorder.clone(), adding.clone(), Duration::from_millis(20)));
    }
    for w in 11..=18u32 {
        let client = Client::new(addresses.clone(), w as usize);
        // Pausing an owner hurts most when workers are busy with long tasks:
        // tasks then wait in the new owner's buffer when the partition moves back.
        let busy = Duration::from_millis(if args.scenario == Scenario::PauseOwner { 1_500 } else { 100 });
        clients.spawn(workload::work(w, client, recorder.clone(), polling.clone(), slow.clone(), busy));
    }

    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let end = began + args.duration;
    let mut last_line = Instant::now();
    while Instant::now() < end {
        nemesis_step(args.scenario, &mut nodes, &mut admin, &recorder, &mut rng, end).await?;
        if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "chaos {:?}: {:.0} s of {:.0} s, {} nodes up",
                args.scenario,
                began.elapsed().as_secs_f64(),
                args.duration.as_secs_f64(),
                nodes.iter().filter(|n| n.is_up() && !n.is_paused()).count()
            );
            last_line = Instant::now();
        }
    }
    for node in &mut nodes {
        node.heal()?;
    }
    recorder.nemesis("healed every node".into());
    adding.store(true, Ordering::Release);
    slow.store(false, Ordering::Release);
    eprintln!("chaos {:?}: healed; draining until nothing is delivered for a while", args.scenario);
    // Quiet for longer than an expired lease, a retry's backoff and a takeover.
    let quiet = 2 * args.scenario.lease_timeout() + Duration::from_millis(2 * MEMBER_TIMEOUT_MS);
    let drain_deadline = Instant::now() + Duration::from_secs(600);
    while recorder.since_last_delivery() < quiet && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    polling.store(true, Ordering::Release);
    while clients.join_next().await.is_some() {}
    drop(recorder);
    let entries = collector.await?;
    let report = checker::check(&entries, args.scenario.lease_timeout().as_millis() as u64);
    std::fs::write(args.out.join("report.md"), report.table()).context("write the report")?;
    eprintln!("history: {} ({} operations)", history_path.display(), entries.len());
    Ok(report)
}

/// One step of the scenario's nemesis; returns once the step is over (or
/// the run's end has come).
async fn nemesis_step(
    scenario: Scenario,
    nodes: &mut [Node],
    admin: &mut Client,
    recorder: &Recorder,
    rng: &mut impl Rng,
    end: Instant,
) -> anyhow::Result<()> {
    let wait = |d: Duration| tokio::time::sleep(d.min(end.saturating_duration_since(Instant::now())));
    match scenario {
        Scenario::Kill => {
            wait(Duration::from_secs(7)).await;
            let victim = rng.random_range(0..nodes.len());
            recorder.nemesis(format!("kill -9 {}", nodes[victim].addr));
            nodes[victim].kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            nodes[victim].restart()?;
            recorder.nemesis(format!("restarted {}", nodes[victim].addr));
        }
        Scenario::Pause => {
            wait(Duration::from_secs(8)).await;
            let victim = rng.random_range(0..nodes.len());
            recorder.nemesis(format!("SIGSTOP {}", nodes[victim].addr));
            nodes[victim].pause(true);
            tokio::time::sleep(Duration::from_secs(2)).await;
            nodes[victim].pause(false);
            recorder.nemesis(format!("SIGCONT {}", nodes[victim].addr));
        }
        Scenario::PauseOwner => {
            wait(Duration::from_secs(7)).await;
            let owner = partition_owner(admin, 0).await;
            let victim = nodes.iter().position(|n| Some(&n.addr) == owner.as_ref());
            let victim = victim.unwrap_or_else(|| rng.random_range(0..nodes.len()));
            recorder.nemesis(format!("SIGSTOP {} (owner of partition 0)", nodes[victim].addr));
            nodes[victim].pause(true);
            tokio::time::sleep(Duration::from_millis(8_000)).await;
            nodes[victim].pause(false);
            recorder.nemesis(format!("SIGCONT {}", nodes[victim].addr));
        }
    }
    Ok(())
}

/// Who owns `partition`, as some node reports it.
async fn partition_owner(admin: &mut Client, partition: u32) -> Option<String> {
    for _ in 0..3 {
        let request = pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 };
        match admin.describe(request).await {
            Some(described) => {
                return described.partitions.get(partition as usize).map(|p| p.owner.clone());
            }
            None => continue,
        }
    }
    None
}

/// The schema, and no queue left from an earlier run.
async fn prepare_store(store: &str) -> anyhow::Result<()> {
    let url: fairway::config::StoreUrl = store.parse().map_err(|e| anyhow::anyhow!("--store: {e}"))?;
    let fairway::config::StoreUrl::Cassandra { contact_point, keyspace } = url else {
        bail!("--store must be cassandra://HOST:PORT/KEYSPACE: chaos runs several nodes on one store");
    };
    let config = fairway::store::cassandra::CassandraConfig::default();
    let session = fairway::store::cassandra::connect_session(&contact_point, &config).await?;
    fairway::store::cassandra::apply_schema(&session, &keyspace, &config.replication).await?;
    for table in ["tasks", "queues", "members"] {
        session.query_unpaged(format!("TRUNCATE {keyspace}.{table}"), ()).await.context("empty the keyspace")?;
    }
    Ok(())
}

async fn create_queue(admin: &mut Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 4 };
        match admin.create_queue(request).await {
            Ok(()) => return Ok(()),
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%error, "create the queue: retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => bail!("could not create the queue: {error}"),
        }
    }
}
