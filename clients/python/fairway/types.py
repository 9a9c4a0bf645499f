"""Plain values the client takes and returns."""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional, Union

from ._proto.fairway.v1 import matching_pb2 as _m
from ._proto.fairway.v1 import visits_pb2 as _v

if TYPE_CHECKING:
    from .errors import FairwayError

Seconds = Union[int, float, _dt.timedelta]
Payload = Union[bytes, bytearray, memoryview, str]
#: A point in time: an aware datetime, or seconds since the Unix epoch.
Instant = Union[_dt.datetime, int, float]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def seconds_of(value: Optional[Seconds]) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


def duration_pb(value: Optional[Seconds]) -> Any:
    from google.protobuf import duration_pb2

    seconds = seconds_of(value)
    if seconds is None:
        return None
    if seconds < 0:
        raise ValueError(f"a duration must not be negative, got {seconds} s")
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=int(round((seconds - whole) * 1e9)))


def datetime_of(timestamp: Any) -> Optional[_dt.datetime]:
    """A protobuf Timestamp as an aware UTC datetime (None when unset)."""
    if timestamp is None or (timestamp.seconds == 0 and timestamp.nanos == 0):
        return None
    return _dt.datetime.fromtimestamp(timestamp.seconds + timestamp.nanos / 1e9, tz=_dt.timezone.utc)


def timestamp_pb(value: Optional[_dt.datetime]) -> Any:
    from google.protobuf import timestamp_pb2

    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    epoch = value.timestamp()
    whole = int(epoch // 1)
    return timestamp_pb2.Timestamp(seconds=whole, nanos=int(round((epoch - whole) * 1e9)))


def instant_pb(value: Optional[Instant], name: str) -> Any:
    """An aware datetime or Unix seconds as a protobuf Timestamp (None when unset).

    A naive datetime is refused: whose local time it is cannot be known.
    ``name`` is the argument's name, for the error.
    """
    from google.protobuf import timestamp_pb2

    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{name}: the datetime {value.isoformat()} is naive (no time zone); give an aware datetime "
                "(e.g. with tzinfo=datetime.timezone.utc) or seconds since the Unix epoch"
            )
        # Exact to the microsecond, with no float in between.
        delta = value - _EPOCH
        return timestamp_pb2.Timestamp(seconds=delta.days * 86400 + delta.seconds, nanos=delta.microseconds * 1000)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected an aware datetime or Unix seconds, got {type(value).__name__}")
    if isinstance(value, int):
        return timestamp_pb2.Timestamp(seconds=value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name}: {value} is not a time")
    # Rounded to the microsecond, as a datetime is: a float of today's Unix
    # seconds holds no finer, and 1.123 stored as 1.12299999... must still
    # be 123 ms (the server keeps milliseconds, cut down).
    whole = math.floor(value)
    micros = int(round((value - whole) * 1e6))
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return timestamp_pb2.Timestamp(seconds=int(whole), nanos=micros * 1000)


def datetime_from(timestamp: Any) -> _dt.datetime:
    """A protobuf Timestamp that is set, as an aware UTC datetime."""
    return _EPOCH + _dt.timedelta(seconds=timestamp.seconds, microseconds=timestamp.nanos // 1000)


def payload_bytes(payload: Payload) -> bytes:
    if isinstance(payload, str):
        return payload.encode("utf-8")
    return bytes(payload)


@dataclass(frozen=True)
class TaskSpec:
    """One task for :meth:`Client.add_many`."""

    payload: Payload = b""
    fairness_key: str = ""
    weight: float = 0.0
    priority: int = 0
    dedup_id: str = ""
    delay: Optional[Seconds] = None
    #: When the task should start at the latest: an aware datetime or Unix
    #: seconds. A queue with ordering "deadline" dispatches earliest first;
    #: other queues keep it and ignore it.
    deadline: Optional[Instant] = None
    #: The work the task stands for, 1 to 1000 (None: 1): in a queue in
    #: fair order its key's share counts it as that many tasks of cost 1.
    cost: Optional[int] = None
    #: The size of the work in the queue's units (records, bytes), 1 to
    #: 10**15, instead of a cost: the queue's cost_curve makes it into one.
    size: Optional[int] = None

    def __post_init__(self) -> None:
        # A naive datetime is refused when the spec is made, not when it is sent.
        instant_pb(self.deadline, "deadline")

    def to_pb(self) -> _m.TaskSpec:
        spec = _m.TaskSpec(
            fairness_key=self.fairness_key,
            fairness_weight=self.weight,
            priority=self.priority,
            payload=payload_bytes(self.payload),
            dedup_id=self.dedup_id,
            cost=self.cost or 0,
            size=self.size or 0,
        )
        delay = duration_pb(self.delay)
        if delay is not None:
            spec.delay.CopyFrom(delay)
        deadline = instant_pb(self.deadline, "deadline")
        if deadline is not None:
            spec.deadline.CopyFrom(deadline)
        return spec


@dataclass(frozen=True)
class PollResult:
    """What :meth:`Client.poll_and_complete` got: the tasks leased, and how
    each completion sent with the poll ended, in the order sent (``None``:
    completed; else the error :meth:`Client.complete` would have raised)."""

    tasks: List[Task]
    completions: List[Optional[FairwayError]]


@dataclass(frozen=True)
class AddResult:
    task_id: int
    #: True when the task went straight to a waiting worker.
    sync_matched: bool = False
    #: True when nothing was added: ``task_id`` holds the dedup id already.
    duplicate: bool = False
    #: The partition of the queue the task is in: ids are numbered per
    #: partition, so ``(partition, task_id)`` names a task within its queue.
    partition: int = 0


@dataclass(frozen=True)
class Task:
    """A delivered task: its lease is ``lease_token`` until ``lease_deadline``."""

    task_id: int
    lease_token: str
    fairness_key: str
    priority: int
    payload: bytes
    attempt: int
    lease_deadline: Optional[_dt.datetime]
    partition: int
    #: The deadline the producer gave the task (to the millisecond), or None.
    deadline: Optional[_dt.datetime] = None

    @classmethod
    def from_pb(cls, task: _m.Task) -> "Task":
        return cls(
            task_id=task.task_id,
            lease_token=task.lease_token,
            fairness_key=task.fairness_key,
            priority=task.priority,
            payload=bytes(task.payload),
            attempt=task.attempt,
            lease_deadline=datetime_of(task.lease_deadline) if task.HasField("lease_deadline") else None,
            partition=task.partition,
            deadline=datetime_from(task.deadline) if task.HasField("deadline") else None,
        )


@dataclass(frozen=True)
class FailResult:
    will_retry: bool
    next_attempt_at: Optional[_dt.datetime]


@dataclass(frozen=True)
class RedriveResult:
    redriven: int
    duplicates: int
    #: Letters read and left in place: the filter did not choose them.
    passed_over: int = 0
    #: Some partition stopped before its last letter: call again for more.
    more: bool = False


@dataclass(frozen=True)
class QueueInfo:
    """DescribeQueue's answer, with totals over the partitions.

    ``raw`` is the full :class:`DescribeQueueResponse` (levels, top keys...).
    """

    name: str
    partitions: int
    waiting_pollers: int
    home: str
    #: Tasks written and not yet dispatched, over every priority level.
    backlog: int
    #: Tasks out with workers.
    leased: int
    #: Delayed tasks and retries waiting out their backoff.
    delayed: int
    #: Since each partition's owner took it: leases ended by CompleteTask,
    #: by FailTask, and leases that ran out.
    completed: int
    failed: int
    expired: int
    added: int
    dispatched: int
    #: When the oldest task waiting in memory, over every partition and
    #: priority, was first added (an aware UTC datetime; None with none
    #: waiting). It is the oldest waiting task when ``oldest_exact``, else
    #: a bound: a task not read into memory yet may be older.
    oldest_waiting_since: Optional[_dt.datetime] = None
    oldest_exact: bool = True
    #: Tasks that have waited past the queue's ``max_wait`` and still wait
    #: (0 without one); they go to the front of their priority, oldest first.
    tasks_over_max_wait: int = 0
    #: Tasks leased on the node answering and held for the next poll
    #: (``matcher.quiet_hold``): counted in ``leased``, with no worker yet.
    held_for_polls: int = 0
    #: The whole queue is paused (``Client.pause_queue``): nothing is handed out.
    paused: bool = False
    #: Fairness keys paused one by one.
    paused_keys: List[str] = field(default_factory=list)
    raw: Any = field(repr=False, compare=False, default=None)

    @classmethod
    def from_pb(cls, response: _m.DescribeQueueResponse) -> "QueueInfo":
        parts = list(response.partitions)
        waiting = [datetime_from(s.oldest_added_at) for p in parts for s in p.subqueues if s.HasField("oldest_added_at")]
        return cls(
            name=response.queue,
            partitions=len(parts),
            waiting_pollers=response.waiting_pollers,
            home=response.home,
            backlog=sum(s.backlog for p in parts for s in p.subqueues),
            leased=sum(p.leased for p in parts),
            delayed=sum(p.delayed for p in parts),
            completed=sum(p.completed for p in parts),
            failed=sum(p.failed for p in parts),
            expired=sum(p.expired for p in parts),
            added=sum(p.added for p in parts),
            dispatched=sum(p.dispatched for p in parts),
            oldest_waiting_since=min(waiting, default=None),
            oldest_exact=all(s.reader_at_end for p in parts for s in p.subqueues),
            tasks_over_max_wait=sum(p.tasks_over_max_wait for p in parts),
            held_for_polls=response.held_for_polls,
            paused=response.settings.paused,
            paused_keys=list(response.settings.paused_keys),
            raw=response,
        )


@dataclass(frozen=True)
class ListedOrigin:
    """An origin a lister found, for :meth:`Client.record_origins`."""

    url: str
    visit_type: str
    last_update: Optional[_dt.datetime] = None
    is_fork: bool = False
    #: Empty, or a JSON object (a dict is serialised for you).
    extra_loader_arguments: Union[str, dict, None] = None

    def to_pb(self) -> _v.ListedOrigin:
        extra = self.extra_loader_arguments
        if isinstance(extra, dict):
            extra = json.dumps(extra)
        origin = _v.ListedOrigin(
            url=self.url, visit_type=self.visit_type, is_fork=self.is_fork, extra_loader_arguments=extra or ""
        )
        if self.last_update is not None:
            origin.last_update.CopyFrom(timestamp_pb(self.last_update))
        return origin


@dataclass(frozen=True)
class VisitRequestResult:
    task_id: int
    duplicate: bool


_STATUSES = {
    "eventful": _v.VISIT_STATUS_EVENTFUL,
    "uneventful": _v.VISIT_STATUS_UNEVENTFUL,
    "failed": _v.VISIT_STATUS_FAILED,
    "not_found": _v.VISIT_STATUS_NOT_FOUND,
}


@dataclass(frozen=True)
class VisitOutcome:
    """How a visit of an origin ended, for a task of a ``visits.*`` queue.

    Return it from a worker function (or pass :meth:`encode` to
    :meth:`Client.complete`). ``status`` is one of ``"eventful"``,
    ``"uneventful"``, ``"failed"``, ``"not_found"``; ``origin_url`` defaults to
    the ``url`` of the task's JSON payload; ``visit_date`` unset means the
    server's time of the completion. ``newest_change``, the date of the
    newest change the snapshot holds (its latest commit's, say), teaches the
    scheduler the change rate of an origin whose lister gives no dates.
    """

    status: str
    snapshot: bytes = b""
    origin_url: Optional[str] = None
    visit_date: Optional[_dt.datetime] = None
    newest_change: Optional[_dt.datetime] = None

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ValueError(f"status {self.status!r}: expected eventful, uneventful, failed or not_found")

    def to_pb(self, payload: bytes = b"") -> _v.VisitOutcome:
        url = self.origin_url
        if not url:
            try:
                url = json.loads(payload)["url"]
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(
                    "VisitOutcome has no origin_url, and the payload is not a JSON object with a \"url\""
                ) from error
        outcome = _v.VisitOutcome(status=_STATUSES[self.status], snapshot=bytes(self.snapshot), origin_url=url)
        if self.visit_date is not None:
            outcome.visit_date.CopyFrom(timestamp_pb(self.visit_date))
        if self.newest_change is not None:
            outcome.newest_change.CopyFrom(timestamp_pb(self.newest_change))
        return outcome

    def encode(self, payload: bytes = b"") -> bytes:
        """The bytes of ``fairway.v1.VisitOutcome`` for CompleteTask's result."""
        return self.to_pb(payload).SerializeToString()

    @classmethod
    def decode(cls, data: bytes) -> "VisitOutcome":
        outcome = _v.VisitOutcome.FromString(data)
        names = {v: k for k, v in _STATUSES.items()}
        return cls(
            status=names[outcome.status],
            snapshot=bytes(outcome.snapshot),
            origin_url=outcome.origin_url,
            visit_date=datetime_of(outcome.visit_date) if outcome.HasField("visit_date") else None,
            newest_change=datetime_of(outcome.newest_change) if outcome.HasField("newest_change") else None,
        )
