//! `fairway-lab simulate-grid`: the same two arms as `simulate` over a fixed
//! grid of forges that differ in size, lister count, share of listers
//! without update dates and loader pressure, each with its own seed; one
//! table, and bars of the change in mean lag and useless share against the
//! reference's way, forge by forge.
//!
//! The grid is fixed so that a figure in docs/scheduler.md can be rerun and
//! compared with the next build's.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde::{Deserialize, Serialize};

use super::arm::Capacity;
use super::forge::ForgeParams;
use super::metrics::ArmSummary;
use super::report::SimReport;
use super::{START_MS, Scenario, fairway_config, simulate_showing_progress};
use crate::figures::plot::{self, Bars};

/// One forge of the grid.
#[derive(Clone, Copy, Debug, Serialize)]
struct GridForge {
    name: &'static str,
    origins: u32,
    listers: u32,
    undated_share: f64,
    /// Loaders per million origins.
    pressure: u32,
    seed: u64,
}

impl GridForge {
    fn loaders(&self) -> u32 {
        (u64::from(self.origins) * u64::from(self.pressure) / 1_000_000).max(1) as u32
    }
}

/// 100k to 1M origins, 8 to 30 listers, 10% to 60% of them without dates,
/// 50 to 200 loaders per million origins.
const GRID: [GridForge; 6] = [
    GridForge { name: "g1", origins: 100_000, listers: 8, undated_share: 0.1, pressure: 50, seed: 21 },
    GridForge { name: "g2", origins: 200_000, listers: 12, undated_share: 0.3, pressure: 100, seed: 22 },
    GridForge { name: "g3", origins: 300_000, listers: 30, undated_share: 0.6, pressure: 200, seed: 23 },
    GridForge { name: "g4", origins: 500_000, listers: 20, undated_share: 0.4, pressure: 150, seed: 24 },
    GridForge { name: "g5", origins: 1_000_000, listers: 25, undated_share: 0.2, pressure: 100, seed: 25 },
    GridForge { name: "g6", origins: 150_000, listers: 15, undated_share: 0.5, pressure: 200, seed: 26 },
];

#[derive(Args, Debug, Clone)]
pub(crate) struct GridArgs {
    /// Where grid.md, grid.json, the plot and each forge's report go.
    #[arg(long, default_value = "simulate-grid-results")]
    out: PathBuf,
    /// Only these forges, by name (g1 to g6), comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Days of virtual time of each forge.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=365))]
    days: u32,
    /// Visits that may run at once on one host (politeness).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    host_limit: u32,
    /// A node's configuration file: the fairway arm runs its `[scheduler]`
    /// section instead of the defaults (the baseline is unchanged).
    #[arg(long)]
    fairway_config: Option<PathBuf>,
    /// Loaders report no date of their snapshot's newest change.
    #[arg(long)]
    without_change_dates: bool,
    /// Run nothing: redraw the plot from the `grid.json` an earlier run
    /// wrote in `--out`.
    #[arg(long, conflicts_with_all = ["only", "fairway_config", "without_change_dates"])]
    redraw: bool,
}

/// One forge's figures, both arms.
#[derive(Debug, Serialize)]
struct GridRow {
    forge: GridForge,
    loaders: u32,
    wall_seconds: f64,
    /// The least useless share any scheduler could have with its loaders
    /// 90% busy (see [`least_useless_share`]).
    least_useless_at_90: f64,
    fairway: Figures,
    baseline: Figures,
}

#[derive(Debug, Serialize, Deserialize)]
struct Figures {
    mean_lag_h: f64,
    useless_share: f64,
    loaders_busy: f64,
    loaders_busy_while_waiting: f64,
    loaders_busy_while_eligible: Option<f64>,
    eligible_share: Option<f64>,
    listers_unvisited: u64,
}

impl Figures {
    fn of(arm: &ArmSummary) -> Figures {
        Figures {
            mean_lag_h: arm.lag.mean_h,
            useless_share: arm.useless_share,
            loaders_busy: arm.loaders_busy,
            loaders_busy_while_waiting: arm.loaders_busy_while_waiting,
            loaders_busy_while_eligible: arm.loaders_busy_while_eligible,
            eligible_share: arm.eligible_share,
            listers_unvisited: arm.listers_unvisited,
        }
    }
}

pub(crate) fn run(args: GridArgs) -> anyhow::Result<()> {
    if args.redraw {
        return redraw(&args.out);
    }
    for name in &args.only {
        if !GRID.iter().any(|f| f.name == name) {
            let names: Vec<&str> = GRID.iter().map(|f| f.name).collect();
            bail!("--only: no forge {name:?} in the grid; the forges are {}", names.join(", "));
        }
    }
    let fairway = fairway_config(args.fairway_config.as_deref())?;
    let command = format!("fairway-lab {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    let forges: Vec<GridForge> =
        GRID.into_iter().filter(|f| args.only.is_empty() || args.only.iter().any(|n| n == f.name)).collect();
    let mut rows = Vec::new();
    for (i, forge) in forges.iter().enumerate() {
        let scenario = Scenario {
            forge: ForgeParams {
                undated_share: forge.undated_share,
                origins: forge.origins,
                listers: forge.listers as usize,
                start: START_MS,
                days: args.days,
                seed: forge.seed,
            },
            capacity: Capacity {
                loaders: forge.loaders(),
                host_limit: args.host_limit,
                change_dates: !args.without_change_dates,
            },
            fairway: fairway.clone(),
        };
        eprintln!(
            "[{}/{}] {}: {} origins, {} listers, {:.0}% without dates, {} loaders, seed {}",
            i + 1,
            forges.len(),
            forge.name,
            forge.origins,
            forge.listers,
            100.0 * forge.undated_share,
            forge.loaders(),
            forge.seed
        );
        let started = Instant::now();
        let (built, summaries) = simulate_showing_progress(&scenario, forge.name)?;
        let wall = started.elapsed().as_secs_f64();
        let row = GridRow {
            forge: *forge,
            loaders: forge.loaders(),
            wall_seconds: wall,
            least_useless_at_90: least_useless_share(&summaries[0], forge.loaders(), args.days, 0.9),
            fairway: Figures::of(&summaries[0]),
            baseline: Figures::of(&summaries[1]),
        };
        eprintln!(
            "    lag {:.1} / {:.1} h, useless {:.1}% / {:.1}% (fairway / baseline), {wall:.0} s",
            row.fairway.mean_lag_h,
            row.baseline.mean_lag_h,
            100.0 * row.fairway.useless_share,
            100.0 * row.baseline.useless_share
        );
        SimReport::new(format!("{command} ({})", forge.name), &scenario, &built, summaries, wall)
            .publish(&args.out.join(forge.name))?;
        rows.push(row);
    }
    let markdown = table(&command, &rows);
    println!("\n{markdown}");
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    std::fs::write(args.out.join("grid.md"), &markdown).with_context(|| args.out.display().to_string())?;
    let json = serde_json::to_string_pretty(&rows)?;
    std::fs::write(args.out.join("grid.json"), json).with_context(|| args.out.display().to_string())?;
    let named: Vec<_> = rows.iter().map(|r| (r.forge.name, &r.fairway, &r.baseline)).collect();
    match plot::draw_bars(&chart(&named), &args.out) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(error) => eprintln!("warning: {error:#}"),
    }
    Ok(())
}

/// The least useless share of visits that `loaders` kept `busy` for `days`
/// allow, whoever schedules them: no more visits can find something new
/// than there are origins to visit once and updates to pick up, and busy
/// loaders make about one visit per mean duration (log-normal, median
/// 60 s, σ = 1: 99 s) plus the second of dispatch. Dead origins are
/// counted as if they could be useful, so this is a lower bound.
fn least_useless_share(arm: &ArmSummary, loaders: u32, days: u32, busy: f64) -> f64 {
    let mean_visit_s = 60.0 * 0.5f64.exp() + 1.0;
    let visits = busy * f64::from(loaders) * f64::from(days) * 86_400.0 / mean_visit_s;
    let findable = (arm.listed + arm.lag.count) as f64;
    (1.0 - findable / visits).max(0.0)
}

/// The change from `baseline` to `fairway`, in percent.
fn change(fairway: f64, baseline: f64) -> f64 {
    100.0 * (fairway / baseline - 1.0)
}

fn table(command: &str, rows: &[GridRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "`{command}` on {}\n", crate::figures::machine());
    let _ = writeln!(
        out,
        "| forge | origins | listers | without dates | loaders | mean lag h, fairway / baseline | change | \
         useless share, fairway / baseline | change | useless share at 90% busy, at least | loaders busy | \
         fairway's loaders busy while eligible visits existed (share of the checks they did) | listers unvisited |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let (f, b) = (&row.fairway, &row.baseline);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0}% | {} | {:.1} / {:.1} | {:+.0}% | {:.1}% / {:.1}% | {:+.0}% | {:.0}% | {:.0}% / {:.0}% | {} | {} / {} |",
            row.forge.name,
            row.forge.origins,
            row.forge.listers,
            100.0 * row.forge.undated_share,
            row.loaders,
            f.mean_lag_h,
            b.mean_lag_h,
            change(f.mean_lag_h, b.mean_lag_h),
            100.0 * f.useless_share,
            100.0 * b.useless_share,
            change(f.useless_share, b.useless_share),
            100.0 * row.least_useless_at_90,
            100.0 * f.loaders_busy,
            100.0 * b.loaders_busy,
            match (f.loaders_busy_while_eligible, f.eligible_share) {
                (Some(busy), Some(share)) => format!("{:.0}% ({:.0}%)", 100.0 * busy, 100.0 * share),
                _ => "not measured".to_owned(),
            },
            f.listers_unvisited,
            b.listers_unvisited,
        );
    }
    let mean = |value: &dyn Fn(&GridRow) -> f64| rows.iter().map(value).sum::<f64>() / rows.len().max(1) as f64;
    let _ = writeln!(
        out,
        "\nOver the grid, fairway against baseline: mean lag {:+.0}%, useless share {:+.0}% (the mean of each \
         forge's change).",
        mean(&|r| change(r.fairway.mean_lag_h, r.baseline.mean_lag_h)),
        mean(&|r| change(r.fairway.useless_share, r.baseline.useless_share)),
    );
    out
}

/// The plot again, from the `grid.json` of an earlier run in `out`.
fn redraw(out: &std::path::Path) -> anyhow::Result<()> {
    #[derive(Deserialize)]
    struct Saved {
        forge: SavedForge,
        fairway: Figures,
        baseline: Figures,
    }
    #[derive(Deserialize)]
    struct SavedForge {
        name: String,
    }
    let path = out.join("grid.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--redraw: read {} (written by a run with this --out)", path.display()))?;
    let rows: Vec<Saved> =
        serde_json::from_str(&text).with_context(|| format!("--redraw: {} is not a grid's figures", path.display()))?;
    if rows.is_empty() {
        bail!("--redraw: {} holds no forge", path.display());
    }
    let named: Vec<_> = rows.iter().map(|r| (r.forge.name.as_str(), &r.fairway, &r.baseline)).collect();
    let drawn = plot::draw_bars(&chart(&named), out)?;
    eprintln!("wrote {}", drawn.display());
    Ok(())
}

/// Per forge (its name, then fairway's and the baseline's figures),
/// fairway's change against the baseline in mean lag and useless share: bars
/// below the zero line are better than the reference's way.
fn chart(rows: &[(&str, &Figures, &Figures)]) -> Bars {
    let changes = |value: &dyn Fn(&Figures) -> f64| {
        rows.iter().map(|(_, fairway, baseline)| change(value(fairway), value(baseline))).collect::<Vec<f64>>()
    };
    Bars {
        file: "simulate-grid.png".into(),
        title: "Fairway's defaults against the reference's way, forge by forge".into(),
        y_label: "change against the reference (%)".into(),
        categories: rows.iter().map(|(name, _, _)| (*name).to_owned()).collect(),
        groups: vec![
            ("mean visit lag".into(), changes(&|f| f.mean_lag_h)),
            ("useless share of visits".into(), changes(&|f| f.useless_share)),
        ],
        lines: vec![("the reference".into(), 0.0), ("30% below it".into(), -30.0)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(lag: f64, useless: f64) -> Figures {
        Figures {
            mean_lag_h: lag,
            useless_share: useless,
            loaders_busy: 0.5,
            loaders_busy_while_waiting: 0.5,
            loaders_busy_while_eligible: None,
            eligible_share: None,
            listers_unvisited: 0,
        }
    }

    #[test]
    fn redraw_draws_the_plot_from_an_earlier_runs_figures_and_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let error = redraw(dir.path()).unwrap_err();
        assert!(format!("{error:#}").contains("--redraw: read"), "{error:#}");
        let rows: Vec<GridRow> = GRID[..2]
            .iter()
            .map(|&forge| GridRow {
                forge,
                loaders: forge.loaders(),
                wall_seconds: 1.0,
                least_useless_at_90: 0.0,
                fairway: figures(60.0, 0.1),
                baseline: figures(100.0, 0.2),
            })
            .collect();
        std::fs::write(dir.path().join("grid.json"), serde_json::to_string(&rows).unwrap()).unwrap();
        redraw(dir.path()).unwrap();
        assert!(dir.path().join("simulate-grid.png").is_file());
        std::fs::write(dir.path().join("grid.json"), "[]").unwrap();
        assert!(format!("{:#}", redraw(dir.path()).unwrap_err()).contains("holds no forge"));
    }
}
