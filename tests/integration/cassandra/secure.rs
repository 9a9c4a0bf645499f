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
    let secrets = stores.tasks.cluster_secrets(&[7; 32]).await.expect("a write and a read");
    assert_eq!(secrets.current, [7; 32]);

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

/// Two `fairway serve` processes on one keyspace, with TLS and principals
/// on: a client's adds at one node are forwarded to the owner of the other
/// partitions over TLS, with the node proof (no client credentials), and
/// polls at the other node reach every task; a client without a key gets
/// nothing from either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_forward_to_each_other_over_tls_with_authentication_on() {
    use fairway::proto::v1 as pb;
    use fairway::proto::v1::matching_client::MatchingClient;
    use fairway::security::{AuthChannel, BearerToken, api_key_hash, new_api_key};
    use std::collections::BTreeSet;

    const QUEUE: &str = "forwarded";
    let keyspace = super::Keyspace::create().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::pki::Authority::new("fairway cluster CA");
    let pair = ca.sign("node");
    let key = new_api_key();
    let config = format!(
        "[cluster]\nheartbeat_interval = \"500ms\"\nmember_timeout = \"3s\"\nrebalance_interval = \"500ms\"\n\n\
         [security]\ntls_cert = {:?}\ntls_key = {:?}\ntls_peer_ca = {:?}\n\n\
         [[security.principals]]\nname = \"admin\"\napi_key_sha256 = [\"{}\"]\n\
         grants = [{{ role = \"admin\", queues = [\"*\"] }}]\n",
        write(dir.path(), "node.crt", &pair.0).display().to_string(),
        write(dir.path(), "node.key", &pair.1).display().to_string(),
        write(dir.path(), "ca.crt", &ca.pem()).display().to_string(),
        api_key_hash(&key),
    );
    let config_path = write(dir.path(), "fairway.toml", &config).display().to_string();
    let env = [("FAIRWAY_CONFIG", config_path.as_str())];
    let nodes: Vec<_> = (0..2).map(|_| crate::support::ServerProcess::start_on(&keyspace.store_url(), &env)).collect();
    let connect = |addr: std::net::SocketAddr, token: Option<String>| {
        let tls = crate::pki::client_tls(&ca, None);
        async move {
            let channel = tonic::transport::Channel::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .expect("connect over TLS");
            MatchingClient::<AuthChannel>::new(BearerToken::new(token.as_deref()).unwrap().on(channel))
        }
    };
    let mut first = connect(nodes[0].addr, Some(key.clone())).await;
    let mut second = connect(nodes[1].addr, Some(key.clone())).await;
    first
        .create_queue(pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 4, home: String::new() })
        .await
        .expect("create");

    let addresses: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let described = first.describe_queue(pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 }).await;
        let owners: Vec<String> =
            described.map(|d| d.into_inner().partitions.into_iter().map(|p| p.owner).collect()).unwrap_or_default();
        if addresses.iter().all(|a| owners.contains(a)) {
            break;
        }
        assert!(Instant::now() < deadline, "the partitions did not spread over both nodes: {owners:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let added: BTreeSet<String> = (0..40).map(|n| format!("task {n}")).collect();
    for payload in &added {
        let task = crate::support::spec("k", 1.0, 3, payload.as_bytes());
        first.add_task(pb::AddTaskRequest { queue: QUEUE.into(), task: Some(task) }).await.expect("add at node 0");
    }
    let mut polled = BTreeSet::new();
    while polled.len() < added.len() {
        assert!(Instant::now() < deadline, "polled {} of {} at node 1", polled.len(), added.len());
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "w".into(),
            max_wait: crate::support::wait(Duration::from_secs(2)),
            max_tasks: 10,
            completions: Vec::new(),
        };
        for task in second.poll_tasks(request).await.expect("poll at node 1").into_inner().tasks {
            let lease_token = task.lease_token.clone();
            second.complete_task(pb::CompleteTaskRequest { lease_token, result: vec![] }).await.expect("complete");
            polled.insert(String::from_utf8(task.payload).unwrap());
        }
    }
    assert_eq!(polled, added);

    let mut anonymous = connect(nodes[1].addr, None).await;
    let refused = anonymous.describe_queue(pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 }).await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::Unauthenticated);
    // Closed before the nodes stop (on the runtime's other thread while this
    // one waits for each node): a shutdown waits for open connections.
    drop((first, second, anonymous));
    for node in nodes {
        let log = node.terminate();
        assert!(!log.contains("no valid fairway-node-proof"), "a forwarded request was refused:\n{log}");
    }
    keyspace.drop_keyspace().await;
}
