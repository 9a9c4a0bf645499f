//! Certificates for tests: a CA, and what it signs for 127.0.0.1.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// A CA and what it signed, as PEM.
pub(crate) struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    pub(crate) fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Authority { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for 127.0.0.1 and `localhost`, for servers and clients: (cert, key).
    pub(crate) fn sign(&self, name: &str) -> (String, String) {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    // Written aside and renamed: the server never reads half a file.
    std::fs::write(path.with_extension("tmp"), text).unwrap();
    std::fs::rename(path.with_extension("tmp"), &path).unwrap();
    path
}

/// Trusting `ca`, presenting `identity` (cert, key) if given.
pub(crate) fn client_tls(ca: &Authority, identity: Option<&(String, String)>) -> ClientTlsConfig {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca.pem()));
    match identity {
        Some((cert, key)) => tls.identity(Identity::from_pem(cert, key)),
        None => tls,
    }
}
