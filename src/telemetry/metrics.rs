//! The metrics of a node, read from its queues, and their Prometheus text
//! exposition (format 0.0.4). Every metric is labelled by `queue`; the backlog
//! and the ack lag also by `priority`. Counts are this node's, since it
//! started: with several nodes, sum them over the nodes.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::engine::TaskCounts;
use crate::histogram::{BOUNDS_MS, HistogramReading};
use crate::matcher::{LevelStats, QueueStats, Queues};
use crate::model::QueueName;

/// What a reading of the queues holds, by queue name.
pub type Sample = Vec<(QueueName, QueueStats)>;

/// Reads the queues for an export. A count it reports never goes down: a
/// queue's counts can dip for a moment while a partition is handed over
/// (see [`crate::matcher::QueueMatcher::stats`]), and a scraper would take
/// the dip for a restart; the highest count reported so far is reported
/// instead until the count passes it again.
#[derive(Debug)]
pub struct Sampler {
    queues: Arc<Queues>,
    schedules: Arc<super::schedules::ScheduleGauges>,
    highest: Mutex<HashMap<QueueName, TaskCounts>>,
    /// The last reading and when it was made, for exports that read many
    /// instruments at once (OTLP).
    last: Mutex<Option<(Instant, Arc<Sample>)>>,
}

impl Sampler {
    /// A sampler of `queues` and of the schedules' gauges, with no count
    /// reported yet.
    pub fn new(queues: Arc<Queues>, schedules: Arc<super::schedules::ScheduleGauges>) -> Self {
        Sampler { queues, schedules, highest: Mutex::new(HashMap::new()), last: Mutex::new(None) }
    }

    /// The Prometheus text of the queues as they are now, then of the
    /// schedules as the last look saw them.
    pub fn render(&self) -> String {
        let mut out = render(&self.sample());
        self.schedules.render(&mut out);
        out
    }

    /// The queues as they are now.
    pub fn sample(&self) -> Arc<Sample> {
        let mut sample = self.queues.stats();
        {
            let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
            for (name, stats) in &mut sample {
                let high = highest.entry(name.clone()).or_default();
                *high = high.max(stats.counts);
                stats.counts = *high;
            }
        }
        let sample = Arc::new(sample);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), sample.clone()));
        sample
    }

    /// The last reading if it is younger than `max_age`, else a new one.
    pub fn recent(&self, max_age: Duration) -> Arc<Sample> {
        if let Some((at, sample)) = &*self.last.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < max_age
        {
            return sample.clone();
        }
        self.sample()
    }
}

/// How a metric behaves, in the exposition's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A count that only grows; its name ends in `_total`.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Observations counted in the buckets of [`BOUNDS_MS`], with their sum.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Where a metric's values come from.
#[derive(Clone, Copy, Debug)]
pub enum Values {
    /// One value per queue.
    PerQueue(fn(&QueueStats) -> u64),
    /// One value per queue and priority level.
    PerLevel(fn(&LevelStats) -> u64),
    /// The dispatch latency histogram of each queue.
    Latency,
}

/// One metric: its Prometheus name, kind and help text. Over OTLP a metric
/// has the same name without the `_total` or `_seconds` suffix (a
/// collector's Prometheus exporter adds them back from the kind and unit).
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The Prometheus name, such as `fairway_tasks_added_total`.
    pub name: &'static str,
    /// How the metric behaves.
    pub kind: Kind,
    /// The OTLP unit (UCUM).
    pub unit: &'static str,
    /// The help text, one sentence.
    pub help: &'static str,
    /// Where its values come from.
    pub values: Values,
}

impl Metric {
    /// The name over OTLP.
    pub fn otlp_name(&self) -> &'static str {
        self.name.trim_end_matches("_total").trim_end_matches("_seconds")
    }
}

const fn counter(name: &'static str, unit: &'static str, help: &'static str, value: fn(&QueueStats) -> u64) -> Metric {
    Metric { name, kind: Kind::Counter, unit, help, values: Values::PerQueue(value) }
}

const fn gauge(name: &'static str, unit: &'static str, help: &'static str, values: Values) -> Metric {
    Metric { name, kind: Kind::Gauge, unit, help, values }
}

/// Every metric, in the order of the exposition.
pub const ALL: [Metric; 16] = [
    counter(
        "fairway_tasks_added_total",
        "{task}",
        "New tasks from producers, counted once durable (not duplicates, retries or re-drives).",
        |s| s.counts.added,
    ),
    counter(
        "fairway_tasks_dispatched_total",
        "{task}",
        "Leases written: tasks handed to workers, with sync matches and redeliveries.",
        |s| s.counts.dispatched,
    ),
    counter("fairway_tasks_completed_total", "{task}", "Leases ended by CompleteTask.", |s| s.counts.completed),
    counter(
        "fairway_tasks_failed_total",
        "{task}",
        "Leases ended by FailTask (the task is retried later, or is a dead letter now).",
        |s| s.counts.failed,
    ),
    counter(
        "fairway_leases_expired_total",
        "{task}",
        "Leases that ran out with no report from the worker that got the task.",
        |s| s.counts.expired,
    ),
    counter(
        "fairway_partition_takeovers_total",
        "{partition}",
        "Partitions this node took from an owner that had not handed them over (failovers).",
        |s| s.takeovers,
    ),
    gauge(
        "fairway_owned_partitions",
        "{partition}",
        "Partitions this node holds and serves.",
        Values::PerQueue(|s| s.owned_partitions),
    ),
    gauge(
        "fairway_backlog_tasks",
        "{task}",
        "Tasks written and not yet dispatched, by priority (approximate after a takeover).",
        Values::PerLevel(|level| level.backlog),
    ),
    gauge(
        "fairway_ack_lag_tasks",
        "{task}",
        "Tasks above the ack level, by priority: the backlog, and tasks dispatched above one that still waits.",
        Values::PerLevel(|level| level.ack_lag),
    ),
    gauge(
        "fairway_oldest_waiting_seconds",
        "s",
        "Age of the oldest task waiting in memory, by priority, since its first add: the oldest waiting task's \
         where the partition's reader is at the end of its rows, else a lower bound.",
        Values::PerLevel(|level| level.oldest_waiting_seconds),
    ),
    gauge(
        "fairway_tasks_over_max_wait",
        "{task}",
        "Tasks that have waited past the queue's max_wait and still wait (0 without one): those held in memory, \
         and those whose waiting records are (a lower bound while more are due).",
        Values::PerQueue(|s| s.over_max_wait),
    ),
    gauge("fairway_leased_tasks", "{task}", "Tasks out with workers.", Values::PerQueue(|s| s.leased)),
    gauge(
        "fairway_delayed_tasks",
        "{task}",
        "Delayed tasks and retries waiting out their backoff, known in memory.",
        Values::PerQueue(|s| s.delayed),
    ),
    gauge(
        "fairway_waiting_pollers",
        "{poll}",
        "Polls parked on this node, waiting for a task.",
        Values::PerQueue(|s| s.waiting_pollers),
    ),
    gauge(
        "fairway_held_tasks",
        "{task}",
        "Tasks leased on this node and held for the next poll (matcher.quiet_hold); fairway_leased_tasks counts them \
         too, though no worker has them yet.",
        Values::PerQueue(|s| s.held_for_polls),
    ),
    DISPATCH_LATENCY,
];

/// The one histogram, recorded as tasks are delivered.
pub const DISPATCH_LATENCY: Metric = Metric {
    name: "fairway_dispatch_latency_seconds",
    kind: Kind::Histogram,
    unit: "s",
    help: "From AddTask to delivery to a worker, of tasks delivered on their first pass (not delayed, retried or re-driven).",
    values: Values::Latency,
};

/// The Prometheus content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text exposition of `sample`.
pub fn render(sample: &Sample) -> String {
    let mut out = String::new();
    for metric in &ALL {
        let _ = writeln!(out, "# HELP {} {}", metric.name, metric.help);
        let _ = writeln!(out, "# TYPE {} {}", metric.name, metric.kind.as_str());
        for (queue, stats) in sample {
            let queue = escape(queue.as_str());
            match metric.values {
                Values::PerQueue(value) => {
                    let _ = writeln!(out, "{}{{queue=\"{queue}\"}} {}", metric.name, value(stats));
                }
                Values::PerLevel(value) => {
                    for level in &stats.levels {
                        let priority = level.priority.get();
                        let _ = writeln!(
                            out,
                            "{}{{queue=\"{queue}\",priority=\"{priority}\"}} {}",
                            metric.name,
                            value(level)
                        );
                    }
                }
                Values::Latency => histogram(&mut out, metric.name, &queue, &stats.dispatch_latency),
            }
        }
    }
    out
}

fn histogram(out: &mut String, name: &str, queue: &str, reading: &HistogramReading) {
    let mut cumulative = 0;
    for (index, count) in reading.buckets.iter().enumerate() {
        cumulative += count;
        let le = BOUNDS_MS.get(index).map_or("+Inf".to_owned(), |ms| seconds(*ms));
        let _ = writeln!(out, "{name}_bucket{{queue=\"{queue}\",le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum{{queue=\"{queue}\"}} {}", seconds(reading.sum_ms));
    let _ = writeln!(out, "{name}_count{{queue=\"{queue}\"}} {cumulative}");
}

/// Milliseconds as seconds, with no trailing zeros: `2500` is `2.5`.
fn seconds(ms: u64) -> String {
    let whole = ms / 1000;
    match ms % 1000 {
        0 => whole.to_string(),
        fraction => format!("{whole}.{}", format!("{fraction:03}").trim_end_matches('0')),
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Priority;

    fn named(name: &str) -> Metric {
        *ALL.iter().find(|metric| metric.name == name).expect("a metric of that name")
    }

    fn stats() -> QueueStats {
        QueueStats {
            counts: TaskCounts { added: 5, dispatched: 3, completed: 2, failed: 1, expired: 0 },
            owned_partitions: 1,
            held_for_polls: 7,
            levels: Priority::all().map(LevelStats::empty).collect(),
            dispatch_latency: HistogramReading {
                buckets: (0..=BOUNDS_MS.len()).map(|i| u64::from(i == 2 || i == BOUNDS_MS.len())).collect(),
                sum_ms: 4_010,
            },
            ..QueueStats::default()
        }
    }

    #[test]
    fn the_exposition_has_every_metric_once_per_queue() {
        let text = render(&vec![(QueueName::new_unchecked("jobs"), stats())]);
        for metric in &ALL {
            assert_eq!(text.matches(&format!("# TYPE {} ", metric.name)).count(), 1, "{}", metric.name);
        }
        assert!(text.contains("\nfairway_tasks_added_total{queue=\"jobs\"} 5\n"), "{text}");
        assert!(text.contains("\nfairway_backlog_tasks{queue=\"jobs\",priority=\"5\"} 0\n"), "{text}");
        assert!(text.contains("\nfairway_held_tasks{queue=\"jobs\"} 7\n"), "{text}");
        assert!(text.contains("_bucket{queue=\"jobs\",le=\"0.005\"} 0\n"), "{text}");
        assert!(text.contains("_bucket{queue=\"jobs\",le=\"0.01\"} 1\n"), "{text}");
        assert!(text.contains("_bucket{queue=\"jobs\",le=\"3600\"} 1\n"), "{text}");
        assert!(text.contains("_bucket{queue=\"jobs\",le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("\nfairway_dispatch_latency_seconds_sum{queue=\"jobs\"} 4.01\n"), "{text}");
        assert!(text.contains("\nfairway_dispatch_latency_seconds_count{queue=\"jobs\"} 2\n"), "{text}");
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("a series and a value");
            assert!(series.starts_with("fairway_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn seconds_have_no_trailing_zeros() {
        assert_eq!(seconds(1), "0.001");
        assert_eq!(seconds(250), "0.25");
        assert_eq!(seconds(2_500), "2.5");
        assert_eq!(seconds(3_600_000), "3600");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn otlp_names_drop_the_suffixes_a_collector_adds() {
        assert_eq!(named("fairway_tasks_added_total").otlp_name(), "fairway_tasks_added");
        assert_eq!(named("fairway_dispatch_latency_seconds").otlp_name(), "fairway_dispatch_latency");
        assert_eq!(named("fairway_backlog_tasks").otlp_name(), "fairway_backlog_tasks");
    }
}
