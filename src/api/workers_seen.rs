//! The workers whose polls this node saw: for each (queue, worker id), its
//! address, its first and last poll, its polls waiting now and the tasks
//! handed to it, as `ListWorkers` and `ListNodes` show them.
//!
//! Invariants: at most `limits.max_workers_seen` entries (past it the
//! least recently seen with no poll waiting is forgotten, or the new
//! worker goes unrecorded when all are waiting); an entry with no poll
//! waiting is forgotten [`FORGET_AFTER`] after its last poll; an entry's
//! `polls_waiting` is the number of live [`Watching`] guards taken for it.
//! Only clients' polls are recorded: a poll a node forwards was recorded
//! where its client sent it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::clock::UnixMillis;
use crate::model::QueueName;

/// How long a worker with no poll waiting stays listed after its last poll.
pub const FORGET_AFTER_MS: UnixMillis = 5 * 60 * 1000;

/// One worker of one queue, as this node saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The queue it polls.
    pub queue: QueueName,
    /// The id its polls gave.
    pub worker_id: String,
    /// The client's address on its last poll, if known.
    pub address: Option<SocketAddr>,
    /// Its first poll since it was last forgotten.
    pub first_poll_ms: UnixMillis,
    /// Its last poll (when it started).
    pub last_poll_ms: UnixMillis,
    /// Its polls waiting now.
    pub polls_waiting: u32,
    /// Tasks handed to it since `first_poll_ms`.
    pub tasks_received: u64,
}

/// The workers seen, bounded.
#[derive(Debug)]
pub struct WorkersSeen {
    limit: usize,
    /// By `queue \0 worker_id`.
    seen: Mutex<HashMap<String, Seen>>,
}

/// A poll in progress, counted in its worker's `polls_waiting` until
/// dropped (or [`Watching::received`]).
#[derive(Debug)]
pub struct Watching<'a> {
    workers: &'a WorkersSeen,
    /// `None` when the worker could not be recorded (the table was full).
    key: Option<String>,
    received: u64,
}

fn key_of(queue: &QueueName, worker_id: &str) -> String {
    let mut key = String::with_capacity(queue.as_str().len() + 1 + worker_id.len());
    key.push_str(queue.as_str());
    key.push('\0');
    key.push_str(worker_id);
    key
}

impl WorkersSeen {
    /// A table of at most `limit` workers.
    pub fn new(limit: usize) -> WorkersSeen {
        WorkersSeen { limit: limit.max(1), seen: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a poll of `queue` by `worker_id` from `address` starting at
    /// `now`; it counts as waiting until the guard is dropped.
    pub fn poll(
        &self,
        queue: &QueueName,
        worker_id: &str,
        address: Option<SocketAddr>,
        now: UnixMillis,
    ) -> Watching<'_> {
        let key = key_of(queue, worker_id);
        let mut seen = self.lock();
        if let Some(entry) = seen.get_mut(&key) {
            entry.last_poll_ms = now;
            entry.polls_waiting += 1;
            if address.is_some() {
                entry.address = address;
            }
            return Watching { workers: self, key: Some(key), received: 0 };
        }
        if seen.len() >= self.limit {
            forget_idle(&mut seen, now);
        }
        if seen.len() >= self.limit {
            let oldest_idle = seen
                .iter()
                .filter(|(_, entry)| entry.polls_waiting == 0)
                .min_by_key(|(_, entry)| entry.last_poll_ms)
                .map(|(key, _)| key.clone());
            match oldest_idle {
                Some(oldest) => {
                    seen.remove(&oldest);
                }
                None => return Watching { workers: self, key: None, received: 0 },
            }
        }
        let entry = Seen {
            queue: queue.clone(),
            worker_id: worker_id.to_owned(),
            address,
            first_poll_ms: now,
            last_poll_ms: now,
            polls_waiting: 1,
            tasks_received: 0,
        };
        seen.insert(key.clone(), entry);
        Watching { workers: self, key: Some(key), received: 0 }
    }

    /// The workers seen at `now` (those forgotten by then left out), in
    /// no order.
    pub fn list(&self, now: UnixMillis) -> Vec<Seen> {
        let mut seen = self.lock();
        forget_idle(&mut seen, now);
        seen.values().cloned().collect()
    }

    /// How many workers are listed at `now`.
    pub fn count(&self, now: UnixMillis) -> usize {
        let mut seen = self.lock();
        forget_idle(&mut seen, now);
        seen.len()
    }
}

/// Forgets the workers with no poll waiting whose last poll is older than
/// [`FORGET_AFTER_MS`] at `now`.
fn forget_idle(seen: &mut HashMap<String, Seen>, now: UnixMillis) {
    seen.retain(|_, entry| entry.polls_waiting > 0 || now.saturating_sub(entry.last_poll_ms) < FORGET_AFTER_MS);
}

impl Watching<'_> {
    /// Counts `tasks` handed to the worker by this poll.
    pub fn received(&mut self, tasks: usize) {
        self.received += tasks as u64;
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut seen = self.workers.lock();
        if let Some(entry) = seen.get_mut(&key) {
            entry.polls_waiting = entry.polls_waiting.saturating_sub(1);
            entry.tasks_received += self.received;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> QueueName {
        QueueName::new_unchecked(name)
    }

    #[test]
    fn a_worker_is_listed_with_its_polls_waiting_and_tasks_until_forgotten() {
        let workers = WorkersSeen::new(8);
        let address: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let mut first = workers.poll(&queue("q"), "w1", Some(address), 1_000);
        let second = workers.poll(&queue("q"), "w1", None, 2_000);
        let listed = workers.list(2_000);
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].polls_waiting, listed[0].first_poll_ms, listed[0].last_poll_ms), (2, 1_000, 2_000));
        assert_eq!(listed[0].address, Some(address), "a poll without an address keeps the last one known");
        first.received(3);
        drop(first);
        drop(second);
        let listed = workers.list(3_000);
        assert_eq!((listed[0].polls_waiting, listed[0].tasks_received), (0, 3));
        // Another queue's polls by the same id are another entry.
        drop(workers.poll(&queue("other"), "w1", None, 3_000));
        assert_eq!(workers.count(3_000), 2);
        assert_eq!(workers.count(2_000 + FORGET_AFTER_MS), 1, "w1 of q is forgotten 5 minutes after its last poll");
        assert_eq!(workers.count(3_000 + FORGET_AFTER_MS), 0);
    }

    #[test]
    fn a_waiting_worker_is_never_forgotten_and_the_table_holds_its_bound() {
        let workers = WorkersSeen::new(3);
        let waiting = workers.poll(&queue("q"), "patient", None, 0);
        drop(workers.poll(&queue("q"), "a", None, 10));
        drop(workers.poll(&queue("q"), "b", None, 20));
        // Full: a new worker takes the place of the least recently seen idle one.
        drop(workers.poll(&queue("q"), "c", None, 30));
        let mut ids: Vec<String> = workers.list(40).into_iter().map(|s| s.worker_id).collect();
        ids.sort();
        assert_eq!(ids, ["b", "c", "patient"]);
        // Long past the window, the waiting worker stays; the idle ones go.
        assert_eq!(workers.list(10 * FORGET_AFTER_MS).len(), 1);
        // A hostile client rotating ids never grows the table past its bound.
        let held: Vec<_> = (0..10).map(|i| workers.poll(&queue("q"), &format!("x{i}"), None, 50)).collect();
        assert_eq!(workers.count(50), 3, "full of waiting workers, new ones go unrecorded");
        drop(held);
        drop(waiting);
        assert!(workers.count(60) <= 3);
    }
}
