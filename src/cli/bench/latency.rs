//! Latency: pollers wait, a producer adds tasks one by one at a steady rate
//! (open loop), and each task's time from the add being sent to its receipt
//! by a poller is recorded. With pollers waiting and no backlog, tasks go by
//! sync match: the figure is the dispatch latency of design §10.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::bail;
use clap::Args;
use tokio::sync::Mutex;

use fairway::proto::v1 as pb;

use super::report::{Bound, Measure, ScenarioReport};
use super::server::{BenchServer, create_queue};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::cli::figures::plot::{Chart, Series};
use crate::cli::figures::progress::Progress;
use crate::cli::figures::stats::{Pace, cdf, quantile, sorted};

#[derive(Args, Debug, Clone)]
pub(crate) struct LatencyArgs {
    #[command(flatten)]
    pub common: Common,
    /// Tasks added, one AddTask each.
    #[arg(long, default_value_t = 5_000)]
    tasks: u64,
    /// Adds per second.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Pollers waiting. Enough that one is waiting for every task added while
    /// a lease write is in flight (rate × write latency), or tasks queue up.
    #[arg(long, default_value_t = 64)]
    pollers: u32,
}

impl LatencyArgs {
    pub(crate) fn defaults(common: &Common) -> LatencyArgs {
        LatencyArgs { common: common.clone(), tasks: 5_000, rate: 500.0, pollers: 64 }
    }
}

pub(crate) async fn run(args: &LatencyArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    if args.tasks == 0 || args.pollers == 0 || !(args.rate > 0.0 && args.rate <= 100_000.0) {
        bail!("--tasks and --pollers must be at least 1, --rate in (0, 100000]");
    }
    let settings = format!(
        "{} tasks added one by one at {}/s (open loop), {} pollers waiting (each completes its task aside and \
         polls again at once), sync match on, one partition",
        args.tasks, args.rate, args.pollers
    );
    let target = if store.url().is_some() { 20.0 } else { 5.0 };
    repeat("latency (sync match)", settings, &args.common, |run| once(args, store, run, target)).await
}

async fn once(args: &LatencyArgs, store: &BenchStore, run: u32, target_ms: f64) -> anyhow::Result<RunOutput> {
    let server = BenchServer::start(store, &server_config(true, &[]))?;
    let queue = format!("latency-{}", run_id());
    let mut client = server.client().await?;
    create_queue(&mut client, &queue, 1).await?;

    let epoch = Instant::now();
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(args.tasks as usize)));
    let received = Arc::new(AtomicU64::new(0));
    let pollers: Vec<_> = (0..args.pollers)
        .map(|_| {
            let (mut client, queue) = (client.clone(), queue.clone());
            let (latencies, received, total) = (latencies.clone(), received.clone(), args.tasks);
            tokio::spawn(async move {
                while received.load(Ordering::Relaxed) < total {
                    let request = pb::PollTaskRequest {
                        queue: queue.clone(),
                        worker_id: "latency".into(),
                        max_wait: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
                    };
                    let Some(task) = client.poll_task(request).await?.into_inner().task else { continue };
                    let sent = u64::from_le_bytes(task.payload[..8].try_into()?);
                    let latency = epoch.elapsed().as_nanos() as u64 - sent;
                    latencies.lock().await.push(latency as f64 / 1e6);
                    received.fetch_add(1, Ordering::Relaxed);
                    // Completed aside, so that the poller waits again at once.
                    let mut completer = client.clone();
                    tokio::spawn(async move {
                        let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] };
                        completer.complete_task(complete).await
                    });
                }
                anyhow::Ok(())
            })
        })
        .collect();
    // The pollers wait before the first add.
    loop {
        let state = client.describe_queue(pb::DescribeQueueRequest { queue: queue.clone(), top_keys: 0 }).await?;
        if state.into_inner().waiting_pollers >= args.pollers {
            break;
        }
        tokio::task::yield_now().await;
    }
    let pace = Pace::new(args.rate);
    let sync_matched = Arc::new(AtomicU64::new(0));
    let mut adds = Vec::with_capacity(args.tasks as usize);
    let mut progress = Progress::new(format!("latency, run {}", run + 1), args.tasks);
    for n in 0..args.tasks {
        pace.wait_for(n).await;
        let (mut client, queue, sync_matched) = (client.clone(), queue.clone(), sync_matched.clone());
        adds.push(tokio::spawn(async move {
            let sent = (epoch.elapsed().as_nanos() as u64).to_le_bytes().to_vec();
            let spec = pb::TaskSpec { fairness_key: format!("k{}", n % 16), payload: sent, ..Default::default() };
            let added = client.add_task(pb::AddTaskRequest { queue, task: Some(spec) }).await?.into_inner();
            if added.sync_matched {
                sync_matched.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
        progress.update(received.load(Ordering::Relaxed), "");
    }
    for add in adds {
        add.await??;
    }
    for poller in pollers {
        poller.await??;
    }
    progress.update(args.tasks, "");
    server.stop().await?;

    let latencies = sorted(std::mem::take(&mut *latencies.lock().await));
    let measures = vec![
        Measure::new("p50 add → receipt", "ms", quantile(&latencies, 0.5)),
        Measure::new("p99 add → receipt", "ms", quantile(&latencies, 0.99)).target(Bound::AtMost(target_ms)),
        Measure::new("p99.9 add → receipt", "ms", quantile(&latencies, 0.999)),
        Measure::new("max add → receipt", "ms", quantile(&latencies, 1.0)),
        Measure::new(
            "tasks handed over by sync match",
            "%",
            100.0 * sync_matched.load(Ordering::Relaxed) as f64 / args.tasks as f64,
        ),
    ];
    let chart = Chart {
        file: "latency-cdf.png".into(),
        title: "Sync-match dispatch latency (add sent → task received)".into(),
        x_label: "milliseconds (log scale)".into(),
        y_label: "fraction of tasks".into(),
        panels: vec![(
            format!("{} tasks at {}/s, {} pollers", args.tasks, args.rate, args.pollers),
            vec![Series::new("Fairway", cdf(&latencies))],
        )],
        log_x: true,
        log_y: false,
    };
    Ok(RunOutput { measures, charts: vec![chart] })
}
