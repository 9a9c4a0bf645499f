//! `fairway-lab bench --secure`: the measured servers serve TLS (a CA and a
//! certificate for 127.0.0.1 made for the run) and authenticate every
//! request by API key (a principal with role admin on every queue), so
//! that a run measures what TLS and authentication cost. Scenarios about
//! access (`bench tenants`) add principals of their own.

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use fairway::security::{AuthChannel, BearerToken, api_key_hash, new_api_key};

/// The run's certificates and API key, and the principals a scenario adds
/// beside the bench's own (an admin on every queue).
pub(super) struct BenchSecurity {
    dir: tempfile::TempDir,
    ca: String,
    key: String,
    principals: Vec<BenchPrincipal>,
}

/// A principal of a scenario's own: its name, its API key and its grants
/// (the TOML array of `security.principals.grants`).
pub(super) struct BenchPrincipal {
    pub name: &'static str,
    pub key: String,
    pub grants: String,
}

impl BenchPrincipal {
    pub(super) fn new(name: &'static str, grants: String) -> BenchPrincipal {
        BenchPrincipal { name, key: new_api_key(), grants }
    }
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
        Ok(BenchSecurity { dir, ca: ca.pem(), key: new_api_key(), principals: Vec::new() })
    }

    /// The same, with `principals` beside the bench's own.
    pub(super) fn with_principals(principals: Vec<BenchPrincipal>) -> anyhow::Result<BenchSecurity> {
        Ok(BenchSecurity { principals, ..BenchSecurity::new()? })
    }

    /// The `[security]` part of a server's config.
    pub(super) fn server_config(&self) -> String {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        let mut config = format!(
            "\n[security]\ntls_cert = {:?}\ntls_key = {:?}\n\n[[security.principals]]\nname = \"bench\"\n\
             api_key_sha256 = [\"{}\"]\ngrants = [{{ role = \"admin\", queues = [\"*\"] }}]\n",
            file("server.crt"),
            file("server.key"),
            api_key_hash(&self.key)
        );
        for principal in &self.principals {
            config.push_str(&format!(
                "\n[[security.principals]]\nname = {:?}\napi_key_sha256 = [\"{}\"]\ngrants = {}\n",
                principal.name,
                api_key_hash(&principal.key),
                principal.grants
            ));
        }
        config
    }

    /// A channel to the server at `addr`, over TLS, with the bench's key.
    pub(super) async fn connect(&self, addr: &str) -> anyhow::Result<AuthChannel> {
        self.connect_with(addr, &self.key).await
    }

    /// A channel to the server at `addr`, over TLS, as the principal of `key`.
    pub(super) async fn connect_with(&self, addr: &str, key: &str) -> anyhow::Result<AuthChannel> {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca));
        let channel = Channel::from_shared(format!("https://{addr}"))?
            .tls_config(tls)?
            .connect()
            .await
            .with_context(|| format!("cannot reach {addr} over TLS"))?;
        Ok(BearerToken::new(Some(key)).map_err(anyhow::Error::msg)?.on(channel))
    }
}
