from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddTaskRequest(_message.Message):
    __slots__ = ["queue", "task"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    queue: str
    task: TaskSpec
    def __init__(self, queue: _Optional[str] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ...) -> None: ...

class AddTaskResponse(_message.Message):
    __slots__ = ["duplicate", "partition", "sync_matched", "task_id"]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SYNC_MATCHED_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    partition: int
    sync_matched: bool
    task_id: int
    def __init__(self, task_id: _Optional[int] = ..., sync_matched: bool = ..., duplicate: bool = ..., partition: _Optional[int] = ...) -> None: ...

class AddTaskResult(_message.Message):
    __slots__ = ["added", "error"]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    added: AddTaskResponse
    error: ItemError
    def __init__(self, added: _Optional[_Union[AddTaskResponse, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class AddTasksRequest(_message.Message):
    __slots__ = ["queue", "tasks"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    def __init__(self, queue: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ...) -> None: ...

class AddTasksResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AddTaskResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AddTaskResult, _Mapping]]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ["partition", "queue", "task_id"]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    partition: int
    queue: str
    task_id: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., task_id: _Optional[int] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ["fairness_key", "outcome", "state"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    outcome: str
    state: GetTaskResponse.State
    def __init__(self, state: _Optional[_Union[GetTaskResponse.State, str]] = ..., fairness_key: _Optional[str] = ..., outcome: _Optional[str] = ...) -> None: ...

class CompleteTaskRequest(_message.Message):
    __slots__ = ["lease_token", "result"]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    result: bytes
    def __init__(self, lease_token: _Optional[str] = ..., result: _Optional[bytes] = ...) -> None: ...

class CompleteTaskResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CompletionResult(_message.Message):
    __slots__ = ["error"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: ItemError
    def __init__(self, error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ["home", "partitions", "queue"]
    HOME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    home: str
    partitions: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., partitions: _Optional[int] = ..., home: _Optional[str] = ...) -> None: ...

class CreateQueueResponse(_message.Message):
    __slots__ = ["home", "partitions"]
    HOME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    home: str
    partitions: int
    def __init__(self, partitions: _Optional[int] = ..., home: _Optional[str] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ["attempts", "dedup_id", "failed_at", "fairness_key", "message", "partition", "payload", "payload_bytes", "priority", "task_id"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    dedup_id: str
    failed_at: _timestamp_pb2.Timestamp
    fairness_key: str
    message: str
    partition: int
    payload: bytes
    payload_bytes: int
    priority: int
    task_id: int
    def __init__(self, task_id: _Optional[int] = ..., partition: _Optional[int] = ..., fairness_key: _Optional[str] = ..., priority: _Optional[int] = ..., payload: _Optional[bytes] = ..., attempts: _Optional[int] = ..., failed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ..., dedup_id: _Optional[str] = ..., payload_bytes: _Optional[int] = ...) -> None: ...

class DeadLetterFilter(_message.Message):
    __slots__ = ["failed_before", "failed_from", "fairness_key", "message_contains"]
    FAILED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FROM_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    failed_before: _timestamp_pb2.Timestamp
    failed_from: _timestamp_pb2.Timestamp
    fairness_key: str
    message_contains: str
    def __init__(self, fairness_key: _Optional[str] = ..., message_contains: _Optional[str] = ..., failed_from: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., failed_before: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DescribeQueueRequest(_message.Message):
    __slots__ = ["queue", "top_keys"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOP_KEYS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    top_keys: int
    def __init__(self, queue: _Optional[str] = ..., top_keys: _Optional[int] = ...) -> None: ...

class DescribeQueueResponse(_message.Message):
    __slots__ = ["held_for_polls", "home", "partitions", "queue", "settings", "waiting_pollers"]
    HELD_FOR_POLLS_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    WAITING_POLLERS_FIELD_NUMBER: _ClassVar[int]
    held_for_polls: int
    home: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionState]
    queue: str
    settings: QueueSettings
    waiting_pollers: int
    def __init__(self, queue: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionState, _Mapping]]] = ..., waiting_pollers: _Optional[int] = ..., home: _Optional[str] = ..., settings: _Optional[_Union[QueueSettings, _Mapping]] = ..., held_for_polls: _Optional[int] = ...) -> None: ...

class FailTaskRequest(_message.Message):
    __slots__ = ["lease_token", "message", "retry_after", "retryable"]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    message: str
    retry_after: _duration_pb2.Duration
    retryable: bool
    def __init__(self, lease_token: _Optional[str] = ..., retryable: bool = ..., message: _Optional[str] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class FailTaskResponse(_message.Message):
    __slots__ = ["next_attempt_at", "will_retry"]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    WILL_RETRY_FIELD_NUMBER: _ClassVar[int]
    next_attempt_at: _timestamp_pb2.Timestamp
    will_retry: bool
    def __init__(self, will_retry: bool = ..., next_attempt_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FairLevel(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    PASS_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ..., **kwargs) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ["include_payload", "partition", "queue", "task_id"]
    INCLUDE_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    include_payload: bool
    partition: int
    queue: str
    task_id: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., task_id: _Optional[int] = ..., include_payload: bool = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ["attempt", "cancelled", "cost", "created_at", "deadline", "dedup_id", "failed_at", "failure_message", "fairness_key", "lease_deadline", "partition", "payload", "payload_bytes", "priority", "ready_at", "size", "state", "task_id", "waiting_for", "worker_id"]
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DEAD: GetTaskResponse.State
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    DELAYED: GetTaskResponse.State
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    LEASED: GetTaskResponse.State
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PENDING: GetTaskResponse.State
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    READY_AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_UNSPECIFIED: GetTaskResponse.State
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    cancelled: bool
    cost: int
    created_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    dedup_id: str
    failed_at: _timestamp_pb2.Timestamp
    failure_message: str
    fairness_key: str
    lease_deadline: _timestamp_pb2.Timestamp
    partition: int
    payload: bytes
    payload_bytes: int
    priority: int
    ready_at: _timestamp_pb2.Timestamp
    size: int
    state: GetTaskResponse.State
    task_id: int
    waiting_for: str
    worker_id: str
    def __init__(self, state: _Optional[_Union[GetTaskResponse.State, str]] = ..., task_id: _Optional[int] = ..., partition: _Optional[int] = ..., fairness_key: _Optional[str] = ..., priority: _Optional[int] = ..., dedup_id: _Optional[str] = ..., attempt: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cost: _Optional[int] = ..., size: _Optional[int] = ..., payload_bytes: _Optional[int] = ..., payload: _Optional[bytes] = ..., waiting_for: _Optional[str] = ..., ready_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., worker_id: _Optional[str] = ..., lease_deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., failed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., failure_message: _Optional[str] = ..., cancelled: bool = ...) -> None: ...

class HeartbeatTaskRequest(_message.Message):
    __slots__ = ["lease_token"]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    def __init__(self, lease_token: _Optional[str] = ...) -> None: ...

class HeartbeatTaskResponse(_message.Message):
    __slots__ = ["lease_deadline"]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    lease_deadline: _timestamp_pb2.Timestamp
    def __init__(self, lease_deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ["code", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class KeyDispatch(_message.Message):
    __slots__ = ["cost", "fairness_key", "tasks", "weight"]
    COST_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    cost: int
    fairness_key: str
    tasks: int
    weight: float
    def __init__(self, fairness_key: _Optional[str] = ..., tasks: _Optional[int] = ..., cost: _Optional[int] = ..., weight: _Optional[float] = ...) -> None: ...

class KeyState(_message.Message):
    __slots__ = ["buffered", "fairness_key", "oldest_added_at", "pass_ahead"]
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    OLDEST_ADDED_AT_FIELD_NUMBER: _ClassVar[int]
    PASS_AHEAD_FIELD_NUMBER: _ClassVar[int]
    buffered: int
    fairness_key: str
    oldest_added_at: _timestamp_pb2.Timestamp
    pass_ahead: int
    def __init__(self, fairness_key: _Optional[str] = ..., buffered: _Optional[int] = ..., pass_ahead: _Optional[int] = ..., oldest_added_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ["filter", "limit", "queue"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    filter: DeadLetterFilter
    limit: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ["dead_letters", "more"]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    more: bool
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., more: bool = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ["answering_node", "nodes"]
    ANSWERING_NODE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    answering_node: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeState]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeState, _Mapping]]] = ..., answering_node: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "prefix"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ["next_page_token", "queues"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueSummary]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ["left_out", "unanswered_nodes", "workers"]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_NODES_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    left_out: int
    unanswered_nodes: _containers.RepeatedScalarFieldContainer[str]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerSeen]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerSeen, _Mapping]]] = ..., unanswered_nodes: _Optional[_Iterable[str]] = ..., left_out: _Optional[int] = ...) -> None: ...

class MoveQueueRequest(_message.Message):
    __slots__ = ["abandon_previous", "force", "home", "queue"]
    ABANDON_PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    abandon_previous: bool
    force: bool
    home: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., home: _Optional[str] = ..., force: bool = ..., abandon_previous: bool = ...) -> None: ...

class MoveQueueResponse(_message.Message):
    __slots__ = ["abandoned_partitions", "generation", "home", "partitions", "queue"]
    ABANDONED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    abandoned_partitions: int
    generation: int
    home: str
    partitions: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., home: _Optional[str] = ..., partitions: _Optional[int] = ..., generation: _Optional[int] = ..., abandoned_partitions: _Optional[int] = ...) -> None: ...

class NodeState(_message.Message):
    __slots__ = ["address", "answered", "last_heartbeat", "leased", "live", "node", "partitions_held", "region", "started", "workers"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_HELD_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    address: str
    answered: bool
    last_heartbeat: _timestamp_pb2.Timestamp
    leased: int
    live: bool
    node: str
    partitions_held: int
    region: str
    started: _timestamp_pb2.Timestamp
    workers: int
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., region: _Optional[str] = ..., started: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., live: bool = ..., answered: bool = ..., partitions_held: _Optional[int] = ..., leased: _Optional[int] = ..., workers: _Optional[int] = ...) -> None: ...

class PartitionState(_message.Message):
    __slots__ = ["added", "completed", "delayed", "dispatched", "expired", "failed", "largest_write_bytes", "leased", "metadata_bytes", "owner", "partition", "range_id", "recent_dispatch", "recent_others", "recent_span", "state", "subqueues", "tasks_over_max_wait"]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LARGEST_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    METADATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RANGE_ID_FIELD_NUMBER: _ClassVar[int]
    RECENT_DISPATCH_FIELD_NUMBER: _ClassVar[int]
    RECENT_OTHERS_FIELD_NUMBER: _ClassVar[int]
    RECENT_SPAN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBQUEUES_FIELD_NUMBER: _ClassVar[int]
    TASKS_OVER_MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    added: int
    completed: int
    delayed: int
    dispatched: int
    expired: int
    failed: int
    largest_write_bytes: int
    leased: int
    metadata_bytes: int
    owner: str
    partition: int
    range_id: int
    recent_dispatch: _containers.RepeatedCompositeFieldContainer[KeyDispatch]
    recent_others: KeyDispatch
    recent_span: _duration_pb2.Duration
    state: str
    subqueues: _containers.RepeatedCompositeFieldContainer[SubqueueState]
    tasks_over_max_wait: int
    def __init__(self, partition: _Optional[int] = ..., range_id: _Optional[int] = ..., owner: _Optional[str] = ..., subqueues: _Optional[_Iterable[_Union[SubqueueState, _Mapping]]] = ..., dispatched: _Optional[int] = ..., added: _Optional[int] = ..., state: _Optional[str] = ..., leased: _Optional[int] = ..., delayed: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., expired: _Optional[int] = ..., metadata_bytes: _Optional[int] = ..., largest_write_bytes: _Optional[int] = ..., tasks_over_max_wait: _Optional[int] = ..., recent_dispatch: _Optional[_Iterable[_Union[KeyDispatch, _Mapping]]] = ..., recent_others: _Optional[_Union[KeyDispatch, _Mapping]] = ..., recent_span: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PauseQueueRequest(_message.Message):
    __slots__ = ["fairness_key", "queue"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., fairness_key: _Optional[str] = ...) -> None: ...

class PauseQueueResponse(_message.Message):
    __slots__ = ["settings"]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    settings: QueueSettings
    def __init__(self, settings: _Optional[_Union[QueueSettings, _Mapping]] = ...) -> None: ...

class PollTaskRequest(_message.Message):
    __slots__ = ["max_wait", "queue", "worker_id"]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    max_wait: _duration_pb2.Duration
    queue: str
    worker_id: str
    def __init__(self, queue: _Optional[str] = ..., worker_id: _Optional[str] = ..., max_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PollTaskResponse(_message.Message):
    __slots__ = ["task"]
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class PollTasksRequest(_message.Message):
    __slots__ = ["completions", "max_tasks", "max_wait", "queue", "worker_id"]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[CompleteTaskRequest]
    max_tasks: int
    max_wait: _duration_pb2.Duration
    queue: str
    worker_id: str
    def __init__(self, queue: _Optional[str] = ..., worker_id: _Optional[str] = ..., max_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_tasks: _Optional[int] = ..., completions: _Optional[_Iterable[_Union[CompleteTaskRequest, _Mapping]]] = ...) -> None: ...

class PollTasksResponse(_message.Message):
    __slots__ = ["completions", "tasks"]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[CompletionResult]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., completions: _Optional[_Iterable[_Union[CompletionResult, _Mapping]]] = ...) -> None: ...

class PurgeQueueRequest(_message.Message):
    __slots__ = ["confirmation", "queue"]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    confirmation: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., confirmation: _Optional[str] = ...) -> None: ...

class PurgeQueueResponse(_message.Message):
    __slots__ = ["confirmation", "confirmation_expires", "delayed", "partitions", "purged", "running", "waiting"]
    CONFIRMATION_EXPIRES_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    confirmation: str
    confirmation_expires: _timestamp_pb2.Timestamp
    delayed: int
    partitions: int
    purged: bool
    running: int
    waiting: int
    def __init__(self, confirmation: _Optional[str] = ..., confirmation_expires: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., purged: bool = ..., waiting: _Optional[int] = ..., delayed: _Optional[int] = ..., running: _Optional[int] = ..., partitions: _Optional[int] = ...) -> None: ...

class QueueSettings(_message.Message):
    __slots__ = ["backoff_initial", "backoff_max", "cost_curve", "cost_reference_size", "group_lead", "key_burst", "key_concurrency", "key_rate_per_second", "lease_timeout", "max_attempts", "paused", "paused_keys", "version", "weights"]
    class WeightsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BACKOFF_INITIAL_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_FIELD_NUMBER: _ClassVar[int]
    COST_CURVE_FIELD_NUMBER: _ClassVar[int]
    COST_REFERENCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    GROUP_LEAD_FIELD_NUMBER: _ClassVar[int]
    KEY_BURST_FIELD_NUMBER: _ClassVar[int]
    KEY_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    KEY_RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_KEYS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    backoff_initial: _duration_pb2.Duration
    backoff_max: _duration_pb2.Duration
    cost_curve: str
    cost_reference_size: int
    group_lead: int
    key_burst: int
    key_concurrency: int
    key_rate_per_second: float
    lease_timeout: _duration_pb2.Duration
    max_attempts: int
    paused: bool
    paused_keys: _containers.RepeatedScalarFieldContainer[str]
    version: int
    weights: _containers.ScalarMap[str, float]
    def __init__(self, version: _Optional[int] = ..., lease_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_attempts: _Optional[int] = ..., backoff_initial: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., backoff_max: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., key_concurrency: _Optional[int] = ..., key_rate_per_second: _Optional[float] = ..., key_burst: _Optional[int] = ..., cost_curve: _Optional[str] = ..., cost_reference_size: _Optional[int] = ..., group_lead: _Optional[int] = ..., weights: _Optional[_Mapping[str, float]] = ..., paused: bool = ..., paused_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueSummary(_message.Message):
    __slots__ = ["backlog", "held_here", "home", "leased", "oldest_added_at", "partitions", "queue", "settings"]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    HELD_HERE_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_ADDED_AT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    backlog: int
    held_here: int
    home: str
    leased: int
    oldest_added_at: _timestamp_pb2.Timestamp
    partitions: int
    queue: str
    settings: QueueSettings
    def __init__(self, queue: _Optional[str] = ..., partitions: _Optional[int] = ..., home: _Optional[str] = ..., backlog: _Optional[int] = ..., leased: _Optional[int] = ..., oldest_added_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., held_here: _Optional[int] = ..., settings: _Optional[_Union[QueueSettings, _Mapping]] = ...) -> None: ...

class RedriveDeadLettersRequest(_message.Message):
    __slots__ = ["filter", "limit", "queue"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    filter: DeadLetterFilter
    limit: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ...) -> None: ...

class RedriveDeadLettersResponse(_message.Message):
    __slots__ = ["duplicates", "more", "passed_over", "redriven"]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    PASSED_OVER_FIELD_NUMBER: _ClassVar[int]
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    duplicates: int
    more: bool
    passed_over: int
    redriven: int
    def __init__(self, redriven: _Optional[int] = ..., duplicates: _Optional[int] = ..., passed_over: _Optional[int] = ..., more: bool = ...) -> None: ...

class ResumeQueueRequest(_message.Message):
    __slots__ = ["fairness_key", "queue"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., fairness_key: _Optional[str] = ...) -> None: ...

class ResumeQueueResponse(_message.Message):
    __slots__ = ["settings"]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    settings: QueueSettings
    def __init__(self, settings: _Optional[_Union[QueueSettings, _Mapping]] = ...) -> None: ...

class SubqueueState(_message.Message):
    __slots__ = ["ack_level", "approximate_keys", "backlog", "buffered", "dispatched_above_ack", "max_level", "oldest_added_at", "parked_keys", "parked_tasks", "priority", "read_level", "reader_at_end", "top_keys", "tracked_keys"]
    ACK_LEVEL_FIELD_NUMBER: _ClassVar[int]
    APPROXIMATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_ABOVE_ACK_FIELD_NUMBER: _ClassVar[int]
    MAX_LEVEL_FIELD_NUMBER: _ClassVar[int]
    OLDEST_ADDED_AT_FIELD_NUMBER: _ClassVar[int]
    PARKED_KEYS_FIELD_NUMBER: _ClassVar[int]
    PARKED_TASKS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    READER_AT_END_FIELD_NUMBER: _ClassVar[int]
    READ_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOP_KEYS_FIELD_NUMBER: _ClassVar[int]
    TRACKED_KEYS_FIELD_NUMBER: _ClassVar[int]
    ack_level: FairLevel
    approximate_keys: bool
    backlog: int
    buffered: int
    dispatched_above_ack: int
    max_level: FairLevel
    oldest_added_at: _timestamp_pb2.Timestamp
    parked_keys: int
    parked_tasks: int
    priority: int
    read_level: FairLevel
    reader_at_end: bool
    top_keys: _containers.RepeatedCompositeFieldContainer[KeyState]
    tracked_keys: int
    def __init__(self, priority: _Optional[int] = ..., ack_level: _Optional[_Union[FairLevel, _Mapping]] = ..., read_level: _Optional[_Union[FairLevel, _Mapping]] = ..., max_level: _Optional[_Union[FairLevel, _Mapping]] = ..., buffered: _Optional[int] = ..., backlog: _Optional[int] = ..., reader_at_end: bool = ..., top_keys: _Optional[_Iterable[_Union[KeyState, _Mapping]]] = ..., tracked_keys: _Optional[int] = ..., approximate_keys: bool = ..., dispatched_above_ack: _Optional[int] = ..., parked_keys: _Optional[int] = ..., parked_tasks: _Optional[int] = ..., oldest_added_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ["attempt", "deadline", "fairness_key", "lease_deadline", "lease_token", "partition", "payload", "priority", "task_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    deadline: _timestamp_pb2.Timestamp
    fairness_key: str
    lease_deadline: _timestamp_pb2.Timestamp
    lease_token: str
    partition: int
    payload: bytes
    priority: int
    task_id: int
    def __init__(self, task_id: _Optional[int] = ..., lease_token: _Optional[str] = ..., fairness_key: _Optional[str] = ..., priority: _Optional[int] = ..., payload: _Optional[bytes] = ..., attempt: _Optional[int] = ..., lease_deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., partition: _Optional[int] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ["cost", "deadline", "dedup_id", "delay", "fairness_key", "fairness_weight", "payload", "priority", "size"]
    COST_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    cost: int
    deadline: _timestamp_pb2.Timestamp
    dedup_id: str
    delay: _duration_pb2.Duration
    fairness_key: str
    fairness_weight: float
    payload: bytes
    priority: int
    size: int
    def __init__(self, fairness_key: _Optional[str] = ..., fairness_weight: _Optional[float] = ..., priority: _Optional[int] = ..., payload: _Optional[bytes] = ..., dedup_id: _Optional[str] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cost: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ["clear", "expected_version", "queue", "settings"]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    clear: _containers.RepeatedScalarFieldContainer[str]
    expected_version: int
    queue: str
    settings: QueueSettings
    def __init__(self, queue: _Optional[str] = ..., settings: _Optional[_Union[QueueSettings, _Mapping]] = ..., clear: _Optional[_Iterable[str]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdateQueueResponse(_message.Message):
    __slots__ = ["settings"]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    settings: QueueSettings
    def __init__(self, settings: _Optional[_Union[QueueSettings, _Mapping]] = ...) -> None: ...

class WorkerSeen(_message.Message):
    __slots__ = ["address", "first_poll", "last_poll", "node", "polls_waiting", "queue", "tasks_received", "worker_id"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FIRST_POLL_FIELD_NUMBER: _ClassVar[int]
    LAST_POLL_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    POLLS_WAITING_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASKS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    address: str
    first_poll: _timestamp_pb2.Timestamp
    last_poll: _timestamp_pb2.Timestamp
    node: str
    polls_waiting: int
    queue: str
    tasks_received: int
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ..., queue: _Optional[str] = ..., node: _Optional[str] = ..., address: _Optional[str] = ..., first_poll: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_poll: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., polls_waiting: _Optional[int] = ..., tasks_received: _Optional[int] = ...) -> None: ...
