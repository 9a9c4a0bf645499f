//! Metrics end to end: a server on the embedded store with its `/metrics`
//! endpoint, scraped over plain HTTP. Time is a manual clock, so dispatch
//! latencies are exact. The counts a request changes are durable, and
//! counted, before the request returns, so a scrape right after it sees them;
//! only what the keeper does on its own (lease expiries, retries becoming
//! ready) is waited for, by scraping until it shows, a bounded number of times.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{Clock, ManualClock, SharedClock};
use fairway::config::Config;
use fairway::core::engine::TaskPolicy;
use fairway::matcher::{Queues, Settings};
use fairway::model::{PartitionId, Priority, TaskSpec, validate};
use fairway::proto::v1 as pb;
use fairway::store::embedded::EmbeddedStore;
use fairway::store::{QueueConfig, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Backend, TestServer, add_all, describe, poll, spec};

const QUEUE: &str = "metered";
const START_MS: i64 = 1_700_000_000_000;
/// How long a poll that must find a task may wait.
const FOUND: Duration = Duration::from_secs(10);

/// One HTTP/1.1 request; the status code and the body.
async fn http(address: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("{method} {path} HTTP/1.1\r\nHost: fairway\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status line");
    Ok((status, body.to_owned()))
}

/// The metrics text.
async fn scrape(address: SocketAddr) -> String {
    let (status, body) = http(address, "GET", "/metrics").await.expect("scrape /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of one series (`name{labels}`), if the text has it.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The metrics of `QUEUE` this test checks, by series, from one scrape.
fn queue_metrics(text: &str) -> Vec<(String, f64)> {
    let q = format!("{{queue=\"{QUEUE}\"}}");
    let series = [
        format!("fairway_tasks_added_total{q}"),
        format!("fairway_tasks_dispatched_total{q}"),
        format!("fairway_tasks_completed_total{q}"),
        format!("fairway_tasks_failed_total{q}"),
        format!("fairway_leases_expired_total{q}"),
        format!("fairway_partition_takeovers_total{q}"),
        format!("fairway_owned_partitions{q}"),
        format!("fairway_backlog_tasks{{queue=\"{QUEUE}\",priority=\"3\"}}"),
        format!("fairway_ack_lag_tasks{{queue=\"{QUEUE}\",priority=\"3\"}}"),
        format!("fairway_leased_tasks{q}"),
        format!("fairway_delayed_tasks{q}"),
        format!("fairway_waiting_pollers{q}"),
        format!("fairway_held_tasks{q}"),
        format!("fairway_dispatch_latency_seconds_count{q}"),
        format!("fairway_dispatch_latency_seconds_bucket{{queue=\"{QUEUE}\",le=\"0.001\"}}"),
        format!("fairway_dispatch_latency_seconds_bucket{{queue=\"{QUEUE}\",le=\"10\"}}"),
        format!("fairway_dispatch_latency_seconds_bucket{{queue=\"{QUEUE}\",le=\"30\"}}"),
        format!("fairway_dispatch_latency_seconds_sum{q}"),
        format!("fairway_oldest_waiting_seconds{{queue=\"{QUEUE}\",priority=\"3\"}}"),
        // The queue has no max_wait (tests/integration/max_wait.rs counts them).
        format!("fairway_tasks_over_max_wait{q}"),
    ];
    series
        .into_iter()
        .map(|series| {
            let found = value(text, &series).unwrap_or_else(|| panic!("no {series} in:\n{text}"));
            (series, found)
        })
        .collect()
}

/// What `QUEUE`'s metrics should say. The ack lag is the backlog (no task is
/// dispatched above one that waits); this node owns the queue's one
/// partition and took it from no one. A latency is 0 s, or 11 s for a task
/// added before the clock moved by 11 s and dispatched after.
#[derive(Clone, Copy, Debug, Default)]
struct Want {
    added: u32,
    dispatched: u32,
    completed: u32,
    failed: u32,
    expired: u32,
    backlog: u32,
    leased: u32,
    delayed: u32,
    /// Dispatches of tasks on their first pass: those whose latency counts.
    first_pass: u32,
    /// Of those, the ones that waited 11 s.
    waited_11s: u32,
    /// Seconds since the oldest waiting task was first added.
    oldest_waiting: u32,
}

impl Want {
    /// The values in the order of [`queue_metrics`].
    fn values(self) -> Vec<f64> {
        let (takeovers, owned, waiting_pollers, held_for_polls) = (0, 1, 0, 0);
        let at_once = self.first_pass - self.waited_11s;
        [
            self.added,
            self.dispatched,
            self.completed,
            self.failed,
            self.expired,
            takeovers,
            owned,
            self.backlog,
            self.backlog,
            self.leased,
            self.delayed,
            waiting_pollers,
            held_for_polls,
            self.first_pass,
            at_once,
            at_once,
            self.first_pass,
            11 * self.waited_11s,
            self.oldest_waiting,
            0,
        ]
        .into_iter()
        .map(f64::from)
        .collect()
    }
}

/// Scrapes until `QUEUE`'s metrics are `want`, a bounded number of times.
async fn scrape_until(address: SocketAddr, want: Want) -> String {
    let want = want.values();
    let mut last = Vec::new();
    for _ in 0..500 {
        let text = scrape(address).await;
        last = queue_metrics(&text);
        if last.iter().map(|(_, value)| *value).eq(want.iter().copied()) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let diff: Vec<String> = last
        .iter()
        .zip(&want)
        .filter(|((_, got), want)| got != *want)
        .map(|((series, got), want)| format!("{series}: {got}, want {want}"))
        .collect();
    panic!("the metrics never matched: {diff:#?}");
}

async fn start() -> (TestServer, Arc<ManualClock>, SocketAddr) {
    let mut config = Config::default();
    config.telemetry.metrics_listen = "127.0.0.1:0".into();
    config.writer.keeper_interval = Duration::from_millis(20);
    config.tasks = TaskPolicy {
        lease_timeout: Duration::from_secs(10),
        backoff_initial: Duration::from_secs(2),
        backoff_jitter: 0.0,
        ..TaskPolicy::default()
    };
    let clock = Arc::new(ManualClock::new(START_MS));
    let server = TestServer::start_timed(Backend::Embedded, config, clock.clone()).await;
    let metrics = server.metrics.expect("a metrics endpoint");
    (server, clock, metrics)
}

#[tokio::test]
async fn the_metrics_count_what_was_added_dispatched_completed_and_failed() {
    let (server, clock, metrics) = start().await;
    let mut client = server.client.clone();
    const ADDED: u32 = 10;
    let specs = (0..ADDED).map(|i| spec(&format!("k{}", i % 3), 0.0, 0, b"x")).collect();
    add_all(&mut client, QUEUE, specs).await;
    let mut taken = Vec::new();
    for _ in 0..4 {
        taken.push(poll(&mut client, QUEUE, FOUND).await.expect("a task"));
    }
    for task in &taken[..2] {
        let request = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] };
        client.complete_task(request).await.expect("CompleteTask");
    }
    let request = pb::FailTaskRequest {
        lease_token: taken[2].lease_token.clone(),
        retryable: true,
        message: "flaky".into(),
        retry_after: None,
    };
    assert!(client.fail_task(request).await.expect("FailTask").into_inner().will_retry);

    // Every request above had its effect counted before it returned.
    let text = scrape(metrics).await;
    let got: Vec<f64> = queue_metrics(&text).into_iter().map(|(_, value)| value).collect();
    // 4 of 10 dispatched: 2 completed, 1 failed (waiting out its backoff),
    // 1 still leased; 6 waiting, all at the default priority.
    let want = Want {
        added: ADDED,
        dispatched: 4,
        completed: 2,
        failed: 1,
        backlog: 6,
        leased: 1,
        delayed: 1,
        first_pass: 4,
        ..Want::default()
    };
    assert_eq!(got, want.values(), "{text}");
    let state = describe(&mut client, QUEUE).await;
    let partition = &state.partitions[0];
    assert_eq!(
        (partition.added, partition.dispatched, partition.completed, partition.failed, partition.expired),
        (10, 4, 2, 1, 0),
        "DescribeQueue counts as the metrics do"
    );

    // The last lease runs out (an expiry, retried after 2 s); the failed
    // task's backoff is over by then: it is back in the backlog.
    clock.advance(Duration::from_secs(11));
    scrape_until(metrics, Want { expired: 1, backlog: 7, leased: 0, oldest_waiting: 11, ..want }).await;
    let request = pb::DescribeQueueRequest { queue: QUEUE.to_owned(), top_keys: 5 };
    let state = client.describe_queue(request).await.expect("DescribeQueue").into_inner();
    let level = &state.partitions[0].subqueues[2];
    assert!(level.reader_at_end, "7 tasks are all in the buffer");
    let oldest = level.oldest_added_at.as_ref().expect("the oldest waiting task's add time");
    assert_eq!(clock.now_ms() - (oldest.seconds * 1000 + i64::from(oldest.nanos / 1_000_000)), 11_000);
    assert!(
        level.top_keys.len() == 3 && level.top_keys.iter().all(|k| k.oldest_added_at.as_ref() == Some(oldest)),
        "every key's oldest task was added before the clock moved: {:?}",
        level.top_keys
    );

    // The rest: six tasks on their first pass, which have waited 11 s, and
    // the retried one, whose latency does not count.
    for _ in 0..7 {
        let task = poll(&mut client, QUEUE, FOUND).await.expect("a task");
        client
            .complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] })
            .await
            .expect("CompleteTask");
    }
    let done = Want {
        dispatched: 11,
        completed: 9,
        expired: 1,
        backlog: 0,
        leased: 0,
        first_pass: 10,
        waited_11s: 6,
        oldest_waiting: 0,
        ..want
    };
    let text = scrape_until(metrics, done).await;
    for priority in [1, 2, 4, 5] {
        let series = format!("fairway_backlog_tasks{{queue=\"{QUEUE}\",priority=\"{priority}\"}}");
        assert_eq!(value(&text, &series), Some(0.0), "{series}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_endpoint_serves_only_metrics_and_stops_with_the_server() {
    let (server, _clock, metrics) = start().await;
    let text = scrape(metrics).await;
    assert!(text.contains("# TYPE fairway_tasks_added_total counter\n"), "{text}");
    assert!(!text.contains("queue=\""), "no queue has been used yet: {text}");
    let (status, _) = http(metrics, "GET", "/").await.expect("GET /");
    assert_eq!(status, 404);
    let (status, _) = http(metrics, "POST", "/metrics").await.expect("POST /metrics");
    assert_eq!(status, 405);

    server.stop().await;
    let refused = tokio::net::TcpStream::connect(metrics).await;
    assert!(refused.is_err(), "the endpoint is closed once the server has stopped");
}

/// Counts survive the hand-over of a partition, and a partition whose
/// stored owner never handed it over is counted as a takeover.
#[tokio::test]
async fn counts_outlive_a_partition_and_takeovers_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let queue = validate::queue_name("queue", QUEUE).unwrap();
    store.create_queue(&queue, QueueConfig::new(1, "")).await.unwrap();
    let id = PartitionId { queue: queue.clone(), partition: 0 };
    store.take_ownership(&id, 0, "a node that crashed", "").await.unwrap();

    let clock: SharedClock = Arc::new(ManualClock::new(START_MS));
    let settings = Settings { node: "this node".into(), ..Settings::default() };
    let queues = Queues::new(store.clone(), clock, settings);
    let matcher = queues.get(&queue).await.unwrap();
    for _ in 0..3 {
        matcher.add(TaskSpec::new("k", Priority::DEFAULT, vec![]), None).await.unwrap();
    }
    let stats = matcher.stats();
    assert_eq!((stats.takeovers, stats.owned_partitions, stats.counts.added), (1, 1, 3));

    queues.close().await;
    let stats = matcher.stats();
    assert_eq!((stats.owned_partitions, stats.counts.added), (0, 3), "a released partition's counts stay");
    store.close().await.unwrap();
}

/// A collector that keeps what it is sent.
#[derive(Clone, Default)]
struct Collector {
    metrics: Arc<std::sync::Mutex<Vec<otlp_metrics::ExportMetricsServiceRequest>>>,
    spans: Arc<std::sync::Mutex<Vec<otlp_trace::ExportTraceServiceRequest>>>,
}

use opentelemetry_proto::tonic::collector::metrics::v1 as otlp_metrics;
use opentelemetry_proto::tonic::collector::trace::v1 as otlp_trace;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};

#[tonic::async_trait]
impl otlp_metrics::metrics_service_server::MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<otlp_metrics::ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<otlp_metrics::ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tonic::async_trait]
impl otlp_trace::trace_service_server::TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<otlp_trace::ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<otlp_trace::ExportTraceServiceResponse>, tonic::Status> {
        self.spans.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(Default::default()))
    }
}

impl Collector {
    /// Serves on a free port until the test ends; its `http://` endpoint.
    async fn start() -> (Collector, String) {
        let collector = Collector::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let server = tonic::transport::Server::builder()
            .add_service(otlp_metrics::metrics_service_server::MetricsServiceServer::new(collector.clone()))
            .add_service(otlp_trace::trace_service_server::TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);
        (collector, endpoint)
    }

    /// The last value pushed of metric `name` for `QUEUE`: a number, or a
    /// histogram's count.
    fn last(&self, name: &str) -> Option<i64> {
        let pushes = self.metrics.lock().unwrap();
        let metrics = pushes.iter().flat_map(|push| &push.resource_metrics).flat_map(|r| &r.scope_metrics);
        let mut found = None;
        for metric in metrics.flat_map(|scope| &scope.metrics).filter(|metric| metric.name == name) {
            let of_queue = |attributes: &[KeyValue]| attribute(attributes, "queue").as_deref() == Some(QUEUE);
            let number = |point: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match point.value {
                Some(number_data_point::Value::AsInt(value)) => value,
                Some(number_data_point::Value::AsDouble(value)) => value as i64,
                None => panic!("{name}: a point with no value"),
            };
            found = match &metric.data {
                Some(Data::Sum(sum)) => sum.data_points.iter().find(|p| of_queue(&p.attributes)).map(number),
                Some(Data::Gauge(gauge)) => gauge.data_points.iter().find(|p| of_queue(&p.attributes)).map(number),
                Some(Data::Histogram(histogram)) => {
                    histogram.data_points.iter().find(|p| of_queue(&p.attributes)).map(|p| p.count as i64)
                }
                other => panic!("{name}: unexpected data {other:?}"),
            }
            .or(found);
        }
        found
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    match value {
        any_value::Value::StringValue(text) => Some(text.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// With `telemetry.otlp_endpoint` set, the metrics are pushed (a last time
/// at shutdown, which is the push this test reads), and a tracing layer
/// over `otlp::tracer_provider` sends one span per gRPC request, with its
/// method and queue.
#[tokio::test]
async fn metrics_and_request_spans_reach_an_otlp_collector() {
    use opentelemetry::trace::TracerProvider;
    use tracing_subscriber::layer::SubscriberExt;

    let (collector, endpoint) = Collector::start().await;
    let traces = fairway::telemetry::otlp::tracer_provider(&endpoint, "test node").unwrap();
    // This test's runtime runs on this thread alone, and so does the server.
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(traces.tracer("fairway")));
    // `tracing` caches each call site's interest for the whole process: while
    // a single dispatcher is registered, a call site first reached by another
    // test's thread (which has no subscriber) would be cached as never
    // enabled, and this test would see no span. A second dispatcher, kept
    // alive, makes every call site's interest the union of all of them.
    let _anchor = tracing::Dispatch::new(tracing_subscriber::registry());
    let _traced = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let mut config = Config::default();
    config.telemetry.otlp_endpoint = endpoint;
    config.telemetry.otlp_export_interval = Duration::from_secs(3600);
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    add_all(&mut client, QUEUE, (0..3).map(|_| spec("k", 0.0, 0, b"x")).collect()).await;
    let task = poll(&mut client, QUEUE, FOUND).await.expect("a task");
    client
        .complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] })
        .await
        .expect("CompleteTask");
    server.stop().await;
    tokio::task::spawn_blocking(move || traces.shutdown()).await.unwrap().expect("spans pushed");

    assert_eq!(collector.last("fairway_tasks_added"), Some(3));
    assert_eq!(collector.last("fairway_tasks_dispatched"), Some(1));
    assert_eq!(collector.last("fairway_tasks_completed"), Some(1));
    assert_eq!(collector.last("fairway_leases_expired"), Some(0));
    assert_eq!(collector.last("fairway_owned_partitions"), Some(0), "the last push comes after the hand-over");
    assert_eq!(collector.last("fairway_dispatch_latency"), Some(1));

    let pushes = collector.spans.lock().unwrap();
    let spans: Vec<_> = pushes
        .iter()
        .flat_map(|push| &push.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|scope| &scope.spans)
        .filter(|span| span.name == "grpc")
        .map(|span| (attribute(&span.attributes, "method"), attribute(&span.attributes, "queue")))
        .collect();
    for method in ["AddTasks", "PollTask", "CompleteTask"] {
        let want = (Some(format!("/fairway.v1.Matching/{method}")), Some(QUEUE.to_owned()));
        assert!(spans.contains(&want), "no span {want:?} in {spans:?}");
    }
}

/// `/metrics` has no authentication: the real binary refuses to serve it
/// beyond loopback, naming the key, unless the operator says so (then it
/// warns).
#[tokio::test]
async fn metrics_are_served_beyond_loopback_only_on_the_operators_word() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().join("data").display());
    let mut command = tokio::process::Command::from(crate::support::fairway_command());
    command.args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0", "--store", &store]);
    let refused = command.kill_on_drop(true).output();
    let refused = tokio::time::timeout(Duration::from_secs(60), refused).await.expect("it stops").expect("it runs");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("telemetry.metrics_listen: is 0.0.0.0:") && stderr.contains("telemetry.metrics_allow_insecure"),
        "{stderr}"
    );

    let allowed = crate::support::ServerProcess::start_on(
        &store,
        &[("FAIRWAY_TELEMETRY__METRICS_LISTEN", "0.0.0.0:0"), ("FAIRWAY_TELEMETRY__METRICS_ALLOW_INSECURE", "true")],
    );
    let log = allowed.terminate();
    assert!(log.contains("SERVING /metrics WITHOUT AUTHENTICATION ON A NON-LOOPBACK ADDRESS"), "{log}");
}

/// The Grafana dashboard in `deploy/grafana/fairway.json` queries only
/// metrics a server serves (names and labels as scraped from a real one,
/// with a queue and a schedule), and lays its panels out on Grafana's grid
/// of 24 columns, each with an id of its own.
#[tokio::test]
async fn the_grafana_dashboard_reads_only_what_a_server_serves() {
    use std::collections::{BTreeMap, BTreeSet};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/fairway.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    // Each query, and the labels it groups by.
    let mut queries: Vec<(String, Vec<String>)> = Vec::new();
    for panel in panels {
        assert!(ids.insert(panel["id"].as_u64().expect("an id")), "panel ids are unique: {panel}");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{} is off the grid", panel["title"]);
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a PromQL expression").to_owned();
            let grouped = expr
                .match_indices("by (")
                .flat_map(|(at, _)| expr[at + 4..].split(')').next().unwrap().split(',').map(|l| l.trim().to_owned()))
                .collect();
            queries.push((expr, grouped));
        }
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let wanted: BTreeSet<String> = queries
        .iter()
        .flat_map(|(expr, _)| expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(str::to_owned))
        .filter(|word| word.starts_with("fairway_"))
        .collect();

    let mut config = Config::default();
    config.telemetry.metrics_listen = "127.0.0.1:0".into();
    config.schedules.scan_interval = Duration::from_millis(100);
    let server = TestServer::start_with(config).await;
    let metrics = server.metrics.expect("a metrics endpoint");
    let mut client = server.client.clone();
    add_all(&mut client, QUEUE, vec![spec("k", 0.0, 0, b"x")]).await;
    let hourly = pb::CreateScheduleRequest {
        id: "hourly".into(),
        spec: Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: Some(prost_types::Duration { seconds: 3600, nanos: 0 }),
                cooldown: Some(prost_types::Duration { seconds: 60, nanos: 0 }),
            })),
            ..Default::default()
        }),
        template: Some(pb::RunTemplate { queue: QUEUE.into(), ..Default::default() }),
        paused_note: String::new(),
    };
    let mut schedules = fairway::proto::v1::schedules_client::SchedulesClient::new(server.channel());
    schedules.create_schedule(hourly).await.expect("a schedule");
    // Each series' name, and the labels it has, once every name wanted is served.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (served, text) = loop {
        let text = scrape(metrics).await;
        let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines().filter(|line| line.starts_with("fairway_")) {
            let series = line.split(' ').next().unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let labels = labels.trim_end_matches('}').split(',').filter_map(|l| l.split_once('='));
            served.entry(name.to_owned()).or_default().extend(labels.map(|(k, _)| k.to_owned()));
        }
        let missing: Vec<&String> = wanted.iter().filter(|name| !served.contains_key(*name)).collect();
        if missing.is_empty() {
            break (served, text);
        }
        assert!(std::time::Instant::now() < deadline, "never served: {missing:?}\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (expr, grouped) in &queries {
        for name in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("fairway_"))
        {
            for label in grouped {
                // `instance` is the scrape target's, added by Prometheus.
                let known = served[name].contains(label) || label == "instance";
                assert!(known, "{expr:?} groups by {label}, which {name} does not have:\n{text}");
            }
        }
    }
    server.stop().await;
}
