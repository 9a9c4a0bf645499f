//! The scheduler store's conformance suite: generic tests every
//! [`VisitStore`] passes. A backend runs them all with
//! [`visit_store_conformance_suite!`](crate::visit_store_conformance_suite),
//! given an async function that returns a fresh, empty
//! [`TestStore`](crate::store::conformance::TestStore).

use super::{VisitStore, encode_state};
use crate::api::scheduler::MAX_LOADER_ARGUMENTS_BYTES;
use crate::core::visits::{
    Cooldowns, DAY_MS, IndexEntry, KeyRange, ListedOrigin, ListerMetrics, OriginWrite, Policy, VisitResult, VisitStats,
    VisitStatus,
};
use crate::model::Limits;
use crate::visits::origin_url::MAX_URL_BYTES;

/// Expands to one `#[tokio::test]` per conformance test, each with a fresh
/// store from `$factory`.
#[macro_export]
macro_rules! visit_store_conformance_suite {
    ($factory:path) => {
        $crate::visit_store_conformance_suite!(@tests $factory;
            origins_round_trip_and_unknown_ones_read_as_none,
            writes_move_an_origin_between_indexes_and_wake_ups,
            index_reads_ascend_by_key_then_url_below_a_bound,
            indexes_are_separate_per_visit_type_policy_and_lister,
            wake_ups_ascend_up_to_a_time,
            listers_gather_visit_types_and_their_last_listing,
            counts_follow_the_writes,
            queue_positions_start_at_zero_and_are_kept,
            origins_as_large_as_the_limits_allow_are_written_and_moved,
        );
    };
    (@tests $factory:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                $factory()
                    .await
                    .run(|store| async move { $crate::store::visits::conformance::$name(&*store).await })
                    .await;
            }
        )+
    };
}

const NOW: i64 = 20_000 * DAY_MS;

fn origin(visit_type: &str, lister: &str, url: &str, last_update: Option<i64>) -> ListedOrigin {
    ListedOrigin {
        url: url.into(),
        visit_type: visit_type.into(),
        lister: lister.into(),
        last_update,
        first_seen: NOW - DAY_MS,
        last_seen: NOW,
        is_fork: true,
        extra_loader_arguments: r#"{"branch": "main"}"#.into(),
    }
}

/// Records a new origin, returning its write.
async fn record(store: &dyn VisitStore, origin: ListedOrigin, stats: VisitStats) -> OriginWrite {
    let write = OriginWrite::new(None, origin, stats, &Cooldowns::default(), NOW);
    store.apply(std::slice::from_ref(&write)).await.expect("apply");
    write
}

async fn index(store: &dyn VisitStore, visit_type: &str, policy: Policy, lister: &str) -> Vec<(i64, String)> {
    let entries = store.read_index(visit_type, policy, lister, KeyRange::ALL, 100).await.expect("read index");
    entries.into_iter().map(|e| (e.key, e.url)).collect()
}

/// A state reads back as written, every field; an unknown URL, or another visit
/// type, reads as `None`.
pub async fn origins_round_trip_and_unknown_ones_read_as_none(store: &dyn VisitStore) {
    let stats = VisitStats {
        last_snapshot: Some(vec![0, 255, 7]),
        last_successful: Some(NOW - 3 * DAY_MS),
        next_visit_queue_position: Some(-5),
        ..VisitStats::default()
    };
    let write = record(store, origin("git", "gitlab/framagit", "https://framagit.org/a", Some(NOW)), stats).await;
    let urls = vec!["https://framagit.org/a".to_string(), "https://framagit.org/unknown".to_string()];
    let read = store.read_origins("git", &urls).await.expect("read");
    assert_eq!(read, vec![Some(write.state.clone()), None]);
    assert_eq!(store.read_origins("hg", &urls[..1]).await.expect("read"), vec![None], "another visit type");
}

/// Writes move an origin out of its indexes into a wake-up when it is
/// scheduled, and back when its outcome comes.
pub async fn writes_move_an_origin_between_indexes_and_wake_ups(store: &dyn VisitStore) {
    let cooldowns = Cooldowns::default();
    let listed = record(store, origin("git", "l", "u", Some(NOW - DAY_MS)), VisitStats::default()).await;
    assert_eq!(index(store, "git", Policy::NeverVisitedOldestUpdateFirst, "l").await, vec![(NOW - DAY_MS, "u".into())]);

    let scheduled = VisitStats { last_scheduled: Some(NOW), ..VisitStats::default() };
    let write = OriginWrite::new(Some(&listed.state), listed.state.origin.clone(), scheduled, &cooldowns, NOW);
    store.apply(std::slice::from_ref(&write)).await.expect("apply");
    for policy in Policy::INDEXED {
        assert!(index(store, "git", policy, "l").await.is_empty(), "{policy:?} no longer holds it");
    }
    assert_eq!(store.read_wakes("git", i64::MAX, 10).await.unwrap(), vec![(NOW + 7 * DAY_MS, "u".into())]);

    let mut visited = write.state.stats.clone();
    let at = NOW + DAY_MS;
    visited.record(
        &VisitResult { status: VisitStatus::Successful, snapshot: Some(vec![1]), visit_date: at, newest_change: None },
        0,
        0.5,
    );
    let back = OriginWrite::new(Some(&write.state), write.state.origin.clone(), visited, &cooldowns, at);
    store.apply(std::slice::from_ref(&back)).await.expect("apply");
    assert!(store.read_wakes("git", i64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(index(store, "git", Policy::OldestScheduledFirst, "l").await, vec![(NOW, "u".into())]);
    assert!(index(store, "git", Policy::NeverVisitedOldestUpdateFirst, "l").await.is_empty());
    let read = store.read_origins("git", &["u".into()]).await.unwrap();
    assert_eq!(read, vec![Some(back.state)]);
}

/// An index reads ascending by `(key, url)`, extreme keys included, at most the
/// limit and strictly below a bound.
pub async fn index_reads_ascend_by_key_then_url_below_a_bound(store: &dyn VisitStore) {
    // Origins without an update date sit at i64::MIN in "oldest scheduled"
    // and at their scheduling time otherwise: negative and extreme keys.
    let cooldowns = Cooldowns::default();
    let mut writes = Vec::new();
    for (url, scheduled) in
        [("c", None), ("b", None), ("d", Some(-DAY_MS)), ("e", Some(NOW - 40 * DAY_MS)), ("a", Some(NOW - 30 * DAY_MS))]
    {
        let stats = VisitStats {
            last_scheduled: scheduled,
            last_visit: scheduled.map(|s| s + 1),
            last_visit_status: scheduled.map(|_| VisitStatus::Successful),
            ..VisitStats::default()
        };
        writes.push(OriginWrite::new(None, origin("git", "l", url, None), stats, &cooldowns, NOW));
    }
    store.apply(&writes).await.expect("apply");
    let all = index(store, "git", Policy::OldestScheduledFirst, "l").await;
    let expected: Vec<(i64, String)> = vec![
        (i64::MIN, "b".into()),
        (i64::MIN, "c".into()),
        (-DAY_MS, "d".into()),
        (NOW - 40 * DAY_MS, "e".into()),
        (NOW - 30 * DAY_MS, "a".into()),
    ];
    assert_eq!(all, expected);
    let limited = store.read_index("git", Policy::OldestScheduledFirst, "l", KeyRange::ALL, 2).await.unwrap();
    assert_eq!(limited.iter().map(|e| e.url.as_str()).collect::<Vec<_>>(), vec!["b", "c"]);
    let read = |keys| store.read_index("git", Policy::OldestScheduledFirst, "l", keys, 100);
    let urls = |entries: Vec<IndexEntry>| entries.into_iter().map(|e| e.url).collect::<Vec<_>>();
    let below = read(KeyRange::below(NOW - 40 * DAY_MS)).await.unwrap();
    assert!(below.iter().all(|e| e.policy == Policy::OldestScheduledFirst && e.lister == "l"));
    assert_eq!(urls(below), vec!["b", "c", "d"], "strictly below");
    let between = read(KeyRange::between(-DAY_MS, NOW - 30 * DAY_MS)).await.unwrap();
    assert_eq!(urls(between), vec!["d", "e"], "from a key, inclusive, below another");
    let from = read(KeyRange { from: Some(-DAY_MS + 1), below: None }).await.unwrap();
    assert_eq!(urls(from), vec!["e", "a"], "from a key, to the end");
    let empty = read(KeyRange::between(NOW, NOW + DAY_MS)).await.unwrap();
    assert!(empty.is_empty());
    let again = read(KeyRange::ALL).await.unwrap();
    assert_eq!(urls(again), vec!["b", "c", "d", "e", "a"], "reading a range of keys removed nothing outside it");
}

/// Each (visit type, policy, lister) has an index of its own.
pub async fn indexes_are_separate_per_visit_type_policy_and_lister(store: &dyn VisitStore) {
    record(store, origin("git", "a", "u1", Some(NOW - DAY_MS)), VisitStats::default()).await;
    record(store, origin("git", "b", "u2", None), VisitStats::default()).await;
    record(store, origin("hg", "a", "u3", None), VisitStats::default()).await;
    assert_eq!(index(store, "git", Policy::OldestScheduledFirst, "a").await, vec![(i64::MIN, "u1".into())]);
    assert_eq!(index(store, "git", Policy::OldestScheduledFirst, "b").await, vec![(i64::MIN, "u2".into())]);
    assert_eq!(index(store, "hg", Policy::OldestScheduledFirst, "a").await, vec![(i64::MIN, "u3".into())]);
    assert_eq!(index(store, "git", Policy::OriginsWithoutLastUpdate, "b").await, vec![(i64::MIN, "u2".into())]);
    assert!(index(store, "git", Policy::OriginsWithoutLastUpdate, "a").await.is_empty());
    assert!(index(store, "git", Policy::AlreadyVisitedOrderByLag, "a").await.is_empty());
}

/// Wake-ups read ascending by `(at, url)`, up to and including a time, at most
/// the limit, per visit type.
pub async fn wake_ups_ascend_up_to_a_time(store: &dyn VisitStore) {
    for (url, days) in [("x", 9), ("y", 3), ("z", 3), ("w", 20)] {
        let stats = VisitStats { last_scheduled: Some(NOW + days * DAY_MS - 7 * DAY_MS), ..VisitStats::default() };
        let write = record(store, origin("git", "l", url, None), stats).await;
        assert_eq!(write.state.placement.wake_at, Some(NOW + days * DAY_MS));
    }
    let wakes = store.read_wakes("git", NOW + 9 * DAY_MS, 100).await.unwrap();
    let expected: Vec<(i64, String)> =
        vec![(NOW + 3 * DAY_MS, "y".into()), (NOW + 3 * DAY_MS, "z".into()), (NOW + 9 * DAY_MS, "x".into())];
    assert_eq!(wakes, expected, "inclusive of the bound");
    assert_eq!(store.read_wakes("git", i64::MAX, 1).await.unwrap().len(), 1);
    assert!(store.read_wakes("hg", i64::MAX, 10).await.unwrap().is_empty());
}

/// Adding a lister twice gathers its visit types; the last finished listing
/// wins; listers come by name.
pub async fn listers_gather_visit_types_and_their_last_listing(store: &dyn VisitStore) {
    store.add_lister("gitlab/framagit", &["git".into()]).await.unwrap();
    store.add_lister("gitlab/framagit", &["git".into(), "hg".into()]).await.unwrap();
    store.add_lister("cgit/kernel", &["git".into()]).await.unwrap();
    store.finish_listing("gitlab/framagit", NOW).await.unwrap();
    store.finish_listing("gitlab/framagit", NOW + 1).await.unwrap();
    let listers = store.listers().await.unwrap();
    let summary: Vec<(&str, Vec<&str>, Option<i64>)> = listers
        .iter()
        .map(|l| (l.name.as_str(), l.visit_types.iter().map(String::as_str).collect(), l.listing_finished))
        .collect();
    assert_eq!(
        summary,
        vec![("cgit/kernel", vec!["git"], None), ("gitlab/framagit", vec!["git", "hg"], Some(NOW + 1))]
    );
}

/// The counts per lister and visit type follow each write's deltas, every
/// field of [`ListerMetrics`] (the rate sums too); an unknown lister has none.
pub async fn counts_follow_the_writes(store: &dyn VisitStore) {
    let cooldowns = Cooldowns::default();
    let visited = |days_ago: i64, rate: f32| VisitStats {
        last_visit: Some(NOW - days_ago * DAY_MS),
        last_successful: Some(NOW - days_ago * DAY_MS),
        last_visit_status: Some(VisitStatus::Successful),
        last_snapshot: Some(b"s".to_vec()),
        rate: Some(rate),
        ..VisitStats::default()
    };
    let mut writes = vec![
        record(store, origin("git", "l", "a", Some(NOW)), VisitStats::default()).await,
        record(store, origin("git", "l", "b", None), VisitStats::default()).await,
        record(store, origin("hg", "l", "c", None), VisitStats::default()).await,
        // Rated and never visited.
        record(
            store,
            origin("git", "l", "r", Some(NOW - DAY_MS)),
            VisitStats { rate: Some(0.5), ..VisitStats::default() },
        )
        .await,
        // Visited, with a change listed after: pending since 2 and 4 days.
        record(store, origin("git", "l", "v", Some(NOW - 2 * DAY_MS)), visited(10, 0.25)).await,
        record(store, origin("git", "l", "w", Some(NOW - 4 * DAY_MS)), visited(10, 0.125)).await,
        // Visited, no change listed since: known up to its last listing.
        record(store, origin("git", "l", "k", Some(NOW - 20 * DAY_MS)), visited(5, 2.0)).await,
    ];
    let a = writes[0].clone();
    let disabled = VisitStats { enabled: false, ..a.state.stats.clone() };
    writes.push(OriginWrite::new(Some(&a.state), a.state.origin.clone(), disabled, &cooldowns, NOW));
    // `w` is visited again: its change is no longer pending, its content known.
    let w = writes[5].clone();
    let seen = VisitStats { last_successful: Some(NOW), last_visit: Some(NOW), ..w.state.stats.clone() };
    writes.push(OriginWrite::new(Some(&w.state), w.state.origin.clone(), seen, &cooldowns, NOW));
    store.apply(&writes[7..]).await.unwrap();

    let mut expected: std::collections::BTreeMap<String, ListerMetrics> = std::collections::BTreeMap::new();
    for write in &writes {
        for (lister, delta) in &write.metrics {
            assert_eq!(lister, "l");
            expected.entry(write.state.origin.visit_type.clone()).or_default().add(*delta, 1);
        }
    }
    let mut metrics = store.metrics("l").await.unwrap();
    metrics.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(metrics, expected.into_iter().collect::<Vec<_>>(), "the sum of the writes' deltas");
    let git = metrics[0].1;
    assert_eq!(
        (git.known, git.enabled, git.never_visited, git.pending_changes, git.rated),
        (6, 5, 2, 1, 4),
        "a disabled; b and r never visited; v pending; r, v, w, k rated"
    );
    assert_eq!(git.pending_age_ms(NOW), Some(2 * DAY_MS), "v's change, listed 2 days ago");
    assert!((git.mean_rate().unwrap() - (0.5 + 0.25 + 0.125 + 2.0) / 4.0).abs() < 1e-9);
    // w (0.125/day) known up to now, k (2/day) up to its last listing (now):
    // a day on, 2.125 changes expected beside v's.
    assert!((git.estimated_pending(NOW + DAY_MS) - 3.125).abs() < 1e-3, "{}", git.estimated_pending(NOW + DAY_MS));
    assert_eq!(
        metrics[1],
        ("hg".into(), ListerMetrics { known: 1, enabled: 1, never_visited: 1, ..ListerMetrics::default() })
    );
    assert!(store.metrics("nobody").await.unwrap().is_empty());
}

/// A visit type's queue-position clock reads 0 until set, then what was set last.
pub async fn queue_positions_start_at_zero_and_are_kept(store: &dyn VisitStore) {
    assert_eq!(store.queue_position("git").await.unwrap(), 0);
    store.set_queue_position("git", 5 * DAY_MS).await.unwrap();
    store.set_queue_position("hg", -1).await.unwrap();
    assert_eq!(store.queue_position("git").await.unwrap(), 5 * DAY_MS);
    assert_eq!(store.queue_position("hg").await.unwrap(), -1);
}

/// An origin as large as the limits allow (a URL of [`MAX_URL_BYTES`],
/// loader arguments of [`MAX_LOADER_ARGUMENTS_BYTES`], a last snapshot of the
/// default `limits.max_payload_bytes`, all bytes 255: the longest JSON) is
/// written, moved to a wake-up and back into an index, each write whole.
pub async fn origins_as_large_as_the_limits_allow_are_written_and_moved(store: &dyn VisitStore) {
    let url = format!("https://forge.example/{}", "u".repeat(MAX_URL_BYTES - "https://forge.example/".len()));
    let padding = MAX_LOADER_ARGUMENTS_BYTES - r#"{"a":""}"#.len();
    let arguments = format!(r#"{{"a":"{}"}}"#, "x".repeat(padding));
    assert_eq!((url.len(), arguments.len()), (MAX_URL_BYTES, MAX_LOADER_ARGUMENTS_BYTES));
    let listed = ListedOrigin { extra_loader_arguments: arguments, ..origin("git", "l", &url, Some(NOW - DAY_MS)) };
    let snapshot = vec![255; Limits::default().max_payload_bytes];
    let stats = VisitStats { last_snapshot: Some(snapshot.clone()), ..VisitStats::default() };
    let first = record(store, listed, stats).await;
    assert!(encode_state(&first.state).len() > 4 * snapshot.len(), "the state is at its largest");
    assert!(!first.index.is_empty());
    let read = store.read_origins("git", std::slice::from_ref(&url)).await.expect("read");
    assert_eq!(read, vec![Some(first.state.clone())]);

    let cooldowns = Cooldowns::default();
    let scheduled = VisitStats { last_scheduled: Some(NOW), ..first.state.stats.clone() };
    let write = OriginWrite::new(Some(&first.state), first.state.origin.clone(), scheduled, &cooldowns, NOW);
    store.apply(std::slice::from_ref(&write)).await.expect("apply the scheduling");
    for policy in Policy::INDEXED {
        assert!(index(store, "git", policy, "l").await.is_empty(), "{policy:?} no longer holds it");
    }
    assert_eq!(store.read_wakes("git", i64::MAX, 10).await.unwrap(), vec![(NOW + 7 * DAY_MS, url.clone())]);

    let mut visited = write.state.stats.clone();
    let at = NOW + DAY_MS;
    let outcome = VisitResult {
        status: VisitStatus::Successful,
        snapshot: Some(vec![254; snapshot.len()]),
        visit_date: at,
        newest_change: None,
    };
    visited.record(&outcome, 0, 0.5);
    let back = OriginWrite::new(Some(&write.state), write.state.origin.clone(), visited, &cooldowns, at);
    store.apply(std::slice::from_ref(&back)).await.expect("apply the outcome");
    assert!(store.read_wakes("git", i64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(index(store, "git", Policy::OldestScheduledFirst, "l").await, vec![(NOW, url.clone())]);
    let read = store.read_origins("git", &[url]).await.unwrap();
    assert_eq!(read, vec![Some(back.state)]);
}
