//! The firing loop of one node: it looks at the schedules of the shards the
//! cluster assigns it, fires the runs that are due, most urgent (earliest
//! `should_start_by`) first, fails the runs that outlived
//! `max_allowed_duration` or met a blackout, and probes the runs it has had
//! no news of. It acts on up to `schedules.concurrent_fires` schedules at
//! once, one per shard (a shard is one partition on Cassandra), and on one
//! schedule's runs in order.
//!
//! A look reads every schedule of its shards, so its cost grows with their
//! number (about 1 ms per 100 schedules on the embedded store); a node's
//! looks are `schedules.scan_interval` apart at most, sooner when a
//! schedule can start sooner.
//!
//! After an outage every overdue schedule is due at once; each fires one
//! run ([`decide`] never fires more), and the runs wait in their queue in
//! deadline order, so the catch-up is one run per schedule, the most urgent
//! first, never a storm of missed ticks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use tokio_util::sync::CancellationToken;

use super::{AddedRun, RunQueue, RunQueueError, ScheduleError, Schedules, run_dedup_id};
use crate::clock::{UnixMillis, millis};
use crate::core::schedules::{Calendar, Decision, Health, RunEnd, decide, ended, fired, health};
use crate::store::schedules::{ScheduleRecord, shard_of};

/// What one look did and saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FiringReport {
    /// Runs fired.
    pub fired: usize,
    /// Runs failed for outliving `max_allowed_duration` or meeting a blackout.
    pub failed_over_time: usize,
    /// Runs probed, and of those, how many had lost their task.
    pub probed: usize,
    /// Probed runs whose task was gone (added again).
    pub lost: usize,
    /// Schedules looked at, per health (paused ones included).
    pub ok: u64,
    /// See `ok`.
    pub warning: u64,
    /// See `ok`.
    pub error: u64,
    /// Paused schedules.
    pub paused: u64,
    /// The earliest time a schedule not yet in ERROR turns ERROR.
    pub first_error_at: Option<UnixMillis>,
    /// Per schedule (up to `schedules.max_schedule_series`): its id, health
    /// and when it turns ERROR.
    pub per_schedule: Vec<(String, Health, Option<UnixMillis>)>,
    /// When a schedule may fire next (`None`: nothing time-based).
    pub next_at: Option<UnixMillis>,
}

/// What a look decided to do to one schedule.
enum Action {
    Fire { nominal: UnixMillis, should_start_by: UnixMillis },
    FailOverTime { nominal: UnixMillis, reason: &'static str },
    Probe { nominal: UnixMillis },
}

/// The loop's memory between looks: when each run in flight was last
/// probed. Holds only runs seen in flight at the last look.
#[derive(Debug, Default)]
pub struct Firing {
    probed: HashMap<(String, UnixMillis), UnixMillis>,
}

impl Firing {
    /// One look at the schedules of `shards` at the node's current time.
    pub async fn look(
        &mut self,
        schedules: &Schedules,
        queue: &dyn RunQueue,
        shards: &[u32],
    ) -> Result<FiringReport, ScheduleError> {
        let mut report = FiringReport::default();
        let mut actions: Vec<(UnixMillis, String, Action)> = Vec::new();
        let mut in_flight = HashMap::new();
        let probe_after = millis(schedules.config().probe_after);
        for &shard in shards {
            let now = schedules.now();
            let records = match schedules.shard_records(shard).await {
                Ok(records) => records,
                Err(error) => {
                    // The other shards are looked at all the same.
                    tracing::warn!(shard, %error, "reading a shard of schedules");
                    continue;
                }
            };
            for record in records {
                let calendar = match Calendar::new(&record.spec.cadence, &record.spec.time_zone) {
                    Ok(calendar) => calendar,
                    Err(error) => {
                        tracing::warn!(schedule = record.id, %error, "a stored schedule no longer parses");
                        continue;
                    }
                };
                self.look_at(&record, &calendar, now, probe_after, &mut report, &mut actions, &mut in_flight);
            }
        }
        self.probed = in_flight;
        // The most urgent first: fires by deadline, failures and probes
        // before them (they free room for a run). The actions of one
        // schedule go in that order. Up to `schedules.concurrent_fires`
        // schedules are acted on at once, started in that order, but one
        // at a time per shard: on Cassandra a shard's schedules share a
        // partition, whose compare-and-sets would contend.
        actions.sort_by_key(|(key, _, _)| *key);
        let mut by_schedule: Vec<(String, Vec<Action>)> = Vec::new();
        let mut place: HashMap<String, usize> = HashMap::new();
        for (_, id, action) in actions {
            let at = *place.entry(id.clone()).or_insert_with(|| {
                by_schedule.push((id, Vec::new()));
                by_schedule.len() - 1
            });
            by_schedule[at].1.push(action);
        }
        let concurrency = schedules.config().concurrent_fires;
        let mut shard_turns: HashMap<u32, Arc<tokio::sync::Mutex<()>>> = HashMap::new();
        let acts = by_schedule.into_iter().map(|(id, actions)| {
            let turn = shard_turns.entry(shard_of(&id)).or_default().clone();
            async move {
                let _turn = turn.lock().await;
                act(schedules, queue, id, actions).await
            }
        });
        let mut acted = stream::iter(acts.collect::<Vec<_>>()).buffer_unordered(concurrency);
        while let Some(done) = acted.next().await {
            report.fired += done.fired;
            report.failed_over_time += done.failed_over_time;
            report.probed += done.probed;
            report.lost += done.lost;
        }
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    fn look_at(
        &self,
        record: &ScheduleRecord,
        calendar: &Calendar,
        now: UnixMillis,
        probe_after: i64,
        report: &mut FiringReport,
        actions: &mut Vec<(UnixMillis, String, Action)>,
        in_flight: &mut HashMap<(String, UnixMillis), UnixMillis>,
    ) {
        let (id, spec, stats) = (&record.id, &record.spec, &record.stats);
        let health = health(calendar, id, spec, stats, now);
        match health.health {
            Health::Ok => report.ok += 1,
            Health::Warning => report.warning += 1,
            Health::Error => report.error += 1,
        }
        if let Some(at) = health.error_at.filter(|_| health.health != Health::Error) {
            report.first_error_at = Some(report.first_error_at.map_or(at, |first| first.min(at)));
        }
        report.per_schedule.push((id.clone(), health.health, health.error_at));
        for run in &stats.runs {
            let over = |limit: Option<i64>| run.started_at.zip(limit).is_some_and(|(start, limit)| now - start > limit);
            if over(spec.max_allowed_duration_ms) {
                let action = Action::FailOverTime { nominal: run.nominal, reason: "outlived max_allowed_duration" };
                actions.push((i64::MIN, id.clone(), action));
                continue;
            }
            if run.started_at.is_some() && calendar.blackout_end(&spec.blackouts, now).is_some() {
                let action =
                    Action::FailOverTime { nominal: run.nominal, reason: "still running when a blackout began" };
                actions.push((i64::MIN, id.clone(), action));
                continue;
            }
            let key = (id.clone(), run.nominal);
            let last_news = run.started_at.unwrap_or(run.added_at);
            let last_probe = self.probed.get(&key).copied().unwrap_or(i64::MIN);
            // A run whose task was never added (a crash between the intent
            // and the add) is probed at once.
            let due = run.task_id == 0 || (now - last_news > probe_after && now - last_probe > probe_after);
            if due {
                actions.push((i64::MIN, id.clone(), Action::Probe { nominal: run.nominal }));
                in_flight.insert(key, now);
            } else {
                in_flight.insert(key, last_probe);
            }
        }
        if record.paused.is_some() {
            report.paused += 1;
            return;
        }
        match decide(calendar, id, spec, stats, now) {
            Decision::Fire { nominal, should_start_by, .. } => {
                actions.push((should_start_by, id.clone(), Action::Fire { nominal, should_start_by }));
            }
            Decision::Wait { until } => {
                if let Some(until) = until {
                    report.next_at = Some(report.next_at.map_or(until, |next| next.min(until)));
                }
            }
        }
    }
}

/// What the actions on one schedule did.
#[derive(Default)]
struct Acted {
    fired: usize,
    failed_over_time: usize,
    probed: usize,
    lost: usize,
}

/// Carries out `actions` on schedule `id`, in order.
async fn act(schedules: &Schedules, queue: &dyn RunQueue, id: String, actions: Vec<Action>) -> Acted {
    let mut done = Acted::default();
    for action in actions {
        let outcome = match action {
            Action::Fire { nominal, should_start_by } => {
                let fired = fire(schedules, queue, &id, nominal, should_start_by).await;
                done.fired += usize::from(matches!(fired, Ok(true)));
                fired.map(drop)
            }
            Action::FailOverTime { nominal, reason } => {
                let still = |record: &ScheduleRecord, now| over_time(record, nominal, now);
                let failed = fail_run(schedules, &id, nominal, reason, still).await;
                done.failed_over_time += usize::from(matches!(failed, Ok(true)));
                failed.map(drop)
            }
            Action::Probe { nominal } => {
                done.probed += 1;
                let lost = probe(schedules, queue, &id, nominal).await;
                done.lost += usize::from(matches!(lost, Ok(true)));
                lost.map(drop)
            }
        };
        match outcome {
            Ok(()) | Err(ScheduleError::NotFound(_)) => {}
            Err(error) => tracing::warn!(schedule = id, %error, "firing"),
        }
    }
    done
}

/// Fires the run of `id` for tick `nominal`: the intent first, then the
/// task (invariant 2 of [`super`]). False when the schedule no longer
/// decides so (another node fired it, it was paused).
async fn fire(
    schedules: &Schedules,
    queue: &dyn RunQueue,
    id: &str,
    nominal: UnixMillis,
    should_start_by: UnixMillis,
) -> Result<bool, ScheduleError> {
    let mut written = false;
    let record = schedules
        .modify(id, |record, now| {
            written = false;
            if record.paused.is_some() {
                return Ok(false);
            }
            let Ok(calendar) = Calendar::new(&record.spec.cadence, &record.spec.time_zone) else { return Ok(false) };
            let Decision::Fire { nominal: n, should_start_by: should, missed, overlap_skipped } =
                decide(&calendar, &record.id, &record.spec, &record.stats, now)
            else {
                return Ok(false);
            };
            if n != nominal {
                return Ok(false);
            }
            fired(&mut record.spec, &mut record.stats, n, should, 0, now);
            record.stats.counts.missed_catchup_window += missed;
            record.stats.counts.overlap_skipped += overlap_skipped;
            written = true;
            Ok(true)
        })
        .await?;
    if !written {
        return Ok(false);
    }
    let Some(added) = add_or_fail(schedules, queue, &record, nominal, should_start_by).await? else { return Ok(false) };
    set_task(schedules, id, nominal, added.task_id).await?;
    tracing::debug!(schedule = id, nominal, task_id = added.task_id, "fired");
    Ok(true)
}

/// Adds the task of `record`'s run for `nominal` (under its dedup id, with
/// deadline `should_start_by`). A queue that refuses it for good fails the
/// run (`None`), rather than being asked again at every look.
async fn add_or_fail(
    schedules: &Schedules,
    queue: &dyn RunQueue,
    record: &ScheduleRecord,
    nominal: UnixMillis,
    should_start_by: UnixMillis,
) -> Result<Option<AddedRun>, ScheduleError> {
    let id = &record.id;
    match queue.add_run(&record.template, &run_dedup_id(id, nominal), should_start_by).await {
        Ok(added) => Ok(Some(added)),
        Err(RunQueueError::Refused(reason)) => {
            fail_run(schedules, id, nominal, &format!("its queue refused it: {reason}"), |_, _| true).await?;
            Ok(None)
        }
        Err(error @ RunQueueError::Unavailable(_)) => {
            Err(ScheduleError::Store(crate::store::StoreError::Unavailable(error.to_string())))
        }
    }
}

/// Records the task id of the run of `id` for `nominal`, if it has none.
async fn set_task(schedules: &Schedules, id: &str, nominal: UnixMillis, task_id: i64) -> Result<(), ScheduleError> {
    schedules
        .modify(id, |record, _| {
            let Some(run) = record.stats.runs.iter_mut().find(|r| r.nominal == nominal && r.task_id == 0) else {
                return Ok(false);
            };
            run.task_id = task_id;
            Ok(true)
        })
        .await
        .map(drop)
}

/// Fails the run of `id` for `nominal` for `reason`, if `still(record,
/// now)` holds of the record as it is when written (the look that decided
/// it may be stale). Its task is failed for good at its next heartbeat
/// ([`super::Schedules::run_may_go_on`]).
async fn fail_run(
    schedules: &Schedules,
    id: &str,
    nominal: UnixMillis,
    reason: &str,
    still: impl Fn(&ScheduleRecord, UnixMillis) -> bool,
) -> Result<bool, ScheduleError> {
    let mut failed = false;
    schedules
        .modify(id, |record, now| {
            failed = false;
            let Some(task_id) = record.stats.runs.iter().find(|r| r.nominal == nominal).map(|r| r.task_id) else {
                return Ok(false);
            };
            if !still(record, now) {
                return Ok(false);
            }
            failed = ended(&record.spec, &mut record.stats, task_id, RunEnd::Failed, true, now);
            Ok(failed)
        })
        .await?;
    if failed {
        tracing::warn!(schedule = id, nominal, reason, "run failed");
    }
    Ok(failed)
}

/// Whether the run of `nominal` in `record` is over its time at `now`:
/// started longer ago than `max_allowed_duration`, or running while a
/// blackout holds.
fn over_time(record: &ScheduleRecord, nominal: UnixMillis, now: UnixMillis) -> bool {
    let Some(run) = record.stats.runs.iter().find(|r| r.nominal == nominal) else { return false };
    let Some(start) = run.started_at else { return false };
    if record.spec.max_allowed_duration_ms.is_some_and(|limit| now - start > limit) {
        return true;
    }
    Calendar::new(&record.spec.cadence, &record.spec.time_zone)
        .is_ok_and(|calendar| calendar.blackout_end(&record.spec.blackouts, now).is_some())
}

/// Adds the task of the run of `id` for `nominal` again under its dedup id:
/// nothing is added if it is still pending or running. If it was gone (a
/// dead letter no hook saw, a task never added), the new task is the run's
/// from now on, and a lost one counts as a failure. True when it was lost.
async fn probe(
    schedules: &Schedules,
    queue: &dyn RunQueue,
    id: &str,
    nominal: UnixMillis,
) -> Result<bool, ScheduleError> {
    let fresh = schedules.get(id).await?.record;
    let Some(run) = fresh.stats.runs.iter().find(|r| r.nominal == nominal).cloned() else { return Ok(false) };
    let Some(added) = add_or_fail(schedules, queue, &fresh, nominal, run.should_start_by).await? else {
        return Ok(true);
    };
    if added.duplicate && (run.task_id == 0 || run.task_id == added.task_id) {
        if run.task_id == 0 {
            set_task(schedules, id, nominal, added.task_id).await?;
        }
        return Ok(false);
    }
    let mut lost = false;
    schedules
        .modify(id, |record, now| {
            let Some(at) = record.stats.runs.iter().position(|r| r.nominal == nominal) else { return Ok(false) };
            let old = record.stats.runs[at].task_id;
            lost = old != 0 && old != added.task_id;
            if lost {
                ended(&record.spec, &mut record.stats, old, RunEnd::Failed, false, now);
            }
            if let Some(run) = record.stats.runs.iter_mut().find(|r| r.nominal == nominal) {
                run.task_id = added.task_id;
                run.started_at = None;
                run.attempt = 0;
            }
            Ok(true)
        })
        .await?;
    if lost {
        tracing::warn!(schedule = id, nominal, task_id = added.task_id, "run's task was gone; added again");
    }
    Ok(lost)
}

/// Looks at this node's schedules until `stop`: the shards `shards()`
/// names, again after `schedules.scan_interval` or sooner when a schedule
/// may fire sooner. `report` sees each look (metrics).
pub async fn run_firing(
    schedules: Arc<Schedules>,
    queue: Arc<dyn RunQueue>,
    shards: Arc<dyn Fn() -> Vec<u32> + Send + Sync>,
    report: Arc<dyn Fn(&FiringReport) + Send + Sync>,
    stop: CancellationToken,
) {
    let mut firing = Firing::default();
    let scan = schedules.config().scan_interval;
    loop {
        let started = std::time::Instant::now();
        let wait = match firing.look(&schedules, queue.as_ref(), &shards()).await {
            Ok(look) => {
                if look.fired + look.failed_over_time + look.lost > 0 {
                    tracing::info!(
                        took_ms = started.elapsed().as_millis() as u64,
                        fired = look.fired,
                        failed = look.failed_over_time,
                        lost = look.lost,
                        error = look.error,
                        "schedules"
                    );
                }
                report(&look);
                look.next_at.map_or(scan, |at| {
                    Duration::from_millis(u64::try_from(at - schedules.now()).unwrap_or(0))
                        .clamp(Duration::from_millis(50), scan)
                })
            }
            Err(error) => {
                tracing::warn!(%error, "looking at the schedules");
                scan
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
