//! The console's connections over TLS, with the node's certificate (renewed
//! files served as the gRPC port serves them).
//!
//! Invariant: the accept loop never waits on a client: each handshake runs
//! apart, within [`HANDSHAKE_TIMEOUT`], at most [`MAX_HANDSHAKES`] at once
//! (a connection past it waits for a place), so that clients that connect
//! and say nothing hold up no one but themselves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

use crate::security::ServerTls;
use crate::server::incoming::HANDSHAKE_TIMEOUT;

/// Handshakes in progress at once, at most.
const MAX_HANDSHAKES: usize = 256;

/// Connections handshaken and not yet taken by the server, at most.
const READY: usize = 64;

/// A listener whose connections come out handshaken.
#[derive(Debug)]
pub(super) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener` with what `tls` serves at each accept.
    pub(super) fn new(listener: TcpListener, tls: Arc<ServerTls>) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY);
        let accepting = tokio::spawn(accept(listener, tls, sender));
        Ok(TlsListener { ready, local, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept(listener: TcpListener, tls: Arc<ServerTls>, ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>) {
    let places = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(place) = places.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: let some close.
                tracing::warn!(%error, "the console cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, ready) = (tls.console_acceptor(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    drop(place);
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "a TLS handshake with the console failed"),
                Err(_) => tracing::debug!(%peer, "a TLS handshake with the console timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop ended (its semaphore closed): no more connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
