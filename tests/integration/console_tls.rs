//! The console beyond loopback, on a real `fairway serve`: over TLS with
//! the node's certificate, every page behind a login whatever name the
//! browser used, a session cookie sent over TLS only, nothing in clear
//! text; and a node that authenticates no one refuses to serve it there.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, RootCertStore};

use crate::pki::{Authority, write};
use crate::support::{ServerProcess, api_key, fairway_command};

/// One HTTP/1.1 request over TLS to `port` on loopback, naming `host`:
/// the whole answer.
async fn https(ca: &Authority, port: u16, host: &str, request: &str) -> String {
    let mut roots = RootCertStore::empty();
    let pem = ca.pem();
    for certificate in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("a TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]), "the console speaks HTTP/1.1");
    let request = request.replace("{host}", host);
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer within 10 s");
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(path: &str, cookie: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {{host}}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn beyond_loopback_the_console_is_served_over_tls_behind_a_login() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (cert, key) = ca.sign("server");
    let (admin, principal) = api_key("ops", "admin");
    let config = format!(
        "[security]\ntls_cert = {:?}\ntls_key = {:?}\ntls_peer_ca = {:?}\n[console]\nlisten = \"0.0.0.0:0\"\n{principal}",
        write(dir.path(), "server.crt", &cert),
        write(dir.path(), "server.key", &key),
        write(dir.path(), "ca.crt", &ca.pem()),
    );
    let file = write(dir.path(), "fairway.toml", &config);
    let store = format!("embedded:{}", dir.path().join("data").display());
    let env = [("FAIRWAY_CONFIG", file.display().to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = ServerProcess::start_on(&store, &env);
    let console = server.console.clone().expect("the server prints its console's address");
    assert!(console.starts_with("https://0.0.0.0:"), "{console}");
    let port: u16 = console.trim_start_matches("https://0.0.0.0:").trim_end_matches('/').parse().unwrap();

    // Any name reaches it, and every page sends to the login.
    for host in [format!("localhost:{port}"), format!("console.example.com:{port}")] {
        let answer = https(&ca, port, &host, &get("/nodes", "")).await;
        assert!(answer.starts_with("HTTP/1.1 303"), "{host}: {answer}");
        assert!(answer.to_lowercase().contains("location: /login"), "{host}: {answer}");
    }
    let page = https(&ca, port, "console.example.com", &get("/login", "")).await;
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("credential"), "{page}");

    // A wrong key is refused; the admin's gets a session sent over TLS only.
    let login = |credential: &str| {
        let body = format!("credential={credential}");
        format!(
            "POST /login HTTP/1.1\r\nHost: {{host}}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let refused = https(&ca, port, "localhost", &login("fwk_0000")).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let answer = https(&ca, port, "localhost", &login(&admin)).await;
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let cookie_line = answer
        .lines()
        .find(|l| l.to_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("a session cookie: {answer}"));
    assert!(cookie_line.contains("; Secure"), "{cookie_line}");
    let cookie = cookie_line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_owned();
    let nodes = https(&ca, port, "localhost", &get("/nodes", &cookie)).await;
    assert!(nodes.starts_with("HTTP/1.1 200") && nodes.contains("id=\"nodes\""), "{nodes}");

    // Plain HTTP to the console's port gets no page.
    let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    plain.write_all(b"GET /login HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), plain.read_to_end(&mut answer)).await;
    assert!(!String::from_utf8_lossy(&answer).contains("credential"), "a page in clear text");
}

#[tokio::test]
async fn a_node_that_authenticates_no_one_will_not_serve_the_console_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = fairway_command()
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(format!("embedded:{}", dir.path().display()))
        .env("FAIRWAY_CONSOLE__LISTEN", "0.0.0.0:0")
        .output()
        .expect("fairway serve");
    assert!(!out.status.success(), "it served");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("console.listen") && stderr.contains("security.principals"), "{stderr}");
}
