//! `fairway-lab simulate-imports`: a multi-tenant import workload (jobs of
//! 100 to 1,000,000 records split in chunks, Zipf tenants, Poisson
//! arrivals) in virtual time, through the same worker pool in four orders:
//! the data-import chunk ranker's (every waiting chunk scored at every
//! pick, its formulas and defaults), and Fairway's partition engine with
//! the tenant as fairness key, charging each chunk as one task, as its
//! records, or as its job's size on the log curve, and with the job as
//! fairness key on the log curve. Same jobs, same seed.
//!
//! It reports what users of an import queue ask for (small jobs' completion
//! time, the longest wait of any chunk, tenants' shares of the workers) and
//! what a pick costs each order at 1,000 and 100,000 waiting chunks (wall
//! time on this machine), and draws the completion times and waits.

mod orders;
mod ranker;
mod sim;
#[cfg(test)]
mod tests;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::figures::plot::{self, Chart, Series};
use crate::figures::stats::cdf;
use orders::{Charge, FairwayOrder, KeyBy, Order, RankerOrder};
use sim::Figures;
use workload::{Chunk, Shape, Workload};

#[derive(Args, Debug, Clone)]
pub(super) struct ImportSimArgs {
    /// Tenants, drawn by Zipf.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    tenants: u32,
    /// The Zipf exponent of tenants' shares of the jobs.
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    /// Jobs, of 100 to 1,000,000 records (log-uniform).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: u32,
    /// Records per chunk.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    chunk_records: u64,
    /// Workers processing chunks at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// Records a worker processes per second.
    #[arg(long, default_value_t = 1_000.0)]
    records_per_second: f64,
    /// Work offered over the workers' capacity while jobs arrive (above 1,
    /// a backlog builds, and the order matters).
    #[arg(long, default_value_t = 1.2)]
    load: f64,
    /// The ranker's extreme age: past it a chunk goes before everything
    /// (480 minutes in the ranker; this workload lasts hours, not days).
    #[arg(long, default_value_t = 60.0)]
    extreme_after_minutes: f64,
    /// The `max_wait` of the Fairway arm with one: past it a chunk goes to
    /// the front, oldest first (the extreme age, as Fairway bounds it).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=43_200))]
    max_wait_minutes: u32,
    /// The `group_lead` of the Fairway arm that keys chunks by job in a
    /// group per tenant: the work (in costs; a chunk of the largest job
    /// costs 1,000) a tenant may run ahead of its share so that its jobs
    /// with nothing waiting go first.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    group_lead: u64,
    /// The `age_boost` of the Fairway arm with cost and age (key job in its
    /// tenant's group, the `group_lead`, the `max_wait`): strides of a
    /// weight-1 key an old chunk competes ahead of its place.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    age_boost: u32,
    /// Minutes of virtual time per window of the tenants' shares.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_440))]
    window_minutes: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Picks timed per order and backlog size (0: no timing).
    #[arg(long, default_value_t = 300)]
    timed_picks: u32,
    /// Where report.md, report.json and the plot go.
    #[arg(long, default_value = "bench-results/imports")]
    out: PathBuf,
}

impl ImportSimArgs {
    fn shape(&self) -> anyhow::Result<Shape> {
        let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(anyhow::anyhow!("{what}")) };
        check(self.zipf.is_finite() && (0.0..=4.0).contains(&self.zipf), "--zipf must be 0 to 4")?;
        check(
            self.records_per_second.is_finite() && self.records_per_second >= 1.0,
            "--records-per-second must be at least 1",
        )?;
        check(self.load.is_finite() && (0.1..=10.0).contains(&self.load), "--load must be 0.1 to 10")?;
        check(
            self.extreme_after_minutes.is_finite() && self.extreme_after_minutes >= 1.0,
            "--extreme-after-minutes must be at least 1",
        )?;
        Ok(Shape {
            tenants: self.tenants as usize,
            zipf: self.zipf,
            jobs: self.jobs as usize,
            chunk_records: self.chunk_records,
            records_per_second: self.records_per_second,
            workers: self.workers as usize,
            load: self.load,
            seed: self.seed,
        })
    }
}

/// An order compared: its name in the tables, the shorter one of its curve
/// in the plot (`None`: not drawn, its curve lies on another's), the order.
type Arm = (String, Option<&'static str>, Box<dyn Order>);

/// The orders compared.
fn arms(args: &ImportSimArgs) -> Vec<Arm> {
    let max_wait = Duration::from_secs(u64::from(args.max_wait_minutes) * 60);
    let fairway = |key, charge, age: Option<(Duration, u32)>| -> Box<dyn Order> {
        Box::new(FairwayOrder::new(key, charge, args.chunk_records, age))
    };
    let grouped = KeyBy::JobInTenant { tenants: args.tenants as usize, lead: args.group_lead };
    vec![
        (
            "chunk ranker (reference)".into(),
            Some("chunk ranker"),
            Box::new(RankerOrder::new(args.extreme_after_minutes)),
        ),
        ("Fairway, key tenant, a chunk is a task".into(), None, fairway(KeyBy::Tenant, Charge::Tasks, None)),
        (
            "Fairway, key tenant, cost = chunk's records".into(),
            None,
            fairway(KeyBy::Tenant, Charge::ChunkRecords, None),
        ),
        (
            "Fairway, key tenant, size = job's records (log)".into(),
            Some("Fairway, key tenant"),
            fairway(KeyBy::Tenant, Charge::JobSizeLog, None),
        ),
        (
            format!("Fairway, key tenant, size = job's records (log), max_wait {} min", args.max_wait_minutes),
            None,
            fairway(KeyBy::Tenant, Charge::JobSizeLog, Some((max_wait, 0))),
        ),
        (
            "Fairway, key job, size = job's records (log)".into(),
            Some("Fairway, key job"),
            fairway(KeyBy::Job, Charge::JobSizeLog, None),
        ),
        (
            format!("Fairway, key job in its tenant's group, size (log), group_lead {}", args.group_lead),
            Some("Fairway, key job in tenant groups, lead"),
            fairway(grouped, Charge::JobSizeLog, None),
        ),
        (
            format!(
                "Fairway, key job in its tenant's group, size (log), group_lead {}, max_wait {} min, age_boost {}",
                args.group_lead, args.max_wait_minutes, args.age_boost
            ),
            Some("the same with max_wait and age_boost"),
            fairway(grouped, Charge::JobSizeLog, Some((max_wait, args.age_boost))),
        ),
    ]
}

#[derive(Serialize)]
struct ArmReport {
    name: String,
    #[serde(skip)]
    plotted: Option<&'static str>,
    figures: Figures,
    /// Microseconds of wall time per pick (and one add) with this many chunks waiting.
    pick_us: Vec<(usize, f64)>,
}

pub(super) fn run(args: ImportSimArgs) -> anyhow::Result<()> {
    let shape = args.shape()?;
    let workload = Workload::generate(&shape);
    let small = workload.jobs.iter().filter(|j| j.records <= sim::SMALL_JOB_RECORDS).count();
    println!(
        "{} jobs ({small} of at most {} records), {} chunks, {} tenants, {} workers, load {}",
        workload.jobs.len(),
        sim::SMALL_JOB_RECORDS,
        workload.chunks.len(),
        shape.tenants,
        shape.workers,
        shape.load
    );
    let window_ms = i64::from(args.window_minutes) * 60_000;
    let mut reports = Vec::new();
    for (name, plotted, mut order) in arms(&args) {
        let started = Instant::now();
        let run = sim::run(order.as_mut(), &workload, &shape, window_ms);
        let figures = sim::figures(&run, &workload, &shape);
        println!("{name}: simulated in {:.1} s", started.elapsed().as_secs_f64());
        reports.push(ArmReport { name, plotted, figures, pick_us: Vec::new() });
    }
    if args.timed_picks > 0 {
        for backlog in [1_000, 100_000] {
            for (report, (_, _, mut order)) in reports.iter_mut().zip(arms(&args)) {
                let us = time_picks(order.as_mut(), &workload, backlog, args.timed_picks as usize, shape.tenants);
                report.pick_us.push((backlog, us));
            }
        }
    }
    let table = table(&reports, &args, &shape, &workload);
    println!("\n{table}");
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    std::fs::write(args.out.join("report.md"), &table)?;
    std::fs::write(args.out.join("report.json"), serde_json::to_string_pretty(&reports)?)?;
    let chart = Chart {
        file: "imports.png".into(),
        title: format!(
            "Imports: {} jobs, {} tenants (Zipf {}), {} workers, load {}",
            shape.jobs, shape.tenants, shape.zipf, shape.workers, shape.load
        ),
        x_label: "minutes".into(),
        y_label: "share at or below".into(),
        panels: vec![
            (
                format!("small jobs (≤ {} records): completion time", sim::SMALL_JOB_RECORDS),
                series(&reports, |f| &f.small_completions_min),
            ),
            ("every chunk: wait before it starts".into(), series(&reports, |f| &f.waits_min)),
        ],
        log_x: true,
        log_y: false,
    };
    println!("plot: {}", plot::draw(&chart, &args.out)?.display());
    Ok(())
}

fn series(reports: &[ArmReport], values: impl Fn(&Figures) -> &Vec<f64>) -> Vec<Series> {
    reports
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            // Log x: a zero wait is drawn at a tenth of a second.
            let points = cdf(values(&r.figures)).into_iter().map(|(x, y)| (x.max(1.0 / 600.0), y)).collect();
            Some(Series::new(r.plotted?, points).coloured(i))
        })
        .collect()
}

/// Wall time per pick with `backlog` chunks waiting, kept there by adding
/// one chunk after each pick (the workload's chunks, cycled with new ids).
fn time_picks(order: &mut dyn Order, workload: &Workload, backlog: usize, picks: usize, tenants: usize) -> f64 {
    let chunk = |i: usize| Chunk { id: i, arrived_ms: 0, ..workload.chunks[i % workload.chunks.len()].clone() };
    let initial: Vec<Chunk> = (0..backlog).map(chunk).collect();
    order.add(&initial, 0);
    let running = vec![0usize; tenants];
    let started = Instant::now();
    for i in 0..picks {
        let now = 1_000 + i as i64;
        order.pick(now, &running, 0).expect("a backlog to pick from");
        order.add(&[chunk(backlog + i)], now);
    }
    started.elapsed().as_secs_f64() * 1e6 / picks as f64
}

fn table(reports: &[ArmReport], args: &ImportSimArgs, shape: &Shape, workload: &Workload) -> String {
    use crate::figures::number;
    let mut out = format!(
        "`fairway-lab simulate-imports --jobs {} --tenants {} --workers {} --load {} --seed {}` ({} chunks; the ranker's extreme age at {} min)\n\n",
        shape.jobs,
        shape.tenants,
        shape.workers,
        shape.load,
        shape.seed,
        workload.chunks.len(),
        args.extreme_after_minutes
    );
    out.push_str("| order | small jobs p50 / p99 (s) | all jobs p50 / p99 (min) | longest wait (min) | chunk wait p99 (min) | Jain, lowest / mean | pick at 1,000 / 100,000 waiting (µs) |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for r in reports {
        let f = &r.figures;
        let picks = if r.pick_us.is_empty() {
            "not timed".to_owned()
        } else {
            r.pick_us.iter().map(|(_, us)| number(*us)).collect::<Vec<_>>().join(" / ")
        };
        out.push_str(&format!(
            "| {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} | {:.3} / {:.3} ({} windows) | {} |\n",
            r.name,
            f.small_p50_min * 60.0,
            f.small_p99_min * 60.0,
            f.all_p50_min,
            f.all_p99_min,
            f.longest_wait_min,
            f.wait_p99_min,
            f.jain_min,
            f.jain_mean,
            f.windows,
            picks
        ));
    }
    out
}
