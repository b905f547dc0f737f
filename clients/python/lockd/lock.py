"""A granted lock, as its holder sees it."""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from . import errors

if TYPE_CHECKING:  # pragma: no cover
    from ._session import _Hold, _Session

#: What a holder passes to learn that its lock is lost: called once, on a
#: thread of its own, with the lost Lock (its ``error`` says why).
OnFence = Callable[["Lock"], None]


class State(enum.Enum):
    """Where a lock stands as its client sees it, after Chubby's safe,
    jeopardy and expired."""

    #: The last keepalive was answered and the local deadline is ahead:
    #: new work may start (``can_start()`` is true).
    SAFE = "safe"
    #: A keepalive failed or went unanswered and the lock has not ended:
    #: start nothing new; work in flight may finish before the deadline.
    #: The lock goes back to SAFE when a keepalive is answered in time.
    JEOPARDY = "jeopardy"
    #: The lock was lost or released; ``error`` says why.
    ENDED = "ended"

    def __str__(self) -> str:
        return self.value


class Lock:
    """One acquirer's handle on a granted hold.

    Several Locks share a hold when a client re-enters a key it holds on the
    same session; each is released on its own, and lockd's hold ends with
    the last release. A Lock is also a context manager that releases it.

    Check :meth:`can_start` before each unit of work and
    :meth:`remaining_ttl` before one you may not finish. Present
    :attr:`token` on every write to the guarded resource, which must reject
    a token not greater than the last it accepted. Never log the token.
    """

    def __init__(self, session: "_Session", hold: "_Hold", on_fence: OnFence) -> None:
        self._s = session
        self._h = hold
        self._token = hold.token
        self._epoch = hold.epoch
        self._on_fence = on_fence
        self._done = threading.Event()
        self._error: Optional[errors.LockEnded] = None  # guarded by the session's lock

    @property
    def key(self) -> str:
        """The locked key."""
        return self._h.key

    @property
    def lock_class(self) -> str:
        """The class the key was granted under (``"namespace/name"``)."""
        return self._h.lock_class

    @property
    def token(self) -> int:
        """The fencing token (0 for an unprotected lock). A capability:
        never log it."""
        return self._token

    @property
    def epoch(self) -> int:
        """The token's epoch (diagnostics)."""
        return self._epoch

    @property
    def unprotected(self) -> bool:
        """Whether lockd granted the lock from memory, without an etcd
        quorum (a class with ``onQuorumLoss: open``). Such a lock excludes
        nobody for sure: its token is 0 and :meth:`can_start` is false."""
        return self._h.unprotected

    @property
    def spooled(self) -> Tuple[str, int]:
        """An unprotected grant's lockd (arbiter ID) and its sequence number
        in that lockd's spool; empty and 0 for a protected lock."""
        return self._h.arbiter, self._h.spool_seq

    def can_start(self) -> bool:
        """Whether a new unit of work may start: false from the first failed
        keepalive, once the lock ended, and always for an unprotected lock."""
        return not self.unprotected and self.state() is State.SAFE

    def state(self) -> State:
        """SAFE, JEOPARDY or ENDED (see :class:`State`)."""
        with self._s.mu:
            if self._error is not None:
                return State.ENDED
            return State.SAFE if self._s._healthy_locked() else State.JEOPARDY

    def remaining_ttl(self) -> float:
        """Seconds left before the local deadline; 0 once the lock ended."""
        with self._s.mu:
            if self._error is not None:
                return 0.0
            return self._s._remaining_locked()

    @property
    def deadline(self) -> float:
        """The local deadline on ``time.monotonic()``'s clock: the send time
        of the last successful keepalive plus the TTL minus one second. It
        passes before the store can expire the session."""
        with self._s.mu:
            return self._s._deadline_locked()

    @property
    def error(self) -> Optional[errors.LockEnded]:
        """Why the lock ended (a :class:`~lockd.errors.LockLost` when it was
        lost), or None while it is held."""
        with self._s.mu:
            return self._error

    @property
    def ended(self) -> bool:
        """Whether the lock was lost or released."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the lock ends or ``timeout`` seconds pass; return
        whether it ended."""
        return self._done.wait(timeout)

    def release(self, timeout: Optional[float] = 30.0) -> bool:
        """Release this Lock; the hold ends at lockd with its last Lock.

        Returns whether lockd still held the lock with this token when the
        final release reached it (true for a release that is not the last).
        False for a lock already lost or released: its loss was told through
        ``on_fence`` and :attr:`error`.

        If lockd does not answer definitively, the client goes on releasing
        in the background (ending the session if it never learns the
        outcome); after ``timeout`` seconds this raises TimeoutError.
        Raises a :class:`~lockd.errors.Refused` lockd answered with.
        """
        return self._s.release(self, timeout)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:  # never the token
        return f"<lockd.Lock {self.key!r} class={self.lock_class!r} {self.state()}>"

    def _end_locked(self, err: errors.LockEnded) -> bool:
        """End the lock with ``err`` (the caller holds the session's lock);
        return whether it was still held."""
        if self._error is not None:
            return False
        self._error = err
        self._done.set()
        return True
