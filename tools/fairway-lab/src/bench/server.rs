//! A `fairway serve` process for one benchmark run: the `fairway` binary next
//! to this one (or the one `--server-binary` names), started with a config
//! file the run writes, on a store the run prepared. A real process, so that its memory is its own
//! to measure.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, bail};

use fairway::proto::v1 as pb;

use super::BenchStore;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::security::{AuthChannel, BearerToken};
use fairway::test_util::spawn_server;

pub(super) type Client = MatchingClient<AuthChannel>;

/// A running server; killed when dropped, stopped in order by [`BenchServer::stop`].
pub(super) struct BenchServer {
    child: Child,
    /// How clients reach it: over TLS with a key (`--secure`), or plain.
    security: Option<std::sync::Arc<super::secure::BenchSecurity>>,
    pub addr: String,
    /// The config file and the log.
    dir: tempfile::TempDir,
    /// The embedded store's directory, removed after the process is gone.
    _store_dir: Option<tempfile::TempDir>,
}

impl BenchServer {
    /// Starts `fairway serve` on the run's store with `config` (TOML,
    /// without `listen` and `store`) and waits until it listens.
    pub(super) fn start(bench_store: &BenchStore, config: &str) -> anyhow::Result<BenchServer> {
        let exe = bench_store.server_binary.clone();
        crate::ensure_built(&exe)?;
        let (store, store_dir) = bench_store.for_run()?;
        let dir = tempfile::tempdir().context("a temporary directory for the server's config")?;
        let config_path = dir.path().join("fairway.toml");
        let config = match &bench_store.security {
            Some(security) => format!("{config}{}", security.server_config()),
            None => config.to_owned(),
        };
        std::fs::write(&config_path, config).context("write the server's config")?;
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).context("create the server's log")?;
        let mut command = Command::new(exe);
        command.args(["serve", "--listen", "127.0.0.1:0", "--store", &store, "--config"]).arg(&config_path);
        let (child, addr) = spawn_server(command.env("FAIRWAY_LOG", "warn"), log)
            .map_err(|e| anyhow::anyhow!("{e}: {}", tail(&log_path)))?;
        Ok(BenchServer { addr, child, security: bench_store.security.clone(), dir, _store_dir: store_dir })
    }

    pub(super) async fn client(&self) -> anyhow::Result<Client> {
        match &self.security {
            Some(security) => Ok(client_on(security.connect(&self.addr).await?)),
            None => connect(&self.addr).await,
        }
    }

    /// A client that authenticates with `key` (over TLS: the server must
    /// serve the run's security).
    pub(super) async fn client_as(&self, key: &str) -> anyhow::Result<Client> {
        let security = self.security.as_ref().context("the server serves no TLS: it takes no API keys here")?;
        Ok(client_on(security.connect_with(&self.addr, key).await?))
    }

    /// The server's resident memory now and at its peak, in bytes (Linux).
    pub(super) fn memory(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
        };
        Some((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// SIGTERM, then waits for the orderly shutdown.
    pub(super) async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: `kill` has no memory effects; the pid is our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = tokio::task::block_in_place(|| self.child.wait())?;
        if !status.success() {
            bail!("fairway serve exited with {status}: {}", tail(&self.dir.path().join("server.log")));
        }
        Ok(())
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub(super) async fn connect(server: &str) -> anyhow::Result<Client> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{server}"))?
        .connect()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    Ok(client_on(BearerToken::default().on(channel)))
}

fn client_on(channel: AuthChannel) -> Client {
    MatchingClient::new(channel).max_decoding_message_size(fairway::server::CLIENT_MAX_MESSAGE_BYTES)
}

/// Creates `queue` with `partitions` and waits until every partition has an owner.
pub(super) async fn create_queue(client: &mut Client, queue: &str, partitions: u32) -> anyhow::Result<()> {
    create_queue_in(client, queue, partitions, "").await.map(|_| ())
}

/// Creates `queue` with `partitions`, homed in `home` (empty: the server's
/// default), and waits until every partition has an owner. The queue as it
/// is: an existing one keeps its own partitions and home.
pub(super) async fn create_queue_in(
    client: &mut Client,
    queue: &str,
    partitions: u32,
    home: &str,
) -> anyhow::Result<pb::CreateQueueResponse> {
    let request = pb::CreateQueueRequest { queue: queue.to_owned(), partitions, home: home.to_owned() };
    let created = client.create_queue(request).await?.into_inner();
    wait_for_owners(client, queue).await?;
    Ok(created)
}

/// Waits until every partition of `queue` has an owner (here or elsewhere).
pub(super) async fn wait_for_owners(client: &mut Client, queue: &str) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..600 {
        ticks.tick().await;
        let state = client
            .describe_queue(pb::DescribeQueueRequest { queue: queue.to_owned(), top_keys: 0 })
            .await?
            .into_inner();
        if state.partitions.iter().all(|p| p.state == "active" || p.state == "remote") {
            return Ok(());
        }
    }
    bail!("the partitions of {queue} found no owner within a minute")
}

/// Adds `specs` in one AddTasks call, an error if any item failed; for
/// each, whether it was leased at once (`sync_matched`: to a waiting poll,
/// or held for the next).
pub(super) async fn add_batch(client: &mut Client, queue: &str, specs: Vec<pb::TaskSpec>) -> anyhow::Result<Vec<bool>> {
    let response = client.add_tasks(pb::AddTasksRequest { queue: queue.to_owned(), tasks: specs }).await?;
    let mut at_once = Vec::new();
    for result in response.into_inner().results {
        match result.outcome {
            Some(pb::add_task_result::Outcome::Error(error)) => bail!("an add failed: {}", error.message),
            Some(pb::add_task_result::Outcome::Added(added)) => at_once.push(added.sync_matched),
            None => bail!("an add's result has no outcome"),
        }
    }
    Ok(at_once)
}

/// Takes up to `max` tasks, waiting up to `wait` for the first.
pub(super) async fn poll_batch(
    client: &mut Client,
    queue: &str,
    max: u32,
    wait: Duration,
) -> anyhow::Result<Vec<pb::Task>> {
    let request = pb::PollTasksRequest {
        queue: queue.to_owned(),
        worker_id: "bench".into(),
        max_wait: Some(prost_types::Duration::try_from(wait)?),
        max_tasks: max,
        completions: Vec::new(),
    };
    Ok(client.poll_tasks(request).await?.into_inner().tasks)
}

/// Completes `done` with a poll that takes up to `max` tasks, waiting up to
/// `wait` for the first.
pub(super) async fn poll_completing(
    client: &mut Client,
    queue: &str,
    max: u32,
    wait: Duration,
    done: &[pb::Task],
) -> anyhow::Result<Vec<pb::Task>> {
    let request = pb::PollTasksRequest {
        queue: queue.to_owned(),
        worker_id: "bench".into(),
        max_wait: Some(prost_types::Duration::try_from(wait)?),
        max_tasks: max,
        completions: done
            .iter()
            .map(|task| pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] })
            .collect(),
    };
    let response = client.poll_tasks(request).await?.into_inner();
    if response.completions.len() != done.len() {
        bail!(
            "the server answered {} of the {} completions sent with a poll: built before PollTasks took \
             completions? (--complete-apart completes each task with CompleteTask)",
            response.completions.len(),
            done.len()
        );
    }
    if let Some(error) = response.completions.iter().find_map(|c| c.error.as_ref()) {
        bail!("a completion sent with a poll failed: {}", error.message);
    }
    Ok(response.tasks)
}

/// Completes every task, concurrently (their finishes share writes).
pub(super) async fn complete_all(client: &Client, tasks: &[pb::Task]) -> anyhow::Result<()> {
    let completions = tasks.iter().map(|task| {
        let mut client = client.clone();
        let lease_token = task.lease_token.clone();
        async move { client.complete_task(pb::CompleteTaskRequest { lease_token, result: vec![] }).await }
    });
    for completed in futures::future::join_all(completions).await {
        completed?;
    }
    Ok(())
}
