//! A latency histogram that the hot path records into with atomics alone.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;

/// Upper bounds of the buckets, in milliseconds (the clock's resolution):
/// 1 ms to 1 h. A last bucket, `+Inf`, takes the rest.
pub const BOUNDS_MS: [u64; 17] =
    [1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000];

/// Counts of observations per bucket, and their sum. Recording takes no
/// lock; a reading is consistent per bucket (its count is the sum of the
/// buckets), though the sum may lag a concurrent observation.
#[derive(Debug)]
pub struct LatencyHistogram {
    /// Observations per bucket, not cumulative; the last is `+Inf`.
    buckets: [AtomicU64; BOUNDS_MS.len() + 1],
    sum_ms: AtomicU64,
    /// The same observations for an OTLP pipeline, with their attributes.
    otlp: Option<(Histogram<f64>, [KeyValue; 1])>,
}

/// A reading of a [`LatencyHistogram`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramReading {
    /// Observations per bucket of [`BOUNDS_MS`], then `+Inf`; not cumulative.
    pub buckets: Vec<u64>,
    /// The sum of every observation, in ms.
    pub sum_ms: u64,
}

impl HistogramReading {
    /// Observations in all: the sum of the buckets.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl LatencyHistogram {
    /// A histogram that also records into `otlp` (seconds), labelled `queue`, when given.
    pub fn new(otlp: Option<Histogram<f64>>, queue: &str) -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ms: AtomicU64::new(0),
            otlp: otlp.map(|histogram| (histogram, [KeyValue::new("queue", queue.to_owned())])),
        }
    }

    /// Counts one observation of `ms` milliseconds in the first bucket whose
    /// bound is at least `ms` (and over OTLP, in seconds).
    pub fn observe_ms(&self, ms: u64) {
        let bucket = BOUNDS_MS.partition_point(|bound| *bound < ms);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
        if let Some((histogram, attributes)) = &self.otlp {
            histogram.record(ms as f64 / 1000.0, attributes);
        }
    }

    /// The counts per bucket and their sum now.
    pub fn read(&self) -> HistogramReading {
        HistogramReading {
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum_ms: self.sum_ms.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_goes_to_the_first_bucket_that_holds_it() {
        let histogram = LatencyHistogram::new(None, "q");
        for ms in [0, 1, 2, 5, 3_600_000, 3_600_001] {
            histogram.observe_ms(ms);
        }
        let reading = histogram.read();
        assert_eq!(reading.buckets[0], 2, "0 and 1 ms are at most 1 ms");
        assert_eq!(reading.buckets[1], 2, "2 and 5 ms");
        assert_eq!(reading.buckets[BOUNDS_MS.len() - 1], 1, "1 h");
        assert_eq!(reading.buckets[BOUNDS_MS.len()], 1, "past the last bound");
        assert_eq!(reading.count(), 6);
        assert_eq!(reading.sum_ms, 7_200_009);
    }
}
