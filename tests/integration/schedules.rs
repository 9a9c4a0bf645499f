//! Recurring schedules end to end on one server: a schedule created over
//! gRPC fires runs into its queue, a worker's completion or failure of a
//! run reaches the schedule's statistics and health, cooldown, backoff,
//! trigger and pause decide when the next run comes, and bad requests are
//! refused naming the field. Time is a manual clock, moved by the test;
//! the firing loop looks every 50 ms of real time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fairway::clock::{Clock, ManualClock, SystemClock};
use fairway::config::Config;
use fairway::core::engine::{DispatchOrder, TaskPolicy};
use fairway::proto::v1 as pb;
use fairway::proto::v1::schedules_client::SchedulesClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::support::{Backend, Client, TestServer, add, fairway_command, poll, spec};

const QUEUE: &str = "runs";
const MINUTE: Duration = Duration::from_secs(60);

fn duration(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds: d.as_secs() as i64, nanos: 0 })
}

fn periodic(period: Duration, cooldown: Duration) -> pb::ScheduleSpec {
    pb::ScheduleSpec {
        cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
            scheduling_period: duration(period),
            cooldown: duration(cooldown),
        })),
        ..Default::default()
    }
}

fn template(payload: &str) -> pb::RunTemplate {
    pb::RunTemplate { queue: QUEUE.into(), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

async fn create(client: &mut SchedulesClient<Channel>, id: &str, spec: pb::ScheduleSpec) -> pb::ScheduleInfo {
    let request = pb::CreateScheduleRequest {
        id: id.into(),
        spec: Some(spec),
        template: Some(template(id)),
        paused_note: String::new(),
    };
    client.create_schedule(request).await.expect("create").into_inner().schedule.expect("a schedule")
}

async fn describe(client: &mut SchedulesClient<Channel>, id: &str) -> pb::ScheduleInfo {
    let request = pb::DescribeScheduleRequest { id: id.into() };
    client.describe_schedule(request).await.expect("describe").into_inner().schedule.expect("a schedule")
}

/// Describes `id` until `done` holds, for at most 10 s of real time.
async fn described_until(
    client: &mut SchedulesClient<Channel>,
    id: &str,
    what: &str,
    done: impl Fn(&pb::ScheduleInfo) -> bool,
) -> pb::ScheduleInfo {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = describe(client, id).await;
        if done(&info) {
            return info;
        }
        assert!(Instant::now() < deadline, "waited 10 s for {what}; the schedule is {info:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next run of the queue: a poll that waits up to 10 s.
async fn next_run(matching: &mut Client) -> pb::Task {
    poll(matching, QUEUE, Duration::from_secs(10)).await.expect("a run within 10 s")
}

/// Nothing comes within a few of the firing loop's looks.
async fn no_run(matching: &mut Client) {
    if let Some(task) = poll(matching, QUEUE, Duration::from_millis(400)).await {
        panic!("no run was due, yet {task:?} came");
    }
}

fn health(info: &pb::ScheduleInfo) -> pb::Health {
    pb::Health::try_from(info.health).expect("a known health")
}

async fn start(clock: Arc<ManualClock>) -> TestServer {
    let mut config = Config::default();
    config.schedules.scan_interval = Duration::from_millis(50);
    let deadline = TaskPolicy { ordering: DispatchOrder::Deadline, ..TaskPolicy::default() };
    config.queues.insert(QUEUE.into(), deadline);
    TestServer::start_timed(Backend::Embedded, config, clock).await
}

#[tokio::test]
async fn a_periodic_schedule_fires_runs_and_learns_from_their_ends() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let server = start(clock.clone()).await;
    let mut schedules = SchedulesClient::new(server.channel());
    let mut matching = server.client.clone();

    let created = create(&mut schedules, "nightly", periodic(60 * MINUTE, 10 * MINUTE)).await;
    assert_eq!(health(&created), pb::Health::Ok, "{created:#?}");

    // A new schedule runs at once: it has never succeeded.
    let run = next_run(&mut matching).await;
    assert_eq!(run.payload, b"nightly");
    assert_eq!(run.fairness_key, "nightly", "the key defaults to the schedule id");
    let info = described_until(&mut schedules, "nightly", "the run's start", |i| {
        i.runs.len() == 1 && i.runs[0].started_at.is_some()
    })
    .await;
    assert_eq!(info.runs[0].task_id, run.task_id);

    // It ends well after 2 minutes: the statistics follow.
    clock.advance(2 * MINUTE);
    matching
        .complete_task(pb::CompleteTaskRequest { lease_token: run.lease_token, result: vec![] })
        .await
        .expect("complete");
    let info = describe(&mut schedules, "nightly").await;
    assert!(info.runs.is_empty(), "the completion is recorded before it returns: {info:#?}");
    assert_eq!(info.counts.as_ref().map(|c| (c.fired, c.succeeded)), Some((1, 1)));
    assert_eq!(info.average_good_duration.as_ref().map(|d| d.seconds), Some(120));
    assert_eq!(health(&info), pb::Health::Ok);

    // The cooldown holds the next run back 10 minutes after the good end.
    no_run(&mut matching).await;
    clock.advance(11 * MINUTE);
    let run = next_run(&mut matching).await;

    // A failure is a WARNING, and backs the next run off by 5 minutes.
    matching
        .fail_task(pb::FailTaskRequest {
            lease_token: run.lease_token,
            message: "forge down".into(),
            retryable: false,
            retry_after: None,
        })
        .await
        .expect("fail");
    let info = described_until(&mut schedules, "nightly", "the failure", |i| i.consecutive_failures == 1).await;
    assert_eq!(health(&info), pb::Health::Warning, "{info:#?}");
    assert!(info.health_reason.contains("fail"), "{}", info.health_reason);
    no_run(&mut matching).await;

    // A trigger does not wait for the backoff.
    schedules.trigger_schedule(pb::TriggerScheduleRequest { id: "nightly".into() }).await.expect("trigger");
    let run = next_run(&mut matching).await;
    matching
        .complete_task(pb::CompleteTaskRequest { lease_token: run.lease_token, result: vec![] })
        .await
        .expect("complete");
    let info = describe(&mut schedules, "nightly").await;
    assert_eq!((info.consecutive_failures, health(&info)), (0, pb::Health::Ok));

    // Paused, it fires nothing however late it gets; resumed, it runs.
    let request = pb::PauseScheduleRequest { id: "nightly".into(), paused: true, note: "forge maintenance".into() };
    let paused = schedules.pause_schedule(request).await.expect("pause").into_inner().schedule.unwrap();
    assert_eq!((paused.paused, paused.paused_note.as_str()), (true, "forge maintenance"));
    clock.advance(3 * 60 * MINUTE);
    no_run(&mut matching).await;
    let info = describe(&mut schedules, "nightly").await;
    assert_eq!(health(&info), pb::Health::Error, "3 h without a run breaks a 1 h period: {info:#?}");
    let request = pb::PauseScheduleRequest { id: "nightly".into(), paused: false, note: String::new() };
    schedules.pause_schedule(request).await.expect("resume");
    next_run(&mut matching).await;
    server.stop().await;
}

#[tokio::test]
async fn a_run_that_outlives_max_allowed_duration_is_failed_at_its_next_heartbeat() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let server = start(clock.clone()).await;
    let mut schedules = SchedulesClient::new(server.channel());
    let mut matching = server.client.clone();
    let spec = pb::ScheduleSpec { max_allowed_duration: duration(10 * MINUTE), ..periodic(60 * MINUTE, MINUTE) };
    create(&mut schedules, "bounded", spec).await;
    let run = next_run(&mut matching).await;
    described_until(&mut schedules, "bounded", "the run's start", |i| i.runs.iter().any(|r| r.started_at.is_some()))
        .await;
    let heartbeat = || pb::HeartbeatTaskRequest { lease_token: run.lease_token.clone() };
    matching.heartbeat_task(heartbeat()).await.expect("within its allowance, the lease is extended");

    clock.advance(11 * MINUTE);
    let refused = matching.heartbeat_task(heartbeat()).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("max_allowed_duration"), "{}", refused.message());
    let info = described_until(&mut schedules, "bounded", "the failure", |i| i.consecutive_failures == 1).await;
    assert!(info.runs.is_empty(), "{info:#?}");
    // Failed for good: a dead letter, never delivered again.
    let dead = matching
        .list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None })
        .await
        .expect("dead letters")
        .into_inner();
    assert_eq!(dead.dead_letters.len(), 1, "{dead:?}");
    assert!(dead.dead_letters[0].message.contains("max_allowed_duration"), "{dead:?}");
    server.stop().await;
}

#[tokio::test]
async fn bad_schedule_requests_are_refused_naming_the_field() {
    let server = TestServer::start().await;
    let mut schedules = SchedulesClient::new(server.channel());
    let mut matching = server.client.clone();

    let refused =
        |result: Result<tonic::Response<pb::CreateScheduleResponse>, tonic::Status>| result.expect_err("refused");
    let request = |id: &str, spec: Option<pb::ScheduleSpec>, template: Option<pb::RunTemplate>| {
        pb::CreateScheduleRequest { id: id.into(), spec, template, paused_note: String::new() }
    };
    let good = || Some(periodic(60 * MINUTE, MINUTE));
    let cron = |expression: &str| {
        Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Cron(pb::CronCadence {
                expression: expression.into(),
                max_schedule_duration: duration(10 * MINUTE),
            })),
            time_zone: "Europe/Paris".into(),
            ..Default::default()
        })
    };
    for (req, field) in [
        (request("", good(), Some(template("x"))), "id"),
        (request("has space", good(), Some(template("x"))), "id"),
        (request("s", None, Some(template("x"))), "spec"),
        (request("s", good(), None), "template"),
        (request("s", cron("every tuesday"), Some(template("x"))), "spec.cron.expression"),
        (
            request(
                "s",
                Some(pb::ScheduleSpec { time_zone: "Europe/Pariss".into(), ..periodic(60 * MINUTE, MINUTE) }),
                Some(template("x")),
            ),
            "spec.time_zone",
        ),
        (
            request("s", good(), Some(pb::RunTemplate { queue: "no spaces please".into(), ..template("x") })),
            "template.queue",
        ),
        (request("s", good(), Some(pb::RunTemplate { priority: 9, ..template("x") })), "template.priority"),
        (
            request("s", good(), Some(pb::RunTemplate { payload: vec![0; 64 * 1024 + 1], ..template("x") })),
            "template.payload",
        ),
    ] {
        let status = refused(schedules.create_schedule(req.clone()).await);
        assert_eq!(status.code(), Code::InvalidArgument, "{req:?}: {status:?}");
        assert!(status.message().starts_with(field), "{req:?}: {}", status.message());
    }
    let described = schedules.describe_schedule(pb::DescribeScheduleRequest { id: "s".into() }).await;
    assert_eq!(described.unwrap_err().code(), Code::NotFound, "nothing was written by a refused request");

    schedules.create_schedule(request("s", cron("0 3 * * *"), Some(template("x")))).await.expect("create");
    let again = refused(schedules.create_schedule(request("s", good(), Some(template("x")))).await);
    assert_eq!(again.code(), Code::AlreadyExists, "{again:?}");
    let missing = schedules.trigger_schedule(pb::TriggerScheduleRequest { id: "nope".into() }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    let page =
        schedules.list_schedules(pb::ListSchedulesRequest { page_size: 5000, ..Default::default() }).await.unwrap_err();
    assert!(page.message().starts_with("page_size"), "{page:?}");
    let token = schedules
        .list_schedules(pb::ListSchedulesRequest { page_token: "forged".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert!(token.message().starts_with("page_token"), "{token:?}");

    // A client cannot pass a task off as a schedule's run.
    let mut forged = spec("k", 0.0, 0, b"x");
    forged.dedup_id = "schedule:s@1764000000000".into();
    let status = add(&mut matching, QUEUE, forged).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("task.dedup_id"), "{}", status.message());
    server.stop().await;
}

#[tokio::test]
async fn list_pages_through_every_schedule_and_filters_by_health() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let mut config = Config::default();
    config.schedules.firing = false;
    let server = TestServer::start_timed(Backend::Embedded, config, clock.clone()).await;
    let mut schedules = SchedulesClient::new(server.channel());
    for i in 0..25 {
        create(&mut schedules, &format!("s{i:02}"), periodic(60 * MINUTE, MINUTE)).await;
    }
    // A day later, nothing has run (firing is off): every one never
    // succeeded 24 h after its creation.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let request = pb::ListSchedulesRequest { page_size: 7, page_token: token.clone(), ..Default::default() };
        let page = schedules.list_schedules(request).await.expect("list").into_inner();
        assert!(page.schedules.len() <= 7);
        seen.extend(page.schedules.into_iter().map(|s| s.id));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    seen.sort();
    let all: Vec<String> = (0..25).map(|i| format!("s{i:02}")).collect();
    assert_eq!(seen, all, "each schedule exactly once");
    clock.advance(25 * 60 * MINUTE);
    let request = pb::ListSchedulesRequest { health: pb::Health::Error as i32, page_size: 1000, ..Default::default() };
    let mut errors = 0;
    let mut page = schedules.list_schedules(request.clone()).await.expect("list").into_inner();
    loop {
        errors += page.schedules.len();
        if page.next_page_token.is_empty() {
            break;
        }
        let next = pb::ListSchedulesRequest { page_token: page.next_page_token.clone(), ..request.clone() };
        page = schedules.list_schedules(next).await.expect("list").into_inner();
    }
    assert_eq!(errors, 25);
    server.stop().await;
}

/// `fairway origin schedule-lister` puts a lister on a schedule, and again
/// with another period updates it.
#[tokio::test]
async fn a_lister_is_put_on_a_schedule_from_the_command_line() {
    let server = TestServer::start().await;
    let mut schedules = SchedulesClient::new(server.channel());
    let address = format!("http://{}", server.addr);
    let run = |period: &'static str| {
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            fairway_command()
                .args(["origin", "schedule-lister", "gitlab/framagit", "--period", period, "--server", &address])
                .output()
                .expect("run fairway origin schedule-lister")
        })
    };
    let output = run("24h").await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout} {}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("schedule listers/gitlab/framagit created") && stdout.contains("every 1d"), "{stdout}");
    let info = describe(&mut schedules, "listers/gitlab/framagit").await;
    let template = info.template.expect("a template");
    assert_eq!((template.queue.as_str(), template.fairness_key.as_str()), ("listers", "gitlab/framagit"));
    let payload: serde_json::Value = serde_json::from_slice(&template.payload).expect("a JSON payload");
    assert_eq!(payload, serde_json::json!({"lister": "gitlab/framagit", "visit_type": "git"}));

    let output = run("12h").await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("updated") && stdout.contains("every 12h"), "{stdout}");
    let info = describe(&mut schedules, "listers/gitlab/framagit").await;
    let Some(pb::schedule_spec::Cadence::Periodic(periodic)) = info.spec.and_then(|s| s.cadence) else {
        panic!("a periodic cadence")
    };
    assert_eq!(periodic.scheduling_period.map(|d| d.seconds), Some(12 * 3600));
    assert_eq!(periodic.cooldown.map(|d| d.seconds), Some(3 * 3600), "a quarter of the period by default");
    server.stop().await;
}
