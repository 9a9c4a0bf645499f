//! Rotating the cluster's secret on a running node (`fairway auth rotate`,
//! through the function it calls): the node reads the new secret without a
//! restart; tokens and proofs of the old secret are accepted until the end
//! of the overlap, and refused after it. Lease time is a manual clock that
//! the test moves; node proofs are dated by the wall clock, as in a cluster.
//! Every wait has a deadline; nothing waits on the wall clock to pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fairway::clock::{Clock, ManualClock, SystemClock};
use fairway::config::Config;
use fairway::matcher::LeaseToken;
use fairway::proto::v1 as pb;
use fairway::security::{ClusterKeys, NODE_PROOF};
use fairway::server::LocalServer;
use fairway::server::rotation::{self, RotateError};
use fairway::store::embedded::EmbeddedStore;
use fairway::store::{SecretStore, Stores};
use tonic::Code;
use tonic::transport::Channel;

use crate::support::{Client, add, poll, spec};

const QUEUE: &str = "rotated";
const START_MS: i64 = 1_700_000_000_000;

/// A heartbeat of a token that is no token, forwarded as a node would,
/// with a proof made with `keys` now: `PERMISSION_DENIED` if the node
/// refuses the proof, `INVALID_ARGUMENT` (the token) if it accepts it.
async fn forwarded_with_proof_of(client: &mut Client, keys: &ClusterKeys) -> Code {
    let mut request = tonic::Request::new(pb::HeartbeatTaskRequest { lease_token: "not-a-token".into() });
    let now_secs = SystemClock.now_ms().div_euclid(1000);
    request.metadata_mut().insert("fairway-forwarded", "1".parse().unwrap());
    request.metadata_mut().insert(NODE_PROOF, keys.node_proof("HeartbeatTask", "", now_secs).parse().unwrap());
    client.heartbeat_task(request).await.expect_err("no token").code()
}

async fn complete(client: &mut Client, task: &pb::Task) -> Result<(), tonic::Status> {
    let request = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: vec![] };
    client.complete_task(request).await.map(drop)
}

#[tokio::test]
async fn a_rotation_reaches_a_running_node_and_old_tokens_hold_until_the_overlap_ends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut config = Config::default();
    config.tasks.lease_timeout = Duration::from_secs(3600);
    config.security.secret_reload_interval = Duration::from_millis(20);
    let server = LocalServer::start(&config, Stores::of(store.clone()), clock.clone()).await.unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr)).unwrap().connect().await.unwrap();
    let mut client = Client::new(channel);

    for key in ["a", "b", "c"] {
        add(&mut client, QUEUE, spec(key, 0.0, 0, key.as_bytes())).await.expect("AddTask");
    }
    let found = Duration::from_secs(10);
    let first = poll(&mut client, QUEUE, found).await.expect("a task");
    let second = poll(&mut client, QUEUE, found).await.expect("a task");
    let old = store.cluster_secrets(&[0; 32]).await.unwrap().current;
    let old_keys = ClusterKeys::from_secret(&old);
    assert!(LeaseToken::verify(&first.lease_token, &old_keys, 0).is_ok(), "signed with the first secret");

    let overlap = Duration::from_secs(60);
    let rotation = rotation::rotate(store.as_ref(), overlap, clock.now_ms()).await.expect("rotated");
    assert_eq!(rotation.accepted_until_ms, START_MS + 60_000);
    let again = rotation::rotate(store.as_ref(), overlap, clock.now_ms()).await.unwrap_err();
    assert_eq!(again, RotateError::OverlapRunning { until_ms: START_MS + 60_000 }, "one rotation at a time");
    let new = store.cluster_secrets(&[0; 32]).await.unwrap().current;
    assert_ne!(new, old);
    let new_keys = ClusterKeys::from_secret(&new);

    // The node reads the secrets every 20 ms: a proof of the new secret is
    // refused until it has, and accepted from then on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while forwarded_with_proof_of(&mut client, &new_keys).await == Code::PermissionDenied {
        assert!(Instant::now() < deadline, "the node did not pick up the rotation within 10 s");
        tokio::task::yield_now().await;
    }
    assert_eq!(forwarded_with_proof_of(&mut client, &new_keys).await, Code::InvalidArgument);

    // Past the switch, the node signs with the new secret alone.
    clock.advance(Duration::from_secs(31));
    let third = poll(&mut client, QUEUE, found).await.expect("a task");
    assert!(LeaseToken::verify(&third.lease_token, &new_keys, 0).is_ok(), "signed with the new secret");
    assert!(LeaseToken::verify(&third.lease_token, &old_keys, 0).is_err(), "not with the old one");

    // Within the overlap, a token of the old secret still completes.
    clock.advance(Duration::from_secs(29));
    assert_eq!(clock.now_ms(), rotation.accepted_until_ms);
    complete(&mut client, &first).await.expect("an old token, at the last ms of the overlap");

    // After it, an old token is refused as one from another cluster would
    // be, though its lease has not run out; a new one completes.
    clock.advance(Duration::from_millis(1));
    let refused = complete(&mut client, &second).await.expect_err("an old token after the overlap");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("lease_token"), "{refused:?}");
    complete(&mut client, &third).await.expect("a token of the new secret");

    // Node proofs are dated by the wall clock, long past this overlap (2023).
    assert_eq!(forwarded_with_proof_of(&mut client, &old_keys).await, Code::PermissionDenied);
    assert_eq!(forwarded_with_proof_of(&mut client, &new_keys).await, Code::InvalidArgument);
    server.stop().await.unwrap();
}

/// `fairway auth rotate` on a data directory: an overlap out of bounds is
/// refused naming the flag and its bounds, with nothing written; one within
/// rotates the secret and prints the times as RFC 3339 dates; a second
/// during the overlap is refused.
#[test]
fn the_rotate_command_checks_its_overlap_and_rotates_the_stored_secret() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let rotate = |overlap: &str| {
        crate::support::fairway_command()
            .args(["auth", "rotate", "--overlap", overlap, "--store", &store])
            .output()
            .expect("run fairway auth rotate")
    };
    for (overlap, bound) in [("59s", "at least 1m"), ("8d", "at most 7d")] {
        let refused = rotate(overlap);
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("--overlap") && stderr.contains(bound), "{stderr}");
    }
    assert!(!dir.path().join(fairway::store::embedded::DATA_FILE).exists(), "nothing opened, nothing written");

    let rotated = rotate("10m");
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let stdout = String::from_utf8(rotated.stdout).unwrap();
    assert!(stdout.contains("was rotated at 20") && stdout.contains("(--overlap 600s)"), "{stdout}");
    let dates = stdout.split_whitespace().filter(|w| w.starts_with("20") && w.contains('T')).count();
    assert_eq!(dates, 3, "the rotation, the switch and the end of the overlap, as dates: {stdout}");

    let again = rotate("10m");
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("overlap lasts until"), "{stderr}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let secrets = store.cluster_secrets(&[0; 32]).await.unwrap();
        assert!(secrets.previous.is_some(), "one rotation was written");
    });
}
