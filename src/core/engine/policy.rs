//! What happens to a task after it is dispatched: how long its lease lasts,
//! how often it is retried and how long apart, and how many tasks of one
//! fairness key may run at once or start per second.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{UnixMillis, millis};
use crate::core::fairness::{CostCurve, boost_passes};
use crate::model::validate::MAX_TASK_SIZE;
use crate::model::{StoredTask, ValidationError};

/// A queue's task policy (section `[tasks]`, overridden per queue in
/// `[queues."name"]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskPolicy {
    /// A dispatched task is delivered again when its worker has not
    /// completed, failed or heartbeated it for this long.
    #[serde(with = "crate::clock::duration_serde")]
    pub lease_timeout: Duration,
    /// Deliveries before a failing task becomes a dead letter (1: no retry).
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles for each further one...
    #[serde(with = "crate::clock::duration_serde")]
    pub backoff_initial: Duration,
    /// ...up to this.
    #[serde(with = "crate::clock::duration_serde")]
    pub backoff_max: Duration,
    /// Each wait is moved at random by up to this fraction of it, either way.
    pub backoff_jitter: f64,
    /// Tasks of one fairness key running at once, per partition (0: no limit).
    pub key_concurrency: u32,
    /// Tasks of one fairness key started per second, per partition (0: no limit)...
    pub key_rate_per_second: f64,
    /// ...with bursts of up to this many.
    pub key_burst: u32,
    /// How tasks of different fairness keys are ordered within a priority
    /// level: `"fair"` (weighted fair, the default), `"fifo"` (order of
    /// arrival, as a plain queue would; for comparison and for queues whose
    /// keys need no fairness) or `"deadline"` (earliest deadline first,
    /// whatever the key; a task without a deadline goes by its add time).
    pub ordering: DispatchOrder,
    /// With `"deadline"` ordering: a task whose deadline has passed goes
    /// after the tasks due within this much of now, and before those due
    /// later. Late tasks wait while work on time is urgent (so that one late
    /// task does not make the others late in turn), and are not starved by
    /// work that could wait.
    #[serde(with = "crate::clock::duration_serde")]
    pub late_slack: Duration,
    /// With `"fair"` ordering: how a task's `size` becomes the cost its key
    /// is charged, `"linear"` or `"log"` (small jobs first); a task that
    /// gives a cost instead is charged that.
    pub cost_curve: CostCurve,
    /// The size that costs the most (`MAX_TASK_COST`) on the curve; larger
    /// sizes cost as much.
    pub cost_reference_size: u64,
    /// With `"fair"` ordering: a task that has waited this long since it was
    /// first added is moved to the front of its priority level, whatever its
    /// key, weight or cost, and such tasks go oldest first (0: never).
    #[serde(with = "crate::clock::duration_serde")]
    pub max_wait: Duration,
    /// With `"fair"` ordering, for keys in a group (`engine.weights.groups`):
    /// the work (in costs) a group may be dispatched ahead of its share so
    /// that a key of the group with nothing waiting goes at the front, as a
    /// key of its own would, instead of behind the group's other keys (0:
    /// a group's keys go first come, first served).
    pub group_lead: u64,
    /// With `"fair"` ordering and a `max_wait`: a waiting task competes up
    /// to this many strides of a weight-1 key ahead of its place, rising on
    /// a log of its wait to the full boost at `max_wait` (0: off). Applied
    /// among the tasks the owner holds in memory.
    pub age_boost: u32,
}

/// The largest `age_boost`, in strides of a weight-1 key.
pub const MAX_AGE_BOOST: u32 = 1000;

/// The largest `group_lead`: a thousand tasks of the largest cost.
pub const MAX_GROUP_LEAD: u64 = 1_000_000;

/// The longest `max_wait` a queue may set.
pub const MAX_WAIT_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);

/// The order of dispatch within a priority level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DispatchOrder {
    /// Weighted fair between fairness keys, FIFO within a key.
    #[default]
    Fair,
    /// Order of arrival, whatever the key.
    Fifo,
    /// Earliest deadline first, whatever the key; order of arrival between
    /// equal deadlines.
    Deadline,
}

impl Default for TaskPolicy {
    fn default() -> Self {
        TaskPolicy {
            lease_timeout: Duration::from_secs(60),
            max_attempts: 5,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            backoff_jitter: 0.2,
            key_concurrency: 0,
            key_rate_per_second: 0.0,
            key_burst: 1,
            ordering: DispatchOrder::Fair,
            late_slack: Duration::from_secs(15 * 60),
            cost_curve: CostCurve::Linear,
            cost_reference_size: 1000,
            max_wait: Duration::ZERO,
            group_lead: 0,
            age_boost: 0,
        }
    }
}

/// What becomes of a task whose attempt failed or whose lease expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Tried again, not before this time.
    Retry {
        /// The earliest time of the next attempt, in ms since the Unix epoch.
        not_before: UnixMillis,
    },
    /// No attempt left (or not retryable): a dead letter.
    Bury,
}

impl TaskPolicy {
    /// Checks the values an operator set in `section` (`tasks`, or
    /// `queues."name"`); the error names the key and the limit.
    pub fn validate(&self, section: &str) -> Result<(), ValidationError> {
        let fail = |name: &str, message: String| Err(ValidationError::new(format!("{section}.{name}"), message));
        if self.lease_timeout < Duration::from_secs(1) || self.lease_timeout > Duration::from_secs(24 * 3600) {
            return fail("lease_timeout", format!("is {:?}; it must be 1s to 24h", self.lease_timeout));
        }
        if !(1..=1000).contains(&self.max_attempts) {
            return fail("max_attempts", format!("is {}; it must be 1 to 1000", self.max_attempts));
        }
        if self.backoff_initial > self.backoff_max {
            return fail(
                "backoff_initial",
                format!("is {:?}, above backoff_max {:?}", self.backoff_initial, self.backoff_max),
            );
        }
        if !(0.0..=1.0).contains(&self.backoff_jitter) {
            return fail("backoff_jitter", format!("is {}; it must be 0 to 1", self.backoff_jitter));
        }
        if !(self.key_rate_per_second >= 0.0 && self.key_rate_per_second <= 1e6) {
            return fail(
                "key_rate_per_second",
                format!("is {}; it must be 0 (no limit) to 1000000", self.key_rate_per_second),
            );
        }
        if self.key_burst == 0 {
            return fail("key_burst", "is 0; it must be at least 1".to_owned());
        }
        if self.late_slack > Duration::from_secs(7 * 24 * 3600) {
            return fail("late_slack", format!("is {:?}; it must be at most 7 days", self.late_slack));
        }
        if !self.max_wait.is_zero() && !(Duration::from_secs(1)..=MAX_WAIT_LIMIT).contains(&self.max_wait) {
            return fail("max_wait", format!("is {:?}; it must be 0 (never) or 1s to 30 days", self.max_wait));
        }
        if !(1..=MAX_TASK_SIZE).contains(&self.cost_reference_size) {
            return fail(
                "cost_reference_size",
                format!("is {}; it must be 1 to {MAX_TASK_SIZE}", self.cost_reference_size),
            );
        }
        if self.group_lead > MAX_GROUP_LEAD {
            return fail(
                "group_lead",
                format!("is {}; it must be 0 (off) to {MAX_GROUP_LEAD} (in costs)", self.group_lead),
            );
        }
        if self.age_boost > MAX_AGE_BOOST {
            return fail(
                "age_boost",
                format!("is {}; it must be 0 (off) to {MAX_AGE_BOOST} (strides of a weight-1 key)", self.age_boost),
            );
        }
        if self.age_boost > 0 && self.max_wait.is_zero() {
            return fail(
                "age_boost",
                format!(
                    "is {} but max_wait is 0: the boost grows with a task's wait up to max_wait; set a max_wait",
                    self.age_boost
                ),
            );
        }
        Ok(())
    }

    /// The passes a task that has waited `waited_ms` competes ahead of its
    /// own (0 without an `age_boost`).
    pub fn age_boost_passes(&self, waited_ms: i64) -> i64 {
        boost_passes(self.age_boost, waited_ms, millis(self.max_wait))
    }

    /// The cost a task is charged in fair order: the cost it gave, or its
    /// size on the queue's curve.
    pub fn cost_of(&self, task: &StoredTask) -> u32 {
        task.size.map_or(task.cost, |size| self.cost_curve.cost(size, self.cost_reference_size))
    }

    /// The lease timeout in milliseconds.
    pub fn lease_ms(&self) -> i64 {
        millis(self.lease_timeout)
    }

    /// Decides the next step of a task whose attempt number `attempt` failed.
    /// `unit` is a random number in `[0, 1)` for the jitter; `retry_after`
    /// is the worker's own minimum wait, if it gave one.
    pub fn after_failure(
        &self,
        attempt: u32,
        retryable: bool,
        retry_after: Option<Duration>,
        now: UnixMillis,
        unit: f64,
    ) -> AfterFailure {
        if !retryable || attempt >= self.max_attempts {
            return AfterFailure::Bury;
        }
        let doublings = attempt.saturating_sub(1).min(62);
        let base = millis(self.backoff_initial).saturating_mul(1i64 << doublings).min(millis(self.backoff_max));
        let jitter = (base as f64 * self.backoff_jitter * (2.0 * unit - 1.0)) as i64;
        let wait = (base + jitter).max(0).max(retry_after.map_or(0, millis));
        AfterFailure::Retry { not_before: now + wait }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> TaskPolicy {
        TaskPolicy {
            max_attempts: 4,
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(5),
            backoff_jitter: 0.5,
            ..TaskPolicy::default()
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum_within_the_jitter() {
        let p = policy();
        let wait = |attempt, unit| match p.after_failure(attempt, true, None, 1_000, unit) {
            AfterFailure::Retry { not_before } => not_before - 1_000,
            AfterFailure::Bury => panic!("attempt {attempt} should be retried"),
        };
        assert_eq!(wait(1, 0.5), 2_000);
        assert_eq!(wait(2, 0.5), 4_000);
        assert_eq!(wait(3, 0.5), 5_000, "capped at backoff_max");
        assert_eq!(wait(1, 0.0), 1_000, "jitter takes off up to half");
        assert!((2_999..=3_000).contains(&wait(1, 0.999_999)), "and adds up to half");
    }

    #[test]
    fn the_last_attempt_and_non_retryable_failures_are_buried() {
        let p = policy();
        assert_eq!(p.after_failure(4, true, None, 0, 0.5), AfterFailure::Bury);
        assert_eq!(p.after_failure(1, false, None, 0, 0.5), AfterFailure::Bury);
    }

    #[test]
    fn retry_after_is_a_minimum() {
        let p = policy();
        let long = p.after_failure(1, true, Some(Duration::from_secs(60)), 0, 0.5);
        assert_eq!(long, AfterFailure::Retry { not_before: 60_000 });
        let short = p.after_failure(1, true, Some(Duration::from_millis(10)), 0, 0.5);
        assert_eq!(short, AfterFailure::Retry { not_before: 2_000 });
    }

    #[test]
    fn bad_values_are_named() {
        let bad = TaskPolicy { max_attempts: 0, ..TaskPolicy::default() };
        assert_eq!(bad.validate("tasks").unwrap_err().field, "tasks.max_attempts");
        let bad = TaskPolicy { backoff_jitter: 2.0, ..TaskPolicy::default() };
        assert_eq!(bad.validate("queues.\"q\"").unwrap_err().field, "queues.\"q\".backoff_jitter");
        let bad = TaskPolicy { cost_reference_size: 0, ..TaskPolicy::default() };
        let error = bad.validate("tasks").unwrap_err();
        assert_eq!(error.field, "tasks.cost_reference_size");
        assert!(error.to_string().contains("1 to 1000000000000000"), "{error}");
    }

    #[test]
    fn a_max_wait_is_off_or_one_second_to_thirty_days() {
        for text in ["0s", "1s", "30d"] {
            let policy: TaskPolicy = toml::from_str(&format!("max_wait = \"{text}\"")).unwrap();
            assert!(policy.validate("tasks").is_ok(), "{text}");
        }
        assert!(TaskPolicy::default().max_wait.is_zero(), "off by default");
        for text in ["500ms", "31d"] {
            let policy: TaskPolicy = toml::from_str(&format!("max_wait = \"{text}\"")).unwrap();
            let error = policy.validate("queues.\"imports\"").unwrap_err();
            assert_eq!(error.field, "queues.\"imports\".max_wait");
            assert!(error.to_string().contains("0 (never) or 1s to 30 days"), "{error}");
        }
    }

    #[test]
    fn a_group_lead_is_off_by_default_and_bounded() {
        assert_eq!(TaskPolicy::default().group_lead, 0);
        let policy: TaskPolicy = toml::from_str("group_lead = 1000000").unwrap();
        assert!(policy.validate("tasks").is_ok());
        let policy: TaskPolicy = toml::from_str("group_lead = 1000001").unwrap();
        let error = policy.validate("queues.\"imports\"").unwrap_err();
        assert_eq!(error.field, "queues.\"imports\".group_lead");
        assert!(error.to_string().contains("0 (off) to 1000000"), "{error}");
    }

    #[test]
    fn an_age_boost_needs_a_max_wait_and_is_bounded() {
        assert_eq!(TaskPolicy::default().age_boost, 0);
        let policy: TaskPolicy = toml::from_str("max_wait = \"1h\"\nage_boost = 8").unwrap();
        assert!(policy.validate("tasks").is_ok());
        let policy: TaskPolicy = toml::from_str("age_boost = 8").unwrap();
        let error = policy.validate("tasks").unwrap_err();
        assert_eq!(error.field, "tasks.age_boost");
        assert!(error.to_string().contains("set a max_wait"), "{error}");
        let policy: TaskPolicy = toml::from_str("max_wait = \"1h\"\nage_boost = 1001").unwrap();
        assert!(policy.validate("tasks").unwrap_err().to_string().contains("0 (off) to 1000"));
    }

    #[test]
    fn cost_curves_are_named_in_lowercase() {
        let policy: TaskPolicy = toml::from_str("cost_curve = \"log\"\ncost_reference_size = 100000").unwrap();
        assert_eq!((policy.cost_curve, policy.cost_reference_size), (CostCurve::Log, 100_000));
        assert_eq!(TaskPolicy::default().cost_curve, CostCurve::Linear);
        let error = toml::from_str::<TaskPolicy>("cost_curve = \"logarithmic\"").unwrap_err().to_string();
        assert!(error.contains("linear") && error.contains("log"), "{error}");
    }

    #[test]
    fn orderings_are_named_in_lowercase() {
        for (name, ordering) in
            [("fair", DispatchOrder::Fair), ("fifo", DispatchOrder::Fifo), ("deadline", DispatchOrder::Deadline)]
        {
            let policy: TaskPolicy = toml::from_str(&format!("ordering = \"{name}\"")).unwrap();
            assert_eq!(policy.ordering, ordering);
        }
        assert!(toml::from_str::<TaskPolicy>("ordering = \"edf\"").is_err());
    }
}
