//! Recurring schedules' async shell: it keeps schedule records in a
//! [`ScheduleStore`], fires their runs into a [`RunQueue`], and records what
//! becomes of each run. The rules are the pure [`crate::core::schedules`].
//!
//! Invariants kept here:
//! 1. Every change of a record is a read, the pure rules, and one
//!    compare-and-set on the record's version ([`Schedules::modify`]); a
//!    writer that lost the race reads again and decides again. No lock, no
//!    single scheduler process: any node may write any record, and the one
//!    whose write lands is the one whose decision counts.
//! 2. A run is written into its record (intent) before its task is added,
//!    and its task is added with the dedup id `schedule:<id>@<nominal>`:
//!    two nodes racing to fire a tick both add the same task or one of them
//!    fails its compare-and-set first, so a tick is added once. A crash
//!    between the two leaves a run without a task, which the next probe
//!    adds ([`firing`]).
//! 3. A run's end is written before its task is completed (the completion
//!    waits for it), so a completed run is never seen as still in flight.

pub mod config;
pub mod described;
pub mod firing;
#[cfg(test)]
mod firing_tests;
pub mod lifecycle;
pub mod queue;
#[cfg(test)]
mod test_records;
#[cfg(test)]
mod two_nodes_tests;

use std::sync::Arc;

pub use config::SchedulesConfig;
pub use firing::{FiringReport, run_firing};
pub use queue::{AddedRun, RunQueue, RunQueueError};

use crate::clock::{SharedClock, UnixMillis};
use crate::core::schedules::{Calendar, CalendarError, HealthReport, StartTimes, health, start_times};
use crate::model::ValidationError;
use crate::store::schedules::{MAX_LIST, Pause, Replaced, SHARDS, ScheduleRecord, ScheduleStore, shard_of};
use crate::store::{StoreError, StoreResult};

/// The prefix of every run's dedup id; clients may not use it.
pub const RUN_DEDUP_PREFIX: &str = "schedule:";

/// How many times a change is tried against concurrent writers before it
/// gives up with [`ScheduleError::Contended`].
const MAX_CAS_TRIES: usize = 8;

/// The dedup id of the run of schedule `id` for tick `nominal`.
pub fn run_dedup_id(id: &str, nominal: UnixMillis) -> String {
    format!("{RUN_DEDUP_PREFIX}{id}@{nominal}")
}

/// The schedule id and nominal tick a run's dedup id names, if it names one.
pub fn parse_run_dedup_id(dedup_id: &str) -> Option<(&str, UnixMillis)> {
    let rest = dedup_id.strip_prefix(RUN_DEDUP_PREFIX)?;
    let (id, nominal) = rest.rsplit_once('@')?;
    Some((id, nominal.parse().ok()?))
}

/// Why a schedule operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// No schedule has that id.
    #[error("no schedule {0:?}")]
    NotFound(String),
    /// The id is taken.
    #[error("schedule {0:?} already exists")]
    AlreadyExists(String),
    /// A field is out of its bounds.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// Too many schedules.
    #[error("{0}")]
    Full(String),
    /// Other writers kept changing the record; nothing was written.
    #[error("schedule {0:?} kept changing under {MAX_CAS_TRIES} tries; nothing was written, try again")]
    Contended(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A schedule as the API shows it: the record, and what the rules say of it now.
#[derive(Clone, Debug)]
pub struct ScheduleView {
    /// The stored record.
    pub record: ScheduleRecord,
    /// Its health now.
    pub health: HealthReport,
    /// Its start times now.
    pub times: StartTimes,
}

/// A page of [`Schedules::list`].
#[derive(Clone, Debug, Default)]
pub struct SchedulePage {
    /// The schedules, by shard then id.
    pub schedules: Vec<ScheduleView>,
    /// Where the next page starts; `None` at the end.
    pub next: Option<PageToken>,
}

/// Where a listing resumes: after `after` in `shard`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageToken {
    /// The shard to resume in.
    pub shard: u32,
    /// The last id returned in it (`None`: from its start).
    pub after: Option<String>,
}

impl PageToken {
    /// The token as a client sees it: `<shard>/<id>`.
    pub fn encode(&self) -> String {
        format!("{}/{}", self.shard, self.after.as_deref().unwrap_or(""))
    }

    /// A token from [`Self::encode`].
    pub fn decode(field: &str, text: &str) -> Result<PageToken, ValidationError> {
        let bad = || ValidationError::new(field, "is not a page token from ListSchedules");
        let (shard, after) = text.split_once('/').ok_or_else(bad)?;
        let shard: u32 = shard.parse().map_err(|_| bad())?;
        if shard >= SHARDS {
            return Err(bad());
        }
        Ok(PageToken { shard, after: (!after.is_empty()).then(|| after.to_owned()) })
    }
}

/// The schedules of this node: their records, and the changes clients and
/// runs make to them.
#[derive(Debug)]
pub struct Schedules {
    store: Arc<dyn ScheduleStore>,
    clock: SharedClock,
    config: SchedulesConfig,
}

impl Schedules {
    /// Schedules kept in `store`.
    pub fn new(store: Arc<dyn ScheduleStore>, clock: SharedClock, config: SchedulesConfig) -> Schedules {
        Schedules { store, clock, config }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &SchedulesConfig {
        &self.config
    }

    /// The store its records are in.
    pub fn store(&self) -> &Arc<dyn ScheduleStore> {
        &self.store
    }

    /// The current time, from the node's clock.
    pub fn now(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// What the rules say of `record` at `now`.
    pub fn view(record: ScheduleRecord, now: UnixMillis) -> Result<ScheduleView, CalendarError> {
        let calendar = Calendar::new(&record.spec.cadence, &record.spec.time_zone)?;
        let health = health(&calendar, &record.id, &record.spec, &record.stats, now);
        let times = start_times(&calendar, &record.id, &record.spec, &record.stats, now);
        Ok(ScheduleView { record, health, times })
    }

    fn view_now(&self, record: ScheduleRecord) -> Result<ScheduleView, ScheduleError> {
        let field = "spec";
        Schedules::view(record, self.now()).map_err(|e| ValidationError::new(field, e.to_string()).into())
    }

    /// Creates a schedule from a validated `record` (version 1, fresh stats
    /// dated now); refused when its shard is full.
    pub async fn create(&self, mut record: ScheduleRecord) -> Result<ScheduleView, ScheduleError> {
        record.version = 1;
        record.stats = crate::core::schedules::ScheduleStats { created_at: self.now(), ..Default::default() };
        let shard = shard_of(&record.id);
        let limit = self.config.max_schedules_per_shard;
        let mut seen = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_schedules(shard, after.as_deref(), MAX_LIST).await?;
            seen += page.len();
            if seen >= limit {
                return Err(ScheduleError::Full(format!(
                    "schedules.max_schedules_per_shard: the shard of {:?} holds {limit} schedules already \
                     (there are {SHARDS} shards); delete some or raise the limit",
                    record.id
                )));
            }
            match page.last() {
                Some(last) if page.len() == MAX_LIST => after = Some(last.id.clone()),
                _ => break,
            }
        }
        if !self.store.create_schedule(&record).await? {
            return Err(ScheduleError::AlreadyExists(record.id));
        }
        self.view_now(record)
    }

    /// The schedule `id`.
    pub async fn get(&self, id: &str) -> Result<ScheduleView, ScheduleError> {
        let record = self.store.schedule(id).await?.ok_or_else(|| ScheduleError::NotFound(id.to_owned()))?;
        self.view_now(record)
    }

    /// Applies `change` to the record of `id` and writes it with a
    /// compare-and-set, reading again and applying again when another
    /// writer got there first (invariant 1). `change` returns false to write
    /// nothing. Returns the record as it stands after.
    pub async fn modify<F>(&self, id: &str, mut change: F) -> Result<ScheduleRecord, ScheduleError>
    where
        F: FnMut(&mut ScheduleRecord, UnixMillis) -> Result<bool, ScheduleError>,
    {
        let mut current = self.store.schedule(id).await?;
        for _ in 0..MAX_CAS_TRIES {
            let Some(stored) = current else { return Err(ScheduleError::NotFound(id.to_owned())) };
            let mut next = stored.clone();
            if !change(&mut next, self.now())? {
                return Ok(stored);
            }
            next.version = stored.version + 1;
            match self.store.replace_schedule(&next, stored.version).await {
                Ok(Replaced::Written) => return Ok(next),
                Ok(Replaced::Conflict(now)) => current = now,
                Err(StoreError::Uncertain(_)) => {
                    current = self.store.schedule(id).await?;
                    if current.as_ref() == Some(&next) {
                        return Ok(next);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ScheduleError::Contended(id.to_owned()))
    }

    /// Replaces the spec and template of `id` with those of `update`,
    /// keeping its history.
    pub async fn update(&self, update: ScheduleRecord) -> Result<ScheduleView, ScheduleError> {
        let record = self
            .modify(&update.id, |r, _| {
                r.spec = update.spec.clone();
                r.template = update.template.clone();
                Ok(true)
            })
            .await?;
        self.view_now(record)
    }

    /// Deletes `id`. A delete whose outcome was uncertain and that did land
    /// is a success, not a missing schedule.
    pub async fn delete(&self, id: &str) -> Result<(), ScheduleError> {
        let mut maybe_deleted = false;
        for _ in 0..MAX_CAS_TRIES {
            let Some(stored) = self.store.schedule(id).await? else {
                return match maybe_deleted {
                    true => Ok(()),
                    false => Err(ScheduleError::NotFound(id.to_owned())),
                };
            };
            match self.store.delete_schedule(id, stored.version).await {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(StoreError::Uncertain(_)) => maybe_deleted = true,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ScheduleError::Contended(id.to_owned()))
    }

    /// Pauses `id` with `note`, or resumes it.
    pub async fn pause(&self, id: &str, paused: bool, note: &str) -> Result<ScheduleView, ScheduleError> {
        let record = self
            .modify(id, |r, now| {
                r.paused = paused.then(|| Pause { note: note.to_owned(), since: now });
                Ok(true)
            })
            .await?;
        self.view_now(record)
    }

    /// Asks for a run of `id` now.
    pub async fn trigger(&self, id: &str) -> Result<ScheduleView, ScheduleError> {
        let record = self
            .modify(id, |r, now| {
                if r.stats.triggered_at.is_some() {
                    return Ok(false);
                }
                r.stats.triggered_at = Some(now);
                Ok(true)
            })
            .await?;
        self.view_now(record)
    }

    /// A page of schedules from `from` (the first page: `None`), at most
    /// `limit`, only those `keep` accepts (their health, the caller's rights).
    pub async fn list(
        &self,
        from: Option<PageToken>,
        limit: usize,
        keep: impl Fn(&ScheduleView) -> bool,
    ) -> Result<SchedulePage, ScheduleError> {
        let limit = limit.clamp(1, MAX_LIST);
        let mut at = from.unwrap_or(PageToken { shard: 0, after: None });
        let mut page = SchedulePage::default();
        let now = self.now();
        // Records read, kept or not: a filter that keeps few must not read
        // every shard in one call.
        let mut read = 0;
        while at.shard < SHARDS {
            let want = (limit - page.schedules.len()).max(1);
            let records = self.store.list_schedules(at.shard, at.after.as_deref(), want).await?;
            let full = records.len() == want;
            for record in records {
                read += 1;
                at.after = Some(record.id.clone());
                match Schedules::view(record, now) {
                    Ok(view) if keep(&view) => page.schedules.push(view),
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "a stored schedule no longer parses"),
                }
            }
            if !full {
                at = PageToken { shard: at.shard + 1, after: None };
            }
            if page.schedules.len() >= limit || read >= 10 * MAX_LIST {
                break;
            }
        }
        page.next = (at.shard < SHARDS).then_some(at);
        Ok(page)
    }

    /// Every record of `shard`, in pages.
    pub(crate) async fn shard_records(&self, shard: u32) -> StoreResult<Vec<ScheduleRecord>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_schedules(shard, after.as_deref(), MAX_LIST).await?;
            let full = page.len() == MAX_LIST;
            after = page.last().map(|r| r.id.clone());
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dedup_id_names_its_schedule_and_tick() {
        let dedup = run_dedup_id("lister/gitlab@v2", 1_700_000_000_000);
        assert_eq!(dedup, "schedule:lister/gitlab@v2@1700000000000");
        assert_eq!(parse_run_dedup_id(&dedup), Some(("lister/gitlab@v2", 1_700_000_000_000)));
        assert_eq!(parse_run_dedup_id("visits git https://x"), None);
        assert_eq!(parse_run_dedup_id("schedule:x@soon"), None);
    }

    #[test]
    fn a_page_token_round_trips_and_a_forged_one_is_refused() {
        let token = PageToken { shard: 7, after: Some("a/b".into()) };
        assert_eq!(PageToken::decode("page_token", &token.encode()).unwrap(), token);
        let first = PageToken { shard: 0, after: None };
        assert_eq!(PageToken::decode("page_token", &first.encode()).unwrap(), first);
        for bad in ["", "x/y", "64/", "-1/a"] {
            let error = PageToken::decode("page_token", bad).unwrap_err();
            assert!(error.to_string().contains("page_token"), "{error}");
        }
    }
}
