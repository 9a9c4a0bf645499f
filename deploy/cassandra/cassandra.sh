#!/usr/bin/env bash
# Runs real Apache Cassandra nodes on loopback, from the Maven Central
# artifact, with plain `java` (JDK 17) — no tarball, no Docker.
#
#   deploy/cassandra/cassandra.sh fetch             download the jars (once; ~/.m2 is reused)
#   deploy/cassandra/cassandra.sh start [NODES]     start NODES nodes (1 to 5; default 1, or as many as
#                                                   CASSANDRA_DEV_ADDRESSES names), wait until CQL is up
#   deploy/cassandra/cassandra.sh stop              stop every node this script started (SIGTERM, then SIGKILL)
#   deploy/cassandra/cassandra.sh status            which nodes run
#   deploy/cassandra/cassandra.sh pid N             the pid of node N (for fault tests)
#   deploy/cassandra/cassandra.sh restart-node N    start node N again on its data (after a kill); returns
#                                                   once it accepts CQL and gossip has it up on the other nodes
#
# CASSANDRA_DEV_BATCH_FAIL at `start` sets `batch_size_fail_threshold` (default
# 1024KiB; Cassandra's own default is 50KiB, which the scheduler's origin writes
# must stay under with the default `cassandra.visit_batch_bytes`).
# The commit log is synced before each write is acknowledged (`commitlog_sync:
# batch`): with the default periodic sync, a killed single node forgets the
# writes of its last sync period, which the outage test would see as lost tasks.
#
# Node N listens on 127.0.0.N:9042 (CQL) and 127.0.0.N:7000 (gossip), JMX on
# 7N99. State lives in $CASSANDRA_DEV_HOME (default: .deploy/cassandra
# at the repository root): nodeN/ holds each node's data and logs;
# .deploy/cassandra/lib the jars.
# A second cluster runs beside the first in a home of its own from another
# address: CASSANDRA_DEV_FIRST=11 at `start` puts node N on 127.0.0.(10+N)
# (JMX on port 7099 + 100 × the address's last number); the home remembers it.
# CASSANDRA_DEV_SECURE=DIR at `start` makes the nodes require a login
# (PasswordAuthenticator; the default role cassandra/cassandra) and TLS from
# clients, serving DIR/node.pem (an unencrypted private key and its
# certificate chain, PEM); the home remembers it too.
# CASSANDRA_DEV_DCS="dc1 dc1 dc2" at `start` puts node N in the datacenter the
# N-th word names (GossipingPropertyFileSnitch, each node reading its own
# nodeN/cassandra-rackdc.properties, dc=… and rack=rack1, given to it with
# -Dcassandra-rackdc.properties=file://…); unset, the nodes use SimpleSnitch
# (datacenter1) as before. The home remembers it.
# CASSANDRA_DEV_ADDRESSES="10.210.1.1 10.210.2.1" at `start` gives the nodes'
# addresses in place of the 127.0.0.N scheme (and NODES defaults to their
# count). Node N's JMX port is then 7198 + 100 × (N − 1) (7198, 7298, …, 7598:
# the ports of the 127.0.0.N scheme all end in 99, so they never meet), bound
# to the loopback of the node's network namespace: two such homes in one
# namespace at once would share them. The home remembers it.
# CASSANDRA_DEV_NETNS="fw-a fw-b" at `start` runs node N in the network
# namespace the N-th word names (`ip netns exec`, so root only; the namespaces
# must exist, with `lo` up). Readiness is a TCP connect from this script's
# namespace, so the nodes' addresses must be reachable from it (as through the
# bridge of deploy/regions/regions.sh). The home remembers it.
# With more than one node, node N owns the single token -2^63 + (N − 1) ×
# floor(2^64 / NODES); a single node owns 0.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# Absolute, so that a node's command line names its directory the same way
# whatever directory the script later runs from.
home="$(realpath -m -- "${CASSANDRA_DEV_HOME:-$root/.deploy/cassandra}")"
# The jars are shared by every home.
lib="${CASSANDRA_DEV_LIB:-$root/.deploy/cassandra/lib}"
version="5.0.8"
heap="${CASSANDRA_DEV_HEAP:-768m}"
start_timeout="${CASSANDRA_DEV_START_TIMEOUT:-240}"

say() { printf 'cassandra: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

fetch() {
  if [ -f "$lib/.complete-$version" ]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn (Maven 3) is needed to fetch Cassandra from Maven Central"
  command -v java >/dev/null || die "java (JDK 17) is needed to run Cassandra"
  say "fetching org.apache.cassandra:cassandra-all:$version and its runtime dependencies into $lib"
  mkdir -p "$lib"
  mvn -B -q -f "$here/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$lib"
  ls "$lib"/cassandra-all-"$version".jar >/dev/null || die "the fetch did not produce cassandra-all-$version.jar"
  touch "$lib/.complete-$version"
}

node_dir() { echo "$home/node$1"; }

# The last number of the first node's address (1 unless the home says otherwise).
first() { cat "$home/first" 2>/dev/null || echo 1; }
# The directory of the TLS files of a secure home, or nothing.
secure() { cat "$home/secure" 2>/dev/null || true; }
# How many nodes the home was started with.
node_count() { cat "$home/nodes" 2>/dev/null || echo 1; }
# The $2-th word of the home's file $1, or nothing (no file, or fewer words).
nth_word() {
  local words=()
  [ -f "$home/$1" ] || return 0
  read -r -a words < "$home/$1" || true
  [ "$2" -ge 1 ] && [ "$2" -le "${#words[@]}" ] || return 0
  echo "${words[$(($2 - 1))]}"
}
address() {
  if [ -s "$home/addresses" ]; then
    nth_word addresses "$1"
  else
    echo "127.0.0.$(($(first) + $1 - 1))"
  fi
}
# Node $1's datacenter (GossipingPropertyFileSnitch), or nothing (SimpleSnitch).
datacenter() { nth_word dcs "$1"; }
# The network namespace node $1 runs in, or nothing (this script's own).
netns() { nth_word netns "$1"; }
jmx_port() {
  if [ -s "$home/addresses" ]; then
    echo $((7198 + 100 * ($1 - 1)))
  else
    echo $((7099 + 100 * ($(first) + $1 - 1)))
  fi
}
# Every node of the home: 1 to its count, and any other whose directory still
# has a pid file (so that nothing a start left behind escapes `stop`).
nodes_of_home() {
  local f
  {
    seq 1 "$(node_count)"
    for f in "$home"/node*/pid; do
      [ -f "$f" ] || continue
      f="${f%/pid}"
      echo "${f##*/node}"
    done
  } | sort -nu
}

# The token of node $1 of $2: evenly spaced over the Murmur3 ring.
token() {
  local n="$1" nodes="$2" tokens
  if [ "$nodes" = 1 ]; then
    echo 0
  elif [ "$nodes" = 3 ]; then
    tokens=(-9223372036854775808 -3074457345618258603 3074457345618258602)
    echo "${tokens[$((n - 1))]}"
  else
    # Beyond 64-bit shell arithmetic: Python's integers.
    python3 -c 'import sys; n, nodes = int(sys.argv[1]), int(sys.argv[2]); print(-2**63 + (n - 1) * (2**64 // nodes))' "$n" "$nodes"
  fi
}

write_config() {
  local n="$1" nodes="$2" dir token snitch=SimpleSnitch dc
  dir="$(node_dir "$n")"
  mkdir -p "$dir/data" "$dir/commitlog" "$dir/saved_caches" "$dir/hints" "$dir/cdc_raw" "$dir/logs"
  token="$(token "$n" "$nodes")"
  dc="$(datacenter "$n")"
  if [ -n "$dc" ]; then
    snitch=GossipingPropertyFileSnitch
    printf 'dc=%s\nrack=rack1\n' "$dc" > "$dir/cassandra-rackdc.properties"
  else
    rm -f "$dir/cassandra-rackdc.properties"
  fi
  cat > "$dir/cassandra.yaml" <<YAML
cluster_name: fairway-test
num_tokens: 1
initial_token: $token
auto_bootstrap: false
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: $snitch
listen_address: $(address "$n")
rpc_address: $(address "$n")
storage_port: 7000
native_transport_port: 9042
start_native_transport: true
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters: [{seeds: "$(address 1):7000"}]
data_file_directories: [$dir/data]
commitlog_directory: $dir/commitlog
saved_caches_directory: $dir/saved_caches
hints_directory: $dir/hints
cdc_raw_directory: $dir/cdc_raw
commitlog_sync: batch
commitlog_segment_size: 32MiB
concurrent_reads: 8
concurrent_writes: 16
concurrent_counter_writes: 4
concurrent_compactors: 1
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
key_cache_size: 8MiB
file_cache_size: 32MiB
auto_snapshot: false
phi_convict_threshold: 5
read_request_timeout: 15000ms
write_request_timeout: 15000ms
range_request_timeout: 15000ms
cas_contention_timeout: 5000ms
paxos_variant: v2
paxos_state_purging: gc_grace
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: ${CASSANDRA_DEV_BATCH_FAIL:-1024KiB}
tombstone_warn_threshold: ${CASSANDRA_DEV_TOMBSTONE_WARN:-1000}
tombstone_failure_threshold: 100000
YAML
  if [ -n "$(secure)" ]; then
    cat >> "$dir/cassandra.yaml" <<YAML
authenticator: PasswordAuthenticator
client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: $(secure)/node.pem
YAML
  fi
  cat > "$dir/logback.xml" <<XML
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$dir/logs/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
XML
}

# The pid of node $1 while it runs: the process of its pid file, if that is
# still the node's JVM. Pids are reused (pid_max is 32768 here, and a test
# run starts thousands of processes), so the pid file of a node killed by a
# fault test may name another process by now: nothing signals it.
node_pid() {
  local dir pid arguments argument storage=""
  dir="$(node_dir "$1")"
  [ -f "$dir/pid" ] || return 1
  pid="$(cat "$dir/pid")"
  arguments="$(tr '\0' '\n' 2>/dev/null < "/proc/$pid/cmdline")" || return 1
  while IFS= read -r argument; do
    case "$argument" in
      -Dcassandra.storagedir=*) storage="${argument#-Dcassandra.storagedir=}" && break ;;
    esac
  done <<< "$arguments"
  # The same directory however its path is spelled (`..`, symbolic links).
  [ -n "$storage" ] && [ "$(realpath -m -- "$storage")" = "$(realpath -m -- "$dir")" ] || return 1
  echo "$pid"
}

is_running() { node_pid "$1" > /dev/null; }

cql_up() {
  # A TCP connect to the CQL port of node $1; bounded, since a node behind a
  # DROP rule (deploy/regions/regions.sh cut) would hang it for minutes.
  # shellcheck disable=SC2016 # $1 is the inner shell's
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/9042"' cql_up "$(address "$1")" 2>/dev/null
}

launch() {
  local n="$1" nodes="$2" niceness="${3:-0}" dir ns
  dir="$(node_dir "$n")"
  if is_running "$n"; then
    say "node $n already runs (pid $(node_pid "$n"))"
    return 0
  fi
  # Written on every start, so that a change of this script reaches existing nodes.
  write_config "$n" "$nodes"
  local single=() rackdc=() inside=()
  if [ "$nodes" = 1 ]; then
    single=(-Dcassandra.system_distributed.default_rf=1 -Dcassandra.system_traces.default_rf=1)
  fi
  if [ -f "$dir/cassandra-rackdc.properties" ]; then
    rackdc=("-Dcassandra-rackdc.properties=file://$dir/cassandra-rackdc.properties")
  fi
  ns="$(netns "$n")"
  if [ -n "$ns" ]; then
    [ -e "/var/run/netns/$ns" ] || die "node $n: network namespace $ns does not exist (ip netns add $ns)"
    # `ip netns exec` execs the command (no fork), so $! stays the JVM's pid.
    inside=(ip netns exec "$ns")
  fi
  say "starting node $n on $(address "$n"):9042${ns:+ in network namespace $ns}${rackdc:+, datacenter $(datacenter "$n")} (logs: $dir/logs)"
  # A fresh log, so that readiness is judged on this start only.
  [ -f "$dir/logs/system.log" ] && mv "$dir/logs/system.log" "$dir/logs/system.log.previous"
  # setsid: the node outlives this script, in its own process group.
  "${inside[@]}" setsid nice -n "$niceness" java @"$here/jvm17.args" "-Xms$heap" "-Xmx$heap" \
    "-Dcassandra.config=file://$dir/cassandra.yaml" \
    "-Dcassandra.storagedir=$dir" \
    "-Dcassandra.logdir=$dir/logs" \
    "-Dlogback.configurationFile=$dir/logback.xml" \
    -Dcassandra-foreground=yes \
    "-Dcassandra.jmx.local.port=$(jmx_port "$n")" \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.ring_delay_ms=5000 \
    "${single[@]}" \
    "${rackdc[@]}" \
    -cp "$lib/*" org.apache.cassandra.service.CassandraDaemon \
    > "$dir/logs/stdout.log" 2>&1 < /dev/null &
  local started=$! waited=0
  echo "$started" > "$dir/pid"
  # Until the child has exec'd, its command line is this script's.
  while ! is_running "$n" && kill -0 "$started" 2>/dev/null && [ "$waited" -lt 100 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
}

# Waits until node $1 accepts CQL, at most $start_timeout seconds. With $2,
# a node started at a lower priority gets the normal one back once it has
# waited that many seconds: on a busy machine a niced start would starve.
wait_up() {
  local n="$1" renice_after="${2:-}" dir started="$SECONDS"
  dir="$(node_dir "$n")"
  until grep -q "Startup complete" "$dir/logs/system.log" 2>/dev/null && cql_up "$n"; do
    if ! is_running "$n"; then
      tail -n 30 "$dir/logs/stdout.log" >&2 || true
      die "node $n exited during startup; see $dir/logs"
    fi
    if [ $((SECONDS - started)) -ge "$start_timeout" ]; then
      die "node $n did not accept CQL within ${start_timeout}s; see $dir/logs"
    fi
    if [ -n "$renice_after" ] && [ $((SECONDS - started)) -ge "$renice_after" ]; then
      say "node $n is slow to start (${renice_after}s): back to normal priority"
      normal_priority "$(node_pid "$n")"
      renice_after=""
    fi
    sleep 1
  done
  say "node $n is up ($((SECONDS - started))s)"
}

# What the data of a home depends on: its nodes, their addresses and datacenters.
layout() { echo "$1/$2/$3/$4"; }
home_layout() {
  layout "$(cat "$home/nodes")" "$(first)" "$(cat "$home/addresses" 2>/dev/null || true)" "$(cat "$home/dcs" 2>/dev/null || true)"
}

# Writes $2 (words) to the home's file $1, or removes the file if there are none.
remember() {
  if [ -n "$2" ]; then
    echo "$2" > "$home/$1"
  else
    rm -f "$home/$1"
  fi
}

start() {
  local nodes="${1:-}" addresses=() dcs=() namespaces=() word
  read -r -a addresses <<< "${CASSANDRA_DEV_ADDRESSES:-}" || true
  read -r -a dcs <<< "${CASSANDRA_DEV_DCS:-}" || true
  read -r -a namespaces <<< "${CASSANDRA_DEV_NETNS:-}" || true
  if [ -z "$nodes" ]; then
    nodes=1
    [ "${#addresses[@]}" = 0 ] || nodes="${#addresses[@]}"
  fi
  case "$nodes" in 1|2|3|4|5) ;; *) die "start takes 1 to 5 nodes, not $nodes" ;; esac
  if [ "${#addresses[@]}" != 0 ] && [ "${#addresses[@]}" != "$nodes" ]; then
    die "CASSANDRA_DEV_ADDRESSES names ${#addresses[@]} address(es) for $nodes node(s)"
  fi
  for word in "${addresses[@]}"; do
    [[ "$word" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || die "CASSANDRA_DEV_ADDRESSES: $word is not an IPv4 address"
  done
  if [ "${#dcs[@]}" != 0 ] && [ "${#dcs[@]}" != "$nodes" ]; then
    die "CASSANDRA_DEV_DCS names ${#dcs[@]} datacenter(s) for $nodes node(s)"
  fi
  for word in "${dcs[@]}"; do
    [[ "$word" =~ ^[A-Za-z0-9_-]+$ ]] || die "CASSANDRA_DEV_DCS: $word is not a datacenter name (letters, digits, _ and -)"
  done
  if [ "${#namespaces[@]}" != 0 ] && [ "${#namespaces[@]}" != "$nodes" ]; then
    die "CASSANDRA_DEV_NETNS names ${#namespaces[@]} namespace(s) for $nodes node(s)"
  fi
  fetch
  if [ -f "$home/nodes" ] && [ "$(home_layout)" != "$(layout "$nodes" "${CASSANDRA_DEV_FIRST:-1}" "${addresses[*]}" "${dcs[*]}")" ]; then
    say "the data in $home was made for $(cat "$home/nodes") node(s) from $(address 1)$([ ! -s "$home/dcs" ] || echo " in datacenters $(cat "$home/dcs")"), not this start's; wiping it"
    stop
    rm -rf "$home"/node*
  fi
  mkdir -p "$home"
  echo "$nodes" > "$home/nodes"
  echo "${CASSANDRA_DEV_FIRST:-1}" > "$home/first"
  remember addresses "${addresses[*]}"
  remember dcs "${dcs[*]}"
  remember netns "${namespaces[*]}"
  if [ -n "${CASSANDRA_DEV_SECURE:-}" ]; then
    [ -f "$CASSANDRA_DEV_SECURE/node.pem" ] || die "CASSANDRA_DEV_SECURE: $CASSANDRA_DEV_SECURE/node.pem is missing"
    echo "$CASSANDRA_DEV_SECURE" > "$home/secure"
  fi
  # On 2 cores: the first node alone, then the others.
  launch 1 "$nodes"
  wait_up 1
  for n in $(seq 2 "$nodes"); do
    launch "$n" "$nodes"
  done
  for n in $(seq 2 "$nodes"); do
    wait_up "$n"
  done
}

# How many times node $1's log says gossip marked node $2 up.
times_seen_up() {
  local count
  count="$(grep -c "/$(address "$2"):7000 is now UP" "$(node_dir "$1")/logs/system.log" 2>/dev/null)" || true
  echo "${count:-0}"
}

restart_node() {
  local n="$1" waited=0 m pid others=() before=()
  # A node that was just killed may take a moment to go.
  while is_running "$n"; do
    [ "$waited" -lt 60 ] || die "node $n still runs; stop it before restarting it"
    sleep 0.5
    waited=$((waited + 1))
  done
  for m in $(seq 1 "$(node_count)"); do
    if [ "$m" != "$n" ] && is_running "$m"; then
      others+=("$m")
      before+=("$(times_seen_up "$m" "$n")")
    fi
  done
  # The start (JIT, commit log replay) runs at a lower priority and the node
  # gets the normal one back once up: on a machine of two cores, a start at
  # full priority takes both cores from the other nodes and their clients
  # for half a minute, which a node on a machine of its own does not do.
  # Once seen on a starved machine: a node paused for a minute and a half
  # while starting, which it and the seed then marked down for good; a
  # second start mends that, so a node is started twice before giving up.
  local attempt
  for attempt in 1 2; do
    launch "$n" "$(node_count)" 10
    wait_up "$n" 45
    # Gossip is the node's normal work: at a lower priority on a busy
    # machine it would not keep up.
    normal_priority "$(node_pid "$n")"
    if seen_up_by "$n" "${others[*]}" "${before[*]}"; then
      [ "${#others[@]}" = 0 ] || say "node $n and nodes ${others[*]} see each other up"
      return
    fi
    [ "$attempt" = 1 ] || die "node $n and node $unseen did not see each other up within ${start_timeout}s, twice"
    say "node $n and node $unseen did not see each other up within ${start_timeout}s: starting node $n again"
    pid="$(node_pid "$n")" && { kill -KILL "$pid" 2>/dev/null || true; }
    waited=0
    while is_running "$n"; do
      [ "$waited" -lt 60 ] || die "node $n still runs after SIGKILL"
      sleep 0.5
      waited=$((waited + 1))
    done
  done
}

# Whether node $1 and each running node of $2 (their counts of marking it
# up before its start in $3) see each other up within $start_timeout
# seconds: back for the cluster only once gossip has marked it up on every
# other node and it has marked them up; until then their coordinators count
# it as down, and another node down is two at once for them. Sets $unseen
# to a node that did not.
seen_up_by() {
  local n="$1" others=() before=() i m started="$SECONDS"
  read -r -a others <<< "$2" || true
  read -r -a before <<< "$3" || true
  for i in "${!others[@]}"; do
    m="${others[$i]}"
    until [ "$(times_seen_up "$m" "$n")" -gt "${before[$i]}" ] && [ "$(times_seen_up "$n" "$m")" -gt 0 ]; do
      if [ $((SECONDS - started)) -ge "$start_timeout" ]; then
        unseen="$m"
        return 1
      fi
      sleep 0.5
    done
  done
}

# Every thread of process $1 back to niceness 0 (a thread's niceness is its
# own, so the process's alone would leave the JVM's threads behind). Only
# root may raise a priority: for others the node stays at the lower one.
normal_priority() {
  local task
  for task in /proc/"$1"/task/*; do
    renice -n 0 -p "${task##*/}" >/dev/null 2>&1 || true
  done
}

stop() {
  local n pid waited
  for n in $(nodes_of_home); do
    pid="$(node_pid "$n")" || continue
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    waited=0
    while is_running "$n" && [ "$waited" -lt 30 ]; do
      sleep 1
      waited=$((waited + 1))
    done
    ! is_running "$n" || kill -KILL "$pid" 2>/dev/null || true
    say "node $n stopped"
  done
}

status() {
  local n
  for n in $(nodes_of_home); do
    if is_running "$n"; then
      echo "node $n: running (pid $(node_pid "$n")), CQL $(cql_up "$n" && echo up || echo down)"
    fi
  done
}

case "${1:-}" in
  fetch) fetch ;;
  start) start "${2:-}" ;;
  stop) stop ;;
  status) status ;;
  pid) node_pid "${2:?node number}" || die "node $2 does not run" ;;
  restart-node) restart_node "${2:?node number}" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
