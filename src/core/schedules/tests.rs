//! Unit tests of the schedule rules, with explicit times.

use proptest::prelude::*;

use super::*;
use crate::clock::UnixMillis;

const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;

/// An RFC 3339 instant in ms since the epoch.
fn at(s: &str) -> UnixMillis {
    chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}")).timestamp_millis()
}

fn periodic(period: i64, cooldown: i64) -> Cadence {
    Cadence::Periodic { scheduling_period_ms: period, cooldown_ms: cooldown }
}

fn cron(expression: &str, max: i64) -> Cadence {
    Cadence::Cron { expression: expression.to_string(), max_schedule_duration_ms: max }
}

fn interval(every: i64, phase: i64, jitter: i64, max: i64) -> Cadence {
    Cadence::Interval { every_ms: every, phase_ms: phase, jitter_ms: jitter, max_schedule_duration_ms: max }
}

fn spec(cadence: Cadence) -> ScheduleSpec {
    ScheduleSpec {
        cadence,
        time_zone: "UTC".to_string(),
        blackouts: Vec::new(),
        start_at: None,
        end_at: None,
        remaining_runs: None,
        catchup_window_ms: HOUR,
        overlap: Overlap::Skip,
        max_expected_duration_ms: None,
        max_allowed_duration_ms: None,
    }
}

fn stats(created_at: UnixMillis) -> ScheduleStats {
    ScheduleStats { created_at, ..ScheduleStats::default() }
}

fn cal(spec: &ScheduleSpec) -> Calendar {
    Calendar::new(&spec.cadence, &spec.time_zone).expect("calendar")
}

fn times(spec: &ScheduleSpec, stats: &ScheduleStats) -> StartTimes {
    start_times(&cal(spec), "s1", spec, stats, 0)
}

fn decide_at(spec: &ScheduleSpec, stats: &ScheduleStats, now: UnixMillis) -> Decision {
    decide(&cal(spec), "s1", spec, stats, now)
}

fn health_at(spec: &ScheduleSpec, stats: &ScheduleStats, now: UnixMillis) -> HealthReport {
    health(&cal(spec), "s1", spec, stats, now)
}

fn fire(nominal: UnixMillis, should_start_by: UnixMillis, missed: u64, overlap_skipped: u64) -> Decision {
    Decision::Fire { nominal, should_start_by, missed, overlap_skipped }
}

/// A record whose last good run started at `start` and ended at `end`.
fn good(created: UnixMillis, start: UnixMillis, end: UnixMillis) -> ScheduleStats {
    ScheduleStats {
        last_good_start: Some(start),
        last_good_end: Some(end),
        last_start: Some(start),
        last_end: Some(end),
        ..stats(created)
    }
}

fn ticks(c: &Calendar, cadence: &Cadence, from: UnixMillis, to: UnixMillis) -> Vec<UnixMillis> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(next) = c.next_tick(cadence, "s1", t) {
        if next > to {
            break;
        }
        out.push(next);
        t = next;
    }
    out
}

// ---- calendar ----

#[test]
fn calendar_rejects_bad_expressions_and_zones() {
    assert!(matches!(Calendar::new(&cron("61 * * * *", HOUR), "UTC"), Err(CalendarError::Cron(_))));
    assert!(matches!(Calendar::new(&cron("* * * *", HOUR), "UTC"), Err(CalendarError::Cron(_))));
    assert!(matches!(Calendar::new(&cron("0 0 0 * * * 2026", HOUR), "UTC"), Err(CalendarError::Cron(_))));
    assert!(matches!(Calendar::new(&cron("0 * * * *", HOUR), "Mars/Olympus"), Err(CalendarError::TimeZone(_))));
    assert!(Calendar::new(&periodic(HOUR, 0), "Europe/Paris").is_ok());
}

#[test]
fn cron_with_seconds_and_strictly_after() {
    let cadence = cron("30 0 * * * *", HOUR); // second 30 of minute 0 of every hour
    let c = Calendar::new(&cadence, "UTC").unwrap();
    assert_eq!(c.next_tick(&cadence, "s1", at("2026-05-01T10:00:00Z")), Some(at("2026-05-01T10:00:30Z")));
    assert_eq!(c.next_tick(&cadence, "s1", at("2026-05-01T10:00:30Z")), Some(at("2026-05-01T11:00:30Z")));
    // A tick is strictly after, also from inside its second.
    assert_eq!(c.next_tick(&cadence, "s1", at("2026-05-01T10:00:30.400Z")), Some(at("2026-05-01T11:00:30Z")));
    assert_eq!(c.next_tick(&cadence, "s1", at("2026-05-01T10:00:29.999Z")), Some(at("2026-05-01T10:00:30Z")));
    assert_eq!(c.last_tick_at_or_before(&cadence, "s1", at("2026-05-01T10:00:30Z")), Some(at("2026-05-01T10:00:30Z")));
    assert_eq!(
        c.last_tick_at_or_before(&cadence, "s1", at("2026-05-01T10:00:29.999Z")),
        Some(at("2026-05-01T09:00:30Z"))
    );
    assert_eq!(c.next_tick(&periodic(HOUR, 0), "s1", 0), None);
}

#[test]
fn paris_spring_forward_fixed_time_fires_once_after_the_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z); 02:30 does not exist.
    let cadence = cron("30 2 * * *", HOUR);
    let c = Calendar::new(&cadence, "Europe/Paris").unwrap();
    let got = ticks(&c, &cadence, at("2026-03-27T12:00:00Z"), at("2026-03-31T12:00:00Z"));
    assert_eq!(
        got,
        vec![
            at("2026-03-28T01:30:00Z"), // 02:30 CET
            at("2026-03-29T01:00:00Z"), // 03:00 CEST, right after the gap
            at("2026-03-30T00:30:00Z"), // 02:30 CEST
            at("2026-03-31T00:30:00Z"),
        ]
    );
    assert_eq!(c.last_tick_at_or_before(&cadence, "s1", at("2026-03-29T05:00:00Z")), Some(at("2026-03-29T01:00:00Z")));
}

#[test]
fn paris_fall_back_fixed_time_fires_once_at_first_occurrence() {
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30 happens twice.
    let cadence = cron("30 2 * * *", HOUR);
    let c = Calendar::new(&cadence, "Europe/Paris").unwrap();
    let got = ticks(&c, &cadence, at("2026-10-24T12:00:00Z"), at("2026-10-26T12:00:00Z"));
    assert_eq!(got, vec![at("2026-10-25T00:30:00Z"), at("2026-10-26T01:30:00Z")]);
    // From inside the second pass of the repeated hour, the last tick is the first pass's.
    assert_eq!(c.last_tick_at_or_before(&cadence, "s1", at("2026-10-25T01:45:00Z")), Some(at("2026-10-25T00:30:00Z")));
}

#[test]
fn new_york_fixed_times_across_both_changes() {
    let cadence = cron("30 2 * * *", HOUR);
    let c = Calendar::new(&cadence, "America/New_York").unwrap();
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z).
    let got = ticks(&c, &cadence, at("2026-03-07T12:00:00Z"), at("2026-03-09T12:00:00Z"));
    assert_eq!(got, vec![at("2026-03-08T07:00:00Z"), at("2026-03-09T06:30:00Z")]);
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00Z); 01:30 happens twice.
    let cadence = cron("30 1 * * *", HOUR);
    let c = Calendar::new(&cadence, "America/New_York").unwrap();
    let got = ticks(&c, &cadence, at("2026-10-31T12:00:00Z"), at("2026-11-02T12:00:00Z"));
    assert_eq!(got, vec![at("2026-11-01T05:30:00Z"), at("2026-11-02T06:30:00Z")]);
    // A weekday 09:00 in New York, in summer time.
    let cadence = cron("0 9 * * 1-5", HOUR);
    let c = Calendar::new(&cadence, "America/New_York").unwrap();
    assert_eq!(
        c.next_tick(&cadence, "s1", at("2026-06-05T14:00:00Z")), // a Friday, 10:00 EDT
        Some(at("2026-06-08T13:00:00Z"))                         // Monday 09:00 EDT
    );
}

#[test]
fn every_quarter_hour_follows_real_time_across_both_changes() {
    let cadence = cron("*/15 * * * *", HOUR);
    let c = Calendar::new(&cadence, "Europe/Paris").unwrap();
    // Spring: 4 real hours hold 16 ticks, none in the gap.
    let spring = ticks(&c, &cadence, at("2026-03-28T23:00:00Z"), at("2026-03-29T03:00:00Z"));
    assert_eq!(spring.len(), 16);
    assert!(spring.windows(2).all(|w| w[1] - w[0] == 15 * MIN));
    assert!(spring.contains(&at("2026-03-29T00:45:00Z"))); // 01:45 CET
    assert!(spring.contains(&at("2026-03-29T01:00:00Z"))); // 03:00 CEST
    // Autumn: 4 real hours hold 16 ticks, the repeated hour's ticks twice.
    let autumn = ticks(&c, &cadence, at("2026-10-24T22:00:00Z"), at("2026-10-25T02:00:00Z"));
    assert_eq!(autumn.len(), 16);
    assert!(autumn.windows(2).all(|w| w[1] - w[0] == 15 * MIN));
    assert!(autumn.contains(&at("2026-10-25T00:30:00Z"))); // 02:30 CEST
    assert!(autumn.contains(&at("2026-10-25T01:30:00Z"))); // 02:30 CET
    for &t in &autumn {
        assert_eq!(c.last_tick_at_or_before(&cadence, "s1", t), Some(t));
        assert_eq!(c.last_tick_at_or_before(&cadence, "s1", t + 14 * MIN), Some(t));
    }
}

#[test]
fn interval_ticks_with_phase_and_deterministic_bounded_jitter() {
    let plain = interval(10 * MIN, 3 * MIN, 0, HOUR);
    let c = Calendar::new(&plain, "UTC").unwrap();
    assert_eq!(c.next_tick(&plain, "s1", at("2026-05-01T12:00:00Z")), Some(at("2026-05-01T12:03:00Z")));
    assert_eq!(c.next_tick(&plain, "s1", at("2026-05-01T12:03:00Z")), Some(at("2026-05-01T12:13:00Z")));
    assert_eq!(c.last_tick_at_or_before(&plain, "s1", at("2026-05-01T12:12:59Z")), Some(at("2026-05-01T12:03:00Z")));

    let jittered = interval(10 * MIN, 3 * MIN, MIN, HOUR);
    let c = Calendar::new(&jittered, "UTC").unwrap();
    let from = at("2026-05-01T12:00:00Z");
    let got = ticks(&c, &jittered, from, from + 24 * HOUR);
    assert_eq!(got.len(), 144);
    let mut distinct = std::collections::BTreeSet::new();
    for (k, &t) in got.iter().enumerate() {
        let base = from + 3 * MIN + k as i64 * 10 * MIN;
        let jitter = t - base;
        assert!((0..MIN).contains(&jitter), "tick {k}: jitter {jitter}");
        distinct.insert(jitter);
        assert_eq!(c.last_tick_at_or_before(&jittered, "s1", t), Some(t));
        if k > 0 {
            assert_eq!(c.last_tick_at_or_before(&jittered, "s1", t - 1), Some(got[k - 1]));
        }
    }
    assert!(distinct.len() > 100, "jitter spreads the ticks");
    // The same on every node, and different for another schedule.
    let again = Calendar::new(&jittered, "UTC").unwrap();
    assert_eq!(ticks(&again, &jittered, from, from + 24 * HOUR), got);
    let mut t = from;
    let mut others = Vec::new();
    while let Some(n) = c.next_tick(&jittered, "s2", t) {
        if n > from + 24 * HOUR {
            break;
        }
        others.push(n);
        t = n;
    }
    assert_ne!(others, got);
}

#[test]
fn blackouts_in_utc_and_across_midnight() {
    let c = Calendar::new(&periodic(HOUR, 0), "UTC").unwrap();
    let night = [Blackout { start_s: 23 * 3600, end_s: 3600 + 1800 }];
    assert_eq!(c.blackout_end(&night, at("2026-05-01T23:30:00Z")), Some(at("2026-05-02T01:30:00Z")));
    assert_eq!(c.blackout_end(&night, at("2026-05-02T00:10:00Z")), Some(at("2026-05-02T01:30:00Z")));
    assert_eq!(c.blackout_end(&night, at("2026-05-02T01:30:00Z")), None);
    assert_eq!(c.blackout_end(&night, at("2026-05-01T22:59:59.999Z")), None);
    // Windows that touch are merged.
    let two = [Blackout { start_s: 3600, end_s: 2 * 3600 }, Blackout { start_s: 2 * 3600, end_s: 3 * 3600 }];
    assert_eq!(c.blackout_end(&two, at("2026-05-01T01:15:00Z")), Some(at("2026-05-01T03:00:00Z")));
    // An end of 86,400 s is the next midnight.
    let evening = [Blackout { start_s: 20 * 3600, end_s: 86_400 }];
    assert_eq!(c.blackout_end(&evening, at("2026-05-01T21:00:00Z")), Some(at("2026-05-02T00:00:00Z")));
    // An empty window holds nothing.
    let empty = [Blackout { start_s: 3600, end_s: 3600 }];
    assert_eq!(c.blackout_end(&empty, at("2026-05-01T01:00:00Z")), None);
}

#[test]
fn blackouts_on_paris_dst_days() {
    let c = Calendar::new(&periodic(HOUR, 0), "Europe/Paris").unwrap();
    // 01:00 to 02:30 local on the spring-forward day: 02:30 does not exist,
    // the window ends with the gap (03:00 CEST, 01:00Z).
    let w = [Blackout { start_s: 3600, end_s: 2 * 3600 + 1800 }];
    assert_eq!(c.blackout_end(&w, at("2026-03-29T00:30:00Z")), Some(at("2026-03-29T01:00:00Z")));
    // 02:15 to 02:45 local on the fall-back day holds in both passes.
    let w = [Blackout { start_s: 2 * 3600 + 900, end_s: 2 * 3600 + 2700 }];
    assert_eq!(c.blackout_end(&w, at("2026-10-25T00:20:00Z")), Some(at("2026-10-25T00:45:00Z")));
    assert_eq!(c.blackout_end(&w, at("2026-10-25T00:50:00Z")), None);
    assert_eq!(c.blackout_end(&w, at("2026-10-25T01:20:00Z")), Some(at("2026-10-25T01:45:00Z")));
    // An ordinary day: 22:00 to 02:00 local is 20:00Z to 00:00Z in summer.
    let w = [Blackout { start_s: 22 * 3600, end_s: 2 * 3600 }];
    assert_eq!(c.blackout_end(&w, at("2026-07-01T21:00:00Z")), Some(at("2026-07-02T00:00:00Z")));
}

// ---- start times ----

#[test]
fn periodic_never_run_can_and_should_are_creation() {
    let s = spec(periodic(24 * HOUR, HOUR));
    let created = at("2026-05-01T10:00:00Z");
    let t = times(&s, &stats(created));
    assert_eq!(t, StartTimes { can_start_by: created, should_start_by: created, nominal: created });
    assert_eq!(decide_at(&s, &stats(created), created), fire(created, created, 0, 0));
}

#[test]
fn periodic_can_and_should_from_cooldown_and_average() {
    let s = spec(periodic(24 * HOUR, HOUR));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T11:00:00Z"));
    st.average_good_duration_ms = Some(30 * MIN);
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-01T12:00:00Z"));
    assert_eq!(t.should_start_by, at("2026-05-02T09:30:00Z"));
    assert_eq!(t.nominal, t.can_start_by);
    assert_eq!(
        decide_at(&s, &st, at("2026-05-01T11:59:00Z")),
        Decision::Wait { until: Some(at("2026-05-01T12:00:00Z")) }
    );
}

#[test]
fn should_is_floored_at_the_last_good_end() {
    let s = spec(periodic(HOUR, 0));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T12:00:00Z"));
    st.average_good_duration_ms = Some(2 * HOUR);
    // 10:00 + 1 h - 2 h = 09:00, floored at the last good end.
    assert_eq!(times(&s, &st).should_start_by, at("2026-05-01T12:00:00Z"));
}

#[test]
fn failure_backoff_after_1_2_3_and_5_failures() {
    let s = spec(periodic(24 * HOUR, 0));
    let mut st = good(0, at("2026-05-01T08:00:00Z"), at("2026-05-01T09:00:00Z"));
    st.last_start = Some(at("2026-05-01T11:00:00Z"));
    st.last_end = Some(at("2026-05-01T12:00:00Z"));
    for (failures, can) in [
        (1, "2026-05-01T12:05:00Z"),
        (2, "2026-05-01T13:00:00Z"),
        (3, "2026-05-01T16:00:00Z"),
        (5, "2026-05-01T16:00:00Z"),
    ] {
        st.failures = failures;
        let t = times(&s, &st);
        assert_eq!(t.can_start_by, at(can), "{failures} failures");
        assert_eq!(t.should_start_by, at("2026-05-02T08:00:00Z"));
    }
    // A cron run pushed by backoff gets the pushed time as nominal.
    let s = spec(cron("0 * * * *", HOUR));
    st.failures = 1;
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-01T12:05:00Z"));
    assert_eq!(t.nominal, at("2026-05-01T12:05:00Z"));
    assert_eq!(t.should_start_by, at("2026-05-01T10:00:00Z")); // 09:00 tick + 1 h, floored at 09:00
}

#[test]
fn a_trigger_lowers_can() {
    let s = spec(periodic(24 * HOUR, 2 * HOUR));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T11:00:00Z"));
    st.triggered_at = Some(at("2026-05-01T11:30:00Z"));
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-01T11:30:00Z"));
    assert_eq!(t.nominal, at("2026-05-01T11:30:00Z"));

    let mut s = spec(cron("0 * * * *", HOUR));
    let mut st = good(0, at("2026-05-01T11:00:00Z"), at("2026-05-01T11:10:00Z"));
    st.last_nominal = Some(at("2026-05-01T11:00:00Z"));
    st.triggered_at = Some(at("2026-05-01T11:20:00Z"));
    let now = at("2026-05-01T11:30:00Z");
    let d = decide_at(&s, &st, now);
    // The constraint still counts from the 12:00 tick: 12:00 + 1 h.
    assert_eq!(d, fire(at("2026-05-01T11:20:00Z"), at("2026-05-01T13:00:00Z"), 0, 0));
    fired(&mut s, &mut st, at("2026-05-01T11:20:00Z"), 0, 7, now);
    assert_eq!(st.triggered_at, None);
    assert_eq!(st.last_nominal, Some(at("2026-05-01T11:20:00Z")));
}

#[test]
fn a_blackout_pushes_can_and_not_should() {
    let mut s = spec(cron("0 2 * * *", 6 * HOUR));
    s.blackouts = vec![Blackout { start_s: 3600, end_s: 3 * 3600 }];
    let st = good(0, at("2026-05-01T02:00:00Z"), at("2026-05-01T02:30:00Z"));
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-02T03:00:00Z"));
    assert_eq!(t.nominal, at("2026-05-02T03:00:00Z"));
    assert_eq!(t.should_start_by, at("2026-05-02T08:00:00Z"));
    assert_eq!(
        decide_at(&s, &st, at("2026-05-02T02:00:00Z")),
        Decision::Wait { until: Some(at("2026-05-02T03:00:00Z")) }
    );
    assert_eq!(
        decide_at(&s, &st, at("2026-05-02T03:00:00Z")),
        fire(at("2026-05-02T03:00:00Z"), at("2026-05-02T08:00:00Z"), 0, 0)
    );
}

#[test]
fn a_blackout_across_midnight_pushes_can() {
    let mut s = spec(cron("0 0 * * *", 6 * HOUR));
    s.time_zone = "Europe/Paris".to_string();
    s.blackouts = vec![Blackout { start_s: 23 * 3600, end_s: 3600 + 1800 }];
    // Midnight in Paris in May is 22:00Z; the window ends at 01:30 local, 23:30Z.
    let st = good(0, at("2026-05-01T22:00:00Z"), at("2026-05-01T22:10:00Z"));
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-02T23:30:00Z"));
    assert_eq!(t.should_start_by, at("2026-05-03T04:00:00Z"));
}

#[test]
fn start_at_and_end_at_bound_the_ticks() {
    // No tick before start_at: an hourly cron created at 09:00 and allowed
    // from 10:30 first fires the 11:00 tick.
    let mut s = spec(cron("0 * * * *", HOUR));
    s.start_at = Some(at("2026-05-01T10:30:00Z"));
    let st = stats(at("2026-05-01T09:00:00Z"));
    let t = times(&s, &st);
    assert_eq!(t.can_start_by, at("2026-05-01T11:00:00Z"));
    assert_eq!(t.nominal, at("2026-05-01T11:00:00Z"));
    // A periodic schedule starts at start_at.
    let mut p = spec(periodic(HOUR, 0));
    p.start_at = Some(at("2026-05-01T10:30:00Z"));
    assert_eq!(times(&p, &st).can_start_by, at("2026-05-01T10:30:00Z"));
    // No tick after end_at.
    s.start_at = None;
    s.end_at = Some(at("2026-05-01T11:30:00Z"));
    let done = good(0, at("2026-05-01T11:00:00Z"), at("2026-05-01T11:05:00Z"));
    assert_eq!(decide_at(&s, &done, at("2026-05-01T12:00:00Z")), Decision::Wait { until: None });
    // A catch-up never fires a tick after end_at.
    let behind = good(0, at("2026-05-01T08:00:00Z"), at("2026-05-01T08:05:00Z"));
    assert!(matches!(
        decide_at(&s, &behind, at("2026-05-01T13:00:00Z")),
        Decision::Fire { nominal, .. } if nominal == at("2026-05-01T11:00:00Z")
    ));
}

#[test]
fn no_runs_left_waits_for_nothing() {
    let mut s = spec(periodic(HOUR, 0));
    s.remaining_runs = Some(0);
    assert_eq!(decide_at(&s, &stats(0), at("2026-05-01T10:00:00Z")), Decision::Wait { until: None });
    s.remaining_runs = Some(1);
    let mut st = stats(0);
    let now = at("2026-05-01T10:00:00Z");
    let Decision::Fire { nominal, should_start_by, .. } = decide_at(&s, &st, now) else {
        panic!("one run left");
    };
    fired(&mut s, &mut st, nominal, should_start_by, 1, now);
    assert_eq!(s.remaining_runs, Some(0));
    assert!(ended(&s, &mut st, 1, RunEnd::Succeeded, true, now + MIN));
    assert_eq!(decide_at(&s, &st, now + HOUR), Decision::Wait { until: None });
}

// ---- decide ----

#[test]
fn catch_up_after_an_outage_of_ten_ticks_fires_once() {
    let mut s = spec(cron("0 * * * *", HOUR));
    s.catchup_window_ms = 2 * HOUR;
    let mut st = good(0, at("2026-05-01T00:00:00Z"), at("2026-05-01T00:10:00Z"));
    st.last_nominal = Some(at("2026-05-01T00:00:00Z"));
    // Ticks 01:00 to 10:00 came while no node ran; at 10:30, the 10:00
    // tick fires; 01:00 to 08:00 are older than the 2 h window (missed),
    // 09:00 is within it (skipped).
    let now = at("2026-05-01T10:30:00Z");
    let d = decide_at(&s, &st, now);
    assert_eq!(d, fire(at("2026-05-01T10:00:00Z"), at("2026-05-01T02:00:00Z"), 8, 1));
    let Decision::Fire { nominal, should_start_by, missed, overlap_skipped } = d else { unreachable!() };
    fired(&mut s, &mut st, nominal, should_start_by, 1, now);
    skipped(&mut st, missed, overlap_skipped);
    assert_eq!(st.counts.missed_catchup_window, 8);
    assert_eq!(st.counts.overlap_skipped, 1);
    assert_eq!(st.counts.fired, 1);
    // Nothing more until the run ends and the next tick comes.
    assert_eq!(decide_at(&s, &st, now), Decision::Wait { until: None });
    assert!(ended(&s, &mut st, 1, RunEnd::Succeeded, true, now + 5 * MIN));
    assert_eq!(decide_at(&s, &st, now + 10 * MIN), Decision::Wait { until: Some(at("2026-05-01T11:00:00Z")) });
}

#[test]
fn catch_up_when_even_the_latest_tick_is_older_than_the_window() {
    let mut s = spec(cron("0 * * * *", HOUR));
    s.catchup_window_ms = 10 * MIN;
    let mut st = good(0, at("2026-05-01T00:00:00Z"), at("2026-05-01T00:10:00Z"));
    st.last_nominal = Some(at("2026-05-01T00:00:00Z"));
    let d = decide_at(&s, &st, at("2026-05-01T10:30:00Z"));
    assert_eq!(d, fire(at("2026-05-01T10:00:00Z"), at("2026-05-01T02:00:00Z"), 9, 0));
}

/// An hourly cron whose 10:00 run is in flight (started), at 11:05.
fn one_in_flight(overlap: Overlap) -> (ScheduleSpec, ScheduleStats) {
    let mut s = spec(cron("0 * * * *", HOUR));
    s.overlap = overlap;
    let mut st = good(0, at("2026-05-01T09:00:00Z"), at("2026-05-01T09:10:00Z"));
    fired(&mut s, &mut st, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:50:00Z"), 1, at("2026-05-01T10:00:00Z"));
    assert!(started(&mut st, 1, 1, at("2026-05-01T10:00:01Z")));
    (s, st)
}

#[test]
fn overlap_skip_waits_while_a_run_is_in_flight() {
    let (s, mut st) = one_in_flight(Overlap::Skip);
    let now = at("2026-05-01T11:05:00Z");
    assert_eq!(decide_at(&s, &st, now), Decision::Wait { until: None });
    // Once it ends, the 11:00 tick fires; nothing was passed over.
    assert!(ended(&s, &mut st, 1, RunEnd::Succeeded, true, now));
    // should = 11:00 + 1 h - the 1 h 5 min average, floored at the last good end.
    assert_eq!(decide_at(&s, &st, now), fire(at("2026-05-01T11:00:00Z"), now, 0, 0));
    // Had it run until 12:30, the 11:00 tick is passed over: as an overlap
    // within a 2 h catch-up window, as missed past a 1 h one.
    let (mut s, mut st) = one_in_flight(Overlap::Skip);
    let late = at("2026-05-01T12:30:00Z");
    assert!(ended(&s, &mut st, 1, RunEnd::Succeeded, true, late));
    assert_eq!(decide_at(&s, &st, late), fire(at("2026-05-01T12:00:00Z"), late, 1, 0));
    s.catchup_window_ms = 2 * HOUR;
    assert_eq!(decide_at(&s, &st, late), fire(at("2026-05-01T12:00:00Z"), late, 0, 1));
}

#[test]
fn overlap_buffer_one_fires_one_due_tick_behind_the_running_one() {
    let (mut s, mut st) = one_in_flight(Overlap::BufferOne);
    let now = at("2026-05-01T11:05:00Z");
    let d = decide_at(&s, &st, now);
    // The 10:00 tick is still owed: should = 10:00 + 1 h.
    assert_eq!(d, fire(at("2026-05-01T11:00:00Z"), at("2026-05-01T11:00:00Z"), 0, 0));
    fired(&mut s, &mut st, at("2026-05-01T11:00:00Z"), at("2026-05-01T11:00:00Z"), 2, now);
    assert_eq!(decide_at(&s, &st, at("2026-05-01T12:05:00Z")), Decision::Wait { until: None });
    // Not a tick early: with one in flight and the next tick ahead, it waits for it.
    let (s, st) = one_in_flight(Overlap::BufferOne);
    assert_eq!(
        decide_at(&s, &st, at("2026-05-01T10:30:00Z")),
        Decision::Wait { until: Some(at("2026-05-01T11:00:00Z")) }
    );
}

#[test]
fn overlap_allow_all_fires_up_to_the_bound() {
    let (mut s, mut st) = one_in_flight(Overlap::AllowAll);
    let mut now = at("2026-05-01T11:00:00Z");
    for task in 2..=MAX_RUNS_IN_FLIGHT as i64 {
        match decide_at(&s, &st, now) {
            Decision::Fire { nominal, should_start_by, .. } => {
                assert_eq!(nominal, now);
                fired(&mut s, &mut st, nominal, should_start_by, task, now);
            }
            other => panic!("run {task}: {other:?}"),
        }
        now += HOUR;
    }
    assert_eq!(st.runs.len(), MAX_RUNS_IN_FLIGHT);
    assert_eq!(decide_at(&s, &st, now), Decision::Wait { until: None });
}

#[test]
fn a_periodic_schedule_waits_for_its_run_whatever_the_overlap() {
    for overlap in [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll] {
        let mut s = spec(periodic(HOUR, 0));
        s.overlap = overlap;
        let mut st = stats(at("2026-05-01T10:00:00Z"));
        let now = at("2026-05-01T10:00:00Z");
        fired(&mut s, &mut st, now, now, 1, now);
        assert_eq!(decide_at(&s, &st, now + MIN), Decision::Wait { until: None });
    }
}

#[test]
fn inside_a_blackout_decide_waits_for_its_end() {
    let mut s = spec(periodic(HOUR, 0));
    s.blackouts = vec![Blackout { start_s: 12 * 3600, end_s: 13 * 3600 }];
    let st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:10:00Z"));
    assert_eq!(
        decide_at(&s, &st, at("2026-05-01T12:15:00Z")),
        Decision::Wait { until: Some(at("2026-05-01T13:00:00Z")) }
    );
}

// ---- health ----

#[test]
fn health_ok_with_its_deadline() {
    let s = spec(periodic(24 * HOUR, 0));
    let st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:30:00Z"));
    let h = health_at(&s, &st, at("2026-05-01T12:00:00Z"));
    assert_eq!(h.health, Health::Ok, "{h:?}");
    assert_eq!(h.error_at, Some(at("2026-05-02T10:00:00Z")));
}

#[test]
fn health_warning_when_the_running_run_will_end_late() {
    let s = spec(periodic(24 * HOUR, 0));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T13:00:00Z"));
    st.average_good_duration_ms = Some(3 * HOUR);
    st.runs.push(Run {
        nominal: at("2026-05-02T08:00:00Z"),
        task_id: 1,
        added_at: at("2026-05-02T08:00:00Z"),
        started_at: Some(at("2026-05-02T08:00:00Z")),
        attempt: 1,
        should_start_by: at("2026-05-02T07:00:00Z"),
    });
    let h = health_at(&s, &st, at("2026-05-02T08:30:00Z"));
    assert_eq!(h.health, Health::Warning);
    assert!(h.reason.contains("expected to end at 2026-05-02T11:00:00Z"), "{}", h.reason);
    assert_eq!(h.error_at, Some(at("2026-05-02T10:00:00Z")));
}

#[test]
fn health_warning_when_the_running_run_outlives_its_average() {
    let s = spec(periodic(24 * HOUR, 0));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T11:00:00Z"));
    st.average_good_duration_ms = Some(HOUR);
    st.runs.push(Run {
        nominal: at("2026-05-01T12:00:00Z"),
        task_id: 1,
        added_at: at("2026-05-01T12:00:00Z"),
        started_at: Some(at("2026-05-01T12:00:00Z")),
        attempt: 1,
        should_start_by: at("2026-05-02T09:00:00Z"),
    });
    assert_eq!(health_at(&s, &st, at("2026-05-01T12:59:00Z")).health, Health::Ok);
    let h = health_at(&s, &st, at("2026-05-01T13:30:00Z"));
    assert_eq!(h.health, Health::Warning);
    assert!(h.reason.contains("longer than its average"), "{}", h.reason);
}

#[test]
fn health_warning_when_a_run_started_now_would_end_late() {
    let s = spec(cron("0 * * * *", 30 * MIN));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:20:00Z"));
    st.average_good_duration_ms = Some(20 * MIN);
    // The 11:00 run must end by 11:30; started at 11:15 it would end at 11:35.
    assert_eq!(health_at(&s, &st, at("2026-05-01T11:05:00Z")).health, Health::Ok);
    let h = health_at(&s, &st, at("2026-05-01T11:15:00Z"));
    assert_eq!(h.health, Health::Warning);
    assert!(h.reason.contains("a run started now is expected to end 5m after"), "{}", h.reason);
    assert_eq!(h.error_at, Some(at("2026-05-01T11:30:00Z")));
}

#[test]
fn health_warning_when_the_last_run_failed() {
    let s = spec(periodic(24 * HOUR, 0));
    let mut st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:30:00Z"));
    st.failures = 1;
    let h = health_at(&s, &st, at("2026-05-01T12:00:00Z"));
    assert_eq!(h.health, Health::Warning);
    assert_eq!(h.reason, "last run failed");
    assert_eq!(h.error_at, Some(at("2026-05-02T10:00:00Z")));
}

#[test]
fn health_error_periodic() {
    let s = spec(periodic(24 * HOUR, 0));
    let st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:30:00Z"));
    let h = health_at(&s, &st, at("2026-05-02T12:00:00Z"));
    assert_eq!(h.health, Health::Error);
    assert!(h.reason.contains("2h past its deadline"), "{}", h.reason);
    assert_eq!(h.error_at, Some(at("2026-05-02T10:00:00Z")));
}

#[test]
fn health_error_cron() {
    let s = spec(cron("0 * * * *", 30 * MIN));
    let st = good(0, at("2026-05-01T10:00:00Z"), at("2026-05-01T10:20:00Z"));
    let h = health_at(&s, &st, at("2026-05-01T11:45:00Z"));
    assert_eq!(h.health, Health::Error);
    assert!(h.reason.contains("tick at 2026-05-01T11:00:00Z"), "{}", h.reason);
    assert!(h.reason.contains("15m past"), "{}", h.reason);
    assert_eq!(h.error_at, Some(at("2026-05-01T11:30:00Z")));
}

#[test]
fn health_error_never_succeeded_in_24_hours() {
    // A weekly cron created on a Monday: its first tick plus its duration
    // is days away, but 24 h without a success is an error.
    let created = at("2026-05-04T10:00:00Z");
    let s = spec(cron("0 0 * * 0", 48 * HOUR));
    let h = health_at(&s, &stats(created), created + HOUR);
    assert_eq!(h.health, Health::Ok);
    assert_eq!(h.error_at, Some(created + NEVER_SUCCEEDED_GRACE_MS));
    let h = health_at(&s, &stats(created), created + 25 * HOUR);
    assert_eq!(h.health, Health::Error);
    assert!(h.reason.contains("no run ended well in the 1d after creation"), "{}", h.reason);
    // An hourly cron's first tick plus 30 min comes first.
    let s = spec(cron("0 * * * *", 30 * MIN));
    let h = health_at(&s, &stats(created), created + 2 * HOUR);
    assert_eq!(h.health, Health::Error);
    assert_eq!(h.error_at, Some(at("2026-05-04T10:30:00Z")));
    // A periodic schedule never run.
    let s = spec(periodic(HOUR, 0));
    let h = health_at(&s, &stats(created), created + 24 * HOUR + 1);
    assert_eq!(h.health, Health::Error);
    assert_eq!(h.error_at, Some(created + NEVER_SUCCEEDED_GRACE_MS));
}

// ---- runs ----

#[test]
fn moving_average_over_three_durations() {
    let mut s = spec(periodic(HOUR, 0));
    let mut st = stats(0);
    let mut now = at("2026-05-01T10:00:00Z");
    let mut averages = Vec::new();
    for (task, seconds) in [(1, 100), (2, 200), (3, 400)] {
        fired(&mut s, &mut st, now, now, task, now);
        assert!(started(&mut st, task, 1, now));
        now += seconds * 1000;
        assert!(ended(&s, &mut st, task, RunEnd::Succeeded, true, now));
        averages.push(st.average_good_duration_ms.unwrap());
        now += HOUR;
    }
    // 100 s; 0.37 * 200 + 0.63 * 100 = 137 s; 0.37 * 400 + 0.63 * 137 = 234.31 s.
    assert_eq!(averages, vec![100_000, 137_000, 234_310]);
    assert_eq!(st.counts.succeeded, 3);
    assert_eq!(st.failures, 0);
}

#[test]
fn a_higher_attempt_counts_a_lost_lease() {
    let mut s = spec(periodic(HOUR, 0));
    s.max_expected_duration_ms = Some(10 * MIN);
    let mut st = stats(0);
    let t0 = at("2026-05-01T10:00:00Z");
    fired(&mut s, &mut st, t0, t0 + MIN, 9, t0);
    assert!(!started(&mut st, 8, 1, t0));
    assert!(started(&mut st, 9, 1, t0 + 2 * MIN));
    assert_eq!(st.counts.started_late, 1);
    assert_eq!(st.failures, 0);
    // Attempt 2 with no end of attempt 1: attempt 1 lost its lease.
    assert!(started(&mut st, 9, 2, t0 + 20 * MIN));
    assert_eq!(st.failures, 1);
    assert_eq!(st.counts.failed, 1);
    assert_eq!(st.last_start, Some(t0 + 2 * MIN));
    assert_eq!(st.last_end, Some(t0 + 20 * MIN));
    assert_eq!(st.counts.started_late, 1);
    assert_eq!(st.runs[0].attempt, 2);
    // A stale report of attempt 1 changes nothing.
    assert!(started(&mut st, 9, 1, t0 + 21 * MIN));
    assert_eq!(st.runs[0].attempt, 2);
    // Attempt 2 fails but will be retried: the run stays, waiting.
    assert!(ended(&s, &mut st, 9, RunEnd::Failed, false, t0 + 35 * MIN));
    assert_eq!(st.failures, 2);
    assert_eq!(st.counts.over_expected_duration, 1);
    assert_eq!(st.runs[0].started_at, None);
    // Attempt 3 after an end: no lost lease.
    assert!(started(&mut st, 9, 3, t0 + 40 * MIN));
    assert_eq!(st.failures, 2);
    assert!(ended(&s, &mut st, 9, RunEnd::Succeeded, true, t0 + 45 * MIN));
    assert!(st.runs.is_empty());
    assert_eq!(st.failures, 0);
    assert_eq!(st.last_good_start, Some(t0 + 40 * MIN));
    assert!(!ended(&s, &mut st, 9, RunEnd::Succeeded, true, t0 + 46 * MIN));
}

// ---- properties ----

#[derive(Clone, Debug)]
enum Op {
    Advance(i64),
    Decide,
    Start(usize, bool),
    End(usize, bool, bool),
    Trigger(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1i64..40 * MIN).prop_map(Op::Advance),
        Just(Op::Decide),
        (0usize..32, any::<bool>()).prop_map(|(i, next)| Op::Start(i, next)),
        (0usize..32, any::<bool>(), any::<bool>()).prop_map(|(i, ok, last)| Op::End(i, ok, last)),
        (-10 * MIN..MIN).prop_map(Op::Trigger),
    ]
}

fn cadence_strategy() -> impl Strategy<Value = Cadence> {
    prop_oneof![
        Just(cron("*/15 * * * *", 20 * MIN)),
        Just(interval(7 * MIN, MIN, 2 * MIN, 10 * MIN)),
        Just(periodic(HOUR, 5 * MIN)),
    ]
}

proptest! {
    /// Whatever happens to its runs, a schedule never has more runs in
    /// flight than its overlap policy allows, and the ticks it fires never
    /// go back.
    #[test]
    fn runs_in_flight_stay_bounded_and_nominals_grow(
        cadence in cadence_strategy(),
        overlap in prop_oneof![Just(Overlap::Skip), Just(Overlap::BufferOne), Just(Overlap::AllowAll)],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut s = spec(cadence);
        s.overlap = overlap;
        s.time_zone = "Europe/Paris".to_string();
        s.catchup_window_ms = 30 * MIN;
        let c = cal(&s);
        let bound = match overlap {
            Overlap::Skip => 1,
            Overlap::BufferOne => 2,
            Overlap::AllowAll => MAX_RUNS_IN_FLIGHT,
        };
        let mut now = at("2026-10-24T22:00:00Z");
        let mut st = stats(now);
        let mut last_fired: Option<UnixMillis> = None;
        let mut task = 0;
        for op in ops {
            match op {
                Op::Advance(ms) => now += ms,
                Op::Decide => {
                    if let Decision::Fire { nominal, should_start_by, missed, overlap_skipped } =
                        decide(&c, "s1", &s, &st, now)
                    {
                        prop_assert!(nominal <= now, "fired {nominal} in the future of {now}");
                        if let Some(last) = last_fired {
                            prop_assert!(nominal > last, "nominal {nominal} after {last}");
                        }
                        last_fired = Some(nominal);
                        task += 1;
                        fired(&mut s, &mut st, nominal, should_start_by, task, now);
                        skipped(&mut st, missed, overlap_skipped);
                    }
                }
                Op::Start(i, next) => {
                    if !st.runs.is_empty() {
                        let run = &st.runs[i % st.runs.len()];
                        let attempt = if next || run.attempt == 0 { run.attempt + 1 } else { run.attempt };
                        let id = run.task_id;
                        prop_assert!(started(&mut st, id, attempt, now));
                    }
                }
                Op::Trigger(offset) => st.triggered_at = Some(now + offset),
                Op::End(i, ok, last) => {
                    if !st.runs.is_empty() {
                        let id = st.runs[i % st.runs.len()].task_id;
                        let end = if ok { RunEnd::Succeeded } else { RunEnd::Failed };
                        prop_assert!(ended(&s, &mut st, id, end, last, now));
                    }
                }
            }
            prop_assert!(st.runs.len() <= bound, "{} runs in flight under {overlap:?}", st.runs.len());
            prop_assert_eq!(st.last_nominal, last_fired);
        }
    }
}
