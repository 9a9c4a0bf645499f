//! Starting servers for tests: in-process on port 0, or as a real process.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{SharedClock, SystemClock};
use fairway::config::Config;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::server::LocalServer;
use tonic::transport::Channel;

use crate::cassandra::Keyspace;

pub(crate) type Client = MatchingClient<Channel>;

/// Which store a test server runs on.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    /// A fresh data directory.
    Embedded,
    /// A fresh keyspace on the test Cassandra node.
    Cassandra,
    /// The same, for a test that holds the node alone (`cassandra::exclusive`).
    CassandraHeldAlone,
}

/// Where a test server keeps its data, removed when it stops.
enum Home {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Keyspace(Box<Keyspace>),
}

/// A server in this process, on a fresh store.
pub(crate) struct TestServer {
    pub client: Client,
    /// Where it serves gRPC.
    pub addr: SocketAddr,
    /// Where it serves `GET /metrics`, when `telemetry.metrics_listen` is set.
    pub metrics: Option<SocketAddr>,
    channel: Channel,
    server: LocalServer,
    home: Home,
    /// With TLS from [`TestServer::start_secure`]: how clients trust it, and
    /// its files.
    tls: Option<(tonic::transport::ClientTlsConfig, tempfile::TempDir)>,
}

impl TestServer {
    pub(crate) async fn start() -> TestServer {
        TestServer::start_with(Config::default()).await
    }

    pub(crate) async fn start_with(config: Config) -> TestServer {
        TestServer::start_on(Backend::Embedded, config).await
    }

    pub(crate) async fn start_on(backend: Backend, config: Config) -> TestServer {
        TestServer::start_timed(backend, config, Arc::new(SystemClock)).await
    }

    /// A server whose engines read time from `clock` (a `ManualClock` in tests
    /// of leases, retries and delays).
    pub(crate) async fn start_timed(backend: Backend, config: Config, clock: SharedClock) -> TestServer {
        TestServer::start_secured(backend, config, clock, None).await
    }

    /// A server with TLS on (`config.security`), its client connected with `tls`.
    pub(crate) async fn start_tls(config: Config, tls: tonic::transport::ClientTlsConfig) -> TestServer {
        TestServer::start_secured(Backend::Embedded, config, Arc::new(SystemClock), Some(tls)).await
    }

    /// A server with TLS on, from a CA made for it; its client speaks TLS,
    /// and [`TestServer::connect`] makes more such connections.
    pub(crate) async fn start_secure(mut config: Config) -> TestServer {
        let dir = tempfile::tempdir().expect("a directory for the TLS files");
        let ca = crate::pki::Authority::new("fairway test CA");
        let (cert, key) = ca.sign("server");
        config.security.tls_cert = crate::pki::write(dir.path(), "server.crt", &cert).display().to_string();
        config.security.tls_key = crate::pki::write(dir.path(), "server.key", &key).display().to_string();
        let tls = crate::pki::client_tls(&ca, None);
        let mut server = TestServer::start_tls(config, tls.clone()).await;
        server.tls = Some((tls, dir));
        server
    }

    /// A new connection to the server (over TLS if it serves TLS).
    pub(crate) async fn connect(&self) -> Client {
        let channel = match &self.tls {
            None => Channel::from_shared(format!("http://{}", self.addr)).unwrap(),
            Some((tls, _)) => {
                Channel::from_shared(format!("https://{}", self.addr)).unwrap().tls_config(tls.clone()).unwrap()
            }
        };
        MatchingClient::new(channel.connect().await.expect("connect"))
    }

    async fn start_secured(
        backend: Backend,
        mut config: Config,
        clock: SharedClock,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> TestServer {
        let home = match backend {
            Backend::Embedded => {
                let dir = tempfile::tempdir().expect("temporary directory");
                config.store = format!("embedded:{}", dir.path().display());
                Home::Dir(dir)
            }
            Backend::Cassandra | Backend::CassandraHeldAlone => {
                let keyspace = match backend {
                    Backend::CassandraHeldAlone => Keyspace::create_unguarded().await,
                    _ => Keyspace::create().await,
                };
                config.store = keyspace.store_url();
                Home::Keyspace(Box::new(keyspace))
            }
        };
        let store = fairway::server::open_store(&config.store_url().unwrap(), &config).await.expect("open the store");
        let server = LocalServer::start(&config, store, clock).await.expect("start the server");
        let (addr, metrics) = (server.addr, server.metrics_addr);
        let channel = match tls {
            None => Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.expect("connect"),
            Some(tls) => Channel::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .expect("connect over TLS"),
        };
        let client = MatchingClient::new(channel.clone());
        TestServer { client, addr, metrics, channel, server, home, tls: None }
    }

    /// A channel to the server, for other services' clients.
    pub(crate) fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// Shuts down in order and waits until the server has stopped.
    pub(crate) async fn stop(self) {
        self.server.stop().await.expect("the server runs and stops cleanly");
        if let Home::Keyspace(keyspace) = self.home {
            keyspace.drop_keyspace().await;
        }
    }
}

pub(crate) fn spec(key: &str, weight: f64, priority: u32, payload: &[u8]) -> pb::TaskSpec {
    pb::TaskSpec {
        fairness_key: key.to_owned(),
        fairness_weight: weight,
        priority,
        payload: payload.to_vec(),
        ..Default::default()
    }
}

pub(crate) fn wait(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
}

pub(crate) async fn add(
    client: &mut Client,
    queue: &str,
    spec: pb::TaskSpec,
) -> Result<pb::AddTaskResponse, tonic::Status> {
    client.add_task(pb::AddTaskRequest { queue: queue.to_owned(), task: Some(spec) }).await.map(|r| r.into_inner())
}

/// Creates `queue` with `partitions` partitions (or finds it created).
pub(crate) async fn create(client: &mut Client, queue: &str, partitions: u32) {
    client
        .create_queue(pb::CreateQueueRequest { queue: queue.to_owned(), partitions, home: String::new() })
        .await
        .unwrap_or_else(|status| panic!("create queue {queue}: {status:?}"));
}

/// Adds tasks in AddTasks batches; panics on any item error.
pub(crate) async fn add_all(client: &mut Client, queue: &str, specs: Vec<pb::TaskSpec>) -> Vec<i64> {
    let mut ids = Vec::with_capacity(specs.len());
    for chunk in specs.chunks(1000) {
        let response = client
            .add_tasks(pb::AddTasksRequest { queue: queue.to_owned(), tasks: chunk.to_vec() })
            .await
            .expect("AddTasks")
            .into_inner();
        for result in response.results {
            match result.outcome {
                Some(pb::add_task_result::Outcome::Added(added)) => ids.push(added.task_id),
                other => panic!("an item failed: {other:?}"),
            }
        }
    }
    ids
}

pub(crate) async fn poll(client: &mut Client, queue: &str, max_wait: Duration) -> Option<pb::Task> {
    client
        .poll_task(pb::PollTaskRequest { queue: queue.to_owned(), worker_id: "test".into(), max_wait: wait(max_wait) })
        .await
        .expect("PollTask")
        .into_inner()
        .task
}

pub(crate) async fn describe(client: &mut Client, queue: &str) -> pb::DescribeQueueResponse {
    client
        .describe_queue(pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 })
        .await
        .expect("DescribeQueue")
        .into_inner()
}

/// The `fairway` binary, with none of this process's `FAIRWAY_*` variables:
/// a test's server runs on the settings the test gives it, whatever the
/// environment of the test run (`scripts/test.sh` exports its own knobs).
pub(crate) fn fairway_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fairway"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FAIRWAY_") {
            command.env_remove(name);
        }
    }
    command
}

/// A `fairway serve` process on port 0; its log goes to a temporary file.
pub(crate) struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// The console's URL (`http://127.0.0.1:PORT/`), when it serves one.
    pub console: Option<String>,
    log: tempfile::NamedTempFile,
}

impl ServerProcess {
    /// Starts the real binary on `data_dir` and waits for its `listening on` line.
    pub(crate) fn start(data_dir: &Path) -> ServerProcess {
        ServerProcess::start_on(&format!("embedded:{}", data_dir.display()), &[])
    }

    /// Starts the real binary on a store URL, with extra `FAIRWAY_*` settings.
    pub(crate) fn start_on(store: &str, env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::start_listening(store, env, "127.0.0.1:0")
    }

    /// [`ServerProcess::start_on`], listening on `listen` (its name in a cluster).
    pub(crate) fn start_listening(store: &str, env: &[(&str, &str)], listen: &str) -> ServerProcess {
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let mut command = fairway_command();
        command
            .args(["serve", "--listen", listen, "--store", store])
            .env("FAIRWAY_LOG", "info")
            .envs(env.iter().copied());
        let started = fairway::test_util::spawn_server_with_console(&mut command, log.reopen().expect("the log file"));
        let (child, addr, console) = started.unwrap_or_else(|error| {
            let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("{error}; stderr: {stderr}")
        });
        let addr = addr.parse().expect("an address");
        ServerProcess { child, addr, console, log }
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`) to the process.
    pub(crate) fn signal(&self, name: &str) {
        let status =
            Command::new("kill").args([format!("-{name}"), self.child.id().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// SIGTERM, then waits for the orderly shutdown; returns what it logged.
    pub(crate) fn terminate(mut self) -> String {
        self.signal("TERM");
        let status = self.child.wait().expect("wait for the server");
        assert!(status.success(), "fairway serve exited with {status}: {}", self.log());
        self.log()
    }

    /// What the process has logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub(crate) async fn client(&self) -> Client {
        MatchingClient::connect(format!("http://{}", self.addr)).await.expect("connect")
    }

    /// SIGKILL: no shutdown code runs.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new API key with `role` on every queue: the key and its config.
pub(crate) fn api_key(name: &str, role: &str) -> (String, String) {
    let out = fairway_command()
        .args(["auth", "key", "create", "--name", name, "--role", role, "--queues", "*"])
        .output()
        .expect("fairway auth key create");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    let key = printed.lines().find(|l| l.starts_with("fwk_")).expect("a key").to_owned();
    let (_, config) = printed.split_once("[[security.principals]]").expect("the principal");
    (key, format!("[[security.principals]]{config}"))
}
