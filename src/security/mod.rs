//! What keeps one client from acting as another, or as a node: keys derived
//! from the cluster's secret (lease tokens only their issuer's cluster can
//! make, and proofs that a request comes from a node). See `docs/security.md`.

mod keys;

pub use keys::{ClusterKeys, NODE_PROOF};
