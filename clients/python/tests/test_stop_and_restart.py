"""Stopping a worker (SIGTERM, twice) and restarting the server under it."""

from __future__ import annotations

import collections
import logging
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List

import fairway
import pytest
from conftest import HERE, wait_until
from test_worker import add_all, run_in_thread, stop_and_join


def lines(path: pathlib.Path) -> List[List[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def start_worker_process(address, queue, log, seconds, concurrency, grace, stderr_path):
    stderr = open(stderr_path, "wb")
    process = subprocess.Popen(
        [sys.executable, str(HERE / "worker_script.py"), address, queue, str(log), str(seconds), str(concurrency),
         str(grace)],
        stderr=stderr,
        stdout=subprocess.DEVNULL,
    )
    stderr.close()
    return process


def finish_with_second_worker(server, client, queue, total, done: Dict[str, int], attempts: List[int]):
    lock = threading.Lock()
    worker = fairway.Worker(server.address, concurrency=4, poll_wait=1)

    @worker.task(queue)
    def work(payload: bytes, ctx: fairway.TaskContext):
        with lock:
            done[payload.decode()] += 1
            attempts.append(ctx.attempt)

    thread = run_in_thread(worker)
    try:
        wait_until(lambda: client.describe_queue(queue).completed >= total, 60, "every task completed", 0.1)
    finally:
        stop_and_join(worker, thread)


def test_sigterm_mid_run_loses_nothing(server, client, tmp_path):
    queue, total = "stop.term", 40
    client.create_queue(queue)
    add_all(client, queue, [str(i).encode() for i in range(total)])
    log, stderr = tmp_path / "tasks.log", tmp_path / "worker.stderr"
    process = start_worker_process(server.address, queue, log, 0.5, 4, 30, stderr)
    try:
        wait_until(lambda: sum(1 for l in lines(log) if l[0] == "start") >= 6, 60, "tasks in flight")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=40) == 0, stderr.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    first = lines(log)
    started = [l[1] for l in first if l[0] == "start"]
    finished = [l[1] for l in first if l[0] == "done"]
    assert sorted(started) == sorted(finished), "the tasks in flight finished within the grace period"
    assert len(finished) < total, "the stop came mid-run"
    text = stderr.read_text()
    assert "SIGTERM: stopping" in text and "every running task finished" in text, text

    done: Dict[str, int] = collections.Counter(finished)
    finish_with_second_worker(server, client, queue, total, done, [])
    assert set(done) == {str(i) for i in range(total)}
    assert [p for p, n in done.items() if n != 1] == [], "every task completed exactly once overall"
    info = client.describe_queue(queue)
    assert (info.completed, info.backlog, info.leased) == (total, 0, 0)
    # A poll in flight when the signal came may be answered with a task the
    # stopping worker can only give back by failing it (or by letting its
    # lease run out): at most one such failure per slot that was polling.
    assert info.failed <= 4, info
    assert client.dead_letters(queue) == []


def test_a_second_sigterm_hands_running_tasks_back_at_once(server, client, tmp_path):
    queue, total = "stop.twice", 3
    client.create_queue(queue)
    add_all(client, queue, [str(i).encode() for i in range(total)])
    log, stderr = tmp_path / "tasks.log", tmp_path / "worker.stderr"
    process = start_worker_process(server.address, queue, log, 120, 3, 60, stderr)
    try:
        wait_until(lambda: sum(1 for l in lines(log) if l[0] == "start") == total, 60, "every task in flight")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: stopping" in stderr.read_text(), 30, "the first signal's log line")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker still runs 20 s after the second SIGTERM; its stderr:\n{stderr.read_text()}")
        assert code == 0, stderr.read_text()
        assert time.monotonic() - started < 15, "handed back at once, not after the 60 s grace period"
    finally:
        if process.poll() is None:
            process.kill()
    assert [l for l in lines(log) if l[0] == "done"] == [], "nothing finished in the first worker"
    assert "handing back 3 tasks" in stderr.read_text()
    done: Dict[str, int] = collections.Counter()
    attempts: List[int] = []
    finish_with_second_worker(server, client, queue, total, done, attempts)
    assert sorted(done) == [str(i) for i in range(total)] and set(done.values()) == {1}
    assert attempts == [2] * total, "the handed-back tasks came back as second attempts"
    info = client.describe_queue(queue)
    assert (info.completed, info.failed, info.expired) == (total, total, 0), "handed back by FailTask, not expired"
    assert client.dead_letters(queue) == []


def test_the_worker_reconnects_after_a_server_restart(server_factory, caplog):
    server = server_factory(name="restart").start()
    queue, total = "restart.q", 300
    with fairway.Client(server.address) as client:
        client.create_queue(queue)
        add_all(client, queue, [str(i).encode() for i in range(total)])
    runs: Dict[str, int] = collections.Counter()
    lock = threading.Lock()
    worker = fairway.Worker(server.address, concurrency=4, poll_wait=1, reconnect_initial=0.2, reconnect_max=1)

    @worker.task(queue)
    def work(payload: bytes):
        time.sleep(0.02)
        with lock:
            runs[payload.decode()] += 1

    caplog.set_level(logging.INFO, logger="fairway")
    thread = run_in_thread(worker)
    try:
        wait_until(lambda: len(runs) >= 60, 60, "a fifth of the tasks")
        unavailable = lambda: any("UNAVAILABLE" in r.getMessage() for r in caplog.records)  # noqa: E731
        server.restart_on_same_port(while_down=lambda: wait_until(unavailable, 30, "the worker to see it down"))
        assert len(runs) < total, "the restart came mid-run"
        wait_until(lambda: len(runs) == total, 120, "every task run after the restart", 0.1)
        assert thread.is_alive(), "the worker did not exit when the server went away"
        with fairway.Client(server.address) as client:
            last = []

            def empty() -> bool:
                last[:] = [client.describe_queue(queue)]
                return last[0].backlog == 0 and last[0].leased == 0

            try:
                wait_until(empty, 60, "an empty queue", 0.1)
            except AssertionError as error:
                raise AssertionError(f"{error}; the queue: {last[0]}; runs: {dict(runs)}") from None
            assert client.dead_letters(queue) == []
    finally:
        stop_and_join(worker, thread)
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "UNAVAILABLE" in messages, "the worker saw the server down (polls, reports or heartbeats)"
    # At least once across a crash: a task running at the kill may run again.
    assert sum(runs.values()) - total <= 8, runs


def test_stop_cancels_a_waiting_poll_at_once(server, client, queue_name):
    queue = queue_name("idle")
    client.create_queue(queue)
    worker = fairway.Worker(server.address, concurrency=2, poll_wait=60)

    @worker.task(queue)
    def work(payload):
        raise AssertionError("no task was added")

    thread = run_in_thread(worker)
    wait_until(lambda: client.describe_queue(queue).waiting_pollers == 1, 30, "the worker's poll to wait")
    started = time.monotonic()
    stop_and_join(worker, thread, timeout=10)
    assert time.monotonic() - started < 5, "a 60 s poll does not hold the stop"


def test_after_the_grace_period_tasks_are_handed_back_and_never_reported(server, client, queue_name, caplog):
    caplog.set_level(logging.INFO, logger="fairway")
    queue = queue_name("grace")
    client.create_queue(queue)
    client.add(queue, b"slow")
    started, release = threading.Event(), threading.Event()
    returned = threading.Event()
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1, grace_period=1)

    @worker.task(queue)
    def slow(payload):
        started.set()
        assert release.wait(60)
        returned.set()
        return b"too late"

    thread = run_in_thread(worker)
    try:
        assert started.wait(30)
        begun = time.monotonic()
        stop_and_join(worker, thread, timeout=30)
        assert time.monotonic() - begun < 10, "handed back after the 1 s grace period"
    finally:
        release.set()
    assert returned.wait(30)
    task = None
    deadline = time.monotonic() + 30
    while task is None and time.monotonic() < deadline:
        task = client.poll(queue, wait=1)
    assert task is not None and task.attempt == 2 and task.payload == b"slow"
    # The late return was a while ago now: had it been reported, it would show.
    info = client.describe_queue(queue)
    assert (info.completed, info.failed) == (0, 1), "handed back by FailTask; the late result was dropped"
    messages = [r.getMessage() for r in caplog.records]
    assert any("handed back" in m for m in messages), messages
    assert any("not reported (lease handed_back)" in m for m in messages), "the worker did not even try"
    client.complete(task)
    assert client.describe_queue(queue).completed == 1
