//! What a handler can learn of its request's connection ([`ConnInfo`], a
//! request extension the server's accept loop makes for each connection),
//! and the count of the requests in progress on it.
//!
//! Invariant: a connection's count of requests in progress goes up once for
//! each request and down once when that request's [`InProgress`] is dropped,
//! so that it is zero only when nothing is in progress on the connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls_pki_types::CertificateDer;
use tokio::time::Instant;

/// What a handler can learn of its request's connection (a request
/// extension).
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// The certificate the client presented (mutual TLS), leaf first.
    pub client_certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// The requests in progress on the connection (counted by the server's
    /// `CountRequests`).
    pub(crate) requests: Option<Arc<Requests>>,
}

/// The requests in progress on one connection, and since when it has had
/// none.
#[derive(Debug)]
pub(crate) struct Requests {
    /// (requests in progress, when the last one ended or the connection
    /// was made)
    state: Mutex<(usize, Instant)>,
}

/// One request in progress, counted until dropped.
#[derive(Debug)]
pub(crate) struct InProgress(Arc<Requests>);

impl Requests {
    pub(crate) fn new() -> Requests {
        Requests { state: Mutex::new((0, Instant::now())) }
    }

    pub(crate) fn begin(self: &Arc<Self>) -> InProgress {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        InProgress(self.clone())
    }

    /// Since when no request has been in progress, if none is.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let (in_progress, since) = *self.state.lock().unwrap_or_else(|p| p.into_inner());
        (in_progress == 0).then_some(since)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = (state.0 - 1, Instant::now());
    }
}
