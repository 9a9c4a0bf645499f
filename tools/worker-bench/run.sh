#!/usr/bin/env bash
# The worker benchmark of docs/benchmarks.md: empty tasks per second of the
# Python library's worker (1 and 8 slots), `fairway worker -- true` and
# Celery on Redis (prefork, 1 and 8 processes), on this machine, in one run
# with the runs alternated.
#
#   bash tools/worker-bench/run.sh [--tasks 5000] [--runs 3]
#
# Installs what it needs: redis-server from Debian's packages (as root) when
# missing, and a virtual environment in .deploy/worker-bench with the
# Python library, Celery and redis-py from PyPI. Builds the release
# `fairway` binary, starts a server on a fresh embedded store and a Redis
# server without persistence, both on free ports, and stops them at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "worker-bench: installing redis-server from Debian's packages"
    apt-get install -y -q redis-server >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }
  else
    echo "worker-bench: needs redis-server (apt-get install redis-server)" >&2
    exit 1
  fi
fi
venv=.deploy/worker-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q ./clients/python 'celery[redis]>=5.3' 'redis>=5'
cargo build --release -q -p fairway

work=$(mktemp -d)
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
target/release/fairway serve --listen 127.0.0.1:0 --store "embedded:$work/data" >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/serve.out" 2>/dev/null && break
  sleep 0.1
done
server=$(sed -n 's/^listening on //p' "$work/serve.out")
[ -n "$server" ] || { echo "worker-bench: fairway serve did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
for _ in $(seq 100); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

echo "worker-bench: fairway $(git rev-parse --short HEAD) at $server, Redis at 127.0.0.1:$redis_port; $(nproc) cores"
"$venv/bin/python" tools/worker-bench/bench.py --server "$server" --redis "redis://127.0.0.1:$redis_port/0" \
  --fairway-bin target/release/fairway "$@"
