"""Every error the lockd client raises, in one module.

lockd answers every refusal with a reason (a ``google.rpc.ErrorInfo`` of
domain ``lockd.dev`` in the ``grpc-status-details-bin`` trailer; the values
are lock.v1's ``ErrorReason``). :func:`from_rpc_error` turns it into the
class of that reason, all of them in :data:`REASONS`: catch
:class:`WaitTimeout`, :class:`Leak`, :class:`Denied`, ... and never look at
the message. Each carries ``reason``, ``code`` and ``metadata``.

Two families tell whether anything changed:

* :class:`Refused` -- lockd gave a definite answer: nothing was granted or
  released.
* :class:`UnknownOutcome` -- no reason (a timeout, a broken connection) or
  ``UNAVAILABLE`` (lockd's store did not answer): a write may have
  happened. The client resolves an acquire or release left unknown by
  itself.

Why a :class:`~lockd.Lock` ended is a :class:`LockEnded`: released,
closed, or a :class:`LockLost` (expired, deadline, epoch, forced, ...), in
which case ``on_fence`` ran.

Messages come from lockd, which never puts a token in one; the client adds
none either.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type

import grpc

from ._gen.rpcstatus import status_pb2

__all__ = [
    "DOMAIN", "REASONS", "from_rpc_error", "decode",
    "LockdError", "ConfigError", "ServerError", "Refused", "UnknownOutcome",
    "Held", "WaitTimeout", "Leak", "Sealed", "EpochGrace", "SessionTTL",
    "SessionNotFound", "StaleToken", "Denied", "Invalid", "Unavailable",
    "Quota", "RateLimited", "Superseded", "NotOperator", "SamePerson",
    "HoldChanged", "EpochMoved", "EpochExhausted", "NotHeld",
    "RequestNotFound", "Internal", "HistoryOff", "NoQuorumSession",
    "ClassMismatch", "NoClass", "OpenGrace", "WrongRegion", "Moving",
    "PlanState", "Unsupported",
    "LockEnded", "Released", "ClientClosed", "LockLost", "Expired",
    "DeadlinePassed", "EpochAdvanced", "ForcedError", "SessionEnded",
    "UnprotectedEnded",
]

#: The ErrorInfo domain of lockd's reasons.
DOMAIN = "lockd.dev"

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "google.rpc.ErrorInfo"


class LockdError(Exception):
    """Base class of every error of the lockd client."""


class ConfigError(LockdError):
    """The client cannot be configured: no target, no credentials, a bad
    lockctl config file."""


class ServerError(LockdError):
    """An error answer to a call to lockd.

    Attributes:
        reason: lockd's reason (``"HELD"``, ...), or None when it gave none.
        code: the gRPC status code, or None.
        message: lockd's message, for people. Never branch on it.
        metadata: what lockd said besides the reason (``WRONG_REGION``: the
            region and its endpoint; ``MOVING``: ``retry_after_ms``).
    """

    #: Whether this is lockd's definite answer (nothing changed).
    definite = False

    def __init__(self, message: str = "", *, reason: Optional[str] = None,
                 code: Optional[grpc.StatusCode] = None,
                 metadata: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(message or reason or (code.name if code else "lockd error"))
        self.message = message
        self.reason = reason
        self.code = code
        self.metadata: Dict[str, str] = dict(metadata or {})


class Refused(ServerError):
    """lockd refused: nothing was granted, released or changed. Also the
    class of a reason this client does not know yet."""

    definite = True


class UnknownOutcome(ServerError):
    """The outcome is unknown: the call timed out, the connection broke, or
    lockd's store did not answer. A write may have happened."""

    definite = False


class Held(Refused):
    """The key is held by another session (and the acquire did not wait)."""


class WaitTimeout(Held):
    """The key stayed held by another session for the whole wait; the waiter
    left the line. Also a :class:`Held`."""


class Leak(Refused):
    """The key is held by this same identity under another session (another
    process, or a session this process forgot): not contention."""


class Sealed(Refused):
    """lockd refuses grants until operators advance the epoch."""


class EpochGrace(Refused):
    """The epoch has just advanced; grants resume shortly."""


class SessionTTL(Refused):
    """The session's TTL is not the class TTL."""


class SessionNotFound(Refused):
    """The session is gone at lockd (expired, closed, or not this
    caller's)."""


class StaleToken(Refused):
    """The token is not the current hold's."""


class Denied(Refused):
    """This identity may not use the key."""


class Invalid(Refused):
    """A request field breaks a rule; the message names it."""


class Unavailable(UnknownOutcome):
    """lockd's store did not answer: the outcome of a write is unknown."""


class Quota(Refused):
    """A per-identity quota at lockd (sessions or waiters) is used up."""


class RateLimited(Refused):
    """ValidateToken was called faster than the identity's limit."""


class Superseded(Refused):
    """A newer acquire of the same key on the same session replaced this
    one."""


class NotOperator(Refused):
    """The call needs an operator identity."""


class SamePerson(Refused):
    """A two-person approval was given by the requester."""


class HoldChanged(Refused):
    """The hold changed since the force-release was requested."""


class EpochMoved(Refused):
    """The epoch is not the one the operator stated."""


class EpochExhausted(Refused):
    """No epoch above the last one is left."""


class NotHeld(Refused):
    """A force-release was asked for a key nobody holds."""


class RequestNotFound(Refused):
    """No pending force-release, epoch-advance or plan has this id."""


class Internal(Refused):
    """lockd found something in its store it cannot interpret."""


class HistoryOff(Refused):
    """The audit history is off on this lockd."""


class NoQuorumSession(Refused):
    """lockd has no etcd quorum and grants the class (open on quorum loss)
    only on a session opened without quorum. The client handles it."""


class ClassMismatch(Refused):
    """The class named does not own the key (the message names the key's
    class): leave the class out to use the key's own."""


class NoClass(Refused):
    """No class owns the key, so it cannot be locked."""


class OpenGrace(Refused):
    """Quorum has just returned: keys of classes open on quorum loss wait
    until every unprotected holder has lost its lock."""


class WrongRegion(Refused):
    """The key's namespace is homed to another region, whose lockd serves
    it (:attr:`region`, :attr:`endpoint`)."""

    @property
    def region(self) -> str:
        """The region the namespace is homed to."""
        return self.metadata.get("region", "")

    @property
    def endpoint(self) -> str:
        """That region's lockd, when the refusing lockd knows it."""
        return self.metadata.get("endpoint", "")


class Moving(Refused):
    """The key's range is moving to another shard: nothing was granted. The
    client asks again by itself within its wait."""

    @property
    def retry_after(self) -> Optional[float]:
        """Seconds lockd asked to wait before asking again, if it said."""
        try:
            ms = int(self.metadata["retry_after_ms"])
        except (KeyError, ValueError):
            return None
        return ms / 1000 if ms >= 0 else None


class PlanState(Refused):
    """A shard move plan is not in a state that allows the call."""


class Unsupported(LockdError):
    """lockd granted something this client cannot keep safely (a hold on a
    lease on another etcd cluster); it released it."""


#: lockd's wire reasons (lock.v1 ErrorReason names without the prefix) and
#: the class of each: the one place this client maps reasons.
REASONS: Dict[str, Type[ServerError]] = {
    "HELD": Held,
    "WAIT_TIMEOUT": WaitTimeout,
    "LEAK": Leak,
    "SEALED": Sealed,
    "EPOCH_GRACE": EpochGrace,
    "SESSION_TTL": SessionTTL,
    "SESSION_NOT_FOUND": SessionNotFound,
    "STALE_TOKEN": StaleToken,
    "DENIED": Denied,
    "INVALID": Invalid,
    "UNAVAILABLE": Unavailable,
    "QUOTA": Quota,
    "RATE_LIMITED": RateLimited,
    "SUPERSEDED": Superseded,
    "NOT_OPERATOR": NotOperator,
    "SAME_PERSON": SamePerson,
    "HOLD_CHANGED": HoldChanged,
    "EPOCH_MOVED": EpochMoved,
    "EPOCH_EXHAUSTED": EpochExhausted,
    "NOT_HELD": NotHeld,
    "REQUEST_NOT_FOUND": RequestNotFound,
    "INTERNAL": Internal,
    "HISTORY_OFF": HistoryOff,
    "NO_QUORUM_SESSION": NoQuorumSession,
    "CLASS_MISMATCH": ClassMismatch,
    "NO_CLASS": NoClass,
    "OPEN_GRACE": OpenGrace,
    "WRONG_REGION": WrongRegion,
    "MOVING": Moving,
    "PLAN_STATE": PlanState,
}


def _error_info(trailing_metadata: Optional[Sequence[Tuple[str, Any]]]) -> Optional[Any]:
    """lockd's ErrorInfo in a call's trailing metadata, or None."""
    for key, value in trailing_metadata or ():
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        st = status_pb2.Status()
        try:
            st.ParseFromString(value)
        except Exception:  # a malformed trailer is no reason
            return None
        for detail in st.details:
            if detail.type_url.rsplit("/", 1)[-1] != _ERROR_INFO:
                continue
            info = status_pb2.ErrorInfo()
            try:
                info.ParseFromString(detail.value)
            except Exception:
                continue
            if info.domain == DOMAIN:
                return info
    return None


def decode(code: Optional[grpc.StatusCode], message: str,
           trailing_metadata: Optional[Sequence[Tuple[str, Any]]]) -> ServerError:
    """The error for an answer with ``code``, ``message`` and the trailing
    metadata it came with: the class of lockd's reason, :class:`Refused`
    for a reason this client does not know, :class:`UnknownOutcome`
    without a reason."""
    info = _error_info(trailing_metadata)
    if info is None or not info.reason:
        return UnknownOutcome(message, code=code)
    cls = REASONS.get(info.reason, Refused)
    return cls(message, reason=info.reason, code=code, metadata=dict(info.metadata))


def from_rpc_error(err: grpc.RpcError) -> ServerError:
    """The error for a failed call: see :func:`decode`."""
    code = err.code() if hasattr(err, "code") else None
    message = err.details() if hasattr(err, "details") else str(err)
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    return decode(code, message or "", trailing)


class LockEnded(LockdError):
    """Why a lock is not held any more (``Lock.error``)."""


class Released(LockEnded):
    """The holder released the lock."""


class ClientClosed(LockEnded):
    """The client was closed; ``on_fence`` did not run."""


class LockLost(LockEnded):
    """The lock was lost without its holder releasing it: ``on_fence`` ran.
    Stop acting on the guarded resource."""


class Expired(LockLost):
    """lockd answered a keepalive with an expired session: every hold of
    the session is gone."""


class DeadlinePassed(LockLost):
    """No keepalive succeeded before the local deadline (the send time of
    the last successful one + TTL - 1 s)."""


class EpochAdvanced(LockLost):
    """The store was restored and operators advanced the epoch: every hold
    of the earlier epoch is gone."""


class ForcedError(LockLost):
    """Two operators released the hold by force. Another holder may already
    have the key: stop at once.

    Attributes:
        requester: the operator who asked for it.
        approver: the operator who approved it.
        reason: the reason they gave.
    """

    def __init__(self, requester: str = "", approver: str = "", reason: str = "") -> None:
        msg = "lock lost: released by force by operators"
        if requester or approver:
            msg += f" (requested by {requester}, approved by {approver}: {reason!r})"
        super().__init__(msg)
        self.requester = requester
        self.approver = approver
        self.reason = reason


class SessionEnded(LockLost):
    """The client ended the session because it could not learn whether one
    of its holds still existed (a release or acquire whose outcome stayed
    unknown); the holds expire with it."""


class UnprotectedEnded(LockLost):
    """The lock was an unprotected grant (made without quorum) and it ended:
    quorum returned, or its session lapsed."""
