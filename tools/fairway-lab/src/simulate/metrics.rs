//! What one arm measures, against the forge's truth:
//! - **visit lag**: for each update of an origin, the time from the update
//!   to the start of the first successful visit after it (a failed visit
//!   archives nothing). Updates not picked up by the end count with lag
//!   `end − update`, and their number is reported;
//! - **useless visits**: visits that found no new snapshot (uneventful,
//!   failed or not found);
//! - **first-visit delay** of the origins created during the run: first
//!   listing to first visit (never visited: `end − listing`, counted too);
//! - each lister's visits, useful visits and mean lag; visits per day;
//! - the same per true change rate (the forge's [`RATE_MIX`] classes), with
//!   the lag of updates made before the origin's first visit apart: where
//!   the lag comes from.

use serde::Serialize;

use fairway::core::visits::DAY_MS;

use super::forge::{Cursor, Forge, RATE_MIX};
use crate::figures::stats::{cdf, quantile, sorted};

const HOUR_MS: f64 = 3_600_000.0;
const NONE: i64 = i64::MAX;

/// How a visit ends, decided from the forge's truth when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    /// A successful visit: the origin's version it found, and the date of
    /// that version's newest change (what a loader reads from its commits).
    Version {
        version: u32,
        newest: i64,
    },
    Failed,
    NotFound,
}

pub(super) struct Tracker<'f> {
    forge: &'f Forge,
    /// Updates taken by successful visits.
    visited: Vec<Cursor>,
    /// Updates known to the last listing.
    listed: Vec<Cursor>,
    /// The version the last successful visit found (`u32::MAX`: none yet).
    version: Vec<u32>,
    first_listed: Vec<i64>,
    first_visit: Vec<i64>,
    /// Lag of each update picked up, in hours.
    lags: Vec<f32>,
    by_lister: Vec<ListerFigures>,
    by_rate: Vec<RateFigures>,
    daily: Vec<Day>,
    counts: Counts,
    /// Loader time spent visiting, within the run.
    busy_ms: i64,
    /// Loader time while visits waited in the queue,
    /// and the part of it spent visiting.
    waiting_ms: i64,
    busy_waiting_ms: i64,
    /// Samples of whether eligible visits existed (none: not measured).
    eligible: Option<EligibleSamples>,
}

/// Instants at which the run checked whether a free loader had an eligible
/// visit to run (see [`super::eligible`]).
#[derive(Clone, Copy, Debug, Default)]
struct EligibleSamples {
    samples: u64,
    /// Of them, those at which eligible visits existed, and the sum of the
    /// loaders' busy shares then.
    eligible: u64,
    busy_sum: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub eventful: u64,
    pub uneventful: u64,
    pub failed: u64,
    pub not_found: u64,
}

impl Counts {
    pub(crate) fn visits(&self) -> u64 {
        self.eventful + self.uneventful + self.failed + self.not_found
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Day {
    pub visits: u64,
    pub useful: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ListerFigures {
    pub name: String,
    pub origins: u64,
    pub dated: bool,
    pub hosts: u64,
    pub period_days: f64,
    pub visits: u64,
    pub useful: u64,
    pub updates: u64,
    pub lag_sum_h: f64,
    pub mean_lag_h: f64,
}

/// The figures of the origins that change at one rate (dead ones apart).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct RateFigures {
    /// Changes per day.
    pub rate: f64,
    pub visits: u64,
    pub useful: u64,
    pub updates: u64,
    pub lag_sum_h: f64,
    /// Updates made before the origin's first successful visit, and their lag.
    pub before_first: u64,
    pub before_first_lag_sum_h: f64,
}

impl RateFigures {
    fn add(&mut self, lag_h: f64, before_first: bool) {
        self.updates += 1;
        self.lag_sum_h += lag_h;
        if before_first {
            self.before_first += 1;
            self.before_first_lag_sum_h += lag_h;
        }
    }
}

/// Quantiles of a measure in hours.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Spread {
    pub count: u64,
    pub mean_h: f64,
    pub p50_h: f64,
    pub p99_h: f64,
}

impl Spread {
    fn of(values: &[f32]) -> (Spread, Vec<f64>) {
        let all = sorted(values.iter().map(|&v| f64::from(v)).collect());
        let mean = if all.is_empty() { 0.0 } else { all.iter().sum::<f64>() / all.len() as f64 };
        let spread =
            Spread { count: all.len() as u64, mean_h: mean, p50_h: quantile(&all, 0.5), p99_h: quantile(&all, 0.99) };
        (spread, all)
    }
}

/// One arm's measures.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ArmSummary {
    pub arm: String,
    pub counts: Counts,
    pub visits: u64,
    pub useless_share: f64,
    /// The same among the listers that give update dates, and the others.
    pub useless_share_dated: f64,
    pub useless_share_undated: f64,
    pub visits_per_day: f64,
    /// Share of the loaders' time spent visiting.
    pub loaders_busy: f64,
    /// The same while visits waited in the queue, even for a host at its
    /// limit (1 if never). A round leaves due visits unsent only while the
    /// queue holds visits (of their key, or in every slot), so this is the
    /// loaders' time while the scheduler had visits to send, bar the wait
    /// for the next round. The loaders take any visit they may at once: what
    /// idles then is held by hosts at their limit.
    pub loaders_busy_while_waiting: f64,
    /// Share of the run's time that was so.
    pub waiting_share: f64,
    /// The loaders' busy share at the instants a free loader would have had
    /// an eligible visit to run (see [`super::eligible`]), sampled after a
    /// round every [`super::arm::ELIGIBLE_EVERY_MS`]; none where not
    /// measured (the baseline's rounds have no due threshold), 1 if never.
    pub loaders_busy_while_eligible: Option<f64>,
    /// Share of those samples at which eligible visits existed.
    pub eligible_share: Option<f64>,
    /// Visit lag over every update; `unpicked` of them never picked up.
    pub lag: Spread,
    pub unpicked: u64,
    /// First-visit delay of origins created during the run and listed.
    pub first_visit: Spread,
    pub first_visit_never: u64,
    /// Listed origins (all) never visited by the end.
    pub never_visited: u64,
    pub listed: u64,
    pub peak_per_host: u32,
    pub host_limit: u32,
    pub rounds: u64,
    /// The highest of the listers' mean lags, and listers never visited.
    pub worst_lister_lag_h: f64,
    pub listers_unvisited: u64,
    pub listers: Vec<ListerFigures>,
    pub rates: Vec<RateFigures>,
    pub daily: Vec<Day>,
    #[serde(skip)]
    pub lag_cdf: Vec<(f64, f64)>,
}

impl<'f> Tracker<'f> {
    pub(super) fn new(forge: &'f Forge) -> Tracker<'f> {
        let n = forge.origins.len();
        let cursors: Vec<Cursor> = (0..n as u32).map(|id| forge.cursor(id)).collect();
        let by_lister = forge
            .listers
            .iter()
            .map(|l| ListerFigures {
                name: l.name.clone(),
                origins: l.origins.len() as u64,
                dated: l.dated,
                hosts: l.hosts.len() as u64,
                period_days: l.period_ms as f64 / DAY_MS as f64,
                ..ListerFigures::default()
            })
            .collect();
        Tracker {
            forge,
            visited: cursors.clone(),
            listed: cursors,
            version: vec![u32::MAX; n],
            first_listed: vec![NONE; n],
            first_visit: vec![NONE; n],
            lags: Vec::new(),
            by_lister,
            by_rate: RATE_MIX.iter().map(|&(_, rate)| RateFigures { rate, ..RateFigures::default() }).collect(),
            daily: vec![Day::default(); forge.params.days as usize],
            counts: Counts::default(),
            busy_ms: 0,
            waiting_ms: 0,
            busy_waiting_ms: 0,
            eligible: None,
        }
    }

    /// A listing at `now` reports the origin: its last update then.
    pub(super) fn listed(&mut self, id: u32, now: i64) -> i64 {
        let i = id as usize;
        if self.first_listed[i] == NONE {
            self.first_listed[i] = now;
        }
        let cursor = &mut self.listed[i];
        self.forge.advance(id, cursor, now, |_| {});
        cursor.last
    }

    /// A visit of `id` starts at `at` and will end as `outcome` says (`None`:
    /// a successful visit, whose version is read here). Returns what it found.
    pub(super) fn visit(&mut self, id: u32, at: i64, outcome: Option<Ending>) -> Ending {
        let i = id as usize;
        let lister = self.forge.origins[i].lister as usize;
        if self.first_visit[i] == NONE {
            self.first_visit[i] = at;
        }
        let class = rate_class(self.forge.origins[i].rate);
        let found = match outcome {
            Some(found) => found,
            None => {
                let before_first = self.version[i] == u32::MAX;
                let (lags, figures) = (&mut self.lags, &mut self.by_lister[lister]);
                let mut by_rate = class.map(|c| &mut self.by_rate[c]);
                self.forge.advance(id, &mut self.visited[i], at, |update| {
                    let hours = (at - update) as f64 / HOUR_MS;
                    lags.push(hours as f32);
                    figures.updates += 1;
                    figures.lag_sum_h += hours;
                    if let Some(rate) = by_rate.as_mut() {
                        rate.add(hours, before_first);
                    }
                });
                Ending::Version { version: self.visited[i].count, newest: self.visited[i].last }
            }
        };
        let useful = match found {
            Ending::Version { version: v, .. } => {
                let new = self.version[i] != v;
                self.version[i] = v;
                if new {
                    self.counts.eventful += 1;
                } else {
                    self.counts.uneventful += 1;
                }
                new
            }
            Ending::Failed => {
                self.counts.failed += 1;
                false
            }
            Ending::NotFound => {
                self.counts.not_found += 1;
                false
            }
        };
        let figures = &mut self.by_lister[lister];
        figures.visits += 1;
        figures.useful += u64::from(useful);
        if let Some(c) = class {
            self.by_rate[c].visits += 1;
            self.by_rate[c].useful += u64::from(useful);
        }
        // A visit dispatched at the very end starts just after it: the last day's.
        let day = (((at - self.forge.params.start) / DAY_MS) as usize).min(self.daily.len() - 1);
        self.daily[day].visits += 1;
        self.daily[day].useful += u64::from(useful);
        found
    }

    /// A loader is busy from `from` to `to` (counted within the run).
    pub(super) fn busy(&mut self, from: i64, to: i64) {
        self.busy_ms += to.min(self.forge.end()) - from.min(self.forge.end());
    }

    /// For `ms`, visits waited in the queue (even for a host at its limit)
    /// and `busy` of `loaders` were visiting.
    pub(super) fn while_waiting(&mut self, ms: i64, busy: u32, loaders: u32) {
        self.waiting_ms += ms * i64::from(loaders);
        self.busy_waiting_ms += ms * i64::from(busy.min(loaders));
    }

    /// At one instant, whether eligible visits existed, and `busy` of
    /// `loaders` were visiting.
    pub(super) fn eligible_sample(&mut self, eligible: bool, busy: u32, loaders: u32) {
        let samples = self.eligible.get_or_insert_with(EligibleSamples::default);
        samples.samples += 1;
        if eligible {
            samples.eligible += 1;
            samples.busy_sum += f64::from(busy.min(loaders)) / f64::from(loaders);
        }
    }

    /// The measures at the end of the run.
    pub(super) fn summary(mut self, arm: &str, rounds: u64, peak: (u32, u32), loaders: u32) -> ArmSummary {
        let end = self.forge.end();
        let start = self.forge.params.start;
        let mut unpicked = 0u64;
        let mut delays = Vec::new();
        let (mut first_never, mut never, mut listed) = (0u64, 0u64, 0u64);
        for id in 0..self.forge.origins.len() as u32 {
            let i = id as usize;
            let lister = self.forge.origins[i].lister as usize;
            let before_first = self.version[i] == u32::MAX;
            let (lags, figures) = (&mut self.lags, &mut self.by_lister[lister]);
            let mut by_rate = rate_class(self.forge.origins[i].rate).map(|c| &mut self.by_rate[c]);
            self.forge.advance(id, &mut self.visited[i], end, |update| {
                let hours = (end - update) as f64 / HOUR_MS;
                lags.push(hours as f32);
                figures.updates += 1;
                figures.lag_sum_h += hours;
                if let Some(rate) = by_rate.as_mut() {
                    rate.add(hours, before_first);
                }
                unpicked += 1;
            });
            let listed_at = self.first_listed[i];
            if listed_at == NONE {
                continue;
            }
            listed += 1;
            let visited_at = self.first_visit[i];
            never += u64::from(visited_at == NONE);
            if self.forge.origins[i].created > start {
                first_never += u64::from(visited_at == NONE);
                delays.push(((visited_at.min(end) - listed_at) as f64 / HOUR_MS) as f32);
            }
        }
        for figures in &mut self.by_lister {
            figures.mean_lag_h = if figures.updates == 0 { 0.0 } else { figures.lag_sum_h / figures.updates as f64 };
        }
        let useless = |dated: bool| {
            let (visits, useful) = self
                .by_lister
                .iter()
                .filter(|l| l.dated == dated)
                .fold((0, 0), |(v, u), l| (v + l.visits, u + l.useful));
            if visits == 0 { 0.0 } else { 1.0 - useful as f64 / visits as f64 }
        };
        let (useless_dated, useless_undated) = (useless(true), useless(false));
        let worst = self.by_lister.iter().map(|l| l.mean_lag_h).fold(0.0, f64::max);
        let unvisited = self.by_lister.iter().filter(|l| l.visits == 0).count() as u64;
        let span = (end - start) as f64 * f64::from(loaders);
        let (lag, all) = Spread::of(&self.lags);
        let (first_visit, _) = Spread::of(&delays);
        let visits = self.counts.visits();
        ArmSummary {
            arm: arm.to_owned(),
            counts: self.counts,
            visits,
            useless_share: if visits == 0 { 0.0 } else { 1.0 - self.counts.eventful as f64 / visits as f64 },
            useless_share_dated: useless_dated,
            useless_share_undated: useless_undated,
            loaders_busy: self.busy_ms as f64 / span,
            loaders_busy_while_waiting: if self.waiting_ms == 0 {
                1.0
            } else {
                self.busy_waiting_ms as f64 / self.waiting_ms as f64
            },
            waiting_share: self.waiting_ms as f64 / span,
            loaders_busy_while_eligible: self
                .eligible
                .map(|e| if e.eligible == 0 { 1.0 } else { e.busy_sum / e.eligible as f64 }),
            eligible_share: self.eligible.map(|e| e.eligible as f64 / e.samples.max(1) as f64),
            visits_per_day: visits as f64 / f64::from(self.forge.params.days),
            lag,
            unpicked,
            first_visit,
            first_visit_never: first_never,
            never_visited: never,
            listed,
            peak_per_host: peak.0,
            host_limit: peak.1,
            rounds,
            worst_lister_lag_h: worst,
            listers_unvisited: unvisited,
            listers: self.by_lister,
            rates: self.by_rate,
            daily: self.daily,
            lag_cdf: cdf(&all),
        }
    }
}

/// The [`RATE_MIX`] class of a live origin's rate.
fn rate_class(rate: f32) -> Option<usize> {
    RATE_MIX.iter().position(|&(_, r)| r as f32 == rate)
}
