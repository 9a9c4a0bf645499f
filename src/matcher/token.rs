use std::fmt;
use std::str::FromStr;

use crate::model::{PartitionId, QueueName, validate};

/// Identifies one delivery of a task: `v1/<partition>/<lease id>/<attempt>/<queue>`,
/// where the lease id is the level id the task was dispatched from. Opaque to workers.
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

impl LeaseToken {
    /// The partition of the queue that holds the lease.
    pub fn partition_id(&self) -> PartitionId {
        PartitionId { queue: self.queue.clone(), partition: self.partition }
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v1/{}/{}/{}/{}", self.partition, self.lease_id, self.attempt, self.queue)
    }
}

impl FromStr for LeaseToken {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || "is not a lease token given by PollTask".to_owned();
        let mut parts = s.splitn(5, '/');
        if parts.next() != Some("v1") {
            return Err(bad());
        }
        let mut number = || parts.next().ok_or_else(bad);
        let partition = number()?.parse().map_err(|_| bad())?;
        let lease_id = number()?.parse().map_err(|_| bad())?;
        let attempt = number()?.parse().map_err(|_| bad())?;
        let queue = parts.next().ok_or_else(bad)?;
        let queue = validate::queue_name("lease_token", queue).map_err(|_| bad())?;
        Ok(LeaseToken { queue, partition, lease_id, attempt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let token = LeaseToken {
            queue: validate::queue_name("q", "visits.git").unwrap(),
            partition: 3,
            lease_id: 1 << 40,
            attempt: 2,
        };
        assert_eq!(token.to_string().parse::<LeaseToken>().unwrap(), token);
        assert!("v2/1/2/3/q".parse::<LeaseToken>().is_err());
        assert!("v1/x/2/3/q".parse::<LeaseToken>().is_err());
        assert!("".parse::<LeaseToken>().is_err());
    }
}
