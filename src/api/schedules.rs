//! `fairway.v1.Schedules`: creating, changing and reading recurring
//! schedules. Every field is validated before anything is written; the
//! resource a call is authorized on is the queue the schedule's runs go to.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, caller};
use super::{convert, status};
use crate::clock::{UnixMillis, millis};
use crate::core::schedules::{
    Blackout, Cadence, Calendar, Health, Overlap, Run, ScheduleCounts, ScheduleSpec, ScheduleStats,
};
use crate::model::{Limits, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::proto::v1::schedules_server;
use crate::schedules::{PageToken, RunQueue, RunQueueError, ScheduleView, Schedules};
use crate::security::Caller;
use crate::store::schedules::{MAX_LIST, ScheduleRecord};

/// The longest schedule id, in bytes.
pub const MAX_ID_BYTES: usize = 200;
/// The longest cron expression, in bytes.
pub const MAX_CRON_BYTES: usize = 256;
/// The most blackout windows of a schedule.
pub const MAX_BLACKOUTS: usize = 16;
/// The longest pause note, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;
/// The longest period, interval, window or duration a schedule may name.
pub const MAX_SPAN: Duration = Duration::from_secs(366 * 24 * 3600);
/// The largest payload of a schedule's runs, in bytes: the run template is
/// stored in the schedule's record, which must fit the store.
pub const MAX_TEMPLATE_PAYLOAD_BYTES: usize = 64 * 1024;
/// The page size of a ListSchedules that names none.
const DEFAULT_PAGE: usize = 100;

type Result<T> = std::result::Result<T, ValidationError>;

fn invalid(field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError::new(field, message)
}

/// A schedule id: 1 to 200 bytes of letters, digits and `. _ : / -`.
pub fn schedule_id(field: &str, id: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._:/-".contains(&b);
    if id.is_empty() || id.len() > MAX_ID_BYTES || !id.bytes().all(allowed) {
        return Err(invalid(
            field,
            format!(
                "is {id:?}; it must be 1 to {MAX_ID_BYTES} bytes of ASCII letters, digits, '.', '_', ':', '/' or '-'"
            ),
        ));
    }
    Ok(())
}

/// A duration within `[low, MAX_SPAN]`, or `None` when unset.
fn span(field: &str, d: Option<prost_types::Duration>, low: Duration) -> Result<Option<i64>> {
    let Some(d) = convert::duration(field, d)? else { return Ok(None) };
    if d < low || d > MAX_SPAN {
        return Err(invalid(field, format!("is {d:?}; it must be {low:?} to {MAX_SPAN:?} (366 days)")));
    }
    Ok(Some(millis(d)))
}

fn required_span(field: &str, d: Option<prost_types::Duration>, low: Duration) -> Result<i64> {
    span(field, d, low)?.ok_or_else(|| invalid(field, "is missing"))
}

const SECOND: Duration = Duration::from_secs(1);

fn cadence(field: &str, cadence: Option<pb::schedule_spec::Cadence>) -> Result<Cadence> {
    use pb::schedule_spec::Cadence as C;
    match cadence.ok_or_else(|| invalid(field, "is missing: give periodic, cron or interval"))? {
        C::Periodic(p) => {
            let scheduling_period_ms =
                required_span(&format!("{field}.periodic.scheduling_period"), p.scheduling_period, SECOND)?;
            let cooldown_ms = span(&format!("{field}.periodic.cooldown"), p.cooldown, Duration::ZERO)?.unwrap_or(0);
            if cooldown_ms >= scheduling_period_ms {
                return Err(invalid(
                    &format!("{field}.periodic.cooldown"),
                    "must be shorter than the scheduling period (no run could ever meet it)",
                ));
            }
            Ok(Cadence::Periodic { scheduling_period_ms, cooldown_ms })
        }
        C::Cron(c) => {
            let expression_field = format!("{field}.cron.expression");
            if c.expression.trim().is_empty() || c.expression.len() > MAX_CRON_BYTES {
                return Err(invalid(
                    &expression_field,
                    format!("is {} bytes long; it must be 1 to {MAX_CRON_BYTES}", c.expression.len()),
                ));
            }
            let max_schedule_duration_ms =
                required_span(&format!("{field}.cron.max_schedule_duration"), c.max_schedule_duration, SECOND)?;
            let cadence = Cadence::Cron { expression: c.expression.trim().to_owned(), max_schedule_duration_ms };
            Calendar::new(&cadence, "UTC").map_err(|e| invalid(&expression_field, e.to_string()))?;
            Ok(cadence)
        }
        C::Interval(i) => {
            let every_ms = required_span(&format!("{field}.interval.every"), i.every, SECOND)?;
            let phase_ms = span(&format!("{field}.interval.phase"), i.phase, Duration::ZERO)?.unwrap_or(0);
            let jitter_ms = span(&format!("{field}.interval.jitter"), i.jitter, Duration::ZERO)?.unwrap_or(0);
            if phase_ms >= every_ms {
                return Err(invalid(&format!("{field}.interval.phase"), "must be shorter than `every`"));
            }
            if jitter_ms > every_ms {
                return Err(invalid(&format!("{field}.interval.jitter"), "must be at most `every`"));
            }
            let max_schedule_duration_ms =
                span(&format!("{field}.interval.max_schedule_duration"), i.max_schedule_duration, SECOND)?
                    .unwrap_or(every_ms);
            Ok(Cadence::Interval { every_ms, phase_ms, jitter_ms, max_schedule_duration_ms })
        }
    }
}

/// "HH:MM" or "HH:MM:SS" as seconds after midnight.
fn time_of_day(field: &str, text: &str) -> Result<u32> {
    let bad = || invalid(field, format!("is {text:?}; it must be a time of day, HH:MM or HH:MM:SS"));
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return Err(bad());
    }
    let numbers: Vec<u32> = parts.iter().map(|p| p.parse().map_err(|_| bad())).collect::<Result<_>>()?;
    let (h, m, s) = (numbers[0], numbers[1], numbers.get(2).copied().unwrap_or(0));
    if h > 23 || m > 59 || s > 59 {
        return Err(bad());
    }
    Ok(h * 3600 + m * 60 + s)
}

fn blackouts(field: &str, windows: Vec<pb::Blackout>) -> Result<Vec<Blackout>> {
    if windows.len() > MAX_BLACKOUTS {
        return Err(invalid(field, format!("has {} windows; the limit is {MAX_BLACKOUTS}", windows.len())));
    }
    windows
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let start_s = time_of_day(&format!("{field}[{i}].start"), &w.start)?;
            let end_s = time_of_day(&format!("{field}[{i}].end"), &w.end)?;
            if start_s == end_s {
                return Err(invalid(&format!("{field}[{i}]"), "starts where it ends; it must not be empty"));
            }
            Ok(Blackout { start_s, end_s })
        })
        .collect()
}

fn overlap(field: &str, value: i32) -> Result<Overlap> {
    match pb::Overlap::try_from(value) {
        Ok(pb::Overlap::Unspecified | pb::Overlap::Skip) => Ok(Overlap::Skip),
        Ok(pb::Overlap::BufferOne) => Ok(Overlap::BufferOne),
        Ok(pb::Overlap::AllowAll) => Ok(Overlap::AllowAll),
        Err(_) => Err(invalid(field, format!("is {value}; it must be one of the Overlap values"))),
    }
}

/// A validated spec; `default_catchup` when it names no catch-up window.
fn spec(field: &str, spec: Option<pb::ScheduleSpec>, default_catchup: Duration) -> Result<ScheduleSpec> {
    let spec = spec.ok_or_else(|| invalid(field, "is missing"))?;
    let cadence = cadence(field, spec.cadence)?;
    let time_zone = if spec.time_zone.is_empty() { "UTC".to_owned() } else { spec.time_zone };
    Calendar::new(&cadence, &time_zone).map_err(|e| invalid(&format!("{field}.time_zone"), e.to_string()))?;
    let at = |name: &str, t: &Option<prost_types::Timestamp>| {
        t.as_ref().map(|t| convert::unix_ms(&format!("{field}.{name}"), t)).transpose()
    };
    let (start_at, end_at) = (at("start_at", &spec.start_at)?, at("end_at", &spec.end_at)?);
    if let (Some(start), Some(end)) = (start_at, end_at)
        && end <= start
    {
        return Err(invalid(&format!("{field}.end_at"), "must be after start_at"));
    }
    let catchup_window_ms =
        span(&format!("{field}.catchup_window"), spec.catchup_window, SECOND)?.unwrap_or(millis(default_catchup));
    let max_expected_duration_ms = span(&format!("{field}.max_expected_duration"), spec.max_expected_duration, SECOND)?;
    let max_allowed_duration_ms = span(&format!("{field}.max_allowed_duration"), spec.max_allowed_duration, SECOND)?;
    Ok(ScheduleSpec {
        cadence,
        time_zone,
        blackouts: blackouts(&format!("{field}.blackouts"), spec.blackouts)?,
        start_at,
        end_at,
        remaining_runs: (spec.remaining_runs > 0).then_some(spec.remaining_runs),
        catchup_window_ms,
        overlap: overlap(&format!("{field}.overlap"), spec.overlap)?,
        max_expected_duration_ms,
        max_allowed_duration_ms,
    })
}

fn template(
    field: &str,
    id: &str,
    template: Option<pb::RunTemplate>,
    limits: &Limits,
) -> Result<crate::store::schedules::RunTemplate> {
    let t = template.ok_or_else(|| invalid(field, "is missing"))?;
    validate::queue_name(&format!("{field}.queue"), &t.queue)?;
    validate::payload(&format!("{field}.payload"), t.payload.len(), limits)?;
    if t.payload.len() > MAX_TEMPLATE_PAYLOAD_BYTES {
        return Err(invalid(
            &format!("{field}.payload"),
            format!(
                "is {} bytes; the limit is {MAX_TEMPLATE_PAYLOAD_BYTES} (the template lives in the schedule's record)",
                t.payload.len()
            ),
        ));
    }
    let fairness_key = if t.fairness_key.is_empty() { id.to_owned() } else { t.fairness_key };
    validate::fairness_key(&format!("{field}.fairness_key"), &fairness_key)?;
    let fairness_weight = validate::fairness_weight(&format!("{field}.fairness_weight"), t.fairness_weight)?;
    let priority = validate::priority(&format!("{field}.priority"), t.priority)?;
    Ok(crate::store::schedules::RunTemplate {
        queue: t.queue,
        payload: t.payload,
        fairness_key,
        fairness_weight,
        priority: priority.get(),
    })
}

fn note(field: &str, note: &str) -> Result<()> {
    if note.len() > MAX_NOTE_BYTES {
        return Err(invalid(field, format!("is {} bytes long; the limit is {MAX_NOTE_BYTES}", note.len())));
    }
    Ok(())
}

fn proto_duration(ms: i64) -> prost_types::Duration {
    prost_types::Duration { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

fn proto_time(ms: Option<UnixMillis>) -> Option<prost_types::Timestamp> {
    ms.map(convert::timestamp)
}

fn proto_spec(spec: &ScheduleSpec) -> pb::ScheduleSpec {
    use pb::schedule_spec::Cadence as C;
    let cadence = match &spec.cadence {
        Cadence::Periodic { scheduling_period_ms, cooldown_ms } => C::Periodic(pb::PeriodicCadence {
            scheduling_period: Some(proto_duration(*scheduling_period_ms)),
            cooldown: Some(proto_duration(*cooldown_ms)),
        }),
        Cadence::Cron { expression, max_schedule_duration_ms } => C::Cron(pb::CronCadence {
            expression: expression.clone(),
            max_schedule_duration: Some(proto_duration(*max_schedule_duration_ms)),
        }),
        Cadence::Interval { every_ms, phase_ms, jitter_ms, max_schedule_duration_ms } => {
            C::Interval(pb::IntervalCadence {
                every: Some(proto_duration(*every_ms)),
                phase: Some(proto_duration(*phase_ms)),
                jitter: Some(proto_duration(*jitter_ms)),
                max_schedule_duration: Some(proto_duration(*max_schedule_duration_ms)),
            })
        }
    };
    let clock = |s: u32| format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    pb::ScheduleSpec {
        cadence: Some(cadence),
        time_zone: spec.time_zone.clone(),
        blackouts: spec
            .blackouts
            .iter()
            .map(|b| pb::Blackout { start: clock(b.start_s), end: clock(b.end_s) })
            .collect(),
        start_at: proto_time(spec.start_at),
        end_at: proto_time(spec.end_at),
        remaining_runs: spec.remaining_runs.unwrap_or(0),
        catchup_window: Some(proto_duration(spec.catchup_window_ms)),
        overlap: match spec.overlap {
            Overlap::Skip => pb::Overlap::Skip,
            Overlap::BufferOne => pb::Overlap::BufferOne,
            Overlap::AllowAll => pb::Overlap::AllowAll,
        } as i32,
        max_expected_duration: spec.max_expected_duration_ms.map(proto_duration),
        max_allowed_duration: spec.max_allowed_duration_ms.map(proto_duration),
    }
}

fn proto_health(health: Health) -> pb::Health {
    match health {
        Health::Ok => pb::Health::Ok,
        Health::Warning => pb::Health::Warning,
        Health::Error => pb::Health::Error,
    }
}

fn proto_run(run: &Run) -> pb::ScheduleRun {
    pb::ScheduleRun {
        nominal: proto_time(Some(run.nominal)),
        task_id: run.task_id,
        added_at: proto_time(Some(run.added_at)),
        started_at: proto_time(run.started_at),
        attempt: run.attempt,
        should_start_by: proto_time(Some(run.should_start_by)),
    }
}

fn proto_counts(c: &ScheduleCounts) -> pb::ScheduleCounts {
    pb::ScheduleCounts {
        fired: c.fired,
        succeeded: c.succeeded,
        failed: c.failed,
        started_late: c.started_late,
        missed_catchup_window: c.missed_catchup_window,
        overlap_skipped: c.overlap_skipped,
        over_expected_duration: c.over_expected_duration,
    }
}

/// A schedule as a client sees it.
fn info(view: &ScheduleView) -> pb::ScheduleInfo {
    let ScheduleView { record, health, times } = view;
    let ScheduleStats { created_at, last_good_start, last_good_end, last_start, last_end, failures, .. } =
        &record.stats;
    let t = &record.template;
    pb::ScheduleInfo {
        id: record.id.clone(),
        spec: Some(proto_spec(&record.spec)),
        template: Some(pb::RunTemplate {
            queue: t.queue.clone(),
            payload: t.payload.clone(),
            fairness_key: t.fairness_key.clone(),
            fairness_weight: t.fairness_weight.unwrap_or(0.0),
            priority: t.priority,
        }),
        paused: record.paused.is_some(),
        paused_note: record.paused.as_ref().map(|p| p.note.clone()).unwrap_or_default(),
        health: proto_health(health.health) as i32,
        health_reason: health.reason.clone(),
        error_at: proto_time(health.error_at),
        can_start_by: proto_time(Some(times.can_start_by)),
        should_start_by: proto_time(Some(times.should_start_by)),
        created_at: proto_time(Some(*created_at)),
        last_good_start: proto_time(*last_good_start),
        last_good_end: proto_time(*last_good_end),
        last_start: proto_time(*last_start),
        last_end: proto_time(*last_end),
        consecutive_failures: *failures,
        average_good_duration: record.stats.average_good_duration_ms.map(proto_duration),
        runs: record.stats.runs.iter().map(proto_run).collect(),
        counts: Some(proto_counts(&record.stats.counts)),
        created_by: record.created_by.clone(),
        out_of_runs: record.spec.remaining_runs == Some(0),
    }
}

/// `fairway.v1.Schedules` on this node.
#[derive(Debug)]
pub struct SchedulesService {
    /// The schedules the calls read and change.
    pub schedules: Arc<Schedules>,
    /// The queues their runs go to, created with the schedule.
    pub runs: Arc<dyn RunQueue>,
    /// The bounds on run payloads.
    pub limits: Limits,
}

impl SchedulesService {
    /// Creates the queue `record`'s runs go to, if it is new.
    async fn prepare(&self, record: &ScheduleRecord) -> std::result::Result<(), Status> {
        self.runs.prepare(&record.template.queue).await.map_err(|e| match e {
            RunQueueError::Refused(m) => Status::resource_exhausted(format!("template.queue: {m}")),
            RunQueueError::Unavailable(m) => {
                Status::unavailable(format!("creating the run queue: {m}; nothing was written, retry"))
            }
        })
    }

    /// The schedule `id`, once `caller` is found allowed `rpc` on its queue.
    async fn authorized(
        &self,
        caller: &Caller,
        rpc: Rpc,
        field: &str,
        id: &str,
    ) -> std::result::Result<ScheduleView, Status> {
        schedule_id(field, id).map_err(status::invalid)?;
        let view = self.schedules.get(id).await.map_err(status::from_schedule)?;
        authorize(caller, rpc, &view.record.template.queue, None)?;
        Ok(view)
    }

    fn record(
        &self,
        id: &str,
        request_spec: Option<pb::ScheduleSpec>,
        request_template: Option<pb::RunTemplate>,
    ) -> std::result::Result<ScheduleRecord, Status> {
        schedule_id("id", id).map_err(status::invalid)?;
        let spec =
            spec("spec", request_spec, self.schedules.config().default_catchup_window).map_err(status::invalid)?;
        let template = template("template", id, request_template, &self.limits).map_err(status::invalid)?;
        Ok(ScheduleRecord {
            id: id.to_owned(),
            version: 1,
            spec,
            template,
            stats: ScheduleStats::default(),
            paused: None,
            created_by: String::new(),
        })
    }
}

#[tonic::async_trait]
impl schedules_server::Schedules for SchedulesService {
    async fn create_schedule(
        &self,
        request: Request<pb::CreateScheduleRequest>,
    ) -> std::result::Result<Response<pb::CreateScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let mut record = self.record(&request.id, request.spec, request.template)?;
        note("paused_note", &request.paused_note).map_err(status::invalid)?;
        authorize(&caller, Rpc::CreateSchedule, &record.template.queue, None)?;
        record.created_by = caller.name().to_owned();
        if !request.paused_note.is_empty() {
            record.paused =
                Some(crate::store::schedules::Pause { note: request.paused_note, since: self.schedules.now() });
        }
        self.prepare(&record).await?;
        let view = self.schedules.create(record).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::CreateScheduleResponse { schedule: Some(info(&view)) }))
    }

    async fn update_schedule(
        &self,
        request: Request<pb::UpdateScheduleRequest>,
    ) -> std::result::Result<Response<pb::UpdateScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let record = self.record(&request.id, request.spec, request.template)?;
        self.authorized(&caller, Rpc::UpdateSchedule, "id", &request.id).await?;
        authorize(&caller, Rpc::UpdateSchedule, &record.template.queue, None)?;
        self.prepare(&record).await?;
        let view = self.schedules.update(record).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::UpdateScheduleResponse { schedule: Some(info(&view)) }))
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> std::result::Result<Response<pb::DeleteScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.authorized(&caller, Rpc::DeleteSchedule, "id", &id).await?;
        self.schedules.delete(&id).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn pause_schedule(
        &self,
        request: Request<pb::PauseScheduleRequest>,
    ) -> std::result::Result<Response<pb::PauseScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        note("note", &request.note).map_err(status::invalid)?;
        self.authorized(&caller, Rpc::PauseSchedule, "id", &request.id).await?;
        let view =
            self.schedules.pause(&request.id, request.paused, &request.note).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::PauseScheduleResponse { schedule: Some(info(&view)) }))
    }

    async fn trigger_schedule(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> std::result::Result<Response<pb::TriggerScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.authorized(&caller, Rpc::TriggerSchedule, "id", &id).await?;
        let view = self.schedules.trigger(&id).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::TriggerScheduleResponse { schedule: Some(info(&view)) }))
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> std::result::Result<Response<pb::ListSchedulesResponse>, Status> {
        let caller = caller(&request)?;
        if !caller.holds_anywhere(Rpc::ListSchedules.permission()) {
            // Refused with the message every refusal has; what it shows
            // is filtered by the queues the caller may read.
            authorize(&caller, Rpc::ListSchedules, "the queues of schedules", None)?;
        }
        let request = request.into_inner();
        let health = match pb::Health::try_from(request.health) {
            Ok(pb::Health::Unspecified) => None,
            Ok(pb::Health::Ok) => Some(Health::Ok),
            Ok(pb::Health::Warning) => Some(Health::Warning),
            Ok(pb::Health::Error) => Some(Health::Error),
            Err(_) => {
                return Err(status::invalid(invalid(
                    "health",
                    format!("is {}; it must be a Health value", request.health),
                )));
            }
        };
        let size = match request.page_size as usize {
            0 => DEFAULT_PAGE,
            n if n > MAX_LIST => {
                return Err(status::invalid(invalid("page_size", format!("is {n}; it must be 1 to {MAX_LIST}"))));
            }
            n => n,
        };
        let from = match request.page_token.as_str() {
            "" => None,
            token => Some(PageToken::decode("page_token", token).map_err(status::invalid)?),
        };
        let keep = |view: &ScheduleView| {
            health.is_none_or(|h| view.health.health == h)
                && crate::api::access::allowed(&caller, Rpc::ListSchedules, &view.record.template.queue)
        };
        let page = self.schedules.list(from, size, keep).await.map_err(status::from_schedule)?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules: page.schedules.iter().map(info).collect(),
            next_page_token: page.next.map(|t| t.encode()).unwrap_or_default(),
        }))
    }

    async fn describe_schedule(
        &self,
        request: Request<pb::DescribeScheduleRequest>,
    ) -> std::result::Result<Response<pb::DescribeScheduleResponse>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        let view = self.authorized(&caller, Rpc::DescribeSchedule, "id", &id).await?;
        let mut next_ticks = Vec::new();
        if let Ok(calendar) = Calendar::new(&view.record.spec.cadence, &view.record.spec.time_zone) {
            let mut after = self.schedules.now();
            while next_ticks.len() < 5 {
                let Some(tick) = calendar.next_tick(&view.record.spec.cadence, &id, after) else { break };
                next_ticks.push(convert::timestamp(tick));
                after = tick;
            }
        }
        Ok(Response::new(pb::DescribeScheduleResponse { schedule: Some(info(&view)), next_ticks }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dur(seconds: i64) -> Option<prost_types::Duration> {
        Some(prost_types::Duration { seconds, nanos: 0 })
    }

    fn periodic(period: i64, cooldown: i64) -> Option<pb::ScheduleSpec> {
        Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: dur(period),
                cooldown: dur(cooldown),
            })),
            ..Default::default()
        })
    }

    fn field_of(error: ValidationError) -> String {
        error.to_string()
    }

    #[test]
    fn a_schedule_id_is_short_and_plain() {
        assert!(schedule_id("id", "listers/gitlab.com:full").is_ok());
        for bad in ["", "a b", "x@1", &"x".repeat(201), "é"] {
            assert!(field_of(schedule_id("id", bad).unwrap_err()).contains("id"), "{bad:?}");
        }
    }

    #[test]
    fn every_bad_spec_field_is_named() {
        let day = Duration::from_secs(86_400);
        assert!(spec("spec", periodic(3600, 60), day).is_ok());
        let cases: Vec<(Option<pb::ScheduleSpec>, &str)> = vec![
            (None, "spec"),
            (Some(pb::ScheduleSpec::default()), "spec"),
            (periodic(0, 0), "spec.periodic.scheduling_period"),
            (periodic(3600, 3600), "spec.periodic.cooldown"),
            (periodic(400 * 86_400, 0), "spec.periodic.scheduling_period"),
            (
                Some(pb::ScheduleSpec {
                    cadence: Some(pb::schedule_spec::Cadence::Cron(pb::CronCadence {
                        expression: "61 * * * *".into(),
                        max_schedule_duration: dur(600),
                    })),
                    ..Default::default()
                }),
                "spec.cron.expression",
            ),
            (
                Some(pb::ScheduleSpec { time_zone: "Mars/Olympus".into(), ..periodic(3600, 0).unwrap() }),
                "spec.time_zone",
            ),
            (
                Some(pb::ScheduleSpec {
                    blackouts: vec![pb::Blackout { start: "25:00".into(), end: "01:00".into() }],
                    ..periodic(3600, 0).unwrap()
                }),
                "spec.blackouts[0].start",
            ),
            (
                Some(pb::ScheduleSpec {
                    blackouts: vec![pb::Blackout { start: "01:00".into(), end: "01:00".into() }; 17],
                    ..periodic(3600, 0).unwrap()
                }),
                "spec.blackouts",
            ),
            (
                Some(pb::ScheduleSpec {
                    start_at: Some(prost_types::Timestamp { seconds: 10, nanos: 0 }),
                    end_at: Some(prost_types::Timestamp { seconds: 5, nanos: 0 }),
                    ..periodic(3600, 0).unwrap()
                }),
                "spec.end_at",
            ),
            (Some(pb::ScheduleSpec { overlap: 9, ..periodic(3600, 0).unwrap() }), "spec.overlap"),
        ];
        for (case, field) in cases {
            let error = spec("spec", case.clone(), day).unwrap_err().to_string();
            assert!(error.starts_with(field), "{case:?}: {error}");
        }
    }

    #[test]
    fn blackout_times_read_as_a_clock_does() {
        assert_eq!(time_of_day("t", "00:00").unwrap(), 0);
        assert_eq!(time_of_day("t", "23:59:59").unwrap(), 86_399);
        for bad in ["24:00", "1:00", "12:60", "12", "12:00:00:00", "ab:cd"] {
            assert!(time_of_day("t", bad).is_err(), "{bad}");
        }
    }
}
