//! A short run of every chaos scenario (`fairway chaos run`) against the
//! test Cassandra node: the checker must pass. Long runs are in
//! docs/operations.md.

use crate::support::fairway_command;

#[test]
fn a_short_run_of_every_scenario_passes_the_checker() {
    let contact = crate::cassandra::contact_point();
    let store = format!("cassandra://{contact}/fairway_chaos_test");
    for scenario in ["kill", "pause", "pause-owner"] {
        let out = tempfile::tempdir().expect("a directory for the run");
        let output = fairway_command()
            .args(["chaos", "run", "--scenario", scenario, "--duration", "16s", "--seed", "7", "--store", &store])
            .arg("--out")
            .arg(out.path())
            .output()
            .expect("run fairway chaos");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("scenario {scenario}:\n{stdout}");
        assert!(
            output.status.success(),
            "scenario {scenario} failed ({}):\n{stdout}\n{stderr}\n\
             It needs a Cassandra node at {contact}: `bash scripts/test.sh` starts one.",
            output.status
        );
        assert!(stdout.contains("PASS: 0 lost, 0 delivered after completion"), "{stdout}");
        let history = std::fs::read_to_string(out.path().join("history.jsonl")).expect("the history");
        assert!(history.lines().any(|l| l.contains("\"nemesis\"")), "no fault was injected in {scenario}");
    }
}
