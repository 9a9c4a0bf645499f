"""Empty tasks per second: the Python library's worker, `fairway worker`
and Celery on Redis, side by side, runs alternated.

Each run loads N empty tasks first, then starts one worker process and
watches the queue from outside (every 10 ms): the rate is the tasks done
between the first and the last completion, over that time, so that process
start-up is left out for every system alike. Fairway's completions are
`DescribeQueue`'s `completed`; Celery's are the tasks gone from the Redis
list and from its unacknowledged set (`task_acks_late`: a task leaves it
after it ran).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

import fairway
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
WATCH_EVERY = 0.01
DEADLINE = 600.0


def watch(done: Callable[[], int], total: int, what: str) -> float:
    """Tasks per second between the first and the last completion."""
    started = time.monotonic()
    first = last = None
    first_count = 0
    while True:
        count = done()
        now = time.monotonic()
        if first is None and count > 0:
            first, first_count = now, count
        if count >= total:
            last = now
            break
        if now - started > DEADLINE:
            raise SystemExit(f"{what}: {count} of {total} tasks done after {DEADLINE:.0f} s")
        time.sleep(WATCH_EVERY)
    assert first is not None and last is not None
    return (total - first_count) / max(last - first, 1e-6)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load_fairway(client: fairway.Client, queue: str, total: int) -> None:
    client.create_queue(queue, partitions=1)
    for start in range(0, total, 1000):
        results = client.add_many(queue, [b""] * min(1000, total - start))
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise SystemExit(f"adding tasks to {queue}: {failed[0]}")


def run_fairway(args, client: fairway.Client, queue: str, command: List[str]) -> float:
    load_fairway(client, queue, args.tasks)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return watch(lambda: client.describe_queue(queue).completed, args.tasks, queue)
    finally:
        stop(process)


def run_celery(args, concurrency: int, queue: str) -> float:
    env = dict(os.environ, BENCH_REDIS_URL=args.redis)
    broker = redis.Redis.from_url(args.redis)
    broker.flushdb()
    sys.path.insert(0, HERE)
    os.environ["BENCH_REDIS_URL"] = args.redis
    from celery_app import app  # noqa: E402

    with app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection)
        for _ in range(args.tasks):
            app.send_task("bench.noop", queue=queue, producer=producer)
    waiting = lambda: broker.llen(queue) + broker.hlen("unacked")  # noqa: E731
    if waiting() != args.tasks:
        raise SystemExit(f"celery: {waiting()} tasks in Redis, expected {args.tasks}")
    command = [
        sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-Q", queue,
        "-c", str(concurrency), "-P", "prefork", "--without-heartbeat", "--without-gossip",
        "--without-mingle", "-l", "warning",
    ]
    process = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return watch(lambda: args.tasks - waiting(), args.tasks, f"celery {queue}")
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", required=True, help="a fairway serve address, host:port")
    parser.add_argument("--redis", required=True, help="redis://host:port/db")
    parser.add_argument("--fairway-bin", required=True, help="the fairway binary (release)")
    parser.add_argument(
        "--baseline-fairway-bin",
        help="another fairway binary whose `fairway worker` runs beside (an older build, for old-against-new)",
    )
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write every run's figure here")
    args = parser.parse_args()
    client = fairway.Client(args.server)
    cases: Dict[str, Callable[[int], float]] = {}
    for slots in (1, 8):
        cases[f"Python library, {slots} slot(s)"] = lambda run, s=slots: run_fairway(
            args, client, f"py{s}-{run}", [sys.executable, os.path.join(HERE, "python_worker.py"), args.server, f"py{s}-{run}", str(s)]
        )
        binaries = [("", args.fairway_bin)]
        if args.baseline_fairway_bin:
            binaries.append((" (baseline)", args.baseline_fairway_bin))
        for label, binary in binaries:
            queue = f"cli{slots}{label and 'b'}"
            cases[f"fairway worker -- true{label}, {slots} slot(s)"] = (
                lambda run, s=slots, q=queue, b=binary: run_fairway(
                    args, client, f"{q}-{run}",
                    [b, "worker", "--server", f"http://{args.server}", "--queue", f"{q}-{run}",
                     "--concurrency", str(s), "--", "true"],
                )
            )
        cases[f"Celery {celery_version()} on Redis {redis_version(args.redis)}, {slots} process(es)"] = (
            lambda run, s=slots: run_celery(args, s, f"celery{s}-{run}")
        )
    figures: Dict[str, List[float]] = {name: [] for name in cases}
    for run in range(1, args.runs + 1):
        for name, case in cases.items():
            rate = case(run)
            figures[name].append(rate)
            print(f"run {run}: {name}: {rate:,.0f} tasks/s", flush=True)
    print()
    print(f"| worker ({args.tasks:,} empty tasks per run) | tasks/s, median of {args.runs} | every run |")
    print("|---|---:|---|")
    for name, rates in figures.items():
        every = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"| {name} | {statistics.median(rates):,.0f} | {every} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"tasks": args.tasks, "figures": figures}, out, indent=2)


def celery_version() -> str:
    import celery

    return celery.__version__


def redis_version(url: str) -> str:
    return str(redis.Redis.from_url(url).info("server")["redis_version"])


if __name__ == "__main__":
    main()
