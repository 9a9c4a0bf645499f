//! Authentication: from what a request carries (a bearer token, a client
//! certificate) to a configured principal. API keys are kept as SHA-256
//! hashes only (a key is 32 random bytes: a fast hash is enough); JWTs are
//! checked by [`JwtVerifier`] and mapped by subject; client certificates,
//! already verified by TLS against `security.tls_client_ca`, by common name.
//!
//! Invariant: a request is a principal's only through a credential the
//! configuration maps to it; a bearer token that is present and wrong is
//! refused, never passed over for the certificate.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use rustls_pki_types::CertificateDer;
use sha2::{Digest, Sha256};

use super::access::Principal;
use super::config::{PrincipalConfig, SecurityConfig};
use super::hex;
use super::jwt::{JwtError, JwtVerifier};

/// What every API key starts with, so that a key is known for one at a
/// glance (and by secret scanners).
pub const API_KEY_PREFIX: &str = "fwk_";

/// A new API key: the prefix and 32 random bytes in hex.
pub fn new_api_key() -> String {
    format!("{API_KEY_PREFIX}{}", hex::encode(&rand::random::<[u8; 32]>()))
}

/// What the configuration stores of `key`: its SHA-256, in hex.
pub fn api_key_hash(key: &str) -> String {
    hex::encode(&Sha256::digest(key.as_bytes()))
}

/// Why a request has no principal.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// Neither a bearer token nor a client certificate.
    #[error("no credentials: send `authorization: Bearer <API key or JWT>`, or a client certificate")]
    Missing,
    /// An API key no principal has.
    #[error("the API key is not known")]
    UnknownKey,
    /// A JWT that is not valid.
    #[error(transparent)]
    Jwt(#[from] JwtError),
    /// A bearer token that is no API key, while no JWKS is configured.
    #[error("the bearer token is not an API key ({API_KEY_PREFIX}…), and JWTs are not accepted (no security.jwt_jwks)")]
    NotAccepted,
    /// A valid JWT whose subject no principal has.
    #[error("the JWT's subject {0:?} is no principal's")]
    UnknownSubject(String),
    /// A client certificate whose common name no principal has.
    #[error("the client certificate's common name {0:?} is no principal's")]
    UnknownCommonName(String),
    /// A client certificate without a readable common name.
    #[error("the client certificate has no common name")]
    NoCommonName,
}

/// The principals of the configuration, by each of their credentials.
#[derive(Debug)]
pub struct Authenticator {
    by_key_hash: HashMap<String, Arc<Principal>>,
    by_common_name: HashMap<String, Arc<Principal>>,
    by_jwt_subject: HashMap<String, Arc<Principal>>,
    jwt: Option<JwtVerifier>,
}

impl Authenticator {
    /// The authenticator of `config` (validated), or `None` when it names
    /// no principal: authentication is off.
    pub fn new(config: &SecurityConfig) -> Result<Option<Authenticator>, JwtError> {
        if config.principals.is_empty() {
            return Ok(None);
        }
        let jwt = match config.jwt_jwks.as_str() {
            "" => None,
            path => Some(JwtVerifier::load(path.into(), config.jwt_issuer.clone(), config.jwt_audience.clone())?),
        };
        let mut authenticator = Authenticator {
            by_key_hash: HashMap::new(),
            by_common_name: HashMap::new(),
            by_jwt_subject: HashMap::new(),
            jwt,
        };
        for entry in &config.principals {
            let PrincipalConfig { name, api_key_sha256, tls_common_name, jwt_subject, grants } = entry;
            let principal = Arc::new(Principal { name: name.clone(), grants: grants.clone() });
            for hash in api_key_sha256 {
                authenticator.by_key_hash.insert(hash.clone(), principal.clone());
            }
            if let Some(name) = tls_common_name {
                authenticator.by_common_name.insert(name.clone(), principal.clone());
            }
            if let Some(subject) = jwt_subject {
                authenticator.by_jwt_subject.insert(subject.clone(), principal.clone());
            }
        }
        Ok(Some(authenticator))
    }

    /// The JWT verifier, to read its key set again.
    pub fn jwt(&self) -> Option<&JwtVerifier> {
        self.jwt.as_ref()
    }

    /// The principal of a request that carries `bearer` (the token after
    /// `Bearer `) and, under mutual TLS, `certificate` (the leaf), at `now`.
    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate: Option<&CertificateDer<'_>>,
        now: SystemTime,
    ) -> Result<Arc<Principal>, AuthError> {
        if let Some(token) = bearer {
            if token.starts_with(API_KEY_PREFIX) {
                return self.by_key_hash.get(&api_key_hash(token)).cloned().ok_or(AuthError::UnknownKey);
            }
            let jwt = self.jwt.as_ref().ok_or(AuthError::NotAccepted)?;
            let subject = jwt.subject(token, now)?;
            return self.by_jwt_subject.get(&subject).cloned().ok_or(AuthError::UnknownSubject(subject));
        }
        let certificate = certificate.ok_or(AuthError::Missing)?;
        let name = common_name(certificate).ok_or(AuthError::NoCommonName)?;
        self.by_common_name.get(&name).cloned().ok_or(AuthError::UnknownCommonName(name))
    }
}

/// The first common name of a certificate's subject.
fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?.to_owned();
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::access::{Grant, Role};

    fn config(principals: Vec<PrincipalConfig>) -> SecurityConfig {
        SecurityConfig { principals, ..SecurityConfig::default() }
    }

    fn entry(name: &str, key: Option<&str>, common_name: Option<&str>) -> PrincipalConfig {
        PrincipalConfig {
            name: name.into(),
            api_key_sha256: key.map(api_key_hash).into_iter().collect(),
            tls_common_name: common_name.map(str::to_owned),
            jwt_subject: None,
            grants: vec![Grant {
                role: Role::Reader,
                queues: vec!["*".into()],
                fairness_prefix: None,
                highest_priority: None,
            }],
        }
    }

    #[test]
    fn api_keys_map_to_their_principal_and_nothing_else_does() {
        assert!(Authenticator::new(&config(vec![])).unwrap().is_none(), "no principal: authentication is off");
        let (alice_key, bob_key) = (new_api_key(), new_api_key());
        assert!(alice_key.starts_with(API_KEY_PREFIX) && alice_key.len() == API_KEY_PREFIX.len() + 64);
        assert_ne!(alice_key, bob_key);
        let authenticator = Authenticator::new(&config(vec![
            entry("alice", Some(&alice_key), None),
            entry("bob", Some(&bob_key), None),
        ]))
        .unwrap()
        .unwrap();
        let now = SystemTime::now();
        assert_eq!(authenticator.authenticate(Some(&alice_key), None, now).unwrap().name, "alice");
        assert_eq!(authenticator.authenticate(Some(&bob_key), None, now).unwrap().name, "bob");
        let mut edited = alice_key.clone().into_bytes();
        edited[10] = if edited[10] == b'0' { b'1' } else { b'0' };
        let edited = String::from_utf8(edited).unwrap();
        assert_eq!(authenticator.authenticate(Some(&edited), None, now).unwrap_err(), AuthError::UnknownKey);
        assert_eq!(authenticator.authenticate(Some("a.b.c"), None, now).unwrap_err(), AuthError::NotAccepted);
        assert_eq!(authenticator.authenticate(None, None, now).unwrap_err(), AuthError::Missing);
        assert_eq!(
            authenticator.authenticate(Some(&api_key_hash(&alice_key)), None, now).unwrap_err(),
            AuthError::NotAccepted,
            "the hash is not the key"
        );
    }
}
