//! The conformance suite of [`super::ScheduleStore`]: generic tests every
//! backend passes. A backend runs them all with
//! [`schedule_store_conformance_suite!`](crate::schedule_store_conformance_suite),
//! given an async function that returns a fresh, empty
//! [`TestStore`](crate::store::conformance::TestStore).

use std::collections::BTreeSet;

use futures::StreamExt;

use super::{
    MAX_LIST, MAX_RECORD_BYTES, Pause, Replaced, RunTemplate, SHARDS, ScheduleRecord, ScheduleStore, shard_of,
};
use crate::core::schedules::{Cadence, Overlap, Run, ScheduleSpec, ScheduleStats};
use crate::store::StoreError;

/// Expands to one `#[tokio::test]` per conformance test, each with a fresh
/// store from `$factory`.
#[macro_export]
macro_rules! schedule_store_conformance_suite {
    ($factory:path) => {
        $crate::schedule_store_conformance_suite!(@tests $factory;
            a_created_schedule_reads_back_equal,
            a_second_creation_is_refused_and_the_first_record_kept,
            a_replacement_at_the_stored_version_is_written,
            a_replacement_at_a_stale_version_conflicts_with_the_stored_record,
            a_replacement_of_a_deleted_schedule_conflicts_with_none,
            a_deletion_is_a_compare_and_set_on_the_version,
            writes_at_versions_the_contract_does_not_allow_are_invalid,
            a_list_holds_one_shard_ascending_after_a_bound_within_a_limit,
            paging_through_a_shard_returns_each_record_once,
            a_record_at_the_size_limit_round_trips_and_one_over_it_is_refused,
            of_racing_replacements_from_one_version_one_is_written,
        );
    };
    (@tests $factory:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                $factory()
                    .await
                    .run(|store| async move { $crate::store::schedules::conformance::$name(&*store).await })
                    .await;
            }
        )+
    };
}

/// 2026-01-01T00:00:00Z, in ms since the Unix epoch.
const NOW: i64 = 1_767_225_600_000;

/// A schedule at version 1 with every kind of field set.
pub fn record(id: &str) -> ScheduleRecord {
    ScheduleRecord {
        id: id.to_owned(),
        version: 1,
        spec: ScheduleSpec {
            cadence: Cadence::Cron { expression: "*/5 * * * *".into(), max_schedule_duration_ms: 60_000 },
            time_zone: "Europe/Paris".into(),
            blackouts: vec![crate::core::schedules::Blackout { start_s: 82_800, end_s: 3_600 }],
            start_at: Some(NOW),
            end_at: None,
            remaining_runs: Some(10),
            catchup_window_ms: 300_000,
            overlap: Overlap::BufferOne,
            max_expected_duration_ms: Some(30_000),
            max_allowed_duration_ms: None,
        },
        template: RunTemplate {
            queue: "reports".into(),
            payload: vec![0, 1, 255],
            fairness_key: "tenant-a".into(),
            fairness_weight: Some(2.5),
            priority: 3,
        },
        stats: ScheduleStats {
            created_at: NOW,
            last_nominal: Some(NOW + 300_000),
            runs: vec![Run {
                nominal: NOW + 300_000,
                task_id: 42,
                added_at: NOW + 300_001,
                started_at: None,
                attempt: 0,
                should_start_by: NOW + 330_000,
            }],
            ..ScheduleStats::default()
        },
        paused: None,
        created_by: "alice".into(),
    }
}

/// `record` as the next write makes it: one version on, with a change.
fn next(record: &ScheduleRecord, note: &str) -> ScheduleRecord {
    ScheduleRecord {
        version: record.version + 1,
        paused: Some(Pause { note: note.to_owned(), since: NOW + record.version as i64 }),
        ..record.clone()
    }
}

/// `count` ids of shard `shard`, ascending.
fn ids_of_shard(shard: u32, prefix: &str, count: usize) -> Vec<String> {
    let ids: Vec<String> =
        (0..).map(|n| format!("{prefix}-{n:06}")).filter(|id| shard_of(id) == shard).take(count).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    ids
}

fn ids(records: &[ScheduleRecord]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

/// A created record reads back equal, every field; an unknown id reads as `None`.
pub async fn a_created_schedule_reads_back_equal(store: &dyn ScheduleStore) {
    let created = record("nightly/report");
    assert!(store.create_schedule(&created).await.expect("create"));
    assert_eq!(store.schedule("nightly/report").await.expect("read"), Some(created));
    assert_eq!(store.schedule("nightly/other").await.expect("read"), None);
}

/// Creating an id that is taken returns `false` and keeps the first record.
pub async fn a_second_creation_is_refused_and_the_first_record_kept(store: &dyn ScheduleStore) {
    let first = record("taken");
    assert!(store.create_schedule(&first).await.unwrap());
    let second = ScheduleRecord { created_by: "bob".into(), ..record("taken") };
    assert!(!store.create_schedule(&second).await.unwrap(), "the id is taken");
    assert_eq!(store.schedule("taken").await.unwrap(), Some(first));
}

/// A replacement at the stored version is written at the next one, and
/// reads back; the next replacement goes from there.
pub async fn a_replacement_at_the_stored_version_is_written(store: &dyn ScheduleStore) {
    let v1 = record("cas");
    store.create_schedule(&v1).await.unwrap();
    let v2 = next(&v1, "maintenance");
    assert_eq!(store.replace_schedule(&v2, 1).await.unwrap(), Replaced::Written);
    assert_eq!(store.schedule("cas").await.unwrap(), Some(v2.clone()));
    let v3 = ScheduleRecord { paused: None, ..next(&v2, "") };
    assert_eq!(store.replace_schedule(&v3, 2).await.unwrap(), Replaced::Written);
    assert_eq!(store.schedule("cas").await.unwrap(), Some(v3));
}

/// A replacement at a version that is no longer stored writes nothing and
/// returns the record as stored.
pub async fn a_replacement_at_a_stale_version_conflicts_with_the_stored_record(store: &dyn ScheduleStore) {
    let v1 = record("stale");
    store.create_schedule(&v1).await.unwrap();
    let v2 = next(&v1, "first writer");
    assert_eq!(store.replace_schedule(&v2, 1).await.unwrap(), Replaced::Written);
    let late = next(&v1, "second writer");
    assert_eq!(store.replace_schedule(&late, 1).await.unwrap(), Replaced::Conflict(Some(v2.clone())));
    assert_eq!(store.schedule("stale").await.unwrap(), Some(v2), "nothing written");
}

/// A replacement of a deleted (or never created) schedule writes nothing
/// and conflicts with `None`.
pub async fn a_replacement_of_a_deleted_schedule_conflicts_with_none(store: &dyn ScheduleStore) {
    let v1 = record("gone");
    store.create_schedule(&v1).await.unwrap();
    assert!(store.delete_schedule("gone", 1).await.unwrap());
    assert_eq!(store.replace_schedule(&next(&v1, "late"), 1).await.unwrap(), Replaced::Conflict(None));
    assert_eq!(store.schedule("gone").await.unwrap(), None, "not brought back");
    let never = record("never");
    assert_eq!(store.replace_schedule(&next(&never, "x"), 1).await.unwrap(), Replaced::Conflict(None));
    assert_eq!(store.schedule("never").await.unwrap(), None);
}

/// A deletion at another version, or of an absent id, returns `false` and
/// keeps the record; at the stored version it returns `true` and the record
/// is gone (from reads and lists), and its id may be created again.
pub async fn a_deletion_is_a_compare_and_set_on_the_version(store: &dyn ScheduleStore) {
    let v1 = record("doomed");
    store.create_schedule(&v1).await.unwrap();
    let v2 = next(&v1, "x");
    store.replace_schedule(&v2, 1).await.unwrap();
    assert!(!store.delete_schedule("doomed", 1).await.unwrap(), "a stale version");
    assert!(!store.delete_schedule("doomed", 3).await.unwrap(), "a version not reached");
    assert!(!store.delete_schedule("absent", 1).await.unwrap(), "an absent id");
    assert_eq!(store.schedule("doomed").await.unwrap(), Some(v2));
    assert!(store.delete_schedule("doomed", 2).await.unwrap());
    assert_eq!(store.schedule("doomed").await.unwrap(), None);
    assert!(store.list_schedules(shard_of("doomed"), None, MAX_LIST).await.unwrap().is_empty());
    assert!(!store.delete_schedule("doomed", 2).await.unwrap(), "already gone");
    assert!(store.create_schedule(&v1).await.unwrap(), "the id is free again");
    assert_eq!(store.schedule("doomed").await.unwrap(), Some(v1));
}

/// A creation at a version other than 1, a replacement at a version other
/// than `expected + 1`, a list of a shard that does not exist or of more
/// than [`MAX_LIST`] are `Invalid`, and write nothing.
pub async fn writes_at_versions_the_contract_does_not_allow_are_invalid(store: &dyn ScheduleStore) {
    let v2 = ScheduleRecord { version: 2, ..record("versions") };
    assert!(matches!(store.create_schedule(&v2).await, Err(StoreError::Invalid(_))));
    assert_eq!(store.schedule("versions").await.unwrap(), None, "nothing written");
    let v1 = record("versions");
    store.create_schedule(&v1).await.unwrap();
    for (version, expected) in [(1, 1), (3, 1), (0, u64::MAX)] {
        let write = ScheduleRecord { version, ..next(&v1, "bad") };
        let answer = store.replace_schedule(&write, expected).await;
        assert!(matches!(answer, Err(StoreError::Invalid(_))), "{version} over {expected}: {answer:?}");
    }
    assert_eq!(store.schedule("versions").await.unwrap(), Some(v1), "nothing written");
    assert!(matches!(store.list_schedules(SHARDS, None, 10).await, Err(StoreError::Invalid(_))));
    assert!(matches!(store.list_schedules(0, None, MAX_LIST + 1).await, Err(StoreError::Invalid(_))));
    assert!(store.list_schedules(0, None, 0).await.unwrap().is_empty(), "a limit of 0 lists nothing");
}

/// A list returns the records of its shard alone, ascending by id, strictly
/// after `after`, at most `limit`.
pub async fn a_list_holds_one_shard_ascending_after_a_bound_within_a_limit(store: &dyn ScheduleStore) {
    let shard = 7;
    let mine = ids_of_shard(shard, "mine", 6);
    let others: Vec<String> = (0..40).map(|n| format!("other-{n}")).filter(|id| shard_of(id) != shard).collect();
    // Created out of order.
    for id in mine.iter().rev().chain(&others) {
        assert!(store.create_schedule(&record(id)).await.unwrap());
    }
    let all = store.list_schedules(shard, None, MAX_LIST).await.unwrap();
    assert_eq!(ids(&all), mine.iter().map(String::as_str).collect::<Vec<_>>(), "one shard, ascending");
    assert_eq!(all[0], record(&mine[0]), "whole records");
    let after = store.list_schedules(shard, Some(&mine[1]), MAX_LIST).await.unwrap();
    assert_eq!(ids(&after), mine[2..].iter().map(String::as_str).collect::<Vec<_>>(), "strictly after");
    let limited = store.list_schedules(shard, Some(&mine[0]), 2).await.unwrap();
    assert_eq!(ids(&limited), vec![mine[1].as_str(), mine[2].as_str()], "at most the limit");
    let between = format!("{}~", mine[3]);
    let after_absent = store.list_schedules(shard, Some(&between), MAX_LIST).await.unwrap();
    assert_eq!(ids(&after_absent), vec![mine[4].as_str(), mine[5].as_str()], "after an id that is not stored");
    assert!(store.list_schedules(shard, Some(&mine[5]), MAX_LIST).await.unwrap().is_empty());
    let empty_shard = (0..SHARDS).find(|s| *s != shard && others.iter().all(|id| shard_of(id) != *s));
    if let Some(empty_shard) = empty_shard {
        assert!(store.list_schedules(empty_shard, None, MAX_LIST).await.unwrap().is_empty());
    }
    let other_shard = shard_of(&others[0]);
    let listed = store.list_schedules(other_shard, None, MAX_LIST).await.unwrap();
    assert!(listed.iter().all(|r| shard_of(&r.id) == other_shard) && ids(&listed).contains(&others[0].as_str()));
}

/// Paging through 2,500 records of one shard, [`MAX_LIST`] at a time from
/// the last id of each page, returns each once, in order.
pub async fn paging_through_a_shard_returns_each_record_once(store: &dyn ScheduleStore) {
    let shard = 11;
    let expected = ids_of_shard(shard, "page", 2_500);
    let neighbours = ids_of_shard(shard + 1, "page", 20);
    // Four at a time: every create is a compare-and-set on the one
    // partition of the shard, and more contend for its Paxos round.
    futures::stream::iter(expected.iter().chain(&neighbours))
        .for_each_concurrent(4, |id| create_settling_unknown_outcomes(store, record(id)))
        .await;
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store.list_schedules(shard, after.as_deref(), MAX_LIST).await.unwrap();
        assert!(page.len() <= MAX_LIST);
        pages += 1;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        seen.extend(page.into_iter().map(|r| r.id));
    }
    assert_eq!(pages, 4, "three pages and an empty one");
    assert_eq!(seen.len(), expected.len());
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), seen.len(), "each once");
    assert_eq!(seen, expected, "in order");
}

/// Creates `record`, whose id no one else writes, as a caller must under the
/// contract: a create of unknown outcome (a compare-and-set that timed out
/// under load) is tried again, and a refusal then is the earlier attempt
/// having landed, which the stored record must show.
async fn create_settling_unknown_outcomes(store: &dyn ScheduleStore, record: ScheduleRecord) {
    const ATTEMPTS: usize = 5;
    let mut uncertain = false;
    for attempt in 1..=ATTEMPTS {
        match store.create_schedule(&record).await {
            Ok(true) => return,
            Ok(false) => {
                assert!(uncertain, "{} was taken though nothing else creates it", record.id);
                let stored = store.schedule(&record.id).await.expect("read back");
                assert_eq!(stored.as_ref(), Some(&record), "an uncertain create that landed");
                return;
            }
            Err(error) if error.retryable() && attempt < ATTEMPTS => {
                uncertain |= !error.certainly_not_applied();
            }
            Err(error) => panic!("create {}: {error:?}", record.id),
        }
    }
}

/// A record whose JSON is exactly [`MAX_RECORD_BYTES`] is created, replaced
/// and read back; one byte more is `Invalid`, naming the limit, and nothing
/// is written.
pub async fn a_record_at_the_size_limit_round_trips_and_one_over_it_is_refused(store: &dyn ScheduleStore) {
    let encoded = |r: &ScheduleRecord| serde_json::to_vec(r).expect("serializes").len();
    let of_size = |id: &str, version: u64, bytes: usize| {
        let base = ScheduleRecord { version, created_by: String::new(), ..record(id) };
        let padding = bytes - encoded(&base);
        let sized = ScheduleRecord { created_by: "x".repeat(padding), ..base };
        assert_eq!(encoded(&sized), bytes);
        sized
    };
    let largest = of_size("large", 1, MAX_RECORD_BYTES);
    assert!(store.create_schedule(&largest).await.unwrap());
    assert_eq!(store.schedule("large").await.unwrap(), Some(largest.clone()));
    let replaced = of_size("large", 2, MAX_RECORD_BYTES);
    assert_eq!(store.replace_schedule(&replaced, 1).await.unwrap(), Replaced::Written);
    assert_eq!(store.schedule("large").await.unwrap(), Some(replaced.clone()));
    assert_eq!(store.list_schedules(shard_of("large"), None, 10).await.unwrap(), vec![replaced.clone()]);

    let limit = MAX_RECORD_BYTES.to_string();
    let refused = |answer: Result<_, StoreError>| match answer {
        Err(StoreError::Invalid(message)) => assert!(message.contains(&limit), "{message}"),
        other => panic!("a record over the limit: {other:?}"),
    };
    refused(store.create_schedule(&of_size("too-large", 1, MAX_RECORD_BYTES + 1)).await.map(drop));
    assert_eq!(store.schedule("too-large").await.unwrap(), None, "nothing written");
    refused(store.replace_schedule(&of_size("large", 3, MAX_RECORD_BYTES + 1), 2).await.map(drop));
    assert_eq!(store.schedule("large").await.unwrap(), Some(replaced), "nothing written");
}

/// Of replacements racing from the same version, exactly one is written;
/// every other is told of the winner's record.
pub async fn of_racing_replacements_from_one_version_one_is_written(store: &dyn ScheduleStore) {
    let v1 = record("raced");
    store.create_schedule(&v1).await.unwrap();
    let writes: Vec<ScheduleRecord> = (0..8).map(|n| next(&v1, &format!("writer {n}"))).collect();
    let answers = futures::future::join_all(writes.iter().map(|w| store.replace_schedule(w, 1))).await;
    let answers: Vec<Replaced> = answers.into_iter().map(|a| a.expect("replace")).collect();
    let stored = store.schedule("raced").await.unwrap().expect("the record");
    let winners: Vec<&ScheduleRecord> =
        writes.iter().zip(&answers).filter(|(_, a)| **a == Replaced::Written).map(|(w, _)| w).collect();
    assert_eq!(winners, vec![&stored], "one write won, and it is the one stored: {answers:?}");
    for answer in answers.iter().filter(|a| **a != Replaced::Written) {
        assert_eq!(*answer, Replaced::Conflict(Some(stored.clone())), "the losers are told of the winner");
    }
}
