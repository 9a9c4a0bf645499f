//! The workers whose polls this node saw: for each (queue, worker id), its
//! address, its first and last poll, its polls waiting now and the tasks
//! handed to it, as `ListWorkers` and `ListNodes` show them.
//!
//! Invariants: at most `limits.max_workers_seen` entries (past it the
//! least recently seen with no poll waiting is forgotten, or the new
//! worker goes unrecorded when all are waiting); an entry with no poll
//! waiting is forgotten [`FORGET_AFTER`] after its last poll; an entry's
//! `polls_waiting` is the number of live [`Watching`] guards taken for it.
//! A poll of a worker already seen takes the table's lock shared only.
//! Only clients' polls are recorded: a poll a node forwards was recorded
//! where its client sent it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

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

/// A worker's entry: a poll of a worker already seen takes the table's
/// lock shared, and changes the entry through atomics.
#[derive(Debug)]
struct Entry {
    queue: QueueName,
    worker_id: String,
    first_poll_ms: UnixMillis,
    address: Mutex<Option<SocketAddr>>,
    last_poll_ms: AtomicI64,
    polls_waiting: AtomicU32,
    tasks_received: AtomicU64,
}

impl Entry {
    fn seen(&self) -> Seen {
        Seen {
            queue: self.queue.clone(),
            worker_id: self.worker_id.clone(),
            address: *self.address.lock().unwrap_or_else(|p| p.into_inner()),
            first_poll_ms: self.first_poll_ms,
            last_poll_ms: self.last_poll_ms.load(Ordering::Relaxed),
            polls_waiting: self.polls_waiting.load(Ordering::Relaxed),
            tasks_received: self.tasks_received.load(Ordering::Relaxed),
        }
    }

    /// Whether it has no poll waiting and its last poll is older than
    /// [`FORGET_AFTER_MS`] at `now`.
    fn forgotten_at(&self, now: UnixMillis) -> bool {
        self.polls_waiting.load(Ordering::Relaxed) == 0
            && now.saturating_sub(self.last_poll_ms.load(Ordering::Relaxed)) >= FORGET_AFTER_MS
    }
}

/// The entries by queue, then worker id, and how many there are.
#[derive(Debug, Default)]
struct Table {
    by_queue: HashMap<Arc<str>, HashMap<String, Arc<Entry>>>,
    len: usize,
}

impl Table {
    fn get(&self, queue: &QueueName, worker_id: &str) -> Option<&Arc<Entry>> {
        self.by_queue.get(queue.as_str()).and_then(|workers| workers.get(worker_id))
    }

    fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.by_queue.values().flat_map(HashMap::values)
    }

    /// Keeps the entries `keep` passes, and counts them.
    fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) {
        let mut len = 0;
        self.by_queue.retain(|_, workers| {
            workers.retain(|_, entry| keep(entry));
            len += workers.len();
            !workers.is_empty()
        });
        self.len = len;
    }
}

/// The workers seen, bounded.
#[derive(Debug)]
pub struct WorkersSeen {
    limit: usize,
    table: RwLock<Table>,
}

/// A poll in progress, counted in its worker's `polls_waiting` until
/// dropped.
#[derive(Debug)]
pub struct Watching {
    /// `None` when the worker could not be recorded (the table was full).
    entry: Option<Arc<Entry>>,
    received: u64,
}

impl WorkersSeen {
    /// A table of at most `limit` workers.
    pub fn new(limit: usize) -> WorkersSeen {
        WorkersSeen { limit: limit.max(1), table: RwLock::new(Table::default()) }
    }

    /// Records a poll of `queue` by `worker_id` from `address` starting at
    /// `now`; it counts as waiting until the guard is dropped.
    pub fn poll(&self, queue: &QueueName, worker_id: &str, address: Option<SocketAddr>, now: UnixMillis) -> Watching {
        let touch = |entry: &Arc<Entry>| {
            // Counted under the table's lock, so that no one forgets it meanwhile.
            entry.polls_waiting.fetch_add(1, Ordering::Relaxed);
            entry.last_poll_ms.fetch_max(now, Ordering::Relaxed);
            if address.is_some() {
                let mut known = entry.address.lock().unwrap_or_else(|p| p.into_inner());
                if *known != address {
                    *known = address;
                }
            }
            Watching { entry: Some(entry.clone()), received: 0 }
        };
        if let Some(entry) = self.table.read().unwrap_or_else(|p| p.into_inner()).get(queue, worker_id) {
            return touch(entry);
        }
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = table.get(queue, worker_id) {
            return touch(entry);
        }
        if table.len >= self.limit {
            table.retain(|entry| !entry.forgotten_at(now));
        }
        if table.len >= self.limit {
            let oldest_idle = table
                .entries()
                .filter(|entry| entry.polls_waiting.load(Ordering::Relaxed) == 0)
                .min_by_key(|entry| entry.last_poll_ms.load(Ordering::Relaxed))
                .cloned();
            let Some(oldest) = oldest_idle else { return Watching { entry: None, received: 0 } };
            table.retain(|entry| !std::ptr::eq(entry, &*oldest));
        }
        let entry = Arc::new(Entry {
            queue: queue.clone(),
            worker_id: worker_id.to_owned(),
            first_poll_ms: now,
            address: Mutex::new(address),
            last_poll_ms: AtomicI64::new(now),
            polls_waiting: AtomicU32::new(1),
            tasks_received: AtomicU64::new(0),
        });
        let queue_key: Arc<str> = Arc::from(queue.as_str());
        table.by_queue.entry(queue_key).or_default().insert(worker_id.to_owned(), entry.clone());
        table.len += 1;
        Watching { entry: Some(entry), received: 0 }
    }

    /// The workers seen at `now` (those forgotten by then left out), in
    /// no order.
    pub fn list(&self, now: UnixMillis) -> Vec<Seen> {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        table.retain(|entry| !entry.forgotten_at(now));
        table.entries().map(|entry| entry.seen()).collect()
    }

    /// How many workers are listed at `now`.
    pub fn count(&self, now: UnixMillis) -> usize {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        table.retain(|entry| !entry.forgotten_at(now));
        table.len
    }
}

impl Watching {
    /// Counts `tasks` handed to the worker by this poll.
    pub fn received(&mut self, tasks: usize) {
        self.received += tasks as u64;
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let Some(entry) = self.entry.take() else { return };
        entry.tasks_received.fetch_add(self.received, Ordering::Relaxed);
        entry.polls_waiting.fetch_sub(1, Ordering::Relaxed);
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
