//! TLS on the gRPC port, over real connections: a client of the right CA
//! (with its certificate, under mutual TLS) is served; a plain-text client,
//! a client that trusts another CA and a client with no certificate are
//! refused; renewed certificate files are served without a restart.

use std::path::Path;
use std::time::Duration;

use fairway::config::Config;
use tonic::transport::{Channel, ClientTlsConfig};

use crate::pki::{Authority, client_tls, write};
use crate::support::{TestServer, add, spec};

const QUEUE: &str = "tls";

/// Whether a new connection with `tls` (plain text if `None`) can add a task.
async fn can_add(server: &TestServer, tls: Option<ClientTlsConfig>) -> bool {
    let endpoint = match tls {
        Some(tls) => Channel::from_shared(format!("https://{}", server.addr)).unwrap().tls_config(tls).unwrap(),
        None => Channel::from_shared(format!("http://{}", server.addr)).unwrap(),
    };
    let Ok(channel) = endpoint.timeout(Duration::from_secs(5)).connect().await else { return false };
    let mut client = fairway::proto::v1::matching_client::MatchingClient::new(channel);
    add(&mut client, QUEUE, spec("k", 1.0, 3, b"x")).await.is_ok()
}

fn tls_config(dir: &Path, server: &(String, String), client_ca: Option<&Authority>) -> Config {
    let mut config = Config::default();
    config.security.tls_cert = write(dir, "server.crt", &server.0).display().to_string();
    config.security.tls_key = write(dir, "server.key", &server.1).display().to_string();
    if let Some(ca) = client_ca {
        config.security.tls_client_ca = write(dir, "clients.crt", &ca.pem()).display().to_string();
    }
    config.security.tls_reload_interval = Duration::from_secs(1);
    config
}

#[tokio::test]
async fn mutual_tls_serves_clients_of_its_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let other = Authority::new("another CA");
    let client = ca.sign("worker");
    let config = tls_config(dir.path(), &ca.sign("server"), Some(&ca));
    let server = TestServer::start_tls(config, client_tls(&ca, Some(&client))).await;
    let mut served = server.client.clone();
    add(&mut served, QUEUE, spec("k", 1.0, 3, b"x")).await.expect("a client of the CA is served");

    assert!(!can_add(&server, None).await, "a plain-text client was served");
    assert!(!can_add(&server, Some(client_tls(&other, Some(&client)))).await, "a client trusting another CA");
    assert!(!can_add(&server, Some(client_tls(&ca, None))).await, "a client with no certificate");
    assert!(!can_add(&server, Some(client_tls(&ca, Some(&other.sign("stranger"))))).await, "another CA's client");
    assert!(can_add(&server, Some(client_tls(&ca, Some(&client)))).await, "the server goes on");
    server.stop().await;
}

#[tokio::test]
async fn renewed_certificate_files_are_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Authority::new("old CA"), Authority::new("new CA"));
    let config = tls_config(dir.path(), &old.sign("server"), None);
    let server = TestServer::start_tls(config, client_tls(&old, None)).await;
    assert!(can_add(&server, Some(client_tls(&old, None))).await);
    assert!(!can_add(&server, Some(client_tls(&new, None))).await, "not renewed yet");

    // The certificate first, the key after: in between they do not fit, and
    // the old pair is served.
    let renewed = new.sign("server");
    write(dir.path(), "server.crt", &renewed.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    write(dir.path(), "server.key", &renewed.1);
    while !can_add(&server, Some(client_tls(&new, None))).await {
        assert!(tokio::time::Instant::now() < deadline, "the renewed files were not served in 30 s");
    }
    assert!(!can_add(&server, Some(client_tls(&old, None))).await, "the old certificate is no longer served");
    let mut existing = server.client.clone();
    add(&mut existing, QUEUE, spec("k", 1.0, 3, b"x")).await.expect("a connection made before goes on");
    server.stop().await;
}

/// The real binary serves TLS from its config's variables, and the CLI
/// reaches it with `--tls-ca`, `--tls-cert` and `--tls-key`; without them,
/// it does not.
#[tokio::test]
async fn the_cli_and_the_binary_speak_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (server_pair, client_pair) = (ca.sign("server"), ca.sign("cli"));
    let path = |name: &str, text: &str| write(dir.path(), name, text).display().to_string();
    let (cert, key, ca_file) =
        (path("s.crt", &server_pair.0), path("s.key", &server_pair.1), path("ca.crt", &ca.pem()));
    let (client_cert, client_key) = (path("c.crt", &client_pair.0), path("c.key", &client_pair.1));
    let store = format!("embedded:{}", dir.path().join("data").display());
    let env = [
        ("FAIRWAY_SECURITY__TLS_CERT", cert.as_str()),
        ("FAIRWAY_SECURITY__TLS_KEY", key.as_str()),
        ("FAIRWAY_SECURITY__TLS_CLIENT_CA", ca_file.as_str()),
    ];
    let server = crate::support::ServerProcess::start_on(&store, &env);
    let url = format!("https://{}", server.addr);
    let add = |tls: &[&str]| {
        let mut command = crate::support::fairway_command();
        command.args(["task", "add", "--server", &url, "--queue", QUEUE, "--payload", "over TLS"]).args(tls);
        command.output().expect("run fairway task add")
    };
    let with_tls = add(&["--tls-ca", &ca_file, "--tls-cert", &client_cert, "--tls-key", &client_key]);
    assert!(with_tls.status.success(), "{}", String::from_utf8_lossy(&with_tls.stderr));
    let without_certificate = add(&["--tls-ca", &ca_file]);
    assert!(!without_certificate.status.success(), "a CLI with no client certificate was served");
    let plain = add(&[]);
    assert!(!plain.status.success(), "a plain-text CLI was served");
    server.kill();
}
