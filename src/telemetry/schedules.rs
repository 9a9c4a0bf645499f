//! The schedules' gauges, as the last look of this node's firing loop saw
//! them: schedules per health, the seconds until the first one turns ERROR,
//! and one series per schedule while there are at most
//! `schedules.max_schedule_series` of them (beyond it, totals only: a label
//! per schedule would grow the scrape without bound). Each node reports the
//! shards it fires; sum over the nodes.

use std::fmt::Write;
use std::sync::Mutex;

use crate::clock::UnixMillis;
use crate::core::schedules::Health;
use crate::schedules::FiringReport;

/// The last look's figures, rendered at each scrape.
#[derive(Debug, Default)]
pub struct ScheduleGauges {
    last: Mutex<Option<(UnixMillis, FiringReport)>>,
    max_series: usize,
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl ScheduleGauges {
    /// Gauges with one series per schedule up to `max_series` schedules.
    pub fn new(max_series: usize) -> Self {
        ScheduleGauges { last: Mutex::new(None), max_series }
    }

    /// Keeps `report`, made at `now`, for the next scrapes.
    pub fn record(&self, report: &FiringReport, now: UnixMillis) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, report.clone()));
    }

    /// The Prometheus text of the gauges (nothing before the first look).
    pub fn render(&self, out: &mut String) {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let Some((now, report)) = last.as_ref() else { return };
        let _ = writeln!(
            out,
            "# HELP fairway_schedules Schedules this node fires, by health (paused ones counted apart too)."
        );
        let _ = writeln!(out, "# TYPE fairway_schedules gauge");
        for (health, count) in
            [("ok", report.ok), ("warning", report.warning), ("error", report.error), ("paused", report.paused)]
        {
            let _ = writeln!(out, "fairway_schedules{{health=\"{health}\"}} {count}");
        }
        if let Some(at) = report.first_error_at {
            let _ = writeln!(
                out,
                "# HELP fairway_schedules_seconds_to_first_error Seconds until the first schedule not in ERROR turns ERROR if not run."
            );
            let _ = writeln!(out, "# TYPE fairway_schedules_seconds_to_first_error gauge");
            let _ = writeln!(out, "fairway_schedules_seconds_to_first_error {}", (at - now) as f64 / 1000.0);
        }
        if report.per_schedule.len() > self.max_series {
            return;
        }
        let _ = writeln!(out, "# HELP fairway_schedule_health A schedule's health: 0 OK, 1 WARNING, 2 ERROR.");
        let _ = writeln!(out, "# TYPE fairway_schedule_health gauge");
        for (id, health, _) in &report.per_schedule {
            let value = match health {
                Health::Ok => 0,
                Health::Warning => 1,
                Health::Error => 2,
            };
            let _ = writeln!(out, "fairway_schedule_health{{schedule=\"{}\"}} {value}", escape(id));
        }
        let _ = writeln!(
            out,
            "# HELP fairway_schedule_seconds_to_error Seconds until a schedule turns ERROR if not run (negative: since it did)."
        );
        let _ = writeln!(out, "# TYPE fairway_schedule_seconds_to_error gauge");
        for (id, _, error_at) in &report.per_schedule {
            if let Some(at) = error_at {
                let _ = writeln!(
                    out,
                    "fairway_schedule_seconds_to_error{{schedule=\"{}\"}} {}",
                    escape(id),
                    (at - now) as f64 / 1000.0
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(schedules: usize) -> FiringReport {
        FiringReport {
            ok: schedules as u64,
            first_error_at: Some(61_000),
            per_schedule: (0..schedules).map(|i| (format!("s{i}"), Health::Ok, Some(61_000))).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn per_schedule_series_stop_at_the_configured_cardinality() {
        let gauges = ScheduleGauges::new(2);
        let mut out = String::new();
        gauges.render(&mut out);
        assert!(out.is_empty(), "nothing before the first look");
        gauges.record(&report(2), 1_000);
        gauges.render(&mut out);
        assert!(out.contains("fairway_schedules{health=\"ok\"} 2"), "{out}");
        assert!(out.contains("fairway_schedules_seconds_to_first_error 60"), "{out}");
        assert!(out.contains("fairway_schedule_health{schedule=\"s1\"} 0"), "{out}");
        assert!(out.contains("fairway_schedule_seconds_to_error{schedule=\"s0\"} 60"), "{out}");
        gauges.record(&report(3), 1_000);
        let mut out = String::new();
        gauges.render(&mut out);
        assert!(out.contains("fairway_schedules{health=\"ok\"} 3"), "{out}");
        assert!(!out.contains("schedule=\""), "past the cardinality, totals only: {out}");
    }
}
