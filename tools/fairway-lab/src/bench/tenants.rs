//! Tenants: two producers share a queue, each with a producer grant of its
//! own, and the operator gives their prefixes weights (`a/` 1, `b/` 3 by
//! default: a quarter and three quarters). Producer `a` tries every trick:
//! a priority above the default, a weight of its own, its backlog spread
//! over many keys; producer `b` adds plainly, under one key. Workers (the
//! bench's admin) take and complete tasks until `--dispatches`, with both
//! backlogs larger than that, and each producer's share of them is
//! measured.
//!
//! The same run measures the producers bound to their prefixes
//! (`fairness_prefix`, what the shares are held to) and beside them the same
//! producers unbound (grants without a prefix): what a tenant takes when
//! nothing holds it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use futures::future::join_all;
use tonic::Code;

use fairway::proto::v1 as pb;

use super::report::{Bound, Measure, ScenarioReport};
use super::secure::{BenchPrincipal, BenchSecurity};
use super::server::{BenchServer, Client, add_batch, complete_all, create_queue, poll_batch};
use super::{BenchStore, Common, RunOutput, repeat, run_id, server_config};
use crate::figures::progress::Progress;

#[derive(Args, Debug, Clone)]
pub(crate) struct TenantsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Tasks dispatched (and completed) in each of the two runs, bound and
    /// unbound; each producer's backlog is as large.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    dispatches: u64,
    /// The operator's weight of tenant `a`'s prefix (`engine.weights.keys."a/"`).
    #[arg(long, default_value_t = 1.0)]
    weight_a: f64,
    /// The operator's weight of tenant `b`'s prefix.
    #[arg(long, default_value_t = 3.0)]
    weight_b: f64,
    /// The keys tenant `a` spreads its backlog over.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    keys_a: u64,
    /// Concurrent workers, each taking up to 64 tasks per poll.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
}

/// How far (relative) a bound tenant's share may be from its configured one.
const TOLERANCE: f64 = 0.05;
/// The default priority, the highest a tenant's grant allows by default;
/// the trick tries the top one.
const TOP_PRIORITY: u32 = 1;
const TRICK_WEIGHT: f64 = 1_000.0;

pub(super) async fn run(args: &TenantsArgs, store: &BenchStore) -> anyhow::Result<ScenarioReport> {
    for (flag, weight) in [("--weight-a", args.weight_a), ("--weight-b", args.weight_b)] {
        anyhow::ensure!((0.001..=1_000.0).contains(&weight), "{flag} must be 0.001 to 1000, not {weight}");
    }
    let settings = format!(
        "producers a and b on one queue of one partition, prefixes a/ (weight {}) and b/ (weight {}); a tries \
         priority {TOP_PRIORITY}, weight {TRICK_WEIGHT} and {} keys, b adds under one key at the default priority; \
         {} dispatches taken by {} workers × PollTasks of up to 64, each producer's backlog {} tasks. Fairway: \
         producers bound to their prefixes; beside it: the same producers unbound (no fairness_prefix). Target: \
         each bound share within ±{}% of its configured share",
        args.weight_a,
        args.weight_b,
        args.keys_a,
        args.dispatches,
        args.workers,
        args.dispatches,
        TOLERANCE * 100.0
    );
    let report = repeat("tenants: shares held to the grants", settings, &args.common, |_| once(args, store)).await?;
    Ok(report.beside("unbound producers"))
}

/// What one run of one kind (bound or unbound) saw.
struct Shares {
    a: f64,
    b: f64,
    /// Which of `a`'s tricks the server took.
    priority_taken: bool,
    weight_taken: bool,
}

async fn once(args: &TenantsArgs, store: &BenchStore) -> anyhow::Result<RunOutput> {
    let bound = measure(args, store, true).await?;
    let unbound = measure(args, store, false).await?;
    let share_a = args.weight_a / (args.weight_a + args.weight_b);
    let within = |target: f64| Bound::AtMost(target * TOLERANCE);
    let taken = |yes: bool| if yes { 1.0 } else { 0.0 };
    let measures = vec![
        Measure::beside_fifo(format!("share of a (configured {share_a:.3})"), "fraction", bound.a, unbound.a),
        Measure::beside_fifo(format!("share of b (configured {:.3})", 1.0 - share_a), "fraction", bound.b, unbound.b),
        Measure::beside_fifo("a's distance from its share", "fraction", (bound.a - share_a).abs(), {
            (unbound.a - share_a).abs()
        })
        .target(within(share_a)),
        Measure::beside_fifo("b's distance from its share", "fraction", (bound.b - (1.0 - share_a)).abs(), {
            (unbound.b - (1.0 - share_a)).abs()
        })
        .target(within(1.0 - share_a)),
        Measure::beside_fifo(
            format!("a's priority {TOP_PRIORITY} accepted"),
            "1 = yes",
            taken(bound.priority_taken),
            taken(unbound.priority_taken),
        ),
        Measure::beside_fifo(
            format!("a's weight {TRICK_WEIGHT} accepted"),
            "1 = yes",
            taken(bound.weight_taken),
            taken(unbound.weight_taken),
        ),
    ];
    Ok(RunOutput { measures, charts: Vec::new() })
}

/// One server, two tenants bound to their prefixes or not, and each one's
/// share of the first `args.dispatches` dispatches.
async fn measure(args: &TenantsArgs, store: &BenchStore, bound: bool) -> anyhow::Result<Shares> {
    let queue = format!("tenants-{}", run_id());
    let grant = |prefix: &str| {
        let prefix = if bound { format!(", fairness_prefix = {prefix:?}") } else { String::new() };
        format!("[{{ role = \"producer\", queues = [{queue:?}]{prefix} }}]")
    };
    let a = BenchPrincipal::new("tenant-a", grant("a/"));
    let b = BenchPrincipal::new("tenant-b", grant("b/"));
    let (a_key, b_key) = (a.key.clone(), b.key.clone());
    let store = store.with_security(BenchSecurity::with_principals(vec![a, b])?);
    let config = format!(
        "{}\n[engine]\nweights = {{ default = 1.0, keys = {{ \"a/\" = {}, \"b/\" = {} }} }}\n\n[queues.\"{queue}\"]\n\
         lease_timeout = \"120s\"\n",
        server_config(false, &[]),
        args.weight_a,
        args.weight_b
    );
    let server = BenchServer::start(&store, &config)?;
    let mut admin = server.client().await?;
    create_queue(&mut admin, &queue, 1).await?;
    let (mut tenant_a, mut tenant_b) = (server.client_as(&a_key).await?, server.client_as(&b_key).await?);

    // a's tricks, each tried once: what the server takes is what a uses.
    let priority_taken = accepted(&mut tenant_a, &queue, trick(TOP_PRIORITY, 0.0)).await?;
    let weight_taken = accepted(&mut tenant_a, &queue, trick(0, TRICK_WEIGHT)).await?;
    let a_spec = |n: u64| pb::TaskSpec {
        fairness_key: format!("a/{}", n % args.keys_a),
        payload: b"a".to_vec(),
        ..trick(if priority_taken { TOP_PRIORITY } else { 0 }, if weight_taken { TRICK_WEIGHT } else { 0.0 })
    };
    let b_spec = |_| pb::TaskSpec { fairness_key: "b/main".into(), payload: b"b".to_vec(), ..Default::default() };
    // b's backlog first, so that a's tricks, not the order of arrival, decide.
    fill(&mut tenant_b, &queue, args.dispatches, &b_spec).await?;
    fill(&mut tenant_a, &queue, args.dispatches, &a_spec).await?;

    let taken: Arc<Mutex<Vec<u8>>> = Arc::new(Mutex::new(Vec::new()));
    let kind = if bound { "bound" } else { "unbound" };
    let progress = Arc::new(Mutex::new(Progress::new(format!("dispatches, producers {kind}"), args.dispatches)));
    let workers = (0..args.workers).map(|_| {
        let (mut client, queue, taken, progress, total) =
            (admin.clone(), queue.clone(), taken.clone(), progress.clone(), args.dispatches as usize);
        async move {
            while taken.lock().expect("not poisoned").len() < total {
                let tasks = poll_batch(&mut client, &queue, 64, Duration::from_secs(5)).await?;
                anyhow::ensure!(!tasks.is_empty(), "the backlog ran dry before {total} dispatches");
                let done = {
                    let mut taken = taken.lock().expect("not poisoned");
                    taken.extend(tasks.iter().map(|t| t.payload.first().copied().unwrap_or_default()));
                    taken.len() as u64
                };
                progress.lock().expect("not poisoned").update(done, "");
                complete_all(&client, &tasks).await?;
            }
            anyhow::Ok(())
        }
    });
    for worker in join_all(workers).await {
        worker?;
    }
    server.stop().await?;
    let taken = taken.lock().expect("not poisoned");
    let first = &taken[..args.dispatches as usize];
    let share = |of: u8| first.iter().filter(|&&p| p == of).count() as f64 / first.len() as f64;
    Ok(Shares { a: share(b'a'), b: share(b'b'), priority_taken, weight_taken })
}

/// A task of tenant `a` with `priority` and `weight` (0: the defaults).
fn trick(priority: u32, weight: f64) -> pb::TaskSpec {
    pb::TaskSpec {
        fairness_key: "a/0".into(),
        payload: b"a".to_vec(),
        priority,
        fairness_weight: weight,
        ..Default::default()
    }
}

/// Whether the server took `spec`: true once added (it then counts among
/// a's tasks), false when refused as beyond the grant.
async fn accepted(client: &mut Client, queue: &str, spec: pb::TaskSpec) -> anyhow::Result<bool> {
    let request = pb::AddTaskRequest { queue: queue.to_owned(), task: Some(spec) };
    match client.add_task(request).await {
        Ok(_) => Ok(true),
        Err(status) if status.code() == Code::PermissionDenied => Ok(false),
        Err(status) => Err(anyhow::anyhow!("an add failed: {:?} {}", status.code(), status.message())),
    }
}

/// Adds `count` tasks made by `spec`, 1,000 per call.
async fn fill(client: &mut Client, queue: &str, count: u64, spec: &dyn Fn(u64) -> pb::TaskSpec) -> anyhow::Result<()> {
    let mut next = 0;
    while next < count {
        let size = 1_000.min(count - next);
        add_batch(client, queue, (next..next + size).map(spec).collect()).await?;
        next += size;
    }
    Ok(())
}
