//! What `fairway-lab simulate-schedules` prints: a markdown table of the
//! policies (or JSON), and the plot of schedules in ERROR over time.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::ScheduleSimArgs;
use super::mix::{
    CATCHUP_WINDOW_MS, COOLDOWN_SHARE, FAIL_SHARE, MEAN_MAX_S, MEAN_MEDIAN_S, MEAN_MIN_S, MEAN_SIGMA, MIX, Mix,
    RUN_SIGMA, TIME_ZONES,
};
use super::sim::PolicySummary;
use crate::figures::number;
use crate::figures::plot::{self, Chart, Series};

#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub command: String,
    pub machine: String,
    pub wall_seconds: f64,
    pub schedules: u32,
    pub workers: u32,
    pub days: u32,
    pub warmup_days: u32,
    pub sample_minutes: u32,
    pub seed: u64,
    /// Work the constraints need (one run per period or tick) over what the workers can do.
    pub needed_load: f64,
    /// Work eager firing on cooldown asks for over what the workers can do.
    pub eager_load: f64,
    /// Mean of the schedules' mean durations (s).
    pub mean_duration_s: f64,
    pub policies: Vec<PolicySummary>,
}

impl Report {
    pub(super) fn new(
        command: String,
        args: &ScheduleSimArgs,
        mix: &Mix,
        needed_load: f64,
        eager_load: f64,
        policies: Vec<PolicySummary>,
        wall: f64,
    ) -> Report {
        let mean_duration_s =
            mix.schedules.iter().map(|s| s.mean_ms).sum::<f64>() / mix.schedules.len().max(1) as f64 / 1_000.0;
        Report {
            command,
            machine: crate::figures::machine(),
            wall_seconds: wall,
            schedules: args.schedules,
            workers: args.workers,
            days: args.days,
            warmup_days: args.warmup_days,
            sample_minutes: args.sample_minutes,
            seed: args.seed,
            needed_load,
            eager_load,
            mean_duration_s,
            policies,
        }
    }

    /// The scenario in a paragraph.
    pub(super) fn scenario(&self) -> String {
        let mix: Vec<String> = MIX.iter().map(|(c, share)| format!("{:.0}% {}", 100.0 * share, c.name())).collect();
        format!(
            "{} schedules ({}), {} workers, {} days of virtual time, the first {} left out of the measures, seed {}. \
             Periodic cooldown: {:.0}–{:.0}% of the period; cron `max_schedule_duration`: 20 min (hourly), 3 h \
             (daily), time zones {}; overlap Skip; catch-up window {} h. Mean run duration per schedule: lognormal, \
             median {MEAN_MEDIAN_S} s, σ {MEAN_SIGMA}, clipped to {MEAN_MIN_S}–{MEAN_MAX_S} s and to a tenth of the \
             period (or of `max_schedule_duration`), {:.0} s on average; each run × lognormal noise (σ {RUN_SIGMA}, \
             mean 1); {:.0}% of runs fail. Each schedule starts with one good run in its last period (random phase). \
             Work the constraints need (one run per period or cron tick): **{:.2}×** what the workers can do; \
             firing as soon as the cooldown passes would ask for {:.2}×.",
            number(f64::from(self.schedules)),
            mix.join(", "),
            self.workers,
            self.days,
            self.warmup_days,
            self.seed,
            100.0 * COOLDOWN_SHARE.0,
            100.0 * COOLDOWN_SHARE.1,
            TIME_ZONES.join(", "),
            CATCHUP_WINDOW_MS / 3_600_000,
            self.mean_duration_s,
            100.0 * FAIL_SHARE,
            self.needed_load,
            self.eager_load,
        )
    }

    /// The table of the policies' measures.
    pub(super) fn table(&self) -> String {
        let mut out = String::new();
        let names: Vec<&str> = self.policies.iter().map(|p| p.policy.as_str()).collect();
        let _ = writeln!(out, "| after the warm-up | {} |", names.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(names.len()));
        let mut row = |name: &str, value: &dyn Fn(&PolicySummary) -> String| {
            let cells: Vec<String> = self.policies.iter().map(value).collect();
            let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
        };
        row("**schedules ever in ERROR**", &|p| format!("**{}**", number(p.ever_in_error as f64)));
        for i in 0..MIX.len() {
            let (class, total, _) = &self.policies[0].ever_in_error_by_class[i];
            row(&format!("· {class} ({})", number(*total as f64)), &|p| number(p.ever_in_error_by_class[i].2 as f64));
        }
        row("schedule-hours in ERROR", &|p| number(p.error_schedule_hours));
        let measured_h = f64::from(24 * (self.days - self.warmup_days));
        row("in ERROR on average (schedule-hours / hours)", &|p| number(p.error_schedule_hours / measured_h));
        let peak = format!("most in ERROR at once ({}-min samples)", self.sample_minutes);
        row(&peak, &|p| number(p.peak_in_error as f64));
        row("in ERROR at the end", &|p| number(p.in_error_at_end as f64));
        row("runs fired", &|p| number(p.runs_fired as f64));
        row("runs started", &|p| number(p.runs_started as f64));
        row("late runs (started after should_start_by)", &|p| {
            format!(
                "{} ({:.1}%)",
                number(p.late_runs as f64),
                100.0 * p.late_runs as f64 / p.runs_started.max(1) as f64
            )
        });
        row("runs completed (failed)", &|p| {
            format!("{} ({})", number(p.runs_completed as f64), number(p.runs_failed as f64))
        });
        row("workers busy", &|p| format!("{:.1}%", 100.0 * p.busy_share));
        row("queue wait p50 / p99 (min)", &|p| format!("{:.1} / {:.1}", p.wait_p50_min, p.wait_p99_min));
        row("ticks skipped (run in flight)", &|p| number(p.ticks_skipped as f64));
        row("runs queued at the end", &|p| number(p.queued_at_end as f64));
        out
    }

    pub(super) fn markdown(&self) -> String {
        format!(
            "`{}`\n\nmachine: {} · wall time: {:.1} s\n\n{}\n\n{}",
            self.command,
            self.machine,
            self.wall_seconds,
            self.scenario(),
            self.table()
        )
    }

    /// Draws the plot into `plot`, then prints the table (or JSON).
    pub(super) fn publish(&self, plot: &Path, json: bool) -> anyhow::Result<()> {
        let dir = plot.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let file =
            plot.file_name().map_or_else(|| "schedules-edf.png".to_owned(), |f| f.to_string_lossy().into_owned());
        match plot::draw(&self.chart(file), dir) {
            Ok(path) => eprintln!("wrote {}", path.display()),
            Err(error) => eprintln!("warning: {error:#}"),
        }
        if json {
            println!("{}", serde_json::to_string_pretty(self)?);
        } else {
            println!("\n{}", self.markdown());
        }
        Ok(())
    }

    fn chart(&self, file: String) -> Chart {
        let series = self.policies.iter().map(|p| Series::new(p.policy.clone(), p.samples.clone())).collect();
        Chart {
            file,
            title: format!(
                "Schedules in ERROR: {} schedules, {} workers, {:.2}× the work they can do",
                number(f64::from(self.schedules)),
                self.workers,
                self.needed_load
            ),
            x_label: format!("hours of virtual time (the first {} are warm-up)", 24 * self.warmup_days),
            y_label: "schedules in ERROR".into(),
            panels: vec![(String::new(), series)],
            log_x: false,
            log_y: false,
        }
    }
}
