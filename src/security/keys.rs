//! Keys derived from the cluster's secret, which the store keeps (one per
//! keyspace or data directory, the same on every node): one signs lease
//! tokens, the other proves that a request comes from a node. A tag is the
//! first 16 bytes of an HMAC-SHA-256, in hex, checked in constant time; a
//! key is never written anywhere, nor shown by `Debug`.
//!
//! A node proof names the RPC it is for and the second it was made, and is
//! good for that RPC, that partition and [`NODE_PROOF_VALIDITY`] either side
//! of that second only: one seen on the network cannot be replayed for
//! another call, nor after it has gone stale.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::store::SECRET_BYTES;

type HmacSha256 = Hmac<Sha256>;

/// The metadata entry of a forwarded request that proves a node sent it.
pub const NODE_PROOF: &str = "fairway-node-proof";

/// How far a node proof's second may be from the receiver's clock, either
/// way (network delay and the nodes' clock skew).
pub const NODE_PROOF_VALIDITY_SECS: i64 = 120;

/// The bytes of a tag, before hex.
const TAG_BYTES: usize = 16;

/// The keys of one cluster.
#[derive(Clone)]
pub struct ClusterKeys {
    lease: [u8; 32],
    node: [u8; 32],
}

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKeys(..)")
    }
}

impl ClusterKeys {
    /// The keys derived from `secret` (one HMAC of the secret per purpose).
    pub fn from_secret(secret: &[u8; SECRET_BYTES]) -> Self {
        let derive = |purpose: &str| -> [u8; 32] {
            let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
            mac.update(purpose.as_bytes());
            mac.finalize().into_bytes().into()
        };
        ClusterKeys { lease: derive("fairway lease tokens v2"), node: derive("fairway node proofs v1") }
    }

    /// Keys from a random secret: for a process that shares no store with
    /// others (tests, tools).
    pub fn random() -> Self {
        Self::from_secret(&rand::random())
    }

    /// The tag of a lease token's `fields`.
    pub fn lease_tag(&self, fields: &str) -> String {
        tag(&self.lease, fields)
    }

    /// Whether `tag` is the tag of `fields`.
    pub fn lease_tag_matches(&self, fields: &str, tag: &str) -> bool {
        matches(&self.lease, fields, tag)
    }

    /// The proof a node sends at `unix_secs` with a request of `rpc` it
    /// forwards about `subject` (the partition it names, or nothing):
    /// `<rpc>/<unix_secs>/<tag>`.
    pub fn node_proof(&self, rpc: &str, subject: &str, unix_secs: i64) -> String {
        format!("{rpc}/{unix_secs}/{}", tag(&self.node, &format!("{rpc}/{subject}/{unix_secs}")))
    }

    /// The RPC `proof` is a node's proof for, about `subject`, if it is one
    /// and was made within [`NODE_PROOF_VALIDITY_SECS`] of `now_unix_secs`.
    pub fn node_proof_rpc<'p>(&self, subject: &str, proof: &'p str, now_unix_secs: i64) -> Option<&'p str> {
        let (rpc, rest) = proof.split_once('/')?;
        let (secs, tag) = rest.split_once('/')?;
        let made: i64 = secs.parse().ok()?;
        let fresh = made.abs_diff(now_unix_secs) <= NODE_PROOF_VALIDITY_SECS as u64;
        (fresh && matches(&self.node, &format!("{rpc}/{subject}/{secs}"), tag)).then_some(rpc)
    }
}

fn tag(key: &[u8; 32], message: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message.as_bytes());
    let bytes = mac.finalize().into_bytes();
    super::hex::encode(&bytes[..TAG_BYTES])
}

fn matches(key: &[u8; 32], message: &str, tag: &str) -> bool {
    let Some(bytes) = super::hex::decode(tag) else { return false };
    if bytes.len() != TAG_BYTES {
        return false;
    }
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message.as_bytes());
    mac.verify_truncated_left(&bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_checks_only_its_message_under_its_key_and_purpose() {
        let keys = ClusterKeys::from_secret(&[7; 32]);
        let tag = keys.lease_tag("v2/0/1/1/q");
        assert_eq!(tag.len(), 2 * TAG_BYTES);
        assert!(keys.lease_tag_matches("v2/0/1/1/q", &tag));
        assert!(!keys.lease_tag_matches("v2/0/2/1/q", &tag), "another message");
        assert!(!ClusterKeys::from_secret(&[8; 32]).lease_tag_matches("v2/0/1/1/q", &tag), "another cluster");
        assert!(keys.node_proof_rpc("", &format!("AddTask/0/{tag}"), 0).is_none(), "another purpose");
        assert!(!keys.lease_tag_matches("v2/0/1/1/q", &tag.to_uppercase()), "one spelling");
        assert!(!keys.lease_tag_matches("v2/0/1/1/q", &tag[..30]), "a shorter tag");
        assert!(!keys.lease_tag_matches("v2/0/1/1/q", ""), "no tag");
        assert!(!keys.lease_tag_matches("v2/0/1/1/q", "zz"), "not hex");
        assert_eq!(format!("{keys:?}"), "ClusterKeys(..)", "Debug shows no key");
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
}
