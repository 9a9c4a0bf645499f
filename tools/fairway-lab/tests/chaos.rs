//! A short run of every chaos scenario (`fairway-lab chaos run`): the
//! checker must pass. Fairway faults and network partitions run against the
//! test Cassandra node; Cassandra faults against a cluster of three of their
//! own. Long runs are in docs/operations.md.
//!
//! The nodes are the `fairway` binary next to `fairway-lab` in the target
//! directory: `cargo test --workspace` (`bash scripts/test.sh`) builds both;
//! `cargo test -p fairway-lab` alone does not build `fairway`.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root, where `deploy/` and `.deploy/` are.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the test Cassandra node listens (as in the root's integration tests).
fn contact_point() -> String {
    std::env::var("FAIRWAY_TEST_CASSANDRA").unwrap_or_else(|_| "127.0.0.1:9042".to_owned())
}

/// The test Cassandra cluster of three nodes (replication factor 3), whose
/// nodes the Cassandra scenarios kill, pause and restart.
fn cluster_contact_point() -> String {
    std::env::var("FAIRWAY_TEST_CASSANDRA_CLUSTER").unwrap_or_else(|_| "127.0.0.11:9042".to_owned())
}

/// The `CASSANDRA_DEV_HOME` of that cluster, for deploy/cassandra/cassandra.sh.
fn cluster_home() -> PathBuf {
    std::env::var_os("FAIRWAY_TEST_CASSANDRA_CLUSTER_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".deploy/cassandra-cluster"))
}

/// One chaos run or region test (tests/integration/regions.rs at the root,
/// another test binary: they share the cluster) at a time: each starts
/// three nodes and a workload, and two at once on two cores starve both.
/// The same lock file as the region tests take, in the workspace's target
/// directory.
fn one_run_at_a_time() -> File {
    let lock = Path::new(env!("CARGO_TARGET_TMPDIR")).join("three-node-runs.lock");
    fairway::test_util::take_turn(&lock).expect("the lock of the three-node runs")
}

/// The Fairway-fault runs use the single test node, which the root's outage
/// test (tests/integration/cassandra/outage.rs, another test binary) pauses
/// and kills: they take turns through this lock file, the one that test takes.
fn single_node_to_ourselves() -> File {
    let lock = Path::new(env!("CARGO_TARGET_TMPDIR")).join("single-node-runs.lock");
    fairway::test_util::take_turn(&lock).expect("the lock of the runs that pause or kill the single node")
}

/// The `fairway-lab` binary, with none of this process's `FAIRWAY_*`
/// variables: the run's nodes get the settings the run gives them, whatever
/// the environment of the test run (`scripts/test.sh` exports its own knobs).
fn lab_command() -> Command {
    let lab = PathBuf::from(env!("CARGO_BIN_EXE_fairway-lab"));
    let fairway = lab.with_file_name(format!("fairway{}", std::env::consts::EXE_SUFFIX));
    assert!(
        fairway.is_file(),
        "the nodes run {}, which is not built: test the workspace (`cargo test --workspace`) or \
         `cargo build -p fairway` first",
        fairway.display()
    );
    let mut command = Command::new(lab);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FAIRWAY_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `scenario` for 16 s and asserts the checker's pass, with a fault injected.
fn run_briefly(scenario: &str, store: &str, needs: &str, env: &[(&str, &OsStr)]) {
    let _one = one_run_at_a_time();
    let out = tempfile::tempdir().expect("a directory for the run");
    let script = root().join("deploy/cassandra/cassandra.sh");
    let output = lab_command()
        .args(["chaos", "run", "--scenario", scenario, "--duration", "16s", "--seed", "7", "--store", store])
        .arg("--out")
        .arg(out.path())
        .arg("--cassandra-script")
        .arg(script)
        .envs(env.iter().copied())
        .output()
        .expect("run fairway-lab chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("scenario {scenario}:\n{stdout}");
    assert!(output.status.success(), "scenario {scenario} failed ({}):\n{stdout}\n{stderr}\n{needs}", output.status);
    assert!(stdout.contains("PASS: 0 lost, 0 delivered after completion"), "{stdout}");
    let history = std::fs::read_to_string(out.path().join("history.jsonl")).expect("the history");
    assert!(history.lines().any(|l| l.contains("\"nemesis\"")), "no fault was injected in {scenario}");
}

#[test]
fn a_short_run_of_every_fairway_fault_and_network_partition_passes_the_checker() {
    let contact = contact_point();
    let store = format!("cassandra://{contact}/fairway_chaos_test");
    let needs = format!(
        "It needs a Cassandra node at {contact} (`bash scripts/test.sh` starts one), and for the network \
         partitions root and iptables (Debian's package iptables)."
    );
    for scenario in ["kill", "pause", "pause-owner", "cut-store", "cut-peers"] {
        let _node = single_node_to_ourselves();
        run_briefly(scenario, &store, &needs, &[]);
    }
}

#[test]
fn a_short_run_of_every_cassandra_fault_passes_the_checker() {
    let contact = cluster_contact_point();
    let home = cluster_home();
    let store = format!("cassandra://{contact}/fairway_chaos_test");
    let needs = format!(
        "It needs a Cassandra cluster of three nodes at {contact} whose CASSANDRA_DEV_HOME is {}: \
         `bash scripts/test.sh` starts one, or `CASSANDRA_DEV_HOME={} CASSANDRA_DEV_FIRST=11 \
         deploy/cassandra/cassandra.sh start 3` (FAIRWAY_TEST_CASSANDRA_CLUSTER and \
         FAIRWAY_TEST_CASSANDRA_CLUSTER_HOME name another).",
        home.display(),
        home.display()
    );
    for scenario in ["cassandra-kill", "cassandra-pause", "cassandra-quorum-loss"] {
        run_briefly(scenario, &store, &needs, &[("CASSANDRA_DEV_HOME", home.as_os_str())]);
    }
}
