//! The clients of a chaos run: producers that add tasks with unique
//! payloads, workers that poll, heartbeat, complete and fail them. Every
//! operation goes to the history with its outcome; a client whose node
//! fails moves to the next node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::chaos::history::{Entry, Op, Outcome};
use fairway::api::status::MAYBE_APPLIED;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;

pub(super) const QUEUE: &str = "chaos";

/// Where clients send their operations, and when the run began.
#[derive(Clone)]
pub(super) struct Recorder {
    began: Instant,
    entries: mpsc::UnboundedSender<Entry>,
    /// When the last delivery was recorded, in ms since the run began.
    last_delivery_ms: Arc<AtomicU64>,
    acknowledged_adds: Arc<AtomicU64>,
    deliveries: Arc<AtomicU64>,
    /// Which acknowledged adds have not been delivered yet (for the drain).
    pending: Arc<Mutex<Pending>>,
}

/// Payloads delivered so far, and those acknowledged and not delivered yet.
#[derive(Debug, Default)]
struct Pending {
    delivered: std::collections::HashSet<String>,
    waiting: std::collections::HashSet<String>,
}

impl Recorder {
    pub(super) fn new(began: Instant) -> (Recorder, mpsc::UnboundedReceiver<Entry>) {
        let (entries, received) = mpsc::unbounded_channel();
        let recorder = Recorder {
            began,
            entries,
            last_delivery_ms: Arc::new(AtomicU64::new(0)),
            acknowledged_adds: Arc::new(AtomicU64::new(0)),
            deliveries: Arc::new(AtomicU64::new(0)),
            pending: Arc::new(Mutex::new(Pending::default())),
        };
        (recorder, received)
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.began.elapsed().as_millis() as u64
    }

    pub(super) fn record(
        &self,
        process: u32,
        start_ms: u64,
        result: Result<(), &tonic::Status>,
        applied: Outcome,
        op: Op,
    ) {
        let (outcome, error) = match result {
            Ok(()) => (Outcome::Ok, String::new()),
            Err(status) => (classify(status, applied), format!("{:?}", status.code())),
        };
        match &op {
            Op::Deliver { value, .. } => {
                self.last_delivery_ms.fetch_max(self.now_ms(), Ordering::AcqRel);
                self.deliveries.fetch_add(1, Ordering::Relaxed);
                let mut pending = self.pending.lock().expect("not poisoned");
                pending.waiting.remove(value);
                pending.delivered.insert(value.clone());
            }
            Op::Add { value, .. } if outcome == Outcome::Ok => {
                self.acknowledged_adds.fetch_add(1, Ordering::Relaxed);
                let mut pending = self.pending.lock().expect("not poisoned");
                if !pending.delivered.contains(value) {
                    pending.waiting.insert(value.clone());
                }
            }
            _ => {}
        }
        let entry = Entry { process, start_ms, end_ms: self.now_ms(), outcome, error, op };
        let _ = self.entries.send(entry);
    }

    pub(super) fn acknowledged_adds(&self) -> u64 {
        self.acknowledged_adds.load(Ordering::Relaxed)
    }

    /// Deliveries so far, redeliveries included.
    pub(super) fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::Relaxed)
    }

    /// Acknowledged adds not delivered yet.
    pub(super) fn undelivered(&self) -> usize {
        self.pending.lock().expect("not poisoned").waiting.len()
    }

    /// How long since a task was last delivered.
    pub(super) fn since_last_delivery(&self) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(self.last_delivery_ms.load(Ordering::Acquire)))
    }

    pub(super) fn nemesis(&self, what: String) {
        let at = self.now_ms();
        let entry = Entry {
            process: 0,
            start_ms: at,
            end_ms: at,
            outcome: Outcome::Ok,
            error: String::new(),
            op: Op::Nemesis { what },
        };
        let _ = self.entries.send(entry);
    }
}

/// What a failed call says of its effect: certainly nothing (`UNAVAILABLE`
/// and refusals), or maybe something. `applied` is what an unknown failure
/// counts as for this operation.
fn classify(status: &tonic::Status, applied: Outcome) -> Outcome {
    if status.metadata().get(MAYBE_APPLIED).is_some() {
        return Outcome::Maybe;
    }
    match status.code() {
        Code::Unavailable
        | Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::Aborted
        | Code::NotFound
        | Code::ResourceExhausted => Outcome::Failed,
        _ => applied,
    }
}

/// What the nemesis asks of the clients: a node to stay away from (as a
/// load balancer that drained it would), producers and workers to hold
/// off, workers to rush through their tasks, producers to start new keys.
#[derive(Debug, Default)]
pub(super) struct Traffic {
    avoided: Mutex<Option<String>>,
    producers_held: AtomicBool,
    workers_held: AtomicBool,
    workers_rushed: AtomicBool,
    /// Part of every fairness key: a new generation is a set of new keys.
    key_generation: AtomicU64,
    /// Workers between a poll and the end of its task's completion.
    workers_busy: AtomicUsize,
    /// Whether a fault is being injected now (for [`Traffic::answers`]).
    in_fault: AtomicBool,
    /// Every answer clients got, by node, call, phase and gRPC code.
    answers: Mutex<BTreeMap<AnswerKey, u64>>,
}

/// Where an answer came from: the node, the call (`AddTask`, `PollTask`,
/// …), whether a fault was being injected, and its gRPC code (`Ok` for success).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct AnswerKey {
    pub node: String,
    pub call: &'static str,
    pub during_fault: bool,
    pub code: String,
}

impl Traffic {
    pub(super) fn avoid(&self, node: Option<String>) {
        *self.avoided.lock().expect("not poisoned") = node;
    }

    fn avoids(&self, node: &str) -> bool {
        self.avoided.lock().expect("not poisoned").as_deref() == Some(node)
    }

    pub(super) fn hold_producers(&self, held: bool) {
        self.producers_held.store(held, Ordering::Release);
    }

    pub(super) fn hold_workers(&self, held: bool) {
        self.workers_held.store(held, Ordering::Release);
    }

    /// Workers take no time over their tasks (they are slow otherwise while
    /// faults run), and fail none.
    pub(super) fn rush_workers(&self, rushed: bool) {
        self.workers_rushed.store(rushed, Ordering::Release);
    }

    /// Producers add under keys never seen before from now on.
    pub(super) fn new_keys(&self) {
        self.key_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// No worker is polling or busy with a task.
    pub(super) fn workers_idle(&self) -> bool {
        self.workers_busy.load(Ordering::Acquire) == 0
    }

    /// The nemesis is injecting a fault (`true`) or has healed it.
    pub(super) fn set_fault(&self, on: bool) {
        self.in_fault.store(on, Ordering::Release);
    }

    /// Counts an answer `node` gave to `call`: its gRPC code, `Ok`, or
    /// `Empty` for a poll that returned no task. A failure the client made
    /// itself (no connection, its deadline passed: the status carries the
    /// transport's error) is marked `(client side)`.
    fn count<T>(&self, node: &str, call: &'static str, result: &Result<T, tonic::Status>, empty: bool) {
        let code = match result {
            Ok(_) if empty => "Empty".to_owned(),
            Ok(_) => "Ok".to_owned(),
            Err(status) if std::error::Error::source(status).is_some() => {
                format!("{:?} (client side)", status.code())
            }
            Err(status) => format!("{:?}", status.code()),
        };
        let key = AnswerKey { node: node.to_owned(), call, during_fault: self.in_fault.load(Ordering::Acquire), code };
        *self.answers.lock().expect("not poisoned").entry(key).or_default() += 1;
    }

    /// Every answer counted so far.
    pub(super) fn answers(&self) -> BTreeMap<AnswerKey, u64> {
        self.answers.lock().expect("not poisoned").clone()
    }
}

/// Counts a worker busy while it lives.
struct Busy<'a>(&'a Traffic);

impl<'a> Busy<'a> {
    fn new(traffic: &'a Traffic) -> Busy<'a> {
        traffic.workers_busy.fetch_add(1, Ordering::AcqRel);
        Busy(traffic)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.workers_busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a client that moved away from its home node stays away.
const RETURN_HOME_AFTER: Duration = Duration::from_secs(5);

/// A client that sends to one node at a time and moves on when it fails
/// or when the nemesis asks clients to avoid it. It goes back to its home
/// node a while later, as clients behind a load balancer come back to a
/// node that restarted: otherwise every fault would herd more clients onto
/// fewer nodes, and a run would end up exercising one node.
pub(super) struct Client {
    nodes: Vec<String>,
    home: usize,
    turn: usize,
    /// When the client last left its home node, while it is away.
    away_since: Option<Instant>,
    client: Option<MatchingClient<Channel>>,
    traffic: Arc<Traffic>,
}

impl Client {
    pub(super) fn new(nodes: Vec<String>, home: usize, traffic: Arc<Traffic>) -> Client {
        let home = home % nodes.len();
        Client { nodes, home, turn: home, away_since: None, client: None, traffic }
    }

    /// The node to send to at `now`: home once the client has been away
    /// for [`RETURN_HOME_AFTER`] and home is not avoided; else the current
    /// node unless it is avoided (at most one node is: the next is not).
    fn node_at(&self, now: Instant) -> usize {
        let current = self.turn % self.nodes.len();
        let due_home = self.away_since.is_some_and(|left| now.duration_since(left) >= RETURN_HOME_AFTER);
        if current != self.home && due_home && !self.traffic.avoids(&self.nodes[self.home]) {
            self.home
        } else if self.traffic.avoids(&self.nodes[current]) {
            (current + 1) % self.nodes.len()
        } else {
            current
        }
    }

    fn get(&mut self) -> MatchingClient<Channel> {
        let node = self.node_at(Instant::now());
        if node != self.turn % self.nodes.len() {
            self.move_to(node);
        }
        self.client
            .get_or_insert_with(|| {
                let address = &self.nodes[self.turn];
                let endpoint = Endpoint::from_shared(format!("http://{address}"))
                    .expect("a node address")
                    .connect_timeout(Duration::from_secs(1))
                    // Shorter than any pause: a client moves to another node.
                    .timeout(Duration::from_secs(2));
                MatchingClient::new(endpoint.connect_lazy())
            })
            .clone()
    }

    /// The node the last call went to (calls move on only after their answer is counted).
    fn node(&self) -> &str {
        &self.nodes[self.turn % self.nodes.len()]
    }

    /// Counts the answer of the call just made through [`Self::get`].
    fn count<T>(&self, call: &'static str, result: &Result<T, tonic::Status>) {
        self.traffic.count(self.node(), call, result, false);
    }

    fn next_node(&mut self) {
        self.move_to((self.turn + 1) % self.nodes.len());
    }

    fn move_to(&mut self, node: usize) {
        if node == self.home {
            self.away_since = None;
        } else if self.turn == self.home {
            self.away_since = Some(Instant::now());
        }
        self.turn = node;
        self.client = None;
    }

    /// The queue as the current node describes it, or `None` (and the next node next time).
    pub(super) async fn describe(&mut self, request: pb::DescribeQueueRequest) -> Option<pb::DescribeQueueResponse> {
        let described = self.get().describe_queue(request).await;
        self.count("DescribeQueue", &described);
        match described {
            Ok(response) => Some(response.into_inner()),
            Err(_) => {
                self.next_node();
                None
            }
        }
    }

    pub(super) async fn create_queue(&mut self, request: pb::CreateQueueRequest) -> Result<(), tonic::Status> {
        let created = self.get().create_queue(request).await.map(|_| ());
        self.count("CreateQueue", &created);
        if created.is_err() {
            self.next_node();
        }
        created
    }

    /// `MoveQueue` through the current node (the next node next time if it fails).
    pub(super) async fn move_queue(
        &mut self,
        request: pb::MoveQueueRequest,
    ) -> Result<pb::MoveQueueResponse, tonic::Status> {
        let moved = self.get().move_queue(request).await.map(tonic::Response::into_inner);
        self.count("MoveQueue", &moved);
        if moved.is_err() {
            self.next_node();
        }
        moved
    }
}

/// Adds tasks `p{process}-{n}` until `stop`, one at a time, `pause` apart.
/// Keys change every 100 tasks, so that new keys keep arriving.
pub(super) async fn produce(
    process: u32,
    mut client: Client,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
    pause: Duration,
) {
    let mut n = 0u64;
    let traffic = client.traffic.clone();
    while !stop.load(Ordering::Acquire) {
        if traffic.producers_held.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let value = format!("p{process}-{n}");
        let generation = traffic.key_generation.load(Ordering::Acquire);
        let key = format!("k{process}-{generation}-{}", n / 100);
        let spec =
            pb::TaskSpec { fairness_key: key.clone(), payload: value.clone().into_bytes(), ..Default::default() };
        let start = recorder.now_ms();
        let result = client.get().add_task(pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec) }).await;
        client.count("AddTask", &result);
        recorder.record(process, start, result.as_ref().map(|_| ()), Outcome::Maybe, Op::Add { value, key });
        if result.is_err() {
            client.next_node();
        }
        n += 1;
        tokio::time::sleep(pause).await;
    }
}

/// Polls until `stop`; completes nine tasks in ten (heartbeating one in
/// ten first) and fails the tenth (retryable). Each task takes `busy` while
/// `slow` is set: workers slower than the producers keep a backlog waiting,
/// as loader workers on visits do.
pub(super) async fn work(
    process: u32,
    mut client: Client,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
    slow: Arc<AtomicBool>,
    busy: Duration,
) {
    let mut n = 0u64;
    let traffic = client.traffic.clone();
    while !stop.load(Ordering::Acquire) {
        if traffic.workers_held.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let _busy = Busy::new(&traffic);
        let start = recorder.now_ms();
        let request = pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: format!("w{process}"),
            max_wait: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
        };
        let polled = client.get().poll_task(request).await;
        let empty = polled.as_ref().is_ok_and(|response| response.get_ref().task.is_none());
        client.traffic.count(client.node(), "PollTask", &polled, empty);
        let task = match polled {
            Ok(response) => response.into_inner().task,
            Err(_) => {
                client.next_node();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(task) = task else { continue };
        let value = String::from_utf8_lossy(&task.payload).into_owned();
        let token = task.lease_token.clone();
        let op = Op::Deliver {
            value: value.clone(),
            key: task.fairness_key.clone(),
            partition: task.partition,
            attempt: task.attempt,
            lease_token: token.clone(),
        };
        recorder.record(process, start, Ok(()), Outcome::Ok, op);
        if slow.load(Ordering::Acquire) && !traffic.workers_rushed.load(Ordering::Acquire) {
            tokio::time::sleep(busy).await;
        }
        n += 1;
        if n % 10 == 3 {
            let beat = client.get().heartbeat_task(pb::HeartbeatTaskRequest { lease_token: token.clone() }).await;
            client.count("HeartbeatTask", &beat);
        }
        let start = recorder.now_ms();
        // A failed task comes back as a delayed record, and a write that
        // promotes one carries the metadata: workers in a rush only complete.
        if n % 10 == 7 && !traffic.workers_rushed.load(Ordering::Acquire) {
            let request = pb::FailTaskRequest {
                lease_token: token.clone(),
                retryable: true,
                message: "chaos".into(),
                retry_after: None,
            };
            let result = client.get().fail_task(request).await;
            client.count("FailTask", &result);
            let op = Op::Fail { value, lease_token: token };
            recorder.record(process, start, result.as_ref().map(|_| ()), Outcome::Maybe, op);
        } else {
            let result = client
                .get()
                .complete_task(pb::CompleteTaskRequest { lease_token: token.clone(), ..Default::default() })
                .await;
            client.count("CompleteTask", &result);
            let op = Op::Complete { value, lease_token: token };
            recorder.record(process, start, result.as_ref().map(|_| ()), Outcome::Maybe, op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(home: usize, traffic: &Arc<Traffic>) -> Client {
        Client::new(vec!["a:1".into(), "b:1".into(), "c:1".into()], home, traffic.clone())
    }

    #[test]
    fn a_client_sent_away_comes_home_once_its_node_is_no_longer_avoided() {
        let traffic = Arc::new(Traffic::default());
        let mut client = client(0, &traffic);
        let left = Instant::now();
        traffic.avoid(Some("a:1".into()));
        assert_eq!(client.node_at(left), 1, "an avoided node is passed over");
        client.move_to(1);
        assert_eq!(client.node_at(left + RETURN_HOME_AFTER * 2), 1, "home is still avoided");
        traffic.avoid(None);
        assert_eq!(client.node_at(left + RETURN_HOME_AFTER / 2), 1, "too soon to go back");
        assert_eq!(client.node_at(left + RETURN_HOME_AFTER * 2), 0, "back home");
    }

    #[test]
    fn a_client_whose_node_failed_moves_on_and_comes_home_later() {
        let traffic = Arc::new(Traffic::default());
        let mut client = client(2, &traffic);
        let left = Instant::now();
        client.next_node();
        assert_eq!(client.node_at(left), 0, "the next node, round");
        client.next_node();
        assert_eq!(client.node_at(left), 1, "and the next one: away since it first left");
        assert_eq!(client.node_at(left + RETURN_HOME_AFTER * 2), 2);
        client.move_to(2);
        assert_eq!(client.away_since, None, "at home");
    }
}
