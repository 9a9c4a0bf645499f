//! Section `[security]` of the config: TLS on the gRPC port.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::TlsFiles;
use crate::model::ValidationError;

/// Section `[security]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// The server's certificate chain, PEM, leaf first; empty: no TLS.
    pub tls_cert: String,
    /// The private key of `tls_cert`, PEM.
    pub tls_key: String,
    /// The CA, PEM, that signs the certificates clients must present
    /// (mutual TLS); empty: clients present none. Nodes present theirs to
    /// each other too (`tls_cert`, which must then allow client use).
    pub tls_client_ca: String,
    /// The CA, PEM, that nodes trust when they call each other over TLS;
    /// empty: `tls_client_ca`, else the system's roots are not used and
    /// forwarding needs it.
    pub tls_peer_ca: String,
    /// How often the TLS files are read again; a change is served to new
    /// connections.
    #[serde(with = "crate::config::duration_serde")]
    pub tls_reload_interval: Duration,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            tls_peer_ca: String::new(),
            tls_reload_interval: Duration::from_secs(60),
        }
    }
}

impl SecurityConfig {
    /// Checks the section alone; the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.tls_cert.is_empty() != self.tls_key.is_empty() {
            return Err(ValidationError::new(
                if self.tls_cert.is_empty() { "security.tls_cert" } else { "security.tls_key" },
                "is empty; security.tls_cert and security.tls_key go together",
            ));
        }
        if self.tls_cert.is_empty() && !(self.tls_client_ca.is_empty() && self.tls_peer_ca.is_empty()) {
            return Err(ValidationError::new(
                if self.tls_client_ca.is_empty() { "security.tls_peer_ca" } else { "security.tls_client_ca" },
                "is set without security.tls_cert: TLS is off",
            ));
        }
        if self.tls_reload_interval < Duration::from_secs(1) {
            return Err(ValidationError::new("security.tls_reload_interval", "must be at least 1s"));
        }
        Ok(())
    }

    /// The server's TLS files, if TLS is on.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        (!self.tls_cert.is_empty()).then(|| TlsFiles {
            cert: PathBuf::from(&self.tls_cert),
            key: PathBuf::from(&self.tls_key),
            client_ca: (!self.tls_client_ca.is_empty()).then(|| PathBuf::from(&self.tls_client_ca)),
        })
    }
}
