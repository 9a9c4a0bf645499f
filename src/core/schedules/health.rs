//! A schedule's health, as the deadline-greedy design defines it.

use serde::{Deserialize, Serialize};

use super::{Calendar, ScheduleSpec, ScheduleStats};
use crate::clock::UnixMillis;

/// How a schedule is doing against its constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Everything is fine.
    Ok,
    /// Something went wrong, the constraint still holds.
    Warning,
    /// The constraint is broken: the data may be stale.
    Error,
}

/// A schedule's health and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// The health.
    pub health: Health,
    /// Why, in words for an operator (e.g. "last run failed").
    pub reason: String,
    /// When it turns (or turned) ERROR if no run ends well before.
    pub error_at: Option<UnixMillis>,
}

/// The health of a schedule at `now`.
pub fn health(
    _calendar: &Calendar,
    _id: &str,
    _spec: &ScheduleSpec,
    _stats: &ScheduleStats,
    _now: UnixMillis,
) -> HealthReport {
    todo!("core::schedules::health")
}
