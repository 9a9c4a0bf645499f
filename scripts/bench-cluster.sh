#!/usr/bin/env bash
# Throughput of N `fairway serve` nodes sharing one Cassandra keyspace, driven
# over gRPC by `fairway-lab bench throughput --servers …`, beside the raw append
# rate of the same Cassandra in the same run. Needs a Cassandra node (e.g.
# deploy/cassandra/cassandra.sh start).
#
#   scripts/bench-cluster.sh NODES [more `fairway-lab bench throughput` flags]
set -euo pipefail
cd "$(dirname "$0")/.."

nodes="${1:-3}"
shift || true
contact="${FAIRWAY_BENCH_CASSANDRA:-127.0.0.1:9042}"
keyspace="fairway_bench"
store="cassandra://$contact/$keyspace"
bin=target/release/fairway
lab=target/release/fairway-lab

# Both binaries: the product's and the tools' (tools/fairway-lab).
cargo build --release -q --workspace
"$bin" schema apply --cassandra "$contact" --keyspace "$keyspace" >/dev/null

work="$(mktemp -d)"
pids=()
cleanup() {
  [ "${#pids[@]}" -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

servers=()
for i in $(seq 1 "$nodes"); do
  FAIRWAY_LOG=warn "$bin" serve --listen 127.0.0.1:0 --store "$store" >"$work/node$i.out" 2>"$work/node$i.err" &
  pids+=("$!")
done
for i in $(seq 1 "$nodes"); do
  for _ in $(seq 1 300); do
    grep -q "listening on" "$work/node$i.out" 2>/dev/null && break
    sleep 0.1
  done
  servers+=("$(awk '/listening on/ {print $3}' "$work/node$i.out")")
done
echo "nodes: ${servers[*]}" >&2
"$lab" bench throughput --store "$store" --servers "$(IFS=,; echo "${servers[*]}")" "$@"
