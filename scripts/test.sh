#!/usr/bin/env bash
# Runs every test of the workspace: unit and property tests of the core, the
# store conformance suite on the embedded store and on a real Apache
# Cassandra, the integration tests (real gRPC servers, real `fairway serve`
# processes, Cassandra outages), the tools' tests and chaos runs
# (tools/fairway-lab), and the Python client's tests against a real server
# (scripts/test-python.sh: virtual environments from PyPI, Python 3.9 with
# the lowest declared grpcio and protobuf and python3 with the newest).
# First, clippy on every target of the workspace with warnings denied (the
# Cassandra nodes start meanwhile): a lint fails the run before the long
# tests start. Ends with one line
# counting the tests.
#
# Cassandra: uses the node at $FAIRWAY_TEST_CASSANDRA (default
# 127.0.0.1:9042) if one listens there; otherwise fetches Cassandra from
# Maven Central (once) and starts a node with deploy/cassandra/cassandra.sh,
# and stops it at the end, also when tests fail. The chaos tests of
# Cassandra faults and the region tests need a cluster of three more
# (127.0.0.11-13, in .deploy/cassandra-cluster, datacenters dc1, dc1 and
# dc2), started and stopped the same way; the chaos
# tests of network partitions need root and iptables, installed from
# Debian's packages if missing, as are Chromium and chromedriver for the
# console's browser test.
set -euo pipefail
cd "$(dirname "$0")/.."

contact="${FAIRWAY_TEST_CASSANDRA:-127.0.0.1:9042}"
host="${contact%:*}"
port="${contact##*:}"
started_cassandra=""
started_cluster=""
cluster_home="$PWD/.deploy/cassandra-cluster"
# The single node lives in the script's default home.
unset CASSANDRA_DEV_HOME CASSANDRA_DEV_FIRST
# Cassandra warns of reads that cross more than 100 tombstones: the tombstone
# tests count those warnings to prove the budget of every read. Exported, so
# that a node the outage tests restart keeps it.
export CASSANDRA_DEV_TOMBSTONE_WARN=100

cleanup() {
  if [ -n "${nodes_pid:-}" ]; then
    kill "$nodes_pid" 2>/dev/null || true
    wait "$nodes_pid" 2>/dev/null || true
  fi
  if [ -n "${chaos_pid:-}" ]; then
    kill "$chaos_pid" 2>/dev/null || true
  fi
  if [ -n "${python_pid:-}" ]; then
    kill "$python_pid" 2>/dev/null || true
  fi
  if [ -n "$started_cassandra" ]; then
    bash deploy/cassandra/cassandra.sh stop || true
  fi
  if [ -n "$started_cluster" ]; then
    CASSANDRA_DEV_HOME="$cluster_home" bash deploy/cassandra/cassandra.sh stop || true
  fi
  rm -f "${log:-}" "${chaos_log:-}" "${python_log:-}" "${cassandra_log:-}"
  rm -rf "${python_bin:-}"
}
trap cleanup EXIT

# The Cassandra nodes start (in the background, their output in a file)
# while clippy runs: a JVM's start is mostly waiting.
cassandra_log="$(mktemp)"
start_nodes() {
  if [ -n "$started_cassandra" ]; then
    echo "test: starting a Cassandra node at 127.0.0.1:9042"
    bash deploy/cassandra/cassandra.sh start 1 || return 1
  else
    echo "test: using the Cassandra node already listening at $contact"
  fi
  if [ -n "$started_cluster" ]; then
    echo "test: starting a Cassandra cluster of three nodes at 127.0.0.11-13 (datacenters dc1, dc1, dc2)"
    CASSANDRA_DEV_HOME="$cluster_home" CASSANDRA_DEV_FIRST=11 CASSANDRA_DEV_DCS="dc1 dc1 dc2" \
      bash deploy/cassandra/cassandra.sh start 3 || return 1
  else
    echo "test: using the Cassandra cluster at ${FAIRWAY_TEST_CASSANDRA_CLUSTER:-127.0.0.11:9042}"
  fi
}
# Which nodes are ours (stopped at the end) is settled before the start, so
# that the cleanup stops them whenever it runs. A node of our own starts
# from empty data.
if ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
  rm -rf .deploy/cassandra/node* .deploy/cassandra/nodes
  started_cassandra=yes
fi
if [ -z "${FAIRWAY_TEST_CASSANDRA_CLUSTER:-}" ] && ! (exec 3<>"/dev/tcp/127.0.0.11/9042") 2>/dev/null; then
  rm -rf "$cluster_home"
  started_cluster=yes
fi
start_nodes >"$cassandra_log" 2>&1 &
nodes_pid=$!

echo "test: cargo clippy --workspace --all-targets --locked -- -D warnings"
if ! cargo clippy --workspace --all-targets --locked -- -D warnings; then
  echo "test: FAILED: clippy reports warnings (above); no test ran" >&2
  exit 1
fi

if ! command -v iptables >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test: installing iptables (network partitions in the chaos tests)"
  apt-get install -y -q iptables >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q iptables >/dev/null; }
fi

if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test: installing Debian's chromium and chromium-driver (the console's browser tests)"
    apt-get install -y -q chromium chromium-driver >/dev/null \
      || { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; } \
      || echo "test: could not install chromium; the console's browser test will fail saying so" >&2
  else
    echo "test: /usr/bin/chromium or /usr/bin/chromedriver is missing and cannot be installed here (not root, or no apt-get): the console's browser test will fail saying so" >&2
  fi
fi

log="$(mktemp)"
chaos_log="$(mktemp)"
python_log="$(mktemp)"
python_bin="$(mktemp -d)"
status=0
# Everything is built first; then the chaos runs of the lab (about ten
# minutes, mostly waiting on faults) go beside the rest of the suite, as
# they did when they were part of the integration tests. They and the
# region tests take turns on the three-node cluster through a lock file.
# Every cargo run below selects with --workspace, as the build does: one
# package alone unifies features otherwise (the lab's build of fairway and
# tokio lacks the dev-dependencies' features) and rebuilds half the tree
# while the tests wait on the lock.
cargo test --workspace --locked --all-targets --no-run 2>&1 | tee "$log" || status=$?
nodes_status=0
wait "$nodes_pid" || nodes_status=$?
nodes_pid=
cat "$cassandra_log"
if [ "$nodes_status" != 0 ]; then
  echo "test: FAILED: the Cassandra nodes did not start (above); no test ran" >&2
  exit 1
fi
if [ "$status" = 0 ]; then
  cargo test --workspace --locked --test chaos >"$chaos_log" 2>&1 &
  chaos_pid=$!
  # The Python client's tests go beside the rest too, against a copy of the
  # server binary just built.
  cp target/debug/fairway "$python_bin/fairway"
  FAIRWAY_BIN="$python_bin/fairway" bash scripts/test-python.sh >"$python_log" 2>&1 &
  python_pid=$!
  # Every target but the chaos runs: the library's and binaries' unit tests
  # (the product's and the lab's), the integration tests, the benches' checks.
  # All of them run when one fails (--no-fail-fast).
  cargo test --workspace --locked --no-fail-fast --lib --bins --test integration --benches 2>&1 | tee -a "$log" || status=$?
  wait "$python_pid" || status=$?
  python_pid=
  echo "test: the Python client's tests (run beside the rest):"
  cat "$python_log" | tee -a "$log"
  wait "$chaos_pid" || status=$?
  chaos_pid=
  echo "test: the lab's chaos runs (run beside the rest):"
  cat "$chaos_log" | tee -a "$log"
fi

# A run that failed repeats, last, where each failing test panicked and the
# first lines of why (at most 120 lines): a reader of the output's tail sees
# the causes, not only the names.
if [ "$status" != 0 ]; then
  echo "test: why the failing tests failed (each panic and the lines after it):"
  awk '/^---- .* stdout ----$/ { name = $2 }
       /panicked at/ { print "== " name; left = 6 }
       left > 0 { print "   " substr($0, 1, 300); left-- }' "$log" | head -n 120
fi

awk '/^python-tests:/ { passed += $2; failed += $4; ignored += $6 }
     /^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i + 1) ~ /^passed/) passed += $i
         if ($(i + 1) ~ /^failed/) failed += $i
         if ($(i + 1) ~ /^ignored/) ignored += $i
       }
     }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
exit "$status"
