//! `fairway origin …`: the origin-visit scheduler from the command line,
//! for operators and for listers written as shell scripts.

use std::io::BufRead;

use anyhow::{Context, bail};
use clap::Subcommand;

use fairway::proto::v1 as pb;
use fairway::proto::v1::scheduler_client::SchedulerClient;
use fairway::proto::v1::schedules_client::SchedulesClient;

use super::client::ServerArg;
use super::times;

/// Origins sent per RecordOrigins call (the server's default batch limit).
const BATCH: usize = 1000;

#[derive(Subcommand, Debug)]
pub(super) enum OriginCommand {
    /// Record origins for a lister: URLs as arguments, or one per line on
    /// stdin (`-`), each optionally followed by its last update in Unix
    /// seconds: `https://forge.example/a 1764000000`.
    Record {
        #[command(flatten)]
        server: ServerArg,
        /// The lister's name and instance, e.g. `gitlab/framagit`.
        #[arg(long)]
        lister: String,
        #[arg(long, default_value = "git")]
        visit_type: String,
        /// Then mark the listing finished.
        #[arg(long)]
        finished: bool,
        #[arg(required = true)]
        urls: Vec<String>,
    },
    /// What the scheduler knows of an origin.
    Stats {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, default_value = "git")]
        visit_type: String,
        url: String,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// "Save code now": queue one visit at the top priority.
    Visit {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, default_value = "git")]
        visit_type: String,
        url: String,
    },
    /// A lister's counts per visit type.
    Metrics {
        #[command(flatten)]
        server: ServerArg,
        lister: String,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// Run a lister on a schedule: its listings become runs of the schedule
    /// `listers/<LISTER>` on queue `--queue` (give that queue `ordering =
    /// "deadline"` in the server's config for the most urgent listing to go
    /// first), with a health that says when the forge's listing is late. A worker
    /// runs them: `fairway worker --queue listers -- ./list-forge.sh` (the
    /// payload, on stdin, is `{"lister": NAME, "visit_type": TYPE}`).
    /// Creates the schedule, or updates it if it exists.
    ScheduleLister {
        #[command(flatten)]
        server: ServerArg,
        /// The lister's name and instance, e.g. `gitlab/framagit`.
        lister: String,
        #[arg(long, default_value = "git")]
        visit_type: String,
        /// The forge may be listed at most this long ago (e.g. `24h`).
        #[arg(long, value_parser = super::schedule::parse_duration)]
        period: std::time::Duration,
        /// The wait after a good listing before the next may start (default:
        /// a quarter of the period).
        #[arg(long, value_parser = super::schedule::parse_duration)]
        cooldown: Option<std::time::Duration>,
        /// The queue the listings go to.
        #[arg(long, default_value = "listers")]
        queue: String,
    },
    /// Run one scheduling round of a visit type now.
    Round {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long, default_value = "git")]
        visit_type: String,
    },
}

/// The schedule a lister runs on (`fairway origin schedule-lister`).
fn lister_schedule_id(lister: &str) -> String {
    format!("listers/{lister}")
}

fn status(error: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", error.code(), error.message())
}

async fn connect(server: &ServerArg) -> anyhow::Result<SchedulerClient<fairway::security::AuthChannel>> {
    Ok(SchedulerClient::new(server.channel().await?))
}

/// `URL [UNIX_SECONDS]`.
fn listed(line: &str, visit_type: &str) -> anyhow::Result<pb::ListedOrigin> {
    let mut words = line.split_whitespace();
    let url = words.next().context("an empty line")?;
    let last_update = match words.next() {
        Some(seconds) => Some(prost_types::Timestamp {
            seconds: seconds.parse().with_context(|| format!("{seconds:?} is not Unix seconds"))?,
            nanos: 0,
        }),
        None => None,
    };
    if words.next().is_some() {
        bail!("expected `URL [UNIX_SECONDS]`");
    }
    Ok(pb::ListedOrigin {
        url: url.to_owned(),
        visit_type: visit_type.to_owned(),
        last_update,
        ..pb::ListedOrigin::default()
    })
}

fn time(t: Option<prost_types::Timestamp>) -> String {
    times::when(t.as_ref(), times::now_ms())
}

/// A lag as people read it: "45 min", "3.2 h", "3.2 d"; "-" without one.
fn lag(seconds: i64) -> String {
    match seconds {
        s if s <= 0 => "-".into(),
        s if s < 3_600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{:.1} h", s as f64 / 3_600.0),
        s => format!("{:.1} d", s as f64 / 86_400.0),
    }
}

/// A change rate as people read it: "0.12/day"; "-" without one.
fn rate(per_day: f64, rated: i64) -> String {
    if rated <= 0 {
        return "-".into();
    }
    match per_day {
        r if r >= 10.0 => format!("{r:.0}/day"),
        r if r >= 0.01 => format!("{r:.2}/day"),
        r => format!("{:.2}/month", r * 30.0),
    }
}

/// A lister's counts per visit type, and the coverage they say.
fn metrics_table(metrics: &[pb::ListerMetrics]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_header([
        "VISIT TYPE",
        "KNOWN",
        "ENABLED",
        "NEVER VISITED",
        "PENDING CHANGES",
        "VISIT LAG",
        "EST. UPDATES PENDING",
        "MEAN CHANGE RATE",
        "RATED",
    ]);
    for m in metrics {
        table.add_row([
            m.visit_type.clone(),
            m.known.to_string(),
            m.enabled.to_string(),
            m.never_visited.to_string(),
            m.pending_changes.to_string(),
            lag(m.pending_lag_seconds),
            format!("{:.1}", m.estimated_pending_updates),
            rate(m.mean_change_rate_per_day, m.rated_origins),
            m.rated_origins.to_string(),
        ]);
    }
    table
}

pub(super) async fn run(command: OriginCommand) -> anyhow::Result<()> {
    match command {
        OriginCommand::Record { server, lister, visit_type, finished, urls } => {
            let lines: Vec<String> = if urls == ["-"] {
                std::io::stdin().lock().lines().collect::<Result<_, _>>().context("reading stdin")?
            } else {
                urls
            };
            let mut origins = Vec::with_capacity(lines.len());
            for (i, line) in lines.iter().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                origins.push(listed(line, &visit_type).with_context(|| format!("line {}", i + 1))?);
            }
            let mut client = connect(&server).await?;
            let (mut new, total) = (0, origins.len());
            for batch in origins.chunks(BATCH) {
                let request = pb::RecordOriginsRequest { lister: lister.clone(), origins: batch.to_vec() };
                new += client.record_origins(request).await.map_err(status)?.into_inner().new_origins;
            }
            if finished {
                client.finish_listing(pb::FinishListingRequest { lister: lister.clone() }).await.map_err(status)?;
            }
            println!(
                "lister {lister}: {total} origin(s) recorded, {new} new{}",
                if finished { "; listing finished" } else { "" }
            );
        }
        OriginCommand::Stats { server, visit_type, url, json } => {
            let mut client = connect(&server).await?;
            let request = pb::GetVisitStatsRequest { url: url.clone(), visit_type: visit_type.clone() };
            let response = client.get_visit_stats(request).await.map_err(status)?.into_inner();
            if json {
                return super::json::print(&response, "fairway.v1.GetVisitStatsResponse");
            }
            let Some(s) = response.stats else {
                bail!("{url} ({visit_type}) was never recorded");
            };
            println!("{url} ({visit_type}), lister {}{}", s.lister, if s.enabled { "" } else { ", DISABLED" });
            println!(
                "  first seen {}, last seen {}, last update {}",
                time(s.first_seen),
                time(s.last_seen),
                time(s.last_update)
            );
            let status = if s.last_visit_status.is_empty() { "never visited" } else { s.last_visit_status.as_str() };
            println!(
                "  last visit {} ({status}, {} in a row), last successful {}",
                time(s.last_visit),
                s.successive_visits,
                time(s.last_successful)
            );
            let snapshot: String = s.last_snapshot.iter().map(|b| format!("{b:02x}")).collect();
            println!("  last snapshot {}", if snapshot.is_empty() { "-" } else { &snapshot });
            println!("  last scheduled {}, interval index {}", time(s.last_scheduled), s.next_position_offset);
            // The queue position is a time: the reference scheduler's, in Unix ms.
            let position = times::when_ms(s.next_visit_queue_position, times::now_ms());
            println!("  next queue position {position}, cooldowns end {}", time(s.eligible_after));
            let estimated = s.change_rate_per_day.map_or("-".into(), |r| rate(r, 1));
            println!("  change rate {estimated} (estimated)");
        }
        OriginCommand::Visit { server, visit_type, url } => {
            let mut client = connect(&server).await?;
            let request = pb::RequestVisitRequest { url: url.clone(), visit_type: visit_type.clone() };
            let response = client.request_visit(request).await.map_err(status)?.into_inner();
            let what = if response.duplicate { "already queued as" } else { "queued as" };
            println!("{url}: {what} task {} on visits.{visit_type}", response.task_id);
        }
        OriginCommand::ScheduleLister { server, lister, visit_type, period, cooldown, queue } => {
            let id = lister_schedule_id(&lister);
            let cooldown = cooldown.unwrap_or(period / 4);
            let seconds = |d: std::time::Duration| prost_types::Duration { seconds: d.as_secs() as i64, nanos: 0 };
            let spec = pb::ScheduleSpec {
                cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                    scheduling_period: Some(seconds(period)),
                    cooldown: Some(seconds(cooldown)),
                })),
                ..Default::default()
            };
            let payload = serde_json::json!({ "lister": lister, "visit_type": visit_type });
            let template = pb::RunTemplate {
                queue,
                payload: payload.to_string().into_bytes(),
                fairness_key: lister.clone(),
                ..Default::default()
            };
            let mut schedules = SchedulesClient::new(server.channel().await?);
            let request = pb::CreateScheduleRequest {
                id: id.clone(),
                spec: Some(spec.clone()),
                template: Some(template.clone()),
                paused_note: String::new(),
            };
            let what = match schedules.create_schedule(request).await {
                Ok(_) => "created",
                Err(e) if e.code() == tonic::Code::AlreadyExists => {
                    let update =
                        pb::UpdateScheduleRequest { id: id.clone(), spec: Some(spec), template: Some(template) };
                    schedules.update_schedule(update).await.map_err(status)?;
                    "updated"
                }
                Err(e) => return Err(status(e)),
            };
            println!(
                "lister {lister}: schedule {id} {what}; listed at most every {} (`fairway schedule describe {id}`)",
                fairway::schedules::described::human(period)
            );
        }
        OriginCommand::Metrics { server, lister, json } => {
            let mut client = connect(&server).await?;
            let request = pb::GetListerMetricsRequest { lister: lister.clone() };
            let response = client.get_lister_metrics(request).await.map_err(status)?.into_inner();
            if json {
                return super::json::print(&response, "fairway.v1.GetListerMetricsResponse");
            }
            println!("lister {lister}: last listing finished {}", time(response.listing_finished));
            let mut schedules = SchedulesClient::new(server.channel().await?);
            let request = pb::DescribeScheduleRequest { id: lister_schedule_id(&lister) };
            if let Ok(described) = schedules.describe_schedule(request).await
                && let Some(s) = described.into_inner().schedule
            {
                let health = pb::Health::try_from(s.health).map_or("?", |h| h.as_str_name());
                println!("  listing schedule {}: {} ({})", s.id, health.trim_start_matches("HEALTH_"), s.health_reason);
            }
            println!("{}", metrics_table(&response.metrics));
        }
        OriginCommand::Round { server, visit_type } => {
            let mut client = connect(&server).await?;
            let request = pb::RunRoundRequest { visit_type: visit_type.clone() };
            let r = client.run_round(request).await.map_err(status)?.into_inner();
            let sent: u64 = r.sent_by_policy.values().sum();
            println!(
                "visits.{visit_type}: {} free slot(s), {sent} visit(s) queued, {} origin(s) woken",
                r.slots, r.woken
            );
            let mut by_policy: Vec<_> = r.sent_by_policy.into_iter().collect();
            by_policy.sort();
            for (policy, n) in by_policy {
                println!("  policy {policy}: {n}");
            }
            let mut by_lister: Vec<_> = r.sent_by_lister.into_iter().collect();
            by_lister.sort();
            for (lister, n) in by_lister {
                println!("  lister {lister}: {n}");
            }
            let mut due: Vec<_> = r.due_chance_by_lister.into_iter().collect();
            due.sort_by(|a, b| a.0.cmp(&b.0));
            for (lister, chance) in due {
                println!("  lister {lister}: due at a {:.0}% chance of a change", 100.0 * chance);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_a_url_and_optional_unix_seconds() {
        let plain = listed("https://a.example/x", "git").unwrap();
        assert_eq!((plain.url.as_str(), plain.last_update), ("https://a.example/x", None));
        let dated = listed("  https://a.example/y 1764000000 ", "hg").unwrap();
        assert_eq!(dated.last_update.unwrap().seconds, 1_764_000_000);
        assert_eq!(dated.visit_type, "hg");
        assert!(listed("https://a.example/z yesterday", "git").unwrap_err().to_string().contains("yesterday"));
        assert!(listed("a 1 2", "git").is_err());
    }

    #[test]
    fn coverage_reads_in_units_people_use() {
        assert_eq!(lag(0), "-");
        assert_eq!(lag(45 * 60), "45 min");
        assert_eq!(lag(3 * 3_600 + 720), "3.2 h");
        assert_eq!(lag(3 * 86_400 + 17_280), "3.2 d");
        assert_eq!(rate(0.12, 4), "0.12/day");
        assert_eq!(rate(0.001, 4), "0.03/month");
        assert_eq!(rate(24.0, 1), "24/day");
        assert_eq!(rate(0.0, 0), "-");
        let m = pb::ListerMetrics {
            visit_type: "git".into(),
            known: 3,
            enabled: 3,
            never_visited: 1,
            pending_changes: 1,
            pending_lag_seconds: 2 * 86_400,
            estimated_pending_updates: 1.25,
            mean_change_rate_per_day: 0.5,
            rated_origins: 2,
        };
        let shown = metrics_table(&[m]).to_string();
        assert!(shown.contains("VISIT LAG") && shown.contains("2.0 d"), "{shown}");
        assert!(shown.contains("1.2") && shown.contains("0.50/day"), "{shown}");
    }
}
