//! The fairness scoreboard: four scenarios, each run on a fair queue and on a
//! FIFO queue (`ordering = "fifo"`) of the same server, one after the other.
//!
//! - weights: three keys of weights 5, 3 and 2 with equal backlogs; each
//!   key's share of the dispatches while all three are backlogged.
//! - zipf: 1,000 keys whose offered load follows Zipf's law, over 4
//!   partitions, offered more than the workers take; Jain's index per 10 s
//!   window of what each key got against its max-min fair share.
//! - noisy: one key offers 90% of a load above capacity; the other keys'
//!   wait against a run without it. Each key calls AddTasks on its own, as a
//!   tenant would (`--noisy-calls per-key`), or one producer's calls carry
//!   every key's tasks (`mixed`).
//! - priorities: the high level offered 90% of capacity, the low level 30%;
//!   what the low level gets and how long it waits.
//! - nodes (not run by default: it needs Cassandra): two nodes, every worker
//!   polling one of them; how long a partition of the other goes without a
//!   dispatch (`super::nodes`), beside another build rather than FIFO.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::load::{self, Calls, Dispatch, Load, LoadKey, Trace};
use super::report::{Bound, Measure, ScenarioReport};
use super::server::{BenchServer, create_queue};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::plot::{Chart, Series};
use crate::figures::stats::{Zipf, cdf, jain_index, max_min_fair, quantile, sorted};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Scenario {
    Weights,
    Zipf,
    Noisy,
    Priorities,
    Nodes,
}

/// How the noisy scenario's load is cut into AddTasks calls.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NoisyCalls {
    PerKey,
    Mixed,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct FairnessArgs {
    #[command(flatten)]
    pub common: Common,
    /// Which scenarios to run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "weights,zipf,noisy,priorities")]
    only: Vec<Scenario>,
    /// Tasks per second the workers take together, in the scenarios that
    /// saturate (zipf, noisy, priorities).
    #[arg(long, default_value_t = 1_500.0)]
    capacity: f64,
    /// Seconds of load per phase of the noisy and priorities scenarios.
    #[arg(long, default_value_t = 15)]
    phase_seconds: u64,
    /// Windows of 10 s the zipf scenario measures, after one of warm-up.
    #[arg(long, default_value_t = 3)]
    zipf_windows: u64,
    /// Keys of the zipf scenario.
    #[arg(long, default_value_t = 1_000)]
    zipf_keys: usize,
    /// Partitions of the zipf scenario's queues.
    #[arg(long, default_value_t = 4)]
    zipf_partitions: u32,
    /// Partitions of the noisy scenario's queues.
    #[arg(long, default_value_t = 1)]
    noisy_partitions: u32,
    /// How the noisy scenario's producers call AddTasks: `per-key`, each
    /// key its own producer and calls, as tenants of one service; `mixed`,
    /// one producer whose calls carry every key's tasks.
    #[arg(long, value_enum, default_value = "per-key")]
    noisy_calls: NoisyCalls,
    /// Backlog per key of the weights scenario.
    #[arg(long, default_value_t = 10_000)]
    weights_backlog: u64,
    /// Another `fairway` build the nodes scenario measures beside this one,
    /// in the same run (an older one, to compare).
    #[arg(long)]
    nodes_beside: Option<std::path::PathBuf>,
}

impl FairnessArgs {
    pub(crate) fn defaults(common: &Common) -> FairnessArgs {
        FairnessArgs {
            common: common.clone(),
            only: vec![Scenario::Weights, Scenario::Zipf, Scenario::Noisy, Scenario::Priorities],
            capacity: 1_500.0,
            phase_seconds: 15,
            zipf_windows: 3,
            zipf_keys: 1_000,
            zipf_partitions: 4,
            noisy_partitions: 1,
            noisy_calls: NoisyCalls::PerKey,
            weights_backlog: 10_000,
            nodes_beside: None,
        }
    }
}

const WINDOW: f64 = 10.0;
/// The quiet keys' offer in the noisy scenario: with the noisy key's nine
/// times as much, the load is 1.5 × capacity.
const QUIET_SHARE_OF_CAPACITY: f64 = 0.15;
const WORKERS: u32 = 16;
const QUIET: usize = 20;

pub(super) async fn run(args: &FairnessArgs, store: &BenchStore) -> anyhow::Result<Vec<ScenarioReport>> {
    anyhow::ensure!(args.capacity >= 10.0 && args.capacity <= 100_000.0, "--capacity must be 10 to 100000 tasks/s");
    anyhow::ensure!(args.phase_seconds >= 2, "--phase-seconds must be at least 2");
    anyhow::ensure!(args.zipf_windows >= 1 && args.zipf_keys >= 2, "--zipf-windows ≥ 1 and --zipf-keys ≥ 2");
    for (flag, partitions) in
        [("--zipf-partitions", args.zipf_partitions), ("--noisy-partitions", args.noisy_partitions)]
    {
        let most = fairway::model::validate::MAX_PARTITIONS;
        anyhow::ensure!((1..=most).contains(&partitions), "{flag} must be 1 to {most} (a queue's partitions)");
    }
    let mut reports = Vec::new();
    for scenario in &args.only {
        let report = match scenario {
            Scenario::Weights => {
                let settings = format!(
                    "keys of weights 5, 3 and 2, {} tasks each added first (interleaved), one partition, {WORKERS} \
                     workers as fast as they go; shares while every key still has a backlog",
                    args.weights_backlog
                );
                repeat("fairness: weights 5/3/2", settings, &args.common, |_| weights(args, store)).await?
            }
            Scenario::Zipf => {
                let settings = format!(
                    "{} keys, offered load Zipf (s = 1) at {} tasks/s, workers take {} tasks/s, {} partitions; \
                     Jain's index of each key's dispatches against its max-min fair share, per {WINDOW} s window \
                     after a {WINDOW} s warm-up",
                    args.zipf_keys,
                    args.capacity * 1.5,
                    args.capacity,
                    args.zipf_partitions
                );
                repeat("fairness: Zipf keys over partitions", settings, &args.common, |_| zipf(args, store)).await?
            }
            Scenario::Noisy => {
                let settings = format!(
                    "20 quiet keys offer {} tasks/s together; loaded, one noisy key adds 9 times that (90% of a \
                     load of 1.5 × capacity); workers take {} tasks/s; {} partition(s); {} s per phase, on fresh \
                     queues, after {} s of quiet load not measured; {}; wait = add sent → task received",
                    args.capacity * QUIET_SHARE_OF_CAPACITY,
                    args.capacity,
                    args.noisy_partitions,
                    args.phase_seconds,
                    WARM_UP.as_secs(),
                    match args.noisy_calls {
                        NoisyCalls::PerKey => "each key its own producer and AddTasks calls, evenly paced",
                        NoisyCalls::Mixed => "one producer, a call every 10 ms carrying every key's tasks",
                    }
                );
                repeat("fairness: noisy neighbour", settings, &args.common, |_| noisy(args, store)).await?
            }
            Scenario::Priorities => {
                let settings = format!(
                    "priority 1 offers {:.0} tasks/s (90% of capacity), priority 5 offers {:.0} (30%); workers take \
                     {} tasks/s; {} s",
                    args.capacity * 0.9,
                    args.capacity * 0.3,
                    args.capacity,
                    args.phase_seconds
                );
                repeat("fairness: priorities under load", settings, &args.common, |_| priorities(args, store)).await?
            }
            Scenario::Nodes => {
                if let Some(binary) = &args.nodes_beside {
                    anyhow::ensure!(binary.is_file(), "--nodes-beside: {} is not a file", binary.display());
                }
                let settings = format!(
                    "two nodes on one keyspace, a queue of 4 partitions (two a node), 60,000 tasks added at each \
                     node first; 4 workers poll the first node only (PollTasks of 16, completions at the same \
                     node) for {} s",
                    args.phase_seconds
                );
                let beside = args.nodes_beside.as_ref();
                let report = repeat("fairness: workers polling one node of two", settings, &args.common, |run| {
                    super::nodes::run(store, args.phase_seconds, beside, run)
                })
                .await?;
                match beside {
                    Some(binary) => report.beside(&format!("the build {}", binary.display())),
                    None => report,
                }
            }
        };
        reports.push(report);
    }
    Ok(reports)
}

/// A server whose `fifo` queues order by arrival; both kinds created with `partitions`.
async fn start(store: &BenchStore, fair: &[String], fifo: &[String], partitions: u32) -> anyhow::Result<BenchServer> {
    let fifo_names: Vec<&str> = fifo.iter().map(String::as_str).collect();
    let server = BenchServer::start(store, &server_config(true, &fifo_names))?;
    let mut client = server.client().await?;
    for queue in fair.iter().chain(fifo) {
        create_queue(&mut client, queue, partitions).await?;
    }
    Ok(server)
}

fn names(scenario: &str) -> (String, String) {
    let id = run_id();
    (format!("{scenario}-{id}-fair"), format!("{scenario}-{id}-fifo"))
}

async fn weights(args: &FairnessArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let (fair, fifo) = names("weights");
    let server = start(store, std::slice::from_ref(&fair), std::slice::from_ref(&fifo), 1).await?;
    let client = server.client().await?;
    let keys: Vec<LoadKey> =
        [("w5", 5.0), ("w3", 3.0), ("w2", 2.0)].map(|(name, weight)| LoadKey { weight, ..LoadKey::new(name) }).to_vec();
    let targets = [0.5, 0.3, 0.2];
    // The weight-5 key runs out first, after backlog / 0.5 dispatches: measure up to 90% of that.
    let measured = (args.weights_backlog as f64 * 2.0 * 0.9) as u64;
    let load = || Load {
        keys: keys.clone(),
        rate: None,
        calls: Calls::Mixed,
        pick: Arc::new(|n, _| (n % 3) as usize),
        prefill: args.weights_backlog * 3,
        capacity: None,
        workers: WORKERS,
        duration: Duration::from_secs(600),
        max_dispatches: measured,
    };
    let fair_trace = load::run(&client, &fair, load(), "weights, fair").await?;
    let fifo_trace = load::run(&client, &fifo, load(), "weights, FIFO").await?;
    server.stop().await?;
    let share = |trace: &Trace, key: u32| {
        let first: Vec<_> = trace.dispatched.iter().take(measured as usize).collect();
        first.iter().filter(|d| d.key == key).count() as f64 / first.len().max(1) as f64
    };
    let mut measures = Vec::new();
    for (key, target) in targets.iter().enumerate() {
        let key_name = &keys[key].name;
        measures.push(Measure::beside_fifo(
            format!("share of key {key_name} (weight {}; target {target})", keys[key].weight),
            "fraction",
            share(&fair_trace, key as u32),
            share(&fifo_trace, key as u32),
        ));
    }
    measures.push(Measure::beside_fifo(
        "largest distance from the target share, per 1,000 dispatches",
        "fraction",
        worst_window_error(&fair_trace, &targets, measured),
        worst_window_error(&fifo_trace, &targets, measured),
    ));
    let panel = |trace: &Trace| -> Vec<Series> {
        let shares = keys.iter().enumerate().map(|(key, spec)| {
            Series::new(format!("{} (weight {})", spec.name, spec.weight), rolling_share(trace, key as u32, measured))
        });
        let lines = targets.iter().enumerate().map(|(key, t)| {
            Series::reference(format!("target {t}"), vec![(0.0, *t), (measured as f64, *t)]).coloured(key)
        });
        shares.chain(lines).collect()
    };
    let chart = Chart {
        file: "fairness-weights.png".into(),
        title: "Each key's share of the last 1,000 dispatches, against its weighted target".into(),
        x_label: "dispatches".into(),
        y_label: "share".into(),
        panels: vec![("Fairway (fair order)".into(), panel(&fair_trace)), ("FIFO".into(), panel(&fifo_trace))],
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

/// The share of `key` among the 1,000 dispatches before each point (every 250).
fn rolling_share(trace: &Trace, key: u32, upto: u64) -> Vec<(f64, f64)> {
    let keys: Vec<u32> = trace.dispatched.iter().take(upto as usize).map(|d| d.key).collect();
    (1000..=keys.len())
        .step_by(250)
        .map(|end| (end as f64, keys[end - 1000..end].iter().filter(|k| **k == key).count() as f64 / 1000.0))
        .collect()
}

fn worst_window_error(trace: &Trace, targets: &[f64], upto: u64) -> f64 {
    let keys: Vec<u32> = trace.dispatched.iter().take(upto as usize).map(|d| d.key).collect();
    keys.chunks_exact(1000)
        .flat_map(|window| {
            targets.iter().enumerate().map(move |(key, target)| {
                (window.iter().filter(|k| **k == key as u32).count() as f64 / 1000.0 - target).abs()
            })
        })
        .fold(0.0, f64::max)
}

async fn zipf(args: &FairnessArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let (fair, fifo) = names("zipf");
    let server = start(store, std::slice::from_ref(&fair), std::slice::from_ref(&fifo), args.zipf_partitions).await?;
    let client = server.client().await?;
    let keys: Vec<LoadKey> = (0..args.zipf_keys).map(|k| LoadKey::new(format!("z{k:04}"))).collect();
    let distribution = Arc::new(Zipf::new(args.zipf_keys, 1.0));
    let seconds = WINDOW * (args.zipf_windows + 1) as f64;
    let load = || {
        let distribution = distribution.clone();
        Load {
            keys: keys.clone(),
            rate: Some(args.capacity * 1.5),
            calls: Calls::Mixed,
            pick: Arc::new(move |_, unit| distribution.key(unit)),
            prefill: 0,
            capacity: Some(args.capacity),
            workers: WORKERS,
            duration: Duration::from_secs_f64(seconds),
            max_dispatches: u64::MAX,
        }
    };
    let fair_trace = load::run(&client, &fair, load(), "zipf, fair").await?;
    let fifo_trace = load::run(&client, &fifo, load(), "zipf, FIFO").await?;
    server.stop().await?;
    let jain_of = |trace: &Trace, adds: &[(f64, u32)], width: f64| -> Vec<(f64, f64)> {
        let windows = ((seconds - WINDOW) / width).floor() as usize;
        (0..windows)
            .map(|w| {
                let from = WINDOW + w as f64 * width;
                (from + width, window_jain(trace, adds, args.zipf_keys, from, from + width))
            })
            .collect()
    };
    let jain = |trace: &Trace, width: f64| jain_of(trace, &trace.added, width);
    let (fair_windows, fifo_windows) = (jain(&fair_trace, WINDOW), jain(&fifo_trace, WINDOW));
    // The same, a task counting as waiting from its add's answer, not from
    // its sending: a slow add delays its tasks before any order can.
    let (fair_answered, fifo_answered) = (
        jain_of(&fair_trace, &fair_trace.acknowledged, WINDOW),
        jain_of(&fifo_trace, &fifo_trace.acknowledged, WINDOW),
    );
    let lowest = |w: &[(f64, f64)]| w.iter().map(|(_, j)| *j).fold(f64::MAX, f64::min);
    let mean = |w: &[(f64, f64)]| w.iter().map(|(_, j)| *j).sum::<f64>() / w.len() as f64;
    let rate =
        |trace: &Trace| trace.dispatched.iter().filter(|d| d.at >= WINDOW).count() as f64 / (trace.seconds - WINDOW);
    let measures = vec![
        Measure::beside_fifo(
            "lowest Jain's index over the 10 s windows",
            "index",
            lowest(&fair_windows),
            lowest(&fifo_windows),
        )
        .target(Bound::AtLeast(0.99)),
        Measure::beside_fifo(
            "mean Jain's index over the 10 s windows",
            "index",
            mean(&fair_windows),
            mean(&fifo_windows),
        ),
        Measure::beside_fifo(
            "lowest Jain's index over the 10 s windows, tasks counted from their add's answer",
            "index",
            lowest(&fair_answered),
            lowest(&fifo_answered),
        ),
        Measure::beside_fifo("dispatch rate after the warm-up", "tasks/s", rate(&fair_trace), rate(&fifo_trace)),
        Measure::beside_fifo(
            "longest time a partition went without a dispatch after the warm-up",
            "s",
            longest_gap(&fair_trace, args.zipf_partitions),
            longest_gap(&fifo_trace, args.zipf_partitions),
        ),
        Measure::beside_fifo("p99 time for AddTasks to answer", "ms", add_p99_ms(&fair_trace), add_p99_ms(&fifo_trace)),
    ];
    let chart = Chart {
        file: "fairness-zipf-jain.png".into(),
        title: format!(
            "Jain's index per 2 s window, {} Zipf keys over {} partitions",
            args.zipf_keys, args.zipf_partitions
        ),
        x_label: "seconds".into(),
        y_label: "Jain's index against the max-min fair share".into(),
        panels: vec![(
            "saturated: offered 1.5 × what the workers take".into(),
            vec![Series::new("Fairway", jain(&fair_trace, 2.0)), Series::new("FIFO", jain(&fifo_trace, 2.0))],
        )],
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

/// Jain's index of the dispatches in `[from, to)` against the max-min fair
/// division of them among the keys by what each could have had: its backlog
/// at `from` plus what it added before `to`.
/// The longest time, after the warm-up, between two dispatches of one
/// partition (or from the warm-up's end to its first, or from its last to
/// the run's end).
fn longest_gap(trace: &Trace, partitions: u32) -> f64 {
    (0..partitions)
        .map(|partition| {
            let mut times: Vec<f64> =
                trace.dispatched.iter().filter(|d| d.partition == partition && d.at >= WINDOW).map(|d| d.at).collect();
            times.insert(0, WINDOW);
            times.push(trace.seconds);
            times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

/// The 99th percentile of the time from sending an AddTasks call to its answer.
fn add_p99_ms(trace: &Trace) -> f64 {
    quantile(&sorted(trace.add_waits.iter().map(|wait| wait * 1e3).collect()), 0.99)
}

/// Jain's index of the window `from..to` against the max-min fair share of
/// each key's backlog at its start plus its `adds` during it.
fn window_jain(trace: &Trace, adds: &[(f64, u32)], keys: usize, from: f64, to: f64) -> f64 {
    let mut demand = vec![0.0; keys];
    let mut got = vec![0.0; keys];
    for &(_, key) in adds.iter().take_while(|(at, _)| *at < to) {
        demand[key as usize] += 1.0;
    }
    for d in trace.dispatched.iter().take_while(|d| d.at < to) {
        if d.at < from {
            demand[d.key as usize] -= 1.0;
        } else {
            got[d.key as usize] += 1.0;
        }
    }
    let capacity: f64 = got.iter().sum();
    let fair = max_min_fair(&demand, &vec![1.0; keys], capacity);
    jain_index(&got, &fair)
}

/// How the noisy scenario's load is cut into calls: with `per-key`, the
/// 20 quiet keys (`0..QUIET`) share 10% of the load beside the noisy key
/// (`QUIET`), all of it alone.
fn noisy_calls(calls: NoisyCalls, with_noise: bool) -> Calls {
    match calls {
        NoisyCalls::Mixed => Calls::Mixed,
        NoisyCalls::PerKey => {
            let (quiet, noisy) = if with_noise { (0.1, 0.9) } else { (1.0, 0.0) };
            Calls::PerKey((0..=QUIET).map(|k| if k == QUIET { noisy } else { quiet / QUIET as f64 }).collect())
        }
    }
}

/// The unmeasured load a noisy-neighbour run starts with.
const WARM_UP: Duration = Duration::from_secs(3);

async fn noisy(args: &FairnessArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let (fair, fifo) = names("noisy");
    let (fair_quiet, fifo_quiet) = (format!("{fair}-alone"), format!("{fifo}-alone"));
    let warm_up = format!("{fair}-warm-up");
    let fair_queues = [fair.clone(), fair_quiet.clone(), warm_up.clone()];
    let server = start(store, &fair_queues, &[fifo.clone(), fifo_quiet.clone()], args.noisy_partitions).await?;
    let client = server.client().await?;
    let mut keys: Vec<LoadKey> = (0..QUIET).map(|k| LoadKey::new(format!("quiet-{k:02}"))).collect();
    keys.push(LoadKey::new("noisy"));
    let quiet_rate = args.capacity * QUIET_SHARE_OF_CAPACITY;
    let load = |with_noise: bool| Load {
        keys: keys.clone(),
        rate: Some(if with_noise { quiet_rate * 10.0 } else { quiet_rate }),
        calls: noisy_calls(args.noisy_calls, with_noise),
        pick: Arc::new(move |n, unit| if with_noise && unit < 0.9 { QUIET } else { (n % QUIET as u64) as usize }),
        prefill: 0,
        capacity: Some(args.capacity),
        workers: WORKERS,
        duration: Duration::from_secs(args.phase_seconds),
        max_dispatches: u64::MAX,
    };
    // Unmeasured: the first seconds of a fresh server (and of the store's
    // sessions) are slower, and the first measured phase alone would pay
    // for them.
    let warming = Load { duration: WARM_UP, ..load(false) };
    load::run(&client, &warm_up, warming, "noisy: warming up (not measured)").await?;
    let alone_fair = load::run(&client, &fair_quiet, load(false), "noisy: quiet keys alone, fair").await?;
    let alone_fifo = load::run(&client, &fifo_quiet, load(false), "noisy: quiet keys alone, FIFO").await?;
    let loaded_fair = load::run(&client, &fair, load(true), "noisy: with the noisy key, fair").await?;
    let loaded_fifo = load::run(&client, &fifo, load(true), "noisy: with the noisy key, FIFO").await?;
    server.stop().await?;
    let quiet_ms = |trace: &Trace, wait: fn(&Dispatch) -> f64| {
        sorted(trace.dispatched.iter().filter(|d| (d.key as usize) < QUIET).map(|d| wait(d) * 1000.0).collect())
    };
    let quiet_waits = |trace: &Trace| quiet_ms(trace, |d| d.wait);
    let quiet_served = |trace: &Trace| quiet_ms(trace, Dispatch::served_wait);
    let quiet_for_worker = |trace: &Trace| quiet_ms(trace, |d| d.worker_wait);
    let at_once_share = |trace: &Trace| {
        let quiet = |keys: &mut dyn Iterator<Item = u32>| keys.filter(|key| (*key as usize) < QUIET).count() as f64;
        quiet(&mut trace.leased_at_once.iter().copied()) / quiet(&mut trace.added.iter().map(|(_, key)| *key)).max(1.0)
    };
    // Beside the noisy key every worker is busy: a quiet task the server
    // has ready waits for the next poll, as it would in any queue.
    let served = [&alone_fair, &alone_fifo, &loaded_fair, &loaded_fifo].map(quiet_served);
    let for_worker = [&loaded_fair, &loaded_fifo].map(quiet_for_worker);
    let at_once = [&loaded_fair, &loaded_fifo].map(at_once_share);
    let (alone_fair, alone_fifo, loaded_fair, loaded_fifo) =
        (quiet_waits(&alone_fair), quiet_waits(&alone_fifo), quiet_waits(&loaded_fair), quiet_waits(&loaded_fifo));
    let p = |w: &[f64], q| quantile(w, q);
    let measures = vec![
        Measure::beside_fifo("quiet keys' p50 wait, alone", "ms", p(&alone_fair, 0.5), p(&alone_fifo, 0.5)),
        Measure::beside_fifo("quiet keys' p99 wait, alone", "ms", p(&alone_fair, 0.99), p(&alone_fifo, 0.99)),
        Measure::beside_fifo(
            "quiet keys' p50 wait, beside the noisy key",
            "ms",
            p(&loaded_fair, 0.5),
            p(&loaded_fifo, 0.5),
        ),
        Measure::beside_fifo(
            "quiet keys' p99 wait, beside the noisy key",
            "ms",
            p(&loaded_fair, 0.99),
            p(&loaded_fifo, 0.99),
        ),
        Measure::beside_fifo(
            "p99 beside the noisy key / p99 alone",
            "ratio",
            p(&loaded_fair, 0.99) / p(&alone_fair, 0.99),
            p(&loaded_fifo, 0.99) / p(&alone_fifo, 0.99),
        )
        .target(Bound::AtMost(2.0)),
        Measure::beside_fifo(
            "quiet tasks leased at once by their add, beside the noisy key",
            "share",
            at_once[0],
            at_once[1],
        ),
        Measure::beside_fifo(
            "quiet keys' p99 wait for a free worker (the add answered, no poll sent since), beside the noisy key",
            "ms",
            p(&for_worker[0], 0.99),
            p(&for_worker[1], 0.99),
        ),
        Measure::beside_fifo(
            "p99 of the wait less the wait for a free worker: beside the noisy key / alone",
            "ratio",
            p(&served[2], 0.99) / p(&served[0], 0.99),
            p(&served[3], 0.99) / p(&served[1], 0.99),
        ),
        Measure::beside_fifo(
            "quiet tasks served beside the noisy key",
            "tasks",
            loaded_fair.len() as f64,
            loaded_fifo.len() as f64,
        ),
    ];
    let calls = match args.noisy_calls {
        NoisyCalls::PerKey => "",
        NoisyCalls::Mixed => " (calls mixing keys)",
    };
    let chart = Chart {
        file: "fairness-noisy-neighbour.png".into(),
        title: format!("Quiet keys' wait (add sent → received), alone and beside a key adding 90% of the load{calls}"),
        x_label: "milliseconds (log scale)".into(),
        y_label: "fraction of quiet tasks".into(),
        panels: vec![(
            "wait CDF".into(),
            vec![
                Series::reference("alone (fair)", cdf(&alone_fair)),
                Series::new("beside the noisy key: Fairway", cdf(&loaded_fair)),
                Series::new("beside the noisy key: FIFO", cdf(&loaded_fifo)),
            ],
        )],
        log_x: true,
        log_y: false,
    };
    let apart = Chart {
        file: "fairness-noisy-neighbour-worker-wait.png".into(),
        title: format!("Quiet keys' wait in Fairway's fair order, with and without the wait for a free worker{calls}"),
        x_label: "milliseconds (log scale)".into(),
        y_label: "fraction of quiet tasks".into(),
        panels: vec![(
            "wait CDF".into(),
            vec![
                Series::reference("alone", cdf(&alone_fair)),
                Series::new("beside the noisy key", cdf(&loaded_fair)),
                Series::new("beside the noisy key, less the wait for a free worker", cdf(&served[2])),
            ],
        )],
        log_x: true,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart, apart] })
}

async fn priorities(args: &FairnessArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let (fair, fifo) = names("priorities");
    let server = start(store, std::slice::from_ref(&fair), std::slice::from_ref(&fifo), 1).await?;
    let client = server.client().await?;
    let keys = vec![LoadKey { priority: 1, ..LoadKey::new("high") }, LoadKey { priority: 5, ..LoadKey::new("low") }];
    // Of every 12 tasks offered, 9 are high (90% of capacity) and 3 low (30%).
    let load = || Load {
        keys: keys.clone(),
        rate: Some(args.capacity * 1.2),
        calls: Calls::Mixed,
        pick: Arc::new(|n, _| if n % 4 == 3 { 1 } else { 0 }),
        prefill: 0,
        capacity: Some(args.capacity),
        workers: WORKERS,
        duration: Duration::from_secs(args.phase_seconds),
        max_dispatches: u64::MAX,
    };
    let fair_trace = load::run(&client, &fair, load(), "priorities, fair").await?;
    let fifo_trace = load::run(&client, &fifo, load(), "priorities, FIFO").await?;
    server.stop().await?;
    let waits = |trace: &Trace, key: u32| {
        sorted(trace.dispatched.iter().filter(|d| d.key == key).map(|d| d.wait * 1000.0).collect())
    };
    let low_share = |trace: &Trace| {
        trace.dispatched.iter().filter(|d| d.key == 1).count() as f64 / trace.dispatched.len().max(1) as f64
    };
    let served = |trace: &Trace| {
        let added = trace.added.iter().filter(|(_, k)| *k == 1).count();
        trace.dispatched.iter().filter(|d| d.key == 1).count() as f64 / added.max(1) as f64
    };
    let (low_fair, low_fifo) = (waits(&fair_trace, 1), waits(&fifo_trace, 1));
    let (high_fair, high_fifo) = (waits(&fair_trace, 0), waits(&fifo_trace, 0));
    let measures = vec![
        Measure::beside_fifo(
            "low level's share of dispatches",
            "fraction",
            low_share(&fair_trace),
            low_share(&fifo_trace),
        ),
        Measure::beside_fifo(
            "low tasks dispatched / low tasks added",
            "fraction",
            served(&fair_trace),
            served(&fifo_trace),
        ),
        Measure::beside_fifo("low level's p50 wait", "ms", quantile(&low_fair, 0.5), quantile(&low_fifo, 0.5)),
        Measure::beside_fifo("low level's p99 wait", "ms", quantile(&low_fair, 0.99), quantile(&low_fifo, 0.99)),
        Measure::beside_fifo("high level's p99 wait", "ms", quantile(&high_fair, 0.99), quantile(&high_fifo, 0.99)),
    ];
    let wait_over_time = |trace: &Trace, key: u32| -> Vec<(f64, f64)> {
        trace.dispatched.iter().filter(|d| d.key == key).map(|d| (d.at, d.wait)).collect()
    };
    let chart = Chart {
        file: "fairness-priorities.png".into(),
        title: "Wait of each priority level under load (high 90% of capacity, low 30%)".into(),
        x_label: "seconds (when dispatched)".into(),
        y_label: "wait, seconds".into(),
        panels: vec![(
            "Fairway (fair order; FIFO ordering keeps strict priority too)".into(),
            vec![
                Series::new("priority 1 (high)", wait_over_time(&fair_trace, 0)),
                Series::new("priority 5 (low)", wait_over_time(&fair_trace, 1)),
            ],
        )],
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(with_noise: bool) -> Vec<f64> {
        match noisy_calls(NoisyCalls::PerKey, with_noise) {
            Calls::PerKey(shares) => shares,
            Calls::Mixed => panic!("per-key calls expected"),
        }
    }

    #[test]
    fn beside_the_noisy_key_each_quiet_key_offers_a_twentieth_of_a_tenth() {
        let beside = shares(true);
        assert_eq!(beside.len(), QUIET + 1);
        assert!((beside[QUIET] - 0.9).abs() < 1e-9, "{beside:?}");
        assert!(beside[..QUIET].iter().all(|&share| (share - 0.005).abs() < 1e-12), "{beside:?}");
        let alone = shares(false);
        assert!(alone[QUIET] == 0.0 && alone[..QUIET].iter().all(|&share| (share - 0.05).abs() < 1e-12));
        assert!((alone.iter().sum::<f64>() - 1.0).abs() < 1e-9 && (beside.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
