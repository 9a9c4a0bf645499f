//! The loop that runs a node's rounds: every visit type some lister listed,
//! again after `round_interval` when a round sent visits, after
//! `idle_interval` when it sent none or failed — but only the visit types
//! whose lease this node holds.
//!
//! Invariant: a round of a visit type runs only while this node holds the
//! lease `rounds/<visit type>` ([`crate::store::leases`]) with more than a
//! third of `scheduler.rounds_lease` left by its clock (the rule is in
//! `lease`); a round under way when that stops being so (the renewal was
//! refused, or the store did not answer before that point) is dropped at
//! once, as a crash of the node would end it (the scheduler's invariant 2
//! holds across it). So, while the nodes' clocks differ by less than a
//! third of the lease, no two nodes run rounds of one visit type at once.
//!
//! Each visit type's lease has a keeper task: it asks the store for the
//! lease (take or renew) a third of the lease after its last ask, sooner
//! after an error, and when another node holds it, as that holding expires;
//! it releases the lease when the loop stops, so that another node takes
//! over at once after an orderly shutdown.

mod lease;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::lease::{Answer, Hold, Timing, after_ask};
use super::{Scheduler, VisitQueue};
use crate::clock::{SharedClock, UnixMillis};
use crate::store::leases::LeaseStore;

/// What the rounds loop needs to hold the rounds' leases.
#[derive(Clone, Debug)]
struct RoundsLease {
    /// The store of the leases (the node's store).
    store: Arc<dyn LeaseStore>,
    /// This node's name in the cluster: the holder the leases name.
    node: String,
}

/// The name of the lease of a visit type's rounds.
pub(crate) fn lease_name(visit_type: &str) -> String {
    format!("rounds/{visit_type}")
}

/// How long a release on shutdown may take before it is given up (the lease
/// then expires on its own).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs rounds of every visit type some lister listed whose lease (in
/// `leases`, held as `node`: this node's name in the cluster,
/// `cluster.advertise` else its listen address) this node holds, until
/// `stop`: again after `round_interval` when a round sent visits, after
/// `idle_interval` when it sent none or failed. Returns at once when
/// `scheduler.rounds_region` names a region other than `region` (this
/// node's `cluster.region`).
pub async fn run_rounds(
    scheduler: Arc<Scheduler>,
    queue: Arc<dyn VisitQueue>,
    clock: SharedClock,
    leases: Arc<dyn LeaseStore>,
    node: String,
    region: String,
    stop: CancellationToken,
) {
    let config = scheduler.config().clone();
    if let Some(rounds_region) = config.rounds_region.as_ref().filter(|r| **r != region) {
        tracing::info!(rounds_region, region, "this node runs no rounds: scheduler.rounds_region names another region");
        return;
    }
    let lease = RoundsLease { store: leases, node };
    let timing = Timing::new(config.rounds_lease);
    let gained = Arc::new(Notify::new());
    // Stopped only once the loop is out of its last round, so that no
    // other node takes a lease over while that round runs. Dropped with
    // this loop (a panic, an abort), the keepers stop with it.
    let stop_keepers = CancellationToken::new();
    let mut keeper_tasks = JoinSet::new();
    let mut keepers: BTreeMap<String, Keeper> = BTreeMap::new();
    let mut due: BTreeMap<String, UnixMillis> = BTreeMap::new();
    loop {
        match scheduler.visit_types().await {
            Ok(types) => {
                for visit_type in types {
                    let keeper = keepers.entry(visit_type.clone()).or_insert_with(|| {
                        let keep = Keep::new(&visit_type, &lease, clock.clone(), timing, gained.clone());
                        let keeper = Keeper { watch: keep.sender.subscribe() };
                        keeper_tasks.spawn(keep.run(stop_keepers.clone()));
                        keeper
                    });
                    let now = clock.now_ms();
                    let Some(hold) = keeper.hold().filter(|h| h.runs_rounds(now, timing)) else {
                        // Not ours: due as soon as it is.
                        due.remove(&visit_type);
                        continue;
                    };
                    if due.get(&visit_type).is_some_and(|&at| at > now) {
                        continue;
                    }
                    let mut watch = keeper.watch.clone();
                    let round = scheduler.run_round(&visit_type, queue.as_ref(), now);
                    let wait = tokio::select! {
                        report = round => match report {
                            Ok(report) if report.sent() > 0 => {
                                tracing::info!(
                                    visit_type,
                                    sent = report.sent(),
                                    slots = report.slots,
                                    woken = report.woken,
                                    token = hold.token,
                                    "round"
                                );
                                config.round_interval
                            }
                            Ok(_) => config.idle_interval,
                            Err(error) => {
                                tracing::warn!(visit_type, %error, "round failed");
                                config.idle_interval
                            }
                        },
                        () = lost(&mut watch, hold.token, timing, &clock) => {
                            tracing::warn!(visit_type, token = hold.token, "the rounds' lease ran out during a round: stopped it");
                            due.remove(&visit_type);
                            continue;
                        }
                    };
                    due.insert(visit_type, now + crate::clock::millis(wait));
                }
            }
            Err(error) => tracing::warn!(%error, "reading the listers"),
        }
        let now = clock.now_ms();
        let next = due
            .values()
            .min()
            .map_or(config.round_interval, |&at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)));
        tokio::select! {
            () = stop.cancelled() => break,
            () = gained.notified() => {}
            () = tokio::time::sleep(next.min(config.round_interval)) => {}
        }
    }
    stop_keepers.cancel();
    while keeper_tasks.join_next().await.is_some() {}
}

/// Resolves when `token`'s holding no longer lets rounds run: the keeper
/// lost or replaced it, or the time it ran until came by `clock`.
async fn lost(watch: &mut watch::Receiver<Option<Hold>>, token: u64, timing: Timing, clock: &SharedClock) {
    loop {
        let current = *watch.borrow_and_update();
        let Some(hold) = current.filter(|h| h.token == token) else { return };
        let left = hold.runs_until(timing) - clock.now_ms();
        if left <= 0 {
            return;
        }
        let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
        tokio::select! {
            () = tokio::time::sleep(left) => {}
            changed = watch.changed() => if changed.is_err() { return },
        }
    }
}

/// What the keeper of one visit type's lease last knew.
struct Keeper {
    watch: watch::Receiver<Option<Hold>>,
}

impl Keeper {
    fn hold(&self) -> Option<Hold> {
        *self.watch.borrow()
    }
}

/// A keeper task's state.
struct Keep {
    name: String,
    store: Arc<dyn LeaseStore>,
    node: String,
    clock: SharedClock,
    timing: Timing,
    sender: watch::Sender<Option<Hold>>,
    gained: Arc<Notify>,
}

impl Keep {
    fn new(visit_type: &str, lease: &RoundsLease, clock: SharedClock, timing: Timing, gained: Arc<Notify>) -> Keep {
        Keep {
            name: lease_name(visit_type),
            store: lease.store.clone(),
            node: lease.node.clone(),
            clock,
            timing,
            sender: watch::channel(None).0,
            gained,
        }
    }

    async fn run(self, stop: CancellationToken) {
        let (name, timing) = (self.name.as_str(), self.timing);
        let mut hold: Option<Hold> = None;
        loop {
            let asked_at = self.clock.now_ms();
            let answer = tokio::select! {
                () = stop.cancelled() => break,
                answer = self.ask(asked_at) => answer,
            };
            let now = self.clock.now_ms();
            let (next, wait) = after_ask(timing, hold, asked_at, answer, now);
            match (hold, next) {
                (None, Some(new)) => tracing::info!(lease = name, token = new.token, "took the rounds' lease"),
                (Some(old), Some(new)) if old.token != new.token => {
                    tracing::warn!(
                        lease = name,
                        old = old.token,
                        new = new.token,
                        "the rounds' lease lapsed; took it again"
                    )
                }
                (Some(old), None) => tracing::warn!(lease = name, token = old.token, "lost the rounds' lease"),
                _ => {}
            }
            let gained = next.is_some_and(|n| hold.is_none_or(|h| h.token != n.token));
            hold = next;
            self.sender.send_replace(hold);
            if gained {
                self.gained.notify_one();
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.sender.send_replace(None);
        if let Some(hold) = hold {
            let release = self.store.release(name, &self.node, hold.token);
            match tokio::time::timeout(RELEASE_TIMEOUT, release).await {
                Ok(Ok(released)) => {
                    tracing::info!(lease = name, token = hold.token, released, "released the rounds' lease")
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = name, %error, "releasing the rounds' lease (it expires on its own)")
                }
                Err(_) => tracing::warn!(lease = name, "releasing the rounds' lease timed out (it expires on its own)"),
            }
        }
    }

    /// One ask of the store, within a third of the lease: an answer later
    /// than that would come too late to count.
    async fn ask(&self, asked_at: UnixMillis) -> Answer {
        let acquire = self.store.acquire(&self.name, &self.node, asked_at, self.timing.ttl());
        match tokio::time::timeout(self.timing.renew_every(), acquire).await {
            Ok(Ok(Some(lease))) => Answer::Held { token: lease.token },
            Ok(Ok(None)) => {
                let read = tokio::time::timeout(self.timing.renew_every(), self.store.read(&self.name)).await;
                Answer::HeldByOther { expires_at: read.ok().and_then(Result::ok).flatten().map(|l| l.expires_at_ms) }
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = self.name, %error, "asking for the rounds' lease");
                Answer::Failed
            }
            Err(_) => {
                tracing::warn!(lease = self.name, "asking for the rounds' lease timed out");
                Answer::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Instant;

    use async_trait::async_trait;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::clock::{Clock, SystemClock};
    use crate::store::embedded::EmbeddedStore;
    use crate::visits::{Backlog, ListedReport, SchedulerConfig, Visit, VisitQueueError};

    /// A queue that remembers when each round asked it for its backlog.
    #[derive(Default)]
    struct Asked(Mutex<Vec<Instant>>);

    #[async_trait]
    impl VisitQueue for Asked {
        async fn backlog(&self, _: &str) -> Result<Backlog, VisitQueueError> {
            self.0.lock().unwrap().push(Instant::now());
            Ok(Backlog::default())
        }

        async fn enqueue(&self, _: &str, visits: &[Visit]) -> Result<Vec<bool>, VisitQueueError> {
            Ok(vec![true; visits.len()])
        }
    }

    impl Asked {
        fn rounds(&self) -> Vec<Instant> {
            self.0.lock().unwrap().clone()
        }
    }

    struct Node {
        queue: Arc<Asked>,
        stop: CancellationToken,
        task: JoinHandle<()>,
    }

    fn config() -> SchedulerConfig {
        SchedulerConfig {
            rounds_lease: Duration::from_secs(1),
            round_interval: Duration::from_millis(20),
            idle_interval: Duration::from_millis(20),
            ..SchedulerConfig::default()
        }
    }

    fn start(store: &Arc<EmbeddedStore>, name: &str, config: SchedulerConfig, region: &str) -> Node {
        let scheduler = Arc::new(Scheduler::new(store.clone(), config, 7));
        let queue = Arc::new(Asked::default());
        let stop = CancellationToken::new();
        let clock: SharedClock = Arc::new(SystemClock);
        let rounds =
            run_rounds(scheduler, queue.clone(), clock, store.clone(), name.into(), region.into(), stop.clone());
        Node { queue, stop, task: tokio::spawn(rounds) }
    }

    async fn listed(store: &Arc<EmbeddedStore>) {
        let scheduler = Scheduler::new(store.clone(), config(), 1);
        let report = ListedReport {
            url: "https://x.example/a".into(),
            visit_type: "git".into(),
            last_update: None,
            is_fork: false,
            extra_loader_arguments: String::new(),
        };
        scheduler.record_origins("l", &[report], SystemClock.now_ms()).await.expect("record");
    }

    #[tokio::test]
    async fn a_single_node_takes_the_lease_and_runs_its_first_round_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        listed(&store).await;
        let started = Instant::now();
        let node = start(&store, "solo", config(), "");
        while node.queue.rounds().is_empty() {
            assert!(started.elapsed() < Duration::from_millis(500), "no round in 500 ms");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        node.stop.cancel();
        node.task.await.unwrap();
        let lease = store.read("rounds/git").await.unwrap().expect("the lease");
        assert_eq!((lease.holder.as_str(), lease.token, lease.expires_at_ms), ("solo", 1, 0), "released on stop");
    }

    /// Two nodes on one store: one runs the rounds; killed (no release), the
    /// other takes over within the lease and a third, and their rounds
    /// never overlap; stopped in order, it hands over at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_node_at_a_time_runs_the_rounds_and_another_takes_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        listed(&store).await;
        // A lease of 3 s: its holder renews it every second, so a holding
        // that expires ends at least 2 s after the holder's stop, and a
        // handover within 1.6 s shows the release, with room for a loaded
        // machine (at 1 s, a 600-ms bound failed once in CI).
        let config = || SchedulerConfig { rounds_lease: Duration::from_secs(3), ..config() };
        let nodes = [start(&store, "a", config(), ""), start(&store, "b", config(), "")];
        let started = Instant::now();
        let holder = loop {
            let lease = store.read("rounds/git").await.unwrap();
            let runs = |node: &Node| node.queue.rounds().len() > 5;
            match lease {
                Some(lease) if runs(&nodes[0]) || runs(&nodes[1]) => break lease.holder,
                _ => assert!(started.elapsed() < Duration::from_secs(10), "no node ran 6 rounds in 10 s"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let (dying, other) = if holder == "a" { (&nodes[0], &nodes[1]) } else { (&nodes[1], &nodes[0]) };
        assert!(dying.queue.rounds().len() > 5, "the holder runs the rounds");
        assert!(other.queue.rounds().is_empty(), "the other runs none");
        dying.task.abort();
        let died = Instant::now();
        while other.queue.rounds().is_empty() {
            assert!(died.elapsed() < Duration::from_millis(4_800), "no takeover within 4.8 s of a 3 s lease");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let last_of_dead = dying.queue.rounds().into_iter().max().unwrap();
        assert!(last_of_dead < other.queue.rounds()[0], "no overlap");
        let lease = store.read("rounds/git").await.unwrap().unwrap();
        assert_eq!(lease.token, 2, "taken over at the next token");

        // Stopped in order, the new holder releases; a third node takes over at once.
        let third = start(&store, "c", config(), "");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(third.queue.rounds().is_empty());
        other.stop.cancel();
        let stopped = Instant::now();
        while third.queue.rounds().is_empty() {
            assert!(stopped.elapsed() < Duration::from_millis(1_600), "no handover within 1.6 s of a release");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        third.stop.cancel();
        third.task.await.unwrap();
    }

    #[tokio::test]
    async fn a_node_outside_the_rounds_region_runs_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        listed(&store).await;
        let only_eu = SchedulerConfig { rounds_region: Some("eu".into()), ..config() };
        let us = start(&store, "us-node", only_eu.clone(), "us");
        us.task.await.expect("returns at once");
        assert_eq!(store.read("rounds/git").await.unwrap(), None, "never asked for the lease");
        let eu = start(&store, "eu-node", only_eu, "eu");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!eu.queue.rounds().is_empty());
        eu.stop.cancel();
        eu.task.await.unwrap();
    }
}
