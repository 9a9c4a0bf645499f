//! Schedule records for the tests of the firing loop.

use crate::clock::UnixMillis;
use crate::core::schedules::{Cadence, Overlap, ScheduleSpec, ScheduleStats};
use crate::store::schedules::{RunTemplate, ScheduleRecord};

/// A new schedule `id` of `cadence`, created at `created_at`, whose runs go
/// to queue `runs` under its id as the fairness key; no run overlaps another.
pub(super) fn record(id: &str, cadence: Cadence, created_at: UnixMillis) -> ScheduleRecord {
    ScheduleRecord {
        id: id.to_owned(),
        version: 1,
        spec: ScheduleSpec {
            cadence,
            time_zone: "UTC".into(),
            blackouts: Vec::new(),
            start_at: None,
            end_at: None,
            remaining_runs: None,
            catchup_window_ms: 3_600_000,
            overlap: Overlap::Skip,
            max_expected_duration_ms: None,
            max_allowed_duration_ms: None,
        },
        template: RunTemplate {
            queue: "runs".into(),
            payload: Vec::new(),
            fairness_key: id.to_owned(),
            fairness_weight: None,
            priority: 3,
        },
        stats: ScheduleStats { created_at, ..Default::default() },
        paused: None,
        created_by: String::new(),
    }
}
