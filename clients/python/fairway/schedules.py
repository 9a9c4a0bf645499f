"""Recurring schedules (the ``Schedules`` service): what the client sends and returns.

A schedule adds a run task to a queue whenever it may run, and says when it
will be late. :meth:`Client.create_schedule` and the other schedule methods
build their requests with :func:`schedule_request` and return
:class:`Schedule` values.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

from ._proto.fairway.v1 import schedules_pb2 as _s
from .types import Instant, Payload, Seconds, datetime_from, duration_pb, instant_pb, payload_bytes


class Health(str, enum.Enum):
    """How a schedule is doing against its constraint (compares equal to its string)."""

    #: Everything is fine.
    OK = "ok"
    #: Something went wrong (the last run failed, a run is likely to end
    #: late); the constraint still holds.
    WARNING = "warning"
    #: The constraint is broken: the data may be stale.
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


_HEALTH_TO_PB = {Health.OK: _s.HEALTH_OK, Health.WARNING: _s.HEALTH_WARNING, Health.ERROR: _s.HEALTH_ERROR}
_HEALTH_FROM_PB = {v: k for k, v in _HEALTH_TO_PB.items()}

_OVERLAPS = {
    "skip": _s.OVERLAP_SKIP,
    "buffer_one": _s.OVERLAP_BUFFER_ONE,
    "allow_all": _s.OVERLAP_ALLOW_ALL,
}
_OVERLAP_NAMES = {v: k for k, v in _OVERLAPS.items()}


def health_pb(health: Union[Health, str, None]) -> int:
    """The ``Health`` number of ``health`` (None: any health)."""
    if health is None:
        return _s.HEALTH_UNSPECIFIED
    try:
        return _HEALTH_TO_PB[Health(health)]
    except ValueError:
        raise ValueError(f"health {health!r}: expected 'ok', 'warning', 'error' or None") from None


@dataclass(frozen=True)
class Blackout:
    """A daily window, in the schedule's time zone, in which no run starts.

    ``start`` and ``end`` are "HH:MM" or "HH:MM:SS"; an end before the start
    spans midnight. A run still running when one begins is failed.
    """

    start: str
    end: str


BlackoutLike = Union[Blackout, Tuple[str, str]]


@dataclass(frozen=True)
class ScheduleRun:
    """A run added and not yet ended."""

    #: The tick it is the run of.
    nominal: Optional[_dt.datetime]
    task_id: int
    added_at: Optional[_dt.datetime]
    #: None while it waits for a worker.
    started_at: Optional[_dt.datetime]
    attempt: int
    should_start_by: Optional[_dt.datetime]


@dataclass(frozen=True)
class ScheduleCounts:
    """What a schedule has done since it was created."""

    fired: int = 0
    succeeded: int = 0
    failed: int = 0
    started_late: int = 0
    missed_catchup_window: int = 0
    overlap_skipped: int = 0
    over_expected_duration: int = 0


@dataclass(frozen=True)
class Schedule:
    """A schedule as the server describes it.

    Times are aware UTC datetimes, None when the server has none (a
    schedule that never ended a run well has no ``last_good_end``).
    ``raw`` is the full ``fairway.v1.ScheduleInfo`` (spec, run template...).
    """

    id: str
    #: The queue its runs go to.
    queue: str
    health: Health
    #: Why, in words (e.g. "last run failed").
    health_reason: str
    #: When it turns (or turned) ERROR if no run ends well before; None when
    #: it will run nothing more.
    error_at: Optional[_dt.datetime]
    can_start_by: Optional[_dt.datetime]
    should_start_by: Optional[_dt.datetime]
    last_good_end: Optional[_dt.datetime]
    paused: bool
    paused_note: str
    #: Runs that failed since the last one that ended well.
    consecutive_failures: int
    #: Runs added and not yet ended.
    runs: List[ScheduleRun]
    counts: ScheduleCounts
    created_at: Optional[_dt.datetime] = None
    last_good_start: Optional[_dt.datetime] = None
    last_start: Optional[_dt.datetime] = None
    last_end: Optional[_dt.datetime] = None
    average_good_duration: Optional[_dt.timedelta] = None
    created_by: str = ""
    #: The next ticks of a cron or interval cadence (at most 5); only
    #: :meth:`Client.describe_schedule` fills it.
    next_ticks: List[_dt.datetime] = field(default_factory=list)
    raw: Any = field(repr=False, compare=False, default=None)

    @property
    def overlap(self) -> str:
        """The overlap policy: "skip", "buffer_one" or "allow_all"."""
        return _OVERLAP_NAMES.get(self.raw.spec.overlap, "skip") if self.raw is not None else "skip"

    @classmethod
    def from_pb(cls, info: _s.ScheduleInfo, next_ticks: Iterable[Any] = ()) -> "Schedule":
        def at(name: str) -> Optional[_dt.datetime]:
            return datetime_from(getattr(info, name)) if info.HasField(name) else None

        def when(message: Any, name: str) -> Optional[_dt.datetime]:
            return datetime_from(getattr(message, name)) if message.HasField(name) else None

        counts = info.counts
        average = None
        if info.HasField("average_good_duration"):
            d = info.average_good_duration
            average = _dt.timedelta(seconds=d.seconds, microseconds=d.nanos // 1000)
        return cls(
            id=info.id,
            queue=info.template.queue,
            # HEALTH_UNSPECIFIED (or a health newer than this client) is
            # shown as a warning; `raw.health` keeps the number.
            health=_HEALTH_FROM_PB.get(info.health, Health.WARNING),
            health_reason=info.health_reason,
            error_at=at("error_at"),
            can_start_by=at("can_start_by"),
            should_start_by=at("should_start_by"),
            last_good_end=at("last_good_end"),
            paused=info.paused,
            paused_note=info.paused_note,
            consecutive_failures=info.consecutive_failures,
            runs=[
                ScheduleRun(
                    nominal=when(r, "nominal"),
                    task_id=r.task_id,
                    added_at=when(r, "added_at"),
                    started_at=when(r, "started_at"),
                    attempt=r.attempt,
                    should_start_by=when(r, "should_start_by"),
                )
                for r in info.runs
            ],
            counts=ScheduleCounts(
                fired=counts.fired,
                succeeded=counts.succeeded,
                failed=counts.failed,
                started_late=counts.started_late,
                missed_catchup_window=counts.missed_catchup_window,
                overlap_skipped=counts.overlap_skipped,
                over_expected_duration=counts.over_expected_duration,
            ),
            created_at=at("created_at"),
            last_good_start=at("last_good_start"),
            last_start=at("last_start"),
            last_end=at("last_end"),
            average_good_duration=average,
            created_by=info.created_by,
            next_ticks=[datetime_from(t) for t in next_ticks],
            raw=info,
        )


def _given(**arguments: Any) -> List[str]:
    return [name for name, value in arguments.items() if value is not None]


def _blackout_pb(window: BlackoutLike) -> _s.Blackout:
    if isinstance(window, Blackout):
        return _s.Blackout(start=window.start, end=window.end)
    try:
        start, end = window
    except (TypeError, ValueError):
        raise ValueError(f"blackouts: {window!r} is neither a Blackout nor a (start, end) pair") from None
    return _s.Blackout(start=start, end=end)


def schedule_spec(
    *,
    period: Optional[Seconds],
    cooldown: Optional[Seconds],
    cron: Optional[str],
    max_duration: Optional[Seconds],
    every: Optional[Seconds],
    phase: Optional[Seconds],
    jitter: Optional[Seconds],
    time_zone: str,
    blackouts: Sequence[BlackoutLike],
    overlap: str,
    catchup_window: Optional[Seconds],
    max_expected_duration: Optional[Seconds],
    max_allowed_duration: Optional[Seconds],
    remaining_runs: Optional[int],
    start_at: Optional[Instant],
    end_at: Optional[Instant],
) -> _s.ScheduleSpec:
    """The ``ScheduleSpec`` of the schedule methods' arguments.

    Exactly one cadence: ``period`` (periodic, with ``cooldown``), ``cron``
    (with ``max_duration``) or ``every`` (interval, with ``phase``,
    ``jitter`` and ``max_duration``). The server checks the values (bounds,
    the cron expression, the time zone) and names the field it refuses.
    """
    cadences = _given(period=period, cron=cron, every=every)
    if len(cadences) != 1:
        got = ", ".join(cadences) if cadences else "none"
        raise ValueError(f"give exactly one cadence: period, cron or every (got {got})")
    (cadence,) = cadences
    # Arguments that belong to another cadence would be dropped without a word.
    foreign = {
        "period": _given(max_duration=max_duration, phase=phase, jitter=jitter),
        "cron": _given(cooldown=cooldown, phase=phase, jitter=jitter),
        "every": _given(cooldown=cooldown),
    }[cadence]
    if foreign:
        raise ValueError(
            f"{', '.join(foreign)} cannot go with {cadence}: cooldown goes with period, max_duration with "
            "cron or every, phase and jitter with every"
        )
    if overlap not in _OVERLAPS:
        raise ValueError(f"overlap {overlap!r}: expected 'skip', 'buffer_one' or 'allow_all'")
    if remaining_runs is not None and remaining_runs < 1:
        raise ValueError(f"remaining_runs is {remaining_runs}; it must be at least 1 (None: no limit)")
    spec = _s.ScheduleSpec(
        time_zone=time_zone,
        blackouts=[_blackout_pb(w) for w in blackouts],
        overlap=_OVERLAPS[overlap],
        remaining_runs=remaining_runs or 0,
    )
    if cadence == "period":
        spec.periodic.SetInParent()
        _set(spec.periodic, "scheduling_period", duration_pb(period))
        _set(spec.periodic, "cooldown", duration_pb(cooldown))
    elif cadence == "cron":
        spec.cron.expression = cron or ""
        _set(spec.cron, "max_schedule_duration", duration_pb(max_duration))
    else:
        spec.interval.SetInParent()
        _set(spec.interval, "every", duration_pb(every))
        _set(spec.interval, "phase", duration_pb(phase))
        _set(spec.interval, "jitter", duration_pb(jitter))
        _set(spec.interval, "max_schedule_duration", duration_pb(max_duration))
    _set(spec, "catchup_window", duration_pb(catchup_window))
    _set(spec, "max_expected_duration", duration_pb(max_expected_duration))
    _set(spec, "max_allowed_duration", duration_pb(max_allowed_duration))
    _set(spec, "start_at", instant_pb(start_at, "start_at"))
    _set(spec, "end_at", instant_pb(end_at, "end_at"))
    return spec


def _set(message: Any, name: str, value: Any) -> None:
    if value is not None:
        getattr(message, name).CopyFrom(value)


def run_template(
    queue: str, payload: Payload, fairness_key: str, weight: float, priority: Optional[int]
) -> _s.RunTemplate:
    return _s.RunTemplate(
        queue=queue,
        payload=payload_bytes(payload),
        fairness_key=fairness_key,
        fairness_weight=weight,
        priority=priority or 0,
    )
