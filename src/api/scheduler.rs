//! `fairway.v1.Scheduler`: what listers report, "save code now", and what
//! the scheduler knows; and the outcomes loader workers report when they
//! complete a `visits.*` task ([`VisitOutcomes`]). Every field is validated
//! before anything is written.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::RoutedVisits;
use super::access::{Rpc, authorize, authorize_add, caller, lister_resource};
use super::matching::TaskHook;
use super::routing::Origin;
use super::{convert, status};
use crate::clock::{SharedClock, UnixMillis};
use crate::core::visits::{ListedOrigin, ListerMetrics, VisitResult, VisitStatus};
use crate::model::{Limits, Priority, QueueName, TaskSpec, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::proto::v1::scheduler_server;
use crate::visits::queue::{is_visit_of, requested_dedup_id};
use crate::visits::{ListedReport, Scheduler, SchedulerConfig, Visit, origin_url, queue_name, visit_type_of};

pub use crate::visits::origin_url::MAX_URL_BYTES;
/// The longest lister name, in bytes.
pub const MAX_LISTER_BYTES: usize = 256;
/// The longest extra loader arguments, in bytes.
pub const MAX_LOADER_ARGUMENTS_BYTES: usize = 64 * 1024;
pub use crate::visits::queue::SAVE_CODE_NOW_LISTER;

fn invalid(field: &str, message: impl Into<String>) -> Status {
    status::invalid(ValidationError::new(field, message))
}

fn lister_name(field: &str, lister: &str) -> Result<(), Status> {
    if lister.is_empty() || lister.len() > MAX_LISTER_BYTES {
        return Err(invalid(field, format!("is {} bytes long; it must be 1 to {MAX_LISTER_BYTES}", lister.len())));
    }
    Ok(())
}

fn origin_url(field: &str, url: &str) -> Result<(), Status> {
    if url.is_empty() || url.len() > MAX_URL_BYTES {
        return Err(invalid(field, format!("is {} bytes long; it must be 1 to {MAX_URL_BYTES}", url.len())));
    }
    Ok(())
}

/// An origin URL to record for `lister`: as [`origin_url`], of an allowed
/// scheme with a host, on the lister's allow-list if it has one.
fn recorded_url(field: &str, url: &str, lister: &str, config: &SchedulerConfig) -> Result<(), Status> {
    origin_url::check(field, url, lister, &config.origin_schemes, &config.origin_hosts).map_err(status::invalid)
}

/// A visit type names a queue `visits.<type>`.
fn visit_type(field: &str, visit_type: &str) -> Result<(), Status> {
    if visit_type.is_empty() {
        return Err(invalid(field, "is empty; it names the queue visits.<visit_type>"));
    }
    validate::queue_name(field, &queue_name(visit_type)).map(|_| ()).map_err(status::invalid)
}

fn unix_ms(field: &str, at: &prost_types::Timestamp) -> Result<UnixMillis, Status> {
    convert::unix_ms(field, at).map_err(status::invalid)
}

/// A lister's counts for one visit type as the API gives them, at `now`:
/// the counts, and the coverage they say (lag, updates pending, rate).
fn lister_metrics(visit_type: String, m: &ListerMetrics, now: UnixMillis) -> pb::ListerMetrics {
    pb::ListerMetrics {
        visit_type,
        known: m.known,
        enabled: m.enabled,
        never_visited: m.never_visited,
        pending_changes: m.pending_changes,
        // A change dated after the server's clock (a forge's clock ahead) is
        // no lag.
        pending_lag_seconds: m.pending_age_ms(now).map_or(0, |ms| ms.max(0) / 1000),
        estimated_pending_updates: m.estimated_pending(now).max(0.0),
        mean_change_rate_per_day: m.mean_rate().unwrap_or(0.0),
        rated_origins: m.rated,
    }
}

fn listed_report(field: &str, origin: pb::ListedOrigin) -> Result<ListedReport, Status> {
    origin_url(&format!("{field}.url"), &origin.url)?;
    visit_type(&format!("{field}.visit_type"), &origin.visit_type)?;
    let last_update = origin.last_update.as_ref().map(|t| unix_ms(&format!("{field}.last_update"), t)).transpose()?;
    let arguments = &origin.extra_loader_arguments;
    if arguments.len() > MAX_LOADER_ARGUMENTS_BYTES {
        return Err(invalid(
            &format!("{field}.extra_loader_arguments"),
            format!("is {} bytes; the limit is {MAX_LOADER_ARGUMENTS_BYTES} bytes", arguments.len()),
        ));
    }
    if !arguments.is_empty() && !serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object()) {
        return Err(invalid(&format!("{field}.extra_loader_arguments"), "must be empty or a JSON object"));
    }
    Ok(ListedReport {
        url: origin.url,
        visit_type: origin.visit_type,
        last_update,
        is_fork: origin.is_fork,
        extra_loader_arguments: origin.extra_loader_arguments,
    })
}

/// The outcome a completion of a `visits.*` task carries, validated.
pub fn visit_outcome(result: &[u8], now: UnixMillis) -> Result<(String, VisitResult), Status> {
    let outcome = pb::VisitOutcome::decode(result).map_err(|e| {
        invalid(
            "result",
            format!("a visits.* task is completed with a fairway.v1.VisitOutcome; this one does not decode: {e}"),
        )
    })?;
    origin_url("result.origin_url", &outcome.origin_url)?;
    let status = match pb::VisitStatus::try_from(outcome.status) {
        Ok(pb::VisitStatus::Eventful | pb::VisitStatus::Uneventful) => VisitStatus::Successful,
        Ok(pb::VisitStatus::Failed) => VisitStatus::Failed,
        Ok(pb::VisitStatus::NotFound) => VisitStatus::NotFound,
        Ok(pb::VisitStatus::Unspecified) | Err(_) => {
            return Err(invalid("result.status", "must be EVENTFUL, UNEVENTFUL, FAILED or NOT_FOUND"));
        }
    };
    // A visit cannot have happened later than now: a date ahead would make
    // every true outcome after it look older, and be ignored.
    let visit_date = match &outcome.visit_date {
        Some(at) => unix_ms("result.visit_date", at)?.min(now),
        None => now,
    };
    let newest_change = outcome.newest_change.as_ref().map(|at| unix_ms("result.newest_change", at)).transpose()?;
    let snapshot = (!outcome.snapshot.is_empty()).then_some(outcome.snapshot);
    Ok((outcome.origin_url, VisitResult { status, snapshot, visit_date, newest_change }))
}

/// Records the outcomes of visits as their tasks complete.
#[derive(Clone, Debug)]
pub struct VisitOutcomes {
    /// The scheduler the outcomes are recorded in.
    pub scheduler: Arc<Scheduler>,
    /// The clock outcomes are recorded by (and dated by, when they carry no
    /// visit date).
    pub clock: SharedClock,
}

#[tonic::async_trait]
impl TaskHook for VisitOutcomes {
    /// Only the tasks of visit queues (`visits.<type>`) carry outcomes.
    fn sees_completion(&self, queue: &QueueName, _dedup_id: Option<&str>) -> bool {
        visit_type_of(queue.as_str()).is_some()
    }

    /// Records the outcome in `result` if `queue` is a `visits.*` queue and
    /// the task is the visit of the origin the outcome names (its dedup id
    /// is that origin's). A task added by hand, with no dedup id, records
    /// nothing; one that is another origin's visit is refused.
    async fn completing(&self, queue: &QueueName, dedup_id: Option<&str>, result: &[u8]) -> Result<(), Status> {
        let Some(visit_type) = visit_type_of(queue.as_str()) else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let (url, outcome) = visit_outcome(result, now)?;
        let Some(dedup_id) = dedup_id else {
            tracing::debug!(%url, visit_type, "outcome of a task that is no scheduled visit: not recorded");
            return Ok(());
        };
        if !is_visit_of(dedup_id, visit_type, &url) {
            return Err(invalid(
                "result.origin_url",
                format!(
                    "names {url:?}, but this task is the visit {dedup_id:?}; report the outcome of the task's own origin"
                ),
            ));
        }
        let recorded =
            self.scheduler.record_outcome(visit_type, &url, &outcome, now).await.map_err(status::from_store)?;
        if !recorded {
            tracing::debug!(%url, visit_type, "outcome of an unknown origin, or older than the last one: ignored");
        }
        Ok(())
    }
}

/// `fairway.v1.Scheduler` on this node.
#[derive(Debug)]
pub struct SchedulerService {
    /// The scheduler the calls record origins, listings and outcomes in.
    pub scheduler: Arc<Scheduler>,
    /// The `visits.*` queues, which `RequestVisit` adds its visit to.
    pub visits: RoutedVisits,
    /// The clock the calls are dated by.
    pub clock: SharedClock,
    /// The bounds on requests (`limits.max_batch_tasks` bounds a
    /// `RecordOrigins` batch).
    pub limits: Limits,
}

#[tonic::async_trait]
impl scheduler_server::Scheduler for SchedulerService {
    async fn record_origins(
        &self,
        request: Request<pb::RecordOriginsRequest>,
    ) -> Result<Response<pb::RecordOriginsResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        lister_name("lister", &request.lister)?;
        authorize(&caller, Rpc::RecordOrigins, &lister_resource(&request.lister), None)?;
        validate::batch_len("origins", request.origins.len(), &self.limits).map_err(status::invalid)?;
        let config = self.scheduler.config();
        let reports = request
            .origins
            .into_iter()
            .enumerate()
            .map(|(i, origin)| {
                recorded_url(&format!("origins[{i}].url"), &origin.url, &request.lister, config)?;
                listed_report(&format!("origins[{i}]"), origin)
            })
            .collect::<Result<Vec<_>, Status>>()?;
        let now = self.clock.now_ms();
        let new = self.scheduler.record_origins(&request.lister, &reports, now).await.map_err(status::from_store)?;
        Ok(Response::new(pb::RecordOriginsResponse { new_origins: new as u32 }))
    }

    async fn finish_listing(
        &self,
        request: Request<pb::FinishListingRequest>,
    ) -> Result<Response<pb::FinishListingResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        lister_name("lister", &request.lister)?;
        authorize(&caller, Rpc::FinishListing, &lister_resource(&request.lister), None)?;
        let now = self.clock.now_ms();
        self.scheduler.finish_listing(&request.lister, now).await.map_err(status::from_store)?;
        Ok(Response::new(pb::FinishListingResponse {}))
    }

    async fn request_visit(
        &self,
        request: Request<pb::RequestVisitRequest>,
    ) -> Result<Response<pb::RequestVisitResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        recorded_url("url", &request.url, SAVE_CODE_NOW_LISTER, self.scheduler.config())?;
        visit_type("visit_type", &request.visit_type)?;
        authorize(&caller, Rpc::RequestVisit, &queue_name(&request.visit_type), None)?;
        let now = self.clock.now_ms();
        let known = self.scheduler.origin(&request.visit_type, &request.url).await.map_err(status::from_store)?;
        // An origin first seen here is recorded as "save code now" listed it,
        // once the request is known to be allowed.
        let origin = match &known {
            Some(state) => state.origin.clone(),
            None => ListedOrigin {
                url: request.url.clone(),
                visit_type: request.visit_type.clone(),
                lister: SAVE_CODE_NOW_LISTER.into(),
                last_update: None,
                first_seen: now,
                last_seen: now,
                is_fork: false,
                extra_loader_arguments: String::new(),
            },
        };
        let config = self.scheduler.config();
        let visit = Visit::of(&origin, config.fairness_key, config.save_code_now_priority);
        let priority = Priority::new(visit.priority).unwrap_or(Priority::HIGHEST);
        let mut spec = TaskSpec::new(visit.fairness_key, priority, visit.payload);
        spec.dedup_id = Some(requested_dedup_id(&request.visit_type, &request.url));
        // The visit's key and priority are the scheduler's: a tenant-bound
        // producer may ask only for a visit under its own prefix, at a
        // priority its grant allows. One visit per origin, whoever asks.
        authorize_add(&caller, Rpc::RequestVisit, &queue_name(&request.visit_type), &spec)?;
        if known.is_none() {
            let report = ListedReport {
                url: request.url.clone(),
                visit_type: request.visit_type.clone(),
                last_update: None,
                is_fork: false,
                extra_loader_arguments: String::new(),
            };
            self.scheduler.record_origins(SAVE_CODE_NOW_LISTER, &[report], now).await.map_err(status::from_store)?;
        }
        let queue = self.visits.queue(&request.visit_type).await.map_err(status::from_match)?;
        let added = self.visits.router.add(&queue, spec, Origin::Client, None).await?;
        Ok(Response::new(pb::RequestVisitResponse { task_id: added.task_id, duplicate: added.duplicate }))
    }

    async fn get_visit_stats(
        &self,
        request: Request<pb::GetVisitStatsRequest>,
    ) -> Result<Response<pb::GetVisitStatsResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        origin_url("url", &request.url)?;
        visit_type("visit_type", &request.visit_type)?;
        authorize(&caller, Rpc::GetVisitStats, &queue_name(&request.visit_type), None)?;
        let state = self.scheduler.origin(&request.visit_type, &request.url).await.map_err(status::from_store)?;
        let stats = state.map(|state| {
            let (origin, stats) = (state.origin, state.stats);
            let at = |t: Option<i64>| t.map(convert::timestamp);
            pb::VisitStats {
                lister: origin.lister,
                last_update: at(origin.last_update),
                first_seen: at(Some(origin.first_seen)),
                last_seen: at(Some(origin.last_seen)),
                last_visit: at(stats.last_visit),
                last_visit_status: match stats.last_visit_status {
                    Some(VisitStatus::Successful) => "successful",
                    Some(VisitStatus::Failed) => "failed",
                    Some(VisitStatus::NotFound) => "not_found",
                    None => "",
                }
                .into(),
                last_successful: at(stats.last_successful),
                last_snapshot: stats.last_snapshot.unwrap_or_default(),
                last_scheduled: at(stats.last_scheduled),
                next_position_offset: u32::from(stats.next_position_offset),
                successive_visits: stats.successive_visits,
                next_visit_queue_position: stats.next_visit_queue_position,
                enabled: stats.enabled,
                eligible_after: at(state.placement.wake_at),
                change_rate_per_day: stats.rate.map(f64::from),
            }
        });
        Ok(Response::new(pb::GetVisitStatsResponse { stats }))
    }

    async fn run_round(&self, request: Request<pb::RunRoundRequest>) -> Result<Response<pb::RunRoundResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        visit_type("visit_type", &request.visit_type)?;
        authorize(&caller, Rpc::RunRound, &queue_name(&request.visit_type), None)?;
        let report = self
            .scheduler
            .run_round(&request.visit_type, &self.visits, self.clock.now_ms())
            .await
            .map_err(status::from_scheduler)?;
        Ok(Response::new(pb::RunRoundResponse {
            slots: report.slots,
            sent_by_policy: report.by_policy.iter().map(|(p, n)| (p.name().to_owned(), *n)).collect(),
            sent_by_lister: report.by_lister.into_iter().collect(),
            woken: report.woken as u64,
            due_chance_by_lister: report.due_chance.into_iter().collect(),
        }))
    }

    async fn get_lister_metrics(
        &self,
        request: Request<pb::GetListerMetricsRequest>,
    ) -> Result<Response<pb::GetListerMetricsResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        lister_name("lister", &request.lister)?;
        authorize(&caller, Rpc::GetListerMetrics, &lister_resource(&request.lister), None)?;
        let store = self.scheduler.store();
        let metrics = store.metrics(&request.lister).await.map_err(status::from_store)?;
        let listers = store.listers().await.map_err(status::from_store)?;
        let listing_finished =
            listers.iter().find(|l| l.name == request.lister).and_then(|l| l.listing_finished).map(convert::timestamp);
        let now = self.clock.now_ms();
        Ok(Response::new(pb::GetListerMetricsResponse {
            metrics: metrics.into_iter().map(|(visit_type, m)| lister_metrics(visit_type, &m, now)).collect(),
            listing_finished,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::DAY_MS;

    #[test]
    fn coverage_reads_in_seconds_and_per_day_and_none_reads_as_zero() {
        let now = 20_000 * DAY_MS;
        let none = lister_metrics("git".into(), &ListerMetrics { known: 3, enabled: 3, ..Default::default() }, now);
        assert_eq!(
            (none.pending_lag_seconds, none.estimated_pending_updates, none.mean_change_rate_per_day),
            (0, 0.0, 0.0)
        );
        let m = ListerMetrics {
            pending_changes: 2,
            pending_since_s: (now - DAY_MS) / 1000 + (now - 3 * DAY_MS) / 1000,
            rated: 2,
            rate_micro: 1_500_000,
            ..Default::default()
        };
        let pb = lister_metrics("git".into(), &m, now);
        assert_eq!(pb.pending_lag_seconds, 2 * 24 * 3600, "the mean age of the two changes");
        assert_eq!((pb.estimated_pending_updates, pb.mean_change_rate_per_day, pb.rated_origins), (2.0, 0.75, 2));
        let ahead = ListerMetrics { pending_changes: 1, pending_since_s: (now + DAY_MS) / 1000, ..Default::default() };
        assert_eq!(lister_metrics("git".into(), &ahead, now).pending_lag_seconds, 0, "a change dated ahead is no lag");
    }
}
