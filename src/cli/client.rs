//! The client commands `fairway task …` and `fairway queue …`: one gRPC
//! call each to a server, over TLS and with a token when given.
//!
//! Contract: the commands only read the statuses the server sends (code and
//! message, printed as they came); they build none.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::security::{AuthChannel, BearerToken};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::times;

#[derive(Args, Debug)]
pub(super) struct ServerArg {
    /// The server to talk to: `host:port` as `serve` prints it, or a URL
    /// (`https://…` for TLS).
    #[arg(long, env = "FAIRWAY_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    /// The CA (PEM) that signs the server's certificate: TLS, and an
    /// `https://` server address.
    #[arg(long, env = "FAIRWAY_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a server that requires one.
    #[arg(long, env = "FAIRWAY_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, env = "FAIRWAY_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// An API key or a JWT, sent as `authorization: Bearer <token>`.
    #[arg(long, env = "FAIRWAY_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl ServerArg {
    /// A channel to the server, over TLS when a CA is given, sending the
    /// token when one is given.
    pub(super) async fn channel(&self) -> anyhow::Result<AuthChannel> {
        let token = BearerToken::new(self.token.as_deref()).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
        Ok(token.on(self.plain_channel().await?))
    }

    /// [`ServerArg::channel`] for long-lived clients such as workers: it
    /// connects at the first call and again after the server went away, and
    /// pings the server every 20 s, so that a connection to a host that
    /// vanished without a reset fails within 40 s instead of the minutes TCP
    /// takes.
    pub(super) fn lazy_channel(&self) -> anyhow::Result<AuthChannel> {
        let token = BearerToken::new(self.token.as_deref()).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
        let endpoint = self
            .endpoint()?
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        Ok(token.on(endpoint.connect_lazy()))
    }

    /// The server's address as given.
    pub(super) fn address(&self) -> &str {
        &self.server
    }

    async fn plain_channel(&self) -> anyhow::Result<Channel> {
        let endpoint = self.endpoint()?;
        endpoint.connect().await.with_context(|| format!("cannot reach a fairway server at {}", self.server))
    }

    fn endpoint(&self) -> anyhow::Result<Endpoint> {
        let mut endpoint = Endpoint::from_shared(server_url(&self.server, self.tls_ca.is_some()))
            .with_context(|| format!("--server {:?} is not host:port or a URL", self.server))?;
        if let Some(ca) = &self.tls_ca {
            let read = |flag: &str, path: &PathBuf| {
                std::fs::read(path).with_context(|| format!("{flag} {}: cannot read it", path.display()))
            };
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("--tls-ca", ca)?));
            if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
                tls = tls.identity(Identity::from_pem(read("--tls-cert", cert)?, read("--tls-key", key)?));
            }
            endpoint = endpoint.tls_config(tls).context("TLS settings")?;
        }
        Ok(endpoint)
    }
}

/// `server` as a URL: `host:port` (as `serve` prints where it listens)
/// gets `http://`, or `https://` with TLS.
fn server_url(server: &str, tls: bool) -> String {
    if server.contains("://") {
        server.to_owned()
    } else {
        format!("{}://{server}", if tls { "https" } else { "http" })
    }
}

#[derive(Subcommand, Debug)]
pub(super) enum TaskCommand {
    /// Add one task.
    Add {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long)]
        queue: String,
        /// The fairness key (tenant, lister, host…); without one, the task
        /// goes under the empty key, which shares the queue like any other.
        #[arg(long, default_value = "")]
        key: String,
        /// The key's weight; 0 for the queue default.
        #[arg(long, default_value_t = 0.0)]
        weight: f64,
        /// 1 (highest) to 5 (lowest); 0 for the default (3).
        #[arg(long, default_value_t = 0)]
        priority: u32,
        /// The payload, as text.
        #[arg(long, default_value = "", conflicts_with = "payload_file")]
        payload: String,
        /// The payload, the bytes of this file, or of standard input for `-`
        /// (for payloads too large for an argument, or not text).
        #[arg(long)]
        payload_file: Option<PathBuf>,
        /// At most one pending or running task per dedup id in the queue.
        #[arg(long, default_value = "")]
        dedup_id: String,
        /// Ready only after this long, e.g. 30s, 2h.
        #[arg(long, value_parser = duration_serde::parse)]
        delay: Option<Duration>,
        /// The work the task stands for, 1 to 1000: its key's share counts
        /// it as this many tasks of cost 1 (default 1).
        #[arg(long, conflicts_with = "size")]
        cost: Option<u32>,
        /// The size of the work in the queue's units (records, bytes), 1 to
        /// 10^15: the queue's cost_curve makes it into the cost.
        #[arg(long)]
        size: Option<u64>,
    },
    /// Wait for one task and print it (with the lease token to finish it).
    Poll {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long)]
        queue: String,
        /// How long to wait, e.g. 500ms, 30s.
        #[arg(long, default_value = "30s", value_parser = duration_serde::parse)]
        wait: Duration,
        #[arg(long, default_value = "cli")]
        worker: String,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// Report a task done.
    Complete {
        #[command(flatten)]
        server: ServerArg,
        /// The lease token printed by `task poll`.
        #[arg(long)]
        lease_token: String,
    },
    /// Report a task failed: retried after a backoff while attempts remain,
    /// else a dead letter.
    Fail {
        #[command(flatten)]
        server: ServerArg,
        /// The lease token printed by `task poll`.
        #[arg(long)]
        lease_token: String,
        /// Why (kept with a dead letter).
        #[arg(long, default_value = "")]
        message: String,
        /// Straight to the dead letters, whatever attempts remain.
        #[arg(long)]
        fatal: bool,
        /// Wait at least this long before the next attempt.
        #[arg(long, value_parser = duration_serde::parse)]
        retry_after: Option<Duration>,
    },
    /// Show one task: pending (and what it waits for), delayed, leased (to
    /// whom, until when) or dead.
    Get(super::task_lookup::GetArgs),
    /// Cancel one task: a dead letter is removed, a leased task's lease ends
    /// at once, a pending or delayed one ends when it comes up (admin role).
    Cancel(super::task_cancel::CancelArgs),
    /// Extend a task's lease by the queue's lease timeout.
    Heartbeat {
        #[command(flatten)]
        server: ServerArg,
        /// The lease token printed by `task poll`.
        #[arg(long)]
        lease_token: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum QueueCommand {
    /// Create a queue with a number of partitions (kept if it exists).
    Create {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long)]
        queue: String,
        /// 1 to 256; more partitions spread a queue over more nodes.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// The region whose nodes own the queue (default: the server's
        /// `cluster.default_home`, else the region of the node called).
        #[arg(long, default_value = "")]
        home: String,
    },
    /// Move a queue's home to another region (a graceful move: the old
    /// home's nodes hand each partition over; nothing is lost).
    Move {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long)]
        queue: String,
        /// The new home region; a node of it must be live.
        #[arg(long, required_unless_present = "abandon_previous", default_value = "")]
        home: String,
        /// Forced failover, when the home region is lost (no live node):
        /// the new home serves a new generation at once and adds the old
        /// one's tasks as they become readable there; tasks acknowledged
        /// in the old home and not yet replicated come back when it returns
        /// (docs/operations.md, "Forced failover").
        #[arg(long, conflicts_with = "abandon_previous")]
        force: bool,
        /// After a forced failover whose old home will not return: declare
        /// its generation lost, so that its partitions are closed after a
        /// last pass over what this home has of them (what the old home
        /// acknowledged and never replicated here is lost), and the queue
        /// can be moved again.
        #[arg(long)]
        abandon_previous: bool,
    },
    /// Tasks that failed their last attempt, oldest first; `--redrive`
    /// puts them back in the queue as first attempts. `--key`,
    /// `--message-contains`, `--older-than` and `--newer-than` choose some.
    DeadLetters(super::dead_letters::DeadLettersArgs),
    /// The queues, in name order: backlog, running tasks, oldest wait and
    /// pauses of each.
    List {
        #[command(flatten)]
        server: ServerArg,
        /// Only the queues whose names start with it.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many (all of them: pages are fetched until the end).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// Stop handing out a queue's tasks, or one fairness key's (`--key`):
    /// adds go on, polls wait. Stored with the queue: every node, and a
    /// restart, keep it.
    Pause(super::queue_settings::PauseArgs),
    /// Cancel every task of a queue but its dead letters: waiting, delayed
    /// and running. Run once to see what it would do and get a token, then
    /// again with `--confirm TOKEN`.
    Purge(super::queue_purge::PurgeArgs),
    /// Hand out a paused queue's tasks, or a paused key's, again.
    Resume(super::queue_settings::PauseArgs),
    /// Change the settings stored with a queue (lease timeout, attempts,
    /// backoff, key limits, weights, costs), which every node applies over
    /// its config file's.
    Update(super::queue_settings::UpdateArgs),
    /// A queue: tasks waiting, running and delayed, the oldest wait; then per partition its levels, backlog per priority and top keys.
    Describe {
        #[command(flatten)]
        server: ServerArg,
        #[arg(long)]
        queue: String,
        /// Keys to list per priority level.
        #[arg(long, default_value_t = 10)]
        top: u32,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn connect(server: &ServerArg) -> anyhow::Result<MatchingClient<AuthChannel>> {
    let client = MatchingClient::new(server.channel().await?);
    Ok(client.max_decoding_message_size(fairway::server::CLIENT_MAX_MESSAGE_BYTES))
}

pub(super) fn status(error: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", error.code(), error.message())
}

pub(super) async fn task(command: TaskCommand) -> anyhow::Result<()> {
    match command {
        TaskCommand::Add {
            server,
            queue,
            key,
            weight,
            priority,
            payload,
            payload_file,
            dedup_id,
            delay,
            cost,
            size,
        } => {
            let payload = match payload_file {
                Some(path) => read_payload(&path)?,
                None => payload.into_bytes(),
            };
            let mut client = connect(&server).await?;
            // An add creates a queue that does not exist: say so, for a mistyped name.
            let describe = pb::DescribeQueueRequest { queue: queue.clone(), top_keys: 0 };
            let new_queue = matches!(
                client.describe_queue(describe).await,
                Err(status) if status.code() == tonic::Code::NotFound
            );
            let response = client
                .add_task(pb::AddTaskRequest {
                    queue: queue.clone(),
                    task: Some(pb::TaskSpec {
                        fairness_key: key,
                        fairness_weight: weight,
                        priority,
                        payload,
                        dedup_id,
                        delay: delay.map(proto_duration),
                        deadline: None,
                        cost: cost.unwrap_or(0),
                        size: size.unwrap_or(0),
                    }),
                })
                .await
                .map_err(status)?
                .into_inner();
            // Ids are numbered per partition: the partition makes one a task's name in its queue.
            let task = format!("task {} of partition {}", response.task_id, response.partition);
            if response.duplicate {
                println!("not added: {task} holds this dedup id");
            } else {
                let how = if response.sync_matched {
                    " (leased at once: to a waiting worker, or held for the next poll)"
                } else {
                    ""
                };
                println!("added {task}{how}");
            }
            if new_queue {
                eprintln!(
                    "note: queue {queue:?} did not exist; this add created it. If the name is mistyped, the \
                     task waits there: `fairway queue describe --queue {queue}` shows it"
                );
            }
        }
        TaskCommand::Get(args) => return super::task_lookup::get(args).await,
        TaskCommand::Cancel(args) => return super::task_cancel::cancel(args).await,
        TaskCommand::Poll { server, queue, wait, worker, json } => {
            let mut client = connect(&server).await?;
            let response = client
                .poll_task(pb::PollTaskRequest { queue, worker_id: worker, max_wait: Some(proto_duration(wait)) })
                .await
                .map_err(status)?
                .into_inner();
            if json {
                return super::json::print(&response, "fairway.v1.PollTaskResponse");
            }
            match response.task {
                Some(task) => {
                    println!("task_id:      {} (partition {})", task.task_id, task.partition);
                    println!("fairness_key: {:?}", task.fairness_key);
                    println!("priority:     {}", task.priority);
                    println!("attempt:      {}", task.attempt);
                    println!("lease_token:  {}", task.lease_token);
                    println!("lease until:  {}", timestamp(task.lease_deadline));
                    println!("payload:      {}", String::from_utf8_lossy(&task.payload));
                }
                None => println!("no task within {}", duration_serde::format(wait)),
            }
        }
        TaskCommand::Complete { server, lease_token } => {
            let mut client = connect(&server).await?;
            client.complete_task(pb::CompleteTaskRequest { lease_token, result: Vec::new() }).await.map_err(status)?;
            println!("completed");
        }
        TaskCommand::Fail { server, lease_token, message, fatal, retry_after } => {
            let mut client = connect(&server).await?;
            let request = pb::FailTaskRequest {
                lease_token,
                retryable: !fatal,
                message,
                retry_after: retry_after.map(proto_duration),
            };
            let response = client.fail_task(request).await.map_err(status)?.into_inner();
            if response.will_retry {
                println!("will be retried at {}", timestamp(response.next_attempt_at));
            } else {
                println!("moved to the dead letters");
            }
        }
        TaskCommand::Heartbeat { server, lease_token } => {
            let mut client = connect(&server).await?;
            let response = client.heartbeat_task(pb::HeartbeatTaskRequest { lease_token }).await.map_err(status)?;
            println!("lease until {}", timestamp(response.into_inner().lease_deadline));
        }
    }
    Ok(())
}

/// The most bytes `--payload-file` reads: the largest payload a server can
/// be set to take (`limits.max_payload_bytes`); the server holds it to its own.
const MAX_PAYLOAD_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The bytes of `path`, or of standard input for `-`, refused past
/// [`MAX_PAYLOAD_FILE_BYTES`] before they are all read.
fn read_payload(path: &Path) -> anyhow::Result<Vec<u8>> {
    let (name, source): (String, Box<dyn Read>) = if path == Path::new("-") {
        ("standard input".into(), Box::new(std::io::stdin()))
    } else {
        let file =
            std::fs::File::open(path).with_context(|| format!("--payload-file: cannot open {}", path.display()))?;
        (path.display().to_string(), Box::new(file))
    };
    let mut payload = Vec::new();
    source
        .take(MAX_PAYLOAD_FILE_BYTES + 1)
        .read_to_end(&mut payload)
        .with_context(|| format!("--payload-file: cannot read {name}"))?;
    if payload.len() as u64 > MAX_PAYLOAD_FILE_BYTES {
        anyhow::bail!(
            "--payload-file: {name} holds more than {MAX_PAYLOAD_FILE_BYTES} bytes, the most a payload can be"
        );
    }
    Ok(payload)
}

pub(super) fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

/// A timestamp as a local date and how far it is from now ("-" when unset).
fn timestamp(t: Option<prost_types::Timestamp>) -> String {
    times::when(t.as_ref(), times::now_ms())
}

fn level(level: Option<pb::FairLevel>) -> String {
    level.map_or("-".into(), |l| format!("({}, {})", l.pass, l.id))
}

/// ", homed in region R", or nothing when the deployment names no region.
fn homed(home: &str) -> String {
    if home.is_empty() { String::new() } else { format!(", homed in region {home}") }
}

/// Which generation a partition number belongs to, for partitions past the
/// first generation (a forced failover numbers them anew).
fn generation_of(partition: u32) -> String {
    let generation = partition / fairway::store::GENERATION_STRIDE;
    if generation == 0 {
        String::new()
    } else {
        format!(" [generation {generation}, index {}]", fairway::store::partition_index(partition))
    }
}

pub(super) async fn queue(command: QueueCommand) -> anyhow::Result<()> {
    let (server, queue, top, json) = match command {
        QueueCommand::Create { server, queue, partitions, home } => {
            let mut client = connect(&server).await?;
            let response = client
                .create_queue(pb::CreateQueueRequest { queue: queue.clone(), partitions, home })
                .await
                .map_err(status)?
                .into_inner();
            println!("queue {queue}: {} partition(s){}", response.partitions, homed(&response.home));
            return Ok(());
        }
        QueueCommand::Move { server, queue, home, force, abandon_previous } => {
            let mut client = connect(&server).await?;
            let response = client
                .move_queue(pb::MoveQueueRequest { queue: queue.clone(), home, force, abandon_previous })
                .await
                .map_err(status)?
                .into_inner();
            if abandon_previous {
                println!(
                    "queue {queue}: {} partition(s) of generation {} declared lost; the drains close them within a \
                     minute, after a last pass",
                    response.abandoned_partitions,
                    response.generation.saturating_sub(1)
                );
            } else if force {
                println!(
                    "queue {queue}: home is now region {} (generation {}); it serves at once and adds the old home's \
                     tasks as they become readable there",
                    response.home, response.generation
                );
            } else {
                println!(
                    "queue {queue}: home is now region {}; its partitions move there as the old home hands them over",
                    response.home
                );
            }
            return Ok(());
        }
        QueueCommand::DeadLetters(args) => return super::dead_letters::run(args).await,
        QueueCommand::List { server, prefix, limit, json } => {
            return super::queue_settings::list(&server, &prefix, limit, json).await;
        }
        QueueCommand::Pause(args) => return super::queue_settings::pause(args, true).await,
        QueueCommand::Purge(args) => return super::queue_purge::purge(args).await,
        QueueCommand::Resume(args) => return super::queue_settings::pause(args, false).await,
        QueueCommand::Update(args) => return super::queue_settings::update(args).await,
        QueueCommand::Describe { server, queue, top, json } => (server, queue, top, json),
    };
    let mut client = connect(&server).await?;
    let response =
        client.describe_queue(pb::DescribeQueueRequest { queue, top_keys: top }).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&response, "fairway.v1.DescribeQueueResponse");
    }
    print_queue_summary(&response);
    for p in response.partitions {
        println!(
            "partition {}{} ({}, owner {}), range id {}: {} leased, {} delayed",
            p.partition,
            generation_of(p.partition),
            p.state,
            p.owner,
            p.range_id,
            p.leased,
            p.delayed
        );
        println!(
            "  since taken: {} added, {} dispatched, {} completed, {} failed, {} expired",
            p.added, p.dispatched, p.completed, p.failed, p.expired
        );
        println!(
            "  {:>3} {:>8} {:>8} {:>8} {:>7} {:>9} {:>26} {:>26}",
            "pri", "backlog", "disp>ack", "buffered", "at end", "keys", "ack level", "read level"
        );
        for s in &p.subqueues {
            let keys = format!("{}{}", s.tracked_keys, if s.approximate_keys { "+~" } else { "" });
            println!(
                "  {:>3} {:>8} {:>8} {:>8} {:>7} {:>9} {:>26} {:>26}",
                s.priority,
                s.backlog,
                s.dispatched_above_ack,
                s.buffered,
                if s.reader_at_end { "yes" } else { "no" },
                keys,
                level(s.ack_level),
                level(s.read_level)
            );
        }
        let now = times::now_ms();
        for s in p.subqueues.iter().filter(|s| s.oldest_added_at.is_some()) {
            let bound = if s.reader_at_end { "" } else { " at least (tasks not read into memory yet may be older)" };
            let oldest = s.oldest_added_at.as_ref().map_or(0, times::ms);
            println!(
                "  priority {}: the oldest task waiting has waited {}{bound}, since {}",
                s.priority,
                times::span(now - oldest),
                times::when(s.oldest_added_at.as_ref(), now)
            );
        }
        if p.tasks_over_max_wait > 0 {
            println!("  {} waiting past the queue's max_wait", p.tasks_over_max_wait);
        }
        for s in p.subqueues.iter().filter(|s| !s.top_keys.is_empty()) {
            println!(
                "  priority {} top keys (buffered tasks, passes ahead of the ack level, oldest buffered waiting):",
                s.priority
            );
            for k in &s.top_keys {
                let waited = k.oldest_added_at.as_ref().map_or("-".into(), |t| times::span(now - times::ms(t)));
                println!(
                    "    {:<32} {:>8} {:>14} {:>14}",
                    format!("{:?}", k.fairness_key),
                    k.buffered,
                    k.pass_ahead,
                    waited
                );
            }
        }
        for s in p.subqueues.iter().filter(|s| s.parked_keys > 0 || s.parked_tasks > 0) {
            println!(
                "  priority {}: {} keys held at their limits are parked, {} held tasks wait in records",
                s.priority, s.parked_keys, s.parked_tasks
            );
        }
    }
    Ok(())
}

/// What a user asks of a queue first, over its partitions: tasks waiting,
/// running and delayed, the oldest wait, those past `max_wait`, and the
/// polls waiting; the engine's levels follow, per partition.
fn print_queue_summary(response: &pb::DescribeQueueResponse) {
    let parts = &response.partitions;
    let waiting: u64 = parts.iter().flat_map(|p| &p.subqueues).map(|s| s.backlog).sum();
    let running: u64 = parts.iter().map(|p| p.leased).sum();
    let delayed: u64 = parts.iter().map(|p| p.delayed).sum();
    println!(
        "queue {}{}: {waiting} waiting, {running} running{}, {delayed} delayed, in {} partition(s); {} poll(s) waiting",
        response.queue,
        homed(&response.home),
        match response.held_for_polls {
            0 => String::new(),
            held => format!(" ({held} held here for the next poll)"),
        },
        parts.len(),
        response.waiting_pollers
    );
    let now = times::now_ms();
    let oldest =
        parts.iter().flat_map(|p| &p.subqueues).filter_map(|s| s.oldest_added_at.as_ref()).min_by_key(|t| times::ms(t));
    if let Some(oldest) = oldest {
        let exact = parts.iter().flat_map(|p| &p.subqueues).all(|s| s.reader_at_end);
        let bound = if exact { "" } else { " at least" };
        println!(
            "  the oldest task waiting has waited{bound} {}, since {}",
            times::span(now - times::ms(oldest)),
            times::when(Some(oldest), now)
        );
    }
    let over: u64 = parts.iter().map(|p| p.tasks_over_max_wait).sum();
    if over > 0 {
        println!("  {over} waiting past the queue's max_wait: they go to the front of their priority, oldest first");
    }
    super::dispatch_shares::print(response);
    if let Some(settings) = response.settings.as_ref().filter(|s| s.version > 0) {
        println!("  settings stored with the queue (version {}):", settings.version);
        super::queue_settings::print_settings(settings);
    }
}

#[cfg(test)]
mod tests {
    use super::{generation_of, server_url};
    use fairway::store::GENERATION_STRIDE;

    #[test]
    fn a_server_given_as_serve_prints_it_is_reached() {
        assert_eq!(server_url("127.0.0.1:7171", false), "http://127.0.0.1:7171");
        assert_eq!(server_url("node-1:7070", true), "https://node-1:7070");
        assert_eq!(server_url("https://node-1:7070", false), "https://node-1:7070", "a URL stays as given");
    }

    #[test]
    fn describe_names_the_generation_of_renumbered_partitions() {
        assert_eq!(generation_of(3), "", "the first generation keeps its plain numbers");
        assert_eq!(generation_of(GENERATION_STRIDE + 1), " [generation 1, index 1]");
        assert_eq!(generation_of(2 * GENERATION_STRIDE), " [generation 2, index 0]");
    }
}
