//! The conformance suite of [`super::LeaseStore`]: generic tests every
//! backend passes. A backend runs them all with
//! [`lease_store_conformance_suite!`](crate::lease_store_conformance_suite),
//! given an async function that returns a fresh, empty
//! [`TestStore`](crate::store::conformance::TestStore).

use std::time::Duration;

use super::{Lease, LeaseStore, MAX_HOLDER_BYTES, MAX_NAME_BYTES, MAX_TTL};
use crate::store::StoreError;

/// Expands to one `#[tokio::test]` per conformance test, each with a fresh
/// store from `$factory`.
#[macro_export]
macro_rules! lease_store_conformance_suite {
    ($factory:path) => {
        $crate::lease_store_conformance_suite!(@tests $factory;
            an_absent_lease_is_taken_at_token_one_and_reads_back,
            another_holder_cannot_take_a_lease_before_it_expires,
            a_holder_renews_at_the_same_token_and_a_lapsed_holding_is_a_new_one,
            a_release_frees_only_the_callers_holding_and_keeps_the_token,
            the_token_only_grows_over_holdings_by_turns,
            of_racing_takers_exactly_one_holds,
            leases_of_different_names_are_independent,
            bad_arguments_are_invalid_and_write_nothing,
        );
    };
    (@tests $factory:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                $factory()
                    .await
                    .run(|store| async move { $crate::store::leases::conformance::$name(&*store).await })
                    .await;
            }
        )+
    };
}

/// 2026-01-01T00:00:00Z, in ms since the Unix epoch.
const NOW: i64 = 1_767_225_600_000;

const TTL: Duration = Duration::from_secs(6);
const TTL_MS: i64 = 6_000;

fn lease(name: &str, holder: &str, token: u64, expires_at_ms: i64) -> Lease {
    Lease { name: name.into(), holder: holder.into(), token, expires_at_ms }
}

/// An absent lease reads as `None`; the first acquire takes it at token 1
/// until `now + ttl`, and it reads back so.
pub async fn an_absent_lease_is_taken_at_token_one_and_reads_back(store: &dyn LeaseStore) {
    assert_eq!(store.read("rounds/git").await.expect("read"), None);
    let taken = store.acquire("rounds/git", "node-a", NOW, TTL).await.expect("acquire");
    assert_eq!(taken, Some(lease("rounds/git", "node-a", 1, NOW + TTL_MS)));
    assert_eq!(store.read("rounds/git").await.expect("read"), taken);
}

/// While a lease has not expired at the caller's `now`, another holder
/// gets `None` and nothing changes; from its expiry on, the other holder
/// takes it at the next token.
pub async fn another_holder_cannot_take_a_lease_before_it_expires(store: &dyn LeaseStore) {
    let held = store.acquire("l", "a", NOW, TTL).await.unwrap().expect("taken");
    for now in [NOW, NOW + 1, NOW + TTL_MS - 1] {
        assert_eq!(store.acquire("l", "b", now, TTL).await.unwrap(), None, "at {now}");
        assert_eq!(store.read("l").await.unwrap(), Some(held.clone()), "nothing written at {now}");
    }
    let taken = store.acquire("l", "b", NOW + TTL_MS, TTL).await.unwrap();
    assert_eq!(taken, Some(lease("l", "b", 2, NOW + 2 * TTL_MS)), "taken at its expiry, the token bumped");
    assert_eq!(store.acquire("l", "a", NOW + TTL_MS + 1, TTL).await.unwrap(), None, "the old holder is out");
    assert_eq!(store.read("l").await.unwrap(), taken);
}

/// A holder's acquire before expiry renews: same token, expiry moved to
/// `now + ttl` (never back). Once its lease expired, its acquire is a new
/// holding at the next token.
pub async fn a_holder_renews_at_the_same_token_and_a_lapsed_holding_is_a_new_one(store: &dyn LeaseStore) {
    store.acquire("l", "a", NOW, TTL).await.unwrap().expect("taken");
    let renewed = store.acquire("l", "a", NOW + 2_000, TTL).await.unwrap();
    assert_eq!(renewed, Some(lease("l", "a", 1, NOW + 2_000 + TTL_MS)));
    let early = store.acquire("l", "a", NOW + 1_000, TTL).await.unwrap();
    assert_eq!(early, renewed, "a renewal from an earlier now does not shorten it");
    assert_eq!(store.read("l").await.unwrap(), renewed);
    let lapsed_at = NOW + 2_000 + TTL_MS;
    let again = store.acquire("l", "a", lapsed_at, TTL).await.unwrap();
    assert_eq!(again, Some(lease("l", "a", 2, lapsed_at + TTL_MS)), "a gap: a new token");
}

/// A release by the holder at its token frees the lease (expiry 0, token
/// kept), and anyone takes it at once at the next token; a release by
/// another holder, at another token, or of an absent lease is `false`
/// and writes nothing.
pub async fn a_release_frees_only_the_callers_holding_and_keeps_the_token(store: &dyn LeaseStore) {
    assert!(!store.release("l", "a", 1).await.unwrap(), "absent");
    assert_eq!(store.read("l").await.unwrap(), None, "nothing written");
    let held = store.acquire("l", "a", NOW, TTL).await.unwrap().expect("taken");
    assert!(!store.release("l", "b", 1).await.unwrap(), "another holder");
    assert!(!store.release("l", "a", 2).await.unwrap(), "another token");
    assert_eq!(store.read("l").await.unwrap(), Some(held), "nothing written");
    assert!(store.release("l", "a", 1).await.unwrap());
    assert_eq!(store.read("l").await.unwrap(), Some(lease("l", "a", 1, 0)), "free, the token kept");
    let taken = store.acquire("l", "b", NOW + 1, TTL).await.unwrap();
    assert_eq!(taken, Some(lease("l", "b", 2, NOW + 1 + TTL_MS)), "taken at once");
    assert!(!store.release("l", "a", 1).await.unwrap(), "the old holding cannot free the new one");
    assert_eq!(store.read("l").await.unwrap(), taken);
}

/// Holders taking the lease by turns, each after the last one's expiry or
/// release, see tokens 1, 2, 3, …: every holding has a token of its own,
/// above every earlier one.
pub async fn the_token_only_grows_over_holdings_by_turns(store: &dyn LeaseStore) {
    let mut now = NOW;
    let mut last = 0;
    for turn in 0..12u64 {
        let holder = ["a", "b", "c"][(turn % 3) as usize];
        let taken = store.acquire("l", holder, now, TTL).await.unwrap().expect("free");
        assert_eq!((taken.holder.as_str(), taken.token), (holder, last + 1), "turn {turn}");
        last = taken.token;
        let renewed = store.acquire("l", holder, now + 1, TTL).await.unwrap().expect("renewed");
        assert_eq!(renewed.token, last, "a renewal keeps the token");
        if turn % 2 == 0 {
            assert!(store.release("l", holder, last).await.unwrap());
            now += 2;
        } else {
            now = renewed.expires_at_ms;
        }
    }
    assert_eq!(store.read("l").await.unwrap().map(|l| l.token), Some(12));
}

/// Of eight nodes taking a free lease at once, exactly one gets it; the
/// others get `None`, and the lease reads as the winner's.
pub async fn of_racing_takers_exactly_one_holds(store: &dyn LeaseStore) {
    for round in 0..3i64 {
        let now = NOW + round * TTL_MS;
        let holders: Vec<String> = (0..8).map(|n| format!("node-{n}")).collect();
        let answers =
            futures::future::join_all(holders.iter().map(|holder| store.acquire("raced", holder, now, TTL))).await;
        let winners: Vec<Lease> = answers.into_iter().filter_map(|a| a.expect("acquire")).collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(winners[0].token, round as u64 + 1, "one take per round");
        assert_eq!(store.read("raced").await.unwrap().as_ref(), Some(&winners[0]));
    }
}

/// Names are leases of their own: holding one says nothing of another.
pub async fn leases_of_different_names_are_independent(store: &dyn LeaseStore) {
    let git = store.acquire("rounds/git", "a", NOW, TTL).await.unwrap().expect("git");
    let hg = store.acquire("rounds/hg", "b", NOW, TTL).await.unwrap().expect("hg");
    assert_eq!((git.token, hg.token), (1, 1));
    assert_eq!(store.acquire("rounds/hg", "a", NOW, TTL).await.unwrap(), None);
    assert!(store.release("rounds/git", "a", 1).await.unwrap());
    assert_eq!(store.read("rounds/hg").await.unwrap(), Some(hg));
}

/// Names and holders empty or over their limits, a ttl of 0 or over
/// [`MAX_TTL`], a negative `now` are `Invalid`, naming the limit, and
/// write nothing.
pub async fn bad_arguments_are_invalid_and_write_nothing(store: &dyn LeaseStore) {
    let long_name = "n".repeat(MAX_NAME_BYTES + 1);
    let long_holder = "h".repeat(MAX_HOLDER_BYTES + 1);
    let cases: Vec<(&str, &str, i64, Duration, String)> = vec![
        ("", "a", NOW, TTL, MAX_NAME_BYTES.to_string()),
        (&long_name, "a", NOW, TTL, MAX_NAME_BYTES.to_string()),
        ("l", "", NOW, TTL, MAX_HOLDER_BYTES.to_string()),
        ("l", &long_holder, NOW, TTL, MAX_HOLDER_BYTES.to_string()),
        ("l", "a", NOW, Duration::ZERO, "1 ms".into()),
        ("l", "a", NOW, MAX_TTL + Duration::from_millis(1), format!("{MAX_TTL:?}")),
        ("l", "a", -1, TTL, "0 or more".into()),
    ];
    for (name, holder, now, ttl, limit) in cases {
        match store.acquire(name, holder, now, ttl).await {
            Err(StoreError::Invalid(message)) => assert!(message.contains(&limit), "{message}"),
            other => panic!("{name:?} {holder:?} {now} {ttl:?}: {other:?}"),
        }
    }
    assert_eq!(store.read("l").await.unwrap(), None, "nothing written");
    assert!(matches!(store.release("", "a", 1).await, Err(StoreError::Invalid(_))));
    assert!(matches!(store.release("l", "a", u64::MAX).await, Err(StoreError::Invalid(_))));
    assert!(matches!(store.read(&long_name).await, Err(StoreError::Invalid(_))));
}
