"""The Fairway clients: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both have the same methods, one per RPC of the ``Matching``, ``Scheduler``
and ``Schedules`` services, and raise :class:`fairway.FairwayError` subclasses.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from ._proto.fairway.v1 import matching_pb2 as _m
from ._proto.fairway.v1 import matching_pb2_grpc as _mg
from ._proto.fairway.v1 import schedules_pb2 as _s
from ._proto.fairway.v1 import schedules_pb2_grpc as _sg
from ._proto.fairway.v1 import visits_pb2 as _v
from ._proto.fairway.v1 import visits_pb2_grpc as _vg
from .errors import Aborted, FairwayError, LeaseLost, Unavailable, classify, from_rpc_error
from .schedules import BlackoutLike, Health, Schedule, health_pb, run_template, schedule_spec
from .types import (
    AddResult,
    FailResult,
    Instant,
    ListedOrigin,
    Payload,
    PollResult,
    QueueInfo,
    RedriveResult,
    Seconds,
    Task,
    TaskSpec,
    VisitRequestResult,
    datetime_of,
    duration_pb,
    instant_pb,
    payload_bytes,
    seconds_of,
)

def dead_letter_filter(
    key: Optional[str], message_contains: str, failed_from: Optional[Instant], failed_before: Optional[Instant]
) -> Optional[_m.DeadLetterFilter]:
    """The filter of dead letters to send; None (every letter) when nothing narrows it."""
    if key is None and not message_contains and failed_from is None and failed_before is None:
        return None
    return _m.DeadLetterFilter(
        fairness_key=key,
        message_contains=message_contains,
        failed_from=instant_pb(failed_from, "failed_from"),
        failed_before=instant_pb(failed_before, "failed_before"),
    )


#: What Fairway's own clients accept in one response (docs/operations.md).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: The server's default long-poll wait, used for the call's deadline when
#: none is given.
SERVER_DEFAULT_POLL_WAIT = 30.0

TaskOrToken = Union[Task, str]
#: A task done, sent with a poll: the task (or its lease token), with an
#: empty result, or a pair of the task and its result.
Completed = Union[TaskOrToken, Tuple[TaskOrToken, Payload]]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter.

    A call is sent again only when that is safe: after ``UNAVAILABLE`` or
    ``ABORTED`` (nothing was applied), and after an error that may have been
    applied only for idempotent calls (reads, heartbeats, reports of a lease,
    adds that all carry a dedup id, ...). ``max_attempts`` counts the first
    try; ``RetryPolicy(max_attempts=1)`` never retries.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    multiplier: float = 2.0
    #: Each wait is the backoff times a random factor in [1 - jitter, 1 + jitter].
    jitter: float = 0.2

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return max(0.0, base * random.uniform(1 - self.jitter, 1 + self.jitter))

    def should_retry(self, error: FairwayError, idempotent: bool, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        if isinstance(error, (Unavailable, Aborted)) and not error.maybe_applied:
            return True
        return error.maybe_applied and idempotent


NO_RETRY = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class Connection:
    """Where and how to reach a server; :class:`Client` and :class:`AsyncClient` take the same."""

    address: str = "127.0.0.1:7070"
    #: An API key or JWT, sent as ``authorization: Bearer <token>``.
    token: Optional[str] = None
    #: PEM file of the CA that signed the server's certificate (turns TLS on).
    ca_file: Optional[str] = None
    #: PEM files of a client certificate and its key, for mutual TLS.
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    #: Force TLS on (with the system's CAs when ``ca_file`` is not given).
    tls: Optional[bool] = None
    #: Overrides the name checked against the server's certificate.
    server_name: Optional[str] = None
    #: Deadline of each call, in seconds (a poll gets its wait on top).
    timeout: float = 30.0
    retry: RetryPolicy = RetryPolicy()
    #: How long gRPC waits at most between attempts to reconnect a channel.
    max_reconnect_backoff: float = 5.0

    def target(self) -> Tuple[str, bool]:
        address = self.address
        secure = bool(self.tls) or self.ca_file is not None or self.cert_file is not None
        if address.startswith("https://"):
            address, secure = address[len("https://") :], True
        elif address.startswith("http://"):
            address = address[len("http://") :]
            if self.tls:
                secure = True
        return address.rstrip("/"), secure

    def options(self) -> List[Tuple[str, Any]]:
        options: List[Tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", int(self.max_reconnect_backoff * 1000)),
        ]
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return options

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def sync_channel(self) -> grpc.Channel:
        target, secure = self.target()
        if secure:
            return grpc.secure_channel(target, self.credentials(), options=self.options())
        return grpc.insecure_channel(target, options=self.options())

    def aio_channel(self) -> grpc.aio.Channel:
        target, secure = self.target()
        if secure:
            return grpc.aio.secure_channel(target, self.credentials(), options=self.options())
        return grpc.aio.insecure_channel(target, options=self.options())


@dataclass
class _Op:
    service: str  # "matching", "scheduler" or "schedules"
    method: str  # the RPC's name
    request: Any
    idempotent: bool
    convert: Callable[[Any], Any]
    timeout: Optional[float] = None


def _token(task: TaskOrToken) -> str:
    return task.lease_token if isinstance(task, Task) else task


def _spec(item: Union[TaskSpec, Payload]) -> TaskSpec:
    return item if isinstance(item, TaskSpec) else TaskSpec(payload=item)


def _add_result(response: _m.AddTaskResponse) -> AddResult:
    return AddResult(
        task_id=response.task_id,
        sync_matched=response.sync_matched,
        duplicate=response.duplicate,
        partition=response.partition,
    )


def _item_error(error: _m.ItemError, method: str) -> FairwayError:
    """The error of one item of a call of ``method`` (an RPC name)."""
    try:
        code = next(c for c in grpc.StatusCode if c.value[0] == error.code)
    except StopIteration:
        code = grpc.StatusCode.UNKNOWN
    return classify(code, error.message, None, method)


def _item_result(result: _m.AddTaskResult) -> Union[AddResult, FairwayError]:
    if result.WhichOneof("outcome") == "added":
        return _add_result(result.added)
    return _item_error(result.error, "AddTasks")


def _completion(done: Completed) -> _m.CompleteTaskRequest:
    task, result = done if isinstance(done, tuple) else (done, b"")
    return _m.CompleteTaskRequest(lease_token=_token(task), result=payload_bytes(result))


def _poll_result(response: _m.PollTasksResponse) -> PollResult:
    return PollResult(
        tasks=[Task.from_pb(t) for t in response.tasks],
        completions=[
            _item_error(c.error, "CompleteTask") if c.HasField("error") else None for c in response.completions
        ],
    )


_DURATION_SETTINGS = ("lease_timeout", "backoff_initial", "backoff_max")
_PLAIN_SETTINGS = (
    "max_attempts",
    "key_concurrency",
    "key_rate_per_second",
    "key_burst",
    "cost_curve",
    "cost_reference_size",
    "group_lead",
)


def _queue_settings(given: Dict[str, Any]) -> _m.QueueSettings:
    """UpdateQueue's settings from keyword arguments; an unknown name is a TypeError."""
    unknown = set(given) - set(_DURATION_SETTINGS) - set(_PLAIN_SETTINGS) - {"weights"}
    if unknown:
        known = ", ".join(_DURATION_SETTINGS + _PLAIN_SETTINGS + ("weights",))
        raise TypeError(f"not a queue setting: {', '.join(sorted(unknown))} (the settings: {known})")
    settings = _m.QueueSettings(weights=given.get("weights") or {})
    for name in _DURATION_SETTINGS:
        if given.get(name) is not None:
            getattr(settings, name).CopyFrom(duration_pb(given[name]))
    for name in _PLAIN_SETTINGS:
        if given.get(name) is not None:
            setattr(settings, name, given[name])
    return settings


class _Ops:
    """Builds each call; shared by the sync and asyncio clients."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def add(self, queue: str, spec: TaskSpec) -> _Op:
        request = _m.AddTaskRequest(queue=queue, task=spec.to_pb())
        return _Op("matching", "AddTask", request, bool(spec.dedup_id), _add_result)

    def add_many(self, queue: str, specs: Sequence[TaskSpec]) -> _Op:
        request = _m.AddTasksRequest(queue=queue, tasks=[s.to_pb() for s in specs])
        idempotent = all(s.dedup_id for s in specs)
        return _Op("matching", "AddTasks", request, idempotent, lambda r: [_item_result(x) for x in r.results])

    def _poll_timeout(self, wait: Optional[Seconds]) -> float:
        waited = seconds_of(wait)
        return (SERVER_DEFAULT_POLL_WAIT if waited is None else waited) + self.connection.timeout

    def poll(self, queue: str, wait: Optional[Seconds], worker_id: str) -> _Op:
        request = _m.PollTaskRequest(queue=queue, worker_id=worker_id, max_wait=duration_pb(wait))
        convert = lambda r: Task.from_pb(r.task) if r.HasField("task") else None  # noqa: E731
        return _Op("matching", "PollTask", request, False, convert, self._poll_timeout(wait))

    def poll_many(self, queue: str, max_tasks: int, wait: Optional[Seconds], worker_id: str) -> _Op:
        request = _m.PollTasksRequest(
            queue=queue, worker_id=worker_id, max_wait=duration_pb(wait), max_tasks=max_tasks
        )
        convert = lambda r: [Task.from_pb(t) for t in r.tasks]  # noqa: E731
        return _Op("matching", "PollTasks", request, False, convert, self._poll_timeout(wait))

    def poll_and_complete(
        self, queue: str, max_tasks: int, completed: Iterable[Completed], wait: Optional[Seconds], worker_id: str
    ) -> _Op:
        request = _m.PollTasksRequest(
            queue=queue,
            worker_id=worker_id,
            max_wait=duration_pb(wait),
            max_tasks=max_tasks,
            completions=[_completion(done) for done in completed],
        )
        return _Op("matching", "PollTasks", request, False, _poll_result, self._poll_timeout(wait))

    def complete(self, task: TaskOrToken, result: Payload) -> _Op:
        request = _m.CompleteTaskRequest(lease_token=_token(task), result=payload_bytes(result))
        # Reporting again after an outcome we cannot know is what the server
        # asks for; a lease already finished by the first try answers LeaseLost
        # with maybe_applied set.
        return _Op("matching", "CompleteTask", request, True, lambda r: None)

    def fail(self, task: TaskOrToken, message: str, retryable: bool, retry_after: Optional[Seconds]) -> _Op:
        request = _m.FailTaskRequest(
            lease_token=_token(task), retryable=retryable, message=message, retry_after=duration_pb(retry_after)
        )
        convert = lambda r: FailResult(  # noqa: E731
            will_retry=r.will_retry,
            next_attempt_at=datetime_of(r.next_attempt_at) if r.HasField("next_attempt_at") else None,
        )
        return _Op("matching", "FailTask", request, True, convert)

    def heartbeat(self, task: TaskOrToken) -> _Op:
        request = _m.HeartbeatTaskRequest(lease_token=_token(task))
        return _Op("matching", "HeartbeatTask", request, True, lambda r: datetime_of(r.lease_deadline))

    def describe_queue(self, queue: str, top_keys: int) -> _Op:
        request = _m.DescribeQueueRequest(queue=queue, top_keys=top_keys)
        return _Op("matching", "DescribeQueue", request, True, QueueInfo.from_pb)

    def create_queue(self, queue: str, partitions: int, home: str) -> _Op:
        request = _m.CreateQueueRequest(queue=queue, partitions=partitions, home=home)
        return _Op("matching", "CreateQueue", request, True, lambda r: r)

    def dead_letters(self, queue: str, limit: int, chosen: Optional[_m.DeadLetterFilter]) -> _Op:
        request = _m.ListDeadLettersRequest(queue=queue, limit=limit, filter=chosen)
        return _Op("matching", "ListDeadLetters", request, True, lambda r: list(r.dead_letters))

    def redrive(self, queue: str, limit: int, chosen: Optional[_m.DeadLetterFilter]) -> _Op:
        request = _m.RedriveDeadLettersRequest(queue=queue, limit=limit, filter=chosen)
        convert = lambda r: RedriveResult(  # noqa: E731
            redriven=r.redriven, duplicates=r.duplicates, passed_over=r.passed_over, more=r.more
        )
        return _Op("matching", "RedriveDeadLetters", request, False, convert)

    def list_queues(self, prefix: str, page_token: str) -> _Op:
        request = _m.ListQueuesRequest(page_size=100, page_token=page_token, prefix=prefix)
        return _Op("matching", "ListQueues", request, True, lambda r: r)

    # An update sent twice stores the same settings (one more version at
    # most): retried, as are a pause and a resume.
    def update_queue(self, queue: str, settings: _m.QueueSettings, clear: Sequence[str], expected_version: int) -> _Op:
        request = _m.UpdateQueueRequest(
            queue=queue, settings=settings, clear=list(clear), expected_version=expected_version
        )
        return _Op("matching", "UpdateQueue", request, expected_version == 0, lambda r: r.settings)

    def get_task(self, queue: str, task_id: int, partition: int, include_payload: bool) -> _Op:
        request = _m.GetTaskRequest(queue=queue, partition=partition, task_id=task_id, include_payload=include_payload)
        return _Op("matching", "GetTask", request, True, lambda r: r)

    # A cancel sent twice cancels the same task: retried.
    def cancel_task(self, queue: str, task_id: int, partition: int) -> _Op:
        request = _m.CancelTaskRequest(queue=queue, partition=partition, task_id=task_id)
        return _Op("matching", "CancelTask", request, True, lambda r: r)

    # Asking for a token changes nothing: retried. A purge sent twice would
    # also cancel what was added between the two: not retried.
    def purge_queue(self, queue: str, confirmation: str) -> _Op:
        request = _m.PurgeQueueRequest(queue=queue, confirmation=confirmation)
        return _Op("matching", "PurgeQueue", request, not confirmation, lambda r: r)

    def list_workers(self, queue: str) -> _Op:
        request = _m.ListWorkersRequest(queue=queue)
        return _Op("matching", "ListWorkers", request, True, lambda r: r)

    def list_nodes(self) -> _Op:
        return _Op("matching", "ListNodes", _m.ListNodesRequest(), True, lambda r: r)

    # A pause or a resume sent twice leaves the queue as once: retried.
    def pause(self, queue: str, key: Optional[str], pause: bool) -> _Op:
        if pause:
            request = _m.PauseQueueRequest(queue=queue, fairness_key=key)
            return _Op("matching", "PauseQueue", request, True, lambda r: r.settings)
        request = _m.ResumeQueueRequest(queue=queue, fairness_key=key)
        return _Op("matching", "ResumeQueue", request, True, lambda r: r.settings)

    def record_origins(self, lister: str, origins: Iterable[ListedOrigin]) -> _Op:
        request = _v.RecordOriginsRequest(lister=lister, origins=[o.to_pb() for o in origins])
        return _Op("scheduler", "RecordOrigins", request, True, lambda r: r.new_origins)

    def finish_listing(self, lister: str) -> _Op:
        return _Op("scheduler", "FinishListing", _v.FinishListingRequest(lister=lister), True, lambda r: None)

    def request_visit(self, url: str, visit_type: str) -> _Op:
        request = _v.RequestVisitRequest(url=url, visit_type=visit_type)
        convert = lambda r: VisitRequestResult(task_id=r.task_id, duplicate=r.duplicate)  # noqa: E731
        return _Op("scheduler", "RequestVisit", request, True, convert)

    def visit_stats(self, url: str, visit_type: str) -> _Op:
        request = _v.GetVisitStatsRequest(url=url, visit_type=visit_type)
        convert = lambda r: r.stats if r.HasField("stats") else None  # noqa: E731
        return _Op("scheduler", "GetVisitStats", request, True, convert)

    def lister_metrics(self, lister: str) -> _Op:
        request = _v.GetListerMetricsRequest(lister=lister)
        return _Op("scheduler", "GetListerMetrics", request, True, lambda r: r)

    def run_round(self, visit_type: str) -> _Op:
        return _Op("scheduler", "RunRound", _v.RunRoundRequest(visit_type=visit_type), False, lambda r: r)

    # A create sent again after an unknown outcome would answer
    # ALREADY_EXISTS for the schedule the first try made, a delete NOT_FOUND,
    # a trigger may ask for a second run: those are not retried then. An
    # update or a pause sent twice leaves the schedule as once.

    def create_schedule(self, id: str, queue: str, paused_note: str, options: Dict[str, Any]) -> _Op:
        spec, template = _schedule_parts(queue, options)
        request = _s.CreateScheduleRequest(id=id, spec=spec, template=template, paused_note=paused_note)
        return _Op("schedules", "CreateSchedule", request, False, lambda r: Schedule.from_pb(r.schedule))

    def update_schedule(self, id: str, queue: str, options: Dict[str, Any]) -> _Op:
        spec, template = _schedule_parts(queue, options)
        request = _s.UpdateScheduleRequest(id=id, spec=spec, template=template)
        return _Op("schedules", "UpdateSchedule", request, True, lambda r: Schedule.from_pb(r.schedule))

    def delete_schedule(self, id: str) -> _Op:
        return _Op("schedules", "DeleteSchedule", _s.DeleteScheduleRequest(id=id), False, lambda r: None)

    def pause_schedule(self, id: str, paused: bool, note: str) -> _Op:
        request = _s.PauseScheduleRequest(id=id, paused=paused, note=note)
        return _Op("schedules", "PauseSchedule", request, True, lambda r: Schedule.from_pb(r.schedule))

    def trigger_schedule(self, id: str) -> _Op:
        request = _s.TriggerScheduleRequest(id=id)
        return _Op("schedules", "TriggerSchedule", request, False, lambda r: Schedule.from_pb(r.schedule))

    def describe_schedule(self, id: str) -> _Op:
        request = _s.DescribeScheduleRequest(id=id)
        convert = lambda r: Schedule.from_pb(r.schedule, r.next_ticks)  # noqa: E731
        return _Op("schedules", "DescribeSchedule", request, True, convert)

    def list_schedules_page(self, health: int, page_size: int, page_token: str) -> _Op:
        request = _s.ListSchedulesRequest(health=health, page_size=page_size, page_token=page_token)
        return _Op("schedules", "ListSchedules", request, True, lambda r: r)


_SPEC_OPTIONS = (
    "period",
    "cooldown",
    "cron",
    "max_duration",
    "every",
    "phase",
    "jitter",
    "time_zone",
    "blackouts",
    "overlap",
    "catchup_window",
    "max_expected_duration",
    "max_allowed_duration",
    "remaining_runs",
    "start_at",
    "end_at",
)


def _schedule_parts(queue: str, options: Dict[str, Any]) -> Tuple[_s.ScheduleSpec, _s.RunTemplate]:
    """The spec and run template of a create or update's keyword arguments."""
    spec = schedule_spec(**{name: options[name] for name in _SPEC_OPTIONS})
    template = run_template(queue, options["payload"], options["fairness_key"], options["weight"], options["priority"])
    return spec, template


def _connection(address: Union[str, Connection], kwargs: Any) -> Connection:
    if isinstance(address, Connection):
        return replace(address, **kwargs) if kwargs else address
    return Connection(address=address, **kwargs)


class Client:
    """A blocking client of one Fairway server (or load balancer).

    ``Client("127.0.0.1:7070")``, or with TLS and a key:
    ``Client("https://fairway.example:7070", ca_file="ca.pem", token=KEY)``.
    Keyword arguments are those of :class:`Connection`. Thread-safe.
    """

    def __init__(self, address: Union[str, Connection] = "127.0.0.1:7070", **kwargs: Any) -> None:
        self.connection = _connection(address, kwargs)
        self._ops = _Ops(self.connection)
        self._metadata = self.connection.metadata()
        self._channel = self.connection.sync_channel()
        self._stubs = {
            "matching": _mg.MatchingStub(self._channel),
            "scheduler": _vg.SchedulerStub(self._channel),
            "schedules": _sg.SchedulesStub(self._channel),
        }

    def clone(self) -> "Client":
        """A new client with the same settings, on a connection of its own."""
        return Client(self.connection)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _invoke(self, op: _Op, retry: Optional[RetryPolicy] = None) -> Any:
        policy = retry or self.connection.retry
        stub = self._stubs[op.service]
        timeout = op.timeout if op.timeout is not None else self.connection.timeout
        attempt, earlier_maybe = 0, False
        while True:
            attempt += 1
            try:
                response = getattr(stub, op.method)(op.request, timeout=timeout, metadata=self._metadata)
                return op.convert(response)
            except grpc.RpcError as rpc_error:
                error = from_rpc_error(rpc_error, op.method)
                cause: BaseException = rpc_error
            if not policy.should_retry(error, op.idempotent, attempt):
                if isinstance(error, LeaseLost) and earlier_maybe:
                    # An earlier try whose outcome was unknown may have finished it.
                    error.maybe_applied = True
                raise error from cause
            earlier_maybe = earlier_maybe or error.maybe_applied
            time.sleep(policy.backoff(attempt))

    # -- Matching --------------------------------------------------------

    def add(
        self,
        queue: str,
        payload: Payload = b"",
        *,
        fairness_key: str = "",
        weight: float = 0.0,
        priority: int = 0,
        dedup_id: str = "",
        delay: Optional[Seconds] = None,
        deadline: Optional[Instant] = None,
        cost: Optional[int] = None,
        size: Optional[int] = None,
    ) -> AddResult:
        """Adds one task. Retried after an outcome that is not known only with a ``dedup_id``.

        ``deadline`` (an aware datetime or Unix seconds) is when the task
        should start at the latest: a queue with ordering "deadline"
        dispatches earliest first. A naive datetime raises ValueError.
        ``cost`` (1 to 1000, default 1) is the work the task stands for: its
        key's share counts it as that many tasks of cost 1. ``size`` (1 to
        10**15), given instead, is the work in the queue's units (records,
        bytes), made into a cost on the queue's ``cost_curve``.
        """
        spec = TaskSpec(payload, fairness_key, weight, priority, dedup_id, delay, deadline, cost, size)
        return self._invoke(self._ops.add(queue, spec))

    def add_many(self, queue: str, tasks: Iterable[Union[TaskSpec, Payload]]) -> List[Union[AddResult, FairwayError]]:
        """Adds several tasks to one queue: one result per task, in order; an
        item that failed is a :class:`FairwayError` instance (not raised)."""
        return self._invoke(self._ops.add_many(queue, [_spec(t) for t in tasks]))

    def poll(self, queue: str, *, wait: Optional[Seconds] = None, worker_id: str = "") -> Optional[Task]:
        """Long-polls for one task; None when ``wait`` passed with none."""
        return self._invoke(self._ops.poll(queue, wait, worker_id))

    def poll_many(
        self, queue: str, max_tasks: int, *, wait: Optional[Seconds] = None, worker_id: str = ""
    ) -> List[Task]:
        """Long-polls for up to ``max_tasks`` tasks (empty when ``wait`` passed with none)."""
        return self._invoke(self._ops.poll_many(queue, max_tasks, wait, worker_id))

    def poll_and_complete(
        self,
        queue: str,
        max_tasks: int,
        completed: Iterable[Completed],
        *,
        wait: Optional[Seconds] = None,
        worker_id: str = "",
    ) -> PollResult:
        """Reports tasks done and long-polls for up to ``max_tasks`` more, in one call.

        ``completed`` holds tasks (or lease tokens) done with an empty
        result, or ``(task, result)`` pairs: at most the server's
        ``limits.max_poll_tasks`` (256 by default; more raises
        :class:`InvalidArgument` with nothing completed). They are completed
        before the poll waits; each one's outcome is in the result's
        ``completions``, in order. Beside a queue with a backlog this is one
        call where ``complete`` then ``poll_many`` are many, and the server
        writes the completions and the next leases together. If the call
        raises, a completion may have been made: report each again with
        :meth:`complete` (:class:`LeaseLost` for one already made).
        """
        return self._invoke(self._ops.poll_and_complete(queue, max_tasks, completed, wait, worker_id))

    def complete(self, task: TaskOrToken, result: Payload = b"") -> None:
        """Reports a task done. :class:`LeaseLost` when the lease is no longer this token's."""
        self._invoke(self._ops.complete(task, result))

    def fail(
        self,
        task: TaskOrToken,
        message: str = "",
        *,
        retryable: bool = True,
        retry_after: Optional[Seconds] = None,
    ) -> FailResult:
        """Reports a task failed: retried later if ``retryable`` and attempts remain, else a dead letter."""
        return self._invoke(self._ops.fail(task, message, retryable, retry_after))

    def heartbeat(self, task: TaskOrToken) -> Any:
        """Extends the lease by the queue's lease timeout; returns the new deadline (a datetime)."""
        return self._invoke(self._ops.heartbeat(task))

    def describe_queue(self, queue: str, *, top_keys: int = 0) -> QueueInfo:
        return self._invoke(self._ops.describe_queue(queue, top_keys))

    def create_queue(self, queue: str, partitions: int = 1, *, home: str = "") -> _m.CreateQueueResponse:
        """Creates a queue (a queue that exists keeps its settings: see the response)."""
        return self._invoke(self._ops.create_queue(queue, partitions, home))

    def dead_letters(
        self,
        queue: str,
        *,
        limit: int = 0,
        key: Optional[str] = None,
        message_contains: str = "",
        failed_from: Optional[Instant] = None,
        failed_before: Optional[Instant] = None,
    ) -> List[_m.DeadLetter]:
        """Dead letters, oldest failure first: all, or those of ``key``, whose
        message contains ``message_contains``, failed in [failed_from,
        failed_before). A payload comes only to a caller who may work its key."""
        chosen = dead_letter_filter(key, message_contains, failed_from, failed_before)
        return self._invoke(self._ops.dead_letters(queue, limit, chosen))

    def redrive(
        self,
        queue: str,
        *,
        limit: int = 0,
        key: Optional[str] = None,
        message_contains: str = "",
        failed_from: Optional[Instant] = None,
        failed_before: Optional[Instant] = None,
    ) -> RedriveResult:
        """Puts dead letters back in the queue, all or those chosen as in
        :meth:`dead_letters` (never retried after an unknown outcome)."""
        chosen = dead_letter_filter(key, message_contains, failed_from, failed_before)
        return self._invoke(self._ops.redrive(queue, limit, chosen))

    def list_queues(self, prefix: str = "", *, limit: int = 1000) -> List[_m.QueueSummary]:
        """The queues you may read, in name order (pages fetched until ``limit``):
        each with its backlog, running tasks, oldest wait and stored settings."""
        queues: List[_m.QueueSummary] = []
        token = ""
        while len(queues) < limit:
            page = self._invoke(self._ops.list_queues(prefix, token))
            queues.extend(page.queues)
            token = page.next_page_token
            if not token:
                break
        return queues[:limit]

    def update_queue(
        self, queue: str, *, clear: Sequence[str] = (), expected_version: int = 0, **settings: Any
    ) -> _m.QueueSettings:
        """Stores settings with the queue, applied by every node over its config
        file: ``lease_timeout``, ``backoff_initial``, ``backoff_max`` (seconds or
        timedelta), ``max_attempts``, ``key_concurrency``, ``key_rate_per_second``,
        ``key_burst``, ``cost_curve``, ``cost_reference_size``, ``group_lead``,
        ``weights`` (a dict; a weight of 0 removes a key's). ``clear`` names
        settings to give back to the config file."""
        return self._invoke(self._ops.update_queue(queue, _queue_settings(settings), clear, expected_version))

    def get_task(
        self, queue: str, task_id: int, *, partition: int = 0, include_payload: bool = False
    ) -> _m.GetTaskResponse:
        """One task by its id and partition (as :meth:`add` returned them): its
        ``state`` (PENDING with ``waiting_for``, DELAYED with ``ready_at``,
        LEASED with ``worker_id`` and ``lease_deadline``, DEAD with
        ``failed_at`` and ``failure_message``). :class:`NotFound` says whether it
        completed or never existed. The payload only with ``include_payload``
        and the admin or worker role."""
        return self._invoke(self._ops.get_task(queue, task_id, partition, include_payload))

    def cancel_task(self, queue: str, task_id: int, *, partition: int = 0) -> _m.CancelTaskResponse:
        """Cancels one task (admin role): a dead letter is removed; a leased
        task's lease ends at once (its heartbeats fail with :class:`LeaseLost`);
        a pending or delayed one ends, never delivered, when it comes up. The
        answer's ``state`` is where it stood; :class:`NotFound` as for
        :meth:`get_task`."""
        return self._invoke(self._ops.cancel_task(queue, task_id, partition))

    def purge_queue(self, queue: str, confirmation: str = "") -> _m.PurgeQueueResponse:
        """Cancels every task of the queue but its dead letters (admin role):
        waiting, delayed and running (their heartbeats fail with
        :class:`LeaseLost`). Without ``confirmation`` nothing is purged: the
        answer's ``confirmation`` is a token for this queue, good for five
        minutes; called again with it, the queue is purged and the answer
        counts what it held (``purged``, ``waiting``, ``delayed``,
        ``running``). Tasks added after it stay."""
        return self._invoke(self._ops.purge_queue(queue, confirmation))

    def list_workers(self, queue: str = "") -> _m.ListWorkersResponse:
        """The workers whose polls a node saw in the last 5 minutes, from every
        live node (``workers``: worker id, queue, node, address, polls waiting,
        tasks handed, first and last poll), the queue's alone when named;
        ``unanswered_nodes`` names the live nodes that did not answer."""
        return self._invoke(self._ops.list_workers(queue))

    def list_nodes(self) -> _m.ListNodesResponse:
        """The cluster's nodes, live or recently dead (``nodes``: name,
        address, region, heartbeat, ``live``; and from each that answered,
        partitions held, tasks running, workers polling)."""
        return self._invoke(self._ops.list_nodes())

    def pause_queue(self, queue: str, key: Optional[str] = None) -> _m.QueueSettings:
        """Stops handing out the queue's tasks, or one fairness key's (``""`` is the
        empty key): adds go on, polls wait. Stored with the queue, on every node.
        Returns the queue's settings as stored (``paused``, ``paused_keys``)."""
        return self._invoke(self._ops.pause(queue, key, True))

    def resume_queue(self, queue: str, key: Optional[str] = None) -> _m.QueueSettings:
        """Undoes :meth:`pause_queue` for the queue, or for one key."""
        return self._invoke(self._ops.pause(queue, key, False))

    # -- Scheduler -------------------------------------------------------

    def record_origins(self, lister: str, origins: Iterable[ListedOrigin]) -> int:
        """Records origins a lister found; returns how many were new."""
        return self._invoke(self._ops.record_origins(lister, list(origins)))

    def finish_listing(self, lister: str) -> None:
        self._invoke(self._ops.finish_listing(lister))

    def request_visit(self, url: str, visit_type: str) -> VisitRequestResult:
        return self._invoke(self._ops.request_visit(url, visit_type))

    def visit_stats(self, url: str, visit_type: str) -> Optional[_v.VisitStats]:
        return self._invoke(self._ops.visit_stats(url, visit_type))

    def lister_metrics(self, lister: str) -> _v.GetListerMetricsResponse:
        return self._invoke(self._ops.lister_metrics(lister))

    def run_round(self, visit_type: str) -> _v.RunRoundResponse:
        return self._invoke(self._ops.run_round(visit_type))

    # -- Schedules -------------------------------------------------------

    def create_schedule(
        self,
        id: str,
        queue: str,
        *,
        period: Optional[Seconds] = None,
        cooldown: Optional[Seconds] = None,
        cron: Optional[str] = None,
        max_duration: Optional[Seconds] = None,
        every: Optional[Seconds] = None,
        phase: Optional[Seconds] = None,
        jitter: Optional[Seconds] = None,
        time_zone: str = "UTC",
        blackouts: Sequence[BlackoutLike] = (),
        overlap: str = "skip",
        catchup_window: Optional[Seconds] = None,
        max_expected_duration: Optional[Seconds] = None,
        max_allowed_duration: Optional[Seconds] = None,
        remaining_runs: Optional[int] = None,
        start_at: Optional[Instant] = None,
        end_at: Optional[Instant] = None,
        payload: Payload = b"",
        fairness_key: str = "",
        weight: float = 0.0,
        priority: Optional[int] = None,
        paused_note: str = "",
    ) -> Schedule:
        """Creates a schedule whose runs are added to ``queue`` (created if new).

        Exactly one cadence: ``period`` (periodic: a run must start and end
        well within every period; the next may start ``cooldown`` after the
        last good end), ``cron`` (an expression read in ``time_zone``; each
        tick's run must end within ``max_duration``) or ``every`` (ticks at
        ``phase + k * every`` after the epoch, plus a ``jitter``; each run
        must end within ``max_duration``, default ``every``). Durations are
        seconds or timedeltas; times aware datetimes or Unix seconds.
        ``blackouts`` are ``("HH:MM", "HH:MM")`` pairs or :class:`Blackout`;
        ``overlap`` is "skip", "buffer_one" or "allow_all". Each run is a task
        with ``payload``, ``fairness_key`` (default: the id), ``weight`` and
        ``priority``. With ``paused_note`` it is created paused.
        ValueError for arguments that cannot make a spec; the server's
        refusals are :class:`InvalidArgument` naming the field (e.g.
        ``spec.cron.expression``), :class:`AlreadyExists` for an id taken.
        """
        options = dict(
            period=period,
            cooldown=cooldown,
            cron=cron,
            max_duration=max_duration,
            every=every,
            phase=phase,
            jitter=jitter,
            time_zone=time_zone,
            blackouts=blackouts,
            overlap=overlap,
            catchup_window=catchup_window,
            max_expected_duration=max_expected_duration,
            max_allowed_duration=max_allowed_duration,
            remaining_runs=remaining_runs,
            start_at=start_at,
            end_at=end_at,
            payload=payload,
            fairness_key=fairness_key,
            weight=weight,
            priority=priority,
        )
        return self._invoke(self._ops.create_schedule(id, queue, paused_note, options))

    def update_schedule(
        self,
        id: str,
        queue: str,
        *,
        period: Optional[Seconds] = None,
        cooldown: Optional[Seconds] = None,
        cron: Optional[str] = None,
        max_duration: Optional[Seconds] = None,
        every: Optional[Seconds] = None,
        phase: Optional[Seconds] = None,
        jitter: Optional[Seconds] = None,
        time_zone: str = "UTC",
        blackouts: Sequence[BlackoutLike] = (),
        overlap: str = "skip",
        catchup_window: Optional[Seconds] = None,
        max_expected_duration: Optional[Seconds] = None,
        max_allowed_duration: Optional[Seconds] = None,
        remaining_runs: Optional[int] = None,
        start_at: Optional[Instant] = None,
        end_at: Optional[Instant] = None,
        payload: Payload = b"",
        fairness_key: str = "",
        weight: float = 0.0,
        priority: Optional[int] = None,
    ) -> Schedule:
        """Replaces a schedule's spec and run template (the arguments of
        :meth:`create_schedule`); its statistics and pause are kept."""
        options = dict(
            period=period,
            cooldown=cooldown,
            cron=cron,
            max_duration=max_duration,
            every=every,
            phase=phase,
            jitter=jitter,
            time_zone=time_zone,
            blackouts=blackouts,
            overlap=overlap,
            catchup_window=catchup_window,
            max_expected_duration=max_expected_duration,
            max_allowed_duration=max_allowed_duration,
            remaining_runs=remaining_runs,
            start_at=start_at,
            end_at=end_at,
            payload=payload,
            fairness_key=fairness_key,
            weight=weight,
            priority=priority,
        )
        return self._invoke(self._ops.update_schedule(id, queue, options))

    def delete_schedule(self, id: str) -> None:
        """Deletes a schedule; runs already added stay in their queue."""
        self._invoke(self._ops.delete_schedule(id))

    def pause_schedule(self, id: str, note: str = "") -> Schedule:
        """Pauses a schedule (it adds no run) with a note shown by describe and list."""
        return self._invoke(self._ops.pause_schedule(id, True, note))

    def resume_schedule(self, id: str) -> Schedule:
        return self._invoke(self._ops.pause_schedule(id, False, ""))

    def trigger_schedule(self, id: str) -> Schedule:
        """Asks for a run now, whatever its cooldown, backoff or next tick
        say (the overlap policy and blackouts still hold)."""
        return self._invoke(self._ops.trigger_schedule(id))

    def describe_schedule(self, id: str) -> Schedule:
        """One schedule, with its health, runs in flight and ``next_ticks``."""
        return self._invoke(self._ops.describe_schedule(id))

    def list_schedules(self, health: Union[Health, str, None] = None, *, page_size: int = 0) -> Iterator[Schedule]:
        """Every schedule whose queue the caller may read, optionally only
        those of one ``health`` ("ok", "warning", "error"), page after page
        (``page_size`` per call, 0: the server's 100) as the iterator goes."""
        wanted = health_pb(health)
        return self._list_schedules(wanted, page_size)

    def _list_schedules(self, health: int, page_size: int) -> Iterator[Schedule]:
        token = ""
        while True:
            page = self._invoke(self._ops.list_schedules_page(health, page_size, token))
            for info in page.schedules:
                yield Schedule.from_pb(info)
            token = page.next_page_token
            if not token:
                return


class AsyncClient:
    """The asyncio twin of :class:`Client`: the same methods, as coroutines.

    Create it inside the event loop it is used on.
    """

    def __init__(self, address: Union[str, Connection] = "127.0.0.1:7070", **kwargs: Any) -> None:
        self.connection = _connection(address, kwargs)
        self._ops = _Ops(self.connection)
        self._metadata = self.connection.metadata()
        self._channel = self.connection.aio_channel()
        self._stubs = {
            "matching": _mg.MatchingStub(self._channel),
            "scheduler": _vg.SchedulerStub(self._channel),
            "schedules": _sg.SchedulesStub(self._channel),
        }

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _invoke(self, op: _Op, retry: Optional[RetryPolicy] = None) -> Any:
        policy = retry or self.connection.retry
        stub = self._stubs[op.service]
        timeout = op.timeout if op.timeout is not None else self.connection.timeout
        attempt, earlier_maybe = 0, False
        while True:
            attempt += 1
            try:
                response = await getattr(stub, op.method)(op.request, timeout=timeout, metadata=self._metadata)
                return op.convert(response)
            except grpc.RpcError as rpc_error:
                error = from_rpc_error(rpc_error, op.method)
                cause: BaseException = rpc_error
            if not policy.should_retry(error, op.idempotent, attempt):
                if isinstance(error, LeaseLost) and earlier_maybe:
                    # An earlier try whose outcome was unknown may have finished it.
                    error.maybe_applied = True
                raise error from cause
            earlier_maybe = earlier_maybe or error.maybe_applied
            await asyncio.sleep(policy.backoff(attempt))

    async def add(
        self,
        queue: str,
        payload: Payload = b"",
        *,
        fairness_key: str = "",
        weight: float = 0.0,
        priority: int = 0,
        dedup_id: str = "",
        delay: Optional[Seconds] = None,
        deadline: Optional[Instant] = None,
        cost: Optional[int] = None,
        size: Optional[int] = None,
    ) -> AddResult:
        spec = TaskSpec(payload, fairness_key, weight, priority, dedup_id, delay, deadline, cost, size)
        return await self._invoke(self._ops.add(queue, spec))

    async def add_many(
        self, queue: str, tasks: Iterable[Union[TaskSpec, Payload]]
    ) -> List[Union[AddResult, FairwayError]]:
        return await self._invoke(self._ops.add_many(queue, [_spec(t) for t in tasks]))

    async def poll(self, queue: str, *, wait: Optional[Seconds] = None, worker_id: str = "") -> Optional[Task]:
        return await self._invoke(self._ops.poll(queue, wait, worker_id))

    async def poll_many(
        self, queue: str, max_tasks: int, *, wait: Optional[Seconds] = None, worker_id: str = ""
    ) -> List[Task]:
        return await self._invoke(self._ops.poll_many(queue, max_tasks, wait, worker_id))

    async def poll_and_complete(
        self,
        queue: str,
        max_tasks: int,
        completed: Iterable[Completed],
        *,
        wait: Optional[Seconds] = None,
        worker_id: str = "",
    ) -> PollResult:
        return await self._invoke(self._ops.poll_and_complete(queue, max_tasks, completed, wait, worker_id))

    async def complete(self, task: TaskOrToken, result: Payload = b"") -> None:
        await self._invoke(self._ops.complete(task, result))

    async def fail(
        self,
        task: TaskOrToken,
        message: str = "",
        *,
        retryable: bool = True,
        retry_after: Optional[Seconds] = None,
    ) -> FailResult:
        return await self._invoke(self._ops.fail(task, message, retryable, retry_after))

    async def heartbeat(self, task: TaskOrToken) -> Any:
        return await self._invoke(self._ops.heartbeat(task))

    async def describe_queue(self, queue: str, *, top_keys: int = 0) -> QueueInfo:
        return await self._invoke(self._ops.describe_queue(queue, top_keys))

    async def create_queue(self, queue: str, partitions: int = 1, *, home: str = "") -> _m.CreateQueueResponse:
        return await self._invoke(self._ops.create_queue(queue, partitions, home))

    async def dead_letters(
        self,
        queue: str,
        *,
        limit: int = 0,
        key: Optional[str] = None,
        message_contains: str = "",
        failed_from: Optional[Instant] = None,
        failed_before: Optional[Instant] = None,
    ) -> List[_m.DeadLetter]:
        chosen = dead_letter_filter(key, message_contains, failed_from, failed_before)
        return await self._invoke(self._ops.dead_letters(queue, limit, chosen))

    async def redrive(
        self,
        queue: str,
        *,
        limit: int = 0,
        key: Optional[str] = None,
        message_contains: str = "",
        failed_from: Optional[Instant] = None,
        failed_before: Optional[Instant] = None,
    ) -> RedriveResult:
        chosen = dead_letter_filter(key, message_contains, failed_from, failed_before)
        return await self._invoke(self._ops.redrive(queue, limit, chosen))

    async def list_queues(self, prefix: str = "", *, limit: int = 1000) -> List[_m.QueueSummary]:
        queues: List[_m.QueueSummary] = []
        token = ""
        while len(queues) < limit:
            page = await self._invoke(self._ops.list_queues(prefix, token))
            queues.extend(page.queues)
            token = page.next_page_token
            if not token:
                break
        return queues[:limit]

    async def update_queue(
        self, queue: str, *, clear: Sequence[str] = (), expected_version: int = 0, **settings: Any
    ) -> _m.QueueSettings:
        return await self._invoke(self._ops.update_queue(queue, _queue_settings(settings), clear, expected_version))

    async def get_task(
        self, queue: str, task_id: int, *, partition: int = 0, include_payload: bool = False
    ) -> _m.GetTaskResponse:
        return await self._invoke(self._ops.get_task(queue, task_id, partition, include_payload))

    async def cancel_task(self, queue: str, task_id: int, *, partition: int = 0) -> _m.CancelTaskResponse:
        return await self._invoke(self._ops.cancel_task(queue, task_id, partition))

    async def purge_queue(self, queue: str, confirmation: str = "") -> _m.PurgeQueueResponse:
        return await self._invoke(self._ops.purge_queue(queue, confirmation))

    async def list_workers(self, queue: str = "") -> _m.ListWorkersResponse:
        return await self._invoke(self._ops.list_workers(queue))

    async def list_nodes(self) -> _m.ListNodesResponse:
        return await self._invoke(self._ops.list_nodes())

    async def pause_queue(self, queue: str, key: Optional[str] = None) -> _m.QueueSettings:
        return await self._invoke(self._ops.pause(queue, key, True))

    async def resume_queue(self, queue: str, key: Optional[str] = None) -> _m.QueueSettings:
        return await self._invoke(self._ops.pause(queue, key, False))

    async def record_origins(self, lister: str, origins: Iterable[ListedOrigin]) -> int:
        return await self._invoke(self._ops.record_origins(lister, list(origins)))

    async def finish_listing(self, lister: str) -> None:
        await self._invoke(self._ops.finish_listing(lister))

    async def request_visit(self, url: str, visit_type: str) -> VisitRequestResult:
        return await self._invoke(self._ops.request_visit(url, visit_type))

    async def visit_stats(self, url: str, visit_type: str) -> Optional[_v.VisitStats]:
        return await self._invoke(self._ops.visit_stats(url, visit_type))

    async def lister_metrics(self, lister: str) -> _v.GetListerMetricsResponse:
        return await self._invoke(self._ops.lister_metrics(lister))

    async def run_round(self, visit_type: str) -> _v.RunRoundResponse:
        return await self._invoke(self._ops.run_round(visit_type))

    async def create_schedule(
        self,
        id: str,
        queue: str,
        *,
        period: Optional[Seconds] = None,
        cooldown: Optional[Seconds] = None,
        cron: Optional[str] = None,
        max_duration: Optional[Seconds] = None,
        every: Optional[Seconds] = None,
        phase: Optional[Seconds] = None,
        jitter: Optional[Seconds] = None,
        time_zone: str = "UTC",
        blackouts: Sequence[BlackoutLike] = (),
        overlap: str = "skip",
        catchup_window: Optional[Seconds] = None,
        max_expected_duration: Optional[Seconds] = None,
        max_allowed_duration: Optional[Seconds] = None,
        remaining_runs: Optional[int] = None,
        start_at: Optional[Instant] = None,
        end_at: Optional[Instant] = None,
        payload: Payload = b"",
        fairness_key: str = "",
        weight: float = 0.0,
        priority: Optional[int] = None,
        paused_note: str = "",
    ) -> Schedule:
        options = dict(
            period=period,
            cooldown=cooldown,
            cron=cron,
            max_duration=max_duration,
            every=every,
            phase=phase,
            jitter=jitter,
            time_zone=time_zone,
            blackouts=blackouts,
            overlap=overlap,
            catchup_window=catchup_window,
            max_expected_duration=max_expected_duration,
            max_allowed_duration=max_allowed_duration,
            remaining_runs=remaining_runs,
            start_at=start_at,
            end_at=end_at,
            payload=payload,
            fairness_key=fairness_key,
            weight=weight,
            priority=priority,
        )
        return await self._invoke(self._ops.create_schedule(id, queue, paused_note, options))

    async def update_schedule(
        self,
        id: str,
        queue: str,
        *,
        period: Optional[Seconds] = None,
        cooldown: Optional[Seconds] = None,
        cron: Optional[str] = None,
        max_duration: Optional[Seconds] = None,
        every: Optional[Seconds] = None,
        phase: Optional[Seconds] = None,
        jitter: Optional[Seconds] = None,
        time_zone: str = "UTC",
        blackouts: Sequence[BlackoutLike] = (),
        overlap: str = "skip",
        catchup_window: Optional[Seconds] = None,
        max_expected_duration: Optional[Seconds] = None,
        max_allowed_duration: Optional[Seconds] = None,
        remaining_runs: Optional[int] = None,
        start_at: Optional[Instant] = None,
        end_at: Optional[Instant] = None,
        payload: Payload = b"",
        fairness_key: str = "",
        weight: float = 0.0,
        priority: Optional[int] = None,
    ) -> Schedule:
        options = dict(
            period=period,
            cooldown=cooldown,
            cron=cron,
            max_duration=max_duration,
            every=every,
            phase=phase,
            jitter=jitter,
            time_zone=time_zone,
            blackouts=blackouts,
            overlap=overlap,
            catchup_window=catchup_window,
            max_expected_duration=max_expected_duration,
            max_allowed_duration=max_allowed_duration,
            remaining_runs=remaining_runs,
            start_at=start_at,
            end_at=end_at,
            payload=payload,
            fairness_key=fairness_key,
            weight=weight,
            priority=priority,
        )
        return await self._invoke(self._ops.update_schedule(id, queue, options))

    async def delete_schedule(self, id: str) -> None:
        await self._invoke(self._ops.delete_schedule(id))

    async def pause_schedule(self, id: str, note: str = "") -> Schedule:
        return await self._invoke(self._ops.pause_schedule(id, True, note))

    async def resume_schedule(self, id: str) -> Schedule:
        return await self._invoke(self._ops.pause_schedule(id, False, ""))

    async def trigger_schedule(self, id: str) -> Schedule:
        return await self._invoke(self._ops.trigger_schedule(id))

    async def describe_schedule(self, id: str) -> Schedule:
        return await self._invoke(self._ops.describe_schedule(id))

    def list_schedules(
        self, health: Union[Health, str, None] = None, *, page_size: int = 0
    ) -> AsyncIterator[Schedule]:
        """An async iterator over every schedule (``async for s in client.list_schedules():``)."""
        wanted = health_pb(health)
        return self._list_schedules(wanted, page_size)

    async def _list_schedules(self, health: int, page_size: int) -> AsyncIterator[Schedule]:
        token = ""
        while True:
            page = await self._invoke(self._ops.list_schedules_page(health, page_size, token))
            for info in page.schedules:
                yield Schedule.from_pb(info)
            token = page.next_page_token
            if not token:
                return
