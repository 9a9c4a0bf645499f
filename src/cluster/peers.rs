//! Clients of the other nodes, for requests one node forwards to another,
//! and the metadata such a request carries.
//!
//! Invariant: a client is made once per peer address and kept, for at most
//! [`MAX_PEER_CLIENTS`] addresses (the least recently used goes first: nodes
//! restarted under new addresses leave old ones behind); a forwarded
//! request never waits without end (see [`Peers`]); an address that makes
//! no client is this module's own error ([`PeerError`]), which the API maps
//! to a status.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::proto::v1::matching_client::MatchingClient;

/// The largest message Fairway's own clients (the CLI, `fairway worker`,
/// `fairway-lab bench`, forwarding between nodes) decode: any PollTasks response
/// a valid config allows (`limits.max_poll_response_bytes` is at most
/// 256 MiB; one task, at most 64 MiB of payload, is always given).
pub const CLIENT_MAX_MESSAGE_BYTES: usize = 256 << 20;

/// gRPC metadata on an AddTask one node forwards to another: the partition
/// the task must go to.
pub const FORWARDED_PARTITION: &str = "fairway-partition";
/// gRPC metadata on a request one node forwards to another with no partition
/// named: the receiver serves it from its own partitions only.
pub const FORWARDED: &str = "fairway-forwarded";

/// The most peer addresses whose clients are kept.
pub(super) const MAX_PEER_CLIENTS: usize = 256;

/// Why no client of a peer could be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PeerError {
    /// The address (or this node's TLS settings for it) makes no endpoint.
    #[error("peer address {address:?}: {error}")]
    BadAddress {
        /// The peer's address, as the cluster view gives it.
        address: String,
        /// What was wrong with it.
        error: String,
    },
}

/// Clients of the other nodes, connected lazily and kept; over TLS when the
/// nodes serve TLS.
///
/// Invariant: no call to another node waits without end. A forwarded
/// request is given up after [`Peers::deadline`], and a connection whose
/// peer stops answering HTTP/2 pings is closed, so that a paused or cut-off
/// node costs its callers a bounded wait.
#[derive(Debug)]
pub struct Peers {
    /// Each address's client, and when it was last asked for (a count).
    clients: Mutex<Clients>,
    /// At most this many clients are kept.
    capacity: usize,
    tls: Option<ClientTlsConfig>,
    /// `cluster.forward_timeout`.
    timeout: Duration,
}

impl Default for Peers {
    fn default() -> Self {
        Peers::new(None, super::ClusterConfig::default().forward_timeout)
    }
}

/// Whether nothing listens at `address`: a connection to it is refused. No
/// answer within `within`, or an address that does not resolve, is not a
/// refusal: a paused or cut-off node answers nothing, and only its
/// heartbeat tells whether it is dead.
pub async fn refuses_connections(address: &str, within: Duration) -> bool {
    match tokio::time::timeout(within, tokio::net::TcpStream::connect(address)).await {
        Ok(Err(error)) => error.kind() == std::io::ErrorKind::ConnectionRefused,
        Ok(Ok(_)) | Err(_) => false,
    }
}

#[derive(Debug, Default)]
struct Clients {
    by_address: HashMap<String, (Channel, u64)>,
    uses: u64,
}

impl Peers {
    /// Clients that call the other nodes over TLS with `tls`, or in plain
    /// text, and give up on a request `timeout` after the wait it asks for.
    pub fn new(tls: Option<ClientTlsConfig>, timeout: Duration) -> Peers {
        Peers { clients: Mutex::default(), capacity: MAX_PEER_CLIENTS, tls, timeout }
    }

    /// The same, keeping at most `capacity` clients (at least one).
    pub fn keeping(self, capacity: usize) -> Peers {
        Peers { capacity: capacity.max(1), ..self }
    }

    /// How long to wait for the answer to a request forwarded with `wait`
    /// (a poll's wait; zero for every other request).
    pub fn deadline(&self, wait: Duration) -> Duration {
        wait.saturating_add(self.timeout)
    }

    /// A client of the node at `address`.
    pub fn client(&self, address: &str) -> Result<MatchingClient<Channel>, PeerError> {
        Ok(MatchingClient::new(self.channel(address)?).max_decoding_message_size(CLIENT_MAX_MESSAGE_BYTES))
    }

    /// The channel to the node at `address`, for a client of any service.
    pub fn channel(&self, address: &str) -> Result<Channel, PeerError> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients.uses += 1;
        let now = clients.uses;
        if let Some((channel, used)) = clients.by_address.get_mut(address) {
            *used = now;
            return Ok(channel.clone());
        }
        let bad_address =
            |e: &dyn std::fmt::Display| PeerError::BadAddress { address: address.to_owned(), error: e.to_string() };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| bad_address(&e))?
            .connect_timeout(Duration::from_secs(2))
            .http2_keep_alive_interval(self.timeout)
            .keep_alive_timeout(self.timeout)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| bad_address(&e))?;
        }
        let channel = endpoint.connect_lazy();
        if clients.by_address.len() >= self.capacity {
            // The least recently used goes; a call still holding its client
            // finishes on it.
            let oldest = clients.by_address.iter().min_by_key(|(_, (_, used))| *used).map(|(a, _)| a.clone());
            if let Some(oldest) = oldest {
                clients.by_address.remove(&oldest);
            }
        }
        clients.by_address.insert(address.to_owned(), (channel.clone(), now));
        Ok(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clients_are_kept_for_a_bounded_number_of_addresses_the_least_recently_used_going_first() {
        let peers = Peers::default().keeping(2);
        peers.client("127.0.0.1:1").unwrap();
        peers.client("127.0.0.1:2").unwrap();
        peers.client("127.0.0.1:1").unwrap();
        peers.client("127.0.0.1:3").unwrap();
        let kept = peers.clients.lock().unwrap();
        let mut addresses: Vec<&str> = kept.by_address.keys().map(String::as_str).collect();
        addresses.sort();
        assert_eq!(addresses, ["127.0.0.1:1", "127.0.0.1:3"], "the one not used since went");
    }

    #[tokio::test]
    async fn many_addresses_over_time_keep_at_most_the_bound() {
        let peers = Peers::default();
        for port in 1..=(MAX_PEER_CLIENTS as u16 + 50) {
            peers.client(&format!("10.0.0.1:{port}")).unwrap();
        }
        assert_eq!(peers.clients.lock().unwrap().by_address.len(), MAX_PEER_CLIENTS);
    }
}
