//! Wiring a node together: the store, the queues, the gRPC services; and
//! taking it apart again in a fixed order.
//!
//! Shutdown order: (1) stop accepting connections and answer every parked
//! poll with an empty response; (2) let in-flight requests finish, for at
//! most `shutdown_grace`, then close the connections left; (2b) stop
//! the scheduling rounds and the schedules' firing loop (a round or a look
//! in progress ends first); (3) stop taking
//! partitions; (4) for every partition, finish its queued writes and
//! write its ack levels with no owner (a hand-over); (5) leave the cluster,
//! so that the others take over at once; (6) close the store; (7) stop
//! serving `GET /metrics` (scrapes in progress finish) and push the metrics
//! over OTLP a last time. The metrics endpoint stays up until then, so that
//! the hand-over can be watched, and its last answer has the final counts.

pub mod incoming;
mod local;
pub mod rotation;

use incoming::incoming;

pub use local::LocalServer;

/// The largest message Fairway's own clients decode (kept in `cluster`,
/// where forwarding between nodes needs it too).
pub use crate::cluster::CLIENT_MAX_MESSAGE_BYTES;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::api::{
    Gate, MatchingService, RoutedRuns, RoutedVisits, ScheduleRuns, SchedulerService, SchedulesService, TaskHook,
    VisitOutcomes,
};
use crate::clock::SharedClock;
use crate::cluster::{ClusterConfig, ClusterView, DispatchGate, Heartbeat, Membership, NameTaken, Peers};
use crate::config::{Config, ConfigError, StoreUrl};
use crate::console::Console;
use crate::console::history::{self, History};
use crate::matcher::{Queues, Settings};
use crate::proto::v1::matching_server::MatchingServer;
use crate::proto::v1::scheduler_server::SchedulerServer;
use crate::proto::v1::schedules_server::SchedulesServer;
use crate::schedules::{FiringReport, RunQueue, Schedules, run_firing};
use crate::security::{Authenticator, ClusterKeys, JwtError, SecurityConfig, ServerTls, TlsError};
use crate::store::cassandra::{CassandraStore, ConnectError};
use crate::store::embedded::{EmbeddedStore, OpenError};
use crate::store::schedules::SHARDS;
use crate::store::{SECRET_BYTES, Store, StoreError, Stores};
use crate::telemetry::otlp::OtlpMetrics;
use crate::telemetry::{Exports, ScheduleGauges, TelemetryError};
use crate::visits::{Scheduler, VisitQueue, run_rounds};

/// Why a node could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The embedded store's data directory could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Cassandra could not be reached, or its statements prepared.
    #[error(transparent)]
    Cassandra(#[from] ConnectError),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The gRPC reflection service could not be built.
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Telemetry could not start.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// A listening socket failed.
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    /// The cluster's secret could not be read or stored.
    #[error("the cluster's secret: {0}")]
    Secret(StoreError),
    /// The TLS files cannot be served.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The JWKS file cannot be read.
    #[error(transparent)]
    Jwks(#[from] JwtError),
    /// Another node is live under this node's name.
    #[error(transparent)]
    NameTaken(#[from] NameTaken),
    /// Listening beyond loopback without TLS or without authentication,
    /// and `security.allow_insecure` is not set.
    #[error(
        "refusing to serve on {address} without {missing}: set security.tls_cert and security.tls_key, and \
         [[security.principals]] (docs/security.md), or security.allow_insecure = true to run open anyway"
    )]
    Insecure {
        /// The address listened on.
        address: std::net::SocketAddr,
        /// What is missing.
        missing: &'static str,
    },
}

/// The sockets a node serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The gRPC services.
    pub grpc: TcpListener,
    /// `GET /metrics`, if served (bound by the caller, as `grpc` is, from
    /// `telemetry.metrics_listen`).
    pub metrics: Option<TcpListener>,
    /// The web console, if served (bound by the caller from `[console]`).
    pub console: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    /// gRPC alone.
    fn from(grpc: TcpListener) -> Self {
        Listeners { grpc, metrics: None, console: None }
    }
}

/// Opens the store a URL names. Cassandra is tried again with backoff for up
/// to `cassandra.connect_patience` while it cannot be reached, so that a
/// node may start before its database.
pub async fn open_store(url: &StoreUrl, config: &Config) -> Result<Stores, ServeError> {
    let cassandra = &config.cassandra.in_region(&config.cluster.region);
    match url {
        StoreUrl::Embedded(dir) => Ok(Stores::of(Arc::new(EmbeddedStore::open_with(dir, &config.embedded)?))),
        StoreUrl::Cassandra { contact_point, keyspace } => {
            let connect = || CassandraStore::connect(contact_point, keyspace, cassandra);
            let backoff = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(10))
                .with_total_delay(Some(cassandra.connect_patience))
                .without_max_times();
            let store = connect
                .retry(backoff)
                .when(|e| matches!(e, ConnectError::Unreachable { .. }))
                .notify(|error, wait| tracing::warn!(%error, "retrying in {wait:?}"))
                .await?;
            Ok(Stores::of(Arc::new(store)))
        }
    }
}

/// Serves `fairway.v1.Matching`, gRPC health and reflection on the gRPC
/// listener, and metrics on the metrics listener if there is one, until
/// `shutdown` completes; then shuts down in the order of the module docs. On
/// a shared store (Cassandra) the node joins the cluster first. With
/// `telemetry.otlp_endpoint` set, metrics are pushed there too.
pub async fn serve(
    listeners: impl Into<Listeners>,
    config: &Config,
    stores: Stores,
    clock: SharedClock,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let Stores { tasks: store, visits: visit_store, schedules: schedule_store, leases: lease_store } = stores;
    let Listeners { grpc: listener, metrics, console: console_listener } = listeners.into();
    let mut settings = config.settings();
    let address = node_address(config, &listener);
    settings.node = config.cluster.node_name(&address).to_owned();
    let otlp_endpoint = config.telemetry.otlp_endpoint().map_err(|m| ConfigError::new("telemetry.otlp_endpoint", m))?;
    let otlp = match otlp_endpoint {
        Some(endpoint) => Some(OtlpMetrics::start(&endpoint, config.telemetry.otlp_export_interval, &settings.node)?),
        None => None,
    };
    settings.dispatch_latency_otlp = otlp.as_ref().map(OtlpMetrics::dispatch_latency);
    check_exposure(listener.local_addr()?, metrics.as_ref().map(TcpListener::local_addr).transpose()?, config)?;
    let keys = cluster_keys(store.as_ref()).await?;
    let reload_keys = keys.clone();
    let tls = config.security.tls_files().map(ServerTls::load).transpose()?.map(Arc::new);
    let authenticator = Authenticator::new(&config.security)?.map(Arc::new);
    let gate = Gate::new(authenticator.clone(), keys.clone(), clock.clone());
    let peers = Peers::new(peer_tls(&config.security)?, config.cluster.forward_timeout);
    let node = Node::start(store.clone(), clock.clone(), settings, &address, &config.cluster).await?;
    let queues = node.queues.clone();
    let scheduler = Arc::new(Scheduler::new(visit_store, config.scheduler.clone(), rand::random()));
    let outcomes = Arc::new(VisitOutcomes { scheduler: scheduler.clone(), clock: clock.clone() });
    let schedules = Arc::new(Schedules::new(schedule_store, clock.clone(), config.schedules.clone()));
    let runs = Arc::new(ScheduleRuns { schedules: schedules.clone() });
    let hooks: Vec<Arc<dyn TaskHook>> = vec![outcomes, runs];
    let matching_service = MatchingService::new(queues.clone(), config.limits.clone(), keys, peers, hooks);
    let router = matching_service.router().clone();
    let scheduler_service = SchedulerService {
        scheduler: scheduler.clone(),
        visits: RoutedVisits { router: router.clone() },
        clock: clock.clone(),
        limits: config.limits.clone(),
    };
    let matching = InterceptedService::new(
        MatchingServer::new(matching_service).max_decoding_message_size(config.limits.max_request_bytes),
        gate.clone(),
    );
    let scheduling = InterceptedService::new(
        SchedulerServer::new(scheduler_service).max_decoding_message_size(config.limits.max_request_bytes),
        gate.clone(),
    );
    let runs: Arc<dyn RunQueue> = Arc::new(RoutedRuns { router: router.clone() });
    let schedules_service =
        SchedulesService { schedules: schedules.clone(), runs: runs.clone(), limits: config.limits.clone() };
    let scheduling_recurring = InterceptedService::new(
        SchedulesServer::new(schedules_service).max_decoding_message_size(config.limits.max_request_bytes),
        gate,
    );
    let gauges = Arc::new(ScheduleGauges::new(config.schedules.max_schedule_series));
    let stop_firing = CancellationToken::new();
    let firing = config.schedules.firing.then(|| {
        let view = queues.view().clone();
        let shards = Arc::new(move || fired_shards(&view));
        let (gauges, clock) = (gauges.clone(), clock.clone());
        let report = Arc::new(move |look: &FiringReport| gauges.record(look, clock.now_ms()));
        tokio::spawn(run_firing(schedules, runs, shards, report, stop_firing.clone()))
    });
    let stop_console = CancellationToken::new();
    let console = match console_listener {
        Some(console_listener) => {
            let peers = Peers::new(peer_tls(&config.security)?, config.cluster.forward_timeout);
            let grpc = listener.local_addr()?;
            let history = Arc::new(History::new(Duration::from_secs(3600), config.console.chart_interval));
            let recording = history::record(queues.clone(), history.clone(), clock.clone(), stop_console.clone());
            tokio::spawn(recording);
            let console = Console::new(
                &console_listener,
                tls.is_some(),
                peers,
                grpc,
                authenticator.clone(),
                clock.clone(),
                history,
            )?;
            let serving = crate::console::serve(console_listener, tls.clone(), Arc::new(console), stop_console.clone());
            Some(tokio::spawn(serving))
        }
        None => None,
    };

    let stop_rounds = CancellationToken::new();
    let rounds = config.scheduler.rounds.then(|| {
        let visits: Arc<dyn VisitQueue> = Arc::new(RoutedVisits { router });
        // Held under the name the cluster's membership knows this node by.
        let (node, region) = (queues.view().node().to_owned(), config.cluster.region.clone());
        tokio::spawn(run_rounds(scheduler, visits, clock, lease_store, node, region, stop_rounds.clone()))
    });
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<MatchingServer<MatchingService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let exports = Exports::start(queues.clone(), gauges.clone(), metrics, otlp);
    let stop_reloads = CancellationToken::new();
    tokio::spawn(reload_cluster_secrets(
        store.clone(),
        reload_keys,
        config.security.secret_reload_interval,
        stop_reloads.clone(),
    ));
    let jwks = authenticator.filter(|a| a.jwt().is_some());
    if tls.is_some() || jwks.is_some() {
        let interval = config.security.tls_reload_interval;
        tokio::spawn(reload_security_files(tls.clone(), jwks, interval, stop_reloads.clone()));
    }

    let stop_queues = queues.clone();
    let (draining, closing) = (CancellationToken::new(), CancellationToken::new());
    let stopping = {
        let draining = draining.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: answering parked polls");
            health_reporter.set_not_serving::<MatchingServer<MatchingService>>().await;
            stop_queues.stop_polls();
            draining.cancel();
        }
    };
    let serving = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .http2_keepalive_interval(Some(config.limits.keepalive_interval))
        .http2_keepalive_timeout(Some(config.limits.keepalive_timeout))
        .trace_fn(request_span)
        .layer(tower_layer::layer_fn(incoming::CountRequests::new))
        .add_service(health)
        .add_service(reflection)
        .add_service(matching)
        .add_service(scheduling)
        .add_service(scheduling_recurring)
        .serve_with_incoming_shutdown(incoming(listener, tls.clone(), &config.limits, closing.clone()), stopping);
    tokio::pin!(serving);
    let grace = config.shutdown_grace;
    let served = tokio::select! {
        served = &mut serving => served,
        () = async { draining.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(?grace, "shutting down: requests still open after shutdown_grace; closing their connections");
            closing.cancel();
            serving.await
        }
    };
    stop_reloads.cancel();
    stop_console.cancel();
    if let Some(console) = console {
        match tokio::time::timeout(grace, console).await {
            Ok(Ok(Err(error))) => tracing::warn!(%error, "the console stopped with an error"),
            Err(_) => tracing::warn!(?grace, "the console's requests outlasted shutdown_grace; left behind"),
            Ok(_) => {}
        }
    }
    stop_rounds.cancel();
    stop_firing.cancel();
    if let Some(rounds) = rounds {
        let _ = rounds.await;
    }
    if let Some(firing) = firing {
        let _ = firing.await;
    }
    tracing::info!("shutting down: flushing writes and ack levels, handing partitions over");
    node.stop().await;
    if let Err(error) = store.close().await {
        tracing::warn!(%error, "closing the store");
    }
    tracing::info!("shutting down: stopping the metrics exports");
    exports.stop().await;
    tracing::info!("stopped");
    Ok(served?)
}

/// The schedule shards this node fires: those the rendezvous assignment
/// over the live nodes gives it (all of them on a single node).
fn fired_shards(view: &ClusterView) -> Vec<u32> {
    let live = view.live();
    let shards = crate::model::QueueName::new_unchecked("schedules");
    crate::cluster::assignment::owners(&shards, 0..SHARDS, &live)
        .into_iter()
        .zip(0..)
        .filter(|(owner, _)| owner.as_deref() == Some(view.node()))
        .map(|(_, shard)| shard)
        .collect()
}

/// The keys derived from the cluster's secrets, which the first node to ask
/// stores; tried for a minute while the store does not answer.
async fn cluster_keys(store: &dyn Store) -> Result<ClusterKeys, ServeError> {
    let candidate: [u8; SECRET_BYTES] = rand::random();
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_total_delay(Some(Duration::from_secs(60)))
        .without_max_times();
    let read = || store.cluster_secrets(&candidate);
    let secrets = read
        .retry(backoff)
        .when(|e| !matches!(e, StoreError::Corrupt(_) | StoreError::Invalid(_)))
        .notify(|error, wait| tracing::warn!(%error, "reading the cluster's secret: retrying in {wait:?}"))
        .await
        .map_err(ServeError::Secret)?;
    Ok(ClusterKeys::from_secrets(&secrets))
}

/// Reads the cluster's secrets again every `interval`, until `stop`, and
/// installs them in `keys` (shared by every part of the node that signs or
/// checks): a rotation reaches this node within `interval` of reaching its
/// store replicas. A failed read keeps the keys it had.
async fn reload_cluster_secrets(store: Arc<dyn Store>, keys: ClusterKeys, interval: Duration, stop: CancellationToken) {
    every(interval, stop, || async {
        // The secret exists by now: the candidate is never stored.
        match store.cluster_secrets(&rand::random()).await {
            Ok(secrets) if keys.install(&secrets) => {
                let accepted_until = secrets.previous.as_ref().map(|p| p.accepted_until_unix_ms);
                tracing::info!(?accepted_until, "the cluster's secret was rotated: new keys installed");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the cluster's secrets; keeping the keys this node has"),
        }
    })
    .await;
}

/// Reads the TLS files and the JWKS file again every `interval`, until `stop`.
async fn reload_security_files(
    tls: Option<Arc<ServerTls>>,
    jwks: Option<Arc<Authenticator>>,
    interval: Duration,
    stop: CancellationToken,
) {
    every(interval, stop, || async {
        match tls.as_ref().map(|tls| tls.reload()) {
            Some(Ok(true)) => tracing::info!("TLS files changed: new connections get them"),
            Some(Err(error)) => tracing::warn!(%error, "TLS files cannot be served; keeping the last good ones"),
            Some(Ok(false)) | None => {}
        }
        match jwks.as_ref().and_then(|a| a.jwt()).map(|jwt| jwt.reload()) {
            Some(Ok(true)) => tracing::info!("the JWKS file changed: its keys check JWTs from now on"),
            Some(Err(error)) => tracing::warn!(%error, "the JWKS file cannot be read; keeping the last good keys"),
            Some(Ok(false)) | None => {}
        }
    })
    .await;
}

/// Refuses to serve beyond loopback what anyone could use there, unless the
/// operator says so (then warns): gRPC on `grpc` without TLS and
/// authentication (`security.allow_insecure`), and `/metrics` on `metrics`,
/// which has no authentication at all (`telemetry.metrics_allow_insecure`).
fn check_exposure(grpc: SocketAddr, metrics: Option<SocketAddr>, config: &Config) -> Result<(), ServeError> {
    let security = &config.security;
    let missing = match (security.tls_files().is_some(), security.authenticates()) {
        (true, true) => None,
        (false, true) => Some("TLS"),
        (true, false) => Some("authentication"),
        (false, false) => Some("TLS and authentication"),
    };
    if let Some(missing) = missing
        && !grpc.ip().is_loopback()
    {
        if !security.allow_insecure {
            return Err(ServeError::Insecure { address: grpc, missing });
        }
        tracing::warn!(
            address = %grpc,
            "SERVING WITHOUT {} ON A NON-LOOPBACK ADDRESS (security.allow_insecure = true): \
             anyone who reaches {grpc} can read, add, take and delete tasks",
            missing.to_uppercase()
        );
    }
    if let Some(address) = metrics
        && !address.ip().is_loopback()
    {
        if !config.telemetry.metrics_allow_insecure {
            let message = format!(
                "is {address}, beyond loopback, and /metrics has no authentication: anyone who reaches it would \
                 read every queue's name and counts; listen on loopback (scrape through a proxy that \
                 authenticates), or set telemetry.metrics_allow_insecure = true to serve it there anyway"
            );
            return Err(ConfigError::new("telemetry.metrics_listen", message).into());
        }
        tracing::warn!(
            %address,
            "SERVING /metrics WITHOUT AUTHENTICATION ON A NON-LOOPBACK ADDRESS \
             (telemetry.metrics_allow_insecure = true): anyone who reaches {address} can read every queue's name \
             and counts"
        );
    }
    Ok(())
}

/// How this node calls the others when they serve TLS: trusting
/// `security.tls_peer_ca` (else `tls_client_ca`, else the node's own
/// `tls_cert` chain), and presenting its own certificate when clients must.
fn peer_tls(security: &SecurityConfig) -> Result<Option<ClientTlsConfig>, TlsError> {
    let Some(files) = security.tls_files() else { return Ok(None) };
    let read = |key: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| TlsError::Read { key, path: path.to_owned(), message: e.to_string() })
    };
    let (ca_key, ca_path) = match (&security.tls_peer_ca, &files.client_ca) {
        (peer_ca, _) if !peer_ca.is_empty() => ("security.tls_peer_ca", std::path::PathBuf::from(peer_ca)),
        (_, Some(client_ca)) => ("security.tls_client_ca", client_ca.clone()),
        (_, None) => ("security.tls_cert", files.cert.clone()),
    };
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca_key, &ca_path)?));
    if files.client_ca.is_some() {
        let identity =
            Identity::from_pem(read("security.tls_cert", &files.cert)?, read("security.tls_key", &files.key)?);
        tls = tls.identity(identity);
    }
    Ok(Some(tls))
}

/// Where the other nodes reach this one: `cluster.advertise`, else the
/// address `listener` is bound to.
fn node_address(config: &Config, listener: &TcpListener) -> String {
    match (config.cluster.advertise.as_str(), listener.local_addr()) {
        ("", Ok(address)) => address.to_string(),
        (advertised, _) => advertised.to_owned(),
    }
}

/// The span of one gRPC request, named by its method; the handlers record
/// the queue.
fn request_span(request: &tonic::codegen::http::Request<()>) -> tracing::Span {
    tracing::info_span!("grpc", method = request.uri().path(), queue = tracing::field::Empty)
}

/// The queues of this node and, on a shared store, the loops that keep its
/// membership and its partitions up to date.
struct Node {
    queues: Arc<Queues>,
    membership: Option<Arc<Membership>>,
    loops: CancellationToken,
    tasks: JoinSet<()>,
}

impl Node {
    /// Starts the node; on a shared store it first joins the cluster, which
    /// it refuses to do under the name of another live node.
    async fn start(
        store: Arc<dyn Store>,
        clock: SharedClock,
        settings: Settings,
        address: &str,
        config: &ClusterConfig,
    ) -> Result<Node, NameTaken> {
        let mut tasks = JoinSet::new();
        let loops = CancellationToken::new();
        if !store.is_shared() {
            let view = Arc::new(ClusterView::single(settings.node.clone()).in_region(
                &config.region,
                config.failover,
                config.failback_after,
            ));
            let gate = Arc::new(DispatchGate::always_open());
            let queues = Arc::new(Queues::in_cluster(store.clone(), clock, settings, view, gate));
            tasks.spawn(rebalance_loop(queues.clone(), config.rebalance_interval, loops.clone()));
            tasks.spawn(listing_loop(queues.clone(), config.rebalance_interval, loops.clone()));
            return Ok(Node { queues, membership: None, loops, tasks });
        }
        let view = Arc::new(
            ClusterView::shared(settings.node.clone(), config.member_timeout)
                .in_region(&config.region, config.failover, config.failback_after)
                .reached_at(address),
        );
        let gate = Arc::new(DispatchGate::closed());
        let membership =
            Arc::new(Membership::new(view.clone(), gate.clone(), store.clone(), clock.clone(), config.clone()));
        membership.check_name().await?;
        if let Err(error) = membership.beat().await {
            tracing::warn!(%error, "first heartbeat failed; handing out nothing until one succeeds");
        }
        tracing::info!(
            node = view.node(),
            address = view.address(),
            region = view.region(),
            live = ?view.live(),
            "joined the cluster"
        );
        let queues = Arc::new(Queues::in_cluster(store, clock, settings, view, gate));
        tasks.spawn(heartbeat_loop(membership.clone(), queues.clone(), config.heartbeat_interval, loops.clone()));
        tasks.spawn(rebalance_loop(queues.clone(), config.rebalance_interval, loops.clone()));
        tasks.spawn(listing_loop(queues.clone(), config.rebalance_interval, loops.clone()));
        Ok(Node { queues, membership: Some(membership), loops, tasks })
    }

    /// Stops taking partitions, hands over every partition it holds, then
    /// leaves the cluster, so that others take over at once.
    async fn stop(mut self) {
        self.loops.cancel();
        while self.tasks.join_next().await.is_some() {}
        self.queues.close().await;
        if let Some(membership) = &self.membership
            && let Err(error) = membership.leave().await
        {
            tracing::warn!(%error, "could not leave the cluster; the others take over after the member timeout");
        }
    }
}

/// Runs `step` every `interval` until `stop`; a slow step delays the next.
async fn every<F: Future<Output = ()>>(interval: Duration, stop: CancellationToken, mut step: impl FnMut() -> F) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => step().await,
            _ = stop.cancelled() => return,
        }
    }
}

async fn heartbeat_loop(membership: Arc<Membership>, queues: Arc<Queues>, interval: Duration, stop: CancellationToken) {
    every(interval, stop, || async {
        match membership.beat().await {
            Ok(Heartbeat::Fresh) => {}
            Ok(Heartbeat::AfterLapse) => {
                tracing::warn!("this node's heartbeat lapsed: others may own its partitions now");
                queues.abandon_all().await;
            }
            Err(error) => tracing::warn!(%error, "heartbeat failed"),
        }
    })
    .await;
}

/// Claims partitions of the queues opened here; apart from the listing of
/// queues, which may wait out the store's timeout (see
/// [`Queues::claim_opened`]).
async fn rebalance_loop(queues: Arc<Queues>, interval: Duration, stop: CancellationToken) {
    every(interval, stop, || queues.claim_opened()).await;
}

/// Opens the queues other nodes created that have partitions for this one.
async fn listing_loop(queues: Arc<Queues>, interval: Duration, stop: CancellationToken) {
    every(interval, stop, || async {
        if let Err(error) = queues.open_listed().await {
            tracing::warn!(%error, "could not list the queues");
        }
    })
    .await;
}

/// The most requests one client connection carries at once (HTTP/2
/// `SETTINGS_MAX_CONCURRENT_STREAMS`); a client's further requests wait in
/// the client for a free stream, they are not refused.
///
/// Why a bound at all: h2 closes a connection (GOAWAY `ENHANCE_YOUR_CALM`,
/// "too_many_data_frames") once the small DATA frames it holds unread cost
/// more than half the connection window, each counted as 256 bytes less its
/// payload. A unary request is one such frame until its handler reads it, so
/// with no bound a burst of small requests on one connection (64 workers
/// completing 256 tasks each) closed it, and every request on it failed
/// with a broken pipe.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// The HTTP/2 connection flow-control window (hyper's default, set here
/// because h2's budget of small DATA frames is half of it).
const CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;

const _: () = assert!(MAX_CONCURRENT_STREAMS as usize * 256 <= CONNECTION_WINDOW_BYTES as usize / 2);

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    /// `/metrics` has no authentication: beyond loopback only on the
    /// operator's word, as gRPC without TLS and authentication.
    #[test]
    fn metrics_are_served_beyond_loopback_only_when_the_operator_says_so() {
        let grpc = address("127.0.0.1:7070");
        let mut config = Config::default();
        for loopback in ["127.0.0.1:9464", "[::1]:9464"] {
            check_exposure(grpc, Some(address(loopback)), &config).expect(loopback);
        }
        check_exposure(grpc, None, &config).expect("no metrics served");
        for beyond in ["0.0.0.0:9464", "10.0.0.5:9464", "[::]:9464"] {
            let Err(ServeError::Config(refused)) = check_exposure(grpc, Some(address(beyond)), &config) else {
                panic!("{beyond} was not refused");
            };
            assert_eq!(refused.key, "telemetry.metrics_listen", "{refused}");
            assert!(refused.message.contains("set telemetry.metrics_allow_insecure = true"), "{refused}");
        }
        config.telemetry.metrics_allow_insecure = true;
        check_exposure(grpc, Some(address("0.0.0.0:9464")), &config).expect("the operator said so");

        let refused = check_exposure(address("0.0.0.0:7070"), None, &config);
        assert!(matches!(refused, Err(ServeError::Insecure { missing: "TLS and authentication", .. })), "{refused:?}");
        config.security.allow_insecure = true;
        check_exposure(address("0.0.0.0:7070"), None, &config).expect("the operator said so");
    }
}
