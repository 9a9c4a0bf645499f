//! A node reaching Cassandra with a login and over TLS: a Cassandra node of
//! its own (deploy/cassandra/cassandra.sh with `CASSANDRA_DEV_SECURE`, on
//! 127.0.0.31) requires `PasswordAuthenticator` credentials and TLS; the
//! store connects with `cassandra.username`, `cassandra.password_file` and
//! `cassandra.tls_ca` and works; a wrong password, plain text and a CA that
//! did not sign the node are refused, and say so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fairway::config::Config;
use fairway::store::cassandra::{CassandraConfig, ConnectError, apply_schema, connect_session};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::pki::write;

const ADDRESS: &str = "127.0.0.31";

/// The secure node, stopped when dropped.
struct SecureNode {
    home: PathBuf,
}

impl SecureNode {
    fn start(dir: &Path) -> SecureNode {
        let home = dir.join("home");
        let status =
            script(&home).env("CASSANDRA_DEV_FIRST", "31").env("CASSANDRA_DEV_SECURE", dir).arg("start").status();
        assert!(
            status.expect("run deploy/cassandra/cassandra.sh").success(),
            "the secure Cassandra node did not start (java and the jars of `deploy/cassandra/cassandra.sh fetch` are needed)"
        );
        SecureNode { home }
    }
}

impl Drop for SecureNode {
    fn drop(&mut self) {
        let _ = script(&self.home).arg("stop").status();
    }
}

fn script(home: &Path) -> Command {
    let mut command = Command::new("bash");
    command.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/cassandra/cassandra.sh")).env("CASSANDRA_DEV_HOME", home);
    command
}

/// A CA, and the node's key and certificate for its IP in `dir/node.pem`.
fn certificates(dir: &Path) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "cassandra test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mut params = CertificateParams::new(vec![ADDRESS.to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "cassandra node");
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    write(dir, "node.pem", &format!("{}{}", key.serialize_pem(), cert.pem()));
    ca
}

#[tokio::test]
async fn the_store_logs_in_over_tls_and_nothing_less_gets_in() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path());
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other_ca = certificates(&other);
    let _node = SecureNode::start(dir.path());
    let contact_point = format!("{ADDRESS}:9042");
    let config = CassandraConfig {
        username: "cassandra".into(),
        password_file: write(dir.path(), "password", "cassandra\n").display().to_string(),
        tls_ca: write(dir.path(), "ca.pem", &ca.pem()).display().to_string(),
        ..CassandraConfig::default()
    };
    config.validate().expect("a valid section");

    // The default role is made a few seconds after the node starts.
    let deadline = Instant::now() + Duration::from_secs(120);
    let session = loop {
        match connect_session(&contact_point, &config).await {
            Ok(session) => break session,
            Err(error) => assert!(Instant::now() < deadline, "no login within 2 minutes: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    apply_schema(&session, "secure", &config.replication).await.expect("the schema, over TLS, logged in");
    let whole = Config { cassandra: config.clone(), ..Config::default() };
    let url = format!("cassandra://{contact_point}/secure").parse().unwrap();
    let stores = fairway::server::open_store(&url, &whole).await.expect("the store opens");
    let secret = stores.tasks.cluster_secret(&[7; 32]).await.expect("a write and a read");
    assert_eq!(secret, [7; 32]);

    let wrong = CassandraConfig {
        password_file: write(dir.path(), "wrong", "not the password\n").display().to_string(),
        ..config.clone()
    };
    let refused = connect_session(&contact_point, &wrong).await.expect_err("a wrong password");
    assert!(matches!(refused, ConnectError::Refused { .. }), "{refused}");
    assert!(refused.to_string().contains("cassandra.password_file"), "{refused}");

    let plain = CassandraConfig { tls_ca: String::new(), ..config.clone() };
    assert!(connect_session(&contact_point, &plain).await.is_err(), "plain text");
    let untrusted = CassandraConfig {
        tls_ca: write(dir.path(), "other-ca.pem", &other_ca.pem()).display().to_string(),
        ..config.clone()
    };
    assert!(connect_session(&contact_point, &untrusted).await.is_err(), "a CA that did not sign the node");
    let anonymous = CassandraConfig { username: String::new(), password_file: String::new(), ..config };
    assert!(connect_session(&contact_point, &anonymous).await.is_err(), "no credentials");
}
