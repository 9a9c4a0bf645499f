#!/usr/bin/env bash
# A test bed of several regions on this one machine: one network namespace
# per region, WAN latency between them, one real Cassandra node per region in
# a datacenter of its own, and faults (a region cut off, a region's Cassandra
# lost). Needs root, iproute2 (`ip netns`, veth, bridge), python3, and
# iptables (installed from Debian's packages if missing).
#
#   deploy/regions/regions.sh up R1 R2 [R3 …]  build the regions (1 to 5 names, lowercase letters,
#                                             at most 11) and start their Cassandra nodes; returns once
#                                             every node is up and gossip has it see every other one
#   deploy/regions/regions.sh down             stop the Cassandra nodes, end the processes left in the
#                                             namespaces, delete namespaces, veths and the bridge
#   deploy/regions/regions.sh cut R            isolate region R (from the other regions and the root namespace)
#   deploy/regions/regions.sh heal R           undo `cut R`
#   deploy/regions/regions.sh latency MS       set the one-way delay of every region to MS milliseconds
#   deploy/regions/regions.sh kill R           SIGKILL region R's Cassandra node ("region lost")
#   deploy/regions/regions.sh revive R         start it again on its data; returns once gossip has it up
#                                             on the other nodes (so heal a cut region first)
#   deploy/regions/regions.sh exec R CMD…      run CMD inside region R's namespace
#   deploy/regions/regions.sh status           regions, cuts, delays, Cassandra nodes
#
# Region number i (1-based, in the order `up` names them) is the network
# namespace fw-R, whose `eth0` (one end of a veth pair; the other, fwv-R in
# the root namespace, is a port of the bridge fwbr0, 10.210.0.1/16) holds
# 10.210.i.1/16 (its Cassandra node: CQL on 9042, gossip on 7000) and
# 10.210.i.2, 10.210.i.3 and 10.210.i.4 /16, free for the Fairway nodes and
# clients of the region to bind to; its default route is via 10.210.0.1. All
# is one L2 segment: no forwarding, and the bridge does not pass frames
# through iptables (`up` sets net.bridge.bridge-nf-call-{iptables,ip6tables,
# arptables} to 0 if br_netfilter is loaded; `down` puts the old values back).
#
# Latency: every packet crossing a region's eth0 is delayed once, by
# $REGIONS_ONE_WAY_MS (default 20) ms, so a round trip between two regions
# takes 2 × that (40 ms), one between the root namespace (tests, benchmark
# drivers: they reach every region through the bridge) and a region 1 × that
# (20 ms), and traffic inside a region none (its addresses are all local to
# the namespace: it goes over `lo`). Two ways, $REGIONS_DELAY at `up`:
#   netem    `tc qdisc … netem delay` on what leaves each namespace's eth0;
#   nfqueue  for kernels without netem (CONFIG_NET_SCH_NETEM unset): an
#            iptables rule (mangle PREROUTING -i eth0 -j NFQUEUE) hands what
#            enters each namespace's eth0 to deploy/regions/netdelay.py, one
#            process per region, which gives each packet back once delayed.
#            It delays at the receiver, where the sender's socket no longer
#            owns the packet: held at the sender, TCP small queues would cap
#            a connection's throughput. Costs a little CPU per packet (some
#            6% of a core for 140 MB/s of bulk TCP).
#   auto     (default) netem if the kernel has it, else nfqueue.
#
# CPUs: REGIONS_CPUS at `up` (e.g. "0 1": one taskset CPU list per region, in
# the order `up` names them; default none) pins each region's Cassandra JVM
# (every thread), its netdelay.py and whatever `exec R` runs to the region's
# CPUs, as if each region had a machine of its own: on a small machine a
# second region's Cassandra replica otherwise takes CPU from the first's
# requests. `revive` pins the revived node again. REGIONS_DELAYER_CPUS (a CPU
# list) puts every region's netdelay.py there instead: the delay is the
# network's work, not the region's (netdelay.py handles each packet that
# enters the region in Python, on the CPU of whoever it is pinned to).
#
# Cassandra (deploy/cassandra/cassandra.sh with CASSANDRA_DEV_ADDRESSES,
# CASSANDRA_DEV_DCS and CASSANDRA_DEV_NETNS; heap $CASSANDRA_DEV_HEAP, default
# 768m): node i at 10.210.i.1 in datacenter R (rack1), home .deploy/regions/
# cassandra. `up` on a bed that is down starts from empty data; `down` keeps
# the data and logs for a look afterwards. Keyspaces name the regions:
#   {'class': 'NetworkTopologyStrategy', 'a': 1, 'b': 1}
#
# `cut R` drops, inside fw-R, every packet in or out of eth0 (iptables DROP,
# INPUT and OUTPUT): connections across the cut hang, none is reset, while
# the region's own processes still reach each other over `lo`. `cut` twice is
# harmless; `heal` removes exactly those two rules.
# `up` when already up says so and succeeds; `down` is idempotent and also
# cleans up after an `up` that failed halfway. State: .deploy/regions/.
# deploy/regions/check.sh proves the bed works; deploy/regions/cql.py runs a
# CQL query with no driver (e.g. cql.py 10.210.1.1 'SELECT data_center FROM
# system.local').
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.deploy/regions"
cassandra_home="$state/cassandra"
bridge=fwbr0
# NFQUEUE number of netdelay.py in each namespace (every namespace has its own queues).
queue=0
export CASSANDRA_DEV_HEAP="${CASSANDRA_DEV_HEAP:-768m}"
start_timeout="${CASSANDRA_DEV_START_TIMEOUT:-240}"

say() { printf 'regions: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

cassandra() { CASSANDRA_DEV_HOME="$cassandra_home" bash "$root/deploy/cassandra/cassandra.sh" "$@"; }

# The regions of the bed, as `up` named them (nothing when down).
regions() { cat "$state/regions" 2>/dev/null || true; }
ns_of() { echo "fw-$1"; }
veth_of() { echo "fwv-$1"; }
ns_exists() { [ -e "/var/run/netns/$1" ]; }
link_exists() { ip link show "$1" >/dev/null 2>&1; }
# Region $1's number (1-based), or a failure if the bed has no such region.
index_of() {
  local r i=0
  for r in $(regions); do
    i=$((i + 1))
    if [ "$r" = "$1" ]; then
      echo "$i"
      return 0
    fi
  done
  die "no region ${1:-(none given)} in the bed (regions: $(regions || true))"
}
cassandra_address() { echo "10.210.$1.1"; }
one_way_ms() { cat "$state/latency" 2>/dev/null || echo "${REGIONS_ONE_WAY_MS:-20}"; }
delay_mode() { cat "$state/delay-mode" 2>/dev/null || echo none; }
# Region $1's CPU list (REGIONS_CPUS at `up`), or nothing when it is not pinned.
cpus_of() {
  local words i
  read -r -a words < "$state/cpus" 2>/dev/null || return 0
  i="$(index_of "$1")"
  echo "${words[$((i - 1))]:-}"
}
# REGIONS_CPUS, checked at `up` for $1 regions: one taskset CPU list per region, each CPU one
# this machine has.
check_cpus() {
  local words list cpu
  [ -n "${REGIONS_CPUS:-}${REGIONS_DELAYER_CPUS:-}" ] || return 0
  command -v taskset >/dev/null || die "REGIONS_CPUS and REGIONS_DELAYER_CPUS need taskset (util-linux)"
  read -r -a words <<< "${REGIONS_CPUS:-}"
  [ "${#words[@]}" = 0 ] || [ "${#words[@]}" = "$1" ] ||
    die "REGIONS_CPUS names ${#words[@]} CPU list(s) for $1 region(s): one per region, e.g. REGIONS_CPUS=\"0 1\""
  for list in "${words[@]}" ${REGIONS_DELAYER_CPUS:+"$REGIONS_DELAYER_CPUS"}; do
    [[ "$list" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] ||
      die "REGIONS_CPUS, REGIONS_DELAYER_CPUS: $list is not a CPU list (e.g. 0, 0-1, 0,2)"
    for cpu in $(tr ',-' '  ' <<< "$list"); do
      [ "$cpu" -lt "$(nproc --all)" ] || die "REGIONS_CPUS, REGIONS_DELAYER_CPUS: CPU $cpu is beyond this machine's $(nproc --all)"
    done
  done
}
# Pins every thread of region $1's Cassandra JVM (node $2) to the region's CPUs.
pin_cassandra() {
  local cpus pid
  cpus="$(cpus_of "$1")"
  [ -n "$cpus" ] || return 0
  pid="$(cassandra pid "$2")" || die "no pid for the Cassandra node of region $1"
  taskset -a -p -c "$cpus" "$pid" >/dev/null || die "could not pin the Cassandra node of region $1 to CPUs $cpus"
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc, iptables)"; }

need_iptables() {
  command -v iptables >/dev/null && return 0
  if command -v apt-get >/dev/null; then
    say "installing iptables"
    apt-get install -y -q iptables >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q iptables >/dev/null; }
  fi
  command -v iptables >/dev/null || die "iptables is needed (cut, heal, and the nfqueue delay)"
}

# Bridged frames skip iptables: br_netfilter, if loaded, is told not to pass
# them (the old values are kept for `down`).
bridge_netfilter_off() {
  local key file
  for key in iptables ip6tables arptables; do
    file="/proc/sys/net/bridge/bridge-nf-call-$key"
    [ -f "$file" ] || continue
    if [ ! -f "$state/bridge-nf-call-$key" ]; then
      cat "$file" > "$state/bridge-nf-call-$key"
    fi
    echo 0 > "$file"
  done
}

bridge_netfilter_restore() {
  local key file
  for key in iptables ip6tables arptables; do
    file="/proc/sys/net/bridge/bridge-nf-call-$key"
    if [ -f "$state/bridge-nf-call-$key" ]; then
      if [ -f "$file" ]; then
        cat "$state/bridge-nf-call-$key" > "$file" || true
      fi
      rm -f "$state/bridge-nf-call-$key"
    fi
  done
}

# netem if the kernel has it (tried on the `lo` of namespace $1), else nfqueue.
choose_delay_mode() {
  case "${REGIONS_DELAY:-auto}" in
    netem|nfqueue) echo "$REGIONS_DELAY" ;;
    auto)
      if ip netns exec "$1" tc qdisc add dev lo root netem delay 0ms 2>/dev/null; then
        ip netns exec "$1" tc qdisc del dev lo root
        echo netem
      else
        echo nfqueue
      fi
      ;;
    *) die "REGIONS_DELAY is netem, nfqueue or auto, not $REGIONS_DELAY" ;;
  esac
}

delayer_pidfile() { echo "$state/netdelay-$1.pid"; }
# The pid of region $1's netdelay.py, if it runs.
delayer_pid() {
  local pid
  pid="$(cat "$(delayer_pidfile "$1")" 2>/dev/null)" || return 1
  # Not some later process that got the number.
  grep -q netdelay.py "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

start_delayer() {
  local r="$1" ns log pid waited=0 cpus pin=()
  ns="$(ns_of "$r")"
  log="$state/netdelay-$r.log"
  cpus="$(cat "$state/delayer-cpus" 2>/dev/null || true)"
  [ -n "$cpus" ] || cpus="$(cpus_of "$r")"
  [ -z "$cpus" ] || pin=(taskset -c "$cpus")
  if ! delayer_pid "$r" >/dev/null; then
    # High priority: its clock is every packet's.
    ip netns exec "$ns" "${pin[@]}" setsid nice -n -10 python3 "$here/netdelay.py" "$queue" "$state/latency" \
      > "$log" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$(delayer_pidfile "$r")"
    until grep -q "bound" "$log" 2>/dev/null; do
      # (Until it has exec'd python3, its command line is not yet netdelay.py's.)
      if ! kill -0 "$pid" 2>/dev/null || [ "$waited" -ge 100 ]; then
        cat "$log" >&2 || true
        die "netdelay.py did not start in $ns"
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
  fi
  # Only once the queue has a reader: packets sent to a queue without one are dropped.
  ip netns exec "$ns" iptables -w -t mangle -C PREROUTING -i eth0 -j NFQUEUE --queue-num "$queue" 2>/dev/null ||
    ip netns exec "$ns" iptables -w -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num "$queue"
}

stop_delayer() {
  local pid waited=0
  pid="$(delayer_pid "$1")" || { rm -f "$(delayer_pidfile "$1")"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 50 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$(delayer_pidfile "$1")"
}

# Region $1's delay to the one of $state/latency.
apply_delay() {
  local pid
  case "$(delay_mode)" in
    netem)
      # A long queue: 20 ms of a fast benchmark is more than netem's default 1000 packets.
      ip netns exec "$(ns_of "$1")" tc qdisc replace dev eth0 root netem delay "$(one_way_ms)ms" limit 100000
      ;;
    nfqueue)
      if pid="$(delayer_pid "$1")"; then
        kill -HUP "$pid"
      else
        start_delayer "$1"
      fi
      ;;
  esac
}

# Region $1's delay as it is: netem's, or netdelay.py's last word.
current_delay() {
  local pid
  case "$(delay_mode)" in
    netem)
      ip netns exec "$(ns_of "$1")" tc qdisc show dev eth0 2>/dev/null | sed -n 's/.*netem.* delay \([^ ]*\).*/\1 (netem)/p'
      ;;
    nfqueue)
      if pid="$(delayer_pid "$1")"; then
        echo "$(sed -n 's/.*delay \([0-9.]*\) ms.*/\1/p' "$state/netdelay-$1.log" | tail -n 1)ms (nfqueue, netdelay.py pid $pid)"
      else
        echo "NONE (netdelay.py does not run: packets to the region are dropped)"
      fi
      ;;
  esac
}

build_region() {
  local r="$1" i="$2" ns veth host mode
  ns="$(ns_of "$r")"
  veth="$(veth_of "$r")"
  ns_exists "$ns" || ip netns add "$ns"
  if ! link_exists "$veth"; then
    # A half-made pair of an earlier attempt goes first.
    ip netns exec "$ns" ip link del eth0 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$ns"
  fi
  ip link set "$veth" master "$bridge"
  ip link set "$veth" up
  ip netns exec "$ns" ip link set lo up
  for host in 1 2 3 4; do
    ip netns exec "$ns" ip addr replace "10.210.$i.$host/16" dev eth0
  done
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip route replace default via 10.210.0.1 dev eth0
  if [ ! -s "$state/delay-mode" ]; then
    mode="$(choose_delay_mode "$ns")"
    echo "$mode" > "$state/delay-mode"
  fi
  [ "$(delay_mode)" = netem ] || need_iptables
  apply_delay "$r"
}

node_running() {
  local pid
  pid="$(cassandra pid "$1" 2>/dev/null)" || return 1
  kill -0 "$pid" 2>/dev/null
}

# Everything `up` makes is there and every Cassandra node runs.
all_up() {
  local r i=0
  link_exists "$bridge" || return 1
  for r in $(regions); do
    i=$((i + 1))
    ns_exists "$(ns_of "$r")" && link_exists "$(veth_of "$r")" && node_running "$i" || return 1
    [ "$(delay_mode)" != nfqueue ] || delayer_pid "$r" >/dev/null || return 1
  done
}

# How many times node $1's log says gossip marked the node at address $2 up.
times_seen_up() {
  local count
  count="$(grep -c "/$2:7000 is now UP" "$cassandra_home/node$1/logs/system.log" 2>/dev/null)" || true
  echo "${count:-0}"
}

wait_gossip() {
  local count="$1" i j waited=0
  for i in $(seq 1 "$count"); do
    for j in $(seq 1 "$count"); do
      [ "$i" != "$j" ] || continue
      until [ "$(times_seen_up "$i" "$(cassandra_address "$j")")" -gt 0 ]; do
        [ "$waited" -lt "$start_timeout" ] || die "gossip on node $i did not see node $j up within ${start_timeout}s; see $cassandra_home/node$i/logs"
        sleep 1
        waited=$((waited + 1))
      done
    done
  done
  say "every Cassandra node sees the $((count - 1)) other(s) up"
}

summary() {
  local r i=0 contacts=() replication=()
  echo "regions up (bridge $bridge 10.210.0.1/16 in the root namespace):"
  for r in $(regions); do
    i=$((i + 1))
    echo "  $r: namespace $(ns_of "$r"), Cassandra $(cassandra_address "$i"):9042 (datacenter $r), free addresses 10.210.$i.2-4"
    contacts+=("$(cassandra_address "$i"):9042")
    replication+=("'$r': 1")
  done
  echo "  one-way delay $(one_way_ms) ms ($(delay_mode)): $(awk -v ms="$(one_way_ms)" 'BEGIN { print 2 * ms }') ms round trip between regions, $(one_way_ms) ms root namespace <-> region, none inside a region"
  echo "CQL contact points: $(IFS=,; echo "${contacts[*]}")"
  echo "replication: {'class': 'NetworkTopologyStrategy', $(printf '%s, ' "${replication[@]}" | sed 's/, $//')}"
}

up() {
  local names=("$@") r i count addresses=() dcs=() namespaces=() seen=" " address
  count="${#names[@]}"
  case "$count" in 1|2|3|4|5) ;; *) die "up takes 1 to 5 region names, e.g. up a b" ;; esac
  for r in "${names[@]}"; do
    [[ "$r" =~ ^[a-z]{1,11}$ ]] || die "a region's name is 1 to 11 lowercase letters, not $r"
    case "$seen" in *" $r "*) die "region $r is named twice" ;; esac
    seen="$seen$r "
  done
  check_cpus "$count"
  if [ -f "$state/regions" ]; then
    [ "$(regions)" = "${names[*]}" ] || die "the bed has regions $(regions): run down first"
    if all_up; then
      say "already up"
      summary
      return 0
    fi
    say "completing an earlier up"
  else
    # A new bed starts from empty data.
    cassandra stop >/dev/null 2>&1 || true
    rm -rf "$cassandra_home"
    # Another user of the subnet would see our packets and we theirs.
    if ip -4 -o addr show | grep -v " $bridge " | grep -q ' inet 10\.210\.'; then
      die "10.210.0.0/16 is in use on this machine: $(ip -4 -o addr show | grep ' inet 10\.210\.' | head -n 1)"
    fi
    mkdir -p "$state"
    echo "${REGIONS_ONE_WAY_MS:-20}" > "$state/latency"
    # First, so that `down` can undo whatever follows.
    echo "${names[*]}" > "$state/regions"
    echo "${REGIONS_CPUS:-}" > "$state/cpus"
    echo "${REGIONS_DELAYER_CPUS:-}" > "$state/delayer-cpus"
  fi
  [[ "$(one_way_ms)" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "REGIONS_ONE_WAY_MS must be a number of milliseconds, not $(one_way_ms)"
  command -v tc >/dev/null || die "tc (iproute2) is needed"
  command -v python3 >/dev/null || die "python3 is needed"
  bridge_netfilter_off
  link_exists "$bridge" || ip link add "$bridge" type bridge
  ip addr replace 10.210.0.1/16 dev "$bridge"
  ip link set "$bridge" up
  i=0
  for r in "${names[@]}"; do
    i=$((i + 1))
    build_region "$r" "$i"
    address="$(cassandra_address "$i")"
    addresses+=("$address")
    dcs+=("$r")
    namespaces+=("$(ns_of "$r")")
    say "region $r: namespace $(ns_of "$r"), 10.210.$i.1-4, one-way delay $(one_way_ms) ms ($(delay_mode))"
  done
  CASSANDRA_DEV_ADDRESSES="${addresses[*]}" CASSANDRA_DEV_DCS="${dcs[*]}" CASSANDRA_DEV_NETNS="${namespaces[*]}" \
    cassandra start "$count"
  i=0
  for r in "${names[@]}"; do
    i=$((i + 1))
    pin_cassandra "$r" "$i"
  done
  wait_gossip "$count"
  summary
}

# Ends what still runs in namespace $1 (a Fairway node an `exec` started...):
# SIGTERM, then SIGKILL after 10 s.
end_processes_in() {
  local pids waited=0
  pids="$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')" || true
  [ -n "${pids// /}" ] || return 0
  say "ending the processes left in $1: $pids"
  # shellcheck disable=SC2086 # a list of pids
  kill -TERM $pids 2>/dev/null || true
  while [ -n "$(ip netns pids "$1" 2>/dev/null)" ] && [ "$waited" -lt 20 ]; do
    sleep 0.5
    waited=$((waited + 1))
  done
  pids="$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')" || true
  # shellcheck disable=SC2086 # a list of pids
  [ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null || true
}

down() {
  local r port
  if [ -f "$cassandra_home/nodes" ]; then
    cassandra stop
  fi
  for r in $(regions); do
    stop_delayer "$r"
  done
  for r in $(regions); do
    if ns_exists "$(ns_of "$r")"; then
      end_processes_in "$(ns_of "$r")"
      ip netns del "$(ns_of "$r")"
    fi
    # Gone with its peer as a rule; not if the namespace was made by hand.
    if link_exists "$(veth_of "$r")"; then
      ip link del "$(veth_of "$r")"
    fi
  done
  if link_exists "$bridge"; then
    # Any port left (a region of an earlier bed whose state is lost).
    for port in $(ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      case "$port" in fwv-*) ip link del "$port" 2>/dev/null || true ;; esac
    done
    ip link del "$bridge"
  fi
  bridge_netfilter_restore
  rm -f "$state/regions" "$state/latency" "$state/delay-mode" "$state/cpus" "$state/delayer-cpus"
  say "down"
}

cut_rules() {
  # $1 region, $2 -C (check), -I (insert) or -D (delete).
  local ns
  ns="$(ns_of "$1")"
  case "$2" in
    -C)
      ip netns exec "$ns" iptables -w -C INPUT -i eth0 -j DROP 2>/dev/null &&
        ip netns exec "$ns" iptables -w -C OUTPUT -o eth0 -j DROP 2>/dev/null
      ;;
    -I)
      ip netns exec "$ns" iptables -w -C INPUT -i eth0 -j DROP 2>/dev/null ||
        ip netns exec "$ns" iptables -w -I INPUT 1 -i eth0 -j DROP
      ip netns exec "$ns" iptables -w -C OUTPUT -o eth0 -j DROP 2>/dev/null ||
        ip netns exec "$ns" iptables -w -I OUTPUT 1 -o eth0 -j DROP
      ;;
    -D)
      while ip netns exec "$ns" iptables -w -C INPUT -i eth0 -j DROP 2>/dev/null; do
        ip netns exec "$ns" iptables -w -D INPUT -i eth0 -j DROP
      done
      while ip netns exec "$ns" iptables -w -C OUTPUT -o eth0 -j DROP 2>/dev/null; do
        ip netns exec "$ns" iptables -w -D OUTPUT -o eth0 -j DROP
      done
      ;;
  esac
}

need_region() {
  index_of "${1:-}" >/dev/null
  ns_exists "$(ns_of "$1")" || die "region $1 has no namespace: run up"
}

cut_region() {
  need_region "${1:-}"
  need_iptables
  cut_rules "$1" -I
  say "region $1 cut off (eth0 of $(ns_of "$1") drops everything in and out)"
}

heal_region() {
  need_region "${1:-}"
  need_iptables
  cut_rules "$1" -D
  say "region $1 healed"
}

latency() {
  local ms="${1:-}" r
  [[ "$ms" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "latency takes a one-way delay in milliseconds, e.g. latency 50"
  [ -f "$state/regions" ] || die "the bed is down"
  echo "$ms" > "$state/latency"
  for r in $(regions); do
    if ns_exists "$(ns_of "$r")"; then
      apply_delay "$r"
    fi
  done
  say "one-way delay $ms ms in every region ($(awk -v ms="$ms" 'BEGIN { print 2 * ms }') ms round trip between regions)"
}

kill_node() {
  local i pid waited=0
  i="$(index_of "${1:-}")"
  if ! node_running "$i"; then
    say "the Cassandra node of region $1 does not run"
    return 0
  fi
  pid="$(cassandra pid "$i")"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do
    [ "$waited" -lt 100 ] || die "the Cassandra node of region $1 (pid $pid) outlived SIGKILL for 10 s"
    sleep 0.1
    waited=$((waited + 1))
  done
  say "killed the Cassandra node of region $1 (pid $pid)"
}

revive() {
  local i
  i="$(index_of "${1:-}")"
  need_region "$1"
  cassandra restart-node "$i"
  pin_cassandra "$1" "$i"
}

status() {
  local r i=0 ns cut delay node cpus
  if [ ! -f "$state/regions" ]; then
    echo "down"
    if link_exists "$bridge"; then
      echo "(but the bridge $bridge exists: run down)"
    fi
    return 0
  fi
  echo "regions: $(regions) (bridge $bridge: $(link_exists "$bridge" && echo present || echo MISSING))"
  for r in $(regions); do
    i=$((i + 1))
    ns="$(ns_of "$r")"
    if ! ns_exists "$ns"; then
      echo "  $r: namespace $ns MISSING"
      continue
    fi
    cut=connected
    if command -v iptables >/dev/null && cut_rules "$r" -C; then
      cut=CUT
    fi
    delay="$(current_delay "$r")"
    if node_running "$i"; then
      node="running (pid $(cassandra pid "$i"))"
      # From inside the region, so that a cut does not hide it.
      # shellcheck disable=SC2016 # $1 is the inner shell's
      if ip netns exec "$ns" timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/9042"' cql "$(cassandra_address "$i")" 2>/dev/null; then
        node="$node, CQL up"
      else
        node="$node, CQL down"
      fi
    else
      node="DOWN"
    fi
    cpus="$(cpus_of "$r")"
    echo "  $r: $ns 10.210.$i.1-4, $cut, one-way delay ${delay:-none}, CPUs ${cpus:-all}, Cassandra $(cassandra_address "$i") (datacenter $r) $node"
  done
}

command="${1:-}"
[ "$#" = 0 ] || shift
case "$command" in
  up|down|cut|heal|latency|kill|revive|exec|status) need_root ;;
esac
case "$command" in
  up) up "$@" ;;
  down) down ;;
  cut) cut_region "${1:-}" ;;
  heal) heal_region "${1:-}" ;;
  latency) latency "${1:-}" ;;
  kill) kill_node "${1:-}" ;;
  revive) revive "${1:-}" ;;
  exec)
    need_region "${1:-}"
    ns="$(ns_of "$1")"
    [ "$#" -gt 1 ] || die "exec takes a region and a command"
    cpus="$(cpus_of "$1")"
    shift
    if [ -n "$cpus" ]; then
      exec ip netns exec "$ns" taskset -c "$cpus" "$@"
    fi
    exec ip netns exec "$ns" "$@"
    ;;
  status) status ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
