//! `fairway-lab simulate`: a synthetic forge in virtual time, scheduled by the
//! real scheduler code ([`fairway::visits::Scheduler`] on an in-memory
//! store) in two arms run on the same forge, with the same seed:
//! - **fairway**: `SchedulerConfig::default()` (policy weights, then fair
//!   among listers within each policy; blind visits when due) and a queue
//!   fair across fairness keys;
//! - **baseline**: policy weights alone, blind visits on the queue clock,
//!   and a FIFO queue: the reference scheduler's way.
//!
//! Both have the same cooldowns, policy weights, queue length, loaders and
//! per-host limit. The report compares visit lag, useless visits,
//! first-visit delay and each lister's share of visits.

mod arm;
mod eligible;
mod forge;
pub(super) mod grid;
mod metrics;
mod queue;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use fairway::core::visits::{Cooldowns, DAY_MS, Sharing};
use fairway::visits::{BlindVisits, RoundMode, SchedulerConfig};

use arm::{ArmSpec, Capacity};
use forge::{Forge, ForgeParams};
use metrics::ArmSummary;
use queue::Order;
use report::SimReport;

/// 2026-01-01T00:00:00Z: where virtual time starts.
pub(super) const START_MS: i64 = 1_767_225_600_000;

#[derive(Args, Debug, Clone)]
pub(super) struct SimulateArgs {
    /// Origins of the forge (a tenth of them appear during the run).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1_000..=5_000_000))]
    origins: u32,
    /// Listers, from very big to very small (each at least 50 origins on average).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    listers: u32,
    /// Days of virtual time.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=365))]
    days: u32,
    /// Visits that can run at once (the loaders' capacity).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    loaders: u32,
    /// Visits that may run at once on one host (politeness).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    host_limit: u32,
    /// Share of the listers that give no update date (0 to 1).
    #[arg(long, default_value_t = 1.0 / 3.0)]
    undated_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where report.md, report.json and the plots go.
    #[arg(long, default_value = "simulate-results")]
    out: PathBuf,
    /// A node's configuration file: the fairway arm runs its `[scheduler]`
    /// section instead of the defaults (the baseline is unchanged).
    #[arg(long)]
    fairway_config: Option<PathBuf>,
    /// Loaders report no date of their snapshot's newest change: origins
    /// whose lister gives no dates learn their rate from "changed or not"
    /// alone.
    #[arg(long)]
    without_change_dates: bool,
}

/// A scenario, as the arms run it.
#[derive(Clone, Debug)]
pub(super) struct Scenario {
    pub forge: ForgeParams,
    pub capacity: Capacity,
    /// The fairway arm's settings.
    pub fairway: SchedulerConfig,
}

impl SimulateArgs {
    fn scenario(&self) -> anyhow::Result<Scenario> {
        let per_lister = self.origins / self.listers;
        if per_lister < 50 {
            bail!(
                "--listers: {} listers for {} origins is {per_lister} origins per lister; give at most {} listers \
                 (50 origins each on average) or more --origins",
                self.listers,
                self.origins,
                self.origins / 50
            );
        }
        if !(0.0..=1.0).contains(&self.undated_share) {
            bail!("--undated-share: {} is not a share; give 0 to 1", self.undated_share);
        }
        let fairway = fairway_config(self.fairway_config.as_deref())?;
        Ok(Scenario {
            fairway,
            forge: ForgeParams {
                undated_share: self.undated_share,
                origins: self.origins,
                listers: self.listers as usize,
                start: START_MS,
                days: self.days,
                seed: self.seed,
            },
            capacity: Capacity {
                loaders: self.loaders,
                host_limit: self.host_limit,
                change_dates: !self.without_change_dates,
            },
        })
    }
}

/// The fairway arm's settings: the `[scheduler]` section of the node
/// configuration file at `path`, else the defaults.
pub(super) fn fairway_config(path: Option<&std::path::Path>) -> anyhow::Result<SchedulerConfig> {
    match path {
        Some(path) => Ok(fairway::config::Config::load(Some(path), Vec::new(), &[])
            .with_context(|| format!("--fairway-config {}", path.display()))?
            .scheduler),
        None => Ok(SchedulerConfig::default()),
    }
}

/// The two arms, the first with `fairway`'s settings.
pub(super) fn arms(fairway: SchedulerConfig) -> [ArmSpec; 2] {
    let baseline = SchedulerConfig {
        sharing: Sharing::PolicyWeights,
        blind_visits: BlindVisits::QueueClock,
        mode: RoundMode::ReferenceWeights,
        queued_per_key: 0,
        // The reference waits as long after one failure as after two.
        cooldowns: Cooldowns { failed_once: Cooldowns::default().failed, ..Cooldowns::default() },
        ..SchedulerConfig::default()
    };
    [
        ArmSpec { name: "fairway", config: fairway, order: Order::Fair },
        ArmSpec { name: "baseline", config: baseline, order: Order::Fifo },
    ]
}

/// Called with each arm's virtual time.
type Progress<'a> = &'a mut dyn FnMut(&[i64]);

/// Runs both arms, each on its own thread. With `progress`, the caller's
/// thread calls it every 200 ms of wall time with each arm's virtual time
/// (for display only: the arms never read the wall clock).
pub(super) fn simulate(
    scenario: &Scenario,
    progress: Option<Progress<'_>>,
) -> anyhow::Result<(Arc<Forge>, Vec<ArmSummary>)> {
    let forge = Arc::new(Forge::new(scenario.forge.clone()));
    let specs = arms(scenario.fairway.clone());
    let clocks: Vec<AtomicI64> = specs.iter().map(|_| AtomicI64::new(scenario.forge.start)).collect();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = specs
            .iter()
            .zip(&clocks)
            .map(|(spec, clock)| {
                let forge = forge.clone();
                let capacity = scenario.capacity;
                scope.spawn(move || futures::executor::block_on(arm::run(forge, spec, capacity, clock)))
            })
            .collect();
        if let Some(progress) = progress {
            while !handles.iter().all(|h| h.is_finished()) {
                let now: Vec<i64> = clocks.iter().map(|c| c.load(Ordering::Relaxed)).collect();
                progress(&now);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect::<anyhow::Result<Vec<ArmSummary>>>()
    })?;
    Ok((forge, results))
}

/// [`simulate`] with a progress line on stderr (`what` names the run): the
/// virtual day each arm has reached.
pub(super) fn simulate_showing_progress(
    scenario: &Scenario,
    what: &str,
) -> anyhow::Result<(Arc<Forge>, Vec<ArmSummary>)> {
    let days = scenario.forge.days;
    let minutes = i64::from(days) * DAY_MS / 60_000;
    let mut bar =
        crate::figures::progress::Progress::new(format!("{what} (virtual minutes, both arms)"), 2 * minutes as u64);
    let start = scenario.forge.start;
    let mut show = |clocks: &[i64]| {
        let done: i64 = clocks.iter().map(|t| (t - start) / 60_000).sum();
        let reached: Vec<String> =
            clocks.iter().map(|t| format!("{:.1}", (t - start) as f64 / DAY_MS as f64)).collect();
        bar.update(done as u64, &format!("day {} of {days} (fairway / baseline)", reached.join(" / ")));
    };
    let result = simulate(scenario, Some(&mut show))?;
    bar.update(2 * minutes as u64, "done");
    Ok(result)
}

pub(super) async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = args.scenario()?;
    let line = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let started = Instant::now();
    eprintln!(
        "simulate: {} origins, {} listers, {} days, {} loaders, {} visits per host at most, seed {}",
        args.origins, args.listers, args.days, args.loaders, args.host_limit, args.seed
    );
    let (forge, summaries) = simulate_showing_progress(&scenario, "simulate")?;
    let wall = started.elapsed().as_secs_f64();
    let report = SimReport::new(format!("fairway-lab {line}"), &scenario, &forge, summaries, wall);
    report.publish(&args.out)?;
    eprintln!("wall time: {wall:.0} s");
    Ok(())
}

#[cfg(test)]
mod tests;
