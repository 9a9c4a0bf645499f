//! `fairway schedule …`: recurring schedules from the command line. Times
//! are shown as local dates with how far they are ("in 3 h", "5 min ago").

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{Table, presets::NOTHING};

use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;
use fairway::proto::v1::schedules_client::SchedulesClient;

use fairway::schedules::described::{cadence, health_name, length};

use super::client::ServerArg;
use super::times::{ms, now_ms, relative, when};

#[derive(Subcommand, Debug)]
pub(super) enum ScheduleCommand {
    /// Create a schedule: its runs are added to `--queue` whenever it may
    /// run, earliest deadline first in a queue whose ordering is `deadline`.
    Create {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        spec: SpecArgs,
        /// Create it paused, with this note.
        #[arg(long)]
        paused: Option<String>,
    },
    /// Replace a schedule's spec and template (its history is kept).
    Update {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Delete a schedule (runs already added stay in their queue).
    Delete {
        #[command(flatten)]
        server: ServerArg,
        id: String,
    },
    /// Pause a schedule: no run is added until it is resumed.
    Pause {
        #[command(flatten)]
        server: ServerArg,
        id: String,
        /// Why, for whoever looks at it next.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Resume a paused schedule.
    Resume {
        #[command(flatten)]
        server: ServerArg,
        id: String,
    },
    /// Ask for a run now.
    Trigger {
        #[command(flatten)]
        server: ServerArg,
        id: String,
    },
    /// List schedules (with their health, when they turn ERROR and when
    /// they can start next).
    List {
        #[command(flatten)]
        server: ServerArg,
        /// Only schedules of this health.
        #[arg(long, value_enum)]
        health: Option<HealthArg>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// One schedule: its spec, health, next times and runs in flight.
    Describe {
        #[command(flatten)]
        server: ServerArg,
        id: String,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum HealthArg {
    Ok,
    Warning,
    Error,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum OverlapArg {
    Skip,
    BufferOne,
    AllowAll,
}

/// A schedule's id, cadence and template.
#[derive(Args, Debug)]
pub(super) struct SpecArgs {
    /// The schedule's id (letters, digits, `. _ : / -`).
    id: String,
    /// The queue its runs go to.
    #[arg(long)]
    queue: String,
    /// Periodic: the data may be at most this stale (e.g. `6h`).
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["cron", "every"])]
    period: Option<Duration>,
    /// Periodic: the wait after a good run before the next may start.
    #[arg(long, value_parser = parse_duration, requires = "period")]
    cooldown: Option<Duration>,
    /// Cron: an expression, five fields (or six with seconds first).
    #[arg(long, conflicts_with = "every")]
    cron: Option<String>,
    /// Interval: a tick every this long (e.g. `15m`).
    #[arg(long, value_parser = parse_duration)]
    every: Option<Duration>,
    /// Interval: the ticks' offset from the epoch.
    #[arg(long, value_parser = parse_duration, requires = "every")]
    phase: Option<Duration>,
    /// Interval: a random delay of each tick, up to this.
    #[arg(long, value_parser = parse_duration, requires = "every")]
    jitter: Option<Duration>,
    /// Cron and interval: how long after its tick a run must have finished.
    #[arg(long, value_parser = parse_duration)]
    max_duration: Option<Duration>,
    /// The IANA time zone of the cron expression and blackouts.
    #[arg(long, default_value = "UTC")]
    time_zone: String,
    /// A daily window with no run, `HH:MM-HH:MM` in the time zone (repeatable).
    #[arg(long)]
    blackout: Vec<String>,
    /// What a tick does while a run is in flight.
    #[arg(long, value_enum, default_value = "skip")]
    overlap: OverlapArg,
    /// Ticks missed by more than this are skipped (default: the server's, 1 day).
    #[arg(long, value_parser = parse_duration)]
    catchup_window: Option<Duration>,
    /// A run longer than this counts a warning.
    #[arg(long, value_parser = parse_duration)]
    max_expected_duration: Option<Duration>,
    /// A run longer than this is failed.
    #[arg(long, value_parser = parse_duration)]
    max_allowed_duration: Option<Duration>,
    /// Stop after this many runs.
    #[arg(long)]
    runs: Option<u64>,
    /// No tick before this time (RFC 3339, e.g. `2026-12-01T08:00:00+01:00`).
    #[arg(long, value_parser = parse_time)]
    start_at: Option<prost_types::Timestamp>,
    /// No tick after this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    end_at: Option<prost_types::Timestamp>,
    /// The runs' payload (text).
    #[arg(long, default_value = "")]
    payload: String,
    /// The runs' fairness key (default: the schedule id).
    #[arg(long, default_value = "")]
    key: String,
    /// The runs' priority, 1 (highest) to 5.
    #[arg(long, default_value_t = 3)]
    priority: u32,
}

/// A duration as the config writes them (`90s`, `15m`, `6h`).
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    duration_serde::parse(text)
}

/// An RFC 3339 date and time, with its offset.
fn parse_time(text: &str) -> Result<prost_types::Timestamp, String> {
    let at = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-12-01T08:00:00+01:00 ({e})"))?;
    Ok(prost_types::Timestamp { seconds: at.timestamp(), nanos: at.timestamp_subsec_nanos() as i32 })
}

fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

impl SpecArgs {
    fn spec(&self) -> anyhow::Result<pb::ScheduleSpec> {
        use pb::schedule_spec::Cadence;
        let max = self.max_duration.map(proto_duration);
        let cadence = match (self.period, &self.cron, self.every) {
            (Some(period), None, None) => Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: Some(proto_duration(period)),
                cooldown: self.cooldown.map(proto_duration),
            }),
            (None, Some(expression), None) => Cadence::Cron(pb::CronCadence {
                expression: expression.clone(),
                max_schedule_duration: Some(
                    max.context("--cron needs --max-duration (how long after a tick a run must have finished)")?,
                ),
            }),
            (None, None, Some(every)) => Cadence::Interval(pb::IntervalCadence {
                every: Some(proto_duration(every)),
                phase: self.phase.map(proto_duration),
                jitter: self.jitter.map(proto_duration),
                max_schedule_duration: max,
            }),
            _ => bail!("give one cadence: --period (periodic), --cron or --every (interval)"),
        };
        let blackouts = self
            .blackout
            .iter()
            .map(|b| {
                let (start, end) =
                    b.split_once('-').with_context(|| format!("--blackout {b:?}: expected HH:MM-HH:MM"))?;
                Ok(pb::Blackout { start: start.trim().to_owned(), end: end.trim().to_owned() })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(pb::ScheduleSpec {
            cadence: Some(cadence),
            time_zone: self.time_zone.clone(),
            blackouts,
            start_at: self.start_at,
            end_at: self.end_at,
            remaining_runs: self.runs.unwrap_or(0),
            catchup_window: self.catchup_window.map(proto_duration),
            overlap: match self.overlap {
                OverlapArg::Skip => pb::Overlap::Skip,
                OverlapArg::BufferOne => pb::Overlap::BufferOne,
                OverlapArg::AllowAll => pb::Overlap::AllowAll,
            } as i32,
            max_expected_duration: self.max_expected_duration.map(proto_duration),
            max_allowed_duration: self.max_allowed_duration.map(proto_duration),
        })
    }

    fn template(&self) -> pb::RunTemplate {
        pb::RunTemplate {
            queue: self.queue.clone(),
            payload: self.payload.clone().into_bytes(),
            fairness_key: self.key.clone(),
            fairness_weight: 0.0,
            priority: self.priority,
        }
    }
}

fn status(error: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", error.code(), error.message())
}

async fn connect(server: &ServerArg) -> anyhow::Result<SchedulesClient<fairway::security::AuthChannel>> {
    Ok(SchedulesClient::new(server.channel().await?))
}

fn summary(s: &pb::ScheduleInfo) -> String {
    let paused = if s.paused { format!(", PAUSED ({})", s.paused_note) } else { String::new() };
    format!("schedule {}: {} ({}){paused}", s.id, health_name(s.health), s.health_reason)
}

fn describe(s: &pb::ScheduleInfo, next_ticks: &[prost_types::Timestamp]) {
    let now = now_ms();
    println!("{}", summary(s));
    println!("  cadence        {}", cadence(s.spec.as_ref()));
    if let Some(t) = &s.template {
        println!("  runs go to     queue {}, key {:?}, priority {}", t.queue, t.fairness_key, t.priority);
    }
    println!("  turns ERROR    {}", when(s.error_at.as_ref(), now));
    println!("  can start      {}", when(s.can_start_by.as_ref(), now));
    println!("  should start   {}", when(s.should_start_by.as_ref(), now));
    println!("  last good run  {} → {}", when(s.last_good_start.as_ref(), now), when(s.last_good_end.as_ref(), now));
    println!("  last run       {} → {}", when(s.last_start.as_ref(), now), when(s.last_end.as_ref(), now));
    println!(
        "  failures       {} in a row; average good run {}",
        s.consecutive_failures,
        length(s.average_good_duration.as_ref())
    );
    if let Some(c) = &s.counts {
        println!(
            "  counts         {} fired, {} succeeded, {} failed, {} started late, {} missed (catch-up window), \
             {} skipped (overlap), {} over expected duration",
            c.fired,
            c.succeeded,
            c.failed,
            c.started_late,
            c.missed_catchup_window,
            c.overlap_skipped,
            c.over_expected_duration
        );
    }
    if s.out_of_runs {
        println!("  runs left      none: it adds no more runs (update it with --runs to give it more)");
    }
    for tick in next_ticks {
        println!("  next tick      {}", when(Some(tick), now));
    }
    for run in &s.runs {
        let state = match &run.started_at {
            Some(started) => format!("running since {} (attempt {})", when(Some(started), now), run.attempt),
            None => format!("waiting since {}", when(run.added_at.as_ref(), now)),
        };
        println!("  run            task {} for tick {}: {state}", run.task_id, when(run.nominal.as_ref(), now));
    }
    println!("  created        {} by {:?}", when(s.created_at.as_ref(), now), s.created_by);
}

pub(super) async fn run(command: ScheduleCommand) -> anyhow::Result<()> {
    match command {
        ScheduleCommand::Create { server, spec, paused } => {
            let request = pb::CreateScheduleRequest {
                id: spec.id.clone(),
                spec: Some(spec.spec()?),
                template: Some(spec.template()),
                paused_note: paused.unwrap_or_default(),
            };
            let response = connect(&server).await?.create_schedule(request).await.map_err(status)?.into_inner();
            let s = response.schedule.context("the server sent no schedule")?;
            println!("created {}", summary(&s));
            println!("  first run can start {}", when(s.can_start_by.as_ref(), now_ms()));
        }
        ScheduleCommand::Update { server, spec } => {
            let request = pb::UpdateScheduleRequest {
                id: spec.id.clone(),
                spec: Some(spec.spec()?),
                template: Some(spec.template()),
            };
            let response = connect(&server).await?.update_schedule(request).await.map_err(status)?.into_inner();
            let s = response.schedule.context("the server sent no schedule")?;
            println!("updated {}", summary(&s));
        }
        ScheduleCommand::Delete { server, id } => {
            connect(&server)
                .await?
                .delete_schedule(pb::DeleteScheduleRequest { id: id.clone() })
                .await
                .map_err(status)?;
            println!("deleted schedule {id}");
        }
        ScheduleCommand::Pause { server, id, note } => {
            let request = pb::PauseScheduleRequest { id, paused: true, note };
            let response = connect(&server).await?.pause_schedule(request).await.map_err(status)?.into_inner();
            println!("{}", summary(&response.schedule.context("the server sent no schedule")?));
        }
        ScheduleCommand::Resume { server, id } => {
            let request = pb::PauseScheduleRequest { id, paused: false, note: String::new() };
            let response = connect(&server).await?.pause_schedule(request).await.map_err(status)?.into_inner();
            println!("resumed {}", summary(&response.schedule.context("the server sent no schedule")?));
        }
        ScheduleCommand::Trigger { server, id } => {
            let response = connect(&server)
                .await?
                .trigger_schedule(pb::TriggerScheduleRequest { id })
                .await
                .map_err(status)?
                .into_inner();
            let s = response.schedule.context("the server sent no schedule")?;
            println!("triggered {}: a run will be added within a few seconds", s.id);
        }
        ScheduleCommand::List { server, health, limit, json } => {
            let health = match health {
                None => pb::Health::Unspecified,
                Some(HealthArg::Ok) => pb::Health::Ok,
                Some(HealthArg::Warning) => pb::Health::Warning,
                Some(HealthArg::Error) => pb::Health::Error,
            };
            let mut client = connect(&server).await?;
            let (mut token, mut shown, now) = (String::new(), 0u32, now_ms());
            let mut listed = Vec::new();
            let mut table = Table::new();
            table.load_style(NOTHING).set_header([
                "SCHEDULE",
                "HEALTH",
                "TURNS ERROR",
                "CAN START",
                "LAST GOOD END",
                "RUNS",
            ]);
            loop {
                let request = pb::ListSchedulesRequest {
                    health: health as i32,
                    page_size: (limit - shown).min(1000),
                    page_token: token.clone(),
                };
                let page = client.list_schedules(request).await.map_err(status)?.into_inner();
                for s in &page.schedules {
                    let name = if s.paused { format!("{} (paused)", s.id) } else { s.id.clone() };
                    table.add_row([
                        name,
                        health_name(s.health).to_owned(),
                        s.error_at.as_ref().map_or("-".into(), |t| relative(ms(t), now)),
                        s.can_start_by.as_ref().map_or("-".into(), |t| relative(ms(t), now)),
                        s.last_good_end.as_ref().map_or("never".into(), |t| relative(ms(t), now)),
                        s.runs.len().to_string(),
                    ]);
                }
                shown += page.schedules.len() as u32;
                listed.extend(page.schedules);
                token = page.next_page_token;
                if token.is_empty() || shown >= limit {
                    break;
                }
            }
            if json {
                let response = pb::ListSchedulesResponse { schedules: listed, next_page_token: token };
                return super::json::print(&response, "fairway.v1.ListSchedulesResponse");
            }
            println!("{table}");
            if !token.is_empty() {
                println!("(more: raise --limit)");
            }
        }
        ScheduleCommand::Describe { server, id, json } => {
            let response = connect(&server)
                .await?
                .describe_schedule(pb::DescribeScheduleRequest { id })
                .await
                .map_err(status)?
                .into_inner();
            if json {
                return super::json::print(&response, "fairway.v1.DescribeScheduleResponse");
            }
            describe(&response.schedule.context("the server sent no schedule")?, &response.next_ticks);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cadence_is_needed_and_cron_needs_its_deadline() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            spec: SpecArgs,
        }
        let parse = |args: &[&str]| Cli::try_parse_from(["t"].iter().chain(args)).map(|c| c.spec);
        let none = parse(&["s", "--queue", "q"]).unwrap();
        assert!(none.spec().unwrap_err().to_string().contains("one cadence"));
        let cron = parse(&["s", "--queue", "q", "--cron", "0 * * * *"]).unwrap();
        assert!(cron.spec().unwrap_err().to_string().contains("--max-duration"));
        let both = parse(&["s", "--queue", "q", "--period", "1h", "--cron", "0 * * * *"]);
        assert!(both.is_err(), "two cadences are refused by the parser");
        let periodic = parse(&["s", "--queue", "q", "--period", "6h", "--blackout", "01:00-02:30"]).unwrap();
        let spec = periodic.spec().unwrap();
        assert_eq!(spec.blackouts[0].end, "02:30");
        assert!(parse(&["s", "--queue", "q", "--period", "soon"]).is_err());
        let bounded =
            parse(&["s", "--queue", "q", "--every", "1h", "--start-at", "2026-12-01T08:00:00+01:00"]).unwrap();
        assert_eq!(bounded.spec().unwrap().start_at.map(|t| t.seconds), Some(1_796_108_400));
        assert!(parse(&["s", "--queue", "q", "--every", "1h", "--end-at", "tomorrow"]).is_err());
    }
}
