//! `fairway-lab chaos`: several `fairway serve` nodes on one Cassandra
//! keyspace, clients that record every operation in a history, a nemesis
//! that injects faults on a schedule, and the checker's verdict.
//!
//! `fairway-lab chaos run --scenario S --duration D` runs one scenario;
//! `fairway-lab chaos check HISTORY` checks a history again.
//!
//! The region scenarios (`region-cut`, `region-move`, `region-auto`,
//! `region-failover`) run on
//! the multi-region test bed of `deploy/regions/regions.sh`: each Fairway
//! node in its region's network namespace, on its region's Cassandra node;
//! besides the checker's table they report each fault and the answers each
//! node gave ([`analysis`]).

mod analysis;
mod cassandra;
pub(crate) mod checker;
pub(crate) mod history;
mod nemesis;
mod network;
mod nodes;
mod regions;
mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use rand::SeedableRng;

use fairway::proto::v1 as pb;

use self::cassandra::CassandraNodes;
use self::checker::Report;
use self::history::Entry;
use self::nemesis::{Nemesis, RegionRun, Scenario};
use self::network::Firewall;
use self::nodes::{Launch, MEMBER_TIMEOUT_MS, Node};
use self::regions::RegionBed;
use self::workload::{Client, QUEUE, Recorder, Traffic};

#[derive(Subcommand, Debug)]
pub(super) enum ChaosCommand {
    /// Run a scenario and check its history.
    Run(RunArgs),
    /// Check a history file written by a run.
    Check(CheckArgs),
}

/// The region scenarios need the multi-region test bed of
/// `deploy/regions/regions.sh` (root, network namespaces): a run starts it
/// (`regions.sh up a b`, or `up a b c` for `region-auto`) if it is down,
/// which takes a minute or more, and uses it as it is if it is up with (at
/// least) the regions it needs; it never takes it down (`regions.sh down` does). Their
/// nodes (fixed, whatever `--nodes` says) listen on 10.210.<region>.<n>:7070
/// in their region's namespace and use their region's Cassandra node
/// (10.210.<region>.1:9042); only the keyspace of `--store` is used, made
/// again with one replica per region (NetworkTopologyStrategy).
#[derive(Args, Debug)]
#[command(after_help = "Region scenarios: region-cut and region-move need `deploy/regions/regions.sh up a b`, \
region-auto and region-failover `up a b c`; the run starts the bed itself when it is down (a minute or more), uses it as it is when \
it is up with (at least) those regions, and refuses with a hint (take it down) when it lacks one. It leaves the bed up: \
`bash deploy/regions/regions.sh down` ends it. Only the keyspace of --store is used there (each node uses its \
own region's Cassandra node, 10.210.<region>.1:9042); --nodes does not apply (the scenario places 3 or 4 nodes).")]
pub(super) struct RunArgs {
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// How long faults are injected (then the run heals and drains), e.g. `5m`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// `cassandra://HOST:PORT/KEYSPACE`: the keyspace is dropped and made
    /// again, so use one of the run's own. Region scenarios use its
    /// KEYSPACE only, on the region bed's Cassandra nodes.
    #[arg(long, default_value = "cassandra://127.0.0.1:9042/fairway_chaos")]
    store: String,
    /// Fairway nodes (2 to 5); the region scenarios place their own.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=5))]
    nodes: u32,
    /// Where the history, the node logs and the report go.
    #[arg(long, default_value = "chaos-results")]
    out: PathBuf,
    /// Seed of the nemesis's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The `fairway` binary the nodes run: the one next to this binary by
    /// default, or another build (say, one with a bug the checker must
    /// find).
    #[arg(long)]
    node_binary: Option<PathBuf>,
    /// The script that manages the Cassandra nodes, for the scenarios that
    /// fault them (a cluster of three it started, replication factor 3).
    #[arg(long, default_value = "deploy/cassandra/cassandra.sh")]
    cassandra_script: PathBuf,
    /// The script of the multi-region test bed, for the region scenarios.
    #[arg(long, default_value = "deploy/regions/regions.sh")]
    regions_script: PathBuf,
}

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// A `history.jsonl` written by `fairway-lab chaos run`.
    history: PathBuf,
    /// The lease timeout of the run's nodes.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    lease_timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    fairway::clock::duration_serde::parse(text).map_err(|e| format!("{text:?}: {e} (e.g. 90s, 5m)"))
}

pub(super) async fn run(command: ChaosCommand) -> anyhow::Result<()> {
    let (report, regions) = match command {
        ChaosCommand::Check(args) => {
            let text =
                std::fs::read_to_string(&args.history).with_context(|| format!("read {}", args.history.display()))?;
            let entries = history::parse(&text).map_err(anyhow::Error::msg)?;
            (checker::check(&entries, args.lease_timeout.as_millis() as u64), None)
        }
        ChaosCommand::Run(args) => run_scenario(&args).await?,
    };
    print!("{}", report.table());
    if let Some(regions) = &regions {
        print!("{}", regions.table);
    }
    if !report.passed() {
        bail!("the checker found a violation");
    }
    if let Some(regions) = regions
        && !regions.broken.is_empty()
    {
        bail!("the run broke the region scenario's requirements: {}", regions.broken.join("; "));
    }
    Ok(())
}

/// What a region scenario reports beside the checker's table.
struct RegionOutcome {
    /// The faults, the answers by node, and the requirements' verdict (Markdown).
    table: String,
    /// The requirements broken, in words.
    broken: Vec<String>,
}

/// How long the drain goes on without a delivery while acknowledged adds
/// are still undelivered.
const UNDELIVERED_QUIET: Duration = Duration::from_secs(60);

/// Cassandra nodes in the clusters `deploy/cassandra/cassandra.sh` starts.
const CASSANDRA_NODES: u32 = 3;

async fn run_scenario(args: &RunArgs) -> anyhow::Result<(Report, Option<RegionOutcome>)> {
    if args.duration < Duration::from_secs(5) || args.duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be 5s to 24h, not {:?}", args.duration);
    }
    let scenario = args.scenario;
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    // The region bed first: a run that cannot have it does not start.
    let region_run = match scenario.layout() {
        Some(layout) => Some(RegionRun::new(RegionBed::up(args.regions_script.clone(), layout.regions).await?, layout)),
        None => None,
    };
    // Faults of the environment first: a run that cannot inject them does not start.
    let firewall = if scenario.cuts_the_network() { Some(Firewall::install()?) } else { None };
    let cassandra = if scenario.faults_cassandra() {
        Some(CassandraNodes::find(args.cassandra_script.clone(), CASSANDRA_NODES).await?)
    } else {
        None
    };
    let replicas = if scenario.faults_cassandra() { CASSANDRA_NODES } else { 1 };
    let replication = match &region_run {
        Some(run) => run.layout.replication(),
        None => format!("{{'class': 'SimpleStrategy', 'replication_factor': {replicas}}}"),
    };
    // On the region bed: the home region's Cassandra node, with the keyspace of --store.
    let (store, keyspace) = match &region_run {
        Some(run) => {
            let keyspace = store_keyspace(&args.store)?;
            (format!("cassandra://{}/{keyspace}", run.bed.cassandra(run.layout.home())?), keyspace)
        }
        None => (args.store.clone(), String::new()),
    };
    let store_port = prepare_store(&store, &replication).await?;
    let launch = Launch {
        binary: match &args.node_binary {
            Some(binary) => binary.clone(),
            None => {
                let binary = crate::sibling_fairway()?;
                crate::ensure_built(&binary)?;
                binary
            }
        },
        store: args.store.clone(),
        lease_timeout: scenario.lease_timeout(),
        own_gids: scenario.cuts_the_network(),
    };
    let mut nodes = Vec::new();
    match &region_run {
        Some(run) => {
            for (n, placement) in run.layout.placements(&run.bed, &keyspace)?.into_iter().enumerate() {
                let log = args.out.join(format!("node{n}-{}-{}.log", placement.region, placement.listen));
                eprintln!(
                    "chaos {scenario:?}: node {} in region {} ({})",
                    placement.listen, placement.region, placement.netns
                );
                nodes.push(Node::start_placed(&launch, placement, log)?);
            }
        }
        None => {
            for n in 0..args.nodes {
                nodes.push(Node::start(&launch, n, args.out.join(format!("node{n}.log")))?);
            }
        }
    }
    let addresses: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let regions_of: std::collections::BTreeMap<String, String> =
        nodes.iter().filter_map(|n| Some((n.addr.clone(), n.region()?.to_owned()))).collect();
    let traffic = Arc::new(Traffic::default());
    let mut admin = Client::new(addresses.clone(), 0, traffic.clone());
    let home = region_run.as_ref().map(|run| run.layout.home().to_owned()).unwrap_or_default();
    create_queue(&mut admin, &home).await?;

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
        let client = Client::new(addresses.clone(), p as usize, traffic.clone());
        clients.spawn(workload::produce(p, client, recorder.clone(), adding.clone(), Duration::from_millis(20)));
    }
    for w in 11..=18u32 {
        let client = Client::new(addresses.clone(), w as usize, traffic.clone());
        let busy = scenario.task_time();
        clients.spawn(workload::work(w, client, recorder.clone(), polling.clone(), slow.clone(), busy));
    }

    let end = began + args.duration;
    let rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut nemesis = Nemesis {
        scenario,
        nodes,
        admin,
        recorder: recorder.clone(),
        traffic,
        rng,
        firewall,
        cassandra,
        store_port,
        end,
        regions: region_run,
    };
    let mut last_line = Instant::now();
    while Instant::now() < end {
        nemesis.step().await?;
        if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "chaos {scenario:?}: {:.0} s of {:.0} s, {} Fairway nodes up, {} acknowledged adds",
                began.elapsed().as_secs_f64(),
                args.duration.as_secs_f64(),
                nemesis.nodes_up(),
                recorder.acknowledged_adds(),
            );
            last_line = Instant::now();
        }
    }
    nemesis.heal().await?;
    adding.store(true, Ordering::Release);
    slow.store(false, Ordering::Release);
    eprintln!("chaos {scenario:?}: healed; draining until nothing is delivered for a while");
    // Quiet for longer than an expired lease, a retry's backoff and a takeover.
    let quiet = 2 * scenario.lease_timeout() + Duration::from_millis(2 * MEMBER_TIMEOUT_MS);
    let healed = Instant::now();
    let drain_deadline = healed + Duration::from_secs(600);
    let mut last_line = Instant::now();
    // Quiet counts from the heal at the earliest: a fault may have stopped
    // every delivery for longer than `quiet` (a region cut off). While
    // acknowledged adds wait undelivered, the workers poll on for longer (an
    // ownership that takes a while to settle after the heal is slow, not
    // lost; one that never settles is still lost, for the checker to say).
    let drained = || {
        let quiet_for = recorder.since_last_delivery().min(healed.elapsed());
        quiet_for >= UNDELIVERED_QUIET || (quiet_for >= quiet && recorder.undelivered() == 0)
    };
    while !drained() && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "chaos {scenario:?}: draining, {} deliveries of {} acknowledged adds, {} not delivered yet",
                recorder.deliveries(),
                recorder.acknowledged_adds(),
                recorder.undelivered(),
            );
            last_line = Instant::now();
        }
    }
    polling.store(true, Ordering::Release);
    while clients.join_next().await.is_some() {}
    drop(recorder);
    let answers = nemesis.traffic.answers();
    let faults = nemesis.regions.as_ref().map(|run| run.windows.clone());
    drop(nemesis);
    let entries = collector.await?;
    let report = checker::check(&entries, scenario.lease_timeout().as_millis() as u64);
    let regions = faults.map(|faults| {
        let broken = analysis::violations(&report, &faults, scenario == Scenario::RegionMove);
        RegionOutcome { table: analysis::table(&entries, &faults, &answers, &regions_of, &broken), broken }
    });
    let mut written = report.table();
    if let Some(regions) = &regions {
        written.push_str(&regions.table);
    }
    if scenario == Scenario::RegionFailover {
        let passes = analysis::last_passes(&args.out).context("read the nodes' logs")?;
        written.push_str(&analysis::recovery_point(&passes));
    }
    std::fs::write(args.out.join("report.md"), written).context("write the report")?;
    eprintln!("history: {} ({} operations)", history_path.display(), entries.len());
    Ok((report, regions))
}

/// The keyspace of a `cassandra://HOST:PORT/KEYSPACE` URL.
fn store_keyspace(store: &str) -> anyhow::Result<String> {
    let url: fairway::config::StoreUrl = store.parse().map_err(|e| anyhow::anyhow!("--store: {e}"))?;
    let fairway::config::StoreUrl::Cassandra { keyspace, .. } = url else {
        bail!("--store must be cassandra://HOST:PORT/KEYSPACE: chaos runs several nodes on one store");
    };
    Ok(keyspace)
}

/// The schema (with the keyspace replication `replication`), and no queue
/// left from an earlier run; returns the port Cassandra serves CQL on.
async fn prepare_store(store: &str, replication: &str) -> anyhow::Result<u16> {
    let url: fairway::config::StoreUrl = store.parse().map_err(|e| anyhow::anyhow!("--store: {e}"))?;
    let fairway::config::StoreUrl::Cassandra { contact_point, keyspace } = url else {
        bail!("--store must be cassandra://HOST:PORT/KEYSPACE: chaos runs several nodes on one store");
    };
    let config = fairway::store::cassandra::CassandraConfig::default();
    let session = fairway::store::cassandra::connect_session(&contact_point, &config).await?;
    // Nothing of an earlier run is reused: not its rows, not its schema. A
    // node the last run restarted may still be pulling the schema: the drop
    // waits for the nodes to agree, as the schema's statements do.
    let agreement = fairway::store::cassandra::SCHEMA_AGREEMENT_TIMEOUT;
    fairway::store::cassandra::await_schema_agreement(&session, agreement).await?;
    // A drop under load can outlast the client's timeout and go on in
    // Cassandra: it is asked again (IF EXISTS) until it answers, for a minute.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await {
            // Dropped; the schema's first statement waits for the agreement.
            Ok(_) | Err(scylla::errors::ExecutionError::SchemaAgreementError(_)) => break,
            Err(error) if Instant::now() < deadline => {
                tracing::warn!(%error, "drop the keyspace: asking again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(error).context("drop the keyspace"),
        }
    }
    fairway::store::cassandra::apply_schema(&session, &keyspace, replication).await?;
    let port = contact_point.rsplit(':').next().and_then(|p| p.parse().ok());
    port.with_context(|| format!("the port of {contact_point}"))
}

/// The run's queue, 4 partitions, homed in `home` (empty: the nodes' default).
async fn create_queue(admin: &mut Client, home: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 4, home: home.to_owned() };
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

/// Runs `bash SCRIPT ARGS…` (deploy/cassandra/cassandra.sh, the region bed's
/// deploy/regions/regions.sh) and returns what it printed; a failure says
/// what its stderr said.
async fn run_script(script: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .await
        .with_context(|| format!("run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "bash {} {} failed: {}",
            script.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
