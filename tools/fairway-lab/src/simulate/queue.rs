//! The `visits.git` queue and its loaders, as a model: visits wait in the
//! queue's order and a free loader takes the first one whose host is below
//! its politeness limit.
//!
//! The order is the one Fairway's queue engine gives (`src/core/engine/machine.rs`,
//! `next_pass`): each visit gets a pass from the real [`KeyCounters`] of
//! `src/core/fairness` when it is queued, and visits leave in pass order. The
//! fair arm counts passes per fairness key (weight 1 each: stride
//! scheduling across listers); the FIFO arm counts every visit against one
//! shared key, so passes follow arrival, as the engine does for a FIFO
//! queue. The base of a new pass is the ack level, here approximated by the
//! highest pass dispatched that is not above the lowest waiting one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use fairway::core::fairness::{CounterConfig, KeyCounters, stride};
use fairway::visits::{Backlog, Visit, VisitQueue, VisitQueueError};

use super::forge::Forge;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Order {
    /// Fair across fairness keys (equal weights).
    Fair,
    /// By arrival.
    Fifo,
}

/// A waiting visit's place: priority (strict), pass, arrival.
type Level = (u32, i64, u64);

pub(super) struct SimQueue {
    forge: Arc<Forge>,
    state: Mutex<State>,
}

struct State {
    order: Order,
    host_limit: u32,
    counters: KeyCounters,
    ack_pass: i64,
    arrivals: u64,
    /// Every waiting visit, and its origin.
    waiting: BTreeSet<Level>,
    origin_of: HashMap<u64, u32>,
    /// Waiting visits per host.
    by_host: Vec<BTreeSet<Level>>,
    /// The first waiting visit of each host below its limit, and which
    /// entry each host has there.
    heads: BTreeSet<(Level, u32)>,
    head_of: Vec<Option<Level>>,
    running: Vec<u32>,
    peak: Vec<u32>,
    /// Origins queued or running (the dedup ids).
    present: HashSet<u32>,
    /// Waiting visits per fairness key, and each waiting visit's key.
    waiting_by_key: HashMap<String, u64>,
    key_of: HashMap<u64, String>,
}

impl SimQueue {
    pub(super) fn new(forge: Arc<Forge>, order: Order, host_limit: u32) -> SimQueue {
        let hosts = forge.hosts.len();
        let state = State {
            order,
            host_limit,
            counters: KeyCounters::new(CounterConfig::default()),
            ack_pass: 0,
            arrivals: 0,
            waiting: BTreeSet::new(),
            origin_of: HashMap::new(),
            by_host: vec![BTreeSet::new(); hosts],
            heads: BTreeSet::new(),
            head_of: vec![None; hosts],
            running: vec![0; hosts],
            peak: vec![0; hosts],
            present: HashSet::new(),
            waiting_by_key: HashMap::new(),
            key_of: HashMap::new(),
        };
        SimQueue { forge, state: Mutex::new(state) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A free loader takes the next visit it may run: its origin.
    pub(super) fn take(&self) -> Option<u32> {
        let mut s = self.lock();
        let (level, host) = s.heads.pop_first()?;
        s.head_of[host as usize] = None;
        s.waiting.remove(&level);
        s.by_host[host as usize].remove(&level);
        let origin = s.origin_of.remove(&level.2).expect("a waiting visit has an origin");
        let key = s.key_of.remove(&level.2).expect("a waiting visit has a key");
        if let Some(count) = s.waiting_by_key.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                s.waiting_by_key.remove(&key);
            }
        }
        s.running[host as usize] += 1;
        let running = s.running[host as usize];
        assert!(running <= s.host_limit, "host {host} runs {running} visits, above its limit");
        s.peak[host as usize] = s.peak[host as usize].max(running);
        let lowest = s.waiting.first().map_or(i64::MAX, |l| l.1);
        s.ack_pass = s.ack_pass.max(level.1.min(lowest));
        s.refresh_head(host);
        Some(origin)
    }

    /// A visit ended: its loader and its host's slot are free.
    pub(super) fn finished(&self, origin: u32) {
        let host = self.forge.origins[origin as usize].host;
        let mut s = self.lock();
        s.running[host as usize] -= 1;
        s.present.remove(&origin);
        s.refresh_head(host);
    }

    /// Visits waiting in the queue, not taken yet.
    pub(super) fn waiting(&self) -> u64 {
        self.lock().waiting.len() as u64
    }

    /// Whether a waiting visit's host is below its limit: a free loader
    /// would take it.
    pub(super) fn runnable(&self) -> bool {
        !self.lock().heads.is_empty()
    }

    /// Whether a visit of `origin` sent now could start at once: it is
    /// neither queued nor running and its host is below its limit.
    pub(super) fn could_run(&self, origin: u32) -> bool {
        let host = self.forge.origins[origin as usize].host as usize;
        let s = self.lock();
        !s.present.contains(&origin) && s.running[host] < s.host_limit
    }

    /// The most visits any host ran at once, and the limit.
    pub(super) fn peak_per_host(&self) -> (u32, u32) {
        let s = self.lock();
        (s.peak.iter().copied().max().unwrap_or(0), s.host_limit)
    }
}

impl State {
    /// Puts the host's first waiting visit among the heads if the host may
    /// run one more, else takes it out.
    fn refresh_head(&mut self, host: u32) {
        let h = host as usize;
        if let Some(old) = self.head_of[h].take() {
            self.heads.remove(&(old, host));
        }
        if self.running[h] < self.host_limit
            && let Some(&first) = self.by_host[h].first()
        {
            self.heads.insert((first, host));
            self.head_of[h] = Some(first);
        }
    }
}

#[async_trait]
impl VisitQueue for SimQueue {
    async fn backlog(&self, _visit_type: &str) -> Result<Backlog, VisitQueueError> {
        let s = self.lock();
        Ok(Backlog { total: s.waiting.len() as u64, by_key: s.waiting_by_key.clone() })
    }

    async fn enqueue(&self, _visit_type: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError> {
        let mut s = self.lock();
        let mut result = Vec::with_capacity(visits.len());
        for visit in visits {
            let origin = Forge::id_of(&visit.url)
                .ok_or_else(|| VisitQueueError::Unavailable(format!("not an origin of the forge: {}", visit.url)))?;
            if !s.present.insert(origin) {
                result.push(true);
                continue;
            }
            let key = match s.order {
                Order::Fair => visit.fairness_key.as_str(),
                Order::Fifo => "",
            };
            let base = s.ack_pass;
            let pass = s.counters.next_pass(key, base, stride(1.0));
            s.arrivals += 1;
            let level = (visit.priority, pass, s.arrivals);
            let host = self.forge.origins[origin as usize].host;
            s.waiting.insert(level);
            s.origin_of.insert(level.2, origin);
            s.key_of.insert(level.2, visit.fairness_key.clone());
            *s.waiting_by_key.entry(visit.fairness_key.clone()).or_default() += 1;
            s.by_host[host as usize].insert(level);
            s.refresh_head(host);
            result.push(true);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairway::visits::FairnessKeyOf;

    fn visit(forge: &Forge, id: u32) -> Visit {
        let origin = fairway::core::visits::ListedOrigin {
            url: forge.url(id),
            visit_type: "git".into(),
            lister: forge.listers[forge.origins[id as usize].lister as usize].name.clone(),
            last_update: None,
            first_seen: 0,
            last_seen: 0,
            is_fork: false,
            extra_loader_arguments: String::new(),
        };
        Visit::of(&origin, FairnessKeyOf::Lister, 3)
    }

    fn setup(order: Order) -> (Arc<Forge>, SimQueue) {
        let forge = Arc::new(Forge::tiny());
        let queue = SimQueue::new(forge.clone(), order, 2);
        (forge, queue)
    }

    #[tokio::test]
    async fn fifo_takes_by_arrival_skipping_hosts_at_their_limit() {
        let (forge, queue) = setup(Order::Fifo);
        let big: Vec<u32> = forge.listers[0].origins.clone().take(4).collect();
        let small = forge.listers[1].origins.start;
        let mut visits: Vec<Visit> = big.iter().map(|&id| visit(&forge, id)).collect();
        visits.push(visit(&forge, small));
        assert_eq!(queue.enqueue("git", &visits).await.unwrap(), vec![true; 5]);
        assert_eq!(queue.enqueue("git", &visits[..1]).await.unwrap(), vec![true], "a duplicate is already there");
        assert_eq!(queue.waiting(), 5);
        assert_eq!((queue.take(), queue.take()), (Some(big[0]), Some(big[1])));
        assert_eq!(queue.take(), Some(small), "the big host is at its limit of 2");
        assert_eq!(queue.take(), None);
        queue.finished(big[0]);
        assert_eq!(queue.take(), Some(big[2]));
        assert_eq!(queue.peak_per_host(), (2, 2));
    }

    #[tokio::test]
    async fn fair_order_alternates_between_keys() {
        let (forge, queue) = setup(Order::Fair);
        let big: Vec<u32> = forge.listers[0].origins.clone().take(4).collect();
        let small: Vec<u32> = forge.listers[1].origins.clone().take(2).collect();
        let visits: Vec<Visit> = big.iter().chain(&small).map(|&id| visit(&forge, id)).collect();
        queue.enqueue("git", &visits).await.unwrap();
        let taken: Vec<u32> = (0..3).filter_map(|_| queue.take()).collect();
        assert_eq!(taken, vec![big[0], small[0], big[1]]);
        queue.finished(big[0]);
        queue.finished(big[1]);
        assert_eq!(queue.take(), Some(small[1]));
        assert_eq!(queue.take(), Some(big[2]));
    }
}
