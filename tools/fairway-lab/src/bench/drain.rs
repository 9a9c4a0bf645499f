//! Drain: a backlog filled first, then drained by workers taking tasks in
//! batches; the fill and drain rates and the server process's memory, whose
//! peak design §10 bounds (< 256 MB with 10 million tasks waiting).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use futures::future::join_all;

use fairway::proto::v1 as pb;

use super::report::{Bound, Measure, ScenarioReport};
use super::server::{BenchServer, add_batch, complete_all, create_queue, poll_batch};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::plot::{Chart, Series};
use crate::figures::progress::Progress;

#[derive(Args, Debug, Clone)]
pub(crate) struct DrainArgs {
    #[command(flatten)]
    pub common: Common,
    /// The backlog to fill, then drain.
    #[arg(long, default_value_t = 10_000_000)]
    pub tasks: u64,
    /// Fairness keys the backlog spreads over.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Concurrent producers, each sending AddTasks of 1,000.
    #[arg(long, default_value_t = 4)]
    producers: u64,
    /// Concurrent workers.
    #[arg(long, default_value_t = 16)]
    workers: u64,
    /// Tasks per PollTasks call.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=256))]
    poll_batch: u32,
}

impl DrainArgs {
    pub(crate) fn defaults(common: &Common, tasks: u64) -> DrainArgs {
        DrainArgs { common: common.clone(), tasks, keys: 1_000, producers: 4, workers: 16, poll_batch: 64 }
    }
}

const BATCH: u64 = 1_000;
const MIB: f64 = 1024.0 * 1024.0;

pub(super) async fn run(args: &DrainArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    anyhow::ensure!(
        args.tasks > 0 && args.keys > 0 && args.producers > 0 && args.workers > 0,
        "counts must be at least 1"
    );
    let settings = format!(
        "{} tasks over {} keys added first ({} producers × AddTasks of {BATCH}, 64-byte payloads), then drained \
         by {} workers × PollTasks of up to {}; one partition; memory of the server process (VmRSS, VmHWM)",
        args.tasks, args.keys, args.producers, args.workers, args.poll_batch
    );
    repeat("drain", settings, &args.common, |_| once(args, store)).await
}

async fn once(args: &DrainArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let server = Arc::new(BenchServer::start(store, &server_config(false, &[]))?);
    let queue = format!("drain-{}", run_id());
    let mut client = server.client().await?;
    create_queue(&mut client, &queue, 1).await?;
    let started = Instant::now();
    let memory = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = {
        let (server, memory) = (server.clone(), memory.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(500));
            loop {
                ticks.tick().await;
                let Some((rss, _)) = server.memory() else { return };
                memory.lock().expect("not poisoned").push((started.elapsed().as_secs_f64(), rss as f64 / MIB));
            }
        })
    };

    // Fill.
    let added = Arc::new(AtomicU64::new(0));
    let batches = args.tasks.div_ceil(BATCH);
    let next_batch = Arc::new(AtomicU64::new(0));
    let producers = (0..args.producers).map(|_| {
        let (mut client, queue, added, next_batch) = (client.clone(), queue.clone(), added.clone(), next_batch.clone());
        let (tasks, keys) = (args.tasks, args.keys);
        tokio::spawn(async move {
            loop {
                let b = next_batch.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    return anyhow::Ok(());
                }
                let range = b * BATCH..((b + 1) * BATCH).min(tasks);
                let size = range.end - range.start;
                let specs = range
                    .map(|n| pb::TaskSpec {
                        fairness_key: format!("key-{}", n % keys),
                        payload: vec![0x5A; 64],
                        ..Default::default()
                    })
                    .collect();
                add_batch(&mut client, &queue, specs).await?;
                added.fetch_add(size, Ordering::Relaxed);
            }
        })
    });
    let producers = tokio::spawn(join_all(producers));
    let mut progress = Progress::new("drain: fill", args.tasks);
    while !producers.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.update(added.load(Ordering::Relaxed), &rss_note(&server));
    }
    for joined in producers.await? {
        joined??;
    }
    progress.update(args.tasks, &rss_note(&server));
    let filled_in = started.elapsed();
    let rss_filled = server.memory().map_or(0, |(rss, _)| rss);

    // Drain.
    let draining = Instant::now();
    let completed = Arc::new(AtomicU64::new(0));
    let workers = (0..args.workers).map(|_| {
        let (mut client, queue, completed) = (client.clone(), queue.clone(), completed.clone());
        let (total, max) = (args.tasks, args.poll_batch);
        tokio::spawn(async move {
            while completed.load(Ordering::Relaxed) < total {
                let tasks = poll_batch(&mut client, &queue, max, Duration::from_millis(500)).await?;
                complete_all(&client, &tasks).await?;
                completed.fetch_add(tasks.len() as u64, Ordering::Relaxed);
            }
            anyhow::Ok(())
        })
    });
    let workers = tokio::spawn(join_all(workers));
    let mut progress = Progress::new("drain: drain", args.tasks);
    while !workers.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        progress.update(completed.load(Ordering::Relaxed), &rss_note(&server));
    }
    for joined in workers.await? {
        joined??;
    }
    progress.update(args.tasks, &rss_note(&server));
    let drained_in = draining.elapsed();
    let (_, peak) = server.memory().unwrap_or((0, 0));
    sampler.abort();
    let _ = sampler.await;
    let server = Arc::into_inner(server).expect("the sampler has stopped");
    server.stop().await?;

    let measures = vec![
        Measure::new("fill rate (AddTasks)", "tasks/s", args.tasks as f64 / filled_in.as_secs_f64()),
        Measure::new("drain rate (PollTasks + CompleteTask)", "tasks/s", args.tasks as f64 / drained_in.as_secs_f64()),
        Measure::new("server RSS with the backlog filled", "MiB", rss_filled as f64 / MIB),
        Measure::new("server peak RSS (VmHWM)", "MiB", peak as f64 / MIB).target(Bound::AtMost(256.0 * 1e6 / MIB)),
    ];
    let points = std::mem::take(&mut *memory.lock().expect("not poisoned"));
    let fill_end = filled_in.as_secs_f64();
    let chart = Chart {
        file: "drain-memory.png".into(),
        title: format!("Server memory while {} tasks are added, then drained", args.tasks),
        x_label: "seconds".into(),
        y_label: "resident memory, MiB".into(),
        panels: vec![(
            format!("filled by {fill_end:.0} s"),
            vec![
                Series::new("server RSS", points),
                Series::reference(
                    "256 MB target",
                    vec![(0.0, 256.0 * 1e6 / MIB), (fill_end + drained_in.as_secs_f64(), 256.0 * 1e6 / MIB)],
                ),
            ],
        )],
        log_x: false,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}

fn rss_note(server: &BenchServer) -> String {
    server.memory().map_or(String::new(), |(rss, _)| format!("server RSS {:.0} MiB", rss as f64 / MIB))
}
