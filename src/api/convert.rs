//! Public messages ⇄ domain values, validating on the way in.

use std::time::Duration;

use crate::core::engine::dispatch_tally::{RecentDispatch, Tally};
use crate::core::engine::{DeadLetterFilter, KeyBacklog, PartitionSnapshot, TaskCounts};
use crate::matcher::{DispatchedTask, PartitionReport};
use crate::model::{FairLevel, Limits, Priority, TaskHistory, TaskSpec, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::security::ClusterKeys;
use crate::store::PartitionMeta;
use crate::store::RecordTask;

/// Validates one task spec; `field` is its path in the request (`task`,
/// `tasks[3]`), built only if the spec is invalid.
pub(super) fn task_spec(
    field: impl Fn() -> String,
    spec: Option<pb::TaskSpec>,
    limits: &Limits,
) -> Result<TaskSpec, ValidationError> {
    let spec = spec.ok_or_else(|| ValidationError::new(field(), "is missing"))?;
    checked_spec(spec, limits).map_err(|error| error.within(&field()))
}

/// A task spec, validated; its errors name fields within the spec.
fn checked_spec(spec: pb::TaskSpec, limits: &Limits) -> Result<TaskSpec, ValidationError> {
    validate::fairness_key("fairness_key", &spec.fairness_key)?;
    let fairness_weight = validate::fairness_weight("fairness_weight", spec.fairness_weight)?;
    let priority = validate::priority("priority", spec.priority)?;
    validate::payload("payload", spec.payload.len(), limits)?;
    let dedup_id = validate::dedup_id("dedup_id", spec.dedup_id)?;
    let delay = validate::delay("delay", duration("delay", spec.delay)?, limits)?;
    let deadline = spec.deadline.map(|d| validate::deadline("deadline", d.seconds, d.nanos)).transpose()?;
    let size = validate::size("size", spec.size, spec.cost)?;
    let cost = validate::cost("cost", spec.cost)?;
    // A producer's task is always fresh: the message has no attempt nor
    // creation time, and only the crate makes any other history.
    let history = TaskHistory::default();
    Ok(TaskSpec {
        fairness_key: spec.fairness_key,
        fairness_weight,
        priority,
        payload: spec.payload,
        dedup_id,
        delay,
        deadline,
        cost,
        size,
        history,
    })
}

/// A protobuf duration as a `Duration`; negative or malformed is invalid.
pub(super) fn duration(field: &str, d: Option<prost_types::Duration>) -> Result<Option<Duration>, ValidationError> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(ValidationError::new(
            field,
            format!("is {}s {}ns; it must be a non-negative duration", d.seconds, d.nanos),
        ));
    }
    Ok(Some(Duration::new(d.seconds as u64, d.nanos as u32)))
}

/// A dispatched task as its worker gets it, its lease token signed with
/// `keys` as they sign at `now_ms`.
pub(super) fn task(dispatched: DispatchedTask, keys: &ClusterKeys, now_ms: i64) -> pb::Task {
    let DispatchedTask { partition, task, token, lease_deadline } = dispatched;
    pb::Task {
        task_id: task.task_id,
        lease_token: token.sign(keys, now_ms),
        fairness_key: task.fairness_key,
        priority: task.priority.get(),
        payload: task.payload,
        attempt: task.attempt,
        lease_deadline: Some(timestamp(lease_deadline)),
        partition,
        deadline: task.deadline_unix_ms.map(timestamp),
    }
}

/// A dead letter as listed; its payload only if `with_payload`.
pub(super) fn dead_letter(partition: u32, dead: RecordTask, with_payload: bool) -> pb::DeadLetter {
    let RecordTask { task, at_unix_ms, message } = dead;
    pb::DeadLetter {
        task_id: task.task_id,
        partition,
        fairness_key: task.fairness_key,
        priority: task.priority.get(),
        payload_bytes: task.payload.len() as u64,
        payload: if with_payload { task.payload } else { Vec::new() },
        attempts: task.attempt,
        failed_at: Some(timestamp(at_unix_ms)),
        message,
        dedup_id: task.dedup_id.unwrap_or_default(),
    }
}

/// Validates a filter of dead letters; unset means every letter.
pub(super) fn dead_letter_filter(filter: Option<pb::DeadLetterFilter>) -> Result<DeadLetterFilter, ValidationError> {
    let Some(filter) = filter else { return Ok(DeadLetterFilter::default()) };
    let field = |name: &str| format!("filter.{name}");
    if let Some(key) = &filter.fairness_key {
        validate::fairness_key(&field("fairness_key"), key)?;
    }
    validate::failure_message(&field("message_contains"), &filter.message_contains)?;
    let time = |name: &str, at: Option<prost_types::Timestamp>| at.map(|at| unix_ms(&field(name), &at)).transpose();
    let failed_from = time("failed_from", filter.failed_from)?;
    let failed_before = time("failed_before", filter.failed_before)?;
    if let (Some(from), Some(before)) = (failed_from, failed_before)
        && from >= before
    {
        return Err(ValidationError::new(
            field("failed_before"),
            format!("is {before} ms, not after failed_from ({from} ms): no letter can match"),
        ));
    }
    let message_contains = Some(filter.message_contains).filter(|text| !text.is_empty());
    Ok(DeadLetterFilter { fairness_key: filter.fairness_key, message_contains, failed_from, failed_before })
}

/// A protobuf timestamp as ms since the Unix epoch; bad nanoseconds or a
/// time out of range are invalid.
pub(super) fn unix_ms(field: &str, at: &prost_types::Timestamp) -> Result<i64, ValidationError> {
    if !(0..1_000_000_000).contains(&at.nanos) {
        return Err(ValidationError::new(field, format!("has {} nanoseconds; they must be 0 to 999999999", at.nanos)));
    }
    at.seconds
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(i64::from(at.nanos / 1_000_000)))
        .ok_or_else(|| ValidationError::new(field, format!("{} seconds is out of range", at.seconds)))
}

/// A Unix time in milliseconds as a protobuf timestamp.
pub(super) fn timestamp(unix_ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: unix_ms.div_euclid(1000), nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32 }
}

fn level(level: FairLevel) -> Option<pb::FairLevel> {
    Some(pb::FairLevel { pass: level.pass, id: level.id })
}

fn key_state(key: KeyBacklog) -> pb::KeyState {
    pb::KeyState {
        fairness_key: key.fairness_key,
        buffered: key.buffered,
        pass_ahead: key.pass_ahead,
        oldest_added_at: Some(timestamp(key.oldest_added_at)),
    }
}

pub(super) fn subqueues(snapshot: PartitionSnapshot) -> Vec<pb::SubqueueState> {
    snapshot
        .subqueues
        .into_iter()
        .map(|s| pb::SubqueueState {
            priority: s.priority.get(),
            ack_level: level(s.ack_level),
            read_level: level(s.read_level),
            max_level: level(s.max_level),
            buffered: s.buffered,
            backlog: s.approx_backlog,
            dispatched_above_ack: s.dispatched_above_ack,
            parked_keys: s.parked_keys,
            parked_tasks: s.parked_tasks,
            reader_at_end: s.reader_at_end,
            oldest_added_at: s.oldest_buffered_added_at.map(timestamp),
            top_keys: s.top_keys.into_iter().map(key_state).collect(),
            tracked_keys: s.tracked_keys,
            approximate_keys: s.approximate_keys,
        })
        .collect()
}

/// A partition this node holds, from its engine.
pub(super) fn held_partition(report: &PartitionReport, node: &str) -> pb::PartitionState {
    let (range_id, counts, tasks, bytes, recent, subqueues) = match report.snapshot.clone() {
        Some(mut s) => {
            let bytes = (s.metadata_bytes, s.largest_write_bytes);
            let tasks = (s.leased, s.delayed, s.over_max_wait);
            let recent = std::mem::take(&mut s.recent_dispatch);
            (s.range_id, s.counts, tasks, bytes, recent, self::subqueues(s))
        }
        None => (0, TaskCounts::default(), (0, 0, 0), (0, 0), RecentDispatch::default(), Vec::new()),
    };
    let dispatch = |key: String, tally: Tally, weight: f64| pb::KeyDispatch {
        fairness_key: key,
        tasks: tally.tasks,
        cost: tally.cost,
        weight,
    };
    let recent_span = Duration::from_millis(recent.span_ms.max(0) as u64);
    let (leased, delayed, tasks_over_max_wait) = tasks;
    pb::PartitionState {
        partition: report.partition,
        range_id,
        owner: node.to_owned(),
        subqueues,
        dispatched: counts.dispatched,
        added: counts.added,
        leased,
        delayed,
        completed: counts.completed,
        failed: counts.failed,
        expired: counts.expired,
        metadata_bytes: bytes.0,
        largest_write_bytes: bytes.1,
        tasks_over_max_wait,
        recent_dispatch: recent.keys.into_iter().map(|k| dispatch(k.fairness_key, k.tally, k.weight)).collect(),
        recent_others: Some(dispatch(String::new(), recent.others, 0.0)),
        recent_span: prost_types::Duration::try_from(recent_span).ok(),
        state: format!("{:?}", report.state).to_lowercase(),
    }
}

/// A partition held elsewhere (or by no one), from its stored metadata.
pub(super) fn stored_partition(partition: u32, stored: Option<PartitionMeta>) -> pb::PartitionState {
    let meta = stored.unwrap_or_default();
    let subqueues = Priority::all()
        .zip(&meta.subqueues)
        .map(|(priority, s)| pb::SubqueueState {
            priority: priority.get(),
            ack_level: level(s.ack_level),
            max_level: level(s.max_level),
            backlog: s.approx_backlog.max(0) as u64,
            ..Default::default()
        })
        .collect();
    let state = if meta.owner.is_empty() { "unowned" } else { "remote" };
    pb::PartitionState {
        partition,
        range_id: meta.range_id,
        owner: meta.owner,
        subqueues,
        state: state.to_owned(),
        ..Default::default()
    }
}
