//! One policy's run in virtual time: an event loop on a binary heap of
//! next checks (a schedule's `Wait { until }`, or its next fixed tick), run
//! ends and the times schedules turn ERROR, with a queue of fired runs in
//! the policy's order and a pool of interchangeable workers. Every schedule
//! is scored with the product's `health()`, whatever the policy.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicI64, Ordering};

use fairway::core::schedules::{
    Calendar, Decision, Health, RunEnd, ScheduleSpec, ScheduleStats, decide, ended, fired, health, start_times, started,
};
use serde::Serialize;

use super::mix::{Class, MIX, Mix};

/// `tasks.late_slack`'s default: a late run ranks as due this long from now.
const LATE_SLACK_MS: i64 = 15 * 60 * 1000;

/// How runs are fired and in which order workers take them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Fired when `decide` says so; the earliest `should_start_by` first,
    /// a run already past it ranked as due 15 minutes from now (Fairway's
    /// deadline ordering, `late_slack` at its default).
    Edf,
    /// Fired when `decide` says so; the earliest `should_start_by` first,
    /// late or not (plain EDF, which under overload serves runs already
    /// late and makes the others late in turn).
    EdfPlain,
    /// Fired when `decide` says so; in the order they were fired (due).
    FifoDue,
    /// Fired at fixed ticks whatever the history (a tick is skipped while
    /// the previous run is pending or running); in the order fired. A
    /// periodic schedule ticks every period.
    FixedPeriod,
    /// The same, a periodic schedule ticking every cooldown plus mean
    /// duration (as often as `decide` fires it when workers are free).
    FixedCadence,
}

impl Policy {
    pub(crate) const ALL: [Policy; 5] =
        [Policy::Edf, Policy::EdfPlain, Policy::FifoDue, Policy::FixedPeriod, Policy::FixedCadence];

    fn fixed(self) -> bool {
        matches!(self, Policy::FixedPeriod | Policy::FixedCadence)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Policy::Edf => "deadline order (Fairway)",
            Policy::EdfPlain => "plain EDF",
            Policy::FifoDue => "FIFO (can_start_by)",
            Policy::FixedPeriod => "fixed ticks, every period",
            Policy::FixedCadence => "fixed ticks, every cooldown + mean",
        }
    }
}

/// The run's frame: workers and times.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    pub workers: u32,
    pub start: i64,
    /// Measures count from here (the end of the warm-up).
    pub measure_from: i64,
    pub end: i64,
    /// Between two samples of the schedules in ERROR.
    pub sample_every: i64,
    /// Keep each start (time, schedule) in [`PolicySummary::starts`] (tests).
    pub trace: bool,
}

/// What one policy did, after the warm-up.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PolicySummary {
    pub policy: String,
    /// Schedules in ERROR at some time after the warm-up.
    pub ever_in_error: u64,
    /// The same, by class: (class, schedules of the class, ever in ERROR).
    pub ever_in_error_by_class: Vec<(String, u64, u64)>,
    /// Schedule-hours in ERROR after the warm-up.
    pub error_schedule_hours: f64,
    /// Schedules in ERROR at the end.
    pub in_error_at_end: u64,
    /// Most schedules in ERROR at once after the warm-up (sampled).
    pub peak_in_error: u64,
    pub runs_fired: u64,
    pub runs_started: u64,
    /// Runs started after their `should_start_by`.
    pub late_runs: u64,
    pub runs_completed: u64,
    pub runs_failed: u64,
    /// Share of worker time spent running.
    pub busy_share: f64,
    /// Time from firing to a worker taking the run (minutes).
    pub wait_p50_min: f64,
    pub wait_p99_min: f64,
    /// Ticks passed over while a run was in flight (fixed-time), or that
    /// `decide` reported skipped (the other two).
    pub ticks_skipped: u64,
    /// Runs still queued at the end.
    pub queued_at_end: u64,
    /// (hours since the start, schedules in ERROR), every `sample_every`.
    pub samples: Vec<(f64, f64)>,
    /// Each start (time, schedule), with [`Frame::trace`].
    #[serde(skip)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub starts: Vec<(i64, u32)>,
}

/// A run fired and not ended.
#[derive(Clone, Copy, Debug)]
struct Flight {
    task_id: i64,
    /// Its index among the schedule's runs (its duration's draw).
    k: u64,
    should_start_by: i64,
    fired_at: i64,
    started: bool,
}

struct State {
    spec: ScheduleSpec,
    stats: ScheduleStats,
    calendar: Calendar,
    runs: u64,
    flight: Option<Flight>,
    check_gen: u32,
    health_gen: u32,
    error_since: Option<i64>,
    ever_in_error: bool,
}

// Event kinds, in the order they are handled at the same time: a run's end
// frees a worker and its schedule before checks and ticks look at them.
const END: u8 = 0;
const CHECK: u8 = 1;
const HEALTH: u8 = 2;

type Event = Reverse<(i64, u8, u32, u32)>;

struct Sim<'a> {
    mix: &'a Mix,
    policy: Policy,
    frame: Frame,
    states: Vec<State>,
    events: BinaryHeap<Event>,
    /// (key, sequence, schedule).
    queue: std::collections::BTreeSet<(i64, u64, u32)>,
    free: u32,
    now: i64,
    seq: u64,
    next_task: i64,
    errors_now: u64,
    error_ms: i64,
    samples: Vec<(f64, f64)>,
    peak: u64,
    fired: u64,
    started: u64,
    late: u64,
    completed: u64,
    failed: u64,
    busy_ms: i64,
    waits: Vec<i64>,
    skipped: u64,
    starts: Vec<(i64, u32)>,
}

/// Runs `policy` over `mix` in `frame`; `clock` follows virtual time (for progress).
pub(crate) fn run(mix: &Mix, policy: Policy, frame: Frame, clock: &AtomicI64) -> anyhow::Result<PolicySummary> {
    let states = mix
        .schedules
        .iter()
        .map(|s| {
            Ok(State {
                spec: s.spec.clone(),
                stats: s.stats.clone(),
                calendar: Calendar::new(&s.spec.cadence, &s.spec.time_zone)?,
                runs: 0,
                flight: None,
                check_gen: 0,
                health_gen: 0,
                error_since: None,
                ever_in_error: false,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sim = Sim {
        mix,
        policy,
        frame,
        states,
        events: BinaryHeap::new(),
        queue: std::collections::BTreeSet::new(),
        free: frame.workers,
        now: frame.start,
        seq: 0,
        next_task: 1,
        errors_now: 0,
        error_ms: 0,
        samples: Vec::new(),
        peak: 0,
        fired: 0,
        started: 0,
        late: 0,
        completed: 0,
        failed: 0,
        busy_ms: 0,
        waits: Vec::new(),
        skipped: 0,
        starts: Vec::new(),
    };
    for s in 0..mix.schedules.len() as u32 {
        sim.assess(s);
        let fixed = mix.schedules[s as usize].fixed;
        let first = match fixed.first(policy == Policy::FixedPeriod, frame.start) {
            _ if !policy.fixed() => frame.start,
            Some((first, _)) => first,
            None => {
                let state = &sim.states[s as usize];
                match state.calendar.next_tick(&state.spec.cadence, &mix.schedules[s as usize].id, frame.start - 1) {
                    Some(tick) => tick,
                    None => continue,
                }
            }
        };
        sim.events.push(Reverse((first, CHECK, s, 0)));
    }
    let mut next_sample = frame.start;
    let mut handled = 0u64;
    while let Some(Reverse((at, kind, s, generation))) = sim.events.pop() {
        if at > frame.end {
            break;
        }
        while next_sample <= at {
            sim.sample(next_sample);
            next_sample += frame.sample_every;
        }
        sim.now = at;
        match kind {
            END => sim.end(s),
            CHECK => sim.check(s, generation),
            _ => {
                if sim.states[s as usize].health_gen == generation {
                    sim.assess(s);
                }
            }
        }
        // Workers take runs once everything due at this instant is done:
        // all the runs fired together compete for them.
        if sim.events.peek().is_none_or(|Reverse(next)| next.0 > at) {
            sim.dispatch();
        }
        handled += 1;
        if handled.is_multiple_of(4_096) {
            clock.store(at, Ordering::Relaxed);
        }
    }
    while next_sample <= frame.end {
        sim.sample(next_sample);
        next_sample += frame.sample_every;
    }
    sim.now = frame.end;
    clock.store(frame.end, Ordering::Relaxed);
    Ok(sim.summary())
}

impl Sim<'_> {
    fn sample(&mut self, at: i64) {
        if at >= self.frame.measure_from {
            self.peak = self.peak.max(self.errors_now);
        }
        let hours = (at - self.frame.start) as f64 / 3_600_000.0;
        self.samples.push((hours, self.errors_now as f64));
    }

    /// A check (`decide`) or a fixed tick.
    fn check(&mut self, s: u32, generation: u32) {
        let now = self.now;
        let mix = self.mix;
        let id = &mix.schedules[s as usize].id;
        if self.policy.fixed() {
            let state = &self.states[s as usize];
            let next = match mix.schedules[s as usize].fixed.first(self.policy == Policy::FixedPeriod, now) {
                Some((_, interval)) => Some(now + interval),
                None => state.calendar.next_tick(&state.spec.cadence, id, now),
            };
            if let Some(next) = next {
                self.events.push(Reverse((next, CHECK, s, 0)));
            }
            if state.flight.is_some() {
                self.skipped += 1;
                return;
            }
            let should_start_by = start_times(&state.calendar, id, &state.spec, &state.stats, now).should_start_by;
            self.fire(s, now, should_start_by);
            return;
        }
        let state = &mut self.states[s as usize];
        // A run in flight: its end checks again (overlap Skip).
        if state.check_gen != generation || state.flight.is_some() {
            return;
        }
        match decide(&state.calendar, id, &state.spec, &state.stats, now) {
            Decision::Fire { nominal, should_start_by, overlap_skipped, .. } => {
                self.skipped += overlap_skipped;
                self.fire(s, nominal, should_start_by);
            }
            Decision::Wait { until: Some(until) } => {
                state.check_gen += 1;
                let at = until.max(now + 1);
                self.events.push(Reverse((at, CHECK, s, state.check_gen)));
            }
            Decision::Wait { until: None } => {}
        }
    }

    fn fire(&mut self, s: u32, nominal: i64, should_start_by: i64) {
        let now = self.now;
        let task_id = self.next_task;
        self.next_task += 1;
        let state = &mut self.states[s as usize];
        fired(&mut state.spec, &mut state.stats, nominal, should_start_by, task_id, now);
        state.flight = Some(Flight { task_id, k: state.runs, should_start_by, fired_at: now, started: false });
        state.runs += 1;
        let key = match self.policy {
            Policy::Edf | Policy::EdfPlain => should_start_by,
            Policy::FifoDue | Policy::FixedPeriod | Policy::FixedCadence => now,
        };
        self.seq += 1;
        self.queue.insert((key, self.seq, s));
        if now >= self.frame.measure_from {
            self.fired += 1;
        }
        self.assess(s);
    }

    /// Free workers take the first runs of the queue.
    fn dispatch(&mut self) {
        let now = self.now;
        while self.free > 0 {
            // Deadline order as the engine does it (`deadline_rank`): a run
            // past its latest safe start ranks as due `late_slack` from now,
            // behind the runs due sooner (serving it first would make them
            // late too) and before those that can wait.
            let first = match self.policy {
                Policy::Edf => {
                    let on_time = self.queue.range((now, 0, 0)..).next().copied();
                    let late = self.queue.first().copied().filter(|f| f.0 < now);
                    match (on_time, late) {
                        (Some(o), Some(l)) => Some(if o.0 > now.saturating_add(LATE_SLACK_MS) { l } else { o }),
                        (o, l) => o.or(l),
                    }
                }
                _ => self.queue.first().copied(),
            };
            let Some(first) = first else { break };
            self.queue.remove(&first);
            let (_, _, s) = first;
            self.free -= 1;
            let state = &mut self.states[s as usize];
            let flight = state.flight.as_mut().expect("a queued run is in flight");
            flight.started = true;
            let flight = *flight;
            started(&mut state.stats, flight.task_id, 1, now);
            let (duration, _) = self.mix.run(s, flight.k);
            if self.frame.trace {
                self.starts.push((now, s));
            }
            self.events.push(Reverse((now + duration, END, s, 0)));
            let from = now.max(self.frame.measure_from);
            let to = (now + duration).min(self.frame.end);
            self.busy_ms += (to - from).max(0);
            if now >= self.frame.measure_from {
                self.started += 1;
                self.waits.push(now - flight.fired_at);
                if now > flight.should_start_by {
                    self.late += 1;
                }
            }
            self.assess(s);
        }
    }

    fn end(&mut self, s: u32) {
        let now = self.now;
        self.free += 1;
        let state = &mut self.states[s as usize];
        let flight = state.flight.take().expect("an ending run is in flight");
        debug_assert!(flight.started);
        let (_, failed) = self.mix.run(s, flight.k);
        let end = if failed { RunEnd::Failed } else { RunEnd::Succeeded };
        ended(&state.spec, &mut state.stats, flight.task_id, end, true, now);
        if now >= self.frame.measure_from {
            self.completed += 1;
            self.failed += u64::from(failed);
        }
        self.assess(s);
        if !self.policy.fixed() {
            let generation = self.states[s as usize].check_gen;
            self.check(s, generation);
        }
    }

    /// Scores schedule `s` with `health()` now, and arms a look at the
    /// time it turns ERROR.
    fn assess(&mut self, s: u32) {
        let now = self.now;
        let mix = self.mix;
        let state = &mut self.states[s as usize];
        let report = health(&state.calendar, &mix.schedules[s as usize].id, &state.spec, &state.stats, now);
        if report.health == Health::Error {
            if state.error_since.is_none() {
                state.error_since = Some(now);
                self.errors_now += 1;
            }
            return;
        }
        if let Some(since) = state.error_since.take() {
            self.errors_now -= 1;
            let spent = now.min(self.frame.end) - since.max(self.frame.measure_from);
            if spent > 0 {
                self.error_ms += spent;
                state.ever_in_error = true;
            }
        }
        // ERROR exactly when `now > error_at`: look again just after it.
        if let Some(at) = report.error_at.map(|at| at.saturating_add(1)).filter(|&at| at > now) {
            state.health_gen += 1;
            self.events.push(Reverse((at, HEALTH, s, state.health_gen)));
        }
    }

    fn summary(mut self) -> PolicySummary {
        let end = self.frame.end;
        let mut in_error_at_end = 0;
        for state in &mut self.states {
            if let Some(since) = state.error_since {
                in_error_at_end += 1;
                let spent = end - since.max(self.frame.measure_from);
                if spent > 0 {
                    self.error_ms += spent;
                    state.ever_in_error = true;
                }
            }
        }
        let by_class = MIX
            .iter()
            .map(|&(class, _)| {
                let of = |c: Class| self.mix.schedules.iter().zip(&self.states).filter(move |(m, _)| m.class == c);
                let total = of(class).count() as u64;
                let errors = of(class).filter(|(_, st)| st.ever_in_error).count() as u64;
                (class.name().to_owned(), total, errors)
            })
            .collect();
        self.waits.sort_unstable();
        let quantile = |q: f64| -> f64 {
            if self.waits.is_empty() {
                return 0.0;
            }
            let i = ((self.waits.len() - 1) as f64 * q).round() as usize;
            self.waits[i] as f64 / 60_000.0
        };
        let span = (end - self.frame.measure_from) as f64 * f64::from(self.frame.workers);
        PolicySummary {
            policy: self.policy.name().to_owned(),
            ever_in_error: self.states.iter().filter(|s| s.ever_in_error).count() as u64,
            ever_in_error_by_class: by_class,
            error_schedule_hours: self.error_ms as f64 / 3_600_000.0,
            in_error_at_end,
            peak_in_error: self.peak,
            runs_fired: self.fired,
            runs_started: self.started,
            late_runs: self.late,
            runs_completed: self.completed,
            runs_failed: self.failed,
            busy_share: self.busy_ms as f64 / span.max(1.0),
            wait_p50_min: quantile(0.5),
            wait_p99_min: quantile(0.99),
            ticks_skipped: self.skipped,
            queued_at_end: self.queue.len() as u64,
            samples: self.samples,
            starts: self.starts,
        }
    }
}
