"""The worker against a real server: exactly once, heartbeats, outcomes."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import json
import logging
import threading
import time
from typing import Dict, List

import pytest

import fairway
from conftest import wait_until


def run_in_thread(worker: fairway.Worker) -> threading.Thread:
    errors: List[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def stop_and_join(worker: fairway.Worker, thread: threading.Thread, timeout: float = 30.0) -> None:
    worker.stop()
    thread.join(timeout)
    assert not thread.is_alive(), "the worker stops within its deadline"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]


def add_all(client: fairway.Client, queue: str, payloads: List[bytes]) -> List[int]:
    ids = []
    for start in range(0, len(payloads), 1000):
        results = client.add_many(queue, payloads[start : start + 1000])
        for result in results:
            assert isinstance(result, fairway.AddResult), result
            ids.append(result.task_id)
    return ids


def test_ten_thousand_tasks_exactly_once(server, client, queue_name):
    queue = queue_name("bulk")
    client.create_queue(queue, 4)
    total = 10_000
    # Task ids are per partition: the payload names the task.
    add_all(client, queue, [str(i).encode() for i in range(total)])
    runs: Dict[int, int] = collections.Counter()
    lock = threading.Lock()
    worker = fairway.Worker(server.address, concurrency=8, poll_wait=1)

    @worker.task(queue)
    def work(payload: bytes, ctx: fairway.TaskContext) -> str:
        with lock:
            runs[int(payload)] += 1
        return payload.decode()

    thread = run_in_thread(worker)
    try:
        wait_until(lambda: client.describe_queue(queue).completed >= total, 240, "10,000 completions", 0.5)
    finally:
        stop_and_join(worker, thread)
    assert set(runs) == set(range(total))
    assert [i for i, n in runs.items() if n != 1] == [], "every task ran exactly once"
    info = client.describe_queue(queue)
    assert (info.completed, info.failed, info.expired) == (total, 0, 0)
    assert (info.backlog, info.leased, info.delayed) == (0, 0, 0)
    assert client.dead_letters(queue) == []


def test_functions_that_block_three_leases_keep_their_lease(server, client):
    """Leases of 2 s (server config); each function blocks 6 s its own way."""
    block = 6.0
    queues = {"lease.sleep": None, "lease.busy": None, "lease.async": None}
    for queue in queues:
        client.create_queue(queue)
        queues[queue] = client.add(queue, b"{}").task_id
    attempts: Dict[str, List[int]] = collections.defaultdict(list)
    finished: Dict[str, float] = {}
    worker = fairway.Worker(server.address, concurrency=3, poll_wait=1)

    deadlines = []

    @worker.task("lease.sleep")
    def sleeps(payload, ctx):
        attempts[ctx.queue].append(ctx.attempt)
        deadlines.append(ctx.lease_deadline)
        time.sleep(block)  # releases the GIL
        deadlines.append(ctx.lease_deadline)
        finished[ctx.queue] = time.time()

    @worker.task("lease.busy")
    def spins(payload, ctx):
        attempts[ctx.queue].append(ctx.attempt)
        end = time.monotonic() + block
        n = 0
        while time.monotonic() < end:  # pure Python: holds the GIL between switches
            n += 1
        finished[ctx.queue] = time.time()
        return n

    @worker.task("lease.async")
    async def blocks_its_loop(payload, ctx):
        attempts[ctx.queue].append(ctx.attempt)
        time.sleep(block)  # blocks the event loop itself
        await asyncio.sleep(0)
        finished[ctx.queue] = time.time()

    thread = run_in_thread(worker)
    try:
        wait_until(
            lambda: all(client.describe_queue(q).completed == 1 for q in queues), 60, "the three completions", 0.2
        )
    finally:
        stop_and_join(worker, thread)
    assert deadlines[1] - deadlines[0] >= dt.timedelta(seconds=block - 1), "heartbeats moved the deadline"
    for queue in queues:
        assert attempts[queue] == [1], f"{queue}: one run, first attempt, no redelivery"
        info = client.describe_queue(queue)
        assert (info.completed, info.expired, info.failed, info.leased, info.backlog) == (1, 0, 0, 0, 0), queue
        assert client.poll(queue, wait=0.5) is None, f"{queue}: nothing delivered again"


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Shape:
    name: str
    points: List[Point]


def test_outcomes_exceptions_retry_fatal_and_decoding(server, client, queue_name):
    queues = {kind: queue_name(kind) for kind in ("json", "dc", "boom", "retry", "fatal", "visit")}
    queues["visit"] = "visits." + queues["visit"].replace(".", "-")[:40]
    for queue in queues.values():
        client.create_queue(queue)
    client.add(queues["json"], json.dumps({"a": 1}))
    client.add(queues["dc"], json.dumps({"name": "tri", "points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}))
    client.add(queues["boom"], b"")
    client.add(queues["retry"], b"")
    client.add(queues["fatal"], b"")
    client.add(queues["visit"], json.dumps({"url": "https://forge.example/v"}))
    seen: Dict[str, list] = collections.defaultdict(list)
    worker = fairway.Worker(server.address, concurrency=6, poll_wait=1)

    @worker.task(queues["json"], decode="json")
    def as_json(payload):
        seen["json"].append(payload)
        return {"sum": payload["a"] + 1}

    @worker.task(queues["dc"], decode=Shape)
    def as_dataclass(shape: Shape):
        seen["dc"].append(shape)
        return b"ok"

    @worker.task(queues["boom"])
    def boom(payload, ctx):
        seen["boom"].append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("first time fails " + "x" * 10000)
        return "second time works"

    @worker.task(queues["retry"])
    def retry(payload, ctx):
        seen["retry"].append((ctx.attempt, time.time()))
        if ctx.attempt == 1:
            raise fairway.Retry("later", after=2)

    @worker.task(queues["fatal"])
    def fatal(payload):
        seen["fatal"].append(1)
        raise fairway.Fatal("cannot ever work")

    @worker.task(queues["visit"])
    async def visit(payload, *, ctx):
        seen["visit"].append(ctx.task_id)
        return fairway.VisitOutcome("uneventful", snapshot=b"snap")

    thread = run_in_thread(worker)
    try:
        wait_until(lambda: len(seen["retry"]) == 2, 30, "the retried task's second attempt", 0.1)
        wait_until(lambda: len(seen["boom"]) == 2, 30, "the failed task's second attempt", 0.1)
        wait_until(lambda: client.dead_letters(queues["fatal"]), 30, "the fatal task's dead letter", 0.1)
        wait_until(
            lambda: all(
                client.describe_queue(queues[k]).completed == 1 for k in ("json", "dc", "boom", "retry", "visit")
            ),
            30,
            "the completions",
            0.1,
        )
    finally:
        stop_and_join(worker, thread)
    assert seen["json"] == [{"a": 1}]
    assert seen["dc"] == [Shape("tri", [Point(1, 2), Point(3, 4)])]
    assert seen["boom"] == [1, 2]
    (first, at1), (second, at2) = seen["retry"]
    assert (first, second) == (1, 2) and at2 - at1 >= 1.9, "Retry(after=2) waits at least 2 s"
    assert seen["fatal"] == [1], "a fatal failure is not retried"
    (letter,) = client.dead_letters(queues["fatal"])
    assert letter.message == "Fatal: cannot ever work" and letter.attempts == 1
    assert client.describe_queue(queues["boom"]).failed == 1
    assert len(seen["visit"]) == 1


def test_long_exception_messages_are_truncated_under_the_limit():
    from fairway.worker import _truncate

    text = _truncate("é" * 5000)
    assert len(text.encode()) <= 4096 and text.endswith("...")
    assert _truncate("short") == "short"


def test_a_lost_lease_is_never_reported(server, client, caplog):
    caplog.set_level(logging.INFO, logger="fairway")
    queue = "lost.q"  # a lease of 2 s: heartbeats every ~0.7 s
    client.create_queue(queue)
    client.add(queue, b"x")
    started = threading.Event()
    release = threading.Event()
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1)
    tokens = []

    @worker.task(queue)
    def slow(payload, ctx):
        tokens.append(ctx.lease_token)
        started.set()
        assert release.wait(30)
        return b"late"

    thread = run_in_thread(worker)
    try:
        assert started.wait(30)
        # Someone else finishes the lease (as a worker would after an expiry).
        client.complete(tokens[0], b"other")
        wait_until(lambda: worker._heartbeater.leases == {} or _lost(worker), 30, "the heartbeat to see the loss")
        release.set()
        wait_until(lambda: worker.in_flight == 0, 30, "the task to end")
    finally:
        release.set()
        stop_and_join(worker, thread)
    info = client.describe_queue(queue)
    assert (info.completed, info.failed) == (1, 0), "the worker did not report a lease it lost"
    messages = [r.getMessage() for r in caplog.records]
    assert any("lease lost" in m for m in messages), messages
    assert any("not reported (lease lost)" in m for m in messages), "the worker did not even try"


def _task(task_id: int) -> fairway.Task:
    return fairway.Task(
        task_id=task_id,
        lease_token=f"token-{task_id}",
        fairness_key="",
        priority=0,
        payload=b"",
        attempt=1,
        lease_deadline=None,
        partition=0,
    )


def test_a_heartbeat_that_races_a_report_does_not_say_the_result_is_lost(caplog):
    """The lease ended because the Complete landed: no "lease lost" warning."""
    from fairway.worker import _Heartbeater, _Lease

    class Refusing:
        class _ops:
            @staticmethod
            def heartbeat(task):
                from fairway.client import _Op

                return _Op("matching", "HeartbeatTask", None, True, lambda r: None)

        def _invoke(self, op, retry=None):
            raise fairway.LeaseLost("not this token's lease", method="HeartbeatTask")

    caplog.set_level(logging.DEBUG, logger="fairway")
    beater = _Heartbeater(Refusing())  # type: ignore[arg-type]
    for state in ("reporting", "done", "handed_back"):
        lease = _Lease(_task(1), "q")
        lease.state = state
        beater.add(lease)
        beater.beat(lease)
        assert lease.state == state and beater.leases == {}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    lease = _Lease(_task(2), "q")
    beater.beat(lease)
    assert lease.state == "lost"
    assert any("lease lost" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_an_unexpected_heartbeat_error_does_not_end_the_heartbeats():
    """One beat that raises what no one expected: the thread lives on and
    beats again (a dead heartbeat thread would let every lease run out)."""
    from fairway.worker import _Heartbeater, _Lease

    beats: List[int] = []

    class FlakyOnce:
        class _ops:
            @staticmethod
            def heartbeat(task):
                from fairway.client import _Op

                return _Op("matching", "HeartbeatTask", None, True, lambda r: None)

        def _invoke(self, op, retry=None):
            beats.append(1)
            if len(beats) == 1:
                raise ValueError("a bug")
            return None

        def close(self):
            pass

    beater = _Heartbeater(FlakyOnce())  # type: ignore[arg-type]
    lease = _Lease(_task(3), "q")
    lease.next_beat = time.time()
    beater.add(lease)
    beater.start()
    try:
        wait_until(lambda: len(beats) >= 2, 10, "a second heartbeat after the failed one")
        assert beater.is_alive()
    finally:
        beater.stop()
        beater.join(10)


def _lost(worker: fairway.Worker) -> bool:
    with worker._leases_lock:
        return any(lease.state == "lost" for lease in worker._leases.values())


def test_the_worker_logs_and_waits_for_a_queue_that_does_not_exist_yet(server, client, queue_name, caplog):
    queue = queue_name("later")
    done = threading.Event()
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1, reconnect_max=0.5)

    @worker.task(queue)
    def work(payload):
        done.set()

    caplog.set_level(logging.INFO, logger="fairway")
    thread = run_in_thread(worker)
    try:
        wait_until(lambda: any("NOT_FOUND" in r.getMessage() for r in caplog.records), 30, "a NOT_FOUND log line")
        client.create_queue(queue)
        client.add(queue, b"x")
        assert done.wait(30)
    finally:
        stop_and_join(worker, thread)


def test_tasks_run_in_opentelemetry_spans(server, client, queue_name):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    queue = queue_name("otel")
    client.create_queue(queue)
    client.add(queue, b"x", fairness_key="k")
    inside = []
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1)

    @worker.task(queue)
    def work(payload):
        inside.append(trace.get_current_span().get_span_context().is_valid)

    thread = run_in_thread(worker)
    try:
        wait_until(lambda: client.describe_queue(queue).completed == 1, 30, "the completion")
    finally:
        stop_and_join(worker, thread)
    assert inside == [True], "the function runs inside the span"
    (span,) = [s for s in exporter.get_finished_spans() if s.name == f"fairway.task {queue}"]
    assert span.attributes["fairway.queue"] == queue and span.attributes["fairway.attempt"] == 1
    assert span.attributes["fairway.fairness_key"] == "k"
