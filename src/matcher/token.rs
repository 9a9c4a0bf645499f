//! The lease token a worker holds: which delivery of which task it is, and
//! a tag only the cluster that made it can make
//! (`v2/<partition>/<lease id>/<attempt>/<tag>/<queue>`). A token with any
//! part changed, or from another cluster, is refused with the same error.
//!
//! Invariant: a token verifies only if this cluster's key tagged exactly
//! these parts; it names a delivery, so a report on an earlier attempt of
//! the same lease is refused as stale by the partition.

use crate::model::{PartitionId, QueueName, validate};
use crate::security::ClusterKeys;

/// Identifies one delivery of a task. Opaque to workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseToken {
    /// The queue of the task.
    pub queue: QueueName,
    /// The partition of the queue the task was dispatched from.
    pub partition: u32,
    /// The lease's id: the level id the task was dispatched from.
    pub lease_id: i64,
    /// The attempt this delivery is (1 for the first).
    pub attempt: u32,
}

/// Why a token was refused: the same whatever was wrong with it.
const NOT_A_TOKEN: &str = "is not a lease token given by PollTask";

impl LeaseToken {
    /// The partition of the queue that holds the lease.
    pub fn partition_id(&self) -> PartitionId {
        PartitionId { queue: self.queue.clone(), partition: self.partition }
    }

    /// What the tag covers: every field.
    fn fields(&self) -> String {
        format!("v2/{}/{}/{}/{}", self.partition, self.lease_id, self.attempt, self.queue)
    }

    /// The token as workers get it, tagged with `keys` as they sign at `now_ms`.
    pub fn sign(&self, keys: &ClusterKeys, now_ms: i64) -> String {
        let tag = keys.lease_tag(&self.fields(), now_ms);
        format!("v2/{}/{}/{}/{tag}/{}", self.partition, self.lease_id, self.attempt, self.queue)
    }

    /// The token `text` stands for, if `keys` made it with a key they
    /// accept at `now_ms`; [`NOT_A_TOKEN`] if not.
    pub fn verify(text: &str, keys: &ClusterKeys, now_ms: i64) -> Result<LeaseToken, &'static str> {
        let mut parts = text.splitn(6, '/');
        if parts.next() != Some("v2") {
            return Err(NOT_A_TOKEN);
        }
        let mut next = || parts.next().ok_or(NOT_A_TOKEN);
        let partition = next()?.parse().map_err(|_| NOT_A_TOKEN)?;
        let lease_id = next()?.parse().map_err(|_| NOT_A_TOKEN)?;
        let attempt = next()?.parse().map_err(|_| NOT_A_TOKEN)?;
        let tag = next()?;
        let queue = validate::queue_name("lease_token", next()?).map_err(|_| NOT_A_TOKEN)?;
        let token = LeaseToken { queue, partition, lease_id, attempt };
        // The one spelling a signed token has: no "+1" or "01" for 1. The
        // fields spell each number the one way, so a token of the same
        // numbers and tag is as long only if it spells them that way too.
        let fields = token.fields();
        let canonical = text.len() == fields.len() + 1 + tag.len();
        if canonical && keys.lease_tag_matches(&fields, tag, now_ms) { Ok(token) } else { Err(NOT_A_TOKEN) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> LeaseToken {
        LeaseToken {
            queue: validate::queue_name("q", "visits.git").unwrap(),
            partition: 3,
            lease_id: 1 << 40,
            attempt: 2,
        }
    }

    #[test]
    fn a_signed_token_round_trips() {
        let keys = ClusterKeys::random();
        assert_eq!(LeaseToken::verify(&token().sign(&keys, 0), &keys, 0), Ok(token()));
    }

    #[test]
    fn a_token_edited_anywhere_or_made_elsewhere_is_refused_alike() {
        let keys = ClusterKeys::random();
        let signed = token().sign(&keys, 0);
        let parts: Vec<&str> = signed.splitn(6, '/').collect();
        let mut edits = vec![
            String::new(),
            "v1/3/1099511627776/2/visits.git".to_owned(),
            token().sign(&ClusterKeys::random(), 0),
            format!("{signed}x"),
            signed[..signed.len() - 1].to_owned(),
        ];
        let replacements = ["v3", "4", "1099511627777", "1", &"0".repeat(32), "visits.hg"];
        for (i, replacement) in replacements.iter().enumerate() {
            let mut edited = parts.clone();
            edited[i] = replacement;
            edits.push(edited.join("/"));
        }
        // The same number spelled otherwise, under a tag of the original.
        edits.push(signed.replacen("/3/", "/03/", 1));
        edits.push(signed.replacen("/3/", "/+3/", 1));
        for edit in edits {
            assert_eq!(LeaseToken::verify(&edit, &keys, 0), Err(NOT_A_TOKEN), "{edit:?}");
        }
    }
}
