from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
HEALTH_ERROR: Health
HEALTH_OK: Health
HEALTH_UNSPECIFIED: Health
HEALTH_WARNING: Health
OVERLAP_ALLOW_ALL: Overlap
OVERLAP_BUFFER_ONE: Overlap
OVERLAP_SKIP: Overlap
OVERLAP_UNSPECIFIED: Overlap

class Blackout(_message.Message):
    __slots__ = ["end", "start"]
    END_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    end: str
    start: str
    def __init__(self, start: _Optional[str] = ..., end: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ["id", "paused_note", "spec", "template"]
    ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_NOTE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    paused_note: str
    spec: ScheduleSpec
    template: RunTemplate
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., template: _Optional[_Union[RunTemplate, _Mapping]] = ..., paused_note: _Optional[str] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: ScheduleInfo
    def __init__(self, schedule: _Optional[_Union[ScheduleInfo, _Mapping]] = ...) -> None: ...

class CronCadence(_message.Message):
    __slots__ = ["expression", "max_schedule_duration"]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_SCHEDULE_DURATION_FIELD_NUMBER: _ClassVar[int]
    expression: str
    max_schedule_duration: _duration_pb2.Duration
    def __init__(self, expression: _Optional[str] = ..., max_schedule_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DescribeScheduleRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DescribeScheduleResponse(_message.Message):
    __slots__ = ["next_ticks", "schedule"]
    NEXT_TICKS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    next_ticks: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    schedule: ScheduleInfo
    def __init__(self, schedule: _Optional[_Union[ScheduleInfo, _Mapping]] = ..., next_ticks: _Optional[_Iterable[_Union[_timestamp_pb2.Timestamp, _Mapping]]] = ...) -> None: ...

class IntervalCadence(_message.Message):
    __slots__ = ["every", "jitter", "max_schedule_duration", "phase"]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    MAX_SCHEDULE_DURATION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    every: _duration_pb2.Duration
    jitter: _duration_pb2.Duration
    max_schedule_duration: _duration_pb2.Duration
    phase: _duration_pb2.Duration
    def __init__(self, every: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., phase: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_schedule_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ["health", "page_size", "page_token"]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    health: Health
    page_size: int
    page_token: str
    def __init__(self, health: _Optional[_Union[Health, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ["next_page_token", "schedules"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleInfo]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ["id", "note", "paused"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    id: str
    note: str
    paused: bool
    def __init__(self, id: _Optional[str] = ..., paused: bool = ..., note: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: ScheduleInfo
    def __init__(self, schedule: _Optional[_Union[ScheduleInfo, _Mapping]] = ...) -> None: ...

class PeriodicCadence(_message.Message):
    __slots__ = ["cooldown", "scheduling_period"]
    COOLDOWN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_PERIOD_FIELD_NUMBER: _ClassVar[int]
    cooldown: _duration_pb2.Duration
    scheduling_period: _duration_pb2.Duration
    def __init__(self, scheduling_period: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., cooldown: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RunTemplate(_message.Message):
    __slots__ = ["fairness_key", "fairness_weight", "payload", "priority", "queue"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    fairness_weight: float
    payload: bytes
    priority: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[float] = ..., priority: _Optional[int] = ...) -> None: ...

class ScheduleCounts(_message.Message):
    __slots__ = ["failed", "fired", "missed_catchup_window", "over_expected_duration", "overlap_skipped", "started_late", "succeeded"]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    MISSED_CATCHUP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    OVER_EXPECTED_DURATION_FIELD_NUMBER: _ClassVar[int]
    STARTED_LATE_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    failed: int
    fired: int
    missed_catchup_window: int
    over_expected_duration: int
    overlap_skipped: int
    started_late: int
    succeeded: int
    def __init__(self, fired: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., started_late: _Optional[int] = ..., missed_catchup_window: _Optional[int] = ..., overlap_skipped: _Optional[int] = ..., over_expected_duration: _Optional[int] = ...) -> None: ...

class ScheduleInfo(_message.Message):
    __slots__ = ["average_good_duration", "can_start_by", "consecutive_failures", "counts", "created_at", "created_by", "error_at", "health", "health_reason", "id", "last_end", "last_good_end", "last_good_start", "last_start", "out_of_runs", "paused", "paused_note", "runs", "should_start_by", "spec", "template"]
    AVERAGE_GOOD_DURATION_FIELD_NUMBER: _ClassVar[int]
    CAN_START_BY_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ERROR_AT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASON_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_END_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_END_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_START_FIELD_NUMBER: _ClassVar[int]
    LAST_START_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_RUNS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_NOTE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SHOULD_START_BY_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    average_good_duration: _duration_pb2.Duration
    can_start_by: _timestamp_pb2.Timestamp
    consecutive_failures: int
    counts: ScheduleCounts
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    error_at: _timestamp_pb2.Timestamp
    health: Health
    health_reason: str
    id: str
    last_end: _timestamp_pb2.Timestamp
    last_good_end: _timestamp_pb2.Timestamp
    last_good_start: _timestamp_pb2.Timestamp
    last_start: _timestamp_pb2.Timestamp
    out_of_runs: bool
    paused: bool
    paused_note: str
    runs: _containers.RepeatedCompositeFieldContainer[ScheduleRun]
    should_start_by: _timestamp_pb2.Timestamp
    spec: ScheduleSpec
    template: RunTemplate
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., template: _Optional[_Union[RunTemplate, _Mapping]] = ..., paused: bool = ..., paused_note: _Optional[str] = ..., health: _Optional[_Union[Health, str]] = ..., health_reason: _Optional[str] = ..., error_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., can_start_by: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., should_start_by: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_good_start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_good_end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., consecutive_failures: _Optional[int] = ..., average_good_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., runs: _Optional[_Iterable[_Union[ScheduleRun, _Mapping]]] = ..., counts: _Optional[_Union[ScheduleCounts, _Mapping]] = ..., created_by: _Optional[str] = ..., out_of_runs: bool = ...) -> None: ...

class ScheduleRun(_message.Message):
    __slots__ = ["added_at", "attempt", "nominal", "should_start_by", "started_at", "task_id"]
    ADDED_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_FIELD_NUMBER: _ClassVar[int]
    SHOULD_START_BY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    added_at: _timestamp_pb2.Timestamp
    attempt: int
    nominal: _timestamp_pb2.Timestamp
    should_start_by: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    task_id: int
    def __init__(self, nominal: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., task_id: _Optional[int] = ..., added_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., should_start_by: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ["blackouts", "catchup_window", "cron", "end_at", "interval", "max_allowed_duration", "max_expected_duration", "overlap", "periodic", "remaining_runs", "start_at", "time_zone"]
    BLACKOUTS_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    END_AT_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAX_ALLOWED_DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_EXPECTED_DURATION_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    PERIODIC_FIELD_NUMBER: _ClassVar[int]
    REMAINING_RUNS_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    blackouts: _containers.RepeatedCompositeFieldContainer[Blackout]
    catchup_window: _duration_pb2.Duration
    cron: CronCadence
    end_at: _timestamp_pb2.Timestamp
    interval: IntervalCadence
    max_allowed_duration: _duration_pb2.Duration
    max_expected_duration: _duration_pb2.Duration
    overlap: Overlap
    periodic: PeriodicCadence
    remaining_runs: int
    start_at: _timestamp_pb2.Timestamp
    time_zone: str
    def __init__(self, periodic: _Optional[_Union[PeriodicCadence, _Mapping]] = ..., cron: _Optional[_Union[CronCadence, _Mapping]] = ..., interval: _Optional[_Union[IntervalCadence, _Mapping]] = ..., time_zone: _Optional[str] = ..., blackouts: _Optional[_Iterable[_Union[Blackout, _Mapping]]] = ..., start_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., remaining_runs: _Optional[int] = ..., catchup_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., overlap: _Optional[_Union[Overlap, str]] = ..., max_expected_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_allowed_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: ScheduleInfo
    def __init__(self, schedule: _Optional[_Union[ScheduleInfo, _Mapping]] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ["id", "spec", "template"]
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: ScheduleSpec
    template: RunTemplate
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., template: _Optional[_Union[RunTemplate, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: ScheduleInfo
    def __init__(self, schedule: _Optional[_Union[ScheduleInfo, _Mapping]] = ...) -> None: ...

class Overlap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Health(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
