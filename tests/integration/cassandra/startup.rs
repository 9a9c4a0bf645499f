//! A server started while Cassandra cannot be reached keeps trying, says so,
//! and gives up with a clear error after its patience.

#[test]
fn an_unreachable_cassandra_is_retried_then_reported() {
    let output = crate::support::fairway_command()
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "cassandra://127.0.0.1:1/fairway"])
        .env("FAIRWAY_CASSANDRA__CONNECT_PATIENCE", "2s")
        .env("FAIRWAY_LOG", "warn")
        .output()
        .expect("run fairway serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("retrying in"), "no retry was reported: {stderr}");
    assert!(stderr.contains("cannot reach Cassandra at 127.0.0.1:1"), "{stderr}");
}
