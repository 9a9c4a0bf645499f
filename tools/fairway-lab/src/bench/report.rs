//! What a benchmark run reports: measures (Fairway's figure, with FIFO's
//! beside it where the scenario runs both), the median over repeated runs,
//! and the same as JSON and as a markdown table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::figures::number;
use crate::figures::stats::median;

/// A design target a measure is held to.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Bound {
    fn holds(self, value: f64) -> bool {
        match self {
            Bound::AtLeast(limit) => value >= limit,
            Bound::AtMost(limit) => value <= limit,
        }
    }

    fn describe(self) -> String {
        match self {
            Bound::AtLeast(limit) => format!("≥ {}", number(limit)),
            Bound::AtMost(limit) => format!("≤ {}", number(limit)),
        }
    }
}

/// One figure of one run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Measure {
    pub name: String,
    pub unit: &'static str,
    /// With fair ordering (or the only figure, for scenarios without FIFO).
    pub fairway: f64,
    /// The same with FIFO ordering, in the same run.
    pub fifo: Option<f64>,
    pub target: Option<Bound>,
}

impl Measure {
    pub(crate) fn new(name: impl Into<String>, unit: &'static str, fairway: f64) -> Measure {
        Measure { name: name.into(), unit, fairway, fifo: None, target: None }
    }

    pub(crate) fn beside_fifo(name: impl Into<String>, unit: &'static str, fairway: f64, fifo: f64) -> Measure {
        Measure { fifo: Some(fifo), ..Measure::new(name, unit, fairway) }
    }

    pub(crate) fn target(mut self, bound: Bound) -> Measure {
        self.target = Some(bound);
        self
    }
}

/// A scenario repeated `runs` times.
#[derive(Debug, Serialize)]
pub(crate) struct ScenarioReport {
    pub scenario: String,
    pub settings: String,
    /// Per measure, the median over the runs.
    pub median: Vec<Measure>,
    pub runs: Vec<Vec<Measure>>,
    /// PNG files drawn from the first run.
    pub plots: Vec<PathBuf>,
    /// What the second column measured, beside Fairway: FIFO ordering, or
    /// what the scenario says.
    pub beside: String,
}

impl ScenarioReport {
    pub(crate) fn new(
        scenario: &str,
        settings: String,
        runs: Vec<Vec<Measure>>,
        plots: Vec<PathBuf>,
    ) -> ScenarioReport {
        let median = runs[0]
            .iter()
            .enumerate()
            .map(|(i, first)| {
                let of = |pick: &dyn Fn(&Measure) -> Option<f64>| {
                    let values: Vec<f64> = runs.iter().filter_map(|run| run.get(i).and_then(pick)).collect();
                    (!values.is_empty()).then(|| median(&values))
                };
                Measure { fairway: of(&|m| Some(m.fairway)).unwrap_or(0.0), fifo: of(&|m| m.fifo), ..first.clone() }
            })
            .collect();
        ScenarioReport { scenario: scenario.to_owned(), settings, median, runs, plots, beside: "FIFO".to_owned() }
    }

    /// Names what the second column measured, when it is not FIFO ordering.
    pub(crate) fn beside(mut self, what: &str) -> ScenarioReport {
        self.beside = what.to_owned();
        self
    }

    /// The scenario as markdown: a table of medians with every run's figure.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let runs = self.runs.len();
        let _ = writeln!(out, "### {}\n\n{}\n", self.scenario, self.settings);
        let beside = &self.beside;
        let _ = writeln!(
            out,
            "| measure | Fairway (median of {runs}) | {beside} (median) | runs: Fairway / {beside} | target |"
        );
        let _ = writeln!(out, "|---|---:|---:|---|---|");
        for (i, m) in self.median.iter().enumerate() {
            let per_run = self
                .runs
                .iter()
                .filter_map(|run| run.get(i))
                .map(|r| match r.fifo {
                    Some(fifo) => format!("{} / {}", number(r.fairway), number(fifo)),
                    None => number(r.fairway),
                })
                .collect::<Vec<_>>()
                .join("; ");
            let target = m.target.map_or(String::new(), |bound| {
                format!("{}: **{}**", bound.describe(), if bound.holds(m.fairway) { "met" } else { "not met" })
            });
            let _ = writeln!(
                out,
                "| {} ({}) | {} | {} | {per_run} | {target} |",
                m.name,
                m.unit,
                number(m.fairway),
                m.fifo.map_or("–".to_owned(), number)
            );
        }
        for plot in &self.plots {
            let name = plot.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let _ = writeln!(out, "\n![{name}]({name})");
        }
        out
    }
}

/// Everything one `fairway-lab bench` command measured.
#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    pub command: String,
    pub store: String,
    /// The server measured: started by the bench, or the node `--server` names.
    pub server: String,
    pub machine: String,
    pub scenarios: Vec<ScenarioReport>,
}

impl BenchReport {
    pub(crate) fn markdown(&self) -> String {
        let mut out = format!(
            "## `{}`\n\nserver: {} · store: {} · machine: {}\n\n",
            self.command, self.server, self.store, self.machine
        );
        for scenario in &self.scenarios {
            out.push_str(&scenario.markdown());
            out.push('\n');
        }
        out
    }

    /// Prints the markdown and writes `report.json` and `report.md` into `dir`.
    pub(crate) fn publish(&self, dir: &Path) -> anyhow::Result<()> {
        let markdown = self.markdown();
        println!("\n{markdown}");
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let json = dir.join("report.json");
        std::fs::write(&json, serde_json::to_string_pretty(self)?).with_context(|| format!("{}", json.display()))?;
        std::fs::write(dir.join("report.md"), markdown).with_context(|| format!("{}", dir.display()))?;
        eprintln!("wrote {} and report.md (and the plots) in {}", json.display(), dir.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_taken_per_measure_and_per_ordering() {
        let run = |fair, fifo| vec![Measure::beside_fifo("jain", "index", fair, fifo).target(Bound::AtLeast(0.99))];
        let report =
            ScenarioReport::new("s", String::new(), vec![run(0.99, 0.5), run(0.995, 0.7), run(0.98, 0.6)], vec![]);
        assert_eq!(report.median[0].fairway, 0.99);
        assert_eq!(report.median[0].fifo, Some(0.6));
        assert!(report.markdown().contains("| jain (index) | 0.990 | 0.600 |"));
        assert!(report.markdown().contains("≥ 0.990: **met**"));
    }
}
