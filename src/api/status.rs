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
//! | lease token no longer holds the lease, or its task was cancelled | `FAILED_PRECONDITION` | no |
//! | a completion or failure of the same lease is being written | `ABORTED` | no: retry |
//! | the queue was never created | `NOT_FOUND` | no |
//! | a queue's home named where no node is live, or moved while an earlier move is not done | `FAILED_PRECONDITION` | no |
//! | a partition homed in another region (a take refused) | `UNAVAILABLE` | no: safe to retry |
//! | creating a queue would pass `matcher.max_queues` or `matcher.max_partitions` | `RESOURCE_EXHAUSTED` | no |
//! | a poll past `matcher.max_parked_polls` or `limits.max_polls_per_connection` | `RESOURCE_EXHAUSTED` | no |
//! | a cancel while 1,000 cancelled tasks of the partition wait to be reached | `RESOURCE_EXHAUSTED` | no |
//! | no credentials, or credentials no principal has | `UNAUTHENTICATED` | no |
//! | the caller lacks the permission, or adds under another tenant's fairness key | `PERMISSION_DENIED` | no |
//! | routing metadata without a node's valid proof, or a node's proof for another RPC | `PERMISSION_DENIED` | no |
//! | request bytes that do not decode, routing metadata naming no partition | `INVALID_ARGUMENT` | no |
//! | a forwarded request to a partition of an earlier generation (after a forced failover) | `FAILED_PRECONDITION` | no |
//! | a partition changing owner, a queue homed where no node is live | `UNAVAILABLE` | no: safe to retry |
//! | the visit queue could not be reached during a scheduling round | `UNAVAILABLE` | no: safe to retry |
//! | no schedule has the id / the id is taken | `NOT_FOUND` / `ALREADY_EXISTS` | no |
//! | a schedule shard past `schedules.max_schedules_per_shard` | `RESOURCE_EXHAUSTED` | no |
//! | a schedule record that kept changing under concurrent writers | `ABORTED` | no: retry |
//! | a peer's address this node cannot dial, a request that skipped the gate | `INTERNAL` | no |
//!
//! Every `Status` the server sends is built here (a status passed on from
//! the owner of a forwarded request excepted, see [`from_forwarded`]): the
//! other modules name the failure with a function of this one, or return
//! their own error for it to map.

use std::time::Duration;

use tonic::{Code, Status};

use crate::cluster::{FORWARDED, FORWARDED_PARTITION, PeerError};
use crate::core::engine::LeaseError;
use crate::matcher::MatchError;
use crate::model::{QueueName, ValidationError};
use crate::partition::PartitionError;
use crate::schedules::ScheduleError;
use crate::security::{AuthError, Denied, NODE_PROOF, NODE_PROOF_VALIDITY_SECS};
use crate::store::StoreError;
use crate::visits::{SchedulerError, VisitQueueError};

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

/// `UNAUTHENTICATED`: an `authorization` value that is not `Bearer <token>`.
pub fn not_bearer() -> Status {
    Status::unauthenticated("metadata authorization must be `Bearer <API key or JWT>`")
}

/// `PERMISSION_DENIED`: routing metadata on a request without a node's
/// valid, fresh proof.
pub fn no_node_proof() -> Status {
    Status::permission_denied(format!(
        "{FORWARDED_PARTITION} and {FORWARDED} are for Fairway nodes: this request has no valid {NODE_PROOF} \
         (a node's proof is good for its RPC and partition, {NODE_PROOF_VALIDITY_SECS} s either side of the \
         second it was made: keep the nodes' clocks in step)"
    ))
}

/// `INVALID_ARGUMENT`: routing metadata naming no partition number.
pub fn bad_forwarded_partition() -> Status {
    Status::invalid_argument(format!("{FORWARDED_PARTITION} must be a partition number"))
}

/// `PERMISSION_DENIED`: a node's proof for `proven_rpc` on a request for
/// `rpc`, or for an RPC nodes do not forward.
pub fn node_proof_not_for(proven_rpc: &str, rpc: &str) -> Status {
    Status::permission_denied(format!(
        "a node's proof for {proven_rpc} does not let in {rpc}: nodes forward only adds, polls, lease calls and \
         redrives"
    ))
}

/// `PERMISSION_DENIED`: a task outside the bounds of the tenant-bound grant
/// of `caller` (its name), with the `bound` it broke.
pub fn out_of_bounds(caller: &str, bound: impl std::fmt::Display) -> Status {
    Status::permission_denied(format!("{caller:?}: {bound}"))
}

/// `INTERNAL`: a request reached a handler without passing the gate.
pub fn not_gated() -> Status {
    Status::internal("the request did not pass the gate")
}

/// `INVALID_ARGUMENT`: request bytes that are not a valid `message` (the
/// message type's name).
pub fn undecodable(message: &str, error: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("the request is not a valid {message}: {error}"))
}

/// `RESOURCE_EXHAUSTED`: a poll on a connection that has `limit` polls in
/// progress (`limits.max_polls_per_connection`).
pub fn too_many_connection_polls(limit: usize) -> Status {
    Status::resource_exhausted(format!(
        "this connection has {limit} polls in progress (limits.max_polls_per_connection); \
         finish some, or poll over another connection"
    ))
}

/// `FAILED_PRECONDITION`: the request's `field` names `region`, where no
/// node is live; `live` are the regions that have a live node.
pub fn no_live_region(field: &str, region: &str, live: &[String]) -> Status {
    let live: Vec<&str> = live.iter().map(String::as_str).filter(|r| !r.is_empty()).collect();
    Status::failed_precondition(format!(
        "{field}: no live node runs in region {region:?} (live regions: {}); nothing was changed",
        if live.is_empty() { "none named".to_owned() } else { live.join(", ") }
    ))
}

/// `FAILED_PRECONDITION`: a forwarded request to `queue`'s `partition`,
/// which is not of the queue's current generation.
pub fn not_current_generation(queue: &QueueName, partition: u32) -> Status {
    Status::failed_precondition(format!(
        "partition {queue}/{partition} is not of the queue's current generation (a forced failover replaced \
         it); its tasks are delivered again from the current one"
    ))
}

/// `UNAVAILABLE`: `queue`'s `partition` is changing owner.
pub fn changing_owner(queue: &QueueName, partition: u32) -> Status {
    Status::unavailable(format!("partition {queue}/{partition} is changing owner; nothing was written, retry"))
}

/// `UNAVAILABLE`: none of `queue`'s partitions may be owned now, for its
/// `home` region has no live node.
pub fn no_live_home(queue: &QueueName, home: &str) -> Status {
    Status::unavailable(format!(
        "queue {queue} is homed in region {home:?}, where no node is live; nothing was written or taken \
         (docs/operations.md, \"Regions\")"
    ))
}

/// The status of a scheduling round's error: the store's as
/// [`from_store`] maps it; a visit queue out of reach is `UNAVAILABLE`.
pub fn from_scheduler(error: SchedulerError) -> Status {
    match error {
        SchedulerError::Store(e) => from_store(e),
        SchedulerError::Queue(e) => Status::unavailable(format!("{e}; retry")),
    }
}

/// The status of a schedule operation's error: a missing schedule is
/// `NOT_FOUND`, a taken id `ALREADY_EXISTS`, a full shard
/// `RESOURCE_EXHAUSTED`, a record that kept changing `ABORTED` (nothing was
/// written; retry); the store's as [`from_store`] maps them.
pub fn from_schedule(error: ScheduleError) -> Status {
    match error {
        ScheduleError::NotFound(_) => Status::not_found(error.to_string()),
        ScheduleError::AlreadyExists(_) => Status::already_exists(error.to_string()),
        ScheduleError::Invalid(e) => invalid(e),
        ScheduleError::Full(_) => Status::resource_exhausted(error.to_string()),
        ScheduleError::Contended(_) => Status::aborted(error.to_string()),
        ScheduleError::Store(e) => from_store(e),
    }
}

/// `INTERNAL`: a peer's address this node cannot make a client of.
pub fn from_peer(error: PeerError) -> Status {
    Status::internal(error.to_string())
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
        MatchError::Lease(LeaseError::Stale | LeaseError::Cancelled) => {
            Status::failed_precondition(format!("lease_token: {error}"))
        }
        MatchError::Lease(LeaseError::Busy) => Status::aborted(format!("lease_token: {error}")),
        MatchError::UnknownQueue(_) => Status::not_found(error.to_string()),
        MatchError::MoveInProgress { .. } => Status::failed_precondition(error.to_string()),
        MatchError::InvalidSettings(_) => Status::invalid_argument(error.to_string()),
        MatchError::SettingsContended { .. } | MatchError::StaleSettings { .. } => Status::aborted(error.to_string()),
        MatchError::QueueLimit { .. } | MatchError::TooManyPolls { .. } | MatchError::CancelRefused(_) => {
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

    #[test]
    fn the_named_statuses_keep_their_codes_and_messages() {
        let queue = QueueName::new_unchecked("q");
        let cases = [
            (
                not_bearer(),
                Code::Unauthenticated,
                "metadata authorization must be `Bearer <API key or JWT>`".to_owned(),
            ),
            (
                no_node_proof(),
                Code::PermissionDenied,
                format!(
                    "fairway-partition and fairway-forwarded are for Fairway nodes: this request has no valid \
                     fairway-node-proof (a node's proof is good for its RPC and partition, {NODE_PROOF_VALIDITY_SECS} \
                     s either side of the second it was made: keep the nodes' clocks in step)"
                ),
            ),
            (
                bad_forwarded_partition(),
                Code::InvalidArgument,
                "fairway-partition must be a partition number".to_owned(),
            ),
            (
                node_proof_not_for("AddTask", "DeleteQueue"),
                Code::PermissionDenied,
                "a node's proof for AddTask does not let in DeleteQueue: nodes forward only adds, polls, lease calls \
                 and redrives"
                    .to_owned(),
            ),
            (out_of_bounds("alice", "too big"), Code::PermissionDenied, "\"alice\": too big".to_owned()),
            (not_gated(), Code::Internal, "the request did not pass the gate".to_owned()),
            (
                undecodable("AddTaskRequest", "bad wire type"),
                Code::InvalidArgument,
                "the request is not a valid AddTaskRequest: bad wire type".to_owned(),
            ),
            (
                too_many_connection_polls(4),
                Code::ResourceExhausted,
                "this connection has 4 polls in progress (limits.max_polls_per_connection); finish some, or poll \
                 over another connection"
                    .to_owned(),
            ),
            (
                no_live_region("home", "eu", &["".to_owned(), "us".to_owned(), "ap".to_owned()]),
                Code::FailedPrecondition,
                "home: no live node runs in region \"eu\" (live regions: us, ap); nothing was changed".to_owned(),
            ),
            (
                no_live_region("home", "eu", &["".to_owned()]),
                Code::FailedPrecondition,
                "home: no live node runs in region \"eu\" (live regions: none named); nothing was changed".to_owned(),
            ),
            (
                not_current_generation(&queue, 7),
                Code::FailedPrecondition,
                "partition q/7 is not of the queue's current generation (a forced failover replaced it); its tasks \
                 are delivered again from the current one"
                    .to_owned(),
            ),
            (
                changing_owner(&queue, 7),
                Code::Unavailable,
                "partition q/7 is changing owner; nothing was written, retry".to_owned(),
            ),
            (
                no_live_home(&queue, "eu"),
                Code::Unavailable,
                "queue q is homed in region \"eu\", where no node is live; nothing was written or taken \
                 (docs/operations.md, \"Regions\")"
                    .to_owned(),
            ),
            (
                from_scheduler(SchedulerError::Queue(VisitQueueError::Unavailable("down".into()))),
                Code::Unavailable,
                format!("{}; retry", VisitQueueError::Unavailable("down".into())),
            ),
            (
                from_peer(PeerError::BadAddress { address: "x y".into(), error: "invalid uri".into() }),
                Code::Internal,
                "peer address \"x y\": invalid uri".to_owned(),
            ),
        ];
        for (status, code, message) in cases {
            assert_eq!((status.code(), status.message()), (code, message.as_str()));
            assert!(status.metadata().get(MAYBE_APPLIED).is_none());
        }
    }
}
