//! Section `[security]` of the config: TLS on the gRPC port, the
//! principals and their credentials, and whether a server may run without
//! them on an address other than loopback.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::TlsFiles;
use super::access::Grant;
use crate::model::ValidationError;

/// The longest principal name, in bytes.
const MAX_PRINCIPAL_NAME_BYTES: usize = 128;

/// One principal of `[[security.principals]]` and the credentials that
/// authenticate it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// The name logs and errors give it.
    pub name: String,
    /// The SHA-256 (hex) of each of its API keys (`fairway auth key
    /// create` prints a key and its hash); several while one is rotated.
    #[serde(default)]
    pub api_key_sha256: Vec<String>,
    /// The common name of its client certificate (mutual TLS).
    #[serde(default)]
    pub tls_common_name: Option<String>,
    /// The `sub` claim of its JWTs.
    #[serde(default)]
    pub jwt_subject: Option<String>,
    /// What it may do.
    pub grants: Vec<Grant>,
}

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
    #[serde(with = "crate::clock::duration_serde")]
    pub tls_reload_interval: Duration,
    /// How often a node reads the cluster's secrets again, so that a
    /// rotation (`fairway auth rotate`) reaches it without a restart; at
    /// most [`SECRET_RELOAD_INTERVAL`](crate::security::SECRET_RELOAD_INTERVAL)
    /// (10 s), which the rotation's timing assumes.
    #[serde(with = "crate::clock::duration_serde")]
    pub secret_reload_interval: Duration,
    /// Who may call, and what each may do; empty: anyone may do anything
    /// (authentication is off).
    pub principals: Vec<PrincipalConfig>,
    /// A JWKS file (JSON) whose keys sign the JWTs accepted; read again
    /// every `tls_reload_interval`. Empty: JWTs are not accepted.
    pub jwt_jwks: String,
    /// The `iss` claim JWTs must carry.
    pub jwt_issuer: String,
    /// The `aud` claim JWTs must carry.
    pub jwt_audience: String,
    /// Lets a server listen on an address other than loopback without TLS
    /// and authentication (it warns at start). Off: such a server refuses
    /// to start.
    pub allow_insecure: bool,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            tls_peer_ca: String::new(),
            tls_reload_interval: Duration::from_secs(60),
            secret_reload_interval: crate::security::SECRET_RELOAD_INTERVAL,
            principals: Vec::new(),
            jwt_jwks: String::new(),
            jwt_issuer: String::new(),
            jwt_audience: String::new(),
            allow_insecure: false,
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
        let most = crate::security::SECRET_RELOAD_INTERVAL;
        if self.secret_reload_interval.is_zero() || self.secret_reload_interval > most {
            return Err(ValidationError::new(
                "security.secret_reload_interval",
                format!("is {:?}; it must be more than 0 and at most {most:?}", self.secret_reload_interval),
            ));
        }
        if !self.jwt_jwks.is_empty() {
            for (key, value) in
                [("security.jwt_issuer", &self.jwt_issuer), ("security.jwt_audience", &self.jwt_audience)]
            {
                if value.is_empty() {
                    return Err(ValidationError::new(key, "is empty; security.jwt_jwks needs it"));
                }
            }
        }
        self.validate_principals()
    }

    /// Principals: named once, each credential mapped to one of them.
    fn validate_principals(&self) -> Result<(), ValidationError> {
        let mut names = HashSet::new();
        let mut credentials = HashSet::new();
        for (i, principal) in self.principals.iter().enumerate() {
            let field = |key: &str| format!("security.principals[{i}].{key}");
            if principal.name.is_empty() || principal.name.len() > MAX_PRINCIPAL_NAME_BYTES {
                return Err(ValidationError::new(
                    field("name"),
                    format!("must be 1 to {MAX_PRINCIPAL_NAME_BYTES} bytes long"),
                ));
            }
            if !names.insert(principal.name.as_str()) {
                return Err(ValidationError::new(field("name"), format!("{:?} names two principals", principal.name)));
            }
            for (j, hash) in principal.api_key_sha256.iter().enumerate() {
                if hash.len() != 64 || super::hex::decode(hash).is_none() {
                    return Err(ValidationError::new(
                        format!("{}[{j}]", field("api_key_sha256")),
                        "must be a SHA-256 in 64 lower-case hex digits (see `fairway auth key create`)",
                    ));
                }
                if !credentials.insert(("key", hash.as_str())) {
                    return Err(ValidationError::new(field("api_key_sha256"), "a key is another principal's too"));
                }
            }
            if let Some(name) = &principal.tls_common_name {
                if self.tls_client_ca.is_empty() {
                    return Err(ValidationError::new(
                        field("tls_common_name"),
                        "needs security.tls_client_ca: without it clients present no certificate",
                    ));
                }
                if !credentials.insert(("common name", name.as_str())) {
                    return Err(ValidationError::new(field("tls_common_name"), "is another principal's too"));
                }
            }
            if let Some(subject) = &principal.jwt_subject {
                if self.jwt_jwks.is_empty() {
                    return Err(ValidationError::new(field("jwt_subject"), "needs security.jwt_jwks"));
                }
                if !credentials.insert(("subject", subject.as_str())) {
                    return Err(ValidationError::new(field("jwt_subject"), "is another principal's too"));
                }
            }
            if principal.api_key_sha256.is_empty()
                && principal.tls_common_name.is_none()
                && principal.jwt_subject.is_none()
            {
                return Err(ValidationError::new(
                    field("api_key_sha256"),
                    "is empty, and so are tls_common_name and jwt_subject: nothing authenticates this principal",
                ));
            }
            for (j, grant) in principal.grants.iter().enumerate() {
                grant.validate(&format!("{}[{j}]", field("grants")))?;
            }
        }
        Ok(())
    }

    /// Whether requests must be authenticated.
    pub fn authenticates(&self) -> bool {
        !self.principals.is_empty()
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
