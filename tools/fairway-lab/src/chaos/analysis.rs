//! What the region scenarios measure beside the checker's verdict: for each
//! fault (a region cut off or lost, a move of the queue's home), how soon
//! tasks were dispatched again and the longest window without dispatch
//! around it; which answers each node gave, during faults and outside them;
//! and the scenarios' own requirements (no delivery within the lease of
//! another, which two owners at once would cause; every move completed).
//! It reads the history and adds to the checker's report; it changes nothing
//! of the checker's.

use std::collections::{BTreeMap, BTreeSet};

use crate::chaos::checker::Report;
use crate::chaos::history::{Entry, Op, Outcome};

use super::workload::AnswerKey;

/// What a fault window is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WindowKind {
    /// A region cut off, then healed.
    Cut,
    /// A region lost (its Fairway and Cassandra nodes killed), then revived.
    Kill,
    /// The queue's home moved (`MoveQueue`).
    Move,
}

/// One fault of a region scenario, as the nemesis saw it (ms since the run began).
#[derive(Clone, Debug)]
pub(super) struct FaultWindow {
    pub kind: WindowKind,
    pub label: String,
    /// When the fault was in place (the region cut off or killed), or the move asked.
    pub start_ms: u64,
    /// When every partition was seen owned where it should be next (the
    /// other regions for a lost region; the new home for a move), if it was.
    pub taken_over_ms: Option<u64>,
    /// When the region was healed or revived (`None` for moves).
    pub healed_ms: Option<u64>,
    /// Whether the nemesis watched for [`Self::taken_over_ms`] (not where
    /// nobody may take the partitions: a cut under manual failover).
    pub watched: bool,
}

/// How long after a fault was healed (or a move seen complete) its window
/// goes on: what happens then is still its aftermath (the home region's
/// nodes take their partitions back; clients come back).
const AFTERMATH_MS: u64 = 15_000;

/// Where a move was not seen complete, how long its window is before its aftermath.
const UNSETTLED_MS: u64 = 20_000;

/// What the history shows of one fault window, which runs from its start
/// until [`AFTERMATH_MS`] after it was healed or seen complete (but not past
/// the next fault's start, nor the end of the history).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct WindowReport {
    pub start_ms: u64,
    pub end_ms: u64,
    /// The first delivery (any partition) answered after the start, in ms after it.
    pub first_dispatch_ms: Option<u64>,
    /// The latest of each partition's first delivery after the start (among
    /// the partitions that delivered before the window's end), in ms after
    /// it, and that partition.
    pub every_partition_ms: Option<(u64, u32)>,
    /// The first delivery after the heal, in ms after it.
    pub first_after_heal_ms: Option<u64>,
    /// The longest window without dispatch (as the checker measures it: a
    /// partition with an acknowledged task waiting) overlapping this window,
    /// its partition, and when it began and ended.
    pub longest_gap: Option<Gap>,
    /// For a lost region: the tasks acknowledged before it was lost and
    /// first delivered only after it came back (the recovery point of a
    /// forced failover: not replicated when the region died).
    pub delivered_after_heal: Option<usize>,
}

/// A stretch during which a partition dispatched nothing while an
/// acknowledged task of it waited (ms since the run began).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Gap {
    pub partition: u32,
    pub from_ms: u64,
    pub to_ms: u64,
}

impl Gap {
    fn length(&self) -> u64 {
        self.to_ms - self.from_ms
    }
}

/// The stretches without dispatch of each partition, exactly as the
/// checker's longest window without dispatch counts them: from when a task
/// later delivered was acknowledged, between that partition's first
/// deliveries, until the task's own.
pub(super) fn dispatch_gaps(history: &[Entry]) -> Vec<Gap> {
    #[derive(Default)]
    struct Task {
        /// The end of the last add attempt, and whether any was acknowledged.
        added: Option<(u64, bool)>,
        first_delivery: Option<(u64, u64, u32)>,
    }
    let mut tasks: BTreeMap<&str, Task> = BTreeMap::new();
    for entry in history {
        match &entry.op {
            Op::Add { value, .. } => {
                let task = tasks.entry(value).or_default();
                let acknowledged = entry.outcome == Outcome::Ok || task.added.is_some_and(|(_, ok)| ok);
                task.added = Some((entry.end_ms, acknowledged));
            }
            Op::Deliver { value, partition, .. } if entry.outcome == Outcome::Ok => {
                let task = tasks.entry(value).or_default();
                let delivery = (entry.start_ms, entry.end_ms, *partition);
                if task.first_delivery.is_none_or(|first| delivery < first) {
                    task.first_delivery = Some(delivery);
                }
            }
            _ => {}
        }
    }
    let mut lives: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for task in tasks.values() {
        if let (Some((added, true)), Some((_, delivered, partition))) = (task.added, task.first_delivery) {
            lives.entry(partition).or_default().push((added, delivered));
        }
    }
    let mut gaps = BTreeSet::new();
    crate::chaos::checker::waiting_stretches(lives, |partition, from_ms, to_ms| {
        if to_ms > from_ms {
            gaps.insert(Gap { partition, from_ms, to_ms });
        }
    });
    gaps.into_iter().collect()
}

/// What the nodes' logs (`node*.log` in `dir`) say the last passes of
/// forced failovers added: each old partition closed, and the tasks its last
/// pass found unmarked (acknowledged in the lost region and not replicated
/// before it died: the recovery point). In the order the logs have them.
pub(super) fn last_passes(dir: &std::path::Path) -> std::io::Result<Vec<(String, u64)>> {
    let mut passes = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !(name.starts_with("node") && name.ends_with(".log")) {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines().filter(|l| l.contains("last pass over the previous")) {
            let field = |name: &str| {
                line.split_whitespace().find_map(|word| word.strip_prefix(name)).unwrap_or_default().to_owned()
            };
            passes.push((field("previous="), field("added=").parse().unwrap_or(0)));
        }
    }
    passes.sort();
    Ok(passes)
}

/// The lines of the report that state the recovery point from `passes`
/// (see [`last_passes`]).
pub(super) fn recovery_point(passes: &[(String, u64)]) -> String {
    let added: u64 = passes.iter().map(|(_, added)| added).sum();
    let each: Vec<String> = passes.iter().map(|(partition, added)| format!("{partition}: {added}")).collect();
    format!(
        "\n## Recovery point\n\nTasks the last passes added (acknowledged in a lost region and not replicated to \
         the new home before it died; delivered late, once it returned): {added}, over {} old partition(s) closed \
         ({}).\n",
        passes.len(),
        if each.is_empty() { "none closed".to_owned() } else { each.join(", ") }
    )
}

/// For each task acknowledged: when its first acknowledged add ended, and
/// when its first delivery ended, if it was delivered.
fn task_lives(history: &[Entry]) -> Vec<(u64, Option<u64>)> {
    let mut tasks: BTreeMap<&str, (Option<u64>, Option<u64>)> = BTreeMap::new();
    for entry in history.iter().filter(|e| e.outcome == Outcome::Ok) {
        match &entry.op {
            Op::Add { value, .. } => {
                let acked = &mut tasks.entry(value).or_default().0;
                *acked = Some(acked.map_or(entry.end_ms, |at| at.min(entry.end_ms)));
            }
            Op::Deliver { value, .. } => {
                let first = &mut tasks.entry(value).or_default().1;
                *first = Some(first.map_or(entry.end_ms, |at| at.min(entry.end_ms)));
            }
            _ => {}
        }
    }
    tasks.into_values().filter_map(|(acked, first)| Some((acked?, first))).collect()
}

/// Each window of `windows` (in order) as the history shows it.
pub(super) fn windows(history: &[Entry], windows: &[FaultWindow]) -> Vec<WindowReport> {
    let history_end = history.iter().map(|e| e.end_ms).max().unwrap_or(0);
    let mut deliveries: Vec<(u64, u32)> = history
        .iter()
        .filter(|e| e.outcome == Outcome::Ok)
        .filter_map(|e| match &e.op {
            Op::Deliver { partition, .. } => Some((e.end_ms, *partition)),
            _ => None,
        })
        .collect();
    deliveries.sort_unstable();
    let gaps = dispatch_gaps(history);
    let lives = task_lives(history);
    windows
        .iter()
        .enumerate()
        .map(|(i, window)| {
            let start = window.start_ms;
            let settled = window.healed_ms.or(window.taken_over_ms).unwrap_or(start + UNSETTLED_MS);
            let next = windows.get(i + 1).map_or(history_end, |next| next.start_ms);
            let end = (settled + AFTERMATH_MS).min(next).min(history_end).max(start);
            let after = |t: u64| deliveries.iter().find(|(at, _)| *at > t).map(|(at, _)| at - t);
            let mut first_per_partition: BTreeMap<u32, u64> = BTreeMap::new();
            for &(at, partition) in deliveries.iter().filter(|(at, _)| *at > start && *at <= end) {
                first_per_partition.entry(partition).or_insert(at - start);
            }
            let every_partition_ms = first_per_partition.iter().map(|(p, ms)| (*ms, *p)).max();
            let longest_gap = gaps
                .iter()
                .filter(|gap| gap.to_ms > start && gap.from_ms < end)
                .max_by_key(|gap| (gap.length(), std::cmp::Reverse(gap.from_ms)))
                .copied();
            WindowReport {
                start_ms: start,
                end_ms: end,
                first_dispatch_ms: after(start),
                every_partition_ms,
                first_after_heal_ms: window.healed_ms.and_then(after),
                longest_gap,
                delivered_after_heal: (window.kind == WindowKind::Kill).then(|| {
                    let healed = window.healed_ms.unwrap_or(u64::MAX);
                    lives.iter().filter(|(acked, first)| *acked < start && first.is_some_and(|d| d > healed)).count()
                }),
            }
        })
        .collect()
}

/// The requirements of the region scenarios beyond the checker's, each
/// broken one in words (empty: all held). `moves_must_complete`: every
/// move of the home must have been seen complete.
pub(super) fn violations(report: &Report, faults: &[FaultWindow], moves_must_complete: bool) -> Vec<String> {
    let mut broken = Vec::new();
    let within = report.duplicates.get("within the lease (a fault)").copied().unwrap_or(0);
    if within > 0 {
        broken.push(format!(
            "{within} deliveries came within the lease of an earlier delivery of the same task with no failure \
             between: two owners dispatched at once (split brain), or a lease was not honoured"
        ));
    }
    if moves_must_complete {
        for fault in faults.iter().filter(|f| f.kind == WindowKind::Move && f.taken_over_ms.is_none()) {
            broken.push(format!(
                "{} at {:.1} s: not every partition was seen owned in the new home within 20 s",
                fault.label,
                fault.start_ms as f64 / 1000.0
            ));
        }
    }
    broken
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The region part of the report: the faults, the answers by node, the
/// scenario's requirements, in Markdown, with its verdict line last.
pub(super) fn table(
    history: &[Entry],
    faults: &[FaultWindow],
    answers: &BTreeMap<AnswerKey, u64>,
    regions_of: &BTreeMap<String, String>,
    broken: &[String],
) -> String {
    let mut out = String::from("\n## Faults\n\n");
    out.push_str(
        "| # | fault | at | measured until | every partition owned by the takers | first dispatch after | every \
         partition dispatching again after | healed at | first dispatch after the heal | longest window without \
         dispatch overlapping it |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let reports = windows(history, faults);
    for (n, (fault, report)) in faults.iter().zip(&reports).enumerate() {
        let taken = fault
            .taken_over_ms
            .map_or("not seen".to_owned(), |at| format!("{} after", seconds(at.saturating_sub(fault.start_ms))));
        let every =
            report.every_partition_ms.map_or("–".to_owned(), |(ms, p)| format!("{} (partition {p})", seconds(ms)));
        let gap = report.longest_gap.map_or("–".to_owned(), |gap| {
            format!(
                "{} (partition {}, {:.1}-{:.1} s)",
                seconds(gap.length()),
                gap.partition,
                gap.from_ms as f64 / 1000.0,
                gap.to_ms as f64 / 1000.0
            )
        });
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            n + 1,
            fault.label,
            seconds(fault.start_ms),
            seconds(report.end_ms),
            if fault.watched { taken } else { "– (not watched: manual failover, nobody takes)".to_owned() },
            report.first_dispatch_ms.map_or("–".to_owned(), seconds),
            every,
            fault.healed_ms.map_or("–".to_owned(), seconds),
            report.first_after_heal_ms.map_or("–".to_owned(), seconds),
            gap,
        ));
    }
    for (n, (fault, report)) in faults.iter().zip(&reports).enumerate() {
        if let Some(late) = report.delivered_after_heal {
            out.push_str(&format!(
                "\nFault {}: {late} task(s) acknowledged before {} were first delivered only after it came back \
                 (tasks not replicated when it died, and tasks still waiting in the backlog).\n",
                n + 1,
                fault.label.split(" (").next().unwrap_or(&fault.label)
            ));
        }
    }
    if let Some(worst) = reports.iter().filter_map(|r| r.longest_gap).max_by_key(Gap::length) {
        out.push_str(&format!(
            "\nLongest window without dispatch around a fault: {} (partition {}, {:.1}-{:.1} s).\n",
            seconds(worst.length()),
            worst.partition,
            worst.from_ms as f64 / 1000.0,
            worst.to_ms as f64 / 1000.0
        ));
    }

    out.push_str("\n## Answers by node\n\nDuring a fault: from the fault's start until it was healed (for a move, until every partition was seen in the new home). `Empty`: a poll that returned no task; `(client side)`: the client's own failure (no connection, or its 2-s deadline passed).\n\n");
    out.push_str("| node | region | phase | call | answers |\n|---|---|---|---|---|\n");
    // (node, during a fault, call) -> (code, count)
    type Row = (String, bool, &'static str);
    let mut rows: BTreeMap<Row, Vec<(String, u64)>> = BTreeMap::new();
    for (key, count) in answers {
        rows.entry((key.node.clone(), key.during_fault, key.call)).or_default().push((key.code.clone(), *count));
    }
    for ((node, during_fault, call), codes) in &rows {
        let region = regions_of.get(node).map_or("?", String::as_str);
        let phase = if *during_fault { "during a fault" } else { "otherwise" };
        let codes: Vec<String> = codes.iter().map(|(code, n)| format!("{n} {code}")).collect();
        out.push_str(&format!("| {node} | {region} | {phase} | {call} | {} |\n", codes.join(", ")));
    }
    out.push_str("\nTotals by node and phase (every call; `Unavailable` as the node answered it, not a connection that failed):\n\n| node | region | phase | calls | ok | Unavailable | other errors |\n|---|---|---|---|---|---|---|\n");
    let mut totals: BTreeMap<(String, bool), (u64, u64, u64)> = BTreeMap::new();
    for (key, count) in answers {
        let total = totals.entry((key.node.clone(), key.during_fault)).or_default();
        match key.code.as_str() {
            "Ok" | "Empty" => total.0 += count,
            "Unavailable" => total.1 += count,
            _ => total.2 += count,
        }
    }
    for ((node, during_fault), (ok, unavailable, other)) in &totals {
        let region = regions_of.get(node).map_or("?", String::as_str);
        let phase = if *during_fault { "during a fault" } else { "otherwise" };
        out.push_str(&format!(
            "| {node} | {region} | {phase} | {} | {ok} | {unavailable} | {other} |\n",
            ok + unavailable + other
        ));
    }

    out.push_str("\n## Region requirements\n\n");
    if broken.is_empty() {
        out.push_str("PASS: no delivery within the lease of another (no two owners at once), every move completed\n");
    } else {
        for line in broken {
            out.push_str(&format!("- {line}\n"));
        }
        out.push_str(&format!("\nFAIL: {} region requirement(s) broken\n", broken.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(start_ms: u64, end_ms: u64, outcome: Outcome, op: Op) -> Entry {
        Entry { process: 1, start_ms, end_ms, outcome, error: String::new(), op }
    }

    fn add(value: &str, at: u64) -> Entry {
        entry(at, at + 1, Outcome::Ok, Op::Add { value: value.into(), key: "k".into() })
    }

    fn deliver(value: &str, at: u64, partition: u32) -> Entry {
        let op = Op::Deliver { value: value.into(), key: "k".into(), partition, attempt: 1, lease_token: value.into() };
        entry(at, at + 1, Outcome::Ok, op)
    }

    #[test]
    fn the_recovery_point_is_what_the_last_passes_added() {
        let dir = tempfile::tempdir().unwrap();
        let line = |previous: &str, added: u32| {
            format!(
                "2026-11-26T08:06:53Z  INFO generations: last pass over the previous generation partition=chaos/131073 previous={previous} added={added}\n"
            )
        };
        std::fs::write(dir.path().join("node0-a.log"), line("chaos/1", 3) + "other line added=9\n").unwrap();
        std::fs::write(dir.path().join("node1-b.log"), line("chaos/0", 0)).unwrap();
        std::fs::write(dir.path().join("stderr.txt"), line("chaos/2", 5)).unwrap();
        let passes = last_passes(dir.path()).unwrap();
        assert_eq!(passes, vec![("chaos/0".to_owned(), 0), ("chaos/1".to_owned(), 3)]);
        assert!(recovery_point(&passes).contains(": 3, over 2 old partition(s) closed"), "{}", recovery_point(&passes));
    }

    #[test]
    fn gaps_are_the_checker_s() {
        let history = vec![
            add("a", 0),
            deliver("a", 0, 0),
            add("b", 50_000),
            add("c", 50_000),
            deliver("b", 50_001, 0),
            deliver("c", 69_999, 0),
        ];
        let longest = dispatch_gaps(&history).into_iter().max_by_key(Gap::length).unwrap();
        let report = crate::chaos::checker::check(&history, 1_000);
        assert_eq!(longest.length(), report.longest_dispatch_gap_ms);
        assert_eq!((longest.from_ms, longest.to_ms), (50_002, 70_000));
    }

    #[test]
    fn a_window_measures_the_first_dispatch_after_its_fault_and_its_longest_gap() {
        let history = vec![
            add("a", 0),
            deliver("a", 10, 0),
            add("b", 1_000),
            add("c", 1_000),
            deliver("b", 9_000, 1),
            deliver("c", 12_000, 0),
            add("d", 20_000),
            deliver("d", 20_100, 0),
        ];
        let fault = |start_ms, healed_ms| FaultWindow {
            kind: WindowKind::Cut,
            label: "cut".into(),
            start_ms,
            taken_over_ms: None,
            healed_ms,
            watched: false,
        };
        let reports = windows(&history, &[fault(2_000, Some(8_000)), fault(15_000, None)]);
        assert_eq!(reports[0].first_dispatch_ms, Some(9_001 - 2_000));
        assert_eq!(reports[0].first_after_heal_ms, Some(9_001 - 8_000));
        assert_eq!(reports[0].every_partition_ms, Some((12_001 - 2_000, 0)));
        assert_eq!(reports[0].longest_gap, Some(Gap { partition: 0, from_ms: 1_001, to_ms: 12_001 }));
        let d_waited = Gap { partition: 0, from_ms: 20_001, to_ms: 20_101 };
        assert_eq!(reports[1].longest_gap, Some(d_waited), "only d waited after 15 s, 0.1 s");
        assert_eq!(reports[1].first_dispatch_ms, Some(20_101 - 15_000));
    }

    #[test]
    fn a_delivery_within_the_lease_of_another_breaks_the_region_requirements() {
        let mut report = Report::default();
        assert!(violations(&report, &[], true).is_empty());
        report.duplicates.insert("after the lease ran out", 3);
        assert!(violations(&report, &[], true).is_empty());
        report.duplicates.insert("within the lease (a fault)", 1);
        assert_eq!(violations(&report, &[], true).len(), 1);
        let unfinished = FaultWindow {
            kind: WindowKind::Move,
            label: "move".into(),
            start_ms: 0,
            taken_over_ms: None,
            healed_ms: None,
            watched: true,
        };
        assert_eq!(violations(&Report::default(), std::slice::from_ref(&unfinished), true).len(), 1);
        assert!(violations(&Report::default(), &[unfinished], false).is_empty());
    }
}
