"""The worker when its own machinery fails: a thread that cannot start, an
unexpected error, a report racing the drain, a server that does not answer."""

from __future__ import annotations

import logging
import threading
import time
from typing import List

import pytest

import fairway
import fairway.worker
from conftest import wait_until
from test_worker import run_in_thread, stop_and_join


def test_a_task_whose_thread_cannot_start_is_handed_back_and_run_again(server, client, queue_name, monkeypatch):
    queue = queue_name("nothread")
    client.create_queue(queue)
    client.add(queue, b"x")
    attempts: List[int] = []
    refused = threading.Event()
    original_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("fairway-task-") and not refused.is_set():
            refused.set()
            raise RuntimeError("can't start new thread")
        original_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1)

    @worker.task(queue)
    def work(payload, ctx):
        attempts.append(ctx.attempt)

    thread = run_in_thread(worker)
    try:
        wait_until(lambda: client.describe_queue(queue).completed == 1, 30, "the task run after its hand-back")
        assert refused.is_set()
        wait_until(lambda: worker.in_flight == 0, 30, "its slot freed")
        assert thread.is_alive(), "the worker keeps going"
    finally:
        stop_and_join(worker, thread)
    assert attempts == [2], "handed back (attempt 1), then run"
    info = client.describe_queue(queue)
    assert (info.completed, info.failed, info.leased, info.backlog) == (1, 1, 0, 0)


def test_an_unexpected_error_of_the_poller_ends_run_with_it_and_a_later_run_is_clean(
    server, client, queue_name, monkeypatch
):
    queue = queue_name("pollbug")
    client.create_queue(queue)
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1)
    done = threading.Event()

    @worker.task(queue)
    def work(payload):
        done.set()

    original_poll = worker._poll
    calls = []

    def poll(queue_: str, want: int):
        calls.append(queue_)
        if len(calls) == 1:
            raise KeyError("a bug of the worker's")
        return original_poll(queue_, want)

    monkeypatch.setattr(worker, "_poll", poll)
    thread = run_in_thread(worker)
    thread.join(30)
    assert not thread.is_alive(), "run() ended by itself, it did not hang"
    assert len(thread.errors) == 1 and isinstance(thread.errors[0], KeyError), thread.errors  # type: ignore[attr-defined]

    # The next run is a new one: it works, and does not raise the first run's error.
    client.add(queue, b"x")
    thread = run_in_thread(worker)
    try:
        assert done.wait(30)
        wait_until(lambda: client.describe_queue(queue).completed == 1, 30, "the completion")
    finally:
        stop_and_join(worker, thread)


def test_a_refused_poll_ends_run_with_its_error_once(server, client, queue_name, monkeypatch):
    """A fatal error of one run is not raised again by the next."""
    queue = queue_name("fatal")
    client.create_queue(queue)
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1)

    @worker.task(queue)
    def work(payload):
        pass

    original_poll = worker._poll
    calls = []

    def poll(queue_: str, want: int):
        calls.append(queue_)
        if len(calls) == 1:
            raise fairway.PermissionDenied("not yours", method="PollTasks")
        return original_poll(queue_, want)

    monkeypatch.setattr(worker, "_poll", poll)
    thread = run_in_thread(worker)
    thread.join(30)
    assert not thread.is_alive()
    assert [type(e) for e in thread.errors] == [fairway.PermissionDenied]  # type: ignore[attr-defined]
    thread = run_in_thread(worker)
    wait_until(lambda: len(calls) >= 2, 30, "the second run to poll")
    stop_and_join(worker, thread)  # raises nothing


class _Unanswered:
    """A call's future that never completes, as a channel a fork left broken gives."""

    def __init__(self) -> None:
        self.cancelled_at: List[float] = []

    def add_done_callback(self, callback) -> None:
        pass

    def cancel(self) -> bool:
        self.cancelled_at.append(time.monotonic())
        return True

    def cancelled(self) -> bool:
        return bool(self.cancelled_at)


def test_a_poll_that_never_ends_is_given_up_past_its_deadline_and_the_worker_polls_again(
    server, client, queue_name, monkeypatch, caplog
):
    queue = queue_name("stuckpoll")
    client.create_queue(queue)
    client.add(queue, b"x")
    monkeypatch.setattr(fairway.worker, "POLL_OVERDUE", 0.5)
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=0.5, reconnect_initial=0.1, timeout=0.5)
    done = threading.Event()

    @worker.task(queue)
    def work(payload):
        done.set()

    stub = worker.client._stubs["matching"]
    real = stub.PollTasks
    unanswered = _Unanswered()

    class FirstUnanswered:
        calls = 0

        def future(self, *args, **kwargs):
            FirstUnanswered.calls += 1
            return unanswered if FirstUnanswered.calls == 1 else real.future(*args, **kwargs)

    monkeypatch.setattr(stub, "PollTasks", FirstUnanswered())
    caplog.set_level(logging.WARNING, logger="fairway")
    started = time.monotonic()
    thread = run_in_thread(worker)
    try:
        assert done.wait(30), "the worker polled again and ran the task"
        # Given up at its deadline (0.5 s wait + 0.5 s timeout) and 0.5 s more, not before.
        assert len(unanswered.cancelled_at) == 1
        assert unanswered.cancelled_at[0] - started >= 1.5
        messages = [r.getMessage() for r in caplog.records]
        assert any("DEADLINE_EXCEEDED" in m and "past the poll's deadline" in m for m in messages), messages
        wait_until(lambda: client.describe_queue(queue).completed == 1, 30, "the completion")
    finally:
        stop_and_join(worker, thread)


def test_a_report_that_begins_during_the_hand_backs_is_sent_before_the_client_closes(
    server, client, queue_name, monkeypatch
):
    """The task returns just as the drain hands it back: the hand-back is
    refused (the lease is being reported), and the report must still go out
    on an open client before run() returns."""
    queue = queue_name("race")
    client.create_queue(queue)
    client.add(queue, b"race")
    started, release = threading.Event(), threading.Event()
    closed, closed_before_report = threading.Event(), []
    refused = threading.Event()
    original_claim = fairway.worker._Lease.claim

    def claim(lease, new_state: str) -> bool:
        if new_state == "handed_back" and lease.task.payload == b"race":
            release.set()  # the function returns: its report claims the lease
            wait_until(lambda: lease.state == "reporting", 30, "the report to begin")
            claimed = original_claim(lease, new_state)
            if not claimed:
                refused.set()
            return claimed
        return original_claim(lease, new_state)

    monkeypatch.setattr(fairway.worker._Lease, "claim", claim)
    worker = fairway.Worker(server.address, concurrency=1, poll_wait=1, hand_back_timeout=15)
    original_complete, original_close = worker.client.complete, worker.client.close

    def complete(task, result=b""):
        # Gives the worker every chance to close its client first (as it did
        # when the drain forgot this lease); a worker that waits for the
        # report lets this pass after 2 s.
        if closed.wait(2):
            closed_before_report.append(True)
        return original_complete(task, result)

    def close():
        closed.set()
        original_close()

    monkeypatch.setattr(worker.client, "complete", complete)
    monkeypatch.setattr(worker.client, "close", close)

    @worker.task(queue)
    def work(payload):
        started.set()
        assert release.wait(30)
        return b"result"

    thread = run_in_thread(worker)
    try:
        assert started.wait(30)
        worker.stop(now=True)
        thread.join(30)
        assert not thread.is_alive()
        assert not thread.errors, thread.errors  # type: ignore[attr-defined]
    finally:
        release.set()
        worker.stop()
    assert refused.is_set(), "the hand-back lost the race to the report"
    assert closed_before_report == [], "the client was closed under a report under way"
    info = client.describe_queue(queue)
    assert (info.completed, info.failed, info.leased) == (1, 0, 0), "reported once, not handed back"


def test_hand_backs_to_a_server_that_does_not_answer_take_one_deadline(server_factory, caplog):
    caplog.set_level(logging.INFO, logger="fairway")
    server = server_factory(name="frozen").start()
    queue, count, hand_back_timeout = "frozen.q", 4, 3.0
    with fairway.Client(server.address) as client:
        client.create_queue(queue)
        for i in range(count):
            client.add(queue, str(i).encode())
    started = threading.Semaphore(0)
    release = threading.Event()
    worker = fairway.Worker(
        server.address, concurrency=count, poll_wait=1, grace_period=60, hand_back_timeout=hand_back_timeout
    )

    @worker.task(queue)
    def work(payload):
        started.release()
        release.wait(120)

    thread = run_in_thread(worker)
    frozen = False
    try:
        for _ in range(count):
            assert started.acquire(timeout=30), "every task running"
        frozen = True
        server.freeze()  # up, connected, never answering
        begun = time.monotonic()
        worker.stop(now=True)
        thread.join(60)
        took = time.monotonic() - begun
        assert not thread.is_alive(), "the stop ends"
        # In parallel, one try each: about one deadline (one after the other
        # it would be 4 x 3 s at least, with retries minutes).
        assert took < 2.5 * hand_back_timeout, took
        assert not thread.errors, thread.errors  # type: ignore[attr-defined]
        messages = [r.getMessage() for r in caplog.records]
        assert sum("could not hand it back" in m for m in messages) == count, messages
    finally:
        release.set()
        if frozen:
            server.thaw()
        worker.stop()
