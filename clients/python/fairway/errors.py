"""Exceptions raised by the client, one class per meaning of a gRPC status.

Every exception keeps the gRPC ``code`` and the server's ``message`` and says
whether the request may have been applied (``maybe_applied``):

- ``False`` for the codes the server sends only when nothing was written
  (``ABORTED``, ``INVALID_ARGUMENT``, ``NOT_FOUND``, ...), for the server's
  own ``UNAVAILABLE`` (its message says "nothing was written") and for a
  connection that could not be made at all;
- ``True`` for ``UNKNOWN`` with the trailer ``fairway-maybe-applied: true``,
  for a deadline that passed while the request was out, for a connection
  that broke after the request may have left, and for an ``UNAVAILABLE``
  that cannot be told apart (from a proxy, or gRPC words not known here):
  when in doubt, maybe applied, so that a call that may not be sent twice
  (an add without a dedup id, a poll) is not.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple, Type

import grpc

MAYBE_APPLIED_KEY = "fairway-maybe-applied"

# Words of the server's own UNAVAILABLE (src/api/status.rs), and of gRPC's
# own messages for a connection that was never made: the request cannot have
# been applied.
_NOT_SENT_HINTS = (
    "nothing was written",
    "failed to connect",
    "connection refused",
    "dns resolution failed",
    "name resolution",
    "no route to host",
    "connections to all backends failing",
    "ssl_error",
    "handshake",
)


class FairwayError(Exception):
    """A call to Fairway failed.

    ``code`` is the gRPC status code, ``message`` the server's (or gRPC's)
    text, ``maybe_applied`` whether the request may have taken effect.
    """

    default_maybe_applied = False

    def __init__(
        self,
        message: str,
        code: Optional[grpc.StatusCode] = None,
        maybe_applied: Optional[bool] = None,
        method: str = "",
    ) -> None:
        self.message = message
        self.code = code if code is not None else grpc.StatusCode.UNKNOWN
        self.maybe_applied = self.default_maybe_applied if maybe_applied is None else maybe_applied
        self.method = method
        #: The call's trailing metadata (e.g. ``fairway-maybe-applied``).
        self.trailers: Dict[str, str] = {}
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{self.code.name}: {message}")

    @property
    def retryable(self) -> bool:
        """Whether the same request may simply be sent again: nothing was applied."""
        return isinstance(self, (Unavailable, Aborted)) and not self.maybe_applied


class InvalidArgument(FairwayError):
    """INVALID_ARGUMENT: the request broke a rule; the message names the field."""


class NotFound(FairwayError):
    """NOT_FOUND: the queue was never created, or no schedule has the id."""


class AlreadyExists(FairwayError):
    """ALREADY_EXISTS."""


class PermissionDenied(FairwayError):
    """PERMISSION_DENIED: the principal lacks the permission for this call."""


class Unauthenticated(FairwayError):
    """UNAUTHENTICATED: no credentials, or credentials no principal has."""


class FailedPrecondition(FairwayError):
    """FAILED_PRECONDITION (a lease no longer held is :class:`LeaseLost`)."""


class LeaseLost(FailedPrecondition):
    """FAILED_PRECONDITION on CompleteTask, FailTask or HeartbeatTask: the
    lease token no longer holds the lease (it ran out and the task went to
    another worker, or the task was already finished)."""


class ResourceExhausted(FairwayError):
    """RESOURCE_EXHAUSTED: a server limit (queues, partitions, parked polls)."""


class Unavailable(FairwayError):
    """UNAVAILABLE: the server could not do it now, or could not be reached."""


class Aborted(FairwayError):
    """ABORTED: a report of the same lease is being written; retry."""


class DeadlineExceeded(FairwayError):
    """DEADLINE_EXCEEDED: no answer in time; the request may have been applied."""

    default_maybe_applied = True


class Unknown(FairwayError):
    """UNKNOWN: see ``maybe_applied`` (the server's ``fairway-maybe-applied``)."""


class Internal(FairwayError):
    """INTERNAL: a server-side fault that is not the caller's."""


class DataLoss(FairwayError):
    """DATA_LOSS: corrupt stored data."""


class Cancelled(FairwayError):
    """CANCELLED: the call was cancelled."""

    default_maybe_applied = True


_BY_CODE: Dict[grpc.StatusCode, Type[FairwayError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNKNOWN: Unknown,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.CANCELLED: Cancelled,
}

LEASE_METHODS = frozenset({"CompleteTask", "FailTask", "HeartbeatTask"})


def classify(
    code: grpc.StatusCode,
    details: str,
    trailers: Optional[Sequence[Tuple[str, object]]],
    method: str,
) -> FairwayError:
    """The exception for a failed call of ``method`` (an RPC name)."""
    cls = _BY_CODE.get(code, FairwayError)
    if cls is FailedPrecondition and method in LEASE_METHODS:
        cls = LeaseLost
    maybe: Optional[bool] = None
    lowered = details.lower()
    if code == grpc.StatusCode.UNKNOWN:
        # The server sends UNKNOWN with `fairway-maybe-applied: true` for
        # outcomes it cannot know. One without the trailer comes from
        # elsewhere on the path (gRPC itself, a proxy) and cannot say either:
        # both are maybe applied.
        maybe = True
    elif code == grpc.StatusCode.UNAVAILABLE:
        # The server's UNAVAILABLE says nothing was written, and gRPC's own
        # for a connection that was never made cannot have been applied.
        # Any other (gRPC's for a connection that broke while the request
        # was out, "Socket closed", "GOAWAY", ...; a proxy's; words of a gRPC
        # version not known here) cannot say: maybe applied, the safe side
        # (a call that may not be sent twice, an add without a dedup id or
        # a poll, is then not sent again).
        maybe = not any(h in lowered for h in _NOT_SENT_HINTS)
    error = cls(details or code.name, code=code, maybe_applied=maybe, method=method)
    error.trailers = {
        key: value.decode(errors="replace") if isinstance(value, bytes) else str(value) for key, value in trailers or ()
    }
    return error


def from_rpc_error(error: grpc.RpcError, method: str) -> FairwayError:
    """Turns a gRPC error (sync or asyncio) into a :class:`FairwayError`."""
    code_fn = getattr(error, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details_fn = getattr(error, "details", None)
    details = (details_fn() if callable(details_fn) else None) or ""
    trailers_fn = getattr(error, "trailing_metadata", None)
    try:
        trailers = trailers_fn() if callable(trailers_fn) else None
    except Exception:  # pragma: no cover - a call without trailers
        trailers = None
    if trailers is not None and not isinstance(trailers, (list, tuple)):
        trailers = list(trailers)  # grpc.aio.Metadata
    return classify(code, details, trailers, method)
