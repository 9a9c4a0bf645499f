//! Command-line interface. `anyhow` lives here and nowhere else.

mod auth;
mod client;
mod cluster;
mod dead_letters;
mod dispatch_shares;
mod json;
mod origin;
mod queue_purge;
mod queue_settings;
mod schedule;
mod schema;
mod serve;
mod task_cancel;
mod task_lookup;
use fairway::clock::human as times;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "fairway",
    version,
    about = "A fair task-queue matching service",
    after_help = "The tools (bench, chaos, simulate, demo) are the `fairway-lab` binary: \
                  cargo run --release -p fairway-lab -- --help"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a server (embedded store in ./fairway-data by default).
    Serve(serve::ServeArgs),
    /// Add, poll or complete tasks on a running server.
    #[command(subcommand)]
    Task(client::TaskCommand),
    /// Inspect queues on a running server.
    #[command(subcommand)]
    Queue(client::QueueCommand),
    /// The origin-visit scheduler: record origins, inspect them, run a round.
    #[command(subcommand)]
    Origin(origin::OriginCommand),
    /// Recurring schedules: create, pause, trigger, list by health, describe.
    #[command(subcommand)]
    Schedule(Box<schedule::ScheduleCommand>),
    /// Run a command for each task of a queue, heartbeating while it runs
    /// and reporting how it ended.
    Worker(worker::WorkerArgs),
    /// Manage the Cassandra schema.
    #[command(subcommand)]
    Schema(schema::SchemaCommand),
    /// Credentials: API keys for `[[security.principals]]`.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// The cluster: its nodes and regions, the workers polling them.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
}

/// The commands that moved to the `fairway-lab` binary with the tools.
const LAB_COMMANDS: [&str; 4] = ["bench", "chaos", "simulate", "demo"];

/// What to tell someone who runs a tool's command on this binary (as the
/// docs of earlier versions said to): where it lives now.
fn moved_to_lab(command: &str) -> Option<String> {
    LAB_COMMANDS.contains(&command).then(|| {
        format!(
            "`fairway {command}` is a command of the tools' binary, `fairway-lab`, now: \
             cargo run --release -p fairway-lab -- {command} --help \
             (or target/release/fairway-lab {command} after `cargo build --release --workspace`)"
        )
    })
}

pub(crate) fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|first| first == worker::GUARD_ARG) {
        return worker::run_guard(&args[2..]);
    }
    if let Some(message) = std::env::args().nth(1).and_then(|first| moved_to_lab(&first)) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    // Short commands that print: a closed pipe ends them. Not the long-lived
    // ones, which write to sockets of servers that may die: SIGPIPE would
    // kill the client with them.
    if matches!(
        cli.command,
        Command::Task(_)
            | Command::Queue(_)
            | Command::Origin(_)
            | Command::Schedule(_)
            | Command::Schema(_)
            | Command::Auth(_)
            | Command::Cluster(_)
    ) {
        exit_quietly_on_closed_pipe();
    }
    if !matches!(cli.command, Command::Serve(_)) {
        // `serve` sets up logging once it has read its config. A worker
        // says what it does at INFO; the short commands only warn.
        init_logging(matches!(cli.command, Command::Worker(_)), None);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Task(command) => client::task(command).await,
            Command::Queue(command) => client::queue(command).await,
            Command::Schema(command) => schema::run(command).await,
            Command::Origin(command) => origin::run(command).await,
            Command::Schedule(command) => schedule::run(*command).await,
            Command::Worker(args) => worker::run(args).await,
            Command::Auth(command) => auth::run(command).await,
            Command::Cluster(command) => cluster::run(command).await,
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
/// them. With a tracer, spans at INFO and above (one per gRPC request) are
/// exported through it too, whatever `FAIRWAY_LOG` says.
fn init_logging(info: bool, tracer: Option<opentelemetry_sdk::trace::Tracer>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::LevelFilter};

    let default = if info { "info" } else { "warn" };
    let filter = EnvFilter::try_from_env("FAIRWAY_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let spans = tracer.map(|tracer| tracing_opentelemetry::layer().with_tracer(tracer).with_filter(LevelFilter::INFO));
    tracing_subscriber::registry().with(logs).with(spans).init();
}

/// A client command whose output is cut short (`fairway queue describe | head`)
/// ends at once, as other command-line tools do, instead of panicking on the
/// failed write. Rust ignores SIGPIPE by default; this restores the default
/// action. Not for `serve` or `worker`, which write to sockets that peers
/// may close.
fn exit_quietly_on_closed_pipe() {
    // SAFETY: called once at startup, before any other thread exists; setting
    // the disposition of SIGPIPE to its default has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::moved_to_lab;

    /// Every command's arguments are well formed (unique names, valid
    /// requirements): clap checks it when a command is parsed, so a clash
    /// would otherwise show only when someone runs that command.
    #[test]
    fn a_tools_command_says_where_it_went() {
        let bench = moved_to_lab("bench").expect("bench moved");
        assert!(bench.contains("-p fairway-lab -- bench"), "{bench}");
        assert_eq!(moved_to_lab("serve"), None);
        assert_eq!(moved_to_lab("benchmark"), None, "only the exact command names");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
