//! Rotating the cluster's secret (`fairway auth rotate`): a new secret
//! becomes current; the one it replaces is still signed with for
//! [`SIGNING_SWITCH_DELAY`] (by then every node has read the new one, which
//! it does every [`SECRET_RELOAD_INTERVAL`]) and accepted for the overlap
//! the operator chose, from the rotation on.
//!
//! Invariants:
//! - the overlap is within [`MIN_OVERLAP`]..=[`MAX_OVERLAP`]: it always
//!   outlasts the switch of signing keys and a node's reload;
//! - a rotation starts from the current secret it read and is written only
//!   if that is still current (a compare-and-set in the store): of two
//!   racing, one wins and the other is told so;
//! - a rotation is refused while the previous one's overlap lasts: it would
//!   forget a secret that tokens in flight (or, before the switch, the
//!   nodes' signatures) still depend on.
//!
//! The rule for operators: the overlap must exceed [`SIGNING_SWITCH_DELAY`]
//! plus the longest time a worker holds one lease token (heartbeats extend a
//! lease and keep its token). A token signed with the old secret is refused
//! after the overlap: its worker gets `INVALID_ARGUMENT` (`lease_token is not
//! a lease token given by PollTask`) on heartbeat, completion or failure,
//! and the task is delivered again when its lease runs out.
//!
//! It lives here, above both `security` (the keys and the secret's records)
//! and `store` (which writes them), so that `security` imports no store.

use std::time::Duration;

use crate::clock::{UnixMillis, millis};
use crate::security::{SECRET_BYTES, SECRET_RELOAD_INTERVAL, SIGNING_SWITCH_DELAY};
use crate::store::{SecretStore, StoreError};

/// The shortest overlap a rotation may have.
pub const MIN_OVERLAP: Duration = Duration::from_secs(60);

/// The longest overlap a rotation may have.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);

const _: () = assert!(MIN_OVERLAP.as_secs() > SIGNING_SWITCH_DELAY.as_secs() + SECRET_RELOAD_INTERVAL.as_secs());

/// A rotation as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// When it was written (ms since the Unix epoch).
    pub rotated_at_ms: UnixMillis,
    /// Until then, nodes sign with the previous secret.
    pub signs_until_ms: UnixMillis,
    /// Until then (inclusive), what the previous secret made is accepted.
    pub accepted_until_ms: UnixMillis,
}

/// Why a rotation was not written.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RotateError {
    /// The overlap is outside [`MIN_OVERLAP`]..=[`MAX_OVERLAP`].
    #[error("--overlap is {given:?}; it must be at least {MIN_OVERLAP:?} and at most {MAX_OVERLAP:?}")]
    Overlap {
        /// The overlap asked for.
        given: Duration,
    },
    /// The previous rotation's overlap has not ended.
    #[error(
        "the previous rotation's overlap lasts until {}: rotating now would refuse what its previous secret made \
         before then; rotate again after it",
        utc_date(*until_ms)
    )]
    OverlapRunning {
        /// When it ends.
        until_ms: UnixMillis,
    },
    /// Another rotation from the same secret was written first.
    #[error("another rotation was written first; nothing was written by this one")]
    Raced,
    /// The store failed (for `Uncertain`, the secrets were read again and
    /// the rotation was not found).
    #[error("the cluster's secret: {0}")]
    Store(StoreError),
}

/// `unix_ms` (ms since the Unix epoch) as an RFC 3339 date, UTC.
pub fn utc_date(unix_ms: UnixMillis) -> String {
    let timestamp = prost_types::Timestamp {
        seconds: unix_ms.div_euclid(1000),
        nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32,
    };
    timestamp.to_string()
}

/// The times of a rotation written at `now_ms` with `overlap`, if the
/// overlap is within bounds.
pub fn plan(now_ms: UnixMillis, overlap: Duration) -> Result<Rotation, RotateError> {
    if !(MIN_OVERLAP..=MAX_OVERLAP).contains(&overlap) {
        return Err(RotateError::Overlap { given: overlap });
    }
    Ok(Rotation {
        rotated_at_ms: now_ms,
        signs_until_ms: now_ms.saturating_add(millis(SIGNING_SWITCH_DELAY)),
        accepted_until_ms: now_ms.saturating_add(millis(overlap)),
    })
}

/// Rotates the cluster's secret in `store` to a random one, at `now_ms`,
/// with `overlap` (see the module docs).
pub async fn rotate(store: &dyn SecretStore, overlap: Duration, now_ms: UnixMillis) -> Result<Rotation, RotateError> {
    let rotation = plan(now_ms, overlap)?;
    // Creates the first secret if there is none: a rotation of it is harmless.
    let stored = store.cluster_secrets(&rand::random()).await.map_err(RotateError::Store)?;
    if let Some(previous) = stored.previous.as_ref().filter(|p| now_ms <= p.accepted_until_unix_ms) {
        return Err(RotateError::OverlapRunning { until_ms: previous.accepted_until_unix_ms });
    }
    let next: [u8; SECRET_BYTES] = rand::random();
    let written =
        store.rotate_cluster_secret(&stored.current, &next, rotation.signs_until_ms, rotation.accepted_until_ms).await;
    let after = match written {
        Ok(after) => after,
        Err(StoreError::Uncertain(message)) => {
            // Written or not: the secrets say.
            match store.cluster_secrets(&rand::random()).await {
                Ok(secrets) => Some(secrets),
                Err(_) => return Err(RotateError::Store(StoreError::Uncertain(message))),
            }
        }
        Err(error) => return Err(RotateError::Store(error)),
    };
    match after {
        Some(secrets) if secrets.current == next => Ok(rotation),
        _ => Err(RotateError::Raced),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SecretStore;
    use crate::store::embedded::EmbeddedStore;

    #[test]
    fn an_overlap_is_bounded_and_the_signing_switch_comes_first() {
        let now = 1_800_000_000_000;
        let planned = plan(now, Duration::from_secs(600)).unwrap();
        assert_eq!(planned.signs_until_ms, now + 30_000);
        assert_eq!(planned.accepted_until_ms, now + 600_000);
        assert!(plan(now, MIN_OVERLAP).is_ok() && plan(now, MAX_OVERLAP).is_ok());
        let short = plan(now, MIN_OVERLAP - Duration::from_millis(1)).unwrap_err();
        assert_eq!(short, RotateError::Overlap { given: Duration::from_millis(59_999) });
        let message = short.to_string();
        assert!(message.contains("--overlap") && message.contains("60s") && message.contains("604800s"), "{message}");
        assert!(plan(now, MAX_OVERLAP + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn dates_are_rfc_3339_in_utc() {
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_date(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        let running = RotateError::OverlapRunning { until_ms: 1_700_000_000_000 }.to_string();
        assert!(running.contains("until 2023-11-14T22:13:20Z"), "{running}");
    }

    #[tokio::test]
    async fn a_rotation_keeps_the_old_secret_as_previous_and_a_second_waits_for_the_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let first = store.cluster_secrets(&[1; 32]).await.unwrap();
        let now = 1_800_000_000_000;
        let rotation = rotate(&store, Duration::from_secs(120), now).await.unwrap();
        let after = store.cluster_secrets(&[9; 32]).await.unwrap();
        assert_ne!(after.current, first.current);
        let previous = after.previous.expect("the old secret is kept");
        assert_eq!(previous.secret, [1; 32]);
        assert_eq!(
            (previous.signs_until_unix_ms, previous.accepted_until_unix_ms),
            (rotation.signs_until_ms, rotation.accepted_until_ms)
        );
        let early = rotate(&store, Duration::from_secs(120), now + 120_000).await.unwrap_err();
        assert_eq!(early, RotateError::OverlapRunning { until_ms: now + 120_000 });
        assert_eq!(store.cluster_secrets(&[9; 32]).await.unwrap().current, after.current, "nothing written");
        rotate(&store, Duration::from_secs(120), now + 120_001).await.unwrap();
        let third = store.cluster_secrets(&[9; 32]).await.unwrap();
        assert_eq!(third.previous.unwrap().secret, after.current, "the previous is the one just replaced");
    }
}
