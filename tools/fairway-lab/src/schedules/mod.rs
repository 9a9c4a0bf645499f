//! `fairway-lab simulate-schedules`: recurring schedules beyond the workers'
//! capacity, in virtual time, fired three ways (the third in two variants)
//! on the same schedules with the same run durations (same seed):
//! - **EDF**: a run is fired when the product's `decide` says so
//!   (`can_start_by` passed, no run in flight, overlap Skip) into a queue
//!   ordered by the run's `should_start_by` (Fairway's way);
//! - **FIFO**: the same firing, the queue in the order runs were fired
//!   (became due), as cron-like systems do;
//! - **fixed-time**: each schedule fires at fixed ticks whatever its
//!   history (a periodic one at `phase + k * period`, a cron one at its
//!   ticks), a tick skipped while the previous run is pending or running,
//!   FIFO queue (Temporal-style schedules). A periodic schedule ticks
//!   either every period (its staleness bound: a start delayed more than
//!   the previous one then leaves it in ERROR until the run ends) or every
//!   cooldown plus mean duration (the rate `decide` fires it at when
//!   workers are free).
//!
//! Every schedule is scored with the same `health()` in all of them: the
//! constraint is the schedule's, not the policy's.

mod mix;
mod report;
mod sim;

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use mix::{DAY_MS, MINUTE_MS, Mix};
use report::Report;
use sim::{Frame, Policy, PolicySummary};

/// 2026-01-05T00:00:00Z (a Monday): where virtual time starts.
const START_MS: i64 = 1_767_571_200_000;

#[derive(Args, Debug, Clone)]
pub(super) struct ScheduleSimArgs {
    /// Schedules (the mix is in docs/benchmarks.md).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    schedules: u32,
    /// Runs that can run at once.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    workers: u32,
    /// Days of virtual time, the warm-up included.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=60))]
    days: u32,
    /// Days at the start left out of the measures.
    #[arg(long, default_value_t = 1)]
    warmup_days: u32,
    /// Minutes of virtual time between two samples of the schedules in ERROR.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_440))]
    sample_minutes: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the plot of schedules in ERROR over time goes.
    #[arg(long, default_value = "docs/bench/schedules-edf.png")]
    plot: PathBuf,
    /// Print the report as JSON on stdout instead of the markdown table.
    #[arg(long)]
    json: bool,
}

impl ScheduleSimArgs {
    fn frame(&self) -> anyhow::Result<Frame> {
        if self.warmup_days >= self.days {
            bail!("--warmup-days {} leaves nothing of --days {} to measure", self.warmup_days, self.days);
        }
        Ok(Frame {
            workers: self.workers,
            start: START_MS,
            measure_from: START_MS + i64::from(self.warmup_days) * DAY_MS,
            end: START_MS + i64::from(self.days) * DAY_MS,
            sample_every: i64::from(self.sample_minutes) * MINUTE_MS,
            trace: false,
        })
    }
}

/// Called with each policy's virtual time.
type Progress<'a> = &'a mut dyn FnMut(&[i64]);

/// Runs the four policies on `mix`, each on its own thread.
pub(crate) fn simulate(mix: &Mix, frame: Frame, progress: Option<Progress<'_>>) -> anyhow::Result<Vec<PolicySummary>> {
    let clocks: Vec<AtomicI64> = Policy::ALL.iter().map(|_| AtomicI64::new(frame.start)).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = Policy::ALL
            .iter()
            .zip(&clocks)
            .map(|(&policy, clock)| scope.spawn(move || sim::run(mix, policy, frame, clock)))
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
            .collect::<anyhow::Result<Vec<PolicySummary>>>()
    })
}

pub(super) fn run(args: ScheduleSimArgs) -> anyhow::Result<()> {
    let frame = args.frame()?;
    let line = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let started = Instant::now();
    let mix = Mix::new(args.schedules, args.seed, START_MS)?;
    let capacity = f64::from(args.workers) * DAY_MS as f64;
    let needed = mix.needed_ms_per_day() / capacity;
    let eager = mix.eager_ms_per_day() / capacity;
    eprintln!(
        "simulate-schedules: {} schedules, {} workers, {} days ({} of warm-up), seed {}; work the constraints \
         need: {needed:.2}× what the workers can do (eager firing on cooldown: {eager:.2}×)",
        args.schedules, args.workers, args.days, args.warmup_days, args.seed
    );
    let minutes = i64::from(args.days) * DAY_MS / MINUTE_MS;
    let total = Policy::ALL.len() as u64 * minutes as u64;
    let mut bar = crate::figures::progress::Progress::new("simulate-schedules (virtual minutes, four policies)", total);
    let mut show = |clocks: &[i64]| {
        let done: i64 = clocks.iter().map(|t| (t - START_MS) / MINUTE_MS).sum();
        let days: Vec<String> =
            clocks.iter().map(|t| format!("{:.1}", (t - START_MS) as f64 / DAY_MS as f64)).collect();
        bar.update(
            done as u64,
            &format!("day {} of {} (EDF / FIFO / fixed P / fixed c+d)", days.join(" / "), args.days),
        );
    };
    let summaries = simulate(&mix, frame, Some(&mut show))?;
    bar.update(total, "done");
    let wall = started.elapsed().as_secs_f64();
    let report = Report::new(format!("fairway-lab {line}"), &args, &mix, needed, eager, summaries, wall);
    report.publish(&args.plot, args.json)?;
    eprintln!("wall time: {wall:.1} s");
    Ok(())
}

#[cfg(test)]
mod tests;
