"""Which failures are retried, with a stub that fails as told (no server)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import grpc
import pytest

import fairway
from fairway.errors import MAYBE_APPLIED_KEY, classify


class FakeError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers=()) -> None:
        self._code, self._details, self._trailers = code, details, tuple(trailers)

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


MAYBE = FakeError(grpc.StatusCode.UNKNOWN, "write timed out", [(MAYBE_APPLIED_KEY, "true")])
NOT_APPLIED = FakeError(
    grpc.StatusCode.UNAVAILABLE, "partition q/0 is changing owner; nothing was written, retry"
)


class ScriptedStub:
    """Answers each call with the next error of ``script``, then with ``response``."""

    def __init__(self, script: List[Exception], response) -> None:
        self.script, self.response, self.calls = list(script), response, 0

    def __getattr__(self, method):
        def call(request, timeout=None, metadata=None):
            self.calls += 1
            if self.script:
                raise self.script.pop(0)
            return self.response

        return call


def scripted(script, response) -> Tuple[fairway.Client, ScriptedStub]:
    client = fairway.Client("127.0.0.1:1", retry=fairway.RetryPolicy(max_attempts=4, initial_backoff=0.001))
    stub = ScriptedStub(script, response)
    client._stubs = {"matching": stub, "scheduler": stub}
    return client, stub


def add_response():
    from fairway._proto.fairway.v1 import matching_pb2

    return matching_pb2.AddTaskResponse(task_id=7, duplicate=True)


def test_classification_follows_the_status_table():
    maybe = classify(grpc.StatusCode.UNKNOWN, "timeout", [(MAYBE_APPLIED_KEY, "true")], "AddTask")
    assert isinstance(maybe, fairway.Unknown) and maybe.maybe_applied
    assert maybe.trailers == {MAYBE_APPLIED_KEY: "true"}
    store = "store unavailable: timeout; nothing was written, retry"
    assert not classify(grpc.StatusCode.UNAVAILABLE, store, None, "AddTask").maybe_applied
    assert not classify(grpc.StatusCode.ABORTED, "being written", None, "CompleteTask").maybe_applied
    assert classify(grpc.StatusCode.UNAVAILABLE, "Socket closed", None, "AddTask").maybe_applied
    assert not classify(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses", None, "X").maybe_applied
    assert classify(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", None, "AddTask").maybe_applied
    lease = classify(grpc.StatusCode.FAILED_PRECONDITION, "lease lost", None, "HeartbeatTask")
    assert isinstance(lease, fairway.LeaseLost)
    other = classify(grpc.StatusCode.FAILED_PRECONDITION, "no live node in home", None, "CreateQueue")
    assert type(other) is fairway.FailedPrecondition
    error = classify(grpc.StatusCode.NOT_FOUND, "queue q was never created", None, "DescribeQueue")
    assert isinstance(error, fairway.NotFound) and error.code == grpc.StatusCode.NOT_FOUND
    assert "never created" in str(error) and error.message == "queue q was never created"


def test_an_unavailable_that_says_nothing_of_what_was_written_is_maybe_applied():
    # Neither the server's words ("nothing was written") nor gRPC's for a
    # connection never made: a proxy's, or gRPC's words not known here.
    for details in ("upstream connect error or disconnect/reset before headers", "", "no healthy upstream"):
        error = classify(grpc.StatusCode.UNAVAILABLE, details, None, "AddTask")
        assert isinstance(error, fairway.Unavailable) and error.maybe_applied, details
        assert not error.retryable, details
    assert not classify(grpc.StatusCode.UNAVAILABLE, "connection refused", None, "AddTask").maybe_applied
    home = 'queue q is homed in region "eu", where no node is live; nothing was written or taken'
    assert not classify(grpc.StatusCode.UNAVAILABLE, home, None, "AddTask").maybe_applied


def test_an_unknown_unavailable_is_not_resent_for_an_add_or_a_poll_but_is_for_a_dedup_add():
    from fairway._proto.fairway.v1 import matching_pb2

    proxy = FakeError(grpc.StatusCode.UNAVAILABLE, "upstream connect error or disconnect/reset before headers")
    client, stub = scripted([proxy], add_response())
    with pytest.raises(fairway.Unavailable) as error:
        client.add("q", b"x")
    assert error.value.maybe_applied and stub.calls == 1
    client, stub = scripted([proxy], matching_pb2.PollTasksResponse())
    with pytest.raises(fairway.Unavailable):
        client.poll_many("q", 4, wait=0)
    assert stub.calls == 1
    client, stub = scripted([proxy], add_response())
    assert client.add("q", b"x", dedup_id="d").duplicate and stub.calls == 2


def test_unavailable_is_retried_for_any_call():
    client, stub = scripted([NOT_APPLIED, NOT_APPLIED], add_response())
    assert client.add("q", b"x").task_id == 7 and stub.calls == 3


def test_a_maybe_applied_add_without_dedup_id_is_never_retried():
    client, stub = scripted([MAYBE], add_response())
    with pytest.raises(fairway.Unknown) as error:
        client.add("q", b"x")
    assert error.value.maybe_applied and stub.calls == 1


def test_a_maybe_applied_add_with_dedup_id_is_retried():
    client, stub = scripted([MAYBE], add_response())
    assert client.add("q", b"x", dedup_id="d").duplicate and stub.calls == 2


def test_maybe_applied_reads_and_heartbeats_are_retried_but_redrives_are_not():
    from fairway._proto.fairway.v1 import matching_pb2

    client, stub = scripted([MAYBE], matching_pb2.HeartbeatTaskResponse())
    client.heartbeat("token")
    assert stub.calls == 2
    client, stub = scripted([MAYBE], matching_pb2.RedriveDeadLettersResponse())
    with pytest.raises(fairway.Unknown):
        client.redrive("q")
    assert stub.calls == 1


def test_a_report_lost_after_a_maybe_applied_try_says_it_may_have_landed():
    lost = FakeError(grpc.StatusCode.FAILED_PRECONDITION, "not this token's lease")
    client, stub = scripted([MAYBE, lost], None)
    with pytest.raises(fairway.LeaseLost) as error:
        client.complete("token", b"")
    assert error.value.maybe_applied and stub.calls == 2


def test_retries_are_bounded_and_back_off():
    client, stub = scripted([NOT_APPLIED] * 10, add_response())
    with pytest.raises(fairway.Unavailable):
        client.add("q", b"x")
    assert stub.calls == 4
    policy = fairway.RetryPolicy(initial_backoff=1, max_backoff=4, jitter=0.2)
    waits = [policy.backoff(n) for n in range(1, 6)]
    assert 0.8 <= waits[0] <= 1.2 and 1.6 <= waits[1] <= 2.4 and all(w <= 4.8 for w in waits)
