//! What `fairway-lab simulate` writes: a markdown table of both arms (printed
//! and in `report.md`), `report.json`, and PNG plots drawn with the
//! benchmarks' plotting.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use fairway::visits::SchedulerConfig;

use super::Scenario;
use super::arm::FAIL_SHARE;
use super::forge::{DEAD_SHARE, Forge, NEW_SHARE, RATE_MIX};
use super::metrics::ArmSummary;
use crate::figures::number;
use crate::figures::plot::{self, Chart, Series};

#[derive(Debug, Serialize)]
pub(super) struct SimReport {
    pub command: String,
    pub machine: String,
    pub wall_seconds: f64,
    pub origins: u32,
    pub listers: usize,
    pub days: u32,
    pub loaders: u32,
    pub host_limit: u32,
    pub seed: u64,
    pub queue_length: u64,
    pub arms: Vec<ArmSummary>,
    pub plots: Vec<PathBuf>,
}

impl SimReport {
    pub(super) fn new(
        command: String,
        scenario: &Scenario,
        forge: &Forge,
        arms: Vec<ArmSummary>,
        wall: f64,
    ) -> SimReport {
        SimReport {
            command,
            machine: crate::figures::machine(),
            wall_seconds: wall,
            origins: forge.params.origins,
            listers: forge.listers.len(),
            days: forge.params.days,
            loaders: scenario.capacity.loaders,
            host_limit: scenario.capacity.host_limit,
            seed: forge.params.seed,
            queue_length: SchedulerConfig::default().queue_length,
            arms,
            plots: Vec::new(),
        }
    }

    /// The table of both arms' measures.
    pub(super) fn table(&self) -> String {
        let mut out = String::new();
        let names: Vec<&str> = self.arms.iter().map(|a| a.arm.as_str()).collect();
        let _ = writeln!(out, "| measure | {} |", names.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(names.len()));
        let mut row = |name: &str, value: &dyn Fn(&ArmSummary) -> String| {
            let cells: Vec<String> = self.arms.iter().map(value).collect();
            let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
        };
        row("visits", &|a| number(a.visits as f64));
        row("visits per day", &|a| number(a.visits_per_day));
        row("loaders busy", &|a| format!("{:.0}%", 100.0 * a.loaders_busy));
        row("· while visits waited in the queue (share of the time)", &|a| {
            format!("{:.0}% ({:.0}%)", 100.0 * a.loaders_busy_while_waiting, 100.0 * a.waiting_share)
        });
        row("· while eligible visits existed (share of the checks)", &|a| match (
            a.loaders_busy_while_eligible,
            a.eligible_share,
        ) {
            (Some(busy), Some(share)) => format!("{:.0}% ({:.0}%)", 100.0 * busy, 100.0 * share),
            _ => "not measured".to_owned(),
        });
        row("useful visits (new snapshot)", &|a| number(a.counts.eventful as f64));
        row("**useless share**", &|a| format!("**{:.1}%**", 100.0 * a.useless_share));
        row("· uneventful / failed / not found", &|a| {
            format!(
                "{} / {} / {}",
                number(a.counts.uneventful as f64),
                number(a.counts.failed as f64),
                number(a.counts.not_found as f64)
            )
        });
        row("· useless share, listers giving update dates", &|a| format!("{:.1}%", 100.0 * a.useless_share_dated));
        row("· useless share, listers giving none", &|a| format!("{:.1}%", 100.0 * a.useless_share_undated));
        row("updates", &|a| number(a.lag.count as f64));
        row("· not picked up by the end", &|a| {
            format!("{} ({:.1}%)", number(a.unpicked as f64), 100.0 * a.unpicked as f64 / a.lag.count.max(1) as f64)
        });
        row("**visit lag, mean (h)**", &|a| format!("**{:.1}**", a.lag.mean_h));
        row("visit lag, median (h)", &|a| format!("{:.1}", a.lag.p50_h));
        row("visit lag, p99 (h)", &|a| format!("{:.1}", a.lag.p99_h));
        row("worst lister's mean lag (h)", &|a| format!("{:.1}", a.worst_lister_lag_h));
        row("listers never visited", &|a| number(a.listers_unvisited as f64));
        row("new origins listed", &|a| number(a.first_visit.count as f64));
        row("first-visit delay of new origins, mean (h)", &|a| format!("{:.1}", a.first_visit.mean_h));
        row("first-visit delay of new origins, p99 (h)", &|a| format!("{:.1}", a.first_visit.p99_h));
        row("· new origins never visited", &|a| number(a.first_visit_never as f64));
        row("listed origins never visited (all)", &|a| {
            format!("{} of {}", number(a.never_visited as f64), number(a.listed as f64))
        });
        row("peak visits on one host (limit)", &|a| format!("{} ({})", a.peak_per_host, a.host_limit));
        row("rounds", &|a| number(a.rounds as f64));
        out
    }

    /// Each lister's share of origins beside its share of visits and its
    /// mean lag, per arm.
    pub(super) fn lister_table(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "| lister | origins | share | dates | hosts | lists every (d) |");
        for arm in &self.arms {
            let _ = write!(out, " {0} visits | {0} share | {0} lag (h) |", arm.arm);
        }
        let _ = writeln!(out, "\n|---|---:|---:|---|---:|---:|{}", "---:|---:|---:|".repeat(self.arms.len()));
        let total_origins: u64 = self.arms[0].listers.iter().map(|l| l.origins).sum();
        for (i, lister) in self.arms[0].listers.iter().enumerate() {
            let _ = write!(
                out,
                "| {} | {} | {:.2}% | {} | {} | {:.1} |",
                lister.name,
                number(lister.origins as f64),
                100.0 * lister.origins as f64 / total_origins as f64,
                if lister.dated { "yes" } else { "no" },
                lister.hosts,
                lister.period_days
            );
            for arm in &self.arms {
                let figures = &arm.listers[i];
                let _ = write!(
                    out,
                    " {} | {:.2}% | {:.1} |",
                    number(figures.visits as f64),
                    100.0 * figures.visits as f64 / arm.visits.max(1) as f64,
                    figures.mean_lag_h
                );
            }
            out.push('\n');
        }
        out
    }

    /// Per true change rate: each arm's visits, useless share and lag, and
    /// the part of the lag from updates made before the first visit.
    pub(super) fn rate_table(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "| changes per day | updates |");
        for arm in &self.arms {
            let _ =
                write!(out, " {0} visits | {0} useless | {0} lag (h) | {0} of it before the first visit |", arm.arm);
        }
        let _ = writeln!(out, "\n|---:|---:|{}", "---:|---:|---:|---:|".repeat(self.arms.len()));
        for (i, class) in self.arms[0].rates.iter().enumerate() {
            let _ = write!(out, "| {:.3} | {} |", class.rate, number(class.updates as f64));
            for arm in &self.arms {
                let f = &arm.rates[i];
                let per_update = |sum: f64| if f.updates == 0 { 0.0 } else { sum / f.updates as f64 };
                let _ = write!(
                    out,
                    " {} | {:.1}% | {:.1} | {:.1} |",
                    number(f.visits as f64),
                    100.0 * (1.0 - f.useful as f64 / f.visits.max(1) as f64),
                    per_update(f.lag_sum_h),
                    per_update(f.before_first_lag_sum_h),
                );
            }
            out.push('\n');
        }
        out
    }

    pub(super) fn markdown(&self) -> String {
        let mut out = format!(
            "## `{}`\n\nmachine: {} · wall time: {:.0} s\n\n\
             {} origins ({:.0}% created during the run, {:.0}% dead), {} listers, {} days, {} loaders, \
             at most {} visits per host, queue length {}, failure chance {:.0}%, seed {}; update rates per day: {}\n\n",
            self.command,
            self.machine,
            self.wall_seconds,
            number(f64::from(self.origins)),
            100.0 * NEW_SHARE,
            100.0 * DEAD_SHARE,
            self.listers,
            self.days,
            self.loaders,
            self.host_limit,
            self.queue_length,
            100.0 * FAIL_SHARE,
            self.seed,
            RATE_MIX
                .iter()
                .map(|(share, rate)| format!("{:.0}% at {rate:.3}", 100.0 * share))
                .collect::<Vec<_>>()
                .join(", ")
        );
        out.push_str(&self.table());
        out.push('\n');
        out.push_str(&self.lister_table());
        out.push('\n');
        out.push_str(&self.rate_table());
        for plot in &self.plots {
            let name = plot.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let _ = writeln!(out, "\n![{name}]({name})");
        }
        out
    }

    /// Draws the plots into `dir`, prints the tables and writes
    /// `report.json` and `report.md` there.
    pub(super) fn publish(mut self, dir: &Path) -> anyhow::Result<()> {
        for chart in self.charts() {
            match plot::draw(&chart, dir) {
                Ok(path) => self.plots.push(path),
                Err(error) => eprintln!("warning: {error:#}"),
            }
        }
        let markdown = self.markdown();
        println!("\n{markdown}");
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let json = dir.join("report.json");
        std::fs::write(&json, serde_json::to_string_pretty(&self)?).with_context(|| format!("{}", json.display()))?;
        std::fs::write(dir.join("report.md"), markdown).with_context(|| format!("{}", dir.display()))?;
        eprintln!("wrote {} and report.md (and the plots) in {}", json.display(), dir.display());
        Ok(())
    }

    fn charts(&self) -> Vec<Chart> {
        let lag = Chart {
            file: "simulate-lag-cdf.png".into(),
            title: "Visit lag: share of updates picked up within a time".into(),
            x_label: "lag (hours, log scale)".into(),
            y_label: "share of updates".into(),
            panels: vec![(
                String::new(),
                // Below 0.1 h is under 1% of updates in any arm: left out for a readable axis.
                self.arms
                    .iter()
                    .map(|a| Series::new(a.arm.clone(), a.lag_cdf.iter().copied().filter(|p| p.0 >= 0.1).collect()))
                    .collect(),
            )],
            log_x: true,
            log_y: false,
        };
        // A log scale has no 0: a lister without visits is drawn at FLOOR.
        const FLOOR: f64 = 0.001;
        let total_origins: f64 = self.arms[0].listers.iter().map(|l| l.origins as f64).sum();
        let origins =
            self.arms[0].listers.iter().enumerate().map(|(i, l)| (i as f64, 100.0 * l.origins as f64 / total_origins));
        let mut shares = vec![Series::reference("share of origins", origins.collect()).coloured(2)];
        for (i, arm) in self.arms.iter().enumerate() {
            let points = arm
                .listers
                .iter()
                .enumerate()
                .map(|(rank, l)| (rank as f64, (100.0 * l.visits as f64 / arm.visits.max(1) as f64).max(FLOOR)))
                .collect();
            shares.push(Series::new(format!("{}: share of visits", arm.arm), points).coloured(i));
        }
        let shares = Chart {
            file: "simulate-lister-shares.png".into(),
            title: format!("Each lister's share of visits beside its share of origins (none drawn at {FLOOR}%)"),
            x_label: "lister (by size, l00 the biggest)".into(),
            y_label: "% (log scale)".into(),
            panels: vec![(String::new(), shares)],
            log_x: false,
            log_y: true,
        };
        let panels = self
            .arms
            .iter()
            .enumerate()
            .map(|(i, arm)| {
                let days = |f: &dyn Fn(&super::metrics::Day) -> u64| -> Vec<(f64, f64)> {
                    arm.daily.iter().enumerate().map(|(d, day)| ((d + 1) as f64, f(day) as f64)).collect()
                };
                let series = vec![
                    Series::reference("visits", days(&|d| d.visits)).coloured(i),
                    Series::new("useful visits", days(&|d| d.useful)).coloured(i),
                ];
                (arm.arm.clone(), series)
            })
            .collect();
        let daily = Chart {
            file: "simulate-visits-per-day.png".into(),
            title: "Visits per day, and those that found a new snapshot".into(),
            x_label: "day".into(),
            y_label: "visits".into(),
            panels,
            log_x: false,
            log_y: false,
        };
        vec![lag, shares, daily]
    }
}
