#!/usr/bin/env bash
# The embedded store's throughput and latency benchmarks, a base commit's
# server against the working tree's, alternated run by run in one session so
# that both see the same machine; every run's figure is printed, then each
# side's median. The client (`fairway-lab`) is the working tree's for both:
# what is compared is the server.
#
#   scripts/bench-compare.sh BASE [RUNS]
#
# BASE is any commit (e.g. main, HEAD~3, 8c7c9cc), or a server binary built
# before (an executable file, used as it is); RUNS is per side (default
# 3). Extra `bench throughput` flags go in BENCH_THROUGHPUT_ARGS (default
# "--tasks 200000"); set BENCH_LATENCY=0 to skip the latency benchmark,
# BENCH_THROUGHPUT_ARGS=skip to skip the throughput one, BENCH_NOISY=1 to
# add the noisy-neighbour scenario (its p99 ratio), BENCH_ZIPF=1 to add the
# Zipf keys over 4 partitions (the lowest Jain's index of its 10-s windows), and
# BENCH_INSTRUCTIONS=TASKS to count, before the timed runs, the instructions
# each server executes for TASKS tasks of the throughput benchmark (one run
# each under valgrind's callgrind: the same count whatever else the machine
# does, where the timed figures spread by 30% here), and
# BENCH_STORE=cassandra://HOST:PORT/KEYSPACE to run them all on Cassandra
# (the throughput's ratio to the raw conditional batches of the same run is
# printed too). BENCH_BASE_THROUGHPUT_ARGS adds `bench throughput` flags for
# the base only (e.g. "--complete-apart" for a base whose PollTasks took no
# completions).
# Base checkouts and their builds are kept in FAIRWAY_BENCH_BASE_DIR
# (default ~/.cache/fairway/bench-base).
# Run it before resolving an issue that touches the hot path.
set -euo pipefail
cd "$(dirname "$0")/.."

base="${1:?usage: scripts/bench-compare.sh BASE|SERVER_BINARY [RUNS]}"
runs="${2:-3}"
throughput_args="${BENCH_THROUGHPUT_ARGS:---tasks 200000}"
base_throughput_args="${BENCH_BASE_THROUGHPUT_ARGS:-}"
latency="${BENCH_LATENCY:-1}"
noisy="${BENCH_NOISY:-0}"
zipf="${BENCH_ZIPF:-0}"
instructions="${BENCH_INSTRUCTIONS:-0}"
store_args=()
if [ -n "${BENCH_STORE:-}" ]; then
  store_args=(--store "$BENCH_STORE")
fi
if ! [[ "$runs" =~ ^[1-9][0-9]?$ ]]; then
  echo "RUNS: $runs is not a number of runs from 1 to 99" >&2
  exit 2
fi
if ! [[ "$instructions" =~ ^[0-9]{1,7}$ ]]; then
  echo "BENCH_INSTRUCTIONS: $instructions is not a number of tasks from 0 (off) to 9999999" >&2
  exit 2
fi
if [ "$instructions" != 0 ] && ! command -v valgrind >/dev/null; then
  echo "BENCH_INSTRUCTIONS needs valgrind (Debian's package valgrind)" >&2
  exit 2
fi
base_binary=""
if [ -f "$base" ] && [ -x "$base" ]; then
  # A server built before (say, `target/release/fairway` copied aside).
  base_binary="$(cd "$(dirname "$base")" && pwd)/$(basename "$base")"
  base_commit="binary:$base_binary"
else
  base_commit="$(git rev-parse --verify --quiet "$base^{commit}")" || {
    echo "BASE: $base names no commit here (try a hash, a branch or HEAD~N) and is no executable file" >&2
    exit 2
  }
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The base's checkout and build are kept for the next comparison, outside
# this workspace (a checkout inside it would be read as one of its members).
cache="${FAIRWAY_BENCH_BASE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fairway/bench-base}"
mkdir -p "$cache"
tree="$cache/tree-${base_commit:0:12}"

echo "building the working tree (release)..." >&2
cargo build --release --locked -q -p fairway -p fairway-lab
new_server="$PWD/target/release/fairway"
lab="$PWD/target/release/fairway-lab"

base_server="$work/fairway-base"
if [ -n "$base_binary" ]; then
  cp "$base_binary" "$base_server"
else
  echo "building $base (${base_commit:0:10}, release; its own target directory, kept between runs)..." >&2
  if [ ! -d "$tree" ]; then
    git worktree prune
    git worktree add --detach --quiet "$tree" "$base_commit"
  fi
  CARGO_TARGET_DIR="$cache/target" cargo build --release --locked -q -p fairway --manifest-path "$tree/Cargo.toml"
  cp "$cache/target/release/fairway" "$base_server"
fi

# The median figure named $2 (a prefix) in the report written to $1.
figure() {
  python3 - "$1/report.json" "$2" <<'EOF'
import json, sys
report, prefix = json.load(open(sys.argv[1])), sys.argv[2]
scenarios = report if isinstance(report, list) else report.get("scenarios", [report])
for scenario in scenarios:
    for measure in scenario.get("median", []):
        if measure["name"].startswith(prefix):
            value = measure["fairway"]
            print(f'{value:.1f}' if abs(value) >= 100 else f'{value:.3f}')
            sys.exit(0)
sys.exit(f"no measure named {prefix!r} in {sys.argv[1]}")
EOF
}

declare -A results
bench() { # side server label benchmark measure unit [bench flags...]
  local side="$1" server="$2" label="$3" kind="$4" prefix="$5" unit="$6"
  shift 6
  local out="$work/$label-$side-$run"
  "$lab" bench "$kind" --server-binary "$server" --out "$out" "${store_args[@]}" "$@" >"$out.log" 2>&1 || {
    echo "bench $kind ($side) failed; its output:" >&2
    cat "$out.log" >&2
    exit 1
  }
  local value
  value="$(figure "$out" "$prefix")"
  results["$label-$side"]+="$value "
  printf '%-10s run %d  %-4s %12s %s\n' "$label" "$run" "$side" "$value" "$unit"
}

base_name="${base_binary:-${base_commit:0:10}}"
echo "base $base_name against the working tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes')), $runs runs each, alternated"

# Instructions per task: the server's whole run (its start and stop too)
# divided by the tasks. valgrind's CPU has no SHA extensions, so SHA-256
# (the lease tokens' HMACs) runs in software there and is counted apart.
counted() { # callgrind output, tasks
  python3 - "$1" "$2" <<'EOF'
import re, subprocess, sys
out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", sys.argv[1]],
                     capture_output=True, text=True, check=True).stdout
total = sha = 0
for line in out.splitlines():
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
    if not m or "PROGRAM TOTALS" in line:
        continue
    ir = int(m.group(1).replace(",", ""))
    total += ir
    if "sha2" in m.group(2) and "compress256" in m.group(2):
        sha += ir
tasks = int(sys.argv[2])
print(f"{total / tasks:.0f} {(total - sha) / tasks:.0f}")
EOF
}
if [ "$instructions" != 0 ]; then
  args="$throughput_args"
  [ "$args" = skip ] && args=""
  args="$(echo " $args " | sed -E 's/ --tasks[ =][0-9]+ / /')"
  for side in base new; do
    server="$base_server"
    [ "$side" = new ] && server="$new_server"
    side_args="$args"
    [ "$side" = base ] && side_args="$args $base_throughput_args"
    wrapper="$work/callgrind-$side-0"
    printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s "%s" "$@"\n' "$wrapper.out" "$server" >"$wrapper"
    chmod +x "$wrapper"
    run=0
    # shellcheck disable=SC2086
    bench "$side" "$wrapper" instructions throughput "end to end: add" "tasks/s (under callgrind)" --tasks "$instructions" $side_args
    read -r all without_sha <<<"$(counted "$wrapper.out" "$instructions")"
    results["instructions-$side"]="$without_sha"
    printf '%-10s        %-4s %12s instructions per task (%s with SHA-256 in software)\n' instructions "$side" "$without_sha" "$all"
  done
fi
for run in $(seq 1 "$runs"); do
  for side in base new; do
    server="$base_server"
    [ "$side" = new ] && server="$new_server"
    if [ "$throughput_args" != skip ]; then
      side_args="$throughput_args"
      [ "$side" = base ] && side_args="$throughput_args $base_throughput_args"
      # shellcheck disable=SC2086
      bench "$side" "$server" throughput throughput "end to end: add" tasks/s $side_args
      if [ -n "${BENCH_STORE:-}" ]; then
        value="$(figure "$work/throughput-$side-$run" "end to end / raw conditional")"
        results["ratio-$side"]+="$value "
        printf '%-10s run %d  %-4s %12s %s\n' ratio "$run" "$side" "$value" "(end to end / raw conditional batches, same run)"
      fi
    fi
    if [ "$latency" = 1 ]; then
      bench "$side" "$server" latency latency "p99 add → receipt" "ms (p99 add → receipt)"
    fi
    if [ "$noisy" = 1 ]; then
      bench "$side" "$server" noisy fairness "p99 beside the noisy key / p99 alone" "(quiet keys' p99 beside / alone)" --only noisy
    fi
    if [ "$zipf" = 1 ]; then
      bench "$side" "$server" zipf fairness "lowest Jain's index over the 10 s windows" "(Jain's index, lowest 10-s window)" --only zipf
    fi
  done
done

# Every run's report stays, for the figures the summary below does not show.
kept="bench-results/compare-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$kept"
cp -r "$work"/*-base-* "$work"/*-new-* "$kept"/
echo "every run's report: $kept"

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo
for kind in instructions throughput ratio latency noisy zipf; do
  [ -n "${results[$kind-base]:-}" ] || continue
  b="$(echo "${results[$kind-base]}" | median)"
  n="$(echo "${results[$kind-new]}" | median)"
  echo "$kind median: base $b, new $n ($(python3 -c "print(f'{100*($n/$b-1):+.1f}%')"))"
done
