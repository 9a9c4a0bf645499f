//! The last hour of each queue as this node served it, for the console's
//! charts: its counts and backlog, read from the node's own counters at a
//! fixed interval, kept in memory (no Prometheus needed).
//!
//! Invariants: at most `span / every + 1` points per queue and at most
//! [`MAX_QUEUES`] queues are kept; points are in time order; a queue not
//! seen for a whole span is forgotten.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::{SharedClock, UnixMillis};
use crate::matcher::{QueueStats, Queues};
use crate::model::QueueName;

/// The most queues charted; queues past it (in the order first seen) are
/// not recorded until others are forgotten.
pub const MAX_QUEUES: usize = 200;

/// One reading of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When, in ms since the Unix epoch.
    pub at: UnixMillis,
    /// Tasks added, counted by this node since it started...
    pub added: u64,
    /// ...handed out...
    pub dispatched: u64,
    /// ...completed...
    pub completed: u64,
    /// ...and failed (retried or buried).
    pub failed: u64,
    /// Waiting in the partitions this node holds, over every priority.
    pub backlog: u64,
    /// Out with workers.
    pub leased: u64,
}

impl Point {
    fn of(at: UnixMillis, stats: &QueueStats) -> Point {
        Point {
            at,
            added: stats.counts.added,
            dispatched: stats.counts.dispatched,
            completed: stats.counts.completed,
            failed: stats.counts.failed,
            backlog: stats.levels.iter().map(|level| level.backlog).sum(),
            leased: stats.leased,
        }
    }
}

/// The points of each queue over the last `span`.
#[derive(Debug)]
pub struct History {
    span: Duration,
    every: Duration,
    points: Mutex<HashMap<QueueName, VecDeque<Point>>>,
}

impl History {
    /// A history of `span`, read every `every`.
    pub fn new(span: Duration, every: Duration) -> History {
        History { span, every, points: Mutex::new(HashMap::new()) }
    }

    /// How often a reading is taken.
    pub fn every(&self) -> Duration {
        self.every
    }

    fn capacity(&self) -> usize {
        (self.span.as_millis() / self.every.as_millis().max(1)) as usize + 1
    }

    /// Records a reading of the queues at `at`.
    pub fn record<'a>(&self, at: UnixMillis, queues: impl IntoIterator<Item = (&'a QueueName, &'a QueueStats)>) {
        let capacity = self.capacity();
        let oldest = at - self.span.as_millis() as i64;
        let mut points = self.points.lock().unwrap_or_else(|p| p.into_inner());
        for (name, stats) in queues {
            if !points.contains_key(name) && points.len() >= MAX_QUEUES {
                continue;
            }
            let line = points.entry(name.clone()).or_default();
            line.push_back(Point::of(at, stats));
            while line.len() > capacity {
                line.pop_front();
            }
        }
        for line in points.values_mut() {
            while line.front().is_some_and(|point| point.at < oldest) {
                line.pop_front();
            }
        }
        points.retain(|_, line| !line.is_empty());
    }

    /// The points of `queue`, oldest first.
    pub fn of(&self, queue: &QueueName) -> Vec<Point> {
        let points = self.points.lock().unwrap_or_else(|p| p.into_inner());
        points.get(queue).map(|line| line.iter().copied().collect()).unwrap_or_default()
    }
}

/// Reads the queues of `queues` into `history` at its interval, until `stop`.
pub async fn record(queues: Arc<Queues>, history: Arc<History>, clock: SharedClock, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(history.every());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let read = queues.stats();
        history.record(clock.now_ms(), read.iter().map(|(name, stats)| (name, stats)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: usize) -> QueueName {
        QueueName::new_unchecked(&format!("q{n}"))
    }

    fn stats(added: u64) -> QueueStats {
        let mut stats = QueueStats::default();
        stats.counts.added = added;
        stats
    }

    #[test]
    fn a_queue_keeps_one_span_of_points_in_order() {
        let history = History::new(Duration::from_secs(60), Duration::from_secs(10));
        let queue = name(0);
        for n in 0..20 {
            history.record(n * 10_000, [(&queue, &stats(n as u64))]);
        }
        let points = history.of(&queue);
        assert_eq!(points.len(), 7, "60 s at 10 s, both ends in");
        assert_eq!(points.first().map(|p| (p.at, p.added)), Some((130_000, 13)));
        assert_eq!(points.last().map(|p| p.added), Some(19));
        assert!(points.windows(2).all(|w| w[0].at < w[1].at));
    }

    #[test]
    fn queues_past_the_bound_are_not_recorded_and_silent_ones_are_forgotten() {
        let history = History::new(Duration::from_secs(60), Duration::from_secs(10));
        let names: Vec<QueueName> = (0..MAX_QUEUES + 5).map(name).collect();
        let all = stats(1);
        history.record(0, names.iter().map(|n| (n, &all)));
        assert_eq!(history.of(&names[MAX_QUEUES - 1]).len(), 1);
        assert!(history.of(&names[MAX_QUEUES]).is_empty(), "past the bound");
        // Only the last queue reads for over a span: the others go, then it comes in.
        for n in 1..=8 {
            history.record(n * 10_000, [(&names[MAX_QUEUES], &all)]);
        }
        assert!(history.of(&names[0]).is_empty(), "silent for a span");
        assert_eq!(history.of(&names[MAX_QUEUES]).len(), 1, "recorded once there was room");
    }
}
