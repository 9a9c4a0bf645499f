//! `ListQueues`: a page of the catalog's queues, those the caller may read.
//!
//! Invariant: a caller sees only the queues it holds the read permission
//! on (one that holds it on none is refused); a page is bounded in queues
//! ([`MAX_PAGE_SIZE`]) and in partitions read (see
//! [`crate::matcher::MAX_STORED_READS_PER_PAGE`]).

use tonic::{Request, Response, Status};

use super::access::{Rpc, allowed, authorize, caller};
use super::convert::timestamp;
use super::queue_settings::to_proto;
use super::status;
use crate::matcher::Queues;
use crate::model::{ValidationError, validate};
use crate::proto::v1 as pb;

/// The most queues of one page.
const MAX_PAGE_SIZE: u32 = 100;
/// The queues of a page that names no size.
const DEFAULT_PAGE_SIZE: u32 = 50;

/// `ListQueues`.
pub(super) async fn list(
    queues: &Queues,
    request: Request<pb::ListQueuesRequest>,
) -> Result<Response<pb::ListQueuesResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    if !caller.holds_anywhere(Rpc::ListQueues.permission()) {
        // Refused, naming the permission it lacks.
        authorize(&caller, Rpc::ListQueues, "the queues", None)?;
    }
    if request.page_size > MAX_PAGE_SIZE {
        let message = format!("is {}; the limit is {MAX_PAGE_SIZE}", request.page_size);
        return Err(status::invalid(ValidationError::new("page_size", message)));
    }
    // A page token is the last queue name of the page before.
    if !request.page_token.is_empty() {
        validate::queue_name("page_token", &request.page_token).map_err(status::invalid)?;
    }
    if request.prefix.len() > validate::MAX_QUEUE_NAME_BYTES {
        let message =
            format!("is {} bytes long; the limit is {} bytes", request.prefix.len(), validate::MAX_QUEUE_NAME_BYTES);
        return Err(status::invalid(ValidationError::new("prefix", message)));
    }
    let size = if request.page_size == 0 { DEFAULT_PAGE_SIZE } else { request.page_size };
    let visible = |name: &crate::model::QueueName| allowed(&caller, Rpc::ListQueues, name.as_str());
    let (page, next) = queues
        .list_page(&request.prefix, &request.page_token, size as usize, visible)
        .await
        .map_err(status::from_store)?;
    let queues = page
        .into_iter()
        .map(|summary| pb::QueueSummary {
            queue: summary.name.to_string(),
            partitions: summary.config.partitions,
            home: summary.config.home.clone(),
            backlog: summary.backlog,
            leased: summary.leased,
            oldest_added_at: summary.oldest_added_at.map(timestamp),
            held_here: summary.held_here,
            settings: Some(to_proto(&summary.config.settings)),
        })
        .collect();
    Ok(Response::new(pb::ListQueuesResponse { queues, next_page_token: next.unwrap_or_default() }))
}
