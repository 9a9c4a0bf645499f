//! `PurgeQueue`: every task of a queue cancelled at once, each partition by
//! its owner (see `crate::core::engine::cancel`), behind a confirmation.
//!
//! Invariants: a request without a confirmation purges nothing; one with a
//! confirmation purges only the queue the token was made for, and only
//! before the token expires. The token guards against a purge by mistake
//! (a command run twice, a queue name mistyped), not against an attacker:
//! the admin role is what guards the call, and any node checks a token
//! without keeping it. The answer comes once each partition's purge is
//! durable.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, caller};
use super::convert::timestamp;
use super::routing::{Origin, Router};
use super::status;
use super::task_lookup::queue_name;
use crate::clock::human::now_ms;
use crate::core::engine::Purged;
use crate::hash::{fnv1a, splitmix64};
use crate::model::{QueueName, ValidationError};
use crate::proto::v1 as pb;

/// How long a confirmation token holds.
const CONFIRMATION_TTL: Duration = Duration::from_secs(300);

/// Serves a PurgeQueue request that passed the gate.
pub(super) async fn purge(
    router: &Router,
    request: Request<pb::PurgeQueueRequest>,
) -> Result<Response<pb::PurgeQueueResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let queue = queue_name(&request.queue)?;
    authorize(&caller, Rpc::PurgeQueue, queue.as_str(), None)?;
    let origin = Origin::of(&caller);
    let matcher = router.queues().get(&queue).await.map_err(status::from_match)?;
    if let Origin::Forwarded(Some(partition)) = origin {
        // The node that forwarded it checked the token.
        let purged = matcher.purge(partition).await.map_err(status::from_match)?;
        return Ok(Response::new(answer(purged, 1)));
    }
    if request.confirmation.is_empty() {
        let expires = now_ms() + CONFIRMATION_TTL.as_millis() as i64;
        return Ok(Response::new(pb::PurgeQueueResponse {
            confirmation: confirmation(&queue, expires),
            confirmation_expires: Some(timestamp(expires)),
            ..pb::PurgeQueueResponse::default()
        }));
    }
    check(&queue, &request.confirmation, now_ms()).map_err(status::invalid)?;
    let mut total = answer(Purged::default(), 0);
    for partition in matcher.config().partition_numbers() {
        let done = if matcher.holds(partition) {
            answer(matcher.purge(partition).await.map_err(status::from_match)?, 1)
        } else {
            let owner = router.remote_owner(&matcher, partition)?;
            router
                .forward(
                    &owner,
                    Rpc::PurgeQueue,
                    request.clone(),
                    Some(partition),
                    Duration::ZERO,
                    |mut peer, r| async move { peer.purge_queue(r).await },
                )
                .await?
        };
        total.waiting += done.waiting;
        total.delayed += done.delayed;
        total.running += done.running;
        total.partitions += done.partitions;
    }
    tracing::info!(
        target: "fairway::audit", caller = caller.name(), %queue, waiting = total.waiting,
        delayed = total.delayed, running = total.running, "purged a queue"
    );
    Ok(Response::new(total))
}

fn answer(purged: Purged, partitions: u32) -> pb::PurgeQueueResponse {
    pb::PurgeQueueResponse {
        purged: true,
        waiting: purged.waiting,
        delayed: purged.delayed,
        running: purged.running,
        partitions,
        ..pb::PurgeQueueResponse::default()
    }
}

/// The token that confirms a purge of `queue` until `expires_ms`.
fn confirmation(queue: &QueueName, expires_ms: i64) -> String {
    format!("{expires_ms}-{:016x}", checksum(queue, expires_ms))
}

fn checksum(queue: &QueueName, expires_ms: i64) -> u64 {
    let bytes = queue.as_str().bytes().chain([0]).chain(expires_ms.to_le_bytes());
    splitmix64(fnv1a(bytes))
}

/// Whether `token` confirms a purge of `queue` at `now_ms`.
fn check(queue: &QueueName, token: &str, now_ms: i64) -> Result<(), ValidationError> {
    let refuse = |why: String| ValidationError::new("confirmation", why);
    let parsed = token
        .split_once('-')
        .and_then(|(expires, sum)| Some((expires.parse::<i64>().ok()?, u64::from_str_radix(sum, 16).ok()?)));
    let Some((expires, sum)) = parsed else {
        let shown: String = token.chars().take(40).collect();
        return Err(refuse(format!("{shown:?} is not a token PurgeQueue gave; ask without one for a token")));
    };
    if sum != checksum(queue, expires) {
        return Err(refuse(format!(
            "is not a token for queue {queue} (mistyped, or given for another queue); ask without one for a token"
        )));
    }
    if expires <= now_ms {
        let ago = (now_ms - expires) / 1000;
        return Err(refuse(format!("expired {ago} s ago (tokens hold 5 minutes); ask without one for a new token")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> QueueName {
        QueueName::new_unchecked(name)
    }

    #[test]
    fn a_token_confirms_its_own_queue_until_it_expires() {
        let token = confirmation(&queue("visits.git"), 10_000);
        assert_eq!(check(&queue("visits.git"), &token, 9_999), Ok(()));
        let expired = check(&queue("visits.git"), &token, 10_000).unwrap_err().to_string();
        assert!(expired.contains("expired"), "{expired}");
        let other = check(&queue("visits.hg"), &token, 0).unwrap_err().to_string();
        assert!(other.contains("not a token for queue visits.hg"), "{other}");
        // A later expiry written over a token does not pass: the checksum covers it.
        let stretched = token.replacen("10000", "99999", 1);
        assert!(check(&queue("visits.git"), &stretched, 20_000).is_err());
        let garbled = check(&queue("visits.git"), "yes", 0).unwrap_err().to_string();
        assert!(garbled.contains("not a token PurgeQueue gave"), "{garbled}");
    }
}
