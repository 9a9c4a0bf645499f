//! Where a round sends its visits: the `visits.<type>` queues. The server
//! sends them through its router; a simulation through a model of a queue.

use async_trait::async_trait;
use serde::Serialize;

use super::FairnessKeyOf;
use crate::core::visits::ListedOrigin;
use crate::model::validate::{MAX_DEDUP_ID_BYTES, MAX_FAIRNESS_KEY_BYTES};

/// One visit to queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Visit {
    /// The origin's URL.
    pub url: String,
    /// The origin's lister or host (as `scheduler.fairness_key` says), cut to
    /// at most 256 bytes.
    pub fairness_key: String,
    /// The origin and visit type: a visit already queued is not queued twice.
    pub dedup_id: String,
    /// The task's priority, 1 (highest) to 5.
    pub priority: u32,
    /// The task's payload (see [`VisitPayload`]).
    pub payload: Vec<u8>,
}

/// A visit task's payload, JSON: what a loader needs to visit the origin.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct VisitPayload {
    /// The origin's URL.
    pub url: String,
    /// The kind of loader to run, e.g. `git`.
    pub visit_type: String,
    /// The lister that reported the origin.
    pub lister: String,
    /// Whether the forge says it is a fork of another origin.
    pub is_fork: bool,
    /// The lister's extra loader arguments (a JSON object; empty when none).
    pub arguments: serde_json::Value,
}

impl Visit {
    /// The visit of `origin` at `priority`, its fairness key chosen by `key`.
    pub fn of(origin: &ListedOrigin, key: FairnessKeyOf, priority: u32) -> Visit {
        let payload = VisitPayload {
            url: origin.url.clone(),
            visit_type: origin.visit_type.clone(),
            lister: origin.lister.clone(),
            is_fork: origin.is_fork,
            arguments: serde_json::from_str(&origin.extra_loader_arguments)
                .unwrap_or_else(|_| serde_json::Value::Object(Default::default())),
        };
        Visit {
            url: origin.url.clone(),
            fairness_key: key_of(key, &origin.lister, &origin.url),
            dedup_id: dedup_id(&origin.visit_type, &origin.url),
            priority,
            payload: serde_json::to_vec(&payload).expect("a payload serializes"),
        }
    }
}

/// The fairness key of a visit of the origin at `url` listed by `lister`,
/// as `key` says, cut to at most 256 bytes.
pub fn key_of(key: FairnessKeyOf, lister: &str, url: &str) -> String {
    let whole = match key {
        FairnessKeyOf::Lister => lister,
        FairnessKeyOf::Host => host_of(url),
    };
    prefix(whole, MAX_FAIRNESS_KEY_BYTES).to_owned()
}

/// The dedup id of a visit: one queued visit per origin and visit type.
/// A URL too long for a dedup id is cut, and a hash of it appended.
pub fn dedup_id(visit_type: &str, url: &str) -> String {
    let id = format!("{visit_type} {url}");
    if id.len() <= MAX_DEDUP_ID_BYTES {
        return id;
    }
    let hash = crate::hash::fnv1a(url.bytes());
    let again = crate::hash::splitmix64(hash ^ url.len() as u64);
    format!("{} #{hash:016x}{again:016x}", prefix(&id, MAX_DEDUP_ID_BYTES - 40))
}

/// The lister of origins first seen through "save code now".
pub const SAVE_CODE_NOW_LISTER: &str = "save-code-now";

/// The dedup id of a "save code now" visit: one such visit queued per
/// origin and visit type, beside the scheduled one.
pub fn requested_dedup_id(visit_type: &str, url: &str) -> String {
    dedup_id(&format!("{SAVE_CODE_NOW_LISTER} {visit_type}"), url)
}

/// Whether a task of dedup id `task_dedup_id` is a visit (scheduled or
/// requested) of the origin `url` of `visit_type`.
pub fn is_visit_of(task_dedup_id: &str, visit_type: &str, url: &str) -> bool {
    task_dedup_id == dedup_id(visit_type, url) || task_dedup_id == requested_dedup_id(visit_type, url)
}

/// The longest prefix of `text` of at most `max` bytes, on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The host of an origin URL: `https://host:port/path`, `git://host/path`,
/// or scp-like `user@host:path`. The whole string when there is none.
pub fn host_of(url: &str) -> &str {
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = if url.contains("://") { host } else { host.split(':').next().unwrap_or(host) };
    if host.is_empty() { url } else { host }
}

/// Why visits could not be queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VisitQueueError {
    /// The queue could not be reached; nothing was queued. Retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// Visits waiting in a queue (not yet dispatched).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// All of them.
    pub total: u64,
    /// Per fairness key, as far as the queue can tell (a key not here may
    /// still have visits waiting).
    pub by_key: std::collections::HashMap<String, u64>,
}

/// The queues a round fills: one `visits.<type>` queue per visit type.
#[async_trait]
pub trait VisitQueue: Send + Sync {
    /// Visits of the visit type waiting in its queue.
    async fn backlog(&self, visit_type: &str) -> Result<Backlog, VisitQueueError>;

    /// Queues the visits; for each, whether it is in the queue now (added,
    /// or already there).
    async fn enqueue(&self, visit_type: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_origin_urls() {
        assert_eq!(host_of("https://gitlab.com/a/b"), "gitlab.com");
        assert_eq!(host_of("https://user:pw@example.org:8443/x?y"), "example.org:8443");
        assert_eq!(host_of("git@github.com:torvalds/linux.git"), "github.com");
        assert_eq!(host_of("svn://svn.example.net"), "svn.example.net");
        assert_eq!(host_of("nohost"), "nohost");
    }

    #[test]
    fn long_urls_still_make_valid_dedup_ids_and_keys() {
        assert_eq!(dedup_id("git", "https://a/b"), "git https://a/b");
        let long = format!("https://{}.example/é{}", "h".repeat(300), "p".repeat(3000));
        let id = dedup_id("git", &long);
        assert!(id.len() <= MAX_DEDUP_ID_BYTES, "{}", id.len());
        assert_ne!(id, dedup_id("git", &format!("{long}x")), "the hash tells them apart");
        let origin = ListedOrigin {
            url: long.clone(),
            visit_type: "git".into(),
            lister: "l".into(),
            last_update: None,
            first_seen: 0,
            last_seen: 0,
            is_fork: false,
            extra_loader_arguments: String::new(),
        };
        let visit = Visit::of(&origin, FairnessKeyOf::Host, 3);
        assert!(visit.fairness_key.len() <= MAX_FAIRNESS_KEY_BYTES);
        assert!(visit.fairness_key.starts_with("hhh"));
    }
}
