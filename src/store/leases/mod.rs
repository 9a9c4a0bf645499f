//! Named leases, apart from their backends (the embedded store and
//! Cassandra): the right of one node at a time to do one job (the
//! scheduling rounds of a visit type: `rounds/<visit type>`). Every backend
//! passes the generic tests of `conformance` (behind the feature of that
//! name).
//!
//! A lease is one row, `name → (holder, token, expires_at_ms)`, changed
//! only by compare-and-set on the token the change was decided from.
//! Invariants the contract keeps:
//! 1. At most one holder at a time by the callers' clocks: a lease is taken
//!    from another holder only once the taker's `now` is at or past its
//!    `expires_at_ms`.
//! 2. The token only grows: every take (of a lease absent, released,
//!    expired, or held before by another node or by an earlier holding of
//!    the same node) writes the token it found + 1, from 1; a renewal and a
//!    release keep it. So a holder that sees its token unchanged held the
//!    lease without a gap, and two holdings never share a token.
//!
//! Expiry is judged with the caller's `now`; nothing in the store reads a
//! clock. Holders must therefore stop using a lease some margin before
//! their own deadline (the clocks of the nodes differ by less than that
//! margin): `visits::run_rounds` does.
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`LeaseStore::acquire`] | compare-and-set on the token (Cassandra: a lightweight transaction at the serial consistency): `Some` when the caller holds the lease after it (taken at the token + 1, or renewed at the same token, to `now + ttl`), `None` when another holder's lease has not expired at `now`. Name at most [`MAX_NAME_BYTES`], holder at most [`MAX_HOLDER_BYTES`], both non-empty; `ttl` from 1 ms to [`MAX_TTL`]; `now` from 0 | `Invalid` (bad arguments; nothing written); `Uncertain` (may have been written: the caller may hold a lease it does not know of, until its expiry; the next `acquire` renews it); `Unavailable` (not written): retry |
//! | [`LeaseStore::release`] | compare-and-set on holder and token: `true` when it freed the caller's holding (expiry set to 0, token kept), `false` when the lease is another holding's, or absent | `Invalid`; `Uncertain` (may have been freed: harmless, it expires anyway); `Unavailable`: retry |
//! | [`LeaseStore::read`] | the row, linearizable with the compare-and-sets before it (serial consistency); `None` if never taken | retry |

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::time::Duration;

use async_trait::async_trait;

use super::{StoreError, StoreResult};
use crate::clock::UnixMillis;

/// The longest lease name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;

/// The longest holder (a node's name), in bytes.
pub const MAX_HOLDER_BYTES: usize = 256;

/// The longest lease one `acquire` grants.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// A lease as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// What it is the right to do, e.g. `rounds/git`.
    pub name: String,
    /// The node that holds (or last held) it.
    pub holder: String,
    /// Bumped by every take, from 1; kept by renewals and releases.
    pub token: u64,
    /// Until when it is held, in ms since the Unix epoch on the holder's
    /// clock; 0 once released.
    pub expires_at_ms: UnixMillis,
}

impl Lease {
    /// Whether the lease is free for anyone at `now`: released or expired.
    pub fn is_free_at(&self, now: UnixMillis) -> bool {
        self.expires_at_ms <= now
    }
}

/// What a backend must keep for named leases (see [`crate::store::leases`]).
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// Takes lease `name` for `holder` until `now + ttl` if it is absent,
    /// free or expired at `now` (the token bumped), or renews it to then if
    /// `holder` holds it (the token kept). `Some` with the lease as written;
    /// `None` (nothing written) when another holder holds it at `now`.
    async fn acquire(&self, name: &str, holder: &str, now: UnixMillis, ttl: Duration) -> StoreResult<Option<Lease>>;

    /// Frees lease `name` if `holder` holds it at `token` (its expiry set to
    /// 0, its token kept): `true` when freed, `false` (nothing written)
    /// when it is another holding or absent.
    async fn release(&self, name: &str, holder: &str, token: u64) -> StoreResult<bool>;

    /// Lease `name` as stored, `None` if it was never taken.
    async fn read(&self, name: &str) -> StoreResult<Option<Lease>>;
}

/// Checks a name; `Invalid` unless 1 to [`MAX_NAME_BYTES`] bytes.
pub(crate) fn check_name(name: &str) -> StoreResult<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(StoreError::Invalid(format!(
            "lease name {name:?} is {} bytes; it must be 1 to {MAX_NAME_BYTES}",
            name.len()
        )));
    }
    Ok(())
}

/// Checks a holder; `Invalid` unless 1 to [`MAX_HOLDER_BYTES`] bytes.
pub(crate) fn check_holder(holder: &str) -> StoreResult<()> {
    if holder.is_empty() || holder.len() > MAX_HOLDER_BYTES {
        return Err(StoreError::Invalid(format!(
            "lease holder {holder:?} is {} bytes; it must be 1 to {MAX_HOLDER_BYTES}",
            holder.len()
        )));
    }
    Ok(())
}

/// A token as Cassandra stores it (a bigint); `Invalid` past `i64::MAX`.
pub(crate) fn check_token(token: u64) -> StoreResult<i64> {
    i64::try_from(token).map_err(|_| StoreError::Invalid(format!("lease token {token} is over {}", i64::MAX)))
}

/// Checks the arguments of an acquire; the expiry it would write.
/// `Invalid` for a bad name or holder, a `ttl` of 0 or over [`MAX_TTL`], a
/// negative `now`.
pub(crate) fn check_acquire(name: &str, holder: &str, now: UnixMillis, ttl: Duration) -> StoreResult<UnixMillis> {
    check_name(name)?;
    check_holder(holder)?;
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(StoreError::Invalid(format!("lease {name}: a ttl of {ttl:?}; it must be 1 ms to {MAX_TTL:?}")));
    }
    if now < 0 {
        return Err(StoreError::Invalid(format!("lease {name}: now is {now} ms; it must be 0 or more")));
    }
    Ok(now.saturating_add(crate::clock::millis(ttl).max(1)))
}

/// What an acquire writes over `stored` (`None`: the row is absent) at
/// `now`, to `expires_at_ms`: `None` when another holder holds it. The
/// rule every backend applies inside its compare-and-set.
pub(crate) fn next_holding(
    stored: Option<&Lease>,
    name: &str,
    holder: &str,
    now: UnixMillis,
    expires_at_ms: UnixMillis,
) -> StoreResult<Option<Lease>> {
    let held = |token: u64| Lease { name: name.to_owned(), holder: holder.to_owned(), token, expires_at_ms };
    match stored {
        None => Ok(Some(held(1))),
        Some(lease) if lease.is_free_at(now) => {
            let token = lease
                .token
                .checked_add(1)
                .filter(|t| i64::try_from(*t).is_ok())
                .ok_or_else(|| StoreError::Corrupt(format!("lease {name}: token {} cannot grow", lease.token)))?;
            Ok(Some(held(token)))
        }
        // A renewal never shortens the lease.
        Some(lease) if lease.holder == holder => {
            Ok(Some(Lease { expires_at_ms: expires_at_ms.max(lease.expires_at_ms), ..held(lease.token) }))
        }
        Some(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, token: u64, expires_at_ms: i64) -> Lease {
        Lease { name: "n".into(), holder: holder.into(), token, expires_at_ms }
    }

    #[test]
    fn a_take_bumps_the_token_and_a_renewal_keeps_it() {
        assert_eq!(next_holding(None, "n", "a", 10, 20).unwrap(), Some(lease("a", 1, 20)));
        let held = lease("a", 4, 20);
        assert_eq!(next_holding(Some(&held), "n", "a", 15, 25).unwrap(), Some(lease("a", 4, 25)));
        assert_eq!(next_holding(Some(&held), "n", "b", 15, 25).unwrap(), None, "held by another");
        assert_eq!(next_holding(Some(&held), "n", "b", 20, 30).unwrap(), Some(lease("b", 5, 30)), "expired");
        assert_eq!(next_holding(Some(&held), "n", "a", 20, 30).unwrap(), Some(lease("a", 5, 30)), "a new holding");
        assert_eq!(next_holding(Some(&held), "n", "a", 15, 18).unwrap(), Some(lease("a", 4, 20)), "never shorter");
        let released = lease("a", 4, 0);
        assert_eq!(next_holding(Some(&released), "n", "a", 15, 25).unwrap(), Some(lease("a", 5, 25)));
        let last = lease("a", i64::MAX as u64, 0);
        assert!(matches!(next_holding(Some(&last), "n", "a", 1, 2), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn bad_arguments_name_the_limit() {
        let invalid = |r: StoreResult<i64>, needle: &str| match r {
            Err(StoreError::Invalid(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("{other:?}"),
        };
        invalid(check_acquire("", "a", 0, Duration::from_secs(1)), &MAX_NAME_BYTES.to_string());
        invalid(check_acquire(&"n".repeat(MAX_NAME_BYTES + 1), "a", 0, Duration::from_secs(1)), "200");
        invalid(check_acquire("n", "", 0, Duration::from_secs(1)), &MAX_HOLDER_BYTES.to_string());
        invalid(check_acquire("n", "a", 0, Duration::ZERO), "1 ms");
        invalid(check_acquire("n", "a", 0, MAX_TTL + Duration::from_millis(1)), "3600s");
        invalid(check_acquire("n", "a", -1, Duration::from_secs(1)), "0 or more");
        assert_eq!(check_acquire("n", "a", 5, Duration::from_secs(1)).unwrap(), 1005);
    }
}
