//! The checker: reads a history and says what the run did to the
//! guarantees. Pure: a history in, a report out.
//!
//! It passes when every acknowledged add was delivered (lost = 0) and no
//! task was delivered after a completion of it had been acknowledged.
//! Duplicates are at-least-once delivery at work, counted by cause; the
//! longest window without dispatch and the unavailability clients saw are
//! measured against their targets, and fairness per key is reported.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::history::{Entry, Op, Outcome};

/// The longest a partition may go without a dispatch while it has tasks
/// waiting, under a single fault.
pub(crate) const DISPATCH_GAP_TARGET_MS: u64 = 15_000;

/// What a chaos run did to the guarantees, as [`check`] reads it from the history.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Report {
    /// Entries of the history: client operations and nemesis events.
    pub(crate) operations: usize,
    /// Tasks whose add was acknowledged (at the first try or a retry).
    pub(crate) acknowledged_adds: usize,
    /// Acknowledged adds never delivered.
    pub(crate) lost: Vec<String>,
    /// Adds of unknown outcome, delivered and not (both allowed).
    pub(crate) maybe_delivered: usize,
    /// Adds of unknown outcome never delivered (`maybe_delivered` counts those
    /// delivered).
    pub(crate) maybe_not_delivered: usize,
    /// Deliveries whose poll began after a completion of the task was acknowledged.
    pub(crate) delivered_after_completion: Vec<String>,
    /// Deliveries beyond a task's first, by cause.
    pub(crate) duplicates: BTreeMap<&'static str, usize>,
    /// The longest time a partition went without a dispatch while a task
    /// delivered from it later was already acknowledged, and which one.
    pub(crate) longest_dispatch_gap_ms: u64,
    /// The partition of that gap; `None` if no gap was measured.
    pub(crate) longest_gap_partition: Option<u32>,
    /// Client operations that failed or whose outcome was unknown, by code.
    pub(crate) errors: BTreeMap<String, usize>,
    /// The longest time no add succeeded while adds were being tried.
    pub(crate) longest_add_outage_ms: u64,
    /// Jain's index over the keys' deliveries per task added (1 is even).
    pub(crate) key_fairness: f64,
    /// Entries of the nemesis: faults injected, and their ends.
    pub(crate) faults: usize,
}

impl Report {
    /// The guarantees held: nothing acknowledged lost, nothing completed delivered again.
    pub(crate) fn passed(&self) -> bool {
        self.lost.is_empty() && self.delivered_after_completion.is_empty()
    }

    /// The report as a Markdown table, with the pass/fail line last.
    pub(crate) fn table(&self) -> String {
        let duplicates: usize = self.duplicates.values().sum();
        let causes: Vec<String> = self.duplicates.iter().map(|(cause, n)| format!("{n} {cause}")).collect();
        let errors: Vec<String> = self.errors.iter().map(|(code, n)| format!("{n} {code}")).collect();
        let gap = match self.longest_gap_partition {
            Some(p) => format!("{:.1} s (partition {p})", self.longest_dispatch_gap_ms as f64 / 1000.0),
            None => "–".into(),
        };
        let target = if self.longest_dispatch_gap_ms <= DISPATCH_GAP_TARGET_MS { "met" } else { "not met" };
        let rows = [
            ("operations", self.operations.to_string()),
            ("faults injected", self.faults.to_string()),
            ("acknowledged adds", self.acknowledged_adds.to_string()),
            ("lost (acknowledged, never delivered)", self.lost.len().to_string()),
            ("maybe-applied adds: delivered / not", format!("{} / {}", self.maybe_delivered, self.maybe_not_delivered)),
            ("delivered after an acknowledged completion", self.delivered_after_completion.len().to_string()),
            ("duplicate deliveries", format!("{duplicates} ({})", causes.join(", "))),
            ("longest window without dispatch", format!("{gap}; target ≤ 15 s: {target}")),
            ("client errors", if errors.is_empty() { "0".into() } else { errors.join(", ") }),
            ("longest time without a successful add", format!("{:.1} s", self.longest_add_outage_ms as f64 / 1000.0)),
            ("fairness over keys (Jain's index)", format!("{:.3}", self.key_fairness)),
        ];
        let mut table = String::from("| measure | value |\n|---|---|\n");
        for (name, value) in rows {
            table.push_str(&format!("| {name} | {value} |\n"));
        }
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        table.push_str(&format!(
            "\n{verdict}: {} lost, {} delivered after completion\n",
            self.lost.len(),
            self.delivered_after_completion.len()
        ));
        table
    }
}

/// A task's life as the history shows it.
#[derive(Default)]
struct Task {
    key: String,
    added: Option<(u64, Outcome)>,
    /// (poll start, poll end, attempt, partition, lease token)
    deliveries: Vec<(u64, u64, u32, u32, String)>,
    /// When an acknowledged completion ended.
    completed_at: Option<u64>,
    /// Lease tokens whose failure was acknowledged.
    failed: HashSet<String>,
    /// Lease tokens whose failure may have been applied (the call's outcome is unknown).
    maybe_failed: HashSet<String>,
}

/// Reads `history` into a [`Report`]. A delivery again within
/// `lease_timeout_ms` of the previous one's end, with no failure reported in
/// between, counts as a duplicate caused by a fault.
pub(crate) fn check(history: &[Entry], lease_timeout_ms: u64) -> Report {
    let mut report = Report { operations: history.len(), ..Report::default() };
    let mut tasks: HashMap<&str, Task> = HashMap::new();
    let mut add_attempts: Vec<(u64, u64, Outcome)> = Vec::new();
    for entry in history {
        if entry.outcome != Outcome::Ok && !matches!(entry.op, Op::Nemesis { .. }) {
            let code = if entry.error.is_empty() { format!("{:?}", entry.outcome) } else { entry.error.clone() };
            *report.errors.entry(code).or_default() += 1;
        }
        match &entry.op {
            Op::Add { value, key } => {
                let task = tasks.entry(value).or_default();
                task.key = key.clone();
                let previous = task.added.map(|(_, o)| o);
                // A retried add keeps its best outcome.
                let best = match (previous, entry.outcome) {
                    (Some(Outcome::Ok), _) | (_, Outcome::Ok) => Outcome::Ok,
                    (Some(Outcome::Maybe), _) | (_, Outcome::Maybe) => Outcome::Maybe,
                    _ => Outcome::Failed,
                };
                task.added = Some((entry.end_ms, best));
                add_attempts.push((entry.start_ms, entry.end_ms, entry.outcome));
            }
            Op::Deliver { value, key, partition, attempt, lease_token } if entry.outcome == Outcome::Ok => {
                let task = tasks.entry(value).or_default();
                task.key = key.clone();
                task.deliveries.push((entry.start_ms, entry.end_ms, *attempt, *partition, lease_token.clone()));
            }
            Op::Complete { value, .. } if entry.outcome == Outcome::Ok => {
                let task = tasks.entry(value).or_default();
                task.completed_at = Some(task.completed_at.map_or(entry.end_ms, |at| at.min(entry.end_ms)));
            }
            Op::Fail { value, lease_token } => {
                let task = tasks.entry(value).or_default();
                match entry.outcome {
                    Outcome::Ok => task.failed.insert(lease_token.clone()),
                    Outcome::Maybe => task.maybe_failed.insert(lease_token.clone()),
                    Outcome::Failed => false,
                };
            }
            Op::Nemesis { .. } => report.faults += 1,
            _ => {}
        }
    }

    let mut per_partition: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut per_key: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (value, task) in &tasks {
        let delivered = !task.deliveries.is_empty();
        match task.added {
            Some((_, Outcome::Ok)) => {
                report.acknowledged_adds += 1;
                if !delivered {
                    report.lost.push((*value).to_owned());
                }
            }
            Some((_, Outcome::Maybe)) if delivered => report.maybe_delivered += 1,
            Some((_, Outcome::Maybe)) => report.maybe_not_delivered += 1,
            _ => {}
        }
        let counts = per_key.entry(task.key.as_str()).or_default();
        counts.0 += usize::from(task.added.is_some_and(|(_, o)| o != Outcome::Failed));
        counts.1 += usize::from(delivered);
        let mut deliveries = task.deliveries.clone();
        deliveries.sort();
        if let Some(completed) = task.completed_at
            && deliveries.iter().any(|(start, ..)| *start > completed)
        {
            report.delivered_after_completion.push((*value).to_owned());
        }
        for pair in deliveries.windows(2) {
            let (previous, next) = (&pair[0], &pair[1]);
            let cause = if task.failed.contains(&previous.4) {
                "retries after a failure (not duplicates)"
            } else if task.maybe_failed.contains(&previous.4) {
                "after a failure of unknown outcome"
            } else if next.0 >= previous.1 + lease_timeout_ms {
                "after the lease ran out"
            } else {
                "within the lease (a fault)"
            };
            *report.duplicates.entry(cause).or_default() += 1;
        }
        if let (Some((added_at, Outcome::Ok)), Some(first)) = (task.added, deliveries.first()) {
            per_partition.entry(first.3).or_default().push((added_at, first.1));
        }
    }
    report.duplicates.remove("retries after a failure (not duplicates)");
    report.lost.sort();
    report.delivered_after_completion.sort();

    waiting_stretches(per_partition, |partition, from_ms, to_ms| {
        if to_ms - from_ms > report.longest_dispatch_gap_ms {
            report.longest_dispatch_gap_ms = to_ms - from_ms;
            report.longest_gap_partition = Some(partition);
        }
    });

    add_attempts.sort_unstable_by_key(|(start, end, _)| (*start, *end));
    let mut last_success: Option<u64> = None;
    for (_, end, outcome) in &add_attempts {
        if *outcome == Outcome::Ok {
            last_success = Some(*end);
        } else if let Some(since) = last_success {
            report.longest_add_outage_ms = report.longest_add_outage_ms.max(end.saturating_sub(since));
        }
    }

    let shares: Vec<f64> =
        per_key.values().filter(|(added, _)| *added > 0).map(|(added, got)| *got as f64 / *added as f64).collect();
    let (sum, squares) = shares.iter().fold((0.0, 0.0), |(s, q), x| (s + x, q + x * x));
    report.key_fairness = if squares > 0.0 { sum * sum / (shares.len() as f64 * squares) } else { 1.0 };
    report
}

/// The stretches of waiting without a dispatch, per partition: a partition
/// is waiting from when a task later delivered from it was acknowledged
/// until that delivery. `lives` holds, per partition, each such task's
/// (acknowledged, first delivered) times in ms; `each(partition, from_ms,
/// to_ms)` sees every stretch between two deliveries (or an
/// acknowledgement and the next delivery) while a task waits, `from_ms <=
/// to_ms`. The checker keeps the longest; the region analysis lists them.
pub(crate) fn waiting_stretches(lives: BTreeMap<u32, Vec<(u64, u64)>>, mut each: impl FnMut(u32, u64, u64)) {
    for (partition, mut lives) in lives {
        let mut deliveries: Vec<u64> = lives.iter().map(|(_, delivered)| *delivered).collect();
        deliveries.sort_unstable();
        lives.sort_unstable();
        for (added, delivered) in lives {
            let before = deliveries.partition_point(|&d| d < added);
            let mut last = added;
            for &d in &deliveries[before..] {
                if d > delivered {
                    break;
                }
                each(partition, last, d);
                last = d;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(process: u32, start_ms: u64, end_ms: u64, outcome: Outcome, op: Op) -> Entry {
        Entry { process, start_ms, end_ms, outcome, error: String::new(), op }
    }

    fn add(value: &str, at: u64, outcome: Outcome) -> Entry {
        entry(1, at, at + 1, outcome, Op::Add { value: value.into(), key: "k".into() })
    }

    fn deliver(value: &str, at: u64, attempt: u32, token: &str) -> Entry {
        let op = Op::Deliver { value: value.into(), key: "k".into(), partition: 0, attempt, lease_token: token.into() };
        entry(2, at, at + 1, Outcome::Ok, op)
    }

    fn complete(value: &str, at: u64, token: &str) -> Entry {
        entry(2, at, at + 1, Outcome::Ok, Op::Complete { value: value.into(), lease_token: token.into() })
    }

    #[test]
    fn a_clean_history_passes() {
        let history = vec![add("a", 0, Outcome::Ok), deliver("a", 5, 1, "t1"), complete("a", 10, "t1")];
        let report = check(&history, 1000);
        assert!(report.passed(), "{}", report.table());
        assert_eq!((report.acknowledged_adds, report.lost.len()), (1, 0));
        assert!(report.table().ends_with("PASS: 0 lost, 0 delivered after completion\n"));
    }

    #[test]
    fn an_acknowledged_add_never_delivered_is_lost() {
        let history = vec![add("a", 0, Outcome::Ok), add("b", 1, Outcome::Ok), deliver("a", 5, 1, "t1")];
        let report = check(&history, 1000);
        assert!(!report.passed());
        assert_eq!(report.lost, vec!["b".to_owned()]);
        assert!(report.table().contains("FAIL: 1 lost"));
    }

    #[test]
    fn maybe_applied_adds_are_counted_apart() {
        let history = vec![add("a", 0, Outcome::Maybe), add("b", 0, Outcome::Maybe), deliver("a", 5, 1, "t")];
        let report = check(&history, 1000);
        assert!(report.passed());
        assert_eq!((report.maybe_delivered, report.maybe_not_delivered), (1, 1));
        assert_eq!(report.errors.get("Maybe"), Some(&2));
    }

    #[test]
    fn a_delivery_after_an_acknowledged_completion_fails_the_run() {
        let history = vec![
            add("a", 0, Outcome::Ok),
            deliver("a", 5, 1, "t1"),
            complete("a", 10, "t1"),
            deliver("a", 20, 2, "t2"),
        ];
        let report = check(&history, 1000);
        assert!(!report.passed());
        assert_eq!(report.delivered_after_completion, vec!["a".to_owned()]);
    }

    #[test]
    fn duplicates_are_told_apart_by_cause() {
        let fail = entry(2, 6, 7, Outcome::Ok, Op::Fail { value: "a".into(), lease_token: "t1".into() });
        let history = vec![
            add("a", 0, Outcome::Ok),
            add("b", 0, Outcome::Ok),
            add("c", 0, Outcome::Ok),
            deliver("a", 5, 1, "t1"),
            fail,
            deliver("a", 8, 2, "t2"),
            deliver("b", 5, 1, "u1"),
            deliver("b", 2_000, 2, "u2"),
            deliver("c", 5, 1, "v1"),
            deliver("c", 100, 1, "v2"),
        ];
        let report = check(&history, 1000);
        assert_eq!(
            report.duplicates,
            BTreeMap::from([("after the lease ran out", 1), ("within the lease (a fault)", 1)]),
            "a retry after a failure is no duplicate"
        );
    }

    #[test]
    fn a_delivery_soon_after_a_failure_of_unknown_outcome_is_no_fault() {
        let fail = entry(2, 6, 2_006, Outcome::Maybe, Op::Fail { value: "a".into(), lease_token: "t1".into() });
        let history = vec![add("a", 0, Outcome::Ok), deliver("a", 5, 1, "t1"), fail, deliver("a", 300, 2, "t2")];
        let report = check(&history, 3_000);
        assert_eq!(report.duplicates, BTreeMap::from([("after a failure of unknown outcome", 1)]));
        assert!(report.passed());
    }

    #[test]
    fn the_longest_window_without_dispatch_counts_only_while_tasks_wait() {
        let history = vec![
            add("a", 0, Outcome::Ok),
            deliver("a", 0, 1, "t"),
            // Nothing waits between 1 and 50_000.
            add("b", 50_000, Outcome::Ok),
            add("c", 50_000, Outcome::Ok),
            deliver("b", 50_001, 1, "u"),
            // c waits from 50_001 to 70_000 without any dispatch.
            deliver("c", 69_999, 1, "v"),
        ];
        let report = check(&history, 1000);
        assert_eq!(report.longest_dispatch_gap_ms, 70_000 - 50_002);
        assert_eq!(report.longest_gap_partition, Some(0));
        assert!(report.table().contains("not met"));
    }

    #[test]
    fn an_add_outage_runs_from_the_last_success_to_the_last_failure_before_the_next() {
        let history = vec![
            add("a", 0, Outcome::Ok),
            add("b", 100, Outcome::Failed),
            add("c", 1_000, Outcome::Failed),
            add("d", 5_000, Outcome::Maybe),
            add("e", 6_000, Outcome::Ok),
            add("f", 6_200, Outcome::Failed),
            add("g", 6_300, Outcome::Ok),
        ];
        let report = check(&history, 1000);
        // add() ends each call 1 ms after it began.
        assert_eq!(report.longest_add_outage_ms, 5_000);
    }

    #[test]
    fn history_lines_round_trip() {
        let entry = deliver("a", 5, 1, "t1");
        let parsed = super::super::history::parse(&super::super::history::line(&entry)).unwrap();
        assert_eq!(parsed, vec![entry]);
        let error = super::super::history::parse("{}\n").unwrap_err();
        assert!(error.starts_with("history line 1"), "{error}");
    }
}
