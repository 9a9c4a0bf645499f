use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::proto::v1::matching_client::MatchingClient;

/// gRPC metadata on an AddTask one node forwards to another: the partition
/// the task must go to.
pub const FORWARDED_PARTITION: &str = "fairway-partition";
/// gRPC metadata on a request one node forwards to another with no partition
/// named: the receiver serves it from its own partitions only.
pub const FORWARDED: &str = "fairway-forwarded";

/// Clients of the other nodes, connected lazily and kept; over TLS when the
/// nodes serve TLS.
#[derive(Debug, Default)]
pub struct Peers {
    clients: Mutex<HashMap<String, MatchingClient<Channel>>>,
    tls: Option<ClientTlsConfig>,
}

impl Peers {
    /// Clients that call the other nodes over TLS with `tls`, or in plain
    /// text.
    pub fn new(tls: Option<ClientTlsConfig>) -> Peers {
        Peers { clients: Mutex::default(), tls }
    }

    /// A client of the node at `address`.
    pub fn client(&self, address: &str) -> Result<MatchingClient<Channel>, tonic::Status> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(address) {
            return Ok(client.clone());
        }
        let bad_address = |e: &dyn std::fmt::Display| tonic::Status::internal(format!("peer address {address:?}: {e}"));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| bad_address(&e))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| bad_address(&e))?;
        }
        let client = MatchingClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(crate::server::CLIENT_MAX_MESSAGE_BYTES);
        clients.insert(address.to_owned(), client.clone());
        Ok(client)
    }
}
