//! The web console of a real `fairway serve` (embedded store, API keys),
//! driven in Debian's headless Chromium through chromedriver: log in, open
//! a queue, see each key's share of dispatch move as tasks are handed out,
//! pause a key, find a task, redrive a dead letter; a reader sees pages but
//! cannot act and sees no payload; without a login no page or action is
//! served. Each page is saved as a screenshot under
//! `target/console-screenshots/`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;
use fairway::proto::v1::scheduler_client::SchedulerClient;
use fairway::proto::v1::schedules_client::SchedulesClient;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Client, ServerProcess, api_key, spec, wait};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// chromedriver on a free port, stopped when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        for path in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: the console tests drive Debian's Chromium; install it with \
                 `apt-get install chromium chromium-driver` (scripts/test.sh does)"
            );
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen on {port} within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }

    async fn browser(&self, profile: &Path) -> Browser {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), serde_json::json!({ "binary": CHROMIUM, "args": args }));
        // The WebDriver client's TLS (unused on loopback) needs a crypto provider chosen.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        ClientBuilder::rustls()
            .expect("a TLS config for the WebDriver client")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session through chromedriver")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Browser, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screenshots().join(format!("{name}.png")), png).unwrap();
}

async fn text(browser: &Browser, css: &str) -> String {
    browser.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
}

/// Submits a form by clicking `css`, and waits (at most 30 s) for the page
/// it leads to: the page clicked on gone (its elements stale), then an
/// element matching `then` (which the page clicked on may have too).
async fn submit(browser: &Browser, css: &str, then: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = browser.find(Locator::Css("html")).await.expect("a page");
    browser.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).click().await.unwrap();
    while page.tag_name().await.is_ok() {
        assert!(Instant::now() < deadline, "after clicking {css}, the page did not change within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let arrived = browser.wait().at_most(left).for_element(Locator::Css(then)).await;
    arrived.unwrap_or_else(|e| panic!("after clicking {css}, no {then} within 30 s: {e}"));
}

/// The share shown for `key`, in percent.
async fn share(browser: &Browser, key: &str) -> f64 {
    let cell = text(browser, &format!("#shares tr[data-key='{key}'] td.share")).await;
    cell.trim_end_matches('%').parse().unwrap_or_else(|_| panic!("a share: {cell:?}"))
}

fn with_key<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    request
}

/// Polls `n` tasks as worker `w` (completing none).
async fn take(client: &mut Client, key: &str, queue: &str, n: usize) -> Vec<pb::Task> {
    let mut taken = Vec::new();
    while taken.len() < n {
        let request = pb::PollTasksRequest {
            queue: queue.into(),
            worker_id: "w".into(),
            max_wait: wait(Duration::from_secs(5)),
            max_tasks: (n - taken.len()).min(10) as u32,
            completions: Vec::new(),
        };
        let tasks = client.poll_tasks(with_key(request, key)).await.expect("poll").into_inner().tasks;
        assert!(!tasks.is_empty(), "tasks to take in {queue}");
        taken.extend(tasks);
    }
    taken
}

/// A raw HTTP/1.1 request without a session: its status line and headers.
async fn anonymous(console: &str, method: &str, path: &str, body: &str) -> String {
    let address = console.trim_start_matches("http://").trim_end_matches('/');
    raw(address, address, method, path, body).await
}

/// A raw HTTP/1.1 request to `address` naming `host`.
async fn raw(address: &str, host: &str, method: &str, path: &str, body: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn the_console_in_a_browser_logs_in_shows_shares_pauses_finds_and_redrives_and_serves_no_one_else() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, admin_config) = api_key("ops", "admin");
    let (reader, reader_config) = api_key("auditor", "reader");
    let config = dir.path().join("fairway.toml");
    std::fs::write(&config, format!("{admin_config}\n{reader_config}")).unwrap();
    let store = format!("embedded:{}", dir.path().join("data").display());
    // No task is held for a poll (docs/fairness.md §7a): the purge below
    // counts tasks added a moment after a poll, and would find the first
    // of them running, held, or waiting, by the clock.
    let env = [
        ("FAIRWAY_CONFIG", config.display().to_string()),
        ("FAIRWAY_CONSOLE__CHART_INTERVAL", "1s".into()),
        ("FAIRWAY_MATCHER__QUIET_HOLD", "0s".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = ServerProcess::start_on(&store, &env);
    let console = server.console.clone().expect("the server prints its console's address");
    let mut client = server.client().await;

    // A queue of two keys weighted 3 and 1, with a backlog of both.
    let queue = "console-demo";
    let create = pb::CreateQueueRequest { queue: queue.into(), partitions: 1, home: String::new() };
    client.create_queue(with_key(create, &admin)).await.expect("create");
    let weights = [("heavy".to_owned(), 3.0), ("light".to_owned(), 1.0)].into_iter().collect();
    let update = pb::UpdateQueueRequest {
        queue: queue.into(),
        settings: Some(pb::QueueSettings { weights, ..Default::default() }),
        clear: Vec::new(),
        expected_version: 0,
    };
    client.update_queue(with_key(update, &admin)).await.expect("weights");
    let mut light_task = 0;
    for i in 0..200 {
        for key in ["heavy", "light"] {
            let add = pb::AddTaskRequest {
                queue: queue.into(),
                task: Some(spec(key, 0.0, 3, format!("{key} {i}").as_bytes())),
            };
            let added = client.add_task(with_key(add, &admin)).await.expect("add").into_inner();
            if key == "light" && i == 199 {
                light_task = added.task_id;
            }
        }
    }

    // Nothing without a login: every page sends to the login, every action is refused.
    let pages = ["/", "/queues/console-demo", "/queues/console-demo/dead", "/queues/console-demo/task?id=1"];
    for path in pages.into_iter().chain(["/schedules", "/listers?lister=forge", "/nodes", "/workers"]) {
        let answer = anonymous(&console, "GET", path, "").await;
        assert!(answer.starts_with("HTTP/1.1 303"), "GET {path}: {answer}");
        assert!(answer.to_lowercase().contains("location: /login"), "GET {path}: {answer}");
    }
    for verb in ["pause", "resume", "redrive", "cancel", "purge"] {
        let answer =
            anonymous(&console, "POST", &format!("/queues/{queue}/{verb}"), "token=x&one_key=yes&key=heavy").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "POST {verb}: {answer}");
    }
    // Nor through another name for loopback (a rebound DNS name).
    let address = console.trim_start_matches("http://").trim_end_matches('/');
    let rebound = raw(address, "fairway.evil.example", "GET", "/login", "").await;
    assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let browser = driver.browser(profile.path()).await;

    // Log in: a wrong key is refused, the admin's lets in.
    browser.goto(&console).await.unwrap();
    assert!(browser.current_url().await.unwrap().path().ends_with("/login"), "sent to the login");
    screenshot(&browser, "login").await;
    browser.find(Locator::Css("#credential")).await.unwrap().send_keys("fwk_not_a_key").await.unwrap();
    submit(&browser, "#login", "#error").await;
    assert!(text(&browser, "#error").await.contains("Not a key or token this node accepts"));
    browser.find(Locator::Css("#credential")).await.unwrap().send_keys(&admin).await.unwrap();
    submit(&browser, "#login", "header .logout").await;
    assert!(text(&browser, "header .logout").await.contains("logged in as ops"));
    assert!(text(&browser, "#queues").await.contains(queue), "the queue is listed");
    screenshot(&browser, "queues").await;

    // The queue: nothing handed out yet; then 3:1 as weighted; then, with
    // the heavy key paused from the page, the light key's share grows.
    browser.goto(&format!("{console}queues/{queue}")).await.unwrap();
    assert!(text(&browser, "#no-shares").await.contains("Nothing handed out"));
    take(&mut client, &admin, queue, 40).await;
    browser.refresh().await.unwrap();
    let (heavy, light) = (share(&browser, "heavy").await, share(&browser, "light").await);
    assert!((70.0..=80.0).contains(&heavy) && (20.0..=30.0).contains(&light), "3:1 weights: {heavy}% / {light}%");
    browser.find(Locator::Css("#key")).await.unwrap().send_keys("heavy").await.unwrap();
    submit(&browser, "#pause-key button", "#flash").await;
    assert!(text(&browser, "#flash").await.contains("Paused key \"heavy\""));
    assert!(text(&browser, "#paused-keys").await.contains("heavy"));
    let described = client
        .describe_queue(with_key(pb::DescribeQueueRequest { queue: queue.into(), top_keys: 0 }, &admin))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(described.settings.unwrap().paused_keys, ["heavy"], "paused in the store");
    let more = take(&mut client, &admin, queue, 40).await;
    assert!(more.iter().all(|t| t.fairness_key == "light"), "only the light key while the heavy one is paused");
    browser.refresh().await.unwrap();
    let light_after = share(&browser, "light").await;
    assert!(light_after > light + 20.0, "the light key's share grows: {light}% then {light_after}%");
    // The charts of the last hour (read every second here) show the 80
    // tasks handed out: a scale above 1 task per second.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        browser.refresh().await.unwrap();
        if let Ok(scale) = browser.find(Locator::Css("#chart-rates text.scale")).await {
            let top: f64 = scale.text().await.unwrap().trim_end_matches('k').parse().unwrap_or(0.0);
            if top > 1.0 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no chart of the tasks handed out within 30 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(text(&browser, "#chart-depth figcaption").await.contains("waiting"));
    screenshot(&browser, "queue").await;

    // A task found by its id, with its payload for the admin.
    browser.find(Locator::Css("#task_id")).await.unwrap().send_keys(&light_task.to_string()).await.unwrap();
    submit(&browser, "#find-task button", "#task-state").await;
    assert!(text(&browser, "#task-state").await.starts_with("pending"), "{}", text(&browser, "#task-state").await);
    assert!(text(&browser, "#payload").await.contains("light 199"));
    screenshot(&browser, "task").await;

    // Two dead letters; those whose message says "boom" chosen and redriven.
    let dead_queue = "console-dead";
    for (key, payload, message) in [("x", &b"doomed"[..], "boom"), ("y", &b"other"[..], "refused")] {
        let add = pb::AddTaskRequest { queue: dead_queue.into(), task: Some(spec(key, 0.0, 3, payload)) };
        client.add_task(with_key(add, &admin)).await.expect("add");
        let doomed = take(&mut client, &admin, dead_queue, 1).await.remove(0);
        let fail = pb::FailTaskRequest {
            lease_token: doomed.lease_token,
            retryable: false,
            message: message.into(),
            retry_after: None,
        };
        client.fail_task(with_key(fail, &admin)).await.expect("fail");
    }
    browser.goto(&format!("{console}queues/{dead_queue}/dead")).await.unwrap();
    let listed = text(&browser, "#dead-letters").await;
    assert!(listed.contains("boom") && listed.contains("refused"), "{listed}");
    browser.find(Locator::Css("input[name=contains]")).await.unwrap().send_keys("boom").await.unwrap();
    submit(&browser, "#choose-letters button", "#dead-letters").await;
    let chosen = text(&browser, "#dead-letters").await;
    assert!(chosen.contains("boom") && !chosen.contains("refused"), "{chosen}");
    screenshot(&browser, "dead-letters").await;
    submit(&browser, "form.action button", "#flash").await;
    assert!(text(&browser, "#flash").await.contains("Put 1 dead letter(s) back"));
    let left = text(&browser, "#dead-letters").await;
    assert!(left.contains("refused") && !left.contains("boom"), "the other letter stays: {left}");
    let again = take(&mut client, &admin, dead_queue, 1).await;
    assert_eq!(again[0].payload, b"doomed", "the redriven task is handed out again");

    // A task cancelled from its page: marked, and never handed out.
    let add = pb::AddTaskRequest { queue: dead_queue.into(), task: Some(spec("z", 0.0, 3, b"unwanted")) };
    let unwanted = client.add_task(with_key(add, &admin)).await.expect("add").into_inner();
    browser
        .goto(&format!("{console}queues/{dead_queue}/task?partition={}&id={}", unwanted.partition, unwanted.task_id))
        .await
        .unwrap();
    submit(&browser, "#cancel button", "#flash").await;
    let flash = text(&browser, "#flash").await;
    assert!(flash.contains(&format!("Cancelled task {}", unwanted.task_id)), "{flash}");
    browser
        .goto(&format!("{console}queues/{dead_queue}/task?partition={}&id={}", unwanted.partition, unwanted.task_id))
        .await
        .unwrap();
    assert!(text(&browser, "#task-cancelled").await.contains("Cancelled"));

    // A purge from the queue's page: it asks first, then cancels what waits.
    for n in 0..3 {
        let add =
            pb::AddTaskRequest { queue: dead_queue.into(), task: Some(spec("p", 0.0, 3, format!("{n}").as_bytes())) };
        client.add_task(with_key(add, &admin)).await.expect("add");
    }
    browser.goto(&format!("{console}queues/{dead_queue}")).await.unwrap();
    submit(&browser, "#purge-ask button", "#confirm-purge").await;
    let asked = text(&browser, "#confirm-purge").await;
    assert!(asked.contains(&format!("Cancel every task of queue {dead_queue}")), "{asked}");
    screenshot(&browser, "purge").await;
    submit(&browser, "#confirm-purge button", "#flash").await;
    let flash = text(&browser, "#flash").await;
    // The three, the task cancelled above (not reached yet), and the
    // redriven task its worker still holds.
    let counted = format!("Purged queue {dead_queue}: 4 waiting, 0 delayed and 1 running");
    assert!(flash.contains(&counted), "{flash}");
    let poll = pb::PollTaskRequest {
        queue: dead_queue.into(),
        worker_id: "w".into(),
        max_wait: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
    };
    let polled = client.poll_task(with_key(poll, &admin)).await.expect("poll").into_inner();
    assert!(polled.task.is_none(), "a purged task was handed out: {polled:?}");

    // A schedule, with its health, and a lister's origins with their coverage.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr)).unwrap();
    let channel = channel.connect().await.expect("connect");
    let create = pb::CreateScheduleRequest {
        id: "nightly-report".into(),
        spec: Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: Some(prost_types::Duration { seconds: 3600, nanos: 0 }),
                cooldown: Some(prost_types::Duration { seconds: 60, nanos: 0 }),
            })),
            ..Default::default()
        }),
        template: Some(pb::RunTemplate { queue: "reports".into(), payload: b"r".to_vec(), ..Default::default() }),
        paused_note: String::new(),
    };
    let mut schedules = SchedulesClient::new(channel.clone());
    schedules.create_schedule(with_key(create, &admin)).await.expect("create a schedule");
    let origins = ["a", "b"].map(|name| pb::ListedOrigin {
        url: format!("https://forge.example/{name}.git"),
        visit_type: "git".into(),
        ..Default::default()
    });
    let record = pb::RecordOriginsRequest { lister: "forge".into(), origins: origins.to_vec() };
    SchedulerClient::new(channel).record_origins(with_key(record, &admin)).await.expect("record origins");
    browser.goto(&format!("{console}schedules")).await.unwrap();
    let listed = text(&browser, "#schedules").await;
    assert!(listed.contains("nightly-report") && listed.contains("every 1h"), "{listed}");
    assert!(listed.contains("reports"), "the queue its runs go to: {listed}");
    screenshot(&browser, "schedules").await;
    browser.goto(&format!("{console}listers")).await.unwrap();
    browser.find(Locator::Css("#lister")).await.unwrap().send_keys("forge").await.unwrap();
    submit(&browser, "#find-lister button", "#lister-metrics").await;
    let metrics = text(&browser, "#lister-metrics").await;
    assert!(metrics.contains("git") && metrics.contains("0.0%"), "two origins, none visited: {metrics}");
    screenshot(&browser, "listers").await;

    // The workers that polled (this test's, as "w"), and the node.
    browser.goto(&format!("{console}queues/{dead_queue}")).await.unwrap();
    submit(&browser, "#queue-workers", "#workers").await;
    let workers = text(&browser, "#workers").await;
    assert!(workers.contains(dead_queue) && workers.contains("127.0.0.1:"), "{workers}");
    assert!(!workers.contains(queue), "only the queue's own workers: {workers}");
    screenshot(&browser, "workers").await;
    submit(&browser, "nav a[href='/nodes']", "#nodes").await;
    let nodes = text(&browser, "#nodes").await;
    assert!(nodes.contains("live") && nodes.contains("(this console's)"), "{nodes}");
    screenshot(&browser, "nodes").await;

    // Log out; a reader sees the queue, cannot act, and sees no payload.
    browser.goto(&format!("{console}queues/{queue}")).await.unwrap();
    submit(&browser, "header .logout button", "#credential").await;
    assert!(browser.current_url().await.unwrap().path().ends_with("/login"));
    browser.find(Locator::Css("#credential")).await.unwrap().send_keys(&reader).await.unwrap();
    submit(&browser, "#login", "header .logout").await;
    browser.goto(&format!("{console}queues/{queue}")).await.unwrap();
    browser.find(Locator::Css("#key")).await.unwrap().send_keys("light").await.unwrap();
    submit(&browser, "#pause-key button", "#flash").await;
    let refused = text(&browser, "#flash").await;
    assert!(refused.starts_with("Not done") && refused.contains("admin"), "{refused}");
    browser.goto(&format!("{console}queues/{queue}/task?partition=0&id={light_task}")).await.unwrap();
    assert!(text(&browser, "#payload").await.contains("hidden"), "no payload for a reader");

    browser.close().await.unwrap();
    drop(driver);
}
