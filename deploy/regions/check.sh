#!/usr/bin/env bash
# Proves that the test bed of deploy/regions/regions.sh works, and prints the
# evidence: builds regions a and b, measures round trips (between regions,
# inside a region, from the root namespace), shows each Cassandra node's
# datacenter from its own system tables, cuts region a off and shows a TCP
# connect to it hang, heals it and shows the connect succeed, and takes the
# bed down again, checking that nothing of it is left. Exits non-zero on the
# first thing that is not as it should be.
#
#   deploy/regions/check.sh     (root; the bed must be down: it builds and removes its own)
#
# The delay of the bed's nfqueue mode happens where packets enter a
# namespace, after the kernel has stamped their arrival, so `ping` is run
# with -U (time from the sending process to the receiving one, as an
# application sees it), and TCP connects are timed besides.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
regions="$here/regions.sh"
state="$root/.deploy/regions"
one_way="${REGIONS_ONE_WAY_MS:-20}"

step() { printf '\n== %s\n' "$*"; }
pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
# expect WHAT COMMAND...: PASS WHAT if the command succeeds, else FAIL WHAT (and exit).
expect() {
  local what="$1"
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}

[ "$(id -u)" = 0 ] || fail "needs root"
[ ! -f "$state/regions" ] || fail "the bed is up ($(cat "$state/regions")): run deploy/regions/regions.sh down first"

# Cassandra JVMs that ran before (other clusters of this machine): untouched.
jvms_before="$(pgrep -f CassandraDaemon | sort || true)"
bed_built=""
cleanup() {
  if [ -n "$bed_built" ]; then
    bash "$regions" down || true
  fi
}
trap cleanup EXIT

# Round trip in ms from namespace $1 (or "root") to $2: the average of 5
# pings (user to user), else of 5 TCP connects to port 9042 (a refusal takes
# a round trip too).
rtt() {
  local inside=() out
  [ "$1" = root ] || inside=(ip netns exec "fw-$1")
  if command -v ping >/dev/null; then
    out="$("${inside[@]}" ping -U -n -q -c 5 -i 0.2 "$2")"
    printf '%s\n' "$out" | tail -n 2 | sed 's/^/    /' >&2
    printf '%s\n' "$out" | awk -F/ '/^rtt|^round-trip/ { print $5 }'
  else
    "${inside[@]}" python3 - "$2" <<'PY'
import socket, sys, time
times = []
for _ in range(5):
    start = time.perf_counter()
    try:
        socket.create_connection((sys.argv[1], 9042), timeout=5).close()
    except ConnectionRefusedError:
        pass
    times.append((time.perf_counter() - start) * 1000)
print("    TCP connects (ms): " + " ".join(f"{t:.2f}" for t in times), file=sys.stderr)
print(f"{sum(times) / len(times):.3f}")
PY
  fi
}

# A TCP connect from namespace $1 (or "root") to $2:$3, given 3 s: prints
# "connected in … ms", "timed out after … ms" or "failed (rc …) after … ms".
connect() {
  local inside=() start end rc=0 took
  [ "$1" = root ] || inside=(ip netns exec "fw-$1")
  start="$(date +%s%N)"
  # The connect alone is timed inside (not the start of the processes around it).
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
  took="$("${inside[@]}" timeout 3 bash -c 'start=$EPOCHREALTIME; exec 3<>"/dev/tcp/$1/$2" || exit 1; end=$EPOCHREALTIME
    echo "${start/./} ${end/./}" | awk "{ printf \"%.1f\", (\$2 - \$1) / 1000 }"' connect "$2" "$3" 2>/dev/null)" || rc=$?
  end="$(date +%s%N)"
  case "$rc" in
    0) echo "connected in $took ms" ;;
    124) echo "timed out after $(((end - start) / 1000000)) ms" ;;
    *) echo "failed (rc $rc) after $(((end - start) / 1000000)) ms" ;;
  esac
}

timed_out() { case "$1" in "timed out"*) return 0 ;; *) return 1 ;; esac; }
connected() { case "$1" in connected*) return 0 ;; *) return 1 ;; esac; }

# $1 within [$2, $3]?
between() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

step "up a b"
bed_built=yes
bash "$regions" up a b
bash "$regions" status

step "round trips (one-way delay $one_way ms)"
echo "fw-a -> 10.210.2.1 (region b's Cassandra):"
cross="$(rtt a 10.210.2.1)"
echo "fw-a -> 10.210.1.2 (region a's own address):"
local_rtt="$(rtt a 10.210.1.2)"
echo "root namespace -> 10.210.1.1 (region a's Cassandra):"
from_root="$(rtt root 10.210.1.1)"
echo "fw-a -> 10.210.2.1:9042, a TCP connect: $(connect a 10.210.2.1 9042)"
echo "fw-a -> 10.210.1.1:9042, a TCP connect: $(connect a 10.210.1.1 9042)"
expect "between regions: $cross ms (expected about $((2 * one_way)))" between "$cross" "$((2 * one_way - 1))" "$((2 * one_way + 15))"
expect "inside a region: $local_rtt ms (expected under 1)" between "$local_rtt" 0 1
expect "root namespace to a region: $from_root ms (expected about $one_way)" between "$from_root" "$((one_way - 1))" "$((one_way + 10))"

step "datacenters, from each node's system tables (deploy/regions/cql.py)"
for address in 10.210.1.1 10.210.2.1; do
  echo "$address system.local:"
  python3 "$here/cql.py" "$address" "SELECT listen_address, data_center, rack FROM system.local" | sed 's/^/    /'
  echo "$address system.peers:"
  python3 "$here/cql.py" "$address" "SELECT peer, data_center, rack FROM system.peers" | sed 's/^/    /'
done
datacenters() {
  [ "$(python3 "$here/cql.py" 10.210.1.1 "SELECT data_center FROM system.local" | tail -n 1)" = a ] &&
    [ "$(python3 "$here/cql.py" 10.210.2.1 "SELECT data_center FROM system.local" | tail -n 1)" = b ] &&
    [ "$(python3 "$here/cql.py" 10.210.1.1 "SELECT data_center FROM system.peers" | tail -n 1)" = b ] &&
    [ "$(python3 "$here/cql.py" 10.210.2.1 "SELECT data_center FROM system.peers" | tail -n 1)" = a ]
}
expect "node 10.210.1.1 is in datacenter a, node 10.210.2.1 in b, and each knows the other's" datacenters
echo "gossip:"
grep -h "is now UP" "$state"/cassandra/node*/logs/system.log | sed 's/^/    /'

step "cut a"
bash "$regions" cut a
bash "$regions" cut a
echo "fw-a's filter table:"
ip netns exec fw-a iptables -S | sed 's/^/    /'
result="$(connect b 10.210.1.1 9042)"
echo "fw-b -> 10.210.1.1:9042: $result"
expect "the connect from region b hangs" timed_out "$result"
result="$(connect root 10.210.1.1 9042)"
echo "root namespace -> 10.210.1.1:9042: $result"
expect "the connect from the root namespace hangs" timed_out "$result"
result="$(connect a 10.210.2.1 9042)"
echo "fw-a -> 10.210.2.1:9042: $result"
expect "the connect out of region a hangs" timed_out "$result"
result="$(connect a 10.210.1.1 9042)"
echo "fw-a -> 10.210.1.1:9042 (inside the region): $result"
expect "region a still reaches itself" connected "$result"
bash "$regions" status

step "heal a"
bash "$regions" heal a
echo "fw-a's filter table:"
ip netns exec fw-a iptables -S | sed 's/^/    /'
result="$(connect b 10.210.1.1 9042)"
echo "fw-b -> 10.210.1.1:9042: $result"
expect "the connect from region b succeeds again" connected "$result"

step "down"
pids="$(cat "$state"/cassandra/node*/pid "$state"/netdelay-*.pid 2>/dev/null | tr '\n' ' ')"
bash "$regions" down
bed_built=""
left=""
for pid in $pids; do
  if kill -0 "$pid" 2>/dev/null; then
    left="$left $pid"
  fi
done
no_namespace() { ! ip netns list | grep -q '^fw-'; }
no_link() { ! ip link show fwbr0 >/dev/null 2>&1 && ! ip -o link | grep -q ' fwv-'; }
expect "none of the bed's processes (${pids% }) is left" [ -z "$left" ]
expect "no namespace fw-* is left" no_namespace
expect "no bridge fwbr0, no veth fwv-* is left" no_link
jvms_after="$(pgrep -f CassandraDaemon | sort || true)"
expect "the Cassandra JVMs of before are those of after (pids: $(echo "${jvms_before:-none}" | paste -sd ' '))" [ "$jvms_after" = "$jvms_before" ]
echo
echo "check: all passed"
