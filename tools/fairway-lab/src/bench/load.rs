//! Offered load and paced workers against one queue, with a trace of every
//! add and every dispatch: the raw material of the fairness scenarios.
//!
//! Producers offer tasks at a steady rate (open loop: a slow server does not
//! slow the offer), choosing each task's key with a function of its number
//! and a random draw. Workers take one task per poll, at most `capacity`
//! tasks per second together, so that the offer can exceed what is served:
//! the queue is saturated and its order decides who waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use fairway::proto::v1 as pb;

use super::server::{Client, add_batch};
use crate::figures::progress::Progress;
use crate::figures::stats::Pace;

/// AddTasks calls of the offered load in flight at once, at most.
const MAX_ADDS_IN_FLIGHT: usize = 64;

/// A fairness key of the load.
#[derive(Clone, Debug)]
pub(super) struct LoadKey {
    pub name: String,
    pub weight: f64,
    pub priority: u32,
}

impl LoadKey {
    pub(super) fn new(name: impl Into<String>) -> LoadKey {
        LoadKey { name: name.into(), weight: 1.0, priority: 0 }
    }
}

/// Picks the key of task number `n` given a uniform draw in `[0, 1)`.
pub(super) type Picker = Arc<dyn Fn(u64, f64) -> usize + Send + Sync>;

/// How the offered load is cut into AddTasks calls.
#[derive(Clone, Debug)]
pub(super) enum Calls {
    /// One producer: every 10 ms, one call of every task due, each task's
    /// key drawn by the load's `pick`, so that the keys share calls.
    Mixed,
    /// A producer per key, as tenants that each call the service: key `k`
    /// offers `shares[k]` of the load's rate (the shares sum to 1) in calls
    /// of its own tasks alone, each task at an even pace from a random
    /// start, at most one call per 10 ms.
    PerKey(Vec<f64>),
}

/// What to run.
pub(super) struct Load {
    pub keys: Vec<LoadKey>,
    /// Tasks offered per second; `None`: all of `prefill` added before the workers start.
    pub rate: Option<f64>,
    pub calls: Calls,
    /// The key of each task prefilled, and of each offered with [`Calls::Mixed`].
    pub pick: Picker,
    /// Tasks added before the workers start.
    pub prefill: u64,
    /// Tasks the workers take per second together (`None`: as fast as they can).
    pub capacity: Option<f64>,
    pub workers: u32,
    /// The run ends after this long, or after `max_dispatches`.
    pub duration: Duration,
    pub max_dispatches: u64,
}

/// One task handed to a worker.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dispatch {
    /// Seconds from the start of the run.
    pub at: f64,
    pub key: u32,
    /// Seconds from the add being sent to the task's receipt.
    pub wait: f64,
    /// Seconds of `wait` from the answer to the task's AddTasks call to the
    /// first poll any worker sent after it (zero if the poll that took the
    /// task was sent before the answer): the wait for a free worker. Polls
    /// that came after that first one and took other tasks count as the
    /// server's, whatever order put those first.
    pub worker_wait: f64,
    /// The partition of the queue it came from.
    pub partition: u32,
}

impl Dispatch {
    /// The wait without [`Self::worker_wait`]: what the server took.
    pub(super) fn served_wait(&self) -> f64 {
        self.wait - self.worker_wait
    }
}

/// Everything a run added and dispatched, in time order.
#[derive(Debug, Default)]
pub(super) struct Trace {
    /// (seconds from the start, key) of each add, when it was sent.
    pub added: Vec<(f64, u32)>,
    /// The same adds at the time their AddTasks call answered: from then
    /// on the task waits in the queue.
    pub acknowledged: Vec<(f64, u32)>,
    /// For each add, seconds from sending its AddTasks call to the answer.
    pub add_waits: Vec<f64>,
    /// The key of each add leased at once (`sync_matched`: to a waiting
    /// poll, or held for the next one).
    pub leased_at_once: Vec<u32>,
    pub dispatched: Vec<Dispatch>,
    pub seconds: f64,
}

/// Runs `load` against `queue` and returns its trace.
pub(super) async fn run(client: &Client, queue: &str, load: Load, what: &str) -> anyhow::Result<Trace> {
    let epoch = Instant::now();
    let added = Arc::new(Mutex::new(Vec::new()));
    if load.prefill > 0 {
        let mut progress = Progress::new(format!("{what}: prefill"), load.prefill);
        let mut n = 0;
        while n < load.prefill {
            let size = 1000.min(load.prefill - n);
            send(client, queue, &load, n..n + size, None, epoch, &added).await?;
            n += size;
            progress.update(n, "");
        }
    }
    let started = Instant::now();
    let stop_at = started + load.duration;
    let dispatched = Arc::new(Mutex::new(Vec::new()));
    let polls = Arc::new(Mutex::new(Vec::new()));
    let taken = Arc::new(AtomicU64::new(0));
    let tickets = Arc::new(AtomicU64::new(0));
    let pace = load.capacity.map(Pace::new);
    let load = Arc::new(load);

    let producers: Vec<_> = match (load.rate, &load.calls) {
        (None, _) => Vec::new(),
        (Some(rate), Calls::Mixed) => vec![Offer { key: None, rate, start: 0.0 }],
        (Some(rate), Calls::PerKey(shares)) => shares
            .iter()
            .enumerate()
            .filter(|(_, share)| **share > 0.0)
            .map(|(key, share)| {
                let rate = rate * share;
                Offer { key: Some(key), rate, start: rand::random::<f64>() / rate }
            })
            .collect(),
    };
    let numbers = Arc::new(AtomicU64::new(load.prefill));
    let producers: Vec<_> = producers
        .into_iter()
        .map(|offer| {
            let sender = Sender {
                client: client.clone(),
                queue: queue.to_owned(),
                load: load.clone(),
                epoch,
                added: added.clone(),
            };
            tokio::spawn(offer.run(sender, started, stop_at, numbers.clone()))
        })
        .collect();
    let workers: Vec<_> = (0..load.workers)
        .map(|_| {
            let (mut client, queue, load) = (client.clone(), queue.to_owned(), load.clone());
            let (dispatched, polls, taken, tickets) =
                (dispatched.clone(), polls.clone(), taken.clone(), tickets.clone());
            tokio::spawn(async move {
                loop {
                    if let Some(pace) = &pace {
                        pace.wait_for(tickets.fetch_add(1, Ordering::Relaxed)).await;
                    }
                    if Instant::now() >= stop_at || taken.load(Ordering::Relaxed) >= load.max_dispatches {
                        return anyhow::Ok(());
                    }
                    let request = pb::PollTaskRequest {
                        queue: queue.clone(),
                        worker_id: "bench".into(),
                        max_wait: Some(prost_types::Duration { seconds: 0, nanos: 200_000_000 }),
                    };
                    let polled = epoch.elapsed().as_secs_f64();
                    polls.lock().await.push(polled);
                    let Some(task) = client.poll_task(request).await?.into_inner().task else { continue };
                    let (sent, key, call) = decode(&task.payload)?;
                    let now = epoch.elapsed().as_secs_f64();
                    dispatched.lock().await.push((
                        polled,
                        call,
                        Dispatch { at: now, key, wait: now - sent, worker_wait: 0.0, partition: task.partition },
                    ));
                    taken.fetch_add(1, Ordering::Relaxed);
                    let mut completer = client.clone();
                    tokio::spawn(async move {
                        let request = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
                        // A lost completion only brings the task back after its lease.
                        let _ = completer.complete_task(request).await;
                    });
                }
            })
        })
        .collect();
    // Progress in dispatches when the run ends after a number of them, else in seconds.
    let by_count = load.max_dispatches != u64::MAX;
    let total = if by_count { load.max_dispatches } else { load.duration.as_secs() };
    let mut progress = Progress::new(format!("{what} ({})", if by_count { "dispatches" } else { "seconds" }), total);
    let done = || if by_count { taken.load(Ordering::Relaxed) } else { started.elapsed().as_secs() };
    while Instant::now() < stop_at && taken.load(Ordering::Relaxed) < load.max_dispatches {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.update(done(), &format!("dispatched {}", taken.load(Ordering::Relaxed)));
    }
    progress.update(total, &format!("dispatched {}", taken.load(Ordering::Relaxed)));
    for producer in producers {
        producer.await??;
    }
    for worker in workers {
        worker.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let start = started.duration_since(epoch).as_secs_f64();
    let shift = |at: f64| at - start;
    let adds: Vec<Add> = std::mem::take(&mut *added.lock().await);
    let mut added: Vec<(f64, u32)> = adds.iter().map(|a| (shift(a.sent), a.key)).collect();
    let mut acknowledged: Vec<(f64, u32)> = adds.iter().map(|a| (shift(a.answered), a.key)).collect();
    let add_waits = adds.iter().map(|a| a.answered - a.sent).collect();
    let leased_at_once = adds.iter().filter(|a| a.at_once).map(|a| a.key).collect();
    let mut polls = std::mem::take(&mut *polls.lock().await);
    polls.sort_by(f64::total_cmp);
    let mut dispatched = with_worker_waits(std::mem::take(&mut *dispatched.lock().await), &adds, &polls);
    dispatched.iter_mut().for_each(|d| d.at = shift(d.at));
    added.sort_by(|a, b| a.0.total_cmp(&b.0));
    acknowledged.sort_by(|a, b| a.0.total_cmp(&b.0));
    dispatched.sort_by(|a, b| a.at.total_cmp(&b.at));
    Ok(Trace { added, acknowledged, add_waits, leased_at_once, dispatched, seconds })
}

/// One task added: when its AddTasks call was sent and answered (seconds
/// from the epoch), its key, the call (the number of its first task), and
/// whether it was leased at once.
#[derive(Clone, Copy, Debug)]
struct Add {
    sent: f64,
    answered: f64,
    key: u32,
    call: u64,
    at_once: bool,
}

/// The dispatches, each `(poll sent, add call, dispatch)`, with their wait
/// for a free worker: from the answer to the task's AddTasks call to the
/// first of `polls` (every poll's sending, in order) at or after it, if the
/// poll that took the task came after the answer.
fn with_worker_waits(dispatched: Vec<(f64, u64, Dispatch)>, adds: &[Add], polls: &[f64]) -> Vec<Dispatch> {
    let answered_at: std::collections::HashMap<u64, f64> = adds.iter().map(|a| (a.call, a.answered)).collect();
    dispatched
        .into_iter()
        .map(|(polled, call, mut dispatch)| {
            if let Some(&answered) = answered_at.get(&call)
                && polled >= answered
            {
                let first = polls[polls.partition_point(|&poll| poll < answered)..].first().map_or(polled, |&p| p);
                dispatch.worker_wait = first.min(polled) - answered;
            }
            dispatch
        })
        .collect()
}

/// One producer of the offered load: `rate` tasks per second from `start`
/// seconds into the run, of `key` alone or (`None`) of keys drawn by the
/// load's `pick`.
struct Offer {
    key: Option<usize>,
    rate: f64,
    start: f64,
}

/// What a producer needs to send its calls.
#[derive(Clone)]
struct Sender {
    client: Client,
    queue: String,
    load: Arc<Load>,
    epoch: Instant,
    added: Arc<Mutex<Vec<Add>>>,
}

/// The shortest time between two calls of one producer.
const CALL_EVERY: f64 = 0.010;

impl Offer {
    /// Seconds into the run of the next call after `sent` tasks, the last
    /// call at `last`: when the next task is due, but not within
    /// [`CALL_EVERY`] of the last call.
    fn next_call(&self, sent: u64, last: Option<f64>) -> f64 {
        let due = self.start + sent as f64 / self.rate;
        last.map_or(due, |last| due.max(last + CALL_EVERY))
    }

    /// The tasks due `at` seconds into the run, from the first (a task due
    /// within a nanosecond of `at` counts: `next_call`'s sum, multiplied
    /// back, can round below it).
    fn due_by(&self, at: f64) -> u64 {
        (((at - self.start + 1e-9) * self.rate).floor() as i64 + 1).max(0) as u64
    }

    /// Open loop: each call is sent on time whatever the answers to the
    /// earlier ones take, up to MAX_ADDS_IN_FLIGHT calls at once; tasks are
    /// numbered from `numbers`, shared by the producers so that a number
    /// names one task.
    async fn run(
        self,
        sender: Sender,
        started: Instant,
        stop_at: Instant,
        numbers: Arc<AtomicU64>,
    ) -> anyhow::Result<()> {
        let mut in_flight = tokio::task::JoinSet::new();
        let mut sent: u64 = 0;
        let mut last = None;
        loop {
            let at = self.next_call(sent, last);
            if started + Duration::from_secs_f64(at) >= stop_at {
                break;
            }
            tokio::time::sleep_until((started + Duration::from_secs_f64(at)).into()).await;
            last = Some(at);
            let due = self.due_by(started.elapsed().as_secs_f64());
            while sent < due {
                let size = 1000.min(due - sent);
                if in_flight.len() >= MAX_ADDS_IN_FLIGHT {
                    in_flight.join_next().await.expect("calls in flight")??;
                }
                let first = numbers.fetch_add(size, Ordering::Relaxed);
                let (sender, key) = (sender.clone(), self.key);
                in_flight.spawn(async move {
                    let Sender { client, queue, load, epoch, added } = sender;
                    send(&client, &queue, &load, first..first + size, key, epoch, &added).await
                });
                sent += size;
            }
        }
        while let Some(call) = in_flight.join_next().await {
            call??;
        }
        Ok(())
    }
}

/// Adds tasks number `range` of the load in one AddTasks call, all of
/// `key` or (`None`) each of the key the load's `pick` draws.
async fn send(
    client: &Client,
    queue: &str,
    load: &Load,
    range: std::ops::Range<u64>,
    key: Option<usize>,
    epoch: Instant,
    added: &Mutex<Vec<Add>>,
) -> anyhow::Result<()> {
    let now = epoch.elapsed().as_secs_f64();
    let call = range.start;
    let mut picked = Vec::with_capacity((range.end - range.start) as usize);
    let specs = range
        .map(|n| {
            let key = key.unwrap_or_else(|| (load.pick)(n, rand::random::<f64>()));
            picked.push((now, key as u32));
            let spec = &load.keys[key];
            pb::TaskSpec {
                fairness_key: spec.name.clone(),
                fairness_weight: spec.weight,
                priority: spec.priority,
                payload: encode(now, key as u32, call),
                ..Default::default()
            }
        })
        .collect();
    let at_once = add_batch(&mut client.clone(), queue, specs).await?;
    let answered = epoch.elapsed().as_secs_f64();
    let adds = picked.into_iter().zip(at_once).map(|((sent, key), at_once)| Add { sent, answered, key, call, at_once });
    added.lock().await.extend(adds);
    Ok(())
}

/// A task's payload: when its call was sent, its key and its call.
fn encode(sent: f64, key: u32, call: u64) -> Vec<u8> {
    let mut payload = sent.to_le_bytes().to_vec();
    payload.extend_from_slice(&key.to_le_bytes());
    payload.extend_from_slice(&call.to_le_bytes());
    payload
}

fn decode(payload: &[u8]) -> anyhow::Result<(f64, u32, u64)> {
    anyhow::ensure!(payload.len() == 20, "a task this run did not add ({} bytes)", payload.len());
    Ok((
        f64::from_le_bytes(payload[..8].try_into()?),
        u32::from_le_bytes(payload[8..12].try_into()?),
        u64::from_le_bytes(payload[12..].try_into()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatch(wait: f64) -> Dispatch {
        Dispatch { at: 10.0, key: 0, wait, worker_wait: 0.0, partition: 0 }
    }

    fn add(call: u64, sent: f64, answered: f64) -> Add {
        Add { sent, answered, key: 0, call, at_once: false }
    }

    /// The calls `offer` makes in its first `seconds`, each `(at, tasks)`,
    /// had every call been sent on time.
    fn calls(offer: &Offer, seconds: f64) -> Vec<(f64, u64)> {
        let (mut sent, mut last, mut calls) = (0, None, Vec::new());
        loop {
            let at = offer.next_call(sent, last);
            if at >= seconds {
                return calls;
            }
            let due = offer.due_by(at);
            calls.push((at, due - sent));
            (sent, last) = (due, Some(at));
        }
    }

    #[test]
    fn a_quiet_key_s_producer_sends_each_task_in_a_call_of_its_own_on_time() {
        let offer = Offer { key: Some(3), rate: 11.25, start: 0.05 };
        let calls = calls(&offer, 10.0);
        assert_eq!(calls.len(), 112, "{calls:?}");
        assert!(calls.iter().all(|&(_, tasks)| tasks == 1), "{calls:?}");
        assert_eq!(offer.due_by(0.049), 0, "none before its start");
        for (n, &(at, _)) in calls.iter().enumerate() {
            assert!((at - (0.05 + n as f64 / 11.25)).abs() < 1e-9, "call {n} at {at}");
        }
    }

    #[test]
    fn a_busy_producer_sends_what_is_due_at_most_every_10_ms() {
        let offer = Offer { key: None, rate: 2_025.0, start: 0.0 };
        let calls = calls(&offer, 10.0);
        let gaps = calls.windows(2).map(|w| w[1].0 - w[0].0);
        assert!(gaps.into_iter().all(|gap| gap >= CALL_EVERY - 1e-9));
        assert_eq!(calls.iter().map(|&(_, tasks)| tasks).sum::<u64>(), offer.due_by(calls.last().unwrap().0));
        assert!(calls[1..].iter().all(|&(_, tasks)| (20..=21).contains(&tasks)), "{calls:?}");
    }

    #[test]
    fn a_task_waits_for_a_worker_from_its_add_answered_to_the_first_poll_after() {
        // Two AddTasks calls: call 0 sent at 1.0 and answered at 1.5, call 10 at 2.0 and 2.25.
        let adds = [add(0, 1.0, 1.5), add(0, 1.0, 1.5), add(10, 2.0, 2.25)];
        let polls = [1.25, 1.75, 3.0, 4.0];
        let dispatched = vec![
            (4.0, 0, dispatch(9.0)),  // a poll came at 1.75 and took another task: 0.25, not 2.5
            (1.25, 0, dispatch(9.0)), // taken by a poll sent before the answer: no wait for a worker
            (3.0, 10, dispatch(8.0)), // the other call's answer counts
            (3.0, 99, dispatch(3.0)), // an add not in the trace: nothing to subtract
        ];
        let waits: Vec<f64> = with_worker_waits(dispatched, &adds, &polls).iter().map(|d| d.worker_wait).collect();
        assert_eq!(waits, [0.25, 0.0, 0.75, 0.0]);
        assert_eq!(Dispatch { worker_wait: 0.25, ..dispatch(9.0) }.served_wait(), 8.75);
    }

    #[test]
    fn a_payload_carries_its_sending_key_and_call() {
        assert_eq!(decode(&encode(1.25, 7, 1_000_001)).unwrap(), (1.25, 7, 1_000_001));
        assert!(decode(b"not ours").is_err());
    }
}
