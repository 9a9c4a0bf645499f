//! The chance of a change at which an origin is due, moved by what the
//! rounds of its visit type find.
//!
//! A round whose due visits fill every free slot shows loaders that have
//! more to do than they can: visits that may find nothing then take the
//! place of surer ones (a listed change, a first visit), so the threshold
//! rises, a tenth of the way to certainty per round, up to `busy`. A round
//! that sends every due visit and still has free slots shows loaders about
//! to idle: the threshold falls back by the same step, down to `idle`, so
//! the next best expected value gets the spare capacity. A round with no
//! free slot at all (a full queue) counts as busy.
//!
//! Invariant: the chance stays within `idle..=busy` (both below 1) whatever
//! the rounds report, and it moves by at most one step per round.

/// How far towards certainty (or back) one round moves the threshold: the
/// chance of finding nothing is multiplied (or divided) by this.
const STEP: f64 = 0.9;

/// The due threshold of one visit type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DueThreshold {
    chance: f64,
}

/// What a round found, as the threshold reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundLoad {
    /// Every free slot was filled with due visits, or there was none.
    Busy,
    /// Free slots were left after every due visit it could send.
    Idle,
}

impl DueThreshold {
    /// A threshold that starts where loaders idle.
    pub fn new(idle: f64) -> DueThreshold {
        DueThreshold { chance: idle }
    }

    /// The chance of a change at which an origin is due now.
    pub fn chance(self) -> f64 {
        self.chance
    }

    /// Moves the threshold after a round, within `idle..=busy`.
    pub fn after_round(&mut self, load: RoundLoad, idle: f64, busy: f64) {
        let nothing = 1.0 - self.chance;
        let moved = match load {
            RoundLoad::Busy => 1.0 - nothing * STEP,
            RoundLoad::Idle => 1.0 - nothing / STEP,
        };
        self.chance = moved.clamp(idle.min(busy), busy.max(idle));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_rounds_raise_it_to_busy_and_idle_ones_lower_it_to_idle() {
        let mut threshold = DueThreshold::new(0.7);
        threshold.after_round(RoundLoad::Busy, 0.7, 0.95);
        assert!((threshold.chance() - 0.73).abs() < 1e-9, "a tenth of the way: {}", threshold.chance());
        for _ in 0..100 {
            threshold.after_round(RoundLoad::Busy, 0.7, 0.95);
        }
        assert_eq!(threshold.chance(), 0.95);
        let mut rounds = 0;
        while threshold.chance() > 0.7 {
            threshold.after_round(RoundLoad::Idle, 0.7, 0.95);
            rounds += 1;
        }
        assert_eq!(threshold.chance(), 0.7, "never below idle");
        assert_eq!(rounds, 18, "from 5% to 30% of nothing at a step of 0.9: 17 steps and the clamp");
    }

    #[test]
    fn it_stays_within_its_bounds_whatever_the_rounds_say() {
        let mut threshold = DueThreshold::new(0.5);
        let mut unit = 0.37f64;
        for _ in 0..10_000 {
            unit = (unit * 9.1 + 0.13).fract();
            let load = if unit < 0.5 { RoundLoad::Busy } else { RoundLoad::Idle };
            let before = threshold.chance();
            threshold.after_round(load, 0.5, 0.9);
            let chance = threshold.chance();
            assert!((0.5..=0.9).contains(&chance), "{chance}");
            assert!((1.0 - chance) / (1.0 - before) <= 1.0 / STEP + 1e-9, "one step at most");
            assert!((1.0 - chance) / (1.0 - before) >= STEP - 1e-9, "one step at most");
        }
        let mut settings_changed = DueThreshold::new(0.9);
        settings_changed.after_round(RoundLoad::Idle, 0.5, 0.6);
        assert_eq!(settings_changed.chance(), 0.6, "a lower `busy` takes effect at once");
    }
}
