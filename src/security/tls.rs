//! TLS on the gRPC port, and on the console's: the server's certificate
//! chain and key, and, for mutual TLS, the CA whose client certificates are
//! required, read from PEM files. The files are read again every `security.tls_reload_interval`;
//! when their bytes changed and they make a valid configuration, new
//! connections get it (a renewed certificate is served without a restart);
//! when they do not, the last good configuration stays, with a warning.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// Why the TLS files cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{key} = {path}: {message}")]
    Read {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The files do not make a TLS configuration.
    #[error("{key}: {message}")]
    Invalid {
        /// The config key at fault.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Where the server's TLS files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`security.tls_cert`).
    pub cert: PathBuf,
    /// Its private key (`security.tls_key`).
    pub key: PathBuf,
    /// The CA of the client certificates required, if any (`security.tls_client_ca`).
    pub client_ca: Option<PathBuf>,
}

/// The TLS configuration being served, and the bytes it was made from.
pub struct ServerTls {
    files: TlsFiles,
    current: RwLock<(Vec<u8>, Acceptors)>,
}

/// One configuration, as each port negotiates it (ALPN).
#[derive(Clone)]
struct Acceptors {
    /// gRPC: HTTP/2.
    grpc: TlsAcceptor,
    /// The console: HTTP/1.1.
    console: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("files", &self.files).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads `files` and makes the configuration; an error names the key at fault.
    pub fn load(files: TlsFiles) -> Result<ServerTls, TlsError> {
        let bytes = read_all(&files)?;
        let acceptors = acceptors(&bytes)?;
        Ok(ServerTls { files, current: RwLock::new((concat(&bytes), acceptors)) })
    }

    /// What new gRPC connections are accepted with.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current.read().unwrap_or_else(|p| p.into_inner()).1.grpc.clone()
    }

    /// What new connections to the console are accepted with (the same
    /// certificate and client CA, over HTTP/1.1).
    pub fn console_acceptor(&self) -> TlsAcceptor {
        self.current.read().unwrap_or_else(|p| p.into_inner()).1.console.clone()
    }

    /// Reads the files again: `Ok(true)` if they changed and are now served,
    /// `Ok(false)` if unchanged, an error (and the last configuration kept)
    /// if they cannot be served.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let bytes = read_all(&self.files)?;
        let joined = concat(&bytes);
        if self.current.read().unwrap_or_else(|p| p.into_inner()).0 == joined {
            return Ok(false);
        }
        let acceptors = acceptors(&bytes)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (joined, acceptors);
        Ok(true)
    }
}

/// The bytes of the cert, key and client CA files.
type FileBytes = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn read_all(files: &TlsFiles) -> Result<FileBytes, TlsError> {
    let read = |key: &'static str, path: &Path| {
        std::fs::read(path).map_err(|e| TlsError::Read { key, path: path.to_owned(), message: e.to_string() })
    };
    let ca = files.client_ca.as_deref().map(|path| read("security.tls_client_ca", path)).transpose()?;
    Ok((read("security.tls_cert", &files.cert)?, read("security.tls_key", &files.key)?, ca))
}

fn concat((cert, key, ca): &FileBytes) -> Vec<u8> {
    let mut all = cert.clone();
    all.extend_from_slice(key);
    all.extend_from_slice(ca.as_deref().unwrap_or_default());
    all
}

fn acceptors((cert, key, ca): &FileBytes) -> Result<Acceptors, TlsError> {
    let invalid = |key: &'static str, message: String| TlsError::Invalid { key, message };
    let chain = certificates(cert).map_err(|m| invalid("security.tls_cert", m))?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| invalid("security.tls_key", format!("no PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("security", e.to_string()))?;
    let builder = match ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca).map_err(|m| invalid("security.tls_client_ca", m))? {
                roots.add(certificate).map_err(|e| invalid("security.tls_client_ca", e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid("security.tls_client_ca", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| invalid("security.tls_key", format!("does not fit security.tls_cert: {e}")))?;
    let mut console = config.clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    console.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Acceptors { grpc: TlsAcceptor::from(Arc::new(config)), console: TlsAcceptor::from(Arc::new(console)) })
}

/// A PEM file named by config key `key`.
pub(crate) struct KeyedFile<'a> {
    /// The config key.
    pub key: &'static str,
    /// Its value.
    pub path: &'a Path,
}

/// A TLS client configuration that trusts the CA in `ca` and presents
/// `identity` (certificate chain, private key) when given: how a node
/// reaches a server of its own (Cassandra). Errors name the key at fault.
pub(crate) fn client_config(
    ca: KeyedFile<'_>,
    identity: Option<(KeyedFile<'_>, KeyedFile<'_>)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let read = |file: &KeyedFile<'_>| {
        std::fs::read(file.path).map_err(|e| TlsError::Read {
            key: file.key,
            path: file.path.to_owned(),
            message: e.to_string(),
        })
    };
    let invalid = |key: &'static str, message: String| TlsError::Invalid { key, message };
    let mut roots = RootCertStore::empty();
    for certificate in certificates(&read(&ca)?).map_err(|m| invalid(ca.key, m))? {
        roots.add(certificate).map_err(|e| invalid(ca.key, e.to_string()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(ca.key, e.to_string()))?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = certificates(&read(&cert)?).map_err(|m| invalid(cert.key, m))?;
            let private = PrivateKeyDer::from_pem_slice(&read(&key)?)
                .map_err(|e| invalid(key.key, format!("no PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| invalid(key.key, format!("does not fit {}: {e}", cert.key)))
        }
    }
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<_> =
        CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().map_err(|e| format!("not PEM: {e}"))?;
    if chain.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn files_that_do_not_make_a_configuration_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles { cert: dir.path().join("c.pem"), key: dir.path().join("k.pem"), client_ca: None };
        let missing = ServerTls::load(files.clone()).unwrap_err();
        assert!(matches!(missing, TlsError::Read { key: "security.tls_cert", .. }), "{missing}");
        let (first, second) = (pair("first"), pair("second"));
        std::fs::write(&files.cert, &first.0).unwrap();
        std::fs::write(&files.key, &first.1).unwrap();
        let tls = ServerTls::load(files.clone()).unwrap();
        assert!(!tls.reload().unwrap(), "unchanged");

        std::fs::write(&files.cert, &second.0).unwrap();
        let mismatched = tls.reload().unwrap_err();
        assert!(matches!(mismatched, TlsError::Invalid { key: "security.tls_key", .. }), "{mismatched}");
        std::fs::write(&files.key, "not a key").unwrap();
        let garbage = tls.reload().unwrap_err();
        assert!(matches!(garbage, TlsError::Invalid { key: "security.tls_key", .. }), "{garbage}");
        std::fs::write(&files.key, &second.1).unwrap();
        assert!(tls.reload().unwrap(), "the renewed pair is served");
        std::fs::write(&files.cert, "").unwrap();
        let empty = tls.reload().unwrap_err();
        assert!(matches!(empty, TlsError::Invalid { key: "security.tls_cert", .. }), "{empty}");
    }
}
