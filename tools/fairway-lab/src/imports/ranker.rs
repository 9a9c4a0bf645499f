//! The reference: the data-import chunk ranker's score, with its defaults
//! (research/seed-systems.md §B), and its pick: score every waiting chunk,
//! take the best. The score is the plain sum of four factors:
//! - age, minutes since the chunk's job was queued, on a bounded log from
//!   0 to 50, and 10,000 once past the extreme threshold;
//! - job size, the job's records, on an unbounded log from 40 (small) to
//!   −40 at 100,000 records (and below past it);
//! - tenant usage, the tenant's share of the chunks in progress, linear
//!   from 100 (none) to −200 (all);
//! - part number, `part − 1` on an unbounded log from 1 to 0 at 100.

use super::workload::Chunk;

/// The ranker's defaults, but for the extreme-age threshold, which the
/// workload sets (480 minutes in the ranker).
pub(crate) struct Ranker {
    pub extreme_after_minutes: f64,
}

const AGE: (f64, f64) = (0.0, 50.0);
const AGE_EXTREME_VALUE: f64 = 10_000.0;
const SIZE: (f64, f64, f64) = (40.0, -40.0, 100_000.0);
const USAGE: (f64, f64) = (100.0, -200.0);
const PART: (f64, f64, f64) = (1.0, 0.0, 100.0);

/// `lo + ln(v+1)/ln(ref+1) · (hi − lo)`; 0 when `lo == hi` or `ref == 0`.
pub(crate) fn unbounded_log(value: f64, lo: f64, hi: f64, reference: f64) -> f64 {
    if lo == hi || reference == 0.0 {
        return 0.0;
    }
    lo + (value + 1.0).ln() / (reference + 1.0).ln() * (hi - lo)
}

/// The unbounded log up to `threshold − 1`, and `threshold_score` from it on.
pub(crate) fn bounded_log(value: f64, lo: f64, hi: f64, threshold: f64, threshold_score: f64) -> f64 {
    if value >= threshold { threshold_score } else { unbounded_log(value, lo, hi, threshold - 1.0) }
}

impl Ranker {
    /// The score of `chunk` at `now_ms`, its tenant having `tenant_running`
    /// of the `all_running` chunks in progress.
    pub(crate) fn score(&self, chunk: &Chunk, now_ms: i64, tenant_running: usize, all_running: usize) -> f64 {
        let minutes = (now_ms - chunk.arrived_ms).max(0) as f64 / 60_000.0;
        let age = bounded_log(minutes, AGE.0, AGE.1, self.extreme_after_minutes, AGE_EXTREME_VALUE);
        let size = unbounded_log(chunk.job_records as f64, SIZE.0, SIZE.1, SIZE.2);
        let share = tenant_running as f64 / all_running.max(1) as f64;
        let usage = USAGE.0 + share * (USAGE.1 - USAGE.0);
        let part = unbounded_log(f64::from(chunk.part - 1), PART.0, PART.1, PART.2);
        age + size + usage + part
    }

    /// The index in `waiting` of the best chunk (the highest score; the
    /// first queued between equal scores), scoring every one.
    pub(crate) fn best(&self, waiting: &[Chunk], now_ms: i64, running: &[usize], all_running: usize) -> Option<usize> {
        let mut best: Option<(f64, usize, usize)> = None;
        for (index, chunk) in waiting.iter().enumerate() {
            let score = self.score(chunk, now_ms, running[chunk.tenant], all_running);
            if best.is_none_or(|(s, id, _)| score > s || (score == s && chunk.id < id)) {
                best = Some((score, chunk.id, index));
            }
        }
        best.map(|(_, _, index)| index)
    }
}
