//! The bytes of task rows and metadata rows, shared by every backend
//! (messages of `proto/fairway/v1/storage.proto`).

use prost::Message;

use super::{ParkedKeyMeta, PartitionMeta, StoreError, SubqueueMeta};
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask};
use crate::proto::storage as pb;

/// The bytes of a task row: the task less its level and priority, which the
/// row's key holds.
pub fn encode_task(task: &StoredTask) -> Vec<u8> {
    task_to_pb(task).encode_to_vec()
}

fn task_to_pb(task: &StoredTask) -> pb::StoredTask {
    pb::StoredTask {
        fairness_key: task.fairness_key.clone(),
        fairness_weight: task.fairness_weight.unwrap_or(0.0),
        payload: task.payload.clone(),
        created_at_unix_ms: task.created_at_unix_ms,
        attempt: task.attempt,
        dedup_id: task.dedup_id.clone().unwrap_or_default(),
        task_id: task.task_id,
        dedup_slot: task.dedup_slot,
    }
}

/// The task of the row at `level` of subqueue `priority`; `Corrupt` if the
/// bytes do not decode.
pub fn decode_task(level: FairLevel, priority: Priority, bytes: &[u8]) -> Result<StoredTask, StoreError> {
    let row = pb::StoredTask::decode(bytes).map_err(|e| StoreError::Corrupt(format!("task row at {level}: {e}")))?;
    Ok(task_from_pb(level, priority, row))
}

fn task_from_pb(level: FairLevel, priority: Priority, row: pb::StoredTask) -> StoredTask {
    StoredTask {
        level,
        priority,
        fairness_key: row.fairness_key,
        fairness_weight: (row.fairness_weight != 0.0).then_some(row.fairness_weight),
        payload: row.payload,
        created_at_unix_ms: row.created_at_unix_ms,
        attempt: row.attempt,
        task_id: if row.task_id == 0 { level.id } else { row.task_id },
        dedup_id: (!row.dedup_id.is_empty()).then_some(row.dedup_id),
        dedup_slot: row.dedup_slot,
    }
}

/// A task kept in a record section, with a time (deadline, ready at, failed
/// at) and a message.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordTask {
    /// The task, with the level and priority it had when the record was written.
    pub task: StoredTask,
    /// The record's time, in ms since the Unix epoch: a lease's deadline, when
    /// a delayed task is ready, when a dead letter failed, or when a task was
    /// parked.
    pub at_unix_ms: i64,
    /// A dead letter's failure message; empty in other records.
    pub message: String,
}

/// The bytes of a record holding `task`, its time `at_unix_ms` (see
/// [`RecordTask`]) and `message`.
pub fn encode_record_task(task: &StoredTask, at_unix_ms: i64, message: &str) -> Vec<u8> {
    pb::StoredRecordTask {
        task: Some(task_to_pb(task)),
        priority: task.priority.get(),
        level: level_to_pb(task.level),
        at_unix_ms,
        message: message.to_owned(),
    }
    .encode_to_vec()
}

/// The record of a finished lease: where its task was, without the task.
pub fn encode_finished_lease(priority: Priority, level: FairLevel) -> Vec<u8> {
    pb::StoredRecordTask { priority: priority.get(), level: level_to_pb(level), ..Default::default() }.encode_to_vec()
}

/// A lease record: the running lease, or (`Err`) the priority and level of
/// a finished one.
pub fn decode_lease(bytes: &[u8]) -> Result<Result<RecordTask, (Priority, FairLevel)>, StoreError> {
    let row = pb::StoredRecordTask::decode(bytes).map_err(|e| StoreError::Corrupt(format!("lease record: {e}")))?;
    if row.task.is_some() {
        return decode_record_task(bytes).map(Ok);
    }
    let priority = Priority::new(row.priority)
        .ok_or_else(|| StoreError::Corrupt(format!("lease record: priority {}", row.priority)))?;
    Ok(Err((priority, level_from_pb(row.level))))
}

/// The task record of a lease, delayed, dead-letter or parked record; `Corrupt`
/// if the bytes do not decode or hold no task.
pub fn decode_record_task(bytes: &[u8]) -> Result<RecordTask, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("task record: {e}"));
    let row = pb::StoredRecordTask::decode(bytes).map_err(|e| corrupt(e.to_string()))?;
    let priority = Priority::new(row.priority).ok_or_else(|| corrupt(format!("priority {}", row.priority)))?;
    let task = row.task.ok_or_else(|| corrupt("no task".into()))?;
    Ok(RecordTask {
        task: task_from_pb(level_from_pb(row.level), priority, task),
        at_unix_ms: row.at_unix_ms,
        message: row.message,
    })
}

/// The bytes of a dedup record: `task_id` holds `dedup_id`.
pub fn encode_dedup(dedup_id: &str, task_id: i64) -> Vec<u8> {
    pb::StoredDedup { dedup_id: dedup_id.to_owned(), task_id }.encode_to_vec()
}

/// `(dedup id, task id)`.
pub fn decode_dedup(bytes: &[u8]) -> Result<(String, i64), StoreError> {
    let row = pb::StoredDedup::decode(bytes).map_err(|e| StoreError::Corrupt(format!("dedup record: {e}")))?;
    Ok((row.dedup_id, row.task_id))
}

fn level_to_pb(level: FairLevel) -> Option<pb::StoredLevel> {
    Some(pb::StoredLevel { pass: level.pass, id: level.id })
}

fn level_from_pb(level: Option<pb::StoredLevel>) -> FairLevel {
    level.map_or(FairLevel::ZERO, |l| FairLevel::new(l.pass, l.id))
}

/// The bytes of a partition's metadata row.
pub fn encode_meta(meta: &PartitionMeta) -> Vec<u8> {
    pb::StoredPartitionMeta {
        range_id: meta.range_id,
        owner: meta.owner.clone(),
        subqueues: Priority::all()
            .zip(&meta.subqueues)
            .map(|(priority, s)| pb::StoredSubqueue {
                priority: priority.get(),
                ack_level: level_to_pb(s.ack_level),
                max_level: level_to_pb(s.max_level),
                approx_backlog: s.approx_backlog,
                top_keys: s
                    .top_keys
                    .iter()
                    .map(|(key, pass)| pb::KeyPass { fairness_key: key.clone(), pass: *pass })
                    .collect(),
                dispatched_above_ack: s.dispatched_above_ack.iter().filter_map(|l| level_to_pb(*l)).collect(),
                parked: s
                    .parked
                    .iter()
                    .map(|p| pb::StoredParkedKey { fairness_key: p.fairness_key.clone(), slot: p.slot, floor: p.floor })
                    .collect(),
            })
            .collect(),
        delayed_through: Some(pb::StoredLevel { pass: meta.delayed_through.0, id: meta.delayed_through.1 }),
        dead_letters_through: Some(pb::StoredLevel {
            pass: meta.dead_letters_through.0,
            id: meta.dead_letters_through.1,
        }),
    }
    .encode_to_vec()
}

/// A partition's metadata from its row; `Corrupt` if the bytes do not decode or
/// name an unknown priority.
pub fn decode_meta(bytes: &[u8]) -> Result<PartitionMeta, StoreError> {
    let row =
        pb::StoredPartitionMeta::decode(bytes).map_err(|e| StoreError::Corrupt(format!("partition metadata: {e}")))?;
    let mut subqueues: [SubqueueMeta; PRIORITY_LEVELS] = Default::default();
    for s in row.subqueues {
        let priority = Priority::new(s.priority)
            .ok_or_else(|| StoreError::Corrupt(format!("metadata names priority {}", s.priority)))?;
        subqueues[priority.index()] = SubqueueMeta {
            ack_level: level_from_pb(s.ack_level),
            max_level: level_from_pb(s.max_level),
            approx_backlog: s.approx_backlog,
            top_keys: s.top_keys.into_iter().map(|k| (k.fairness_key, k.pass)).collect(),
            dispatched_above_ack: s.dispatched_above_ack.into_iter().map(|l| level_from_pb(Some(l))).collect(),
            parked: s
                .parked
                .into_iter()
                .map(|p| ParkedKeyMeta { fairness_key: p.fairness_key, slot: p.slot, floor: p.floor })
                .collect(),
        };
    }
    let delayed_through = row.delayed_through.map_or((0, 0), |l| (l.pass, l.id));
    let dead_letters_through = row.dead_letters_through.map_or((0, 0), |l| (l.pass, l.id));
    Ok(PartitionMeta { range_id: row.range_id, owner: row.owner, subqueues, delayed_through, dead_letters_through })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips() {
        let mut meta = PartitionMeta {
            range_id: 7,
            delayed_through: (1_700_000_000_000, 42),
            dead_letters_through: (1_700_000_000_001, 43),
            ..Default::default()
        };
        meta.subqueues[2] = SubqueueMeta {
            ack_level: FairLevel::new(5, 9),
            max_level: FairLevel::new(50, 90),
            approx_backlog: 12,
            dispatched_above_ack: vec![FairLevel::new(60, 1)],
            top_keys: vec![("a".into(), 100)],
            parked: vec![ParkedKeyMeta { fairness_key: "slow".into(), slot: 77, floor: 80 }],
        };
        assert_eq!(decode_meta(&encode_meta(&meta)).unwrap(), meta);
    }

    #[test]
    fn garbage_is_corrupt() {
        assert!(matches!(decode_meta(&[0xff, 0xff, 0xff]), Err(StoreError::Corrupt(_))));
    }
}
