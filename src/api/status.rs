//! The one place where errors become gRPC status codes.
//!
//! | error | code | applied? |
//! |---|---|---|
//! | invalid input | `INVALID_ARGUMENT` | no |
//! | store unavailable, partition moved, shutting down | `UNAVAILABLE` | no: safe to retry |
//! | outcome unknown (e.g. write timeout) | `UNKNOWN`, metadata `fairway-maybe-applied: true` | maybe |
//! | forwarded to the owner, whom this node could not reach | `UNAVAILABLE` | no: safe to retry |
//! | forwarded to the owner, cut off after the request left | `UNKNOWN`, metadata `fairway-maybe-applied: true` | maybe |
//! | forwarded to the owner, no answer within `cluster.forward_timeout` | `UNKNOWN`, metadata `fairway-maybe-applied: true` | maybe |
//! | store refused a write this server made (too large, bad value): not the caller's fault | `INTERNAL` | no |
//! | corrupt stored data | `DATA_LOSS` | no |
//! | lease token no longer holds the lease | `FAILED_PRECONDITION` | no |
//! | a completion or failure of the same lease is being written | `ABORTED` | no: retry |
//! | the queue was never created | `NOT_FOUND` | no |
//! | a queue's home named where no node is live, or moved while an earlier move is not done | `FAILED_PRECONDITION` | no |
//! | a partition homed in another region (a take refused) | `UNAVAILABLE` | no: safe to retry |
//! | creating a queue would pass `matcher.max_queues` or `matcher.max_partitions` | `RESOURCE_EXHAUSTED` | no |
//! | a poll past `matcher.max_parked_polls` or `limits.max_polls_per_connection` | `RESOURCE_EXHAUSTED` | no |
//! | no credentials, or credentials no principal has | `UNAUTHENTICATED` | no |
//! | the caller lacks the permission, or adds under another tenant's fairness key | `PERMISSION_DENIED` | no |

use std::time::Duration;

use tonic::{Code, Status};

use crate::core::engine::LeaseError;
use crate::matcher::MatchError;
use crate::model::ValidationError;
use crate::partition::PartitionError;
use crate::security::{AuthError, Denied};
use crate::store::StoreError;
use crate::visits::VisitQueueError;

/// Metadata key set on errors whose write may have happened.
pub const MAYBE_APPLIED: &str = "fairway-maybe-applied";

/// `INVALID_ARGUMENT`, with the field at fault and its rule.
pub fn invalid(error: ValidationError) -> Status {
    Status::invalid_argument(error.to_string())
}

/// `UNAUTHENTICATED`, saying what was wrong with the credentials.
pub fn unauthenticated(error: AuthError) -> Status {
    Status::unauthenticated(error.to_string())
}

/// `PERMISSION_DENIED`, naming the permission or the fairness key refused.
pub fn denied(denied: Denied) -> Status {
    Status::permission_denied(denied.to_string())
}

/// The status of a matcher's error, as the table of [`crate::api::status`] maps it.
pub fn from_match(error: MatchError) -> Status {
    match error {
        MatchError::Partition(PartitionError::Store(store)) => from_store(store),
        MatchError::Partition(other @ (PartitionError::Lost(_) | PartitionError::Closed(_))) => {
            Status::unavailable(format!("{other}; nothing was written, retry"))
        }
        MatchError::ShuttingDown => {
            Status::unavailable("the server is shutting down; nothing was written, retry elsewhere")
        }
        MatchError::NoPartition(_) => Status::unavailable(format!("{error}; nothing was written, retry")),
        MatchError::Lease(LeaseError::Stale) => Status::failed_precondition(format!("lease_token: {error}")),
        MatchError::Lease(LeaseError::Busy) => Status::aborted(format!("lease_token: {error}")),
        MatchError::UnknownQueue(_) => Status::not_found(error.to_string()),
        MatchError::MoveInProgress { .. } => Status::failed_precondition(error.to_string()),
        MatchError::QueueLimit { .. } | MatchError::TooManyPolls { .. } => {
            Status::resource_exhausted(error.to_string())
        }
    }
}

/// The status of a store's error, as the table of [`crate::api::status`] maps
/// it; an uncertain outcome carries [`MAYBE_APPLIED`].
pub fn from_store(error: StoreError) -> Status {
    match &error {
        StoreError::Fenced { .. } | StoreError::Unavailable(_) | StoreError::HomedElsewhere { .. } => {
            Status::unavailable(format!("{error}; nothing was written, retry"))
        }
        StoreError::Uncertain(_) => {
            let mut status = Status::new(Code::Unknown, format!("{error}; the write may have been applied"));
            status.metadata_mut().insert(MAYBE_APPLIED, "true".parse().expect("ascii"));
            status
        }
        StoreError::Invalid(_) => Status::internal(format!(
            "{error}; nothing was written (the server's writes must fit the store: report it)"
        )),
        StoreError::Corrupt(_) => Status::data_loss(error.to_string()),
    }
}

/// An add of a visit as the visit scheduler reads it: refused or lost on
/// the way, whatever the code (the round leaves the origin unscheduled, and
/// its dedup id absorbs the next try if the add did land).
pub fn to_visit_queue(status: &Status) -> VisitQueueError {
    VisitQueueError::Unavailable(status.message().to_owned())
}

/// The status of a request forwarded to `owner`, as the caller must read
/// it. A status the owner sent is passed on as it is. A failure in
/// transport is told apart by what is known: the owner could not be reached
/// (nothing was sent) is `UNAVAILABLE`; anything else (the connection broke
/// after the request left) may have been applied by the owner.
pub fn from_forwarded(status: Status, owner: &str) -> Status {
    use std::error::Error;
    let Some(transport) = status.source() else { return status };
    let mut chain = Some(transport);
    let mut not_sent = false;
    while let Some(error) = chain {
        let text = error.to_string();
        not_sent |=
            ["tcp connect error", "error trying to connect", "connect timeout"].iter().any(|t| text.contains(t));
        chain = error.source();
    }
    if not_sent {
        return Status::unavailable(format!("could not reach {owner}, the owner: nothing was written, retry"));
    }
    may_have_applied(format!("the request to {owner}, the owner, failed after it was sent ({status})"))
}

/// A request forwarded to `owner` that got no answer within `deadline`
/// (`cluster.forward_timeout` beyond its wait): the owner may be paused or
/// cut off, and may yet apply it.
pub fn no_answer(owner: &str, deadline: Duration) -> Status {
    may_have_applied(format!(
        "the request to {owner}, the owner, got no answer within {deadline:?} (cluster.forward_timeout beyond the \
         request's wait)"
    ))
}

/// `UNKNOWN`, with [`MAYBE_APPLIED`], for a forwarded request whose fate
/// `what` tells.
fn may_have_applied(what: String) -> Status {
    let mut maybe = Status::new(Code::Unknown, format!("{what}: it may have been applied"));
    maybe.metadata_mut().insert(MAYBE_APPLIED, "true".parse().expect("ascii"));
    maybe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_ness_is_visible_in_the_code() {
        assert_eq!(from_store(StoreError::Unavailable("x".into())).code(), Code::Unavailable);
        let uncertain = from_store(StoreError::Uncertain("timeout".into()));
        assert_eq!(uncertain.code(), Code::Unknown);
        assert_eq!(uncertain.metadata().get(MAYBE_APPLIED).unwrap(), "true");
        assert_eq!(from_match(MatchError::ShuttingDown).code(), Code::Unavailable);
        assert_eq!(from_match(MatchError::Partition(PartitionError::Lost("q/0".into()))).code(), Code::Unavailable);
        assert_eq!(from_match(MatchError::Lease(LeaseError::Stale)).code(), Code::FailedPrecondition);
        let refused = from_store(StoreError::Invalid("Request is too big".into()));
        assert_eq!(
            refused.code(),
            Code::Internal,
            "a store's refusal of our write is not the caller's invalid argument"
        );
    }
}
