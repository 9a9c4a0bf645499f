//! The simulator on small cases: with room to spare nothing is in ERROR
//! (but fixed ticks a period apart, by construction); with one worker, deadline order takes the tighter
//! schedule first and FIFO the one fired first.

use std::sync::atomic::AtomicI64;

use fairway::core::schedules::{Cadence, Calendar};

use super::mix::{Fixed, HOUR_MS, MINUTE_MS};
use super::*;

fn frame(workers: u32, days: u32) -> Frame {
    Frame {
        workers,
        start: START_MS,
        measure_from: START_MS + DAY_MS,
        end: START_MS + i64::from(days) * DAY_MS,
        sample_every: 10 * MINUTE_MS,
        trace: true,
    }
}

fn run(mix: &Mix, policy: Policy, frame: Frame) -> PolicySummary {
    sim::run(mix, policy, frame, &AtomicI64::new(0)).unwrap()
}

#[test]
fn with_a_worker_per_schedule_and_no_failure_no_schedule_is_in_error() {
    let mut mix = Mix::new(300, 7, START_MS).unwrap();
    mix.fail_share = 0.0;
    let periodic = mix.schedules.iter().filter(|s| matches!(s.fixed, Fixed::Every { .. })).count() as u64;
    assert!(periodic > 200 && periodic < 300, "{periodic} periodic schedules");
    let summaries = simulate(&mix, frame(300, 3), None).unwrap();
    assert_eq!(summaries.len(), Policy::ALL.len());
    for (summary, policy) in summaries.iter().zip(Policy::ALL) {
        let name = &summary.policy;
        assert!(summary.runs_completed > 300, "{name}: {} runs", summary.runs_completed);
        assert_eq!(summary.runs_failed, 0);
        assert!(summary.wait_p99_min == 0.0, "{name}: runs waited");
        assert!(summary.busy_share > 0.0 && summary.busy_share < 1.0);
        assert_eq!(summary.samples.len(), 3 * 24 * 6 + 1);
        if policy == Policy::FixedPeriod {
            // Ticks a period apart: the next good start comes a period after
            // the last one at best, and ends later still, so every periodic
            // schedule is in ERROR while each run runs (and every run starts
            // after its should_start_by); cron schedules are fine.
            assert_eq!(summary.ever_in_error, periodic, "{name}: {:?}", summary.ever_in_error_by_class);
            assert!(summary.late_runs > 0);
        } else {
            assert_eq!(summary.ever_in_error, 0, "{name}: {:?}", summary.ever_in_error_by_class);
            assert_eq!(summary.error_schedule_hours, 0.0, "{name}");
            assert_eq!(summary.late_runs, 0, "{name}: late runs");
        }
    }
}

/// A periodic schedule whose last good run started `ago` before the start.
fn periodic(i: u32, period: i64, ago: i64, mean_ms: f64) -> mix::Sched {
    let mut sched = Mix::draw(3, START_MS, i).unwrap();
    sched.class = mix::Class::Every24h;
    sched.spec.cadence = Cadence::Periodic { scheduling_period_ms: period, cooldown_ms: period / 10 };
    sched.spec.time_zone = "UTC".into();
    Calendar::new(&sched.spec.cadence, &sched.spec.time_zone).unwrap();
    let last = START_MS - ago;
    sched.stats.last_good_start = Some(last);
    sched.stats.last_start = Some(last);
    sched.stats.last_good_end = Some(last + mean_ms as i64);
    sched.stats.last_end = Some(last + mean_ms as i64);
    sched.stats.last_nominal = Some(last);
    sched.stats.average_good_duration_ms = Some(mean_ms as i64);
    sched.mean_ms = mean_ms;
    sched.fixed = Fixed::Every { last, period, cooldown_plus_mean: period / 10 + mean_ms as i64 };
    sched
}

#[test]
fn with_one_worker_deadline_order_takes_the_tighter_schedule_first() {
    // Both are due at the start. The loose one (a day's period, 12 h of it
    // left) is first in the list, so fired first; the tight one (an hour's
    // period, 5 min of it left) has the earlier should_start_by.
    let loose = periodic(0, 24 * HOUR_MS, 12 * HOUR_MS, 20.0 * 60_000.0);
    let tight = periodic(1, HOUR_MS, 55 * MINUTE_MS, 60_000.0);
    let mix = Mix { schedules: vec![loose, tight], seed: 3, fail_share: 0.0 };
    let frame = Frame { end: START_MS + 2 * HOUR_MS, measure_from: START_MS, ..frame(1, 1) };
    let edf = run(&mix, Policy::Edf, frame);
    assert_eq!(edf.starts[0], (START_MS, 1), "EDF: the tight schedule first");
    assert_eq!(edf.starts[1].1, 0);
    assert_eq!(edf.ever_in_error, 0, "EDF: {:?}", edf.ever_in_error_by_class);
    let fifo = run(&mix, Policy::FifoDue, frame);
    assert_eq!(fifo.starts[0], (START_MS, 0), "FIFO: the loose schedule, fired first");
    assert_eq!(fifo.starts[1].1, 1);
    assert!(fifo.late_runs >= 1, "FIFO: the tight schedule started after its should_start_by");
}
