//! `fairway-lab bench`: load generators that drive `fairway serve` processes over
//! real gRPC and report what the design targets (DESIGN §10) ask for, with a
//! plain FIFO queue measured beside Fairway's fair order in the same run.
//!
//! Every scenario starts its own server process per run (a fresh embedded
//! store, or fresh queues on the Cassandra keyspace given), repeats `--runs`
//! times and reports the median; results go to `--out` as `report.json`,
//! `report.md` and PNG plots. `bench latency --server` measures through a
//! node that runs already instead (deploy/regions/bench.sh uses it).

mod drain;
mod fairness;
mod held;
pub(super) mod latency;
mod load;
mod nodes;
pub(super) mod report;
mod secure;
mod server;
mod tenants;
mod throughput;

use std::future::Future;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use fairway::config::{Config, StoreUrl};
use fairway::store::cassandra::apply_schema;

use crate::figures::plot::{self, Chart};
use report::{BenchReport, Measure, ScenarioReport};

#[derive(Subcommand, Debug)]
pub(super) enum BenchCommand {
    /// Add → poll → complete per second through one queue, beside the raw
    /// write rate of the store.
    Throughput(throughput::ThroughputArgs),
    /// Dispatch latency by sync match: add → receipt with pollers waiting.
    Latency(latency::LatencyArgs),
    /// A large backlog filled first, then drained: the drain rate and the
    /// server's peak memory.
    Drain(drain::DrainArgs),
    /// Weights, Zipf keys over partitions, a noisy neighbour and priorities,
    /// each with fair and with FIFO order.
    Fairness(fairness::FairnessArgs),
    /// Two producers bound to fairness prefixes, one trying every trick
    /// (priority, weight, many keys): each one's share of the dispatches,
    /// beside the same producers unbound.
    Tenants(tenants::TenantsArgs),
    /// A key held at its concurrency limit beside many dispatches of others:
    /// the marks above the ack level, parked tasks, metadata and memory.
    HeldKey(held::HeldArgs),
    /// Every scenario with its defaults (drain with `--drain-tasks`).
    Suite(SuiteArgs),
}

/// What every scenario takes.
#[derive(Args, Debug, Clone)]
pub(super) struct Common {
    /// `cassandra://HOST:PORT/KEYSPACE` (the schema is applied if missing);
    /// by default a fresh embedded store per run, in a temporary directory.
    #[arg(long)]
    store: Option<String>,
    /// Runs of each scenario; the report gives each measure's median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    runs: u32,
    /// Where report.json, report.md and the plots go.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The `fairway` binary the measured servers run: the one next to this
    /// binary by default, or another build (an older one, to compare side
    /// by side).
    #[arg(long)]
    server_binary: Option<PathBuf>,
    /// Serve TLS and authenticate every request by API key (certificates
    /// and key made for the run), to measure what they cost.
    #[arg(long)]
    secure: bool,
}

#[derive(Args, Debug)]
pub(super) struct SuiteArgs {
    #[command(flatten)]
    common: Common,
    /// Backlog of the drain scenario.
    #[arg(long, default_value_t = 1_000_000)]
    drain_tasks: u64,
}

pub(super) async fn run(command: BenchCommand) -> anyhow::Result<()> {
    let line = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    // The node measured, when it is not one the bench starts.
    let mut server = None;
    let (common, scenarios) = match command {
        BenchCommand::Throughput(args) => {
            let common = args.common.clone();
            let store = BenchStore::prepare(&common).await?;
            (common, vec![throughput::run(&args, &store).await?])
        }
        BenchCommand::Latency(args) => {
            // Before the store is prepared: `--server` takes none.
            args.check()?;
            server =
                args.measured_server().map(|server| format!("{server} (a running node, not started by the bench)"));
            let store = BenchStore::prepare(&args.common).await?;
            (args.common.clone(), vec![latency::run(&args, &store).await?])
        }
        BenchCommand::Drain(args) => {
            let store = BenchStore::prepare(&args.common).await?;
            (args.common.clone(), vec![drain::run(&args, &store).await?])
        }
        BenchCommand::Tenants(args) => {
            let store = BenchStore::prepare(&args.common).await?;
            (args.common.clone(), vec![tenants::run(&args, &store).await?])
        }
        BenchCommand::HeldKey(args) => {
            let store = BenchStore::prepare(&args.common).await?;
            (args.common.clone(), vec![held::run(&args, &store).await?])
        }
        BenchCommand::Fairness(args) => {
            let store = BenchStore::prepare(&args.common).await?;
            (args.common.clone(), fairness::run(&args, &store).await?)
        }
        BenchCommand::Suite(args) => {
            let common = args.common;
            let store = BenchStore::prepare(&common).await?;
            let mut scenarios = vec![
                throughput::run(&throughput::ThroughputArgs::defaults(&common), &store).await?,
                latency::run(&latency::LatencyArgs::defaults(&common), &store).await?,
            ];
            scenarios.extend(fairness::run(&fairness::FairnessArgs::defaults(&common), &store).await?);
            scenarios.push(drain::run(&drain::DrainArgs::defaults(&common, args.drain_tasks), &store).await?);
            (common, scenarios)
        }
    };
    let store = match (&server, &common.store) {
        (Some(_), _) => "the running node's own (not seen by the bench)".into(),
        (None, Some(store)) => store.clone(),
        (None, None) => "embedded (a fresh temporary directory per run)".into(),
    };
    let server = server.unwrap_or_else(|| "started by the bench for each run (fairway serve on 127.0.0.1)".into());
    let report = BenchReport {
        command: format!("fairway-lab {line}"),
        store,
        server,
        machine: crate::figures::machine(),
        scenarios,
    };
    report.publish(&common.out)
}

/// What one run of a scenario measured, and the charts it can draw.
pub(super) struct RunOutput {
    pub measures: Vec<Measure>,
    pub charts: Vec<Chart>,
}

/// Runs `once` `common.runs` times; draws the first run's charts.
async fn repeat<F, Fut>(name: &str, settings: String, common: &Common, mut once: F) -> anyhow::Result<ScenarioReport>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = anyhow::Result<RunOutput>>,
{
    let mut runs = Vec::new();
    let mut plots = Vec::new();
    for run in 0..common.runs {
        eprintln!("── {name}: run {} of {}", run + 1, common.runs);
        let output = once(run).await.with_context(|| format!("{name}, run {}", run + 1))?;
        if run == 0 {
            for chart in &output.charts {
                match plot::draw(chart, &common.out) {
                    Ok(path) => plots.push(path),
                    Err(error) => eprintln!("warning: {error:#}"),
                }
            }
        }
        runs.push(output.measures);
    }
    Ok(ScenarioReport::new(name, settings, runs, plots))
}

/// The store the runs use.
pub(super) struct BenchStore {
    cassandra: Option<String>,
    /// The binary the runs' servers run (`--server-binary`).
    server_binary: PathBuf,
    /// TLS and an API key, with `--secure`.
    security: Option<std::sync::Arc<secure::BenchSecurity>>,
}

impl BenchStore {
    async fn prepare(common: &Common) -> anyhow::Result<BenchStore> {
        let server_binary = match &common.server_binary {
            Some(binary) => {
                anyhow::ensure!(binary.is_file(), "--server-binary: {} is not a file", binary.display());
                binary.clone()
            }
            None => crate::sibling_fairway()?,
        };
        let security = common.secure.then(secure::BenchSecurity::new).transpose()?.map(std::sync::Arc::new);
        let Some(url) = &common.store else {
            return Ok(BenchStore { cassandra: None, server_binary, security });
        };
        let parsed: StoreUrl = url.parse().map_err(|e: String| anyhow::anyhow!("--store: {e}"))?;
        let StoreUrl::Cassandra { contact_point, keyspace } = &parsed else {
            anyhow::bail!("--store: give a cassandra:// URL, or nothing for a fresh embedded store per run");
        };
        let config = Config::default();
        let session = fairway::store::cassandra::connect_session(contact_point, &config.cassandra).await?;
        apply_schema(&session, keyspace, &config.cassandra.replication).await?;
        Ok(BenchStore { cassandra: Some(url.clone()), server_binary, security })
    }

    /// The same store and binary, the servers serving `security`.
    fn with_security(&self, security: secure::BenchSecurity) -> BenchStore {
        BenchStore {
            cassandra: self.cassandra.clone(),
            server_binary: self.server_binary.clone(),
            security: Some(std::sync::Arc::new(security)),
        }
    }

    /// The same store, the servers running `binary`.
    fn with_binary(&self, binary: PathBuf) -> BenchStore {
        BenchStore { cassandra: self.cassandra.clone(), server_binary: binary, security: self.security.clone() }
    }

    /// A store URL for one server: the Cassandra keyspace, or a new
    /// directory (kept while the guard lives).
    fn for_run(&self) -> anyhow::Result<(String, Option<tempfile::TempDir>)> {
        match &self.cassandra {
            Some(url) => Ok((url.clone(), None)),
            None => {
                let dir = tempfile::tempdir().context("a temporary directory for the store")?;
                Ok((format!("embedded:{}", dir.path().display()), Some(dir)))
            }
        }
    }

    fn url(&self) -> Option<StoreUrl> {
        self.cassandra.as_ref().and_then(|url| url.parse().ok())
    }
}

/// A server config: sync match on or off, and the queues that order by arrival.
fn server_config(sync_match: bool, fifo_queues: &[&str]) -> String {
    let mut config = format!("[matcher]\nsync_match = {sync_match}\n");
    for queue in fifo_queues {
        config.push_str(&format!("\n[queues.\"{queue}\"]\nordering = \"fifo\"\n"));
    }
    config
}

/// A name unique to this run, for queues on a shared keyspace.
fn run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}
