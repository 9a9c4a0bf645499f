//! A server in this process on a free port of the loopback interface, for
//! the tests and the demo: the same `serve` as `fairway serve`, stopped in
//! its usual order.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{Listeners, ServeError, serve};
use crate::clock::SharedClock;
use crate::config::{Config, ConfigError};
use crate::store::Stores;

/// A running server; [`LocalServer::stop`] shuts it down and waits for it.
/// Dropped, it is told to shut down, and nobody waits.
#[derive(Debug)]
pub struct LocalServer {
    /// Where it serves gRPC.
    pub addr: SocketAddr,
    /// Where it serves `GET /metrics`, when `telemetry.metrics_listen` is set
    /// (port 0 there: a free port).
    pub metrics_addr: Option<SocketAddr>,
    shutdown: DropGuard,
    task: JoinHandle<Result<(), ServeError>>,
}

impl LocalServer {
    /// Serves `stores` with `config` (its `listen` is not used), reading
    /// time from `clock`.
    pub async fn start(config: &Config, stores: Stores, clock: SharedClock) -> Result<LocalServer, ServeError> {
        let grpc = TcpListener::bind("127.0.0.1:0").await?;
        let addr = grpc.local_addr()?;
        let metrics_listen =
            config.telemetry.metrics_listen().map_err(|m| ConfigError::new("telemetry.metrics_listen", m))?;
        let metrics = match metrics_listen {
            Some(address) => Some(TcpListener::bind(address).await?),
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(TcpListener::local_addr).transpose()?;
        let shutdown = CancellationToken::new();
        let stopped = shutdown.clone().cancelled_owned();
        let config = config.clone();
        let task = tokio::spawn(async move {
            serve(Listeners { grpc, metrics, console: None }, &config, stores, clock, stopped).await
        });
        Ok(LocalServer { addr, metrics_addr, shutdown: shutdown.drop_guard(), task })
    }

    /// Shuts the server down in its usual order and waits until it has stopped.
    pub async fn stop(self) -> Result<(), ServeError> {
        let LocalServer { shutdown, task, .. } = self;
        drop(shutdown);
        match task.await {
            Ok(served) => served,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
}
