//! `fairway-lab`: the tools around the Fairway service, apart from the
//! product. Load benchmarks ([`bench`]), fault injection with a checker of
//! what clients saw ([`chaos`]), the scheduler in virtual time
//! ([`simulate`]), recurring schedules beyond capacity ([`schedules`]),
//! and the live demo ([`demo`]); [`figures`] holds what the measuring tools
//! share.
//!
//! The servers the tools measure or fault are real `fairway serve`
//! processes: by default the `fairway` binary next to this one (build both
//! with `cargo build --release --workspace`), or the one
//! `--server-binary`/`--node-binary` names.

mod bench;
mod chaos;
mod demo;
mod figures;
mod imports;
mod schedules;
mod simulate;

/// The simulation spent over half its time in glibc's malloc and free (its
/// keys and index entries); mimalloc's thread-local heaps cost a fraction.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "fairway-lab", version, about = "Fairway's tools: benchmarks, chaos runs, simulation, demo")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load generators: throughput against a store, over real gRPC.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// An in-process server, producers and workers, with a live view of
    /// each fairness key's share of dispatches against its weighted target.
    Demo(demo::DemoArgs),
    /// A synthetic forge in virtual time, scheduled by the real scheduler:
    /// Fairway's defaults against the reference scheduler's way.
    Simulate(simulate::SimulateArgs),
    /// `simulate` over a fixed grid of six forges (100k to 1M origins, 8 to
    /// 30 listers, 10% to 60% without dates, 50 to 200 loaders per million):
    /// one table and one plot.
    SimulateGrid(simulate::grid::GridArgs),
    /// Recurring schedules beyond the workers' capacity, in virtual time:
    /// deadline order (Fairway's), FIFO and fixed-time firing, scored by
    /// the same health.
    SimulateSchedules(schedules::ScheduleSimArgs),
    /// A multi-tenant import workload in virtual time: the chunk ranker's
    /// pick against Fairway's engine, with and without costs.
    SimulateImports(imports::ImportSimArgs),
    /// Fault injection: several nodes on one Cassandra keyspace, a nemesis,
    /// and a checker of what clients saw.
    #[command(subcommand)]
    Chaos(chaos::ChaosCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench(command) => bench::run(command).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Simulate(args) => simulate::run(args).await,
            Command::SimulateGrid(args) => simulate::grid::run(args),
            Command::SimulateSchedules(args) => schedules::run(args),
            Command::SimulateImports(args) => imports::run(args),
            Command::Chaos(command) => chaos::run(command).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `FAIRWAY_LOG` (e.g. `debug`, `fairway=trace`) filters
/// them, warnings and errors by default.
fn init_logging() {
    use tracing_subscriber::EnvFilter;

    let filter = EnvFilter::try_from_env("FAIRWAY_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// The `fairway` binary the tools start servers from when not told
/// otherwise: the one next to this binary (`target/release/fairway` beside
/// `target/release/fairway-lab`). [`ensure_built`] before running it.
fn sibling_fairway() -> anyhow::Result<PathBuf> {
    let this = std::env::current_exe().context("the path of this binary")?;
    Ok(this.with_file_name(format!("fairway{}", std::env::consts::EXE_SUFFIX)))
}

/// Fails, saying how to build it, if the `fairway` binary at `binary` is
/// not there.
fn ensure_built(binary: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        binary.is_file(),
        "no fairway binary at {}: build it beside this one (`cargo build --release --workspace`, or \
         `cargo build --release -p fairway`), or name one with --server-binary / --node-binary",
        binary.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command's arguments are well formed (unique names, valid
    /// requirements): clap checks it when a command is parsed, so a clash
    /// would otherwise show only when someone runs that command.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
