from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
VISIT_STATUS_EVENTFUL: VisitStatus
VISIT_STATUS_FAILED: VisitStatus
VISIT_STATUS_NOT_FOUND: VisitStatus
VISIT_STATUS_UNEVENTFUL: VisitStatus
VISIT_STATUS_UNSPECIFIED: VisitStatus

class FinishListingRequest(_message.Message):
    __slots__ = ["lister"]
    LISTER_FIELD_NUMBER: _ClassVar[int]
    lister: str
    def __init__(self, lister: _Optional[str] = ...) -> None: ...

class FinishListingResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetListerMetricsRequest(_message.Message):
    __slots__ = ["lister"]
    LISTER_FIELD_NUMBER: _ClassVar[int]
    lister: str
    def __init__(self, lister: _Optional[str] = ...) -> None: ...

class GetListerMetricsResponse(_message.Message):
    __slots__ = ["listing_finished", "metrics"]
    LISTING_FINISHED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    listing_finished: _timestamp_pb2.Timestamp
    metrics: _containers.RepeatedCompositeFieldContainer[ListerMetrics]
    def __init__(self, metrics: _Optional[_Iterable[_Union[ListerMetrics, _Mapping]]] = ..., listing_finished: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetVisitStatsRequest(_message.Message):
    __slots__ = ["url", "visit_type"]
    URL_FIELD_NUMBER: _ClassVar[int]
    VISIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    url: str
    visit_type: str
    def __init__(self, url: _Optional[str] = ..., visit_type: _Optional[str] = ...) -> None: ...

class GetVisitStatsResponse(_message.Message):
    __slots__ = ["stats"]
    STATS_FIELD_NUMBER: _ClassVar[int]
    stats: VisitStats
    def __init__(self, stats: _Optional[_Union[VisitStats, _Mapping]] = ...) -> None: ...

class ListedOrigin(_message.Message):
    __slots__ = ["extra_loader_arguments", "is_fork", "last_update", "url", "visit_type"]
    EXTRA_LOADER_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IS_FORK_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VISIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    extra_loader_arguments: str
    is_fork: bool
    last_update: _timestamp_pb2.Timestamp
    url: str
    visit_type: str
    def __init__(self, url: _Optional[str] = ..., visit_type: _Optional[str] = ..., last_update: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., is_fork: bool = ..., extra_loader_arguments: _Optional[str] = ...) -> None: ...

class ListerMetrics(_message.Message):
    __slots__ = ["enabled", "estimated_pending_updates", "known", "mean_change_rate_per_day", "never_visited", "pending_changes", "pending_lag_seconds", "rated_origins", "visit_type"]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_PENDING_UPDATES_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    MEAN_CHANGE_RATE_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    NEVER_VISITED_FIELD_NUMBER: _ClassVar[int]
    PENDING_CHANGES_FIELD_NUMBER: _ClassVar[int]
    PENDING_LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RATED_ORIGINS_FIELD_NUMBER: _ClassVar[int]
    VISIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    enabled: int
    estimated_pending_updates: float
    known: int
    mean_change_rate_per_day: float
    never_visited: int
    pending_changes: int
    pending_lag_seconds: int
    rated_origins: int
    visit_type: str
    def __init__(self, visit_type: _Optional[str] = ..., known: _Optional[int] = ..., enabled: _Optional[int] = ..., never_visited: _Optional[int] = ..., pending_changes: _Optional[int] = ..., pending_lag_seconds: _Optional[int] = ..., estimated_pending_updates: _Optional[float] = ..., mean_change_rate_per_day: _Optional[float] = ..., rated_origins: _Optional[int] = ...) -> None: ...

class RecordOriginsRequest(_message.Message):
    __slots__ = ["lister", "origins"]
    LISTER_FIELD_NUMBER: _ClassVar[int]
    ORIGINS_FIELD_NUMBER: _ClassVar[int]
    lister: str
    origins: _containers.RepeatedCompositeFieldContainer[ListedOrigin]
    def __init__(self, lister: _Optional[str] = ..., origins: _Optional[_Iterable[_Union[ListedOrigin, _Mapping]]] = ...) -> None: ...

class RecordOriginsResponse(_message.Message):
    __slots__ = ["new_origins"]
    NEW_ORIGINS_FIELD_NUMBER: _ClassVar[int]
    new_origins: int
    def __init__(self, new_origins: _Optional[int] = ...) -> None: ...

class RequestVisitRequest(_message.Message):
    __slots__ = ["url", "visit_type"]
    URL_FIELD_NUMBER: _ClassVar[int]
    VISIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    url: str
    visit_type: str
    def __init__(self, url: _Optional[str] = ..., visit_type: _Optional[str] = ...) -> None: ...

class RequestVisitResponse(_message.Message):
    __slots__ = ["duplicate", "task_id"]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    task_id: int
    def __init__(self, task_id: _Optional[int] = ..., duplicate: bool = ...) -> None: ...

class RunRoundRequest(_message.Message):
    __slots__ = ["visit_type"]
    VISIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    visit_type: str
    def __init__(self, visit_type: _Optional[str] = ...) -> None: ...

class RunRoundResponse(_message.Message):
    __slots__ = ["due_chance_by_lister", "sent_by_lister", "sent_by_policy", "slots", "woken"]
    class DueChanceByListerEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class SentByListerEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SentByPolicyEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DUE_CHANCE_BY_LISTER_FIELD_NUMBER: _ClassVar[int]
    SENT_BY_LISTER_FIELD_NUMBER: _ClassVar[int]
    SENT_BY_POLICY_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    WOKEN_FIELD_NUMBER: _ClassVar[int]
    due_chance_by_lister: _containers.ScalarMap[str, float]
    sent_by_lister: _containers.ScalarMap[str, int]
    sent_by_policy: _containers.ScalarMap[str, int]
    slots: int
    woken: int
    def __init__(self, slots: _Optional[int] = ..., sent_by_policy: _Optional[_Mapping[str, int]] = ..., sent_by_lister: _Optional[_Mapping[str, int]] = ..., woken: _Optional[int] = ..., due_chance_by_lister: _Optional[_Mapping[str, float]] = ...) -> None: ...

class VisitOutcome(_message.Message):
    __slots__ = ["newest_change", "origin_url", "snapshot", "status", "visit_date"]
    NEWEST_CHANGE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_URL_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VISIT_DATE_FIELD_NUMBER: _ClassVar[int]
    newest_change: _timestamp_pb2.Timestamp
    origin_url: str
    snapshot: bytes
    status: VisitStatus
    visit_date: _timestamp_pb2.Timestamp
    def __init__(self, status: _Optional[_Union[VisitStatus, str]] = ..., snapshot: _Optional[bytes] = ..., visit_date: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., origin_url: _Optional[str] = ..., newest_change: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class VisitStats(_message.Message):
    __slots__ = ["change_rate_per_day", "eligible_after", "enabled", "first_seen", "last_scheduled", "last_seen", "last_snapshot", "last_successful", "last_update", "last_visit", "last_visit_status", "lister", "next_position_offset", "next_visit_queue_position", "successive_visits"]
    CHANGE_RATE_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_AFTER_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESSFUL_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_FIELD_NUMBER: _ClassVar[int]
    LAST_VISIT_FIELD_NUMBER: _ClassVar[int]
    LAST_VISIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    LISTER_FIELD_NUMBER: _ClassVar[int]
    NEXT_POSITION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_VISIT_QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    SUCCESSIVE_VISITS_FIELD_NUMBER: _ClassVar[int]
    change_rate_per_day: float
    eligible_after: _timestamp_pb2.Timestamp
    enabled: bool
    first_seen: _timestamp_pb2.Timestamp
    last_scheduled: _timestamp_pb2.Timestamp
    last_seen: _timestamp_pb2.Timestamp
    last_snapshot: bytes
    last_successful: _timestamp_pb2.Timestamp
    last_update: _timestamp_pb2.Timestamp
    last_visit: _timestamp_pb2.Timestamp
    last_visit_status: str
    lister: str
    next_position_offset: int
    next_visit_queue_position: int
    successive_visits: int
    def __init__(self, lister: _Optional[str] = ..., last_update: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., first_seen: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_visit: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_visit_status: _Optional[str] = ..., last_successful: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_snapshot: _Optional[bytes] = ..., last_scheduled: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., next_position_offset: _Optional[int] = ..., successive_visits: _Optional[int] = ..., next_visit_queue_position: _Optional[int] = ..., enabled: bool = ..., eligible_after: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., change_rate_per_day: _Optional[float] = ...) -> None: ...

class VisitStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
