#!/usr/bin/env bash
# What regions cost a queue's dispatch, measured on the test bed of
# deploy/regions/regions.sh with one command: add latency (each AddTask as
# the producer sees it) and sync-match latency (add sent -> task received by
# a waiting poller), p50 and p99, by `fairway-lab bench latency --server`, run
# inside a region's namespace against a Fairway node of its choice.
#
#   deploy/regions/bench.sh [--out DIR] [--rounds N] [--warm-up-rounds N] [--runs N] [--tasks N]
#                           [--rate R] [--pollers N] [--no-warm-up] [--global] [--shared-cpus]
#
#   --out DIR      where everything goes (default bench-results/regions-DATE): per round and setup,
#                  each client's report.json/report.md/plots and each node's log; summary.md, the table
#   --rounds N     baseline and two-region setups alternate N times (default 2), so that noise shows
#   --warm-up-rounds N
#                  rounds run first, whole, and left out of the verdict (default 2; 0 for none): the
#                  bed's Cassandra nodes start cold at every `up`, and on a small machine their JIT
#                  compilation runs for minutes of load (one region's p50 falls from some 10 ms in
#                  the first round to 2.5 in the third); region b's node, idle under the baseline,
#                  compiles during the first two-region rounds, beside the node measured
#   --runs N       runs per measurement (default 3); the reports give each figure's median
#   --tasks N      tasks per run (default 2000)
#   --rate R       adds per second (default 200)
#   --pollers N    pollers waiting (default 128: through a node that forwards, a poller is away some
#                  three round trips after each task, rate x 0.12 s of them at 40 ms)
#   --no-warm-up   measure from the first run; by default each measurement is preceded by one run
#                  of the same shape whose figures are discarded (in DIR/.../warm-up): the first
#                  seconds after a setup starts (new keyspace, nodes and connections warming up on
#                  a small machine) are not what a queue costs
#   --shared-cpus  let both regions run on every CPU. By default region a gets the first half of
#                  the CPUs and region b the rest, with the delayers (REGIONS_CPUS and
#                  REGIONS_DELAYER_CPUS of regions.sh, which you may also set yourself), as if
#                  each region had a machine of its own: shared, region b's Cassandra replica
#                  (which applies every write of the home region) and the delayer's per-packet
#                  work take CPU from the requests measured in region a
#   --global       each round also measures the hot path with automatic failover's levels (QUORUM,
#                  SERIAL: every write and fence needs a majority of both regions' replicas):
#                  setup "global fence", nodes in a and b, a client in a
#
# Each round, on fresh keyspaces:
#   one region   keyspace {'class': 'NetworkTopologyStrategy', 'a': 1}; one node in a
#                (10.210.1.2:7070); a queue homed in a; a client in fw-a through that node.
#   two regions  keyspace {'class': 'NetworkTopologyStrategy', 'a': 1, 'b': 1}; a node in a
#                (10.210.1.2:7070) and one in b (10.210.2.2:7070); a queue homed in a; a client
#                in fw-a through the a node (its p99 should stay within 1.5x of the baseline's),
#                then a client in fw-b through the b node, which forwards every add and poll to
#                the queue's owner in a (about one 40 ms round trip more per forwarded call).
# The table gives, per measurement, the medians over its runs and the ratio of its p99s to the
# same round's baseline; the exit status is 3 if a two-region client of region a is beyond 1.5x
# of its round's baseline sync-match p99 (after everything is written and the bed is down).
#
# Needs root, a bed that is DOWN (this script brings it up with `regions.sh up a b` and takes it
# down at the end, whatever happens: it will not take over, nor take down, a bed someone else
# uses), python3, and target/release/fairway and target/release/fairway-lab (it builds nothing:
# `cargo build --release --workspace` builds both). Each node runs as
# `regions.sh exec R target/release/fairway serve` with the environment of the servers
# `fairway-lab bench` starts (FAIRWAY_LOG=warn, NO_COLOR=1, matcher.sync_match = true) plus its
# region: FAIRWAY_CLUSTER__REGION=R, cassandra.consistency = LOCAL_QUORUM,
# cassandra.serial_consistency = LOCAL_SERIAL, the store its region's Cassandra node. The nodes
# listen on the bed's addresses, not loopback, in plain gRPC: a node refuses that without TLS and
# principals unless security.allow_insecure is set, and it is set here
# (FAIRWAY_SECURITY__ALLOW_INSECURE=true): acceptable for a benchmark on a bed of private
# namespaces that nothing else reaches; never for a deployment. REGIONS_ONE_WAY_MS (default 20)
# and the other variables of regions.sh apply.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
regions="$here/regions.sh"
state="$root/.deploy/regions"
bin="$root/target/release/fairway"
lab="$root/target/release/fairway-lab"

out="bench-results/regions-$(date +%Y%m%d-%H%M%S)"
rounds=2
warm_up_rounds=2
runs=3
tasks=2000
rate=200
pollers=128
warm_up=yes
global=no
shared_cpus=no

say() { printf 'bench: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
usage() { sed -n '2,/^# Each round/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# A whole number of at least 1, for flag $1.
count() {
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 takes a whole number of at least 1, not ${2:-nothing}"
  echo "$2"
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --out)
      [ -n "${2:-}" ] || die "--out takes a directory"
      out="$2"
      shift 2
      ;;
    --rounds) rounds="$(count --rounds "${2:-}")"; shift 2 ;;
    --runs) runs="$(count --runs "${2:-}")"; shift 2 ;;
    --warm-up-rounds)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--warm-up-rounds takes a whole number, not ${2:-nothing}"
      warm_up_rounds="$2"
      shift 2
      ;;
    --no-warm-up) warm_up=no; shift ;;
    --global) global=yes; shift ;;
    --shared-cpus) shared_cpus=yes; shift ;;
    --tasks) tasks="$(count --tasks "${2:-}")"; shift 2 ;;
    --pollers) pollers="$(count --pollers "${2:-}")"; shift 2 ;;
    --rate)
      [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rate takes adds per second, e.g. 200, not ${2:-nothing}"
      rate="$2"
      shift 2
      ;;
    -h|--help) usage ;;
    *) say "unknown argument: $1"; usage ;;
  esac
done
[ "$runs" -le 20 ] || die "--runs is at most 20 (fairway-lab bench's limit)"

[ "$(id -u)" = 0 ] || die "needs root (regions.sh builds network namespaces)"
[ -x "$bin" ] || die "no $bin: build it first (cargo build --release --workspace); this script builds nothing"
[ -x "$lab" ] || die "no $lab: build it first (cargo build --release --workspace); this script builds nothing"
command -v python3 >/dev/null || die "python3 is needed (the bed's too)"
"$lab" bench latency --help 2>/dev/null | grep -- '--create-home' >/dev/null ||
  die "$lab has no 'bench latency --server/--create-home': rebuild it from this tree"
[ ! -f "$state/regions" ] ||
  die "the bed is up ($(cat "$state/regions")): someone may be using it; run deploy/regions/regions.sh down first"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
one_way="${REGIONS_ONE_WAY_MS:-20}"
if [ "$shared_cpus" = no ] && [ -z "${REGIONS_CPUS:-}" ]; then
  cpus="$(nproc --all)"
  [ "$cpus" -ge 2 ] || die "one CPU: regions cannot have CPUs of their own here; pass --shared-cpus"
  half=$((cpus / 2))
  first="0"; [ "$half" = 1 ] || first="0-$((half - 1))"
  second="$half"; [ $((cpus - half)) = 1 ] || second="$half-$((cpus - 1))"
  export REGIONS_CPUS="$first $second"
  export REGIONS_DELAYER_CPUS="${REGIONS_DELAYER_CPUS:-$second}"
fi

# Nodes running: "pid name" lines, and whether this script built the bed.
nodes=()
bed_built=""

# Stops node pid $1 (named $2): SIGTERM, which hands its partitions over in
# order; SIGKILL after 30 s.
stop_node() {
  local pid="$1" name="$2" waited=0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 300 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "node $name (pid $pid) still runs 30 s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

stop_nodes() {
  local entry
  for entry in "${nodes[@]}"; do
    # shellcheck disable=SC2086 # "pid name"
    stop_node $entry
  done
  nodes=()
}

# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_nodes
  if [ -n "$bed_built" ]; then
    bash "$regions" down || say "regions.sh down failed: see deploy/regions/regions.sh status"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_node REGION INDEX KEYSPACE DIR: a node of region REGION (number
# INDEX on the bed) at 10.210.INDEX.2:7070 on keyspace KEYSPACE of its
# region's Cassandra node; its log goes to DIR/node-REGION.log. Returns once
# it listens.
start_node() {
  local region="$1" index="$2" keyspace="$3" dir="$4" fence="${5:-local}" address log pid waited=0
  local consistency=LOCAL_QUORUM serial=LOCAL_SERIAL failover=manual
  if [ "$fence" = global ]; then
    consistency=QUORUM serial=SERIAL failover=automatic
  fi
  address="10.210.$index.2:7070"
  log="$dir/node-$region.log"
  # `regions.sh exec` execs `ip netns exec`, which execs the node: $! is the node's pid.
  FAIRWAY_LOG=warn NO_COLOR=1 \
    FAIRWAY_MATCHER__SYNC_MATCH=true \
    FAIRWAY_CLUSTER__REGION="$region" \
    FAIRWAY_CLUSTER__FAILOVER="$failover" \
    FAIRWAY_CASSANDRA__CONSISTENCY="$consistency" \
    FAIRWAY_CASSANDRA__SERIAL_CONSISTENCY="$serial" \
    FAIRWAY_SECURITY__ALLOW_INSECURE=true \
    bash "$regions" exec "$region" "$bin" serve --listen "$address" \
    --store "cassandra://10.210.$index.1:9042/$keyspace" > "$log" 2>&1 < /dev/null &
  pid=$!
  nodes+=("$pid $region@$address")
  # It prints where it listens once its store is open and it has joined the cluster.
  until grep -q "^listening on " "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$log" >&2 || true
      die "the node of region $region ($address) exited; its log: $log"
    fi
    [ "$waited" -lt 1800 ] || die "the node of region $region ($address) did not listen within 180 s; its log: $log"
    sleep 0.1
    waited=$((waited + 1))
  done
  say "node of region $region listens at $address (pid $pid, keyspace $keyspace, log $log)"
}

# schema KEYSPACE REPLICATION: the keyspace and its tables, created from region a.
schema() {
  bash "$regions" exec a "$bin" schema apply --cassandra 10.210.1.1:9042 --keyspace "$1" --replication "$2" >&2
}

# measure ROUND SETUP CLIENT_REGION SERVER QUEUE DIR: the latency bench in
# CLIENT_REGION's namespace through SERVER on QUEUE (created homed in a if
# missing); its report goes to DIR; a line of the manifest.
manifest="$out/manifest.tsv"
printf 'round\tsetup\tclient\tserver\treport\n' > "$manifest"
measure() {
  local round="$1" setup="$2" client="$3" server="$4" queue="$5" dir="$6"
  say "round $round, $setup: client in region $client through $server (queue $queue), $runs run(s)"
  mkdir -p "$dir"
  if [ "$warm_up" = yes ]; then
    bash "$regions" exec "$client" "$lab" bench latency --server "$server" --queue "$queue" --create-home a \
      --runs 1 --tasks "$tasks" --rate "$rate" --pollers "$pollers" --out "$dir/warm-up" \
      > "$dir/warm-up.out" 2> "$dir/warm-up.err" || die "the warm-up of round $round, $setup, client $client failed: $dir/warm-up.err"
  fi
  bash "$regions" exec "$client" "$lab" bench latency --server "$server" --queue "$queue" --create-home a \
    --runs "$runs" --tasks "$tasks" --rate "$rate" --pollers "$pollers" --out "$dir" \
    > "$dir/bench.out" 2> "$dir/bench.err" || {
    tail -n 30 "$dir/bench.err" >&2 || true
    die "the bench of round $round, $setup, client $client failed: $dir/bench.err"
  }
  printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$setup" "$client" "$server" "$dir/report.json" >> "$manifest"
}

say "bringing the bed up: regions a and b (one-way delay $one_way ms)"
bed_built=yes
bash "$regions" up a b >&2

# Warm-up rounds are named w1, w2, …: the table lists them apart, the verdict leaves them out.
round_names=()
for i in $(seq 1 "$warm_up_rounds"); do round_names+=("w$i"); done
for i in $(seq 1 "$rounds"); do round_names+=("$i"); done

for round in "${round_names[@]}"; do
  suffix="$(date +%s)_$round"

  dir="$out/round$round/one-region"
  mkdir -p "$dir"
  keyspace="fwbench_one_$suffix"
  schema "$keyspace" "{'class': 'NetworkTopologyStrategy', 'a': 1}"
  start_node a 1 "$keyspace" "$dir"
  measure "$round" "one region" a 10.210.1.2:7070 "latency_one_$round" "$dir/client-a"
  stop_nodes

  dir="$out/round$round/two-regions"
  mkdir -p "$dir"
  keyspace="fwbench_two_$suffix"
  schema "$keyspace" "{'class': 'NetworkTopologyStrategy', 'a': 1, 'b': 1}"
  start_node a 1 "$keyspace" "$dir"
  start_node b 2 "$keyspace" "$dir"
  measure "$round" "two regions" a 10.210.1.2:7070 "latency_two_$round" "$dir/client-a"
  measure "$round" "two regions" b 10.210.2.2:7070 "latency_two_$round" "$dir/client-b"
  stop_nodes

  if [ "$global" = yes ]; then
    dir="$out/round$round/global-fence"
    mkdir -p "$dir"
    keyspace="fwbench_global_$suffix"
    schema "$keyspace" "{'class': 'NetworkTopologyStrategy', 'a': 1, 'b': 1}"
    start_node a 1 "$keyspace" "$dir" global
    start_node b 2 "$keyspace" "$dir" global
    measure "$round" "global fence" a 10.210.1.2:7070 "latency_global_$round" "$dir/client-a"
    stop_nodes
  fi
done

# The table, from the reports' medians.
verdict=0
python3 - "$manifest" "$out/summary.md" "$one_way" "$tasks" "$rate" "$pollers" "$runs" "${REGIONS_CPUS:-}" "${REGIONS_DELAYER_CPUS:-}" <<'PY' || verdict=$?
import csv, json, sys

manifest, summary, one_way, tasks, rate, pollers, runs, cpus, delayer_cpus = sys.argv[1:10]
rtt = 2 * float(one_way)
rows = list(csv.DictReader(open(manifest), delimiter="\t"))

def figures(path):
    report = json.load(open(path))
    median = {m["name"]: m["fairway"] for m in report["scenarios"][0]["median"]}
    return {
        "add50": median["p50 AddTask call"],
        "add99": median["p99 AddTask call"],
        "sync50": median["p50 add → receipt"],
        "sync99": median["p99 add → receipt"],
        "matched": median["tasks handed over by sync match"],
        "measured": report.get("server", ""),
    }

for row in rows:
    row.update(figures(row["report"]))
    if not row["measured"].startswith(row["server"]):
        sys.exit(f"{row['report']} measured {row['measured']!r}, not {row['server']}")
baselines = {row["round"]: row for row in rows if row["setup"] == "one region"}

lines = [
    f"Regions on the bed: {rtt:g} ms round trip between regions; {tasks} tasks at {rate}/s, "
    f"{pollers} pollers, medians of {runs} run(s) per row; ratios to the same round's baseline (one region). "
    "Rounds w1, w2, … warm the bed up and count in no verdict. "
    + (f"Regions a and b pinned to CPUs {cpus.split()[0]} and {cpus.split()[1]} (REGIONS_CPUS)" if cpus
       else "Regions share every CPU")
    + (f", the delayers to {delayer_cpus} (REGIONS_DELAYER_CPUS)." if delayer_cpus else "."),
    "",
    "| round | setup | client region | server | add p50 (ms) | add p99 (ms) | sync-match p50 (ms) "
    "| sync-match p99 (ms) | sync matched | ratio add p99 | ratio sync-match p99 | added p50 add / sync-match (ms) |",
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
]
failed = []
for row in rows:
    base = baselines.get(row["round"])
    if base is None or base is row:
        ratio_add = ratio_sync = added = "–"
    else:
        ratio_add = f"{row['add99'] / base['add99']:.2f}x"
        ratio_sync = f"{row['sync99'] / base['sync99']:.2f}x"
        added = f"{row['add50'] - base['add50']:+.1f} / {row['sync50'] - base['sync50']:+.1f}"
        warm_up = row["round"].startswith("w")
        if not warm_up and row["setup"] == "two regions" and row["client"] == "a" and row["sync99"] > 1.5 * base["sync99"]:
            failed.append(f"round {row['round']}: client a's sync-match p99 is {ratio_sync} of the baseline's")
    lines.append(
        f"| {row['round']} | {row['setup']} | {row['client']} | {row['server']} | {row['add50']:.2f} "
        f"| {row['add99']:.2f} | {row['sync50']:.2f} | {row['sync99']:.2f} | {row['matched']:.1f}% "
        f"| {ratio_add} | {ratio_sync} | {added} |"
    )
lines += [
    "",
    "Expected: two regions, client a within 1.5x of the baseline's sync-match p99; client b, whose node "
    f"forwards each add and poll to the owner in a, about one round trip ({rtt:g} ms) more per forwarded call.",
]
lines += [f"BEYOND 1.5x: {f}" for f in failed] or ["Every two-region client of region a is within 1.5x of its baseline."]
text = "\n".join(lines) + "\n"
open(summary, "w").write(text)
print(text)
sys.exit(3 if failed else 0)
PY
say "reports, node logs and the table (summary.md) in $out"
exit "$verdict"
