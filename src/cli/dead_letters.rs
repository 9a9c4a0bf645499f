//! `fairway queue dead-letters`: list the tasks that failed their last
//! attempt, or put them back in the queue, all of them or those of one key,
//! with a message, or failed within a span of time.

use std::time::Duration;

use clap::Args;
use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;

use super::client::{ServerArg, connect, status};
use super::times;

/// Which queue's dead letters, which of them, and what to do with them.
#[derive(Args, Debug)]
pub(super) struct DeadLettersArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// How many to list (at most 1000), or to re-drive per partition (at most 10000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Put the letters chosen back in the queue, as first attempts.
    #[arg(long)]
    redrive: bool,
    #[command(flatten)]
    filter: FilterArgs,
    /// Print the answer as JSON (proto3's mapping of the response).
    #[arg(long)]
    json: bool,
}

/// Which letters: each option given narrows the choice.
#[derive(Args, Debug)]
struct FilterArgs {
    /// Only letters of this fairness key (`--key ''` for the empty key).
    #[arg(long)]
    key: Option<String>,
    /// Only letters whose failure message contains this text (case matters).
    #[arg(long)]
    message_contains: Option<String>,
    /// Only letters that failed at least this long ago ("30m", "2h").
    #[arg(long, value_parser = duration_serde::parse)]
    older_than: Option<Duration>,
    /// Only letters that failed at most this long ago ("1h").
    #[arg(long, value_parser = duration_serde::parse)]
    newer_than: Option<Duration>,
}

impl FilterArgs {
    /// The filter to send: unset when no option is given.
    fn to_proto(&self, now_ms: i64) -> Option<pb::DeadLetterFilter> {
        let ago =
            |span: Duration| timestamp(now_ms.saturating_sub(i64::try_from(span.as_millis()).unwrap_or(i64::MAX)));
        let filter = pb::DeadLetterFilter {
            fairness_key: self.key.clone(),
            message_contains: self.message_contains.clone().unwrap_or_default(),
            failed_from: self.newer_than.map(ago),
            failed_before: self.older_than.map(ago),
        };
        (filter != pb::DeadLetterFilter::default()).then_some(filter)
    }

    /// " (those of key \"k\", whose message contains \"x\")": what the filter chose, for a summary.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(key) = &self.key {
            parts.push(format!("of key {key:?}"));
        }
        if let Some(text) = &self.message_contains {
            parts.push(format!("whose message contains {text:?}"));
        }
        if let Some(span) = self.newer_than {
            parts.push(format!("failed in the last {}", times::span(span.as_millis() as i64)));
        }
        if let Some(span) = self.older_than {
            parts.push(format!("failed over {} ago", times::span(span.as_millis() as i64)));
        }
        if parts.is_empty() { String::new() } else { format!(" (those {})", parts.join(", ")) }
    }
}

fn timestamp(unix_ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: unix_ms.div_euclid(1000), nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32 }
}

pub(super) async fn run(args: DeadLettersArgs) -> anyhow::Result<()> {
    let DeadLettersArgs { server, queue, limit, redrive, filter: chosen, json } = args;
    let mut client = connect(&server).await?;
    let now = times::now_ms();
    let filter = chosen.to_proto(now);
    let which = chosen.describe();
    if redrive {
        let request = pb::RedriveDeadLettersRequest { queue: queue.clone(), limit, filter };
        let response = client.redrive_dead_letters(request).await.map_err(status)?.into_inner();
        if json {
            return super::json::print(&response, "fairway.v1.RedriveDeadLettersResponse");
        }
        println!("queue {queue}: {} dead letter(s) put back{which}", response.redriven);
        if response.duplicates > 0 {
            println!(
                "queue {queue}: {} dead letter(s) removed: a task with the same dedup id is pending or running",
                response.duplicates
            );
        }
        if response.passed_over > 0 {
            println!("queue {queue}: {} other dead letter(s) read and left in place", response.passed_over);
        }
        if response.more {
            println!(
                "queue {queue}: stopped at --limit {limit} per partition or at the letters one call reads; run it \
                 again for more"
            );
        }
        return Ok(());
    }
    let request = pb::ListDeadLettersRequest { queue: queue.clone(), limit, filter };
    let response = client.list_dead_letters(request).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&response, "fairway.v1.ListDeadLettersResponse");
    }
    let dead = response.dead_letters;
    println!("queue {queue}: {} dead letter(s){which}", dead.len());
    for d in dead {
        println!(
            "  task {} (partition {}, key {:?}, {} attempt(s), {} byte payload, failed {}): {}",
            d.task_id,
            d.partition,
            d.fairness_key,
            d.attempts,
            d.payload_bytes,
            times::when(d.failed_at.as_ref(), now),
            d.message
        );
    }
    if response.more {
        println!(
            "queue {queue}: there may be more (stopped at --limit, the response's size, or the letters one call              reads of each partition); narrow the choice or re-drive some first"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_option_sends_no_filter_and_ages_become_times_before_now() {
        let none = FilterArgs { key: None, message_contains: None, older_than: None, newer_than: None };
        assert_eq!(none.to_proto(1_000_000), None);
        assert_eq!(none.describe(), "");
        let aged = FilterArgs {
            key: Some(String::new()),
            message_contains: None,
            older_than: Some(Duration::from_secs(60)),
            newer_than: Some(Duration::from_secs(3600)),
        };
        let filter = aged.to_proto(10_000_000).expect("a filter");
        assert_eq!(filter.fairness_key.as_deref(), Some(""), "the empty key is a key");
        assert_eq!(filter.failed_before, Some(timestamp(10_000_000 - 60_000)));
        assert_eq!(filter.failed_from, Some(timestamp(10_000_000 - 3_600_000)));
        assert_eq!(aged.describe(), " (those of key \"\", failed in the last 1 h 0 min, failed over 1 min 0 s ago)");
    }
}
