//! One order's run in virtual time: jobs arrive, a pool of workers takes
//! chunks in the order's choice, each busy for the chunk's records at the
//! workers' rate; then what users of an import queue ask of it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;

use super::orders::Order;
use super::workload::{Shape, Workload};
use crate::figures::stats::{jain_index, quantile, sorted};

/// A job of at most this many records is small (a single chunk at the
/// default chunk size).
pub(crate) const SMALL_JOB_RECORDS: u64 = 1_000;

/// When each chunk started and ended, ms of virtual time.
pub(crate) struct Run {
    pub started_ms: Vec<i64>,
    pub ended_ms: Vec<i64>,
    /// Per window of `window_ms`: the tenants with chunks waiting
    /// throughout it (at its start, at its end, and at every moment
    /// between).
    pub backlogged: Vec<Vec<usize>>,
    pub window_ms: i64,
}

/// Runs `order` over `workload` with `shape.workers` workers.
pub(crate) fn run(order: &mut dyn Order, workload: &Workload, shape: &Shape, window_ms: i64) -> Run {
    let chunks = &workload.chunks;
    let (mut started_ms, mut ended_ms) = (vec![-1; chunks.len()], vec![-1; chunks.len()]);
    let mut running = vec![0usize; shape.tenants];
    let mut waiting = vec![0usize; shape.tenants];
    let mut all_running = 0;
    let mut ends: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    let mut next_job = 0;
    let mut samples: Vec<Vec<usize>> = Vec::new();
    // Per window: the tenants whose last waiting chunk started in it.
    let mut emptied: Vec<Vec<usize>> = Vec::new();
    let mut done = 0;
    while done < chunks.len() {
        let arrival = workload.jobs.get(next_job).map(|job| job.arrived_ms);
        let end = ends.peek().map(|Reverse((at, _))| *at);
        let now = match (arrival, end) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => unreachable!("chunks left with none waiting, running or to come"),
        };
        while (samples.len() as i64) * window_ms <= now {
            samples.push((0..shape.tenants).filter(|&t| waiting[t] > 0).collect());
        }
        while let Some(&Reverse((at, id))) = ends.peek()
            && at == now
        {
            ends.pop();
            ended_ms[id] = now;
            running[chunks[id].tenant] -= 1;
            all_running -= 1;
            done += 1;
        }
        while let Some(job) = workload.jobs.get(next_job)
            && job.arrived_ms == now
        {
            order.add(&chunks[job.chunks.clone()], now);
            waiting[job.tenant] += job.chunks.len();
            next_job += 1;
        }
        while all_running < shape.workers {
            let Some(chunk) = order.pick(now, &running, all_running) else { break };
            assert_eq!(started_ms[chunk.id], -1, "chunk {} started twice", chunk.id);
            started_ms[chunk.id] = now;
            waiting[chunk.tenant] -= 1;
            if waiting[chunk.tenant] == 0 {
                let window = (now / window_ms) as usize;
                emptied.resize(emptied.len().max(window + 1), Vec::new());
                emptied[window].push(chunk.tenant);
            }
            running[chunk.tenant] += 1;
            all_running += 1;
            ends.push(Reverse((now + chunk.work_ms(shape), chunk.id)));
        }
    }
    samples.push(Vec::new());
    emptied.resize(samples.len(), Vec::new());
    let backlogged = samples
        .windows(2)
        .zip(&emptied)
        .map(|(w, emptied)| w[0].iter().copied().filter(|t| w[1].contains(t) && !emptied.contains(t)).collect())
        .collect();
    Run { started_ms, ended_ms, backlogged, window_ms }
}

/// What a run gave.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Figures {
    pub small_jobs: usize,
    /// Completion time of small jobs (arrival to last chunk done), minutes.
    pub small_p50_min: f64,
    pub small_p99_min: f64,
    /// Completion time of every job, minutes.
    pub all_p50_min: f64,
    pub all_p99_min: f64,
    /// The longest any chunk waited to start, minutes.
    pub longest_wait_min: f64,
    pub wait_p99_min: f64,
    /// Jain's index of the worker time tenants got over each window in
    /// which at least two were backlogged throughout: lowest and mean.
    pub jain_min: f64,
    pub jain_mean: f64,
    pub windows: usize,
    /// The time the last chunk ended, minutes.
    pub makespan_min: f64,
    #[serde(skip)]
    pub small_completions_min: Vec<f64>,
    #[serde(skip)]
    pub waits_min: Vec<f64>,
}

pub(crate) fn figures(run: &Run, workload: &Workload, shape: &Shape) -> Figures {
    let minutes = |ms: i64| ms as f64 / 60_000.0;
    let completion = |job: &super::workload::Job| {
        minutes(job.chunks.clone().map(|c| run.ended_ms[c]).max().unwrap_or(job.arrived_ms) - job.arrived_ms)
    };
    let small = sorted(workload.jobs.iter().filter(|j| j.records <= SMALL_JOB_RECORDS).map(completion).collect());
    let all = sorted(workload.jobs.iter().map(completion).collect());
    let waits = sorted(workload.chunks.iter().map(|c| minutes(run.started_ms[c.id] - c.arrived_ms)).collect());
    // Worker time per tenant and window.
    let windows = run.backlogged.len();
    let mut got = vec![vec![0.0f64; shape.tenants]; windows];
    for chunk in &workload.chunks {
        let (start, end) = (run.started_ms[chunk.id], run.ended_ms[chunk.id]);
        let mut at = start;
        while at < end {
            let window = (at / run.window_ms) as usize;
            let until = end.min((window as i64 + 1) * run.window_ms);
            if window < windows {
                got[window][chunk.tenant] += (until - at) as f64;
            }
            at = until;
        }
    }
    let jains: Vec<f64> = run
        .backlogged
        .iter()
        .zip(&got)
        .filter(|(tenants, _)| tenants.len() >= 2)
        .map(|(tenants, got)| {
            let got: Vec<f64> = tenants.iter().map(|&t| got[t]).collect();
            jain_index(&got, &vec![1.0; got.len()])
        })
        .collect();
    Figures {
        small_jobs: small.len(),
        small_p50_min: quantile(&small, 0.5),
        small_p99_min: quantile(&small, 0.99),
        all_p50_min: quantile(&all, 0.5),
        all_p99_min: quantile(&all, 0.99),
        longest_wait_min: waits.last().copied().unwrap_or(0.0),
        wait_p99_min: quantile(&waits, 0.99),
        jain_min: jains.iter().copied().fold(f64::INFINITY, f64::min).min(1.0),
        jain_mean: if jains.is_empty() { 1.0 } else { jains.iter().sum::<f64>() / jains.len() as f64 },
        windows: jains.len(),
        makespan_min: minutes(run.ended_ms.iter().copied().max().unwrap_or(0)),
        small_completions_min: small,
        waits_min: waits,
    }
}
