//! The origin-visit scheduler end to end: a lister records origins over
//! gRPC, a round queues their visits, a real `fairway worker` process runs a
//! loader command for each and reports the outcomes, the statistics follow,
//! and the next rounds obey the cooldowns, the policies and the feedback.
//! Time is a manual clock, moved by the test.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{Clock, ManualClock, SystemClock};
use fairway::config::Config;
use fairway::proto::v1 as pb;
use fairway::proto::v1::scheduler_client::SchedulerClient;
use prost::Message;
use tonic::transport::Channel;

use crate::support::{Backend, TestServer, add, fairway_command, poll, spec};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn listed(url: &str, last_update_ms: Option<i64>) -> pb::ListedOrigin {
    pb::ListedOrigin {
        url: url.into(),
        visit_type: "git".into(),
        last_update: last_update_ms.map(fairway_timestamp),
        is_fork: false,
        extra_loader_arguments: r#"{"depth": 1}"#.into(),
    }
}

fn fairway_timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

fn ms(t: Option<prost_types::Timestamp>) -> Option<i64> {
    t.map(|t| t.seconds * 1000 + i64::from(t.nanos / 1_000_000))
}

async fn record(client: &mut SchedulerClient<Channel>, lister: &str, origins: Vec<pb::ListedOrigin>) -> u32 {
    let request = pb::RecordOriginsRequest { lister: lister.into(), origins };
    client.record_origins(request).await.expect("record origins").into_inner().new_origins
}

/// A round; one refused as retryable (a queue partition changing owner on
/// a loaded node: nothing was written) is retried for up to 30 s.
async fn round(client: &mut SchedulerClient<Channel>) -> pb::RunRoundResponse {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match client.run_round(pb::RunRoundRequest { visit_type: "git".into() }).await {
            Ok(response) => return response.into_inner(),
            Err(status) if status.code() == tonic::Code::Unavailable && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("round: {status:?}"),
        }
    }
}

fn sent(response: &pb::RunRoundResponse) -> HashMap<&str, u64> {
    response.sent_by_policy.iter().map(|(policy, n)| (policy.as_str(), *n)).collect()
}

async fn stats(client: &mut SchedulerClient<Channel>, url: &str) -> pb::VisitStats {
    let request = pb::GetVisitStatsRequest { url: url.into(), visit_type: "git".into() };
    client.get_visit_stats(request).await.expect("stats").into_inner().stats.expect("a known origin")
}

/// Runs `fairway worker` for `tasks` visits: the loader reads the payload's
/// URL and answers by the name of the origin.
async fn visit(address: String, tasks: usize) {
    let script = r#"url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p'); case "$url" in
      */fresh) echo '{"status": "eventful", "snapshot": "01"}';;
      */gone) echo '{"status": "not_found"}';;
      */broken) echo '{"status": "failed"}';;
      *) echo '{"status": "eventful", "snapshot": "0b"}';;
    esac"#;
    let output = tokio::task::spawn_blocking(move || {
        fairway_command()
            .args(["worker", "--server", &address, "--queue", "visits.git", "--concurrency", "2"])
            .args(["--max-tasks", &tasks.to_string(), "--", "sh", "-c", script])
            .output()
            .expect("run fairway worker")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "worker: {}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test]
async fn listed_origins_are_visited_and_the_next_rounds_follow_the_outcomes() {
    origins_are_visited_and_rounds_follow_the_outcomes(Backend::Embedded).await;
}

#[tokio::test]
async fn listed_origins_are_visited_and_the_next_rounds_follow_the_outcomes_on_cassandra() {
    origins_are_visited_and_rounds_follow_the_outcomes(Backend::Cassandra).await;
}

async fn origins_are_visited_and_rounds_follow_the_outcomes(backend: Backend) {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let mut config = Config::default();
    config.scheduler.rounds = false;
    // The reference's weighted policies, whose choices this test follows
    // (rounds by expected value: src/visits/tests.rs).
    config.scheduler.mode = fairway::visits::RoundMode::ReferenceWeights;
    // The reference's wait after any failure, one or more in a row.
    config.scheduler.cooldowns.failed_once = config.scheduler.cooldowns.failed;
    let server = TestServer::start_timed(backend, config, clock.clone()).await;
    let address = format!("http://{}", server.addr);
    let mut scheduler = SchedulerClient::new(server.channel());
    let start = clock.now_ms();
    let day = 24 * 3600 * 1000;

    // A forge that gives update dates, and one that does not.
    let forge = vec![
        listed("https://a.example/fresh", Some(start - 3 * day)),
        listed("https://a.example/gone", Some(start - 2 * day)),
        listed("https://a.example/broken", Some(start - day)),
    ];
    assert_eq!(record(&mut scheduler, "gitlab/a", forge).await, 3);
    let blind = vec![listed("https://b.example/one", None), listed("https://b.example/two", None)];
    assert_eq!(record(&mut scheduler, "cgit/b", blind).await, 2);
    scheduler.finish_listing(pb::FinishListingRequest { lister: "gitlab/a".into() }).await.unwrap();

    // First round: every origin is new.
    let first = round(&mut scheduler).await;
    assert_eq!(first.slots, 1000);
    assert_eq!(
        sent(&first),
        HashMap::from([("never_visited_oldest_update_first", 3), ("origins_without_last_update", 2)])
    );
    assert_eq!(first.sent_by_lister, HashMap::from([("gitlab/a".into(), 3), ("cgit/b".into(), 2)]));
    let second = round(&mut scheduler).await;
    assert!(sent(&second).is_empty(), "queued origins are not queued again");
    assert_eq!(second.slots, 995, "the five queued visits are the queue's backlog");

    // The loader visits all five; the outcomes reach the statistics.
    visit(address.clone(), 5).await;
    let fresh = stats(&mut scheduler, "https://a.example/fresh").await;
    assert_eq!((fresh.last_visit_status.as_str(), fresh.last_snapshot.as_slice()), ("successful", &[1u8][..]));
    assert_eq!((fresh.next_position_offset, fresh.successive_visits), (4, 1), "a first visit leaves the index at 4");
    assert_eq!(
        ms(fresh.eligible_after),
        Some(start + 12 * 3600 * 1000),
        "the absolute cooldown: 12 h after scheduling"
    );
    let gone = stats(&mut scheduler, "https://a.example/gone").await;
    assert_eq!(gone.last_visit_status, "not_found");
    assert_eq!(ms(gone.eligible_after), Some(start + 31 * day), "31 days after a not-found visit");
    let broken = stats(&mut scheduler, "https://a.example/broken").await;
    assert_eq!(ms(broken.eligible_after), Some(start + 14 * day), "14 days after a failed visit");
    let one = stats(&mut scheduler, "https://b.example/one").await;
    assert_eq!(one.lister, "cgit/b");
    let next = one.next_visit_queue_position.expect("a blind origin's next position");
    assert!((next - (start + 2 * day)).abs() <= 2 * day / 10, "2 days ahead, ±10%: {}", next - start);

    // 13 hours later the forge says `fresh` changed: the lag policy takes
    // it; the blind origins are not due for about two days; the others wait
    // for their cooldowns.
    clock.advance(13 * HOUR);
    record(
        &mut scheduler,
        "gitlab/a",
        vec![listed("https://a.example/fresh", Some(clock.now_ms() - HOUR.as_millis() as i64))],
    )
    .await;
    let second = round(&mut scheduler).await;
    assert_eq!(sent(&second), HashMap::from([("already_visited_order_by_lag", 1)]));
    visit(address.clone(), 1).await;
    let fresh = stats(&mut scheduler, "https://a.example/fresh").await;
    assert_eq!(fresh.next_position_offset, 5, "the same snapshot again: +1");
    assert_eq!(fresh.successive_visits, 2);

    // Two and a half days on, the blind origins are due; the others still wait.
    clock.advance(2 * DAY + 12 * HOUR);
    let third = round(&mut scheduler).await;
    assert_eq!(sent(&third), HashMap::from([("origins_without_last_update", 2)]));
    assert_eq!(third.sent_by_lister, HashMap::from([("cgit/b".into(), 2)]));

    // The lister's counts.
    let metrics = scheduler
        .get_lister_metrics(pb::GetListerMetricsRequest { lister: "gitlab/a".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metrics.metrics.len(), 1);
    let git = &metrics.metrics[0];
    assert_eq!((git.known, git.enabled, git.never_visited, git.pending_changes), (3, 3, 2, 0));
    assert_eq!(ms(metrics.listing_finished), Some(start));

    // "Save code now" queues a visit whatever the cooldowns, once.
    let saved = pb::RequestVisitRequest { url: "https://a.example/broken".into(), visit_type: "git".into() };
    assert!(!scheduler.request_visit(saved.clone()).await.unwrap().into_inner().duplicate);
    assert!(scheduler.request_visit(saved).await.unwrap().into_inner().duplicate);
    server.stop().await;
}

#[tokio::test]
async fn lister_metrics_say_the_visit_lag_and_the_updates_pending() {
    lister_metrics_say_the_coverage(Backend::Embedded).await;
}

#[tokio::test]
async fn lister_metrics_say_the_visit_lag_and_the_updates_pending_on_cassandra() {
    lister_metrics_say_the_coverage(Backend::Cassandra).await;
}

async fn lister_metrics_say_the_coverage(backend: Backend) {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let mut config = Config::default();
    config.scheduler.rounds = false;
    let server = TestServer::start_timed(backend, config, clock.clone()).await;
    let address = format!("http://{}", server.addr);
    let mut scheduler = SchedulerClient::new(server.channel());
    let start = clock.now_ms();
    let day = 24 * 3600 * 1000;
    let lister = "gitlab/c";

    // A dated forge: both origins are visited once.
    let forge = vec![
        listed("https://c.example/x", Some(start - 3 * day)),
        listed("https://c.example/y", Some(start - 2 * day)),
    ];
    assert_eq!(record(&mut scheduler, lister, forge).await, 2);
    assert_eq!(sent(&round(&mut scheduler).await).values().sum::<u64>(), 2);
    visit(address.clone(), 2).await;

    // A day on, the forge lists a change of x six hours old, and a new origin.
    clock.advance(DAY);
    let changed = clock.now_ms() - 6 * HOUR.as_millis() as i64;
    let listing = vec![listed("https://c.example/x", Some(changed)), listed("https://c.example/z", Some(changed))];
    assert_eq!(record(&mut scheduler, lister, listing).await, 1);

    let request = pb::GetListerMetricsRequest { lister: lister.into() };
    let response = scheduler.get_lister_metrics(request).await.unwrap().into_inner();
    assert_eq!(response.metrics.len(), 1);
    let git = &response.metrics[0];
    assert_eq!((git.known, git.enabled, git.never_visited, git.pending_changes), (3, 3, 1, 1), "{git:?}");
    // Dates are counted in whole seconds: the lag is 6 h, give or take one.
    let six_hours = 6 * 3600;
    assert!((six_hours..=six_hours + 1).contains(&git.pending_lag_seconds), "lag: {git:?}");
    assert!(git.estimated_pending_updates >= 1.0, "x's change at least: {git:?}");
    assert!(git.rated_origins >= 0 && (git.rated_origins > 0) == (git.mean_change_rate_per_day > 0.0), "{git:?}");

    // The CLI shows them in the units people read.
    let output = tokio::task::spawn_blocking(move || {
        fairway_command().args(["origin", "metrics", "--server", &address, lister]).output().expect("run fairway")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "origin metrics: {}", String::from_utf8_lossy(&output.stderr));
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("VISIT LAG") && shown.contains("6.0 h"), "{shown}");
    server.stop().await;
}

#[tokio::test]
async fn bad_scheduler_requests_name_the_field_and_write_nothing() {
    let server = TestServer::start().await;
    let mut scheduler = SchedulerClient::new(server.channel());
    let cases = [
        (
            pb::RecordOriginsRequest { lister: String::new(), origins: vec![listed("https://x.example/a", None)] },
            "lister",
        ),
        (
            pb::RecordOriginsRequest {
                lister: "l".into(),
                origins: vec![
                    listed("https://x.example/a", None),
                    pb::ListedOrigin { visit_type: "no space".into(), ..listed("https://x.example/u", None) },
                ],
            },
            "origins[1].visit_type",
        ),
        (
            pb::RecordOriginsRequest {
                lister: "l".into(),
                origins: vec![pb::ListedOrigin {
                    extra_loader_arguments: "[1]".into(),
                    ..listed("https://x.example/u", None)
                }],
            },
            "origins[0].extra_loader_arguments",
        ),
        (
            pb::RecordOriginsRequest { lister: "l".into(), origins: vec![listed(&"u".repeat(2049), None)] },
            "origins[0].url",
        ),
        (
            pb::RecordOriginsRequest { lister: "l".into(), origins: vec![listed("file:///etc/passwd", None)] },
            "origins[0].url",
        ),
    ];
    for (request, field) in cases {
        let status = scheduler.record_origins(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().starts_with(field), "{field}: {}", status.message());
    }
    let nothing = pb::GetVisitStatsRequest { url: "https://x.example/a".into(), visit_type: "git".into() };
    assert!(
        scheduler.get_visit_stats(nothing).await.unwrap().into_inner().stats.is_none(),
        "the valid first origin was not written"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_visit_completion_must_carry_its_outcome_and_other_queues_take_any_result() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let wait = Duration::from_secs(5);
    let complete =
        |lease_token: &str, result: Vec<u8>| pb::CompleteTaskRequest { lease_token: lease_token.into(), result };
    let url = "https://x.example/a";
    let payload = format!(r#"{{"url":"{url}"}}"#);
    add(&mut client, "visits.git", spec("lister", 0.0, 0, payload.as_bytes())).await.expect("add a visit");
    let visit = poll(&mut client, "visits.git", wait).await.expect("the visit");

    let cases = [(b"\xff garbage".to_vec(), "result"), (Vec::new(), "result.origin_url")];
    for (result, field) in cases {
        let refused = client.complete_task(complete(&visit.lease_token, result)).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().starts_with(field), "{field}: {}", refused.message());
    }
    let no_status = pb::VisitOutcome { origin_url: url.into(), ..Default::default() }.encode_to_vec();
    let refused = client.complete_task(complete(&visit.lease_token, no_status)).await.unwrap_err();
    assert!(refused.message().starts_with("result.status"), "{}", refused.message());
    // Refused completions completed nothing: the lease still holds.
    let heartbeat = pb::HeartbeatTaskRequest { lease_token: visit.lease_token.clone() };
    client.heartbeat_task(heartbeat).await.expect("the visit is still leased");
    let outcome =
        pb::VisitOutcome { origin_url: url.into(), status: pb::VisitStatus::Eventful.into(), ..Default::default() };
    client.complete_task(complete(&visit.lease_token, outcome.encode_to_vec())).await.expect("a visit outcome");

    add(&mut client, "jobs", spec("k", 0.0, 0, b"job")).await.expect("add a job");
    let job = poll(&mut client, "jobs", wait).await.expect("the job");
    client.complete_task(complete(&job.lease_token, b"\xff any bytes".to_vec())).await.expect("any result");
    server.stop().await;
}

/// A visit outcome comes only from the worker that holds the task's lease,
/// about the task's own origin, dated no later than now: a stale token, or a
/// live one naming another origin, cannot change another origin's record.
#[tokio::test]
async fn only_the_lease_holder_reports_and_only_for_its_own_origin() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let mut scheduler = SchedulerClient::new(server.channel());
    let wait = Duration::from_secs(5);
    let (first, second) = ("https://x.example/first", "https://x.example/second");
    for url in [first, second] {
        let request = pb::RequestVisitRequest { url: url.into(), visit_type: "git".into() };
        scheduler.request_visit(request).await.expect("request a visit");
    }
    let url_of = |task: &pb::Task| -> String {
        let payload: serde_json::Value = serde_json::from_slice(&task.payload).expect("a JSON payload");
        payload["url"].as_str().expect("a url").to_owned()
    };
    let outcome = |url: &str, status: pb::VisitStatus, visit_date_ms: Option<i64>| {
        pb::VisitOutcome {
            origin_url: url.into(),
            status: status.into(),
            visit_date: visit_date_ms.map(fairway_timestamp),
            snapshot: if status == pb::VisitStatus::Eventful { vec![1] } else { Vec::new() },
            newest_change: None,
        }
        .encode_to_vec()
    };
    let complete =
        |lease_token: &str, result: Vec<u8>| pb::CompleteTaskRequest { lease_token: lease_token.into(), result };
    let year_2990_ms = 32_135_184_000_000;

    let done = poll(&mut client, "visits.git", wait).await.expect("a visit");
    let (done_url, victim) = (url_of(&done), if url_of(&done) == first { second } else { first });
    client
        .complete_task(complete(&done.lease_token, outcome(&done_url, pb::VisitStatus::Uneventful, None)))
        .await
        .expect("the honest completion");
    // The token is stale now: its reports about another origin are refused
    // and recorded nowhere, however often they come.
    for _ in 0..3 {
        let stale = complete(&done.lease_token, outcome(victim, pb::VisitStatus::NotFound, Some(year_2990_ms)));
        let refused = client.complete_task(stale).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    }
    let untouched = stats(&mut scheduler, victim).await;
    assert_eq!((untouched.last_visit, untouched.last_visit_status.as_str()), (None, ""), "{untouched:?}");
    assert!(untouched.enabled);

    // The victim's own worker cannot report about another origin either.
    let task = poll(&mut client, "visits.git", wait).await.expect("the other visit");
    assert_eq!(url_of(&task), victim);
    let elsewhere = complete(&task.lease_token, outcome(&done_url, pb::VisitStatus::NotFound, None));
    let refused = client.complete_task(elsewhere).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().starts_with("result.origin_url"), "{}", refused.message());
    // Its own outcome is recorded, dated no later than now.
    let before_ms = fairway::clock::SystemClock.now_ms();
    let own = complete(&task.lease_token, outcome(victim, pb::VisitStatus::Eventful, Some(year_2990_ms)));
    client.complete_task(own).await.expect("the victim's own completion");
    let recorded = stats(&mut scheduler, victim).await;
    assert_eq!(recorded.last_visit_status, "successful");
    let last_visit = ms(recorded.last_visit).expect("a visit date");
    assert!(last_visit >= before_ms && last_visit <= fairway::clock::SystemClock.now_ms(), "{last_visit}");
    server.stop().await;
}
