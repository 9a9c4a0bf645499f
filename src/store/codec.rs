//! The bytes of task rows, records and metadata rows, shared by every backend
//! (messages of `proto/fairway/v1/storage.proto`).

use prost::Message;

use super::{
    ParkedKeyMeta, PartitionMeta, Record, RecordKey, RecordTask, RecordValue, RowRef, Section, StoreError, StoredRow,
    SubqueueMeta,
};
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask};
use crate::proto::storage as pb;

/// The bytes of a task row: the task less its level and priority, which the
/// row's key holds.
pub(super) fn encode_task(task: &StoredTask) -> Vec<u8> {
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
        deadline_unix_ms: task.deadline_unix_ms,
        cost: task.cost,
        size: task.size.unwrap_or(0),
    }
}

/// The task of the row at `level` of subqueue `priority`; `Corrupt` if the
/// bytes do not decode.
pub(super) fn decode_task(level: FairLevel, priority: Priority, bytes: &[u8]) -> Result<StoredTask, StoreError> {
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
        deadline_unix_ms: row.deadline_unix_ms,
        cost: row.cost.clamp(1, crate::model::validate::MAX_TASK_COST),
        size: (row.size > 0).then(|| row.size.min(crate::model::validate::MAX_TASK_SIZE)),
    }
}

/// The bytes of a record holding `value`.
pub(super) fn encode_record(value: &RecordValue) -> Vec<u8> {
    match value {
        RecordValue::Task(record) => pb::StoredRecordTask {
            task: Some(task_to_pb(&record.task)),
            priority: record.task.priority.get(),
            level: level_to_pb(record.task.level),
            at_unix_ms: record.at_unix_ms,
            message: record.message.clone(),
        }
        .encode_to_vec(),
        RecordValue::FinishedLease { priority, level } | RecordValue::Waiting { priority, level } => {
            pb::StoredRecordTask { priority: priority.get(), level: level_to_pb(*level), ..Default::default() }
                .encode_to_vec()
        }
        RecordValue::Dedup { dedup_id, task_id } => {
            pb::StoredDedup { dedup_id: dedup_id.clone(), task_id: *task_id }.encode_to_vec()
        }
        RecordValue::WriteMark(mark) => mark.to_be_bytes().to_vec(),
        RecordValue::Drained { task_id } => task_id.to_be_bytes().to_vec(),
    }
}

/// What the record at `at` holds, as its section keeps it (see
/// [`RecordValue`]); `Corrupt` if the bytes do not decode.
pub(super) fn decode_record(at: RecordKey, bytes: &[u8]) -> Result<RecordValue, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("record {:?} {:?}: {e}", at.section, at.key));
    match at.section {
        Section::Leases | Section::Delayed | Section::DeadLetters | Section::Parked | Section::Waiting => {
            let row = pb::StoredRecordTask::decode(bytes).map_err(|e| corrupt(e.to_string()))?;
            let priority = Priority::new(row.priority).ok_or_else(|| corrupt(format!("priority {}", row.priority)))?;
            let level = level_from_pb(row.level);
            match row.task {
                Some(_) if at.section == Section::Waiting => Err(corrupt("a task in a waiting record".into())),
                None if at.section == Section::Waiting => Ok(RecordValue::Waiting { priority, level }),
                Some(task) => Ok(RecordValue::Task(RecordTask {
                    task: task_from_pb(level, priority, task),
                    at_unix_ms: row.at_unix_ms,
                    message: row.message,
                })),
                None if at.section == Section::Leases => Ok(RecordValue::FinishedLease { priority, level }),
                None => Err(corrupt("no task".into())),
            }
        }
        Section::Dedup => {
            let row = pb::StoredDedup::decode(bytes).map_err(|e| corrupt(e.to_string()))?;
            Ok(RecordValue::Dedup { dedup_id: row.dedup_id, task_id: row.task_id })
        }
        Section::WriteMark | Section::Drained => {
            let value = bytes.try_into().map_err(|_| corrupt(format!("{} bytes, not 8", bytes.len())))?;
            let value = i64::from_be_bytes(value);
            Ok(match at.section {
                Section::WriteMark => RecordValue::WriteMark(value),
                _ => RecordValue::Drained { task_id: value },
            })
        }
    }
}

/// The record at `at`, from its bytes.
pub(super) fn decode_record_at(at: RecordKey, bytes: &[u8]) -> Result<Record, StoreError> {
    Ok(Record { at, value: decode_record(at, bytes)? })
}

/// What the row `row` holds, from its bytes.
pub(super) fn decode_row(row: RowRef, bytes: &[u8]) -> Result<StoredRow, StoreError> {
    match row {
        RowRef::Task(priority, level) => decode_task(level, priority, bytes).map(StoredRow::Task),
        RowRef::Record(at) => decode_record(at, bytes).map(StoredRow::Record),
    }
}

fn level_to_pb(level: FairLevel) -> Option<pb::StoredLevel> {
    Some(pb::StoredLevel { pass: level.pass, id: level.id })
}

fn level_from_pb(level: Option<pb::StoredLevel>) -> FairLevel {
    level.map_or(FairLevel::ZERO, |l| FairLevel::new(l.pass, l.id))
}

/// The bytes of a partition's metadata row.
pub(super) fn encode_meta(meta: &PartitionMeta) -> Vec<u8> {
    pb::StoredPartitionMeta {
        range_id: meta.range_id,
        owner: meta.owner.clone(),
        region: meta.region.clone(),
        moved_from: meta.moved_from.clone(),
        drained: meta.drained,
        cancelled: meta.cancelled.clone(),
        purged_below: meta.purged_below,
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
        waiting_through: Some(pb::StoredLevel { pass: meta.waiting_through.0, id: meta.waiting_through.1 }),
    }
    .encode_to_vec()
}

/// A partition's metadata from its row; `Corrupt` if the bytes do not decode or
/// name an unknown priority.
pub(super) fn decode_meta(bytes: &[u8]) -> Result<PartitionMeta, StoreError> {
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
    let waiting_through = row.waiting_through.map_or((0, 0), |l| (l.pass, l.id));
    Ok(PartitionMeta {
        range_id: row.range_id,
        owner: row.owner,
        region: row.region,
        moved_from: row.moved_from,
        drained: row.drained,
        cancelled: row.cancelled,
        purged_below: row.purged_below,
        subqueues,
        delayed_through,
        dead_letters_through,
        waiting_through,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn metadata_round_trips() {
        let mut meta = PartitionMeta {
            range_id: 7,
            region: "b".into(),
            moved_from: "a".into(),
            drained: true,
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

    /// A task row written before tasks had deadlines decodes with none; a
    /// deadline of 0 (the epoch) is kept apart from no deadline.
    #[test]
    fn a_row_without_a_deadline_decodes_with_none() {
        let older = pb::StoredTask { fairness_key: "k".into(), attempt: 2, task_id: 9, ..Default::default() };
        let mut bytes = older.encode_to_vec();
        let task = decode_task(FairLevel::new(3, 9), Priority::DEFAULT, &bytes).unwrap();
        assert_eq!(task.deadline_unix_ms, None);
        assert_eq!(task.attempt, 2);
        let at_epoch = StoredTask { deadline_unix_ms: Some(0), ..task };
        bytes = encode_task(&at_epoch);
        assert_eq!(decode_task(at_epoch.level, at_epoch.priority, &bytes).unwrap().deadline_unix_ms, Some(0));
    }

    #[test]
    fn garbage_is_corrupt() {
        assert!(matches!(decode_meta(&[0xff, 0xff, 0xff]), Err(StoreError::Corrupt(_))));
        let mark = RecordKey { section: Section::WriteMark, key: (0, 0) };
        assert!(matches!(decode_record(mark, &[1, 2, 3]), Err(StoreError::Corrupt(_))));
        let delayed = RecordKey { section: Section::Delayed, key: (0, 0) };
        let finished =
            encode_record(&RecordValue::FinishedLease { priority: Priority::DEFAULT, level: FairLevel::ZERO });
        assert!(
            matches!(decode_record(delayed, &finished), Err(StoreError::Corrupt(_))),
            "only a lease record may hold no task"
        );
    }

    /// A task as the engine writes it: an id, no empty dedup id, no zero weight.
    fn any_task() -> impl Strategy<Value = StoredTask> {
        let weight = prop_oneof![Just(None), (0.001f64..1000.0).prop_map(Some)];
        let dedup = prop_oneof![Just(None), "[a-z/:.0-9]{1,40}".prop_map(Some)];
        (
            (1..=5u32, any::<i64>(), 1..i64::MAX),
            ".{0,20}",
            weight,
            proptest::collection::vec(any::<u8>(), 0..64),
            (any::<i64>(), 1..20u32, 1..i64::MAX),
            (dedup, any::<i64>(), proptest::option::of(any::<i64>())),
            (
                1..=crate::model::validate::MAX_TASK_COST,
                proptest::option::of(1..=crate::model::validate::MAX_TASK_SIZE),
            ),
        )
            .prop_map(
                |(
                    (priority, pass, id),
                    fairness_key,
                    fairness_weight,
                    payload,
                    (created, attempt, task_id),
                    (dedup_id, dedup_slot, deadline_unix_ms),
                    (cost, size),
                )| {
                    StoredTask {
                        level: FairLevel::new(pass, id),
                        priority: Priority::new(priority).unwrap(),
                        fairness_key,
                        fairness_weight,
                        payload,
                        created_at_unix_ms: created,
                        attempt,
                        task_id,
                        dedup_id,
                        dedup_slot,
                        deadline_unix_ms,
                        cost,
                        size,
                    }
                },
            )
    }

    fn any_record() -> impl Strategy<Value = (Section, RecordValue)> {
        let task_section = prop_oneof![
            Just(Section::Leases),
            Just(Section::Delayed),
            Just(Section::DeadLetters),
            Just(Section::Parked)
        ];
        prop_oneof![
            (task_section, any_task(), any::<i64>(), ".{0,30}").prop_map(|(section, task, at_unix_ms, message)| {
                (section, RecordValue::Task(RecordTask { task, at_unix_ms, message }))
            }),
            (1..=5u32, any::<i64>(), any::<i64>()).prop_map(|(priority, pass, id)| {
                let priority = Priority::new(priority).unwrap();
                (Section::Leases, RecordValue::FinishedLease { priority, level: FairLevel::new(pass, id) })
            }),
            (".{0,40}", any::<i64>())
                .prop_map(|(dedup_id, task_id)| (Section::Dedup, RecordValue::Dedup { dedup_id, task_id })),
            any::<i64>().prop_map(|mark| (Section::WriteMark, RecordValue::WriteMark(mark))),
            any::<i64>().prop_map(|task_id| (Section::Drained, RecordValue::Drained { task_id })),
            (1..=5u32, any::<i64>(), any::<i64>()).prop_map(|(priority, pass, id)| {
                let priority = Priority::new(priority).unwrap();
                (Section::Waiting, RecordValue::Waiting { priority, level: FairLevel::new(pass, id) })
            }),
        ]
    }

    proptest! {
        /// What a backend reads back is what was written, value for value: the
        /// settle probe compares them to tell whether a write landed.
        #[test]
        fn rows_round_trip_and_their_estimates_bound_their_bytes(
            (section, value) in any_record(),
            key in (any::<i64>(), any::<i64>()),
            task in any_task(),
        ) {
            let at = RecordKey { section, key };
            let bytes = encode_record(&value);
            prop_assert!(bytes.len() <= value.bytes(), "{} bytes, estimated {}", bytes.len(), value.bytes());
            prop_assert_eq!(decode_row(RowRef::Record(at), &bytes).unwrap(), StoredRow::Record(value));
            let row = RowRef::Task(task.priority, task.level);
            let bytes = encode_task(&task);
            prop_assert!(bytes.len() <= crate::store::stored_task_bytes(&task));
            prop_assert_eq!(decode_row(row, &bytes).unwrap(), StoredRow::Task(task));
        }

        /// The engine keeps a write under the store's limit with
        /// `PartitionMeta::stored_bytes`, a structural estimate: it must never
        /// be below the bytes the codec writes, whatever the numbers' signs
        /// and sizes, and not wildly above them for a large metadata row.
        #[test]
        fn the_metadata_estimate_bounds_its_encoding(meta in any_meta()) {
            let bytes = encode_meta(&meta).len();
            let estimate = meta.stored_bytes();
            prop_assert!(bytes <= estimate, "{bytes} bytes, estimated {estimate}");
            prop_assert!(estimate <= 3 * bytes + 512, "{bytes} bytes, estimated {estimate}");
            prop_assert_eq!(decode_meta(&encode_meta(&meta)).unwrap(), meta);
        }
    }

    fn any_level() -> impl Strategy<Value = FairLevel> {
        (any::<i64>(), any::<i64>()).prop_map(|(pass, id)| FairLevel::new(pass, id))
    }

    fn any_subqueue() -> impl Strategy<Value = SubqueueMeta> {
        (
            (any_level(), any_level(), any::<i64>()),
            proptest::collection::vec((".{0,40}", any::<i64>()), 0..8),
            proptest::collection::vec(any_level(), 0..8),
            proptest::collection::vec((".{0,40}", any::<i64>(), any::<i64>()), 0..8),
        )
            .prop_map(|((ack_level, max_level, approx_backlog), top_keys, dispatched_above_ack, parked)| {
                SubqueueMeta {
                    ack_level,
                    max_level,
                    approx_backlog,
                    top_keys,
                    dispatched_above_ack,
                    parked: parked
                        .into_iter()
                        .map(|(fairness_key, slot, floor)| ParkedKeyMeta { fairness_key, slot, floor })
                        .collect(),
                }
            })
    }

    fn any_meta() -> impl Strategy<Value = PartitionMeta> {
        (
            (any::<i64>(), ".{0,30}", ".{0,20}", ".{0,20}", any::<bool>()),
            proptest::array::uniform5(any_subqueue()),
            ((any::<i64>(), any::<i64>()), (any::<i64>(), any::<i64>()), (any::<i64>(), any::<i64>())),
            (proptest::collection::vec(any::<i64>(), 0..8), any::<i64>()),
        )
            .prop_map(
                |(
                    (range_id, owner, region, moved_from, drained),
                    subqueues,
                    (delayed_through, dead_letters_through, waiting_through),
                    (cancelled, purged_below),
                )| {
                    PartitionMeta {
                        range_id,
                        owner,
                        region,
                        moved_from,
                        subqueues,
                        delayed_through,
                        dead_letters_through,
                        waiting_through,
                        drained,
                        cancelled,
                        purged_below,
                    }
                },
            )
    }
}
