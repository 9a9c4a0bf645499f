//! `fairway queue list`, and `queue pause`, `queue resume` and `queue
//! update`: the settings stored with a queue, which every node applies over
//! its config file.

use std::time::Duration;

use clap::Args;
use comfy_table::{Table, presets::NOTHING};
use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;

use super::client::{ServerArg, connect, proto_duration, status};

/// Which queue, and which of its keys (none: the whole queue).
#[derive(Args, Debug)]
pub(super) struct PauseArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// One fairness key alone (`--key ''` for the empty key); without it,
    /// the whole queue. At most 100 keys of a queue are paused at once.
    #[arg(long)]
    key: Option<String>,
}

/// The settings to store; those not given stay as they are.
#[derive(Args, Debug)]
pub(super) struct UpdateArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// A task is delivered again when its worker has not reported for this
    /// long (1s to 24h).
    #[arg(long, value_parser = duration_serde::parse)]
    lease_timeout: Option<Duration>,
    /// Deliveries before a failing task becomes a dead letter (1 to 1000).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// The wait before the second attempt (at most 30 days)...
    #[arg(long, value_parser = duration_serde::parse)]
    backoff_initial: Option<Duration>,
    /// ...doubling up to this.
    #[arg(long, value_parser = duration_serde::parse)]
    backoff_max: Option<Duration>,
    /// Tasks of one key running at once, per partition (0: no limit).
    #[arg(long)]
    key_concurrency: Option<u32>,
    /// Tasks of one key started per second, per partition (0: no limit).
    #[arg(long)]
    key_rate: Option<f64>,
    /// Bursts of the key rate (1 to 1000000).
    #[arg(long)]
    key_burst: Option<u32>,
    /// How sizes become costs: linear or log.
    #[arg(long)]
    cost_curve: Option<String>,
    /// The size that costs the most.
    #[arg(long)]
    cost_reference_size: Option<u64>,
    /// Costs a tenant group may go ahead of its share for a new job (0: off).
    #[arg(long)]
    group_lead: Option<u64>,
    /// A key's weight, KEY=WEIGHT (0 removes the key's); repeat for more.
    #[arg(long = "weight", value_parser = parse_weight)]
    weights: Vec<(String, f64)>,
    /// A setting to send back to the config file's (lease_timeout,
    /// weights, ...); repeat for more.
    #[arg(long)]
    clear: Vec<String>,
    /// Store only if the settings are at this version (`queue describe`
    /// shows it).
    #[arg(long, default_value_t = 0)]
    expected_version: u64,
}

fn parse_weight(text: &str) -> Result<(String, f64), String> {
    let (key, weight) = text.rsplit_once('=').ok_or_else(|| format!("{text:?} is not KEY=WEIGHT"))?;
    let weight = weight.parse::<f64>().map_err(|e| format!("the weight of {key:?}, {weight:?}: {e}"))?;
    Ok((key.to_owned(), weight))
}

/// `queue list`: pages fetched until `limit` queues or the last one.
pub(super) async fn list(server: &ServerArg, prefix: &str, limit: usize, json: bool) -> anyhow::Result<()> {
    let mut client = connect(server).await?;
    let (mut shown, mut token) = (Vec::new(), String::new());
    loop {
        let request = pb::ListQueuesRequest { page_size: 100, page_token: token, prefix: prefix.to_owned() };
        let page = client.list_queues(request).await.map_err(status)?.into_inner();
        shown.extend(page.queues);
        token = page.next_page_token;
        if token.is_empty() || shown.len() >= limit {
            break;
        }
    }
    let more = !token.is_empty() || shown.len() > limit;
    if json {
        // The pages fetched as one answer; its token goes on after the last queue shown.
        shown.truncate(limit);
        let next_page_token = if more { shown.last().map(|q| q.queue.clone()).unwrap_or_default() } else { token };
        let response = pb::ListQueuesResponse { queues: shown, next_page_token };
        return super::json::print(&response, "fairway.v1.ListQueuesResponse");
    }
    shown.truncate(limit);
    if shown.is_empty() {
        println!("no queue{}", if prefix.is_empty() { String::new() } else { format!(" named {prefix}…") });
        return Ok(());
    }
    let now = super::times::now_ms();
    let mut table = Table::new();
    table.load_style(NOTHING).set_header(["QUEUE", "PARTITIONS", "WAITING", "RUNNING", "OLDEST WAIT", "STATE"]);
    for q in &shown {
        let oldest =
            q.oldest_added_at.as_ref().map_or("-".to_owned(), |t| super::times::span(now - super::times::ms(t)));
        let settings = q.settings.clone().unwrap_or_default();
        let state = match (settings.paused, settings.paused_keys.len()) {
            (true, _) => "PAUSED".to_owned(),
            (false, 0) => "active".to_owned(),
            (false, keys) => format!("{keys} key(s) paused"),
        };
        let partial = if q.held_here < q.partitions { "*" } else { "" };
        table.add_row([
            q.queue.clone(),
            q.partitions.to_string(),
            q.backlog.to_string(),
            format!("{}{partial}", q.leased),
            format!("{oldest}{partial}"),
            state,
        ]);
    }
    println!("{table}");
    if shown.iter().any(|q| q.held_here < q.partitions) {
        println!("* of the partitions the node answering holds; ask the others for theirs");
    }
    if more {
        println!("(more queues: raise --limit, or narrow with --prefix)");
    }
    Ok(())
}

/// `queue pause` (`pause`) or `queue resume`.
pub(super) async fn pause(args: PauseArgs, pause: bool) -> anyhow::Result<()> {
    let PauseArgs { server, queue, key } = args;
    let mut client = connect(&server).await?;
    let settings = if pause {
        let request = pb::PauseQueueRequest { queue: queue.clone(), fairness_key: key.clone() };
        client.pause_queue(request).await.map_err(status)?.into_inner().settings
    } else {
        let request = pb::ResumeQueueRequest { queue: queue.clone(), fairness_key: key.clone() };
        client.resume_queue(request).await.map_err(status)?.into_inner().settings
    };
    let what = match (&key, pause) {
        (None, true) => "paused: nothing is handed out; adds go on".to_owned(),
        (None, false) => "resumed".to_owned(),
        (Some(key), true) => format!("key {key:?} paused: its tasks wait, the others go on"),
        (Some(key), false) => format!("key {key:?} resumed"),
    };
    println!("queue {queue}: {what} (on every node within a second or so)");
    if let Some(settings) = settings {
        print_pauses(&settings);
    }
    Ok(())
}

/// `queue update`.
pub(super) async fn update(args: UpdateArgs) -> anyhow::Result<()> {
    let UpdateArgs {
        server,
        queue,
        lease_timeout,
        max_attempts,
        backoff_initial,
        backoff_max,
        key_concurrency,
        key_rate,
        key_burst,
        cost_curve,
        cost_reference_size,
        group_lead,
        weights,
        clear,
        expected_version,
    } = args;
    let settings = pb::QueueSettings {
        lease_timeout: lease_timeout.map(proto_duration),
        max_attempts,
        backoff_initial: backoff_initial.map(proto_duration),
        backoff_max: backoff_max.map(proto_duration),
        key_concurrency,
        key_rate_per_second: key_rate,
        key_burst,
        cost_curve,
        cost_reference_size,
        group_lead,
        weights: weights.into_iter().collect(),
        ..Default::default()
    };
    let request = pb::UpdateQueueRequest { queue: queue.clone(), settings: Some(settings), clear, expected_version };
    let mut client = connect(&server).await?;
    let stored = client.update_queue(request).await.map_err(status)?.into_inner().settings.unwrap_or_default();
    println!(
        "queue {queue}: settings stored (version {}); every node applies them within a second or so",
        stored.version
    );
    print_settings(&stored);
    Ok(())
}

/// The settings stored with a queue, one line each; nothing when none is.
pub(super) fn print_settings(settings: &pb::QueueSettings) {
    let span = |d: &Option<prost_types::Duration>| {
        d.as_ref().map(|d| super::times::span(d.seconds * 1000 + i64::from(d.nanos / 1_000_000)))
    };
    let set: Vec<(&str, Option<String>)> = vec![
        ("lease_timeout", span(&settings.lease_timeout)),
        ("max_attempts", settings.max_attempts.map(|v| v.to_string())),
        ("backoff_initial", span(&settings.backoff_initial)),
        ("backoff_max", span(&settings.backoff_max)),
        ("key_concurrency", settings.key_concurrency.map(|v| v.to_string())),
        ("key_rate_per_second", settings.key_rate_per_second.map(|v| v.to_string())),
        ("key_burst", settings.key_burst.map(|v| v.to_string())),
        ("cost_curve", settings.cost_curve.clone()),
        ("cost_reference_size", settings.cost_reference_size.map(|v| v.to_string())),
        ("group_lead", settings.group_lead.map(|v| v.to_string())),
    ];
    for (name, value) in set.into_iter().filter_map(|(name, value)| Some((name, value?))) {
        println!("  {name} = {value} (stored; over the config file's)");
    }
    let mut weights: Vec<_> = settings.weights.iter().collect();
    weights.sort_by(|a, b| a.0.cmp(b.0));
    for (key, weight) in weights {
        println!("  weight of {key:?} = {weight} (stored)");
    }
    print_pauses(settings);
}

fn print_pauses(settings: &pb::QueueSettings) {
    if settings.paused {
        println!("  PAUSED: nothing is handed out (`fairway queue resume --queue ...`)");
    }
    if !settings.paused_keys.is_empty() {
        let keys: Vec<String> = settings.paused_keys.iter().map(|k| format!("{k:?}")).collect();
        println!("  paused keys ({}): {}", keys.len(), keys.join(", "));
    }
}
