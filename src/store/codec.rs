//! The bytes of task rows and metadata rows, shared by every backend
//! (messages of `proto/fairway/v1/storage.proto`).

use prost::Message;

use super::{PartitionMeta, StoreError, SubqueueMeta};
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask};
use crate::proto::storage as pb;

pub fn encode_task(task: &StoredTask) -> Vec<u8> {
    pb::StoredTask {
        fairness_key: task.fairness_key.clone(),
        fairness_weight: task.fairness_weight.unwrap_or(0.0),
        payload: task.payload.clone(),
        created_at_unix_ms: task.created_at_unix_ms,
        attempt: task.attempt,
        dedup_id: String::new(),
    }
    .encode_to_vec()
}

pub fn decode_task(level: FairLevel, priority: Priority, bytes: &[u8]) -> Result<StoredTask, StoreError> {
    let row = pb::StoredTask::decode(bytes).map_err(|e| StoreError::Corrupt(format!("task row at {level}: {e}")))?;
    Ok(StoredTask {
        level,
        priority,
        fairness_key: row.fairness_key,
        fairness_weight: (row.fairness_weight != 0.0).then_some(row.fairness_weight),
        payload: row.payload,
        created_at_unix_ms: row.created_at_unix_ms,
        attempt: row.attempt,
    })
}

fn level_to_pb(level: FairLevel) -> Option<pb::StoredLevel> {
    Some(pb::StoredLevel { pass: level.pass, id: level.id })
}

fn level_from_pb(level: Option<pb::StoredLevel>) -> FairLevel {
    level.map_or(FairLevel::ZERO, |l| FairLevel::new(l.pass, l.id))
}

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
            })
            .collect(),
    }
    .encode_to_vec()
}

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
        };
    }
    Ok(PartitionMeta { range_id: row.range_id, owner: row.owner, subqueues })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips() {
        let mut meta = PartitionMeta { range_id: 7, ..Default::default() };
        meta.subqueues[2] = SubqueueMeta {
            ack_level: FairLevel::new(5, 9),
            max_level: FairLevel::new(50, 90),
            approx_backlog: 12,
            dispatched_above_ack: vec![FairLevel::new(60, 1)],
            top_keys: vec![("a".into(), 100)],
        };
        assert_eq!(decode_meta(&encode_meta(&meta)).unwrap(), meta);
    }

    #[test]
    fn garbage_is_corrupt() {
        assert!(matches!(decode_meta(&[0xff, 0xff, 0xff]), Err(StoreError::Corrupt(_))));
    }
}
