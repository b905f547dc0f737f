"""Sessions and the keepalive stream: the part of the client that decides
when a holder must stop.

A session is one lockd session (one etcd lease) shared by every hold of its
TTL. Its keepalive thread sends one keepalive every TTL/3 on the client's
one KeepAlive stream and marks the session degraded (``can_start()`` false)
when one is not answered within min(TTL/3, 1 s). Its deadline thread waits
for the local deadline -- the ``time.monotonic()`` send time of the last
successful keepalive plus the TTL minus one second -- and then loses every
hold: ``on_fence`` runs, each on a thread of its own. Neither thread ever
makes or waits for an RPC, and no lock is held across one.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterator, List, Optional, Set, Tuple

import grpc

from . import errors
from ._gen.lock.v1 import lock_pb2
from .lock import Lock, OnFence

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

log = logging.getLogger("lockd")

#: Subtracted from the TTL for the local deadline.
FENCE_MARGIN = 1.0
#: One release or resolving acquire attempt.
RESOLVE_ATTEMPT_TIMEOUT = 5.0
RESOLVE_BACKOFF = 0.2

# Where a session's hold of one key stands.
ACQUIRING = "acquiring"  # an Acquire is in flight; other acquires of the key wait
HELD = "held"  # granted: further acquires re-enter
SETTLING = "settling"  # the final release (or an unknown acquire) is being resolved


class _SessionLost(Exception):
    """The session was lost while an acquire looked at it: open another."""


def seconds(d: Any) -> float:
    """A google.protobuf.Duration in seconds."""
    return d.seconds + d.nanos / 1e9


def _call_fence(lock: Lock) -> None:
    try:
        lock._on_fence(lock)
    except Exception:  # the holder's code: report, never let it kill the client
        log.exception("on_fence raised for %s", lock.key)


def run_fences(locks: List[Lock]) -> None:
    """Run each lock's on_fence on a thread of its own."""
    for lock in locks:
        threading.Thread(target=_call_fence, args=(lock,), name="lockd-on-fence", daemon=True).start()


class _Hold:
    """One session's hold (or attempted hold) of one key; guarded by the
    session's lock."""

    def __init__(self, key: str, lock_class: str) -> None:
        self.key = key
        self.lock_class = lock_class
        self.state = ACQUIRING
        # set when the hold leaves ACQUIRING or SETTLING
        self.changed: Optional[threading.Event] = threading.Event()
        self.token = 0
        self.epoch = 0
        self.revision = 0
        self.unprotected = False
        self.arbiter = ""
        self.spool_seq = 0
        self.locks: List[Lock] = []


class _Session:
    def __init__(self, client: "Client", sid: int, ttl: float, no_quorum: bool, sent: float) -> None:
        self.c = client
        self.id = sid
        self.ttl = ttl
        self.no_quorum = no_quorum
        # Guards what follows; notified when the deadline moves or the
        # session is lost.
        self.mu = threading.Condition()
        self.last_ok = sent  # send time of the last successful keepalive
        self.last_sent = sent  # send time of the newest keepalive
        self.last_ans = sent  # send time of the newest keepalive answered
        self.degraded = False  # a keepalive failed since the last success
        self.epoch = 0  # the highest epoch a keepalive answer carried
        self.lost: Optional[errors.LockEnded] = None
        self.holds: Dict[str, _Hold] = {}
        self.removed: Set[int] = set()  # force-released hold revisions acted on
        self.stop = threading.Event()

    def start(self) -> None:
        for target, what in ((self._run_deadline, "deadline"), (self._run_keepalive, "keepalive")):
            threading.Thread(target=target, name=f"lockd-session-{self.id}-{what}", daemon=True).start()

    # -- the deadline ----------------------------------------------------

    def _deadline_locked(self) -> float:
        return self.last_ok + self.ttl - FENCE_MARGIN

    def _remaining_locked(self) -> float:
        return max(self._deadline_locked() - time.monotonic(), 0.0)

    def _healthy_locked(self) -> bool:
        return not self.degraded and self.lost is None and time.monotonic() < self._deadline_locked()

    def alive(self) -> bool:
        with self.mu:
            return self.lost is None

    def _run_deadline(self) -> None:
        with self.mu:
            while self.lost is None:
                left = self._deadline_locked() - time.monotonic()
                if left <= 0:
                    break
                self.mu.wait(left)
            if self.lost is not None:
                return
        self.expire_if_due()

    def expire_if_due(self) -> None:
        """Lose every hold if the local deadline has passed."""
        with self.mu:
            if self.lost is not None or self._remaining_locked() > 0:
                return
        log.warning("lock session %d lost: the local deadline passed without a successful keepalive", self.id)
        self.lose(errors.DeadlinePassed("lock lost: the local deadline passed without a successful keepalive"), True)
        self.c._background(lambda: self.c._end_session(self.id))

    def lose(self, err: errors.LockEnded, fence: bool) -> None:
        """End the session locally: every lock ends with ``err`` (on_fence
        runs when ``fence``), acquires waiting on its holds wake, and the
        client forgets it and stops renewing it."""
        with self.mu:
            if self.lost is not None:
                return
            self.lost = err
            self.mu.notify_all()
            fenced: List[Lock] = []
            for h in list(self.holds.values()):
                fenced += self._lose_hold_locked(h, err)
        self.stop.set()
        self.c._ka.remove(self)
        self.c._forget_session(self)
        if fence:
            run_fences(fenced)

    def end(self, key: str, cause: Optional[BaseException]) -> None:
        """Give up on the session because the state of its hold of ``key``
        could not be learned: stop renewing it, so the hold expires with
        its lease, and lose every lock of it."""
        log.warning("ending lock session %d: could not learn whether its hold of %s still exists (%s); "
                    "it expires with the session", self.id, key, cause)
        self.lose(errors.SessionEnded("lock lost: session ended because a hold's state could not be confirmed"), True)
        self.c._background(lambda: self.c._end_session(self.id))

    # -- keepalives ------------------------------------------------------

    def _run_keepalive(self) -> None:
        interval = self.ttl / 3
        answer_within = min(interval, 1.0)
        next_tick = time.monotonic() + interval
        while not self.stop.wait(max(next_tick - time.monotonic(), 0.0)):
            next_tick += interval
            with self.mu:
                if self.lost is not None:
                    return
                sent = time.monotonic()
                self.last_sent = sent
                past = self._remaining_locked() <= 0
            if past:
                self.expire_if_due()
                continue
            if not self.c._ka.send(self.id, sent):
                self._fail("send")
                continue
            if self.stop.wait(answer_within):
                return
            with self.mu:
                unanswered = self.last_ans < sent
            if unanswered:
                self._fail("no answer")

    def _fail(self, what: str) -> None:
        with self.mu:
            first = not self.degraded and self.lost is None
            self.degraded = True
        if first:
            log.warning("lock session %d keepalive failed (%s): can_start() is false", self.id, what)

    def on_answer(self, sent: float, resp: Any) -> None:
        """Apply the answer to the keepalive sent at ``sent``."""
        fenced: List[Lock] = []
        expired: Optional[errors.LockLost] = None
        with self.mu:
            if self.lost is not None:
                return
            if sent > self.last_ans:
                self.last_ans = sent
            # Holds released by force first: a force-release that also
            # revoked the session names who and why, not only "expired".
            fenced += self._removed_locked(resp.removed)
            if seconds(resp.ttl) <= 0:
                if resp.unprotected_ended:
                    expired = errors.UnprotectedEnded("lock lost: an unprotected grant (made without quorum) ended")
                else:
                    expired = errors.Expired("lock lost: session expired")
            else:
                if resp.epoch > self.epoch:
                    self.epoch = resp.epoch
                    for h in list(self.holds.values()):
                        # An unprotected hold (token 0) belongs to no epoch.
                        if h.state == HELD and not h.unprotected and h.epoch < resp.epoch:
                            log.warning("lock of %s lost: the epoch advanced from %d to %d", h.key, h.epoch, resp.epoch)
                            fenced += self._lose_hold_locked(h, errors.EpochAdvanced(
                                "lock lost: the store was restored and the epoch advanced"))
                if sent > self.last_ok and time.monotonic() < self._deadline_locked():
                    self.last_ok = sent
                    self.mu.notify_all()
                if self.last_ans >= self.last_sent:
                    self.degraded = False
        run_fences(fenced)
        if expired is not None:
            log.warning("lock session %d ended: %s", self.id, expired)
            self.lose(expired, True)

    def _removed_locked(self, removed: Any) -> List[Lock]:
        fenced: List[Lock] = []
        for r in removed:
            h = self.holds.get(r.key)
            if r.hold_revision in self.removed or h is None or h.state != HELD or h.revision != r.hold_revision:
                continue
            self.removed.add(r.hold_revision)
            log.warning("lock of %s lost: released by force by %s, approved by %s: %r",
                        h.key, r.requester, r.approver, r.reason)
            fenced += self._lose_hold_locked(h, errors.ForcedError(r.requester, r.approver, r.reason))
        return fenced

    # -- holds -----------------------------------------------------------

    def _lose_hold_locked(self, h: _Hold, err: errors.LockEnded) -> List[Lock]:
        fence = [lock for lock in h.locks if lock._end_locked(err)]
        h.locks = []
        self._drop_locked(h)
        return fence

    def _drop_locked(self, h: _Hold) -> None:
        if self.holds.get(h.key) is h:
            del self.holds[h.key]
        if h.changed is not None:
            h.changed.set()
            h.changed = None

    def settle(self, h: _Hold) -> None:
        """Forget ``h``: its acquire was refused, or its release (or unknown
        acquire) was resolved."""
        with self.mu:
            self._drop_locked(h)

    def enter(self, key: str, lock_class: str, on_fence: OnFence,
              give_up_at: float) -> Tuple[Optional[_Hold], Optional[Lock]]:
        """The session's hold of ``key``: a new Lock when it is granted
        already (re-entry, no call to lockd), or a new hold in ACQUIRING,
        the caller's to grant. Waits while another acquire or a release of
        the key is in flight."""
        while True:
            with self.mu:
                if self.lost is not None:
                    raise _SessionLost()
                h = self.holds.get(key)
                if h is None:
                    h = _Hold(key, lock_class)
                    self.holds[key] = h
                    return h, None
                if h.state == HELD and self._remaining_locked() <= 0:
                    due = True
                elif h.state == HELD:
                    if lock_class and h.lock_class and self.c._class_ref(key, lock_class) != h.lock_class:
                        raise errors.ClassMismatch(
                            f"class mismatch: {key} is held by this client under class {h.lock_class}, "
                            f"not {self.c._class_ref(key, lock_class)}; leave the class out to re-enter it",
                            reason="CLASS_MISMATCH")
                    return None, self._new_lock_locked(h, on_fence)
                else:
                    due = False
                    changed = h.changed
            if due:
                # The deadline passed and the deadline thread has not run
                # yet: lockd may no longer hold it.
                self.expire_if_due()
                continue
            left = give_up_at - time.monotonic()
            if changed is not None and (left <= 0 or not changed.wait(left)):
                raise TimeoutError(f"lockd client: {key} is still being acquired or released on this session")

    def _new_lock_locked(self, h: _Hold, on_fence: OnFence) -> Lock:
        lock = Lock(self, h, on_fence)
        h.locks.append(lock)
        return lock

    def granted(self, h: _Hold, resp: Any, on_fence: OnFence) -> Lock:
        """Record lockd's grant of ``h`` and return its first Lock; on a
        session lost meanwhile, or a token of an epoch seen to pass, the
        Lock comes back lost and its on_fence runs."""
        with self.mu:
            h.token = resp.token.value
            h.epoch = resp.token.epoch
            h.revision = resp.token.revision
            h.unprotected = resp.unprotected
            h.arbiter = resp.arbiter_id
            h.spool_seq = resp.spool_seq
            granted_class = getattr(resp, "class")
            if granted_class:
                h.lock_class = granted_class
            lock = self._new_lock_locked(h, on_fence)
            lost = self.lost
            if lost is None and not h.unprotected and h.epoch < self.epoch:
                lost = errors.EpochAdvanced("lock lost: the store was restored and the epoch advanced")
            elif lost is None and self._remaining_locked() <= 0:
                lost = errors.DeadlinePassed("lock lost: granted after the session's local deadline")
            if lost is None:
                h.state = HELD
                if h.changed is not None:
                    h.changed.set()
                    h.changed = None
                return lock
            self._drop_locked(h)
            lock._end_locked(lost)
        run_fences([lock])
        if isinstance(lost, errors.DeadlinePassed):
            self.expire_if_due()
        return lock

    # -- release and resolution ------------------------------------------

    def release(self, lock: Lock, timeout: Optional[float]) -> bool:
        with self.mu:
            if lock._error is not None:
                return False
            h = lock._h
            lock._end_locked(errors.Released("lock released"))
            h.locks.remove(lock)
            if h.locks:
                return True
            # The last Lock: no acquire may re-enter this hold any more; a
            # new one waits for the release and is then a new grant.
            h.state = SETTLING
            h.changed = threading.Event()
        attempt = RESOLVE_ATTEMPT_TIMEOUT if timeout is None else min(timeout, RESOLVE_ATTEMPT_TIMEOUT)
        held, ok, err = self.release_once(h.key, h.token, attempt)
        if ok:
            self.settle(h)
            if err is not None:
                raise err
            return held
        result: Dict[str, Any] = {}
        done = threading.Event()

        def resolve() -> None:
            try:
                result["held"], result["err"] = self.resolve_release(h)
            finally:
                done.set()

        if not self.c._background(resolve):
            self.settle(h)
            raise errors.ClientClosed("client closed")
        left = None if timeout is None else max(timeout - attempt, 0.0)
        if not done.wait(left):
            raise TimeoutError(f"lockd did not answer the release of {h.key} in time; "
                               "the client goes on releasing it in the background")
        if result["err"] is not None:
            raise result["err"]
        return bool(result["held"])

    def release_once(self, key: str, token: int,
                     timeout: float) -> Tuple[bool, bool, Optional[errors.ServerError]]:
        """One release attempt: (held, outcome known, error)."""
        try:
            resp = self.c._stub.Release(lock_pb2.ReleaseRequest(session_id=self.id, key=key, token=token),
                                        timeout=timeout, metadata=self.c._metadata(key))
        except grpc.RpcError as e:
            err = errors.from_rpc_error(e)
        else:
            return resp.released, True, None
        if isinstance(err, errors.StaleToken):
            return False, True, None  # the hold is not this token's any more
        if isinstance(err, errors.SessionNotFound):
            self.lose(errors.Expired("lock lost: session expired"), True)
            return False, True, None
        if err.definite:
            # lockd will not release it for us: end the session so it expires.
            self.end(key, err)
            return False, True, err
        return False, False, err

    def resolve_release(self, h: _Hold) -> Tuple[bool, Optional[errors.ServerError]]:
        try:
            return self.release_token(h.key, h.token)
        finally:
            self.settle(h)

    def release_token(self, key: str, token: int) -> Tuple[bool, Optional[errors.ServerError]]:
        """Release until lockd answers definitively, for at most the TTL;
        then end the session so the hold expires."""
        give_up = time.monotonic() + self.ttl
        last: Optional[errors.ServerError] = None
        while self.alive() and time.monotonic() < give_up and not self.c._stopped.is_set():
            held, ok, err = self.release_once(key, token, RESOLVE_ATTEMPT_TIMEOUT)
            if ok:
                return held, err
            last = err
            self.c._sleep(RESOLVE_BACKOFF)
        if self.alive():
            self.end(key, last)
        return False, last

    def resolve_acquire(self, h: _Hold) -> None:
        """Find out whether an acquire whose outcome was unknown left a hold
        on the session, and release it if so: acquire again without
        waiting, which lockd answers with the session's own hold."""
        try:
            give_up = time.monotonic() + self.ttl
            last: Optional[errors.ServerError] = None
            while self.alive() and time.monotonic() < give_up and not self.c._stopped.is_set():
                try:
                    resp = self.c._stub.Acquire(lock_pb2.AcquireRequest(session_id=self.id, key=h.key),
                                                timeout=RESOLVE_ATTEMPT_TIMEOUT, metadata=self.c._metadata(h.key))
                except grpc.RpcError as e:
                    err = errors.from_rpc_error(e)
                else:
                    self.release_token(h.key, resp.token.value)
                    return
                if isinstance(err, (errors.Held, errors.Leak, errors.EpochGrace)):
                    return  # another session holds it, or an advance deleted every hold
                if isinstance(err, errors.SessionNotFound):
                    self.lose(errors.Expired("lock lost: session expired"), True)
                    return
                if err.definite:
                    self.end(h.key, err)
                    return
                last = err
                self.c._sleep(RESOLVE_BACKOFF)
            if self.alive():
                self.end(h.key, last)
        finally:
            self.settle(h)


class _Stream:
    """One open KeepAlive stream and its unanswered sends."""

    def __init__(self, ka: "_KeepAlives") -> None:
        self.ka = ka
        self.requests: "queue.Queue[Optional[Any]]" = queue.Queue()
        self.pending: Dict[int, Deque[float]] = {}  # guarded by ka.mu
        self.broken = threading.Event()
        self.call: Optional[Any] = None

    def _iterate(self) -> Iterator[Any]:
        while True:
            req = self.requests.get()
            if req is None:
                return
            yield req

    def start(self) -> None:
        """Open the stream (grpc starts the call without blocking) and
        start receiving its answers."""
        try:
            self.call = self.ka.c._stub.KeepAlive(self._iterate(), metadata=self.ka.c._metadata())
        except Exception as e:  # a closed channel
            log.debug("keepalive stream: open failed: %s", e)
            self.fail()
            return
        threading.Thread(target=self._receive, name="lockd-keepalive-recv", daemon=True).start()

    def _receive(self) -> None:
        try:
            for resp in self.call:  # type: ignore[union-attr]
                self.ka.answer(self, resp)
        except grpc.RpcError as e:
            log.debug("keepalive stream ended: %s", e.code() if hasattr(e, "code") else e)
        except Exception:
            log.exception("keepalive stream: receiving failed")
        finally:
            self.fail()

    def fail(self) -> None:
        if self.broken.is_set():
            return
        self.broken.set()
        self.requests.put(None)
        if self.call is not None:
            self.call.cancel()


class _KeepAlives:
    """The client's one KeepAlive stream, shared by its sessions. Answers
    come back in the order of the requests, so each is matched with the
    oldest unanswered send time of its session: a late answer is credited
    to the earlier send, never to a later one."""

    def __init__(self, client: "Client") -> None:
        self.c = client
        self.mu = threading.Lock()
        self.sessions: Dict[int, _Session] = {}
        self.stream: Optional[_Stream] = None
        self.closed = False

    def add(self, s: _Session) -> None:
        with self.mu:
            self.sessions[s.id] = s

    def remove(self, s: _Session) -> None:
        with self.mu:
            if self.sessions.get(s.id) is s:
                del self.sessions[s.id]

    def send(self, sid: int, sent: float) -> bool:
        """Queue one keepalive of session ``sid``; false when it cannot be."""
        start: Optional[_Stream] = None
        with self.mu:
            if self.closed:
                return False
            st = self.stream
            if st is None or st.broken.is_set():
                st = start = self.stream = _Stream(self)
            st.pending.setdefault(sid, collections.deque()).append(sent)
            st.requests.put(lock_pb2.KeepAliveRequest(session_id=sid))
        if start is not None:
            start.start()  # outside the lock: nothing network-bound under it
        return True

    def answer(self, st: _Stream, resp: Any) -> None:
        if resp.cluster:
            return  # a cluster lease renewal: this client asks for none
        with self.mu:
            q = st.pending.get(resp.session_id)
            if not q:
                return
            sent = q.popleft()
            if not q:
                del st.pending[resp.session_id]
            s = self.sessions.get(resp.session_id)
        if resp.uncredited or s is None:
            return  # lockd could not vouch for it: as good as no answer
        s.on_answer(sent, resp)

    def close(self) -> None:
        with self.mu:
            self.closed = True
            st, self.stream = self.stream, None
        if st is not None:
            st.fail()
