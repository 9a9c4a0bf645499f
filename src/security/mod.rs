//! What keeps one client from acting as another, or as a node: keys derived
//! from the cluster's secret (lease tokens only their issuer's cluster can
//! make, and proofs that a request comes from a node), TLS on the gRPC port,
//! authentication of principals (API keys, JWTs, client certificates) and
//! the roles granted to them. See `docs/security.md`.

mod access;
mod authn;
mod bearer;
mod config;
pub(crate) mod hex;
mod jwt;
mod keys;
mod secrets;
mod tls;

pub use access::{Caller, Denied, Grant, NodeCall, Permission, Principal, Role, tenant_prefixes};
pub use authn::{API_KEY_PREFIX, AuthError, Authenticator, api_key_hash, new_api_key};
pub use bearer::{AuthChannel, BearerToken};
pub use config::{PrincipalConfig, SecurityConfig};
pub use jwt::{JwtError, JwtVerifier};
pub use keys::{ClusterKeys, NODE_PROOF, NODE_PROOF_VALIDITY_SECS, SECRET_RELOAD_INTERVAL, SIGNING_SWITCH_DELAY};
pub use secrets::{ClusterSecrets, PreviousSecret, SECRET_BYTES};
pub(crate) use tls::{KeyedFile, client_config};
pub use tls::{ServerTls, TlsError, TlsFiles};
