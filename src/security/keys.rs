//! Keys derived from the cluster's secrets, which the store keeps (one set
//! per keyspace or data directory, the same on every node): one key signs
//! lease tokens, the other proves that a request comes from a node. A tag is
//! the first 16 bytes of an HMAC-SHA-256, in hex, checked in constant time;
//! a key is never written anywhere, nor shown by `Debug`.
//!
//! A node proof names the RPC it is for and the second it was made, and is
//! good for that RPC, that partition and [`NODE_PROOF_VALIDITY_SECS`] either
//! side of that second only: one seen on the network cannot be replayed for
//! another call, nor after it has gone stale.
//!
//! Rotation (`fairway auth rotate`, the store's `rotate_cluster_secret`). The
//! keys hold the current secret's and, after a rotation, the previous
//! secret's. Invariants, for a time `now` every caller passes in (nothing
//! here reads a clock):
//! - tags and proofs are made with the previous secret while `now` is
//!   before its `signs_until`, with the current one from then on: a node
//!   that has not yet read the rotation (nodes read the secrets every
//!   [`SECRET_RELOAD_INTERVAL`]) still checks what the others make;
//! - a tag or proof is accepted if the current secret made it, or the
//!   previous one did and `now` is at or before its `accepted_until`; never
//!   after (a lease token signed before the rotation is refused from then
//!   on, as one from another cluster is);
//! - [`ClusterKeys::install`] replaces the set for every clone at once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secrets::{ClusterSecrets, SECRET_BYTES};

type HmacSha256 = Hmac<Sha256>;

/// The metadata entry of a forwarded request that proves a node sent it.
pub const NODE_PROOF: &str = "fairway-node-proof";

/// How far a node proof's second may be from the receiver's clock, either
/// way (network delay and the nodes' clock skew).
pub const NODE_PROOF_VALIDITY_SECS: i64 = 120;

/// How often a node reads the cluster's secrets again: a rotation reaches
/// every node that can read the store within this interval (plus the
/// store's replication delay).
pub const SECRET_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// How long after a rotation nodes keep signing with the previous secret:
/// long enough for every node to have read the new one (twice the reload
/// interval, for a read that failed once, and clock skew).
pub const SIGNING_SWITCH_DELAY: Duration = Duration::from_secs(30);

/// The bytes of a tag, before hex.
const TAG_BYTES: usize = 16;

/// One derived key, with the HMAC already keyed by it: a tag clones that
/// state instead of hashing the key again (two SHA-256 blocks of four).
#[derive(Clone)]
struct Key {
    bytes: [u8; 32],
    keyed: HmacSha256,
}

impl Key {
    fn new(bytes: [u8; 32]) -> Key {
        Key { bytes, keyed: HmacSha256::new_from_slice(&bytes).expect("HMAC takes keys of any length") }
    }

    /// The HMAC of the concatenation of `message`.
    fn mac(&self, message: &[&str]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        for part in message {
            mac.update(part.as_bytes());
        }
        mac
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Key {}

/// The keys derived from one secret.
#[derive(Clone, PartialEq, Eq)]
struct Derived {
    lease: Key,
    node: Key,
}

impl Derived {
    fn from_secret(secret: &[u8; SECRET_BYTES]) -> Derived {
        let derive = |purpose: &str| -> Key {
            let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
            mac.update(purpose.as_bytes());
            Key::new(mac.finalize().into_bytes().into())
        };
        Derived { lease: derive("fairway lease tokens v2"), node: derive("fairway node proofs v1") }
    }
}

/// A tag in lower-case hex, as text (`Deref` to `str`); made without an
/// allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Tag([u8; 2 * TAG_BYTES]);

impl std::ops::Deref for Tag {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex is ASCII")
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl std::fmt::Debug for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", &**self)
    }
}

/// The previous secret's keys and their times (ms since the Unix epoch).
#[derive(Clone, PartialEq, Eq)]
struct Previous {
    keys: Derived,
    signs_until_ms: i64,
    accepted_until_ms: i64,
}

#[derive(Clone, PartialEq, Eq)]
struct KeySet {
    current: Derived,
    previous: Option<Previous>,
}

impl KeySet {
    fn of(secrets: &ClusterSecrets) -> KeySet {
        KeySet {
            current: Derived::from_secret(&secrets.current),
            previous: secrets.previous.as_ref().map(|p| Previous {
                keys: Derived::from_secret(&p.secret),
                signs_until_ms: p.signs_until_unix_ms,
                accepted_until_ms: p.accepted_until_unix_ms,
            }),
        }
    }

    /// The keys to sign with at `now_ms`.
    fn signing(&self, now_ms: i64) -> &Derived {
        match &self.previous {
            Some(previous) if now_ms < previous.signs_until_ms => &previous.keys,
            _ => &self.current,
        }
    }

    /// The keys accepted at `now_ms`, the current first.
    fn accepted(&self, now_ms: i64) -> impl Iterator<Item = &Derived> {
        let previous = self.previous.as_ref().filter(|p| now_ms <= p.accepted_until_ms).map(|p| &p.keys);
        std::iter::once(&self.current).chain(previous)
    }
}

/// The keys of one cluster. Clones share one set: [`ClusterKeys::install`]
/// changes it for all of them.
#[derive(Clone)]
pub struct ClusterKeys {
    set: Arc<RwLock<KeySet>>,
}

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKeys(..)")
    }
}

impl ClusterKeys {
    /// The keys derived from `secret` (one HMAC of the secret per purpose),
    /// with no previous secret.
    pub fn from_secret(secret: &[u8; SECRET_BYTES]) -> Self {
        Self::from_secrets(&ClusterSecrets::first(*secret))
    }

    /// The keys derived from the current secret and, if any, the previous one.
    pub fn from_secrets(secrets: &ClusterSecrets) -> Self {
        ClusterKeys { set: Arc::new(RwLock::new(KeySet::of(secrets))) }
    }

    /// Keys from a random secret: for a process that shares no store with
    /// others (tests, tools).
    pub fn random() -> Self {
        Self::from_secret(&rand::random())
    }

    /// Replaces the keys, for every clone, with those of `secrets`; whether
    /// they changed.
    pub fn install(&self, secrets: &ClusterSecrets) -> bool {
        let next = KeySet::of(secrets);
        let mut set = self.set.write().unwrap_or_else(|p| p.into_inner());
        let changed = *set != next;
        *set = next;
        changed
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, KeySet> {
        self.set.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The tag of a lease token's fields (the concatenation of `fields`),
    /// made at `now_ms`.
    pub fn lease_tag(&self, fields: &[&str], now_ms: i64) -> Tag {
        tag(&self.read().signing(now_ms).lease, fields)
    }

    /// Whether `tag` is the tag of `fields` (their concatenation) under a
    /// key accepted at `now_ms`.
    pub fn lease_tag_matches(&self, fields: &[&str], tag: &str, now_ms: i64) -> bool {
        self.read().accepted(now_ms).any(|keys| matches(&keys.lease, fields, tag))
    }

    /// The proof a node sends at `unix_secs` with a request of `rpc` it
    /// forwards about `subject` (the partition it names, or nothing):
    /// `<rpc>/<unix_secs>/<tag>`.
    pub fn node_proof(&self, rpc: &str, subject: &str, unix_secs: i64) -> String {
        let set = self.read();
        let key = &set.signing(unix_secs.saturating_mul(1000)).node;
        let secs = unix_secs.to_string();
        format!("{rpc}/{secs}/{}", tag(key, &[rpc, "/", subject, "/", &secs]))
    }

    /// The RPC `proof` is a node's proof for, about `subject`, if it is one,
    /// was made within [`NODE_PROOF_VALIDITY_SECS`] of `now_unix_secs`, and
    /// under a key accepted then.
    pub fn node_proof_rpc<'p>(&self, subject: &str, proof: &'p str, now_unix_secs: i64) -> Option<&'p str> {
        let (rpc, rest) = proof.split_once('/')?;
        let (secs, tag) = rest.split_once('/')?;
        let made: i64 = secs.parse().ok()?;
        let fresh = made.abs_diff(now_unix_secs) <= NODE_PROOF_VALIDITY_SECS as u64;
        let message = [rpc, "/", subject, "/", secs];
        let set = self.read();
        let mut accepted = set.accepted(now_unix_secs.saturating_mul(1000));
        (fresh && accepted.any(|keys| matches(&keys.node, &message, tag))).then_some(rpc)
    }
}

/// The tag of the concatenation of `message` under `key`.
fn tag(key: &Key, message: &[&str]) -> Tag {
    let bytes = key.mac(message).finalize().into_bytes();
    let mut hex = [0; 2 * TAG_BYTES];
    base16ct::lower::encode(&bytes[..TAG_BYTES], &mut hex).expect("room for the hex of a tag");
    Tag(hex)
}

/// Whether `tag` is the tag of the concatenation of `message` under `key`
/// (compared in constant time).
fn matches(key: &Key, message: &[&str], tag: &str) -> bool {
    let mut buffer = [0; TAG_BYTES];
    match base16ct::lower::decode(tag, &mut buffer) {
        Ok(bytes) if bytes.len() == TAG_BYTES => key.mac(message).verify_truncated_left(bytes).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_checks_only_its_message_under_its_key_and_purpose() {
        let keys = ClusterKeys::from_secret(&[7; 32]);
        let tag = keys.lease_tag(&["v2/0/1/1/q"], 0);
        assert_eq!(tag.len(), 2 * TAG_BYTES);
        assert!(keys.lease_tag_matches(&["v2/0/1/1/q"], &tag, 0));
        assert!(!keys.lease_tag_matches(&["v2/0/2/1/q"], &tag, 0), "another message");
        assert!(!ClusterKeys::from_secret(&[8; 32]).lease_tag_matches(&["v2/0/1/1/q"], &tag, 0), "another cluster");
        assert!(keys.node_proof_rpc("", &format!("AddTask/0/{tag}"), 0).is_none(), "another purpose");
        assert!(!keys.lease_tag_matches(&["v2/0/1/1/q"], &tag.to_uppercase(), 0), "one spelling");
        assert!(!keys.lease_tag_matches(&["v2/0/1/1/q"], &tag[..30], 0), "a shorter tag");
        assert!(!keys.lease_tag_matches(&["v2/0/1/1/q"], "", 0), "no tag");
        assert!(!keys.lease_tag_matches(&["v2/0/1/1/q"], "zz", 0), "not hex");
        assert_eq!(format!("{keys:?}"), "ClusterKeys(..)", "Debug shows no key");
    }

    #[test]
    fn a_tag_is_of_the_concatenation_of_its_parts_wherever_they_split() {
        let keys = ClusterKeys::from_secret(&[7; 32]);
        let whole = keys.lease_tag(&["v2/0/1/1/q"], 0);
        assert_eq!(keys.lease_tag(&["v2/0/", "1/1/", "q"], 0), whole);
        assert_eq!(keys.lease_tag(&["", "v2/0/1/1/q", ""], 0), whole);
        assert!(keys.lease_tag_matches(&["v2/0/1/", "1/q"], &whole, 0));
        assert_ne!(keys.lease_tag(&["v2/0/1/1/q", "/"], 0), whole, "one byte more");
    }

    #[test]
    fn a_node_proof_holds_for_its_rpc_partition_and_time_only() {
        let keys = ClusterKeys::from_secret(&[7; 32]);
        let now = 1_800_000_000;
        let proof = keys.node_proof("AddTask", "3", now);
        assert_eq!(keys.node_proof_rpc("3", &proof, now), Some("AddTask"));
        assert_eq!(keys.node_proof_rpc("3", &proof, now + NODE_PROOF_VALIDITY_SECS), Some("AddTask"));
        assert_eq!(keys.node_proof_rpc("3", &proof, now - NODE_PROOF_VALIDITY_SECS), Some("AddTask"));
        assert_eq!(keys.node_proof_rpc("3", &proof, now + NODE_PROOF_VALIDITY_SECS + 1), None, "stale");
        assert_eq!(keys.node_proof_rpc("3", &proof, now - NODE_PROOF_VALIDITY_SECS - 1), None, "from the future");
        assert_eq!(keys.node_proof_rpc("4", &proof, now), None, "another partition");
        let renamed = proof.replacen("AddTask", "MoveQueue", 1);
        assert_eq!(keys.node_proof_rpc("3", &renamed, now), None, "another RPC");
        let redated = proof.replacen(&now.to_string(), &(now + 1).to_string(), 1);
        assert_eq!(keys.node_proof_rpc("3", &redated, now), None, "another second");
        assert_eq!(ClusterKeys::from_secret(&[8; 32]).node_proof_rpc("3", &proof, now), None, "another cluster");
        for garbage in ["", "AddTask", "AddTask/x/00", "AddTask//"] {
            assert_eq!(keys.node_proof_rpc("3", garbage, now), None, "{garbage:?}");
        }
    }
    fn rotated(signs_until_ms: i64, accepted_until_ms: i64) -> ClusterKeys {
        ClusterKeys::from_secrets(&ClusterSecrets {
            current: [2; 32],
            previous: Some(crate::security::PreviousSecret {
                secret: [1; 32],
                signs_until_unix_ms: signs_until_ms,
                accepted_until_unix_ms: accepted_until_ms,
            }),
        })
    }

    #[test]
    fn after_a_rotation_the_previous_secret_signs_until_its_switch_and_is_accepted_until_its_end() {
        let (old, new) = (ClusterKeys::from_secret(&[1; 32]), ClusterKeys::from_secret(&[2; 32]));
        let (switch, end) = (1_000_000, 2_000_000);
        let keys = rotated(switch, end);
        let fields: &[&str] = &["v2/0/1/1/q"];
        assert_eq!(keys.lease_tag(fields, switch - 1), old.lease_tag(fields, 0), "before the switch: the old key");
        assert_eq!(keys.lease_tag(fields, switch), new.lease_tag(fields, 0), "from the switch: the new key");
        let old_tag = old.lease_tag(fields, 0);
        assert!(keys.lease_tag_matches(fields, &old_tag, end), "the old tag, up to the end of the overlap");
        assert!(!keys.lease_tag_matches(fields, &old_tag, end + 1), "and not after");
        let new_tag = new.lease_tag(fields, 0);
        assert!(keys.lease_tag_matches(fields, &new_tag, 0), "the new tag, even before the switch");
        assert!(keys.lease_tag_matches(fields, &new_tag, i64::MAX), "and for ever");
        assert!(!keys.lease_tag_matches(fields, &ClusterKeys::from_secret(&[3; 32]).lease_tag(fields, 0), 0));

        let secs = end / 1000;
        let old_proof = old.node_proof("AddTask", "3", secs);
        assert_eq!(keys.node_proof_rpc("3", &old_proof, secs), Some("AddTask"), "an old proof at the end");
        let late = old.node_proof("AddTask", "3", secs + 1);
        assert_eq!(keys.node_proof_rpc("3", &late, secs + 1), None, "an old proof after the end");
        assert_eq!(
            keys.node_proof("AddTask", "3", switch / 1000 - 1),
            old.node_proof("AddTask", "3", switch / 1000 - 1)
        );
        assert_eq!(keys.node_proof("AddTask", "3", switch / 1000), new.node_proof("AddTask", "3", switch / 1000));
        assert_eq!(
            old.node_proof_rpc("3", &keys.node_proof("AddTask", "3", secs), secs),
            None,
            "old keys refuse new proofs"
        );
    }

    #[test]
    fn installing_secrets_changes_every_clone_at_once() {
        let keys = ClusterKeys::from_secret(&[1; 32]);
        let clone = keys.clone();
        let fields: &[&str] = &["v2/0/1/1/q"];
        let old_tag = keys.lease_tag(fields, 0);
        assert!(!keys.install(&ClusterSecrets::first([1; 32])), "the same secrets: no change");
        assert!(keys.install(&ClusterSecrets::first([2; 32])), "a rotation that forgot the previous one");
        assert!(!clone.lease_tag_matches(fields, &old_tag, 0), "the clone refuses the old tag too");
        let overlap =
            crate::security::PreviousSecret { secret: [1; 32], signs_until_unix_ms: 10, accepted_until_unix_ms: 20 };
        assert!(clone.install(&ClusterSecrets { current: [2; 32], previous: Some(overlap) }));
        assert!(keys.lease_tag_matches(fields, &old_tag, 20), "within the overlap, on the first");
        assert!(!keys.lease_tag_matches(fields, &old_tag, 21));
    }
}
