"""A worker that runs Python functions for the tasks of Fairway queues.

::

    worker = fairway.Worker("127.0.0.1:7070", concurrency=8)

    @worker.task("emails", decode="json")
    def send(payload, ctx):
        ...

    worker.run()  # until SIGTERM / SIGINT / worker.stop()

How it runs (see README.md for the guarantees):

- one poller thread per queue takes tasks with ``PollTasks`` only for free
  slots;
- each task runs in a thread of its own (an ``async def`` function runs on
  the worker's event-loop thread, its thread waiting for it);
- one heartbeat thread, with a connection of its own, extends every lease at
  a third of what is left of it: a function that blocks (``time.sleep``,
  a pure-Python loop holding the GIL, an ``async`` function blocking its
  loop) cannot starve it. A lease the server says is lost is never reported;
- stopping stops polling at once, lets running tasks finish within
  ``grace_period``, then hands the others back (FailTask, retryable, no
  delay); a second signal hands them back at once. Hand-backs go out all at
  once, each tried once within ``hand_back_timeout``: whatever the server
  does, the stop takes at most about that after the grace period;
- a task whose thread cannot be started is handed back; an unexpected error
  of the worker itself (not a task's) is logged and stops the worker, and
  :meth:`Worker.run` raises it once the running tasks are drained.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import typing
from typing import Any, Callable, Dict, List, Optional, Union

import grpc

from .client import NO_RETRY, Client, Connection, _Op
from .errors import (
    Aborted,
    DeadlineExceeded,
    FairwayError,
    InvalidArgument,
    LeaseLost,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unknown,
    from_rpc_error,
)
from .types import Seconds, Task, VisitOutcome, seconds_of

try:  # Optional: spans around each task when OpenTelemetry is installed.
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - depends on the environment
    _otel_trace = None  # type: ignore[assignment]

log = logging.getLogger("fairway")

#: FailTask's message is at most 4096 bytes.
MAX_FAIL_MESSAGE_BYTES = 4000
# How long past its deadline a poll's answer is waited for before the worker
# gives up on it and polls again.
POLL_OVERDUE = 10.0
STOPPED_MESSAGE = "the worker stopped before the task finished; handed back to be run again"
NO_THREAD_MESSAGE = "the worker could not start a thread for the task; handed back to be run again"


class Retry(Exception):
    """Raise it from a task function to have the task tried again after ``after`` seconds."""

    def __init__(self, message: str = "", *, after: Optional[Seconds] = None) -> None:
        super().__init__(message)
        self.after = after


class Fatal(Exception):
    """Raise it from a task function to fail the task for good (straight to the dead letters)."""


@dataclasses.dataclass
class TaskContext:
    """What a task function may know of its task, given as its second argument."""

    queue: str
    task_id: int
    attempt: int
    fairness_key: str
    priority: int
    partition: int
    lease_token: str
    _lease: "_Lease" = dataclasses.field(repr=False, compare=False)

    @property
    def lease_deadline(self) -> datetime.datetime:
        """When the lease runs out without another heartbeat (UTC; heartbeats move it)."""
        return datetime.datetime.fromtimestamp(self._lease.deadline, tz=datetime.timezone.utc)

    @property
    def deadline(self) -> Optional[datetime.datetime]:
        """The deadline the producer gave the task (UTC), or None."""
        return self._lease.task.deadline

    @property
    def lease_lost(self) -> bool:
        """True once the server said the lease is gone: the result will not be reported."""
        return self._lease.state in ("lost", "handed_back")


class _Lease:
    """One task in flight, shared by its thread, the heartbeater and the stopper."""

    def __init__(self, task: Task, queue: str) -> None:
        self.task = task
        self.queue = queue
        self.lock = threading.Lock()
        # running -> reporting -> done | lost;  running -> lost | handed_back
        self.state = "running"
        now = time.time()
        self.deadline = task.lease_deadline.timestamp() if task.lease_deadline else now + 30.0
        self.next_beat = now + max(0.1, (self.deadline - now) / 3)
        self.finished = threading.Event()

    def claim(self, new_state: str) -> bool:
        """Moves a running lease to ``new_state``; False if it was no longer running."""
        with self.lock:
            if self.state != "running":
                return False
            self.state = new_state
            return True


class _Heartbeater(threading.Thread):
    """Extends every lease held, on a connection of its own."""

    def __init__(self, client: Client, call_timeout: float = 5.0) -> None:
        super().__init__(name="fairway-heartbeat", daemon=True)
        self.client = client
        self.call_timeout = call_timeout
        self.leases: Dict[str, _Lease] = {}
        self.cond = threading.Condition()
        self.stopped = False

    def add(self, lease: _Lease) -> None:
        with self.cond:
            self.leases[lease.task.lease_token] = lease
            self.cond.notify()

    def remove(self, lease: _Lease) -> None:
        with self.cond:
            self.leases.pop(lease.task.lease_token, None)

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while True:
                    if self.stopped:
                        self.client.close()
                        return
                    now = time.time()
                    due = [lease for lease in self.leases.values() if lease.next_beat <= now]
                    if due:
                        break
                    nearest = min((lease.next_beat for lease in self.leases.values()), default=now + 60)
                    self.cond.wait(max(0.01, nearest - now))
            for lease in due:
                try:
                    self.beat(lease)
                except Exception:  # a bug of ours must not end the heartbeats of every lease
                    log.exception("task %s: heartbeat failed unexpectedly; trying again in 1 s", lease.task.task_id)
                    lease.next_beat = time.time() + 1.0

    def beat(self, lease: _Lease) -> None:
        op = self.client._ops.heartbeat(lease.task)
        op.timeout = self.call_timeout
        try:
            deadline = self.client._invoke(op, NO_RETRY)
        except LeaseLost as error:
            with lease.lock:
                was = lease.state
                if was == "running":
                    lease.state = "lost"
            self.remove(lease)
            if was != "running":
                # Being reported (a heartbeat racing a Complete that landed),
                # reported, or handed back: the report says what became of it.
                log.debug("task %s: heartbeat after the lease ended (%s)", lease.task.task_id, lease.state)
                return
            log.warning(
                "task %s of %s: lease lost (%s); its result will not be reported",
                lease.task.task_id,
                lease.queue,
                error.message,
            )
            return
        except FairwayError as error:
            now = time.time()
            # Try again soon: a third of what is left, between 0.2 s and 1 s.
            lease.next_beat = now + min(1.0, max(0.2, (lease.deadline - now) / 3))
            log.warning("task %s: heartbeat failed (%s); trying again", lease.task.task_id, error)
            return
        now = time.time()
        if deadline is not None:
            lease.deadline = deadline.timestamp()
        lease.next_beat = now + max(0.1, (lease.deadline - now) / 3)


class _Slots:
    """The worker's free slots: a counter under a condition."""

    def __init__(self, total: int) -> None:
        self.free = total
        self.cond = threading.Condition()

    def take_up_to(self, most: int, stop: threading.Event) -> int:
        with self.cond:
            while self.free == 0:
                if stop.is_set():
                    return 0
                self.cond.wait(0.2)
            if stop.is_set():
                return 0
            taken = min(most, self.free)
            self.free -= taken
            return taken

    def give_back(self, count: int) -> None:
        if count:
            with self.cond:
                self.free += count
                self.cond.notify_all()


@dataclasses.dataclass
class _Handler:
    queue: str
    function: Callable[..., Any]
    decode: Callable[[bytes], Any]
    is_async: bool
    pass_context: str  # "" (payload only), "positional", or a keyword name


Decode = Union[None, str, type, Callable[[bytes], Any]]


def _from_json(cls: Any, value: Any) -> Any:
    """JSON data as ``cls`` when it is a dataclass (nested ones too), else as is."""
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and isinstance(value, dict):
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(value) - names
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {sorted(unknown)}")
        return cls(**{k: _from_json(hints.get(k), v) for k, v in value.items()})
    origin = typing.get_origin(cls) if hasattr(typing, "get_origin") else None
    if origin in (list, List) and isinstance(value, list):
        (item,) = typing.get_args(cls) or (None,)
        return [_from_json(item, v) for v in value]
    return value


def _decoder(decode: Decode) -> Callable[[bytes], Any]:
    if decode is None or decode == "bytes":
        return lambda payload: payload
    if decode in ("text", "str"):
        return lambda payload: payload.decode("utf-8")
    if decode == "json":
        return lambda payload: json.loads(payload) if payload else None
    if isinstance(decode, type) and dataclasses.is_dataclass(decode):
        cls = decode
        return lambda payload: _from_json(cls, json.loads(payload))
    if callable(decode):
        return decode  # type: ignore[return-value]
    raise ValueError(f"decode={decode!r}: expected None, 'bytes', 'text', 'json', a dataclass or a function")


def _context_mode(function: Callable[..., Any]) -> str:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return ""
    positional = [
        p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) >= 2 or any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return "positional"
    for p in parameters:
        if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name in ("ctx", "context"):
            return p.name
    return ""


def _truncate(message: str, limit: int = MAX_FAIL_MESSAGE_BYTES) -> str:
    data = message.encode("utf-8")
    if len(data) <= limit:
        return message
    return data[: limit - 3].decode("utf-8", errors="ignore") + "..."


def _encode_result(result: Any, lease: _Lease) -> bytes:
    if isinstance(result, dict) and lease.queue.startswith("visits.") and "status" in result:
        result = VisitOutcome(**result)
    if isinstance(result, VisitOutcome):
        return result.encode(lease.task.payload)
    if lease.queue.startswith("visits."):
        raise TypeError(f"a task of {lease.queue} must return fairway.VisitOutcome, not {type(result).__name__}")
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    if isinstance(result, str):
        return result.encode("utf-8")
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    return json.dumps(result).encode("utf-8")


class Worker:
    """Runs functions for the tasks of one or more queues.

    ``client`` is a :class:`Client` or an address (then ``connection``
    keyword arguments, as for :class:`Client`, say how to connect).

    - ``concurrency``: tasks running at once (over all queues);
    - ``poll_wait``: the long-poll wait, in seconds;
    - ``grace_period``: after a stop, how long running tasks may finish
      before they are handed back;
    - ``hand_back_timeout``: the deadline of each hand-back (one try, all
      sent at once), and how long reports under way are then waited for:
      the stop takes at most about that after the grace period (or a
      second signal);
    - ``reconnect_initial`` / ``reconnect_max``: the backoff, doubling,
      while the server cannot be reached;
    - ``worker_id``: sent with polls (default ``host-pid``).
    """

    def __init__(
        self,
        client: Union[Client, str, Connection] = "127.0.0.1:7070",
        *,
        concurrency: int = 8,
        poll_wait: float = 20.0,
        grace_period: float = 30.0,
        hand_back_timeout: float = 5.0,
        reconnect_initial: float = 0.5,
        reconnect_max: float = 10.0,
        report_patience: float = 300.0,
        worker_id: Optional[str] = None,
        **connection: Any,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if isinstance(client, Client):
            if connection:
                raise ValueError("connection settings go to the Client given, not the Worker")
            self.client = client
            self._owns_client = False
        else:
            self.client = Client(client, **connection)
            self._owns_client = True
        self.concurrency = concurrency
        self.poll_wait = poll_wait
        self.grace_period = grace_period
        self.hand_back_timeout = hand_back_timeout
        self.reconnect_initial = reconnect_initial
        self.reconnect_max = reconnect_max
        self.report_patience = report_patience
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self._handlers: Dict[str, _Handler] = {}
        self._stop = threading.Event()
        self._force = threading.Event()
        self._leases: Dict[str, _Lease] = {}
        self._leases_lock = threading.Lock()
        self._idle = threading.Condition(self._leases_lock)
        self._fatal: Optional[BaseException] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._heartbeater: Optional[_Heartbeater] = None
        self._slots = _Slots(concurrency)
        self._running = False
        self._client_closed = False
        self._tracer = _otel_trace.get_tracer("fairway") if _otel_trace is not None else None

    # -- registration --------------------------------------------------

    def task(self, queue: str, *, decode: Decode = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Registers the decorated function (sync or ``async``) for the tasks of ``queue``.

        It gets the payload (bytes; ``decode="json"``, ``"text"``, a dataclass
        type or a function to decode it), and a :class:`TaskContext` if it
        takes a second positional argument (or a keyword-only ``ctx``).
        """

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            if queue in self._handlers:
                raise ValueError(f"queue {queue!r} has a function already")
            self._handlers[queue] = _Handler(
                queue=queue,
                function=function,
                decode=_decoder(decode),
                is_async=inspect.iscoroutinefunction(function),
                pass_context=_context_mode(function),
            )
            return function

        return register

    # -- control -------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Stops taking tasks; running ones finish within the grace period
        (``now=True``: they are handed back at once). Thread-safe."""
        if now:
            self._force.set()
        self._stop.set()

    @property
    def in_flight(self) -> int:
        with self._leases_lock:
            return len(self._leases)

    def run(self) -> None:
        """Runs until stopped (SIGTERM/SIGINT when called in the main thread, or :meth:`stop`)."""
        if not self._handlers:
            raise ValueError("no task function: register one with @worker.task(queue)")
        if self._running:
            raise RuntimeError("the worker is running already")
        self._running = True
        self._fatal = None  # an error of an earlier run is that run's
        if self._client_closed:  # a second run of a worker that owns its client
            self.client = Client(self.client.connection)
            self._client_closed = False
        previous = self._install_signals()
        self._heartbeater = _Heartbeater(self.client.clone())
        self._heartbeater.start()
        loop_thread = None
        if any(h.is_async for h in self._handlers.values()):
            self._loop = asyncio.new_event_loop()
            loop_thread = threading.Thread(target=self._loop.run_forever, name="fairway-asyncio", daemon=True)
            loop_thread.start()
        log.info(
            "worker %s started: queues %s, concurrency %d, server %s",
            self.worker_id,
            ", ".join(self._handlers),
            self.concurrency,
            self.client.connection.address,
        )
        pollers = [
            threading.Thread(target=self._poll_loop, args=(h,), name=f"fairway-poll-{h.queue}", daemon=True)
            for h in self._handlers.values()
        ]
        try:
            for poller in pollers:
                poller.start()
            while not self._stop.wait(0.5):
                pass
            log.info("stopping: no more polls")
            for poller in pollers:
                poller.join()
            self._drain()
        finally:
            self._heartbeater.stop()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            if loop_thread is not None:
                loop_thread.join(timeout=5)
            if self._owns_client:
                self.client.close()
                self._client_closed = True
            self._restore_signals(previous)
            self._running = False
            self._stop.clear()
            self._force.clear()
            log.info("worker %s stopped", self.worker_id)
        if self._fatal is not None:
            raise self._fatal

    # -- signals -------------------------------------------------------

    def _install_signals(self) -> Dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: Dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signals(self, previous: Dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._stop.is_set():
            log.warning("%s again: handing back the running tasks now", name)
            self._force.set()
        else:
            log.info(
                "%s: stopping; running tasks have %.0f s to finish (send it again to hand them back now)",
                name,
                self.grace_period,
            )
            self._stop.set()

    # -- polling -------------------------------------------------------

    def _poll_loop(self, handler: _Handler) -> None:
        try:
            self._poll_tasks(handler)
        except BaseException as error:  # a bug of ours, or no more threads, memory, ...
            log.exception("polling %s: the worker failed; stopping (run() raises it)", handler.queue)
            self._stop_with(error)

    def _stop_with(self, error: BaseException) -> None:
        """Stops the worker; :meth:`run` raises ``error`` once drained (the first such error)."""
        with self._leases_lock:
            if self._fatal is None:
                self._fatal = error
        self._stop.set()

    def _poll_tasks(self, handler: _Handler) -> None:
        share = max(1, self.concurrency // len(self._handlers))
        backoff = self.reconnect_initial
        failing = False
        while not self._stop.is_set():
            want = self._slots.take_up_to(share, self._stop)
            if want == 0:
                break
            try:
                tasks = self._poll(handler.queue, want)
            except BaseException as error:
                self._slots.give_back(want)
                if not isinstance(error, FairwayError):
                    raise  # to _poll_loop: the worker stops
                if isinstance(error, (Unauthenticated, PermissionDenied, InvalidArgument)):
                    log.error("polling %s: %s; stopping", handler.queue, error)
                    self._stop_with(error)
                    break
                if isinstance(error, (NotFound, ResourceExhausted)):
                    log.warning("polling %s: %s; polling again in %.1f s", handler.queue, error, self.reconnect_max)
                    self._stop.wait(self.reconnect_max)
                    continue
                delay = backoff * random.uniform(0.8, 1.2)
                log.warning("polling %s: %s; polling again in %.1f s", handler.queue, error, delay)
                failing = True
                self._stop.wait(delay)
                backoff = min(self.reconnect_max, backoff * 2)
                continue
            if tasks is None:  # cancelled by a stop
                self._slots.give_back(want)
                break
            if failing:
                log.info("polling %s works again", handler.queue)
                failing, backoff = False, self.reconnect_initial
            self._slots.give_back(want - len(tasks))
            # Every task is held (heartbeats, the drain) before any starts:
            # should starting one fail, the others are handed back at the stop.
            leases = [self._hold(handler, task) for task in tasks]
            for lease in leases:
                self._start(handler, lease)

    def _poll(self, queue: str, want: int) -> Optional[List[Task]]:
        """One PollTasks; None when a stop cancelled it."""
        op: _Op = self.client._ops.poll_many(queue, want, self.poll_wait, self.worker_id)
        stub = self.client._stubs[op.service]
        future = getattr(stub, op.method).future(op.request, timeout=op.timeout, metadata=self.client._metadata)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        # gRPC ends the call at its deadline. Should it not (a channel left
        # broken by a fork in the process, seen with grpcio 1.49), the worker
        # stops waiting a little later and polls again: a poll that never
        # ends would hold its slots, and the worker would poll no more.
        give_up = time.monotonic() + (op.timeout or 0.0) + POLL_OVERDUE
        while not done.wait(0.2):
            if self._stop.is_set():
                future.cancel()
                done.wait(5)
                break
            if time.monotonic() > give_up:
                future.cancel()
                raise DeadlineExceeded(
                    f"no answer {POLL_OVERDUE:.0f} s past the poll's deadline; polling again",
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    method=op.method,
                )
        if future.cancelled():
            return None
        try:
            response = future.result(timeout=0)
        except grpc.FutureCancelledError:
            return None
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.CANCELLED and self._stop.is_set():
                return None
            raise from_rpc_error(error, op.method) from error
        return op.convert(response)

    # -- running tasks ---------------------------------------------------

    def _hold(self, handler: _Handler, task: Task) -> _Lease:
        """Registers a task leased by a poll (its slot is taken already)."""
        lease = _Lease(task, handler.queue)
        with self._leases_lock:
            self._leases[task.lease_token] = lease
        assert self._heartbeater is not None
        self._heartbeater.add(lease)
        return lease

    def _start(self, handler: _Handler, lease: _Lease) -> None:
        task = lease.task
        if self._stop.is_set():
            # Arrived after the stop: give it straight back.
            self._hand_back([lease])
            return
        thread = threading.Thread(
            target=self._run_one, args=(handler, lease), name=f"fairway-task-{task.task_id}", daemon=True
        )
        try:
            thread.start()
        except BaseException as error:  # RuntimeError: can't start new thread, MemoryError, ...
            log.error(
                "task %s of %s: could not start a thread for it (%s: %s); handing it back",
                task.task_id,
                handler.queue,
                type(error).__name__,
                error,
            )
            self._hand_back([lease], NO_THREAD_MESSAGE)

    def _finish(self, lease: _Lease) -> None:
        assert self._heartbeater is not None
        self._heartbeater.remove(lease)
        with self._leases_lock:
            if self._leases.pop(lease.task.lease_token, None) is not None:
                self._slots.give_back(1)
            self._idle.notify_all()
        lease.finished.set()

    def _run_one(self, handler: _Handler, lease: _Lease) -> None:
        task = lease.task
        context = TaskContext(
            queue=handler.queue,
            task_id=task.task_id,
            attempt=task.attempt,
            fairness_key=task.fairness_key,
            priority=task.priority,
            partition=task.partition,
            lease_token=task.lease_token,
            _lease=lease,
        )
        span_cm = (
            self._tracer.start_as_current_span(
                f"fairway.task {handler.queue}",
                attributes={
                    "fairway.queue": handler.queue,
                    "fairway.task_id": task.task_id,
                    "fairway.attempt": task.attempt,
                    "fairway.fairness_key": task.fairness_key,
                },
            )
            if self._tracer is not None
            else None
        )
        try:
            span = span_cm.__enter__() if span_cm is not None else None
            try:
                outcome = self._call(handler, lease, context)
                if span is not None and outcome[0] == "fail":
                    span.set_attribute("fairway.failed", True)
                    span.set_attribute("fairway.retryable", bool(outcome[1]))
            finally:
                if span_cm is not None:
                    span_cm.__exit__(None, None, None)
            self._report(lease, outcome)
        except BaseException:  # a bug of ours: the lease runs out and the task comes back
            log.exception("task %s of %s: the worker failed to run or report it", task.task_id, handler.queue)
        finally:
            self._finish(lease)

    def _call(self, handler: _Handler, lease: _Lease, context: TaskContext) -> tuple:
        task = lease.task
        try:
            try:
                argument = handler.decode(task.payload)
            except Exception as error:
                raise Fatal(f"the payload does not decode: {type(error).__name__}: {error}") from error
            args: List[Any] = [argument]
            kwargs: Dict[str, Any] = {}
            if handler.pass_context == "positional":
                args.append(context)
            elif handler.pass_context:
                kwargs[handler.pass_context] = context
            log.debug("task %s of %s: attempt %d starts", task.task_id, handler.queue, task.attempt)
            if handler.is_async:
                assert self._loop is not None
                result = asyncio.run_coroutine_threadsafe(handler.function(*args, **kwargs), self._loop).result()
            else:
                result = handler.function(*args, **kwargs)
            return ("complete", _encode_result(result, lease))
        except Retry as retry:
            text = str(retry) or "retry requested"
            return ("fail", True, _truncate(f"Retry: {text}"), retry.after)
        except Fatal as fatal:
            return ("fail", False, _truncate(f"Fatal: {fatal}"), None)
        except BaseException as error:  # SystemExit, KeyboardInterrupt raised by the function too
            log.info("task %s of %s failed: %s: %s", task.task_id, handler.queue, type(error).__name__, error)
            return ("fail", True, _truncate(f"{type(error).__name__}: {error}"), None)

    def _report(self, lease: _Lease, outcome: tuple) -> None:
        task = lease.task
        if not lease.claim("reporting"):
            log.info("task %s: not reported (lease %s)", task.task_id, lease.state)
            return
        give_up = time.time() + self.report_patience
        backoff = self.reconnect_initial
        while True:
            try:
                if outcome[0] == "complete":
                    self.client.complete(task, outcome[1])
                    log.debug("task %s completed", task.task_id)
                else:
                    _, retryable, message, after = outcome
                    result = self.client.fail(task, message, retryable=retryable, retry_after=after)
                    log.debug("task %s failed (will retry: %s)", task.task_id, result.will_retry)
                with lease.lock:
                    lease.state = "done"
                return
            except LeaseLost as error:
                with lease.lock:
                    lease.state = "lost"
                if error.maybe_applied:
                    log.info("task %s: an earlier report may have landed (%s)", task.task_id, error.message)
                else:
                    log.warning("task %s: lease lost before the report (%s)", task.task_id, error.message)
                return
            except (Unavailable, Aborted, Unknown, DeadlineExceeded) as error:
                if lease.state == "lost":
                    return
                if time.time() > give_up:
                    log.error("task %s: giving up reporting after %.0f s: %s", task.task_id, self.report_patience, error)
                    return
                delay = backoff * random.uniform(0.8, 1.2)
                log.warning("task %s: report failed (%s); again in %.1f s", task.task_id, error, delay)
                time.sleep(delay)
                backoff = min(self.reconnect_max, backoff * 2)
            except FairwayError as error:
                log.error("task %s: report refused: %s", task.task_id, error)
                return

    def _hand_back(self, leases: List[_Lease], message: str = STOPPED_MESSAGE) -> None:
        """FailTask, retryable at once, for each lease still running: the
        tasks go to other workers. All are sent at once, each tried once with
        a deadline of ``hand_back_timeout``: this takes at most about that.

        A lease that is no longer running is left alone: one being reported
        is finished by its own thread once reported.
        """
        calls = []
        for lease in leases:
            if not lease.claim("handed_back"):
                continue
            try:
                op = self.client._ops.fail(lease.task, message, True, 0)
                stub = self.client._stubs[op.service]
                future = getattr(stub, op.method).future(
                    op.request, timeout=self.hand_back_timeout, metadata=self.client._metadata
                )
            except Exception as error:  # a closed channel, no more threads, ...
                self._hand_back_failed(lease, error)
                self._finish(lease)
                continue
            calls.append((lease, future))
        # gRPC ends each call at its deadline; this is a guard on top of it.
        limit = time.monotonic() + self.hand_back_timeout + 1.0
        for lease, future in calls:
            try:
                future.result(timeout=max(0.0, limit - time.monotonic()))
                log.info("task %s of %s handed back", lease.task.task_id, lease.queue)
            except grpc.FutureTimeoutError as error:
                future.cancel()
                self._hand_back_failed(lease, error)
            except Exception as error:
                if isinstance(error, grpc.RpcError):
                    error = from_rpc_error(error, "FailTask")
                self._hand_back_failed(lease, error)
            finally:
                self._finish(lease)

    @staticmethod
    def _hand_back_failed(lease: _Lease, error: BaseException) -> None:
        log.warning(
            "task %s of %s: could not hand it back (%s); it runs again after its lease",
            lease.task.task_id,
            lease.queue,
            str(error) or type(error).__name__,
        )

    def _drain(self) -> None:
        deadline = time.monotonic() + self.grace_period
        with self._idle:
            if self._leases:
                log.info("waiting up to %.0f s for %d running tasks", self.grace_period, len(self._leases))
            while self._leases and not self._force.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(min(left, 0.2))
            running = [lease for lease in self._leases.values() if lease.state == "running"]
        end = time.monotonic() + self.hand_back_timeout
        if running:
            log.warning("handing back %d tasks still running", len(running))
            self._hand_back(running)
        # Reports under way (some may have begun during the hand-backs) are
        # let finish by their threads, which may not send them twice; the
        # client is closed only after them, up to the same deadline.
        with self._idle:
            while self._leases:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(min(left, 0.2))
            left_over = len(self._leases)
        if left_over:
            log.warning(
                "%d tasks still being reported or finishing after %.0f s; they run again after their leases",
                left_over,
                self.hand_back_timeout,
            )
        if self._force.is_set() or running:
            log.info("running tasks handed back")
        else:
            log.info("every running task finished")
