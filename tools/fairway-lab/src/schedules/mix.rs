//! The schedules of `fairway-lab simulate-schedules`: a seeded mix of
//! periodic and cron schedules, each with a mean run duration, a history
//! before the start (one good run, so the run begins in a steady state) and
//! the ticks fixed-time firing uses. Every random draw is a hash of the seed,
//! the schedule and the draw, so the policies see the same schedules
//! and the k-th run of a schedule lasts as long (and fails or not) in each.

use anyhow::Context;
use fairway::core::schedules::{Cadence, Calendar, Overlap, ScheduleSpec, ScheduleStats};
use fairway::hash::splitmix64;

pub(super) const MINUTE_MS: i64 = 60_000;
pub(super) const HOUR_MS: i64 = 60 * MINUTE_MS;
pub(super) const DAY_MS: i64 = 24 * HOUR_MS;

/// Chance that a run fails (at the end of its duration).
pub(super) const FAIL_SHARE: f64 = 0.02;
/// Spread (σ of the log) of one run's duration around its schedule's mean.
pub(super) const RUN_SIGMA: f64 = 0.5;
/// Median of the schedules' mean durations, and the σ of its log.
pub(super) const MEAN_MEDIAN_S: f64 = 40.0;
pub(super) const MEAN_SIGMA: f64 = 1.0;
/// Bounds of a schedule's mean duration; a mean is also at most a tenth of
/// its period (or of its cron `max_schedule_duration`).
pub(super) const MEAN_MIN_S: f64 = 10.0;
pub(super) const MEAN_MAX_S: f64 = 1_200.0;
/// Cooldown of a periodic schedule, as a share of its period: drawn in this range.
pub(super) const COOLDOWN_SHARE: (f64, f64) = (0.2, 0.6);
/// The time zones cron schedules are read in.
pub(super) const TIME_ZONES: [&str; 3] = ["Europe/Paris", "America/New_York", "Asia/Kolkata"];
/// Ticks missed by more than this are dropped by `decide` (a day: none is
/// dropped for being late within the run).
pub(super) const CATCHUP_WINDOW_MS: i64 = DAY_MS;

/// A kind of schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Class {
    Every15m,
    Every1h,
    Every6h,
    Every24h,
    CronHourly,
    CronDaily,
}

/// The classes and their shares of the schedules.
pub(super) const MIX: [(Class, f64); 6] = [
    (Class::Every15m, 0.01),
    (Class::Every1h, 0.03),
    (Class::Every6h, 0.20),
    (Class::Every24h, 0.63),
    (Class::CronHourly, 0.03),
    (Class::CronDaily, 0.10),
];

impl Class {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Every15m => "periodic 15 min",
            Class::Every1h => "periodic 1 h",
            Class::Every6h => "periodic 6 h",
            Class::Every24h => "periodic 24 h",
            Class::CronHourly => "cron hourly",
            Class::CronDaily => "cron daily",
        }
    }

    /// The staleness bound of a periodic class.
    fn period_ms(self) -> Option<i64> {
        match self {
            Class::Every15m => Some(15 * MINUTE_MS),
            Class::Every1h => Some(HOUR_MS),
            Class::Every6h => Some(6 * HOUR_MS),
            Class::Every24h => Some(DAY_MS),
            Class::CronHourly | Class::CronDaily => None,
        }
    }

    /// Runs per day the constraint needs: one per period or per tick.
    pub(super) fn runs_per_day(self) -> f64 {
        match self {
            Class::CronHourly => 24.0,
            Class::CronDaily => 1.0,
            periodic => DAY_MS as f64 / periodic.period_ms().unwrap_or(DAY_MS) as f64,
        }
    }

    /// `max_schedule_duration` of a cron class.
    fn max_duration_ms(self) -> Option<i64> {
        match self {
            Class::CronHourly => Some(20 * MINUTE_MS),
            Class::CronDaily => Some(3 * HOUR_MS),
            _ => None,
        }
    }
}

/// How fixed-time firing ticks a schedule.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fixed {
    /// A periodic schedule: at `last + k * interval` (k ≥ 1), where `last`
    /// is the start of its last good run before the start (a random phase)
    /// and the interval is its period, or its cooldown plus its mean
    /// duration (the rate `decide` fires it at when workers are free).
    Every { last: i64, period: i64, cooldown_plus_mean: i64 },
    /// At its cron ticks.
    Cron,
}

impl Fixed {
    /// The first tick at or after `from`, and the interval (`None`: cron).
    pub(crate) fn first(self, every_period: bool, from: i64) -> Option<(i64, i64)> {
        let Fixed::Every { last, period, cooldown_plus_mean } = self else { return None };
        let interval = if every_period { period } else { cooldown_plus_mean }.max(1);
        let k = (from - last + interval - 1).div_euclid(interval).max(1);
        Some((last + k * interval, interval))
    }
}

/// One schedule of the mix.
#[derive(Clone, Debug)]
pub(crate) struct Sched {
    pub id: String,
    pub class: Class,
    pub spec: ScheduleSpec,
    /// Its statistics at the start: one good run before it.
    pub stats: ScheduleStats,
    /// Mean run duration.
    pub mean_ms: f64,
    pub fixed: Fixed,
}

/// The schedules and their seed.
#[derive(Clone, Debug)]
pub(crate) struct Mix {
    pub schedules: Vec<Sched>,
    pub seed: u64,
    /// Chance that a run fails ([`FAIL_SHARE`]).
    pub fail_share: f64,
}

/// A uniform draw in [0, 1) for (`seed`, `key`, `what`).
fn unit(seed: u64, key: u64, what: u64) -> f64 {
    let h = splitmix64(seed ^ splitmix64(key.wrapping_mul(0x1000_0001) ^ splitmix64(what)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller).
fn normal(seed: u64, key: u64, what: u64) -> f64 {
    let u1 = unit(seed, key, what ^ 0x4000_0000_0000_0000).max(1e-12);
    let u2 = unit(seed, key, what ^ 0x2000_0000_0000_0000);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

// Draw names: what each `unit` call is for.
const D_CLASS: u64 = 1;
const D_MEAN: u64 = 2;
const D_COOLDOWN: u64 = 3;
const D_PHASE: u64 = 4;
const D_MINUTE: u64 = 5;
const D_HOUR: u64 = 6;
const D_ZONE: u64 = 7;
/// Runs draw from here up (two draws each for the duration, one for failure).
const D_RUN: u64 = 1 << 32;

impl Mix {
    /// `count` schedules drawn from [`MIX`] with `seed`, virtual time starting at `start`.
    pub(crate) fn new(count: u32, seed: u64, start: i64) -> anyhow::Result<Mix> {
        let schedules = (0..count).map(|i| Mix::draw(seed, start, i)).collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Mix { schedules, seed, fail_share: FAIL_SHARE })
    }

    pub(super) fn draw(seed: u64, start: i64, i: u32) -> anyhow::Result<Sched> {
        let key = u64::from(i);
        let mut pick = unit(seed, key, D_CLASS);
        let mut class = MIX[MIX.len() - 1].0;
        for (c, share) in MIX {
            if pick < share {
                class = c;
                break;
            }
            pick -= share;
        }
        let bound_ms = class.period_ms().or(class.max_duration_ms()).unwrap_or(DAY_MS);
        let cap_s = MEAN_MAX_S.min(bound_ms as f64 / 10_000.0);
        let mean_s = (MEAN_MEDIAN_S * (MEAN_SIGMA * normal(seed, key, D_MEAN)).exp()).clamp(MEAN_MIN_S, cap_s);
        let mean_ms = mean_s * 1_000.0;
        let id = format!("s{i:05}");
        let (cadence, time_zone) = match class.period_ms() {
            Some(period) => {
                let share = COOLDOWN_SHARE.0 + (COOLDOWN_SHARE.1 - COOLDOWN_SHARE.0) * unit(seed, key, D_COOLDOWN);
                let cooldown_ms = (period as f64 * share) as i64;
                (Cadence::Periodic { scheduling_period_ms: period, cooldown_ms }, "UTC".to_owned())
            }
            None => {
                let minute = (unit(seed, key, D_MINUTE) * 60.0) as u32;
                let expression = if class == Class::CronHourly {
                    format!("{minute} * * * *")
                } else {
                    format!("{minute} {} * * *", (unit(seed, key, D_HOUR) * 24.0) as u32)
                };
                let zone = TIME_ZONES[(unit(seed, key, D_ZONE) * TIME_ZONES.len() as f64) as usize];
                let max_schedule_duration_ms = class.max_duration_ms().unwrap_or(HOUR_MS);
                (Cadence::Cron { expression, max_schedule_duration_ms }, zone.to_owned())
            }
        };
        let spec = ScheduleSpec {
            cadence,
            time_zone,
            blackouts: Vec::new(),
            start_at: None,
            end_at: None,
            remaining_runs: None,
            catchup_window_ms: CATCHUP_WINDOW_MS,
            overlap: Overlap::Skip,
            max_expected_duration_ms: None,
            max_allowed_duration_ms: None,
        };
        let calendar = Calendar::new(&spec.cadence, &spec.time_zone)
            .with_context(|| format!("schedule {id}: {:?} in {}", spec.cadence, spec.time_zone))?;
        let mean = mean_ms as i64;
        // The last good run before the start: a random phase in the period,
        // or the last cron tick.
        let (last_start, fixed) = match class.period_ms() {
            Some(period) => {
                let room = (period - mean).max(1);
                let last = start - mean - (unit(seed, key, D_PHASE) * room as f64) as i64;
                let cooldown_ms = match spec.cadence {
                    Cadence::Periodic { cooldown_ms, .. } => cooldown_ms,
                    _ => 0,
                };
                (last, Fixed::Every { last, period, cooldown_plus_mean: cooldown_ms + mean })
            }
            None => {
                let tick = calendar
                    .last_tick_at_or_before(&spec.cadence, &id, start - 1)
                    .with_context(|| format!("schedule {id}: no cron tick before the start"))?;
                (tick, Fixed::Cron)
            }
        };
        let last_end = (last_start + mean).min(start);
        let stats = ScheduleStats {
            created_at: start - 30 * DAY_MS,
            last_good_start: Some(last_start),
            last_good_end: Some(last_end),
            last_start: Some(last_start),
            last_end: Some(last_end),
            failures: 0,
            average_good_duration_ms: Some(mean),
            last_nominal: Some(last_start),
            runs: Vec::new(),
            triggered_at: None,
            counts: Default::default(),
        };
        Ok(Sched { id, class, spec, stats, mean_ms, fixed })
    }

    /// How long run `k` of schedule `i` lasts and whether it fails: the same
    /// whatever the policy.
    pub(crate) fn run(&self, i: u32, k: u64) -> (i64, bool) {
        let key = u64::from(i);
        let what = D_RUN + 2 * k;
        let z = normal(self.seed, key, what);
        let factor = (RUN_SIGMA * z - RUN_SIGMA * RUN_SIGMA / 2.0).exp();
        let duration = (self.schedules[i as usize].mean_ms * factor).round().max(1_000.0) as i64;
        let failed = unit(self.seed, key, what + 1) < self.fail_share;
        (duration, failed)
    }

    /// Work per day the constraints need (one run per period or cron
    /// tick, at the mean duration), in worker-ms.
    pub(crate) fn needed_ms_per_day(&self) -> f64 {
        self.schedules.iter().map(|s| s.mean_ms * s.class.runs_per_day()).sum()
    }

    /// Work per day if every periodic schedule ran again as soon as its
    /// cooldown passed (what firing on `can_start_by` asks for when workers
    /// are free), cron schedules once per tick, in worker-ms.
    pub(crate) fn eager_ms_per_day(&self) -> f64 {
        self.schedules
            .iter()
            .map(|s| match s.spec.cadence {
                Cadence::Periodic { cooldown_ms, .. } => s.mean_ms * DAY_MS as f64 / (cooldown_ms as f64 + s.mean_ms),
                _ => s.mean_ms * s.class.runs_per_day(),
            })
            .sum()
    }
}
