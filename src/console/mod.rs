//! The web console `fairway serve` runs beside gRPC: server-rendered pages
//! of the queues, one queue (its last hour charted, each key's share of
//! dispatch beside its target, partitions, pauses), one task, dead
//! letters, schedules and a lister's origins, the nodes and the workers
//! polling them, with the actions pause,
//! resume, redrive, cancel and purge.
//!
//! Invariants:
//! - The console has no rights of its own: every page and action is a call
//!   to this node's gRPC API with the credential the browser logged in
//!   with, so the access table decides, and admin actions are audited, as
//!   for any client.
//! - When the node authenticates clients, no page and no action is served
//!   without a session that logged in; every action is a POST carrying the
//!   session's form token, and a request naming another host than the
//!   console's is refused (no page is reachable through a name an attacker
//!   points at loopback).
//!   The one exception, the charts of a queue's last hour, is read from
//!   this node's memory ([`history`]), and shown only on the queue's page,
//!   after the visitor's DescribeQueue of the queue was answered.
//! - It listens on loopback unless the node authenticates clients, and
//!   beyond loopback with TLS when the node has it ([`ConsoleConfig::address`]);
//!   over TLS its session cookie is sent over TLS only. Sessions are bounded
//!   ([`sessions`]), and so is the history.

mod charts;
mod cluster_pages;
mod config;
pub mod history;
mod pages;
mod routes;
mod schedule_pages;
pub mod sessions;
mod tls_listener;

use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::ConsoleConfig;

use crate::clock::SharedClock;
use crate::cluster::Peers;
use crate::security::{Authenticator, ServerTls};
use history::History;
use sessions::Sessions;

/// One node's console.
pub struct Console {
    sessions: Mutex<Sessions>,
    peers: Peers,
    /// This node's gRPC address, as the console reaches it.
    grpc: String,
    /// How the node authenticates clients, if it does: then pages need a
    /// login, checked by it.
    authenticator: Option<Arc<Authenticator>>,
    /// The `Host` values the console answers to on loopback (a name an
    /// attacker rebinds to loopback is refused); `None` beyond loopback,
    /// where every page needs a login and a rebound name brings no session.
    hosts: Option<Vec<String>>,
    /// Whether it is served over TLS (its cookie then says `Secure`).
    tls: bool,
    clock: SharedClock,
    history: Arc<History>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").field("grpc", &self.grpc).field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

impl Console {
    fn authenticates(&self) -> bool {
        self.authenticator.is_some()
    }

    /// A console on `listener` (over TLS when `tls`) for the node whose
    /// gRPC API `peers` reaches at `grpc`.
    pub fn new(
        listener: &TcpListener,
        tls: bool,
        peers: Peers,
        grpc: std::net::SocketAddr,
        authenticator: Option<Arc<Authenticator>>,
        clock: SharedClock,
        history: Arc<History>,
    ) -> std::io::Result<Console> {
        let local = listener.local_addr()?;
        let port = local.port();
        let hosts = local
            .ip()
            .is_loopback()
            .then(|| ["127.0.0.1", "localhost", "[::1]"].iter().map(|host| format!("{host}:{port}")).collect());
        let grpc = if grpc.ip().is_unspecified() {
            std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), grpc.port())
        } else {
            grpc
        };
        Ok(Console {
            sessions: Mutex::new(Sessions::default()),
            peers,
            grpc: grpc.to_string(),
            authenticator,
            hosts,
            tls,
            clock,
            history,
        })
    }
}

/// Serves `console` on `listener`, over `tls` when given, until `stop`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    console: Arc<Console>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let router = routes::router(console);
    match tls {
        None => axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await,
        Some(tls) => {
            let listener = tls_listener::TlsListener::new(listener, tls)?;
            axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await
        }
    }
}
