//! What keeps one client from acting as another, or as a node: keys derived
//! from the cluster's secret (lease tokens only their issuer's cluster can
//! make, and proofs that a request comes from a node), and TLS on the gRPC
//! port. See `docs/security.md`.

mod config;
mod keys;
mod tls;

pub use config::SecurityConfig;
pub use keys::{ClusterKeys, NODE_PROOF};
pub use tls::{ServerTls, TlsError, TlsFiles};
