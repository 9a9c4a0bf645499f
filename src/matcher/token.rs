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

    /// The token as workers get it, tagged with `keys` as they sign at
    /// `now_ms`. The tag covers every field: it is the tag of the token
    /// with the tag and its `/` taken out (`v2/<partition>/<lease
    /// id>/<attempt>/<queue>`).
    pub fn sign(&self, keys: &ClusterKeys, now_ms: i64) -> String {
        use std::fmt::Write;
        // The longest numbers and the tag fit: no reallocation.
        let mut token = String::with_capacity(80 + self.queue.as_str().len());
        write!(token, "v2/{}/{}/{}/", self.partition, self.lease_id, self.attempt).expect("a String takes any text");
        let tag = keys.lease_tag(&[&token, self.queue.as_str()], now_ms);
        token.push_str(&tag);
        token.push('/');
        token.push_str(self.queue.as_str());
        token
    }

    /// The token `text` stands for, if `keys` made it with a key they
    /// accept at `now_ms`; [`NOT_A_TOKEN`] if not.
    ///
    /// The tag is checked against the text itself, so only the one
    /// spelling the signer wrote verifies: no "+1" or "01" for 1.
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
        let queue_text = next()?;
        // `v2/<partition>/<lease id>/<attempt>/`: what comes before the tag.
        let before_tag = &text[..text.len() - queue_text.len() - 1 - tag.len()];
        if !keys.lease_tag_matches(&[before_tag, queue_text], tag, now_ms) {
            return Err(NOT_A_TOKEN);
        }
        let queue = validate::queue_name("lease_token", queue_text).map_err(|_| NOT_A_TOKEN)?;
        Ok(LeaseToken { queue, partition, lease_id, attempt })
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
    fn the_spelling_of_a_token_is_kept_so_that_tokens_held_across_an_upgrade_verify() {
        // The tag is HMAC-SHA-256 of `v2/3/1099511627776/2/visits.git` under
        // the lease key derived from the secret, its first 16 bytes in hex
        // (computed apart from this code, with Python's hmac module).
        let keys = ClusterKeys::from_secret(&[7; 32]);
        let spelled = "v2/3/1099511627776/2/fd23d46bdab13cafdf2744b4c450ede1/visits.git";
        assert_eq!(token().sign(&keys, 0), spelled);
        assert_eq!(LeaseToken::verify(spelled, &keys, 0), Ok(token()));
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
