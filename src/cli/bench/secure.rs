//! `fairway bench --secure`: the measured servers serve TLS (a CA and a
//! certificate for 127.0.0.1 made for the run) and authenticate every
//! request by API key (a principal with role admin on every queue), so
//! that a run measures what TLS and authentication cost.

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use fairway::security::{AuthChannel, BearerToken, api_key_hash, new_api_key};

/// The run's certificates and API key.
pub(super) struct BenchSecurity {
    dir: tempfile::TempDir,
    ca: String,
    key: String,
}

impl BenchSecurity {
    pub(super) fn new() -> anyhow::Result<BenchSecurity> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "fairway bench CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, "fairway bench server");
        let server_key = KeyPair::generate()?;
        let server = params.signed_by(&server_key, &ca)?;
        let dir = tempfile::tempdir().context("a temporary directory for the TLS files")?;
        std::fs::write(dir.path().join("server.crt"), server.pem())?;
        std::fs::write(dir.path().join("server.key"), server_key.serialize_pem())?;
        Ok(BenchSecurity { dir, ca: ca.pem(), key: new_api_key() })
    }

    /// The `[security]` part of a server's config.
    pub(super) fn server_config(&self) -> String {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        format!(
            "\n[security]\ntls_cert = {:?}\ntls_key = {:?}\n\n[[security.principals]]\nname = \"bench\"\n\
             api_key_sha256 = [\"{}\"]\ngrants = [{{ role = \"admin\", queues = [\"*\"] }}]\n",
            file("server.crt"),
            file("server.key"),
            api_key_hash(&self.key)
        )
    }

    /// A channel to the server at `addr`, over TLS, with the key.
    pub(super) async fn connect(&self, addr: &str) -> anyhow::Result<AuthChannel> {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca));
        let channel = Channel::from_shared(format!("https://{addr}"))?
            .tls_config(tls)?
            .connect()
            .await
            .with_context(|| format!("cannot reach {addr} over TLS"))?;
        Ok(BearerToken::new(Some(&self.key)).map_err(anyhow::Error::msg)?.on(channel))
    }
}
