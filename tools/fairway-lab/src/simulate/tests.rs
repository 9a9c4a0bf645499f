//! A small scenario, both arms, checked for sane measures. Which arm wins
//! is not asserted: at this size neither lag nor useless visits favour the
//! same arm across seeds (see docs/scheduler.md, "Simulation").

use super::*;

#[test]
fn a_small_forge_gives_sane_measures_in_both_arms() {
    let scenario = Scenario {
        forge: ForgeParams { origins: 5_000, listers: 8, start: START_MS, days: 6, seed: 11, undated_share: 0.4 },
        capacity: Capacity { loaders: 2, host_limit: 2, change_dates: true },
        fairway: SchedulerConfig::default(),
    };
    let (forge, arms) = simulate(&scenario, None).unwrap();
    let mut updates = 0u64;
    for id in 0..forge.origins.len() as u32 {
        let mut cursor = forge.cursor(id);
        forge.advance(id, &mut cursor, forge.end(), |_| updates += 1);
    }
    assert_eq!(arms.iter().map(|a| a.arm.as_str()).collect::<Vec<_>>(), ["fairway", "baseline"]);
    for arm in &arms {
        let name = &arm.arm;
        assert!(arm.peak_per_host <= scenario.capacity.host_limit, "{name}: {} on one host", arm.peak_per_host);
        assert!(arm.peak_per_host > 0);
        assert_eq!(arm.visits, arm.counts.visits());
        assert_eq!(arm.visits, arm.listers.iter().map(|l| l.visits).sum::<u64>(), "{name}: visits by lister");
        assert_eq!(arm.visits, arm.daily.iter().map(|d| d.visits).sum::<u64>(), "{name}: visits by day");
        assert_eq!(arm.counts.eventful, arm.listers.iter().map(|l| l.useful).sum::<u64>(), "{name}: useful");
        assert_eq!(arm.lag.count, updates, "{name}: every update has a lag");
        assert_eq!(arm.lag.count, arm.listers.iter().map(|l| l.updates).sum::<u64>());
        assert!(arm.unpicked < arm.lag.count, "{name}: updates were picked up");
        assert!(arm.lag.mean_h > 0.0 && arm.lag.p50_h <= arm.lag.p99_h);
        assert!(arm.lag.p99_h <= f64::from(scenario.forge.days) * 24.0, "{name}: no lag beyond the run");
        assert!(arm.first_visit.count > 0 && arm.first_visit_never <= arm.first_visit.count);
        assert!(arm.never_visited <= arm.listed && arm.listed <= forge.origins.len() as u64);
        assert!((0.0..=1.0).contains(&arm.useless_share));
        // No more visits than the loaders can run (a visit takes 5 s at least).
        assert!(arm.loaders_busy > 0.0 && arm.loaders_busy <= 1.0, "{name}: {}", arm.loaders_busy);
        // The time visits waited is part of the run: the loaders' idle time
        // then is part of their idle time.
        assert!(arm.waiting_share > 0.0 && arm.waiting_share <= 1.0, "{name}: {}", arm.waiting_share);
        assert!(arm.loaders_busy_while_waiting <= 1.0, "{name}: {}", arm.loaders_busy_while_waiting);
        let idle_while_waiting = (1.0 - arm.loaders_busy_while_waiting) * arm.waiting_share;
        assert!(idle_while_waiting <= 1.0 - arm.loaders_busy + 1e-9, "{name}: idle more while visits waited");
        let most = u64::from(scenario.capacity.loaders) * u64::from(scenario.forge.days) * 86_400 / 5;
        assert!(arm.visits <= most, "{name}: {} visits", arm.visits);
    }
    let (fairway, baseline) = (&arms[0], &arms[1]);
    // Checked every half hour of the 6 days: 288 checks after rounds.
    let busy = fairway.loaders_busy_while_eligible.expect("the fairway arm measures eligible visits");
    let share = fairway.eligible_share.expect("and how often they existed");
    assert!((0.0..=1.0).contains(&busy) && (0.0..=1.0).contains(&share), "{busy} {share}");
    assert!(share > 0.0, "two loaders for 5,000 origins: due visits of free hosts were left at times");
    assert_eq!(baseline.loaders_busy_while_eligible, None, "the reference's rounds have no due threshold");
    for lister in &fairway.listers {
        assert!(lister.visits > 0, "fairway: {} got no visit", lister.name);
    }
    assert_eq!(fairway.listers_unvisited, 0);
}
