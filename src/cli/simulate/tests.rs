//! A small scenario, both arms, checked for sane measures.

use super::*;

fn small() -> Scenario {
    Scenario {
        forge: ForgeParams { origins: 5_000, listers: 8, start: START_MS, days: 6, seed: 11 },
        capacity: Capacity { loaders: 4, host_limit: 2 },
    }
}

#[test]
fn a_small_forge_gives_sane_measures_in_both_arms() {
    let scenario = small();
    let (forge, arms) = simulate(&scenario, None).unwrap();
    let [fairway, baseline] = &arms[..] else { panic!("two arms") };
    let updates: u64 = {
        let mut n = 0u64;
        for id in 0..forge.origins.len() as u32 {
            let mut cursor = forge.cursor(id);
            forge.advance(id, &mut cursor, forge.end(), |_| n += 1);
        }
        n
    };
    for arm in &arms {
        let name = &arm.arm;
        assert!(arm.peak_per_host <= scenario.capacity.host_limit, "{name}: {} on one host", arm.peak_per_host);
        assert_eq!(arm.visits, arm.listers.iter().map(|l| l.visits).sum::<u64>(), "{name}: visits by lister");
        assert_eq!(arm.visits, arm.daily.iter().map(|d| d.visits).sum::<u64>(), "{name}: visits by day");
        assert_eq!(arm.counts.eventful, arm.listers.iter().map(|l| l.useful).sum::<u64>(), "{name}: useful");
        assert_eq!(arm.lag.count, updates, "{name}: every update has a lag");
        assert_eq!(arm.lag.count, arm.listers.iter().map(|l| l.updates).sum::<u64>());
        assert!(arm.unpicked < arm.lag.count, "{name}: some updates were picked up");
        assert!(arm.lag.mean_h > 0.0 && arm.lag.p99_h >= arm.lag.p50_h);
        assert!(arm.lag.p99_h <= f64::from(scenario.forge.days) * 24.0, "{name}: no lag beyond the run");
        assert!(arm.first_visit.count > 0 && arm.first_visit_never <= arm.first_visit.count);
        assert!(arm.listed <= forge.origins.len() as u64 && arm.never_visited <= arm.listed);
        // Capacity-bound: the loaders were busy most of the time.
        let capacity = f64::from(scenario.capacity.loaders) * 86_400.0 / 100.0;
        assert!(arm.visits_per_day < 1.3 * capacity, "{name}: {} visits a day", arm.visits_per_day);
    }
    for lister in &fairway.listers {
        assert!(lister.visits > 0, "fairway: {} got no visit", lister.name);
    }
    assert!(fairway.lag.mean_h < baseline.lag.mean_h, "lag: {:?} vs {:?}", fairway.lag, baseline.lag);
    assert!(fairway.useless_share < baseline.useless_share, "{} vs {}", fairway.useless_share, baseline.useless_share);
}
