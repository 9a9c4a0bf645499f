//! The data-import chunk ranker's end-to-end orderings (its repository's
//! `EndToEndTenantUsageTest`, `EndToEndAgeSizeInterleavedTest` and
//! `EndToEndAllFactorsTest`), played against a real server: tenants as
//! fairness keys, each chunk's job size as its `size` on the log curve at
//! the ranker's reference (100,000 records), ages as the time a chunk
//! waited on the server's clock (added oldest first, the clock moved on
//! between), chunks in progress as tasks leased and not finished. Each test
//! asserts the order Fairway gives; docs/fairness.md §7c sets it beside the
//! ranker's expected order, with why each difference is intended.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{Clock, ManualClock, SystemClock};
use fairway::config::Config;
use fairway::core::engine::TaskPolicy;
use fairway::core::fairness::CostCurve;
use fairway::proto::v1 as pb;

use crate::support::{Backend, TestServer, add_all, poll, spec};

const QUEUE: &str = "imports";

/// A chunk of the ranker's tests: tenant, job size, age in minutes, part.
#[derive(Clone, Copy, Debug)]
struct Item(&'static str, u64, u64, u32);

impl Item {
    fn label(self) -> String {
        let Item(tenant, size, age, part) = self;
        format!("{tenant} {size}@{age}m p{part}")
    }
}

async fn start(clock: Arc<ManualClock>) -> TestServer {
    let mut config = Config::default();
    // The order of the backlog: no task of an idle tenant added beside it
    // is held for the next poll (docs/fairness.md §7a).
    config.matcher.quiet_hold = Duration::ZERO;
    let imports = TaskPolicy {
        cost_curve: CostCurve::Log,
        cost_reference_size: 100_000,
        lease_timeout: Duration::from_secs(24 * 3600),
        ..TaskPolicy::default()
    };
    config.queues.insert(QUEUE.into(), imports);
    TestServer::start_timed(Backend::Embedded, config, clock).await
}

/// Leases one task of each of `in_progress`' tenants per entry (the chunks
/// running), then adds `waiting` oldest first, moving the server's clock on
/// so that each has waited its age when the polls start, and returns the
/// order the waiting ones are dispatched in.
async fn order(in_progress: &[&str], waiting: &[Item]) -> Vec<String> {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let server = start(clock.clone()).await;
    let mut client = server.client.clone();
    let running: Vec<pb::TaskSpec> =
        in_progress.iter().map(|tenant| pb::TaskSpec { size: 100, ..spec(tenant, 0.0, 0, b"running") }).collect();
    add_all(&mut client, QUEUE, running).await;
    for tenant in in_progress {
        let task = poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("a chunk in progress");
        assert_eq!(task.payload, b"running", "{tenant}'s running chunk");
    }
    let mut by_age = waiting.to_vec();
    by_age.sort_by_key(|item| std::cmp::Reverse(item.2));
    for (i, item) in by_age.iter().enumerate() {
        let spec = pb::TaskSpec { size: item.1, ..spec(item.0, 0.0, 0, item.label().as_bytes()) };
        add_all(&mut client, QUEUE, vec![spec]).await;
        let younger = by_age.get(i + 1).map_or(0, |next| next.2);
        clock.advance(Duration::from_secs(60 * (item.2 - younger)));
    }
    let mut order = Vec::new();
    while let Some(task) = poll(&mut client, QUEUE, Duration::from_millis(300)).await {
        order.push(String::from_utf8(task.payload).expect("a label"));
    }
    server.stop().await;
    order
}

fn labels(items: &[Item]) -> Vec<String> {
    items.iter().map(|item| item.label()).collect()
}

/// `EndToEndTenantUsageTest`: one new chunk from each of four tenants, A
/// running 3, B 2, C 1 and D none. The ranker: D, C, B, A. Fairway: B, C,
/// D, A: a tenant's running chunks count against it only as far as they
/// went beyond what the others got while it was backlogged; B and C are not
/// behind D (all were served in turn), so they keep their order of arrival,
/// and A, which got one more than anyone, goes last.
#[tokio::test]
async fn tenant_usage() {
    let waiting = [Item("a", 100, 0, 1), Item("b", 100, 0, 1), Item("c", 100, 0, 1), Item("d", 100, 0, 1)];
    let got = order(&["a", "a", "a", "b", "b", "c"], &waiting).await;
    assert_eq!(got, labels(&[waiting[1], waiting[2], waiting[3], waiting[0]]));
}

/// `EndToEndAgeSizeInterleavedTest`: one tenant's chunks of jobs of 100 to
/// 1,000,000 records, 0 to 4,320 minutes old. The ranker puts the
/// 100-record job of 5 minutes before the 10,000-record job of 15; Fairway
/// keeps one tenant's chunks in the order they came (FIFO within a key), so
/// the order is by age alone.
#[tokio::test]
async fn age_against_size() {
    let waiting = [
        Item("a", 100, 0, 1),
        Item("a", 100, 5, 1),
        Item("a", 10_000, 15, 1),
        Item("a", 100, 60, 1),
        Item("a", 1_000_000, 4320, 1),
    ];
    let got = order(&[], &waiting).await;
    assert_eq!(got, labels(&[waiting[4], waiting[3], waiting[2], waiting[1], waiting[0]]));
}

/// `EndToEndAllFactorsTest`: four tenants with the same four chunks each (a
/// 2,000-record job's second part 120 minutes old, a 1,000-record job's two
/// parts 15 minutes old, a 100-record job new), A running 3, B 2, C 1.
/// Fairway serves the tenants in turn, each one's chunks oldest first: a
/// tenant's share does not depend on how large its jobs are against
/// another tenant's (the size makes a tenant's turn come back later), and a
/// new chunk of an idle tenant does not pass another tenant's chunks of
/// two hours.
#[tokio::test]
async fn all_factors() {
    let chunks = |t| [Item(t, 100, 0, 1), Item(t, 1000, 15, 1), Item(t, 1000, 15, 2), Item(t, 2000, 120, 2)];
    let waiting: Vec<Item> = ["a", "b", "c", "d"].into_iter().flat_map(chunks).collect();
    let got = order(&["a", "a", "a", "b", "b", "c"], &waiting).await;
    // Each tenant's chunks in the order they came.
    for tenant in ["a", "b", "c", "d"] {
        let mine: Vec<&String> = got.iter().filter(|label| label.starts_with(tenant)).collect();
        let expected = labels(&[chunks(tenant)[3], chunks(tenant)[1], chunks(tenant)[2], chunks(tenant)[0]]);
        assert_eq!(mine, expected.iter().collect::<Vec<_>>(), "{tenant}'s chunks out of order: {got:?}");
    }
    // Tenants in turn: B, C and D at the pass A's third running chunk
    // reached (in the order they came), A one turn behind.
    let column = |t: usize| ["b", "c", "d", "a"].map(|tenant| chunks(tenant)[t]);
    let expected: Vec<Item> = [3, 1, 2, 0].into_iter().flat_map(column).collect();
    assert_eq!(got, labels(&expected));
}
