//! `UpdateQueue`, `PauseQueue` and `ResumeQueue`: the settings stored with
//! a queue, changed from requests and shown in their protobuf form.
//!
//! Invariant: a change is made of a request only once every field of it
//! was checked (the error names the field and its bound); the settings it
//! makes are checked again as a whole before they are written, by
//! [`Queues::update_settings`].

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, caller};
use super::convert::duration;
use super::status;
use crate::core::fairness::CostCurve;
use crate::matcher::{MatchError, Queues};
use crate::model::{QueueName, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::store::QueueSettings;

/// The settings `clear` may name, as UpdateQueue's fields spell them.
const CLEARABLE: [&str; 11] = [
    "lease_timeout",
    "max_attempts",
    "backoff_initial",
    "backoff_max",
    "key_concurrency",
    "key_rate_per_second",
    "key_burst",
    "cost_curve",
    "cost_reference_size",
    "group_lead",
    "weights",
];

/// The task settings a queue cannot store: they place tasks as they are
/// written, so only the config file sets them.
const FIXED: [&str; 5] = ["ordering", "max_wait", "age_boost", "late_slack", "backoff_jitter"];

/// What an UpdateQueue request changes, checked field by field.
#[derive(Debug)]
struct SettingsChange {
    /// The settings it sets (its weights aside).
    set: QueueSettings,
    /// Weights to set (`Some`) or remove (`None`), by key.
    weights: Vec<(String, Option<f64>)>,
    /// The settings it sends back to the config file's.
    clear: Vec<&'static str>,
}

impl SettingsChange {
    fn of(request: &pb::UpdateQueueRequest) -> Result<SettingsChange, ValidationError> {
        let given = request.settings.clone().unwrap_or_default();
        let ms = |field: &str, d: Option<prost_types::Duration>| -> Result<Option<u64>, ValidationError> {
            Ok(duration(&format!("settings.{field}"), d)?.map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64))
        };
        let cost_curve = match given.cost_curve.as_deref() {
            None => None,
            Some("linear") => Some(CostCurve::Linear),
            Some("log") => Some(CostCurve::Log),
            Some(other) => {
                return Err(ValidationError::new(
                    "settings.cost_curve",
                    format!("is {other:?}; it must be \"linear\" or \"log\""),
                ));
            }
        };
        let set = QueueSettings {
            lease_timeout_ms: ms("lease_timeout", given.lease_timeout)?,
            max_attempts: given.max_attempts,
            backoff_initial_ms: ms("backoff_initial", given.backoff_initial)?,
            backoff_max_ms: ms("backoff_max", given.backoff_max)?,
            key_concurrency: given.key_concurrency,
            key_rate_per_second: given.key_rate_per_second,
            key_burst: given.key_burst,
            cost_curve,
            cost_reference_size: given.cost_reference_size,
            group_lead: given.group_lead,
            ..QueueSettings::default()
        };
        // The fields set, checked alone (the weights below).
        set.validate("settings")?;
        if given.weights.len() > crate::store::queue_settings::MAX_STORED_WEIGHTS {
            return Err(ValidationError::new(
                "settings.weights",
                format!(
                    "has {} keys; the limit is {}",
                    given.weights.len(),
                    crate::store::queue_settings::MAX_STORED_WEIGHTS
                ),
            ));
        }
        let mut weights = Vec::with_capacity(given.weights.len());
        for (key, weight) in given.weights {
            validate::fairness_key("settings.weights key", &key)?;
            let weight = validate::fairness_weight(&format!("settings.weights[{key:?}]"), weight)?;
            weights.push((key, weight));
        }
        let mut clear = Vec::with_capacity(request.clear.len());
        for name in &request.clear {
            if FIXED.contains(&name.as_str()) {
                return Err(ValidationError::new(
                    "clear",
                    format!("names {name:?}, which the config file alone sets: it places tasks as they are written"),
                ));
            }
            let Some(field) = CLEARABLE.iter().find(|field| **field == name) else {
                return Err(ValidationError::new(
                    "clear",
                    format!("names {name:?}, which is not a setting; it may name {}", CLEARABLE.join(", ")),
                ));
            };
            clear.push(*field);
        }
        Ok(SettingsChange { set, weights, clear })
    }

    /// `current` with this change made.
    fn apply(&self, current: QueueSettings) -> QueueSettings {
        let mut next = current;
        for field in &self.clear {
            match *field {
                "lease_timeout" => next.lease_timeout_ms = None,
                "max_attempts" => next.max_attempts = None,
                "backoff_initial" => next.backoff_initial_ms = None,
                "backoff_max" => next.backoff_max_ms = None,
                "key_concurrency" => next.key_concurrency = None,
                "key_rate_per_second" => next.key_rate_per_second = None,
                "key_burst" => next.key_burst = None,
                "cost_curve" => next.cost_curve = None,
                "cost_reference_size" => next.cost_reference_size = None,
                "group_lead" => next.group_lead = None,
                _ => next.weights.clear(),
            }
        }
        let set = &self.set;
        next.lease_timeout_ms = set.lease_timeout_ms.or(next.lease_timeout_ms);
        next.max_attempts = set.max_attempts.or(next.max_attempts);
        next.backoff_initial_ms = set.backoff_initial_ms.or(next.backoff_initial_ms);
        next.backoff_max_ms = set.backoff_max_ms.or(next.backoff_max_ms);
        next.key_concurrency = set.key_concurrency.or(next.key_concurrency);
        next.key_rate_per_second = set.key_rate_per_second.or(next.key_rate_per_second);
        next.key_burst = set.key_burst.or(next.key_burst);
        next.cost_curve = set.cost_curve.or(next.cost_curve);
        next.cost_reference_size = set.cost_reference_size.or(next.cost_reference_size);
        next.group_lead = set.group_lead.or(next.group_lead);
        for (key, weight) in &self.weights {
            match weight {
                Some(weight) => next.weights.insert(key.clone(), *weight),
                None => next.weights.remove(key),
            };
        }
        next
    }
}

/// A stored settings value as clients see it.
pub(super) fn to_proto(settings: &QueueSettings) -> pb::QueueSettings {
    let duration = |ms: Option<u64>| {
        ms.map(|ms| prost_types::Duration::try_from(Duration::from_millis(ms)).expect("at most 30 days"))
    };
    pb::QueueSettings {
        version: settings.version,
        lease_timeout: duration(settings.lease_timeout_ms),
        max_attempts: settings.max_attempts,
        backoff_initial: duration(settings.backoff_initial_ms),
        backoff_max: duration(settings.backoff_max_ms),
        key_concurrency: settings.key_concurrency,
        key_rate_per_second: settings.key_rate_per_second,
        key_burst: settings.key_burst,
        cost_curve: settings.cost_curve.map(|curve| {
            match curve {
                CostCurve::Linear => "linear",
                CostCurve::Log => "log",
            }
            .to_owned()
        }),
        cost_reference_size: settings.cost_reference_size,
        group_lead: settings.group_lead,
        weights: settings.weights.iter().map(|(key, weight)| (key.clone(), *weight)).collect(),
        paused: settings.paused,
        paused_keys: settings.paused_keys.iter().cloned().collect(),
    }
}

/// `UpdateQueue`.
pub(super) async fn update(
    queues: &Queues,
    request: Request<pb::UpdateQueueRequest>,
) -> Result<Response<pb::UpdateQueueResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
    authorize(&caller, Rpc::UpdateQueue, queue.as_str(), None)?;
    let change = SettingsChange::of(&request).map_err(status::invalid)?;
    let expected = request.expected_version;
    let stored = store(queues, &queue, expected, |current| change.apply(current)).await?;
    tracing::info!(target: "fairway::audit", caller = caller.name(), %queue, version = stored.version, settings = %stored.encode(), "updated the queue's settings");
    Ok(Response::new(pb::UpdateQueueResponse { settings: Some(to_proto(&stored)) }))
}

/// `PauseQueue` (`pause`) or `ResumeQueue`.
pub(super) async fn pause(
    queues: &Queues,
    caller: crate::security::Caller,
    queue: &str,
    fairness_key: Option<String>,
    pause: bool,
) -> Result<QueueSettings, Status> {
    let queue = validate::queue_name("queue", queue).map_err(status::invalid)?;
    authorize(&caller, if pause { Rpc::PauseQueue } else { Rpc::ResumeQueue }, queue.as_str(), None)?;
    if let Some(key) = &fairness_key {
        validate::fairness_key("fairness_key", key).map_err(status::invalid)?;
    }
    let stored = store(queues, &queue, 0, |mut current| {
        match &fairness_key {
            None => current.paused = pause,
            Some(key) if pause => drop(current.paused_keys.insert(key.clone())),
            Some(key) => drop(current.paused_keys.remove(key)),
        }
        current
    })
    .await?;
    let what = if pause { "paused" } else { "resumed" };
    tracing::info!(target: "fairway::audit", caller = caller.name(), %queue, fairness_key = ?fairness_key, version = stored.version, "{what}");
    Ok(stored)
}

/// Stores what `change` makes of the queue's settings, at version
/// `expected` unless it is 0.
async fn store(
    queues: &Queues,
    queue: &QueueName,
    expected: u64,
    change: impl Fn(QueueSettings) -> QueueSettings,
) -> Result<QueueSettings, Status> {
    let stored = queues
        .update_settings(queue, |current| {
            if expected != 0 && current.version != expected {
                return Err(MatchError::StaleSettings { queue: queue.to_string(), expected, stored: current.version });
            }
            Ok(change(current))
        })
        .await
        .map_err(status::from_match)?;
    Ok(stored.settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(settings: pb::QueueSettings, clear: &[&str]) -> pb::UpdateQueueRequest {
        pb::UpdateQueueRequest {
            queue: "q".into(),
            settings: Some(settings),
            clear: clear.iter().map(|c| c.to_string()).collect(),
            expected_version: 0,
        }
    }

    #[test]
    fn a_change_sets_clears_and_weighs_and_leaves_the_rest() {
        let current = QueueSettings {
            version: 4,
            max_attempts: Some(3),
            key_burst: Some(9),
            weights: [("a".to_owned(), 2.0), ("b".to_owned(), 3.0)].into(),
            paused_keys: ["k".to_owned()].into(),
            ..QueueSettings::default()
        };
        let given = pb::QueueSettings {
            lease_timeout: Some(prost_types::Duration { seconds: 5, nanos: 0 }),
            cost_curve: Some("log".into()),
            weights: [("a".to_owned(), 0.0), ("c".to_owned(), 0.5)].into(),
            paused: true,
            ..Default::default()
        };
        let next = SettingsChange::of(&request(given, &["key_burst"])).unwrap().apply(current.clone());
        assert_eq!(next.lease_timeout_ms, Some(5_000));
        assert_eq!(next.max_attempts, Some(3), "kept");
        assert_eq!(next.key_burst, None, "cleared");
        assert_eq!(next.cost_curve, Some(CostCurve::Log));
        assert_eq!(next.weights, [("b".to_owned(), 3.0), ("c".to_owned(), 0.5)].into(), "a weight of 0 removes one");
        assert!(!next.paused && next.paused_keys == current.paused_keys, "pauses are not UpdateQueue's");
        let shown = to_proto(&next);
        assert_eq!(shown.lease_timeout, Some(prost_types::Duration { seconds: 5, nanos: 0 }));
        assert_eq!(shown.cost_curve.as_deref(), Some("log"));
    }

    #[test]
    fn a_bad_field_is_named_with_its_bound() {
        let refused = |settings: pb::QueueSettings, clear: &[&str]| {
            SettingsChange::of(&request(settings, clear)).unwrap_err().to_string()
        };
        let short = pb::QueueSettings {
            lease_timeout: Some(prost_types::Duration { seconds: 0, nanos: 5 }),
            ..Default::default()
        };
        assert!(refused(short, &[]).starts_with("settings.lease_timeout: "));
        let negative = pb::QueueSettings {
            backoff_max: Some(prost_types::Duration { seconds: -1, nanos: 0 }),
            ..Default::default()
        };
        assert!(refused(negative, &[]).contains("settings.backoff_max"));
        let curve = pb::QueueSettings { cost_curve: Some("cubic".into()), ..Default::default() };
        assert!(refused(curve, &[]).contains("\"linear\" or \"log\""));
        let weight = pb::QueueSettings { weights: [("k".to_owned(), 5000.0)].into(), ..Default::default() };
        assert!(refused(weight, &[]).contains("settings.weights[\"k\"]"));
        assert!(refused(pb::QueueSettings::default(), &["ordering"]).contains("the config file alone sets"));
        assert!(refused(pb::QueueSettings::default(), &["lease"]).contains("which is not a setting"));
        let many =
            pb::QueueSettings { weights: (0..101).map(|i| (format!("k{i}"), 1.0)).collect(), ..Default::default() };
        assert!(refused(many, &[]).contains("the limit is 100"));
    }
}
