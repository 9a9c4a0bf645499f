//! Which keys a partition handed out lately, and how much: the share of
//! dispatch each key had over the last 10 to 20 seconds, for operators to set
//! beside the key's weighted target (`DescribeQueue`, the console).
//!
//! Invariants: counts only what was handed out (leases made durable); holds
//! at most [`MAX_TALLIED_KEYS`] keys per window, the tasks of keys past them
//! counted together as others; windows of [`TALLY_WINDOW_MS`] rotate on the
//! time the caller gives, and a window older than the one before the current
//! is dropped whole.

use std::collections::HashMap;

use crate::clock::UnixMillis;

/// How long one window of the tally lasts.
pub const TALLY_WINDOW_MS: i64 = 10_000;

/// The most keys counted by name per window.
pub const MAX_TALLIED_KEYS: usize = 1024;

/// Tasks and their cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tasks handed out.
    pub tasks: u64,
    /// Their costs, summed (what a key's share of dispatch is measured in).
    pub cost: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.tasks += other.tasks;
        self.cost += other.cost;
    }
}

/// What one key was handed out.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyDispatch {
    /// The fairness key.
    pub fairness_key: String,
    /// Its tasks handed out, and their cost.
    pub tally: Tally,
    /// Its weight in the queue's settings (the producers' weights aside);
    /// 0 until the engine fills it in.
    pub weight: f64,
}

/// What was handed out over a span of time, by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecentDispatch {
    /// How long the tally covers, up to now, in ms.
    pub span_ms: i64,
    /// The keys counted by name, most cost first.
    pub keys: Vec<KeyDispatch>,
    /// The keys past [`MAX_TALLIED_KEYS`] in a window, together.
    pub others: Tally,
}

#[derive(Debug, Default)]
struct Window {
    started_at: UnixMillis,
    keys: HashMap<String, Tally>,
    others: Tally,
}

/// The tally of one partition: the current window and the one before.
#[derive(Debug, Default)]
pub struct DispatchTally {
    current: Window,
    previous: Option<Window>,
}

impl DispatchTally {
    /// Counts a task of `key` and `cost` handed out at `now`.
    pub fn record(&mut self, key: &str, cost: u32, now: UnixMillis) {
        self.rotate(now);
        let tally = Tally { tasks: 1, cost: u64::from(cost) };
        let window = &mut self.current;
        let room = window.keys.len() < MAX_TALLIED_KEYS;
        match window.keys.get_mut(key) {
            Some(counted) => counted.add(tally),
            None if room => {
                window.keys.insert(key.to_owned(), tally);
            }
            None => window.others.add(tally),
        }
    }

    /// What was handed out over the last 10 to 20 s (less since the first
    /// dispatch), the `top` keys with the most cost first.
    pub fn recent(&self, top: usize, now: UnixMillis) -> RecentDispatch {
        let fresh = |w: &&Window| now - w.started_at < 2 * TALLY_WINDOW_MS;
        let windows: Vec<&Window> = self.previous.iter().chain([&self.current]).filter(fresh).collect();
        let Some(first) = windows.first() else { return RecentDispatch::default() };
        let mut keys: HashMap<&str, Tally> = HashMap::new();
        let mut others = Tally::default();
        for window in &windows {
            for (key, tally) in &window.keys {
                keys.entry(key).or_default().add(*tally);
            }
            others.add(window.others);
        }
        let mut keys: Vec<(String, Tally)> = keys.into_iter().map(|(k, t)| (k.to_owned(), t)).collect();
        keys.sort_by(|a, b| b.1.cost.cmp(&a.1.cost).then_with(|| a.0.cmp(&b.0)));
        for (_, tally) in keys.drain(top.min(keys.len())..) {
            others.add(tally);
        }
        let keys = keys.into_iter().map(|(fairness_key, tally)| KeyDispatch { fairness_key, tally, weight: 0.0 });
        RecentDispatch { span_ms: (now - first.started_at).max(0), keys: keys.collect(), others }
    }

    fn rotate(&mut self, now: UnixMillis) {
        if self.current.keys.is_empty() && self.current.others.tasks == 0 {
            self.current.started_at = now;
            return;
        }
        if now - self.current.started_at >= TALLY_WINDOW_MS {
            let ended = std::mem::take(&mut self.current);
            self.previous = Some(ended);
            self.current.started_at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_last_two_windows_and_drop_older_ones() {
        let mut tally = DispatchTally::default();
        for _ in 0..3 {
            tally.record("a", 1, 1_000);
        }
        tally.record("b", 5, 1_000);
        let recent = tally.recent(10, 5_000);
        assert_eq!(recent.span_ms, 4_000);
        let keys = |r: &RecentDispatch| r.keys.iter().map(|k| (k.fairness_key.clone(), k.tally)).collect::<Vec<_>>();
        assert_eq!(
            keys(&recent),
            vec![("b".to_owned(), Tally { tasks: 1, cost: 5 }), ("a".to_owned(), Tally { tasks: 3, cost: 3 })]
        );

        // A new window: the last one still counts.
        tally.record("a", 1, 12_000);
        let recent = tally.recent(10, 13_000);
        assert_eq!((recent.span_ms, recent.keys[1].tally.tasks), (12_000, 4));
        // Past two windows the first is dropped.
        let recent = tally.recent(10, 23_000);
        assert_eq!((recent.span_ms, keys(&recent)), (11_000, vec![("a".to_owned(), Tally { tasks: 1, cost: 1 })]));
        assert_eq!(tally.recent(10, 40_000), RecentDispatch::default(), "nothing lately");
    }

    #[test]
    fn keys_past_the_bound_and_past_the_top_are_counted_as_others() {
        let mut tally = DispatchTally::default();
        for k in 0..MAX_TALLIED_KEYS + 10 {
            tally.record(&format!("k{k}"), 1, 0);
        }
        assert_eq!(tally.current.keys.len(), MAX_TALLIED_KEYS, "the bound holds");
        let recent = tally.recent(5, 1);
        assert_eq!(recent.keys.len(), 5);
        assert_eq!(recent.others.tasks, (MAX_TALLIED_KEYS + 10 - 5) as u64);
    }
}
