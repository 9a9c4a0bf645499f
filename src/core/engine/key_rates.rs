//! Per-key token buckets: at most `rate` starts per second for each fairness
//! key, in bursts of at most `burst`. A key without a bucket has a full one,
//! so only keys that started something recently take memory.

use std::collections::HashMap;

use crate::clock::UnixMillis;

/// The start rates of the fairness keys: a token bucket per key that started a
/// task lately.
#[derive(Debug)]
pub struct KeyRates {
    /// Tokens per millisecond (0: no limit).
    per_ms: f64,
    burst: f64,
    /// Tokens left and when they were counted.
    buckets: HashMap<String, (f64, UnixMillis)>,
}

impl KeyRates {
    /// At most `per_second` starts per second per key (0: no limit), in bursts
    /// of up to `burst` (1 at least).
    pub fn new(per_second: f64, burst: u32) -> Self {
        KeyRates { per_ms: per_second / 1000.0, burst: f64::from(burst.max(1)), buckets: HashMap::new() }
    }

    /// Whether there is a rate limit at all.
    pub fn limited(&self) -> bool {
        self.per_ms > 0.0
    }

    fn tokens(&self, key: &str, now: UnixMillis) -> f64 {
        match self.buckets.get(key) {
            Some((tokens, at)) => (tokens + (now - at).max(0) as f64 * self.per_ms).min(self.burst),
            None => self.burst,
        }
    }

    /// Whether `key` may start a task now.
    pub fn allows(&self, key: &str, now: UnixMillis) -> bool {
        !self.limited() || self.tokens(key, now) >= 1.0
    }

    /// `key` started a task now.
    pub fn consume(&mut self, key: &str, now: UnixMillis) {
        if !self.limited() {
            return;
        }
        let left = self.tokens(key, now) - 1.0;
        self.buckets.insert(key.to_owned(), (left, now));
        if self.buckets.len() > 4096 {
            self.forget_full(now);
        }
    }

    /// A task taken for `key` was not started after all: give the token back.
    pub fn refund(&mut self, key: &str) {
        if let Some(bucket) = self.buckets.get_mut(key) {
            bucket.0 = (bucket.0 + 1.0).min(self.burst);
        }
    }

    /// Drops buckets that have refilled: they are the same as no bucket.
    fn forget_full(&mut self, now: UnixMillis) {
        let (per_ms, burst) = (self.per_ms, self.burst);
        self.buckets.retain(|_, (tokens, at)| *tokens + (now - *at).max(0) as f64 * per_ms < burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_starts_at_most_rate_per_second_after_its_burst() {
        let mut rates = KeyRates::new(2.0, 2);
        let mut started = 0;
        for ms in (0..=1_000).step_by(10) {
            if rates.allows("forge", ms) {
                rates.consume("forge", ms);
                started += 1;
            }
        }
        assert_eq!(started, 4, "a burst of 2, then 2 per second over one second");
        assert!(rates.allows("other", 0), "other keys are not limited by it");
    }

    #[test]
    fn no_rate_means_no_limit() {
        let mut rates = KeyRates::new(0.0, 1);
        for _ in 0..100 {
            assert!(rates.allows("k", 0));
            rates.consume("k", 0);
        }
    }
}
