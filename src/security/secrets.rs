//! The cluster's secret as the store keeps it: the current one, and the one
//! a rotation replaced with the times until which it is signed with and
//! accepted. Nodes derive their keys from these ([`super::ClusterKeys`]);
//! the store reads and writes them, and imports these types from here.
//!
//! Invariant: a secret is never shown: the `Debug` of these records prints
//! the times only.

/// The bytes of the cluster's secret.
pub const SECRET_BYTES: usize = 32;

/// The cluster's secrets as stored: the current one, and the one before the
/// last rotation while its overlap lasts (the store's `rotate_cluster_secret`
/// writes a rotation).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecrets {
    /// The secret nodes sign with (once `previous.signs_until_unix_ms` has passed).
    pub current: [u8; SECRET_BYTES],
    /// The secret before the last rotation, if there was one. Kept after
    /// its overlap has ended (a reader ignores it then): the next rotation
    /// replaces it.
    pub previous: Option<PreviousSecret>,
}

/// The secret a rotation replaced, and until when it counts.
#[derive(Clone, PartialEq, Eq)]
pub struct PreviousSecret {
    /// The replaced secret.
    pub secret: [u8; SECRET_BYTES],
    /// Until this time (ms since the Unix epoch, exclusive) nodes still sign
    /// with the previous secret: by then every node has read the new one, so
    /// no node signs with a secret another does not know yet.
    pub signs_until_unix_ms: i64,
    /// Until this time (ms since the Unix epoch, inclusive) tags and proofs
    /// made with the previous secret are accepted; never before `signs_until_unix_ms`.
    pub accepted_until_unix_ms: i64,
}

impl ClusterSecrets {
    /// A secret that was never rotated.
    pub fn first(current: [u8; SECRET_BYTES]) -> ClusterSecrets {
        ClusterSecrets { current, previous: None }
    }
}

// Secrets are never shown, whatever prints them.
impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous = self.previous.as_ref().map(|p| (p.signs_until_unix_ms, p.accepted_until_unix_ms));
        f.debug_struct("ClusterSecrets").field("previous_until", &previous).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PreviousSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviousSecret")
            .field("signs_until_unix_ms", &self.signs_until_unix_ms)
            .field("accepted_until_unix_ms", &self.accepted_until_unix_ms)
            .finish_non_exhaustive()
    }
}
