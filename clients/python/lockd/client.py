"""The lockd client: sessions per TTL, one keepalive stream, and acquires."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import grpc
from google.protobuf import duration_pb2

from . import config, errors
from ._gen.lock.v1 import lock_pb2, lock_pb2_grpc
from ._session import _KeepAlives, _Session, _SessionLost, seconds
from .lock import Lock, OnFence

log = logging.getLogger("lockd")

#: The metadata header a lockd started with --insecure-loopback reads the
#: caller's SPIFFE ID from (tests only).
INSECURE_IDENTITY_HEADER = "x-lockd-insecure-identity"
#: The header that carries a call's key, for a balancer (Envoy) that routes
#: the calls about one key to one lockd.
ROUTE_HEADER = "x-lock-key"

#: How much longer than its wait an Acquire call may take.
ACQUIRE_SLACK = 10.0
#: Bound of every other call.
CALL_TIMEOUT = 10.0
#: How long an Acquire without a wait keeps asking when lockd answers MOVING.
MOVING_RETRY = 1.0
#: How long the client keeps asking lockd to end a session it gave up.
END_SESSION_FOR = 120.0
#: How long close() waits for lockd to end the sessions.
CLOSE_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class TLS:
    """Mutual TLS: the CA that signed lockd's certificate, and the caller's
    X.509 SVID and its key (PEM files)."""

    ca: str
    cert: Optional[str] = None
    key: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files."""

        def read(path: Optional[str]) -> Optional[bytes]:
            if not path:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise errors.ConfigError(f"read {path}: {e.strerror}") from None

        if bool(self.cert) != bool(self.key):
            raise errors.ConfigError("a client certificate and its key must be given together")
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca), private_key=read(self.key),
                                            certificate_chain=read(self.cert))


class Client:
    """A lockd client. Safe to use from many threads.

    It opens one session per TTL on demand and shares it among the holds of
    that TTL, renewing every session on one KeepAlive stream, one keepalive
    each TTL/3. Connect with mutual TLS (``tls``, or :meth:`from_config`
    with lockctl's config file), or to a lockd started with
    ``--insecure-loopback`` for tests (``insecure_identity``)::

        client = lockd.Client.from_config(".lockd/lockctl.yaml")
        with client.lock("payments/ledger/42", on_fence=stop_writing) as lock:
            while lock.can_start():
                do_one_unit(lock.token)

    Nothing is sent until the first call. Close it (or use it as a context
    manager) to end its sessions at once rather than when they expire.
    """

    def __init__(self, target: str, *, tls: Optional[TLS] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 insecure_identity: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        if not target:
            raise errors.ConfigError("no lockd address")
        md: List[Tuple[str, str]] = []
        if insecure_identity:
            self._channel = grpc.insecure_channel(target, options=list(options))
            md.append((INSECURE_IDENTITY_HEADER, insecure_identity))
        elif tls is not None or credentials is not None:
            creds = credentials if credentials is not None else tls.credentials()  # type: ignore[union-attr]
            self._channel = grpc.secure_channel(target, creds, options=list(options))
        else:
            raise errors.ConfigError("no credentials: pass tls=, credentials=, or insecure_identity= for tests")
        self.target = target
        self._md = tuple(md)
        self._stub = lock_pb2_grpc.LockServiceStub(self._channel)
        self._mu = threading.Lock()  # never held across an RPC
        self._sessions: Dict[Tuple[float, bool], _Session] = {}
        self._class_ttl: Dict[str, float] = {}
        self._ns_classes: Dict[str, List[Any]] = {}
        self._closed = False
        self._background_threads: List[threading.Thread] = []
        self._stopped = threading.Event()  # background work ends
        self._ka = _KeepAlives(self)

    @classmethod
    def from_config(cls, path: str = ".lockd/lockctl.yaml", context: Optional[str] = None) -> "Client":
        """A client for a context of lockctl's config file (the current
        context when ``context`` is None): its server, with its CA, SVID
        and key, or its insecure identity. lockd's development server
        writes such a file to ``./.lockd/lockctl.yaml``."""
        cx = config.load(path).context(context)
        if cx.insecure_identity:
            return cls(cx.server, insecure_identity=cx.insecure_identity)
        if not cx.ca:
            raise errors.ConfigError(f"{path}: context {cx.name!r} names neither a CA nor an insecure identity")
        return cls(cx.server, tls=TLS(cx.ca, cx.cert or None, cx.key or None))

    # -- the public API --------------------------------------------------

    def acquire(self, key: str, *, on_fence: OnFence, wait: float = 0.0, lock_class: str = "",
                timeout: Optional[float] = None) -> Lock:
        """Take ``key`` and return its Lock.

        Args:
            key: ``"<namespace>/<path>"``. Its class -- and so its TTL -- is
                the key's own, decided in review (the class of its namespace
                owning the longest prefix of it); the Lock's ``lock_class``
                says which.
            on_fence: required. Called once, on a thread of its own, when
                the lock is lost (expiry, force-release, an epoch advance,
                or the local deadline): stop acting on the resource.
            wait: seconds to wait in line (0: try once). When it runs out
                while another session holds the key, raises WaitTimeout.
            lock_class: optional; naming a class (``"name"`` or
                ``"namespace/name"``) has lockd refuse with ClassMismatch
                when the key is another class's.
            timeout: bounds the whole call (default: ``wait`` + 10 s); an
                acquire or release of the key already in flight on this
                session that outlasts it raises TimeoutError (nothing sent).

        Acquiring a key this client holds on the same session returns a new
        Lock for the same hold without calling lockd. A refusal raises its
        :class:`~lockd.errors.Refused`; an outcome left unknown raises
        :class:`~lockd.errors.UnknownOutcome`, and the client finds out in
        the background whether it was granted and releases it if so.
        """
        if not callable(on_fence):
            raise TypeError("on_fence is required: it is how the holder learns to stop")
        give_up_at = time.monotonic() + (timeout if timeout is not None else wait + ACQUIRE_SLACK)
        ttl = self._ttl_of(key, lock_class)
        retried = no_quorum = False
        while True:
            s = self._session_in(ttl, no_quorum)
            try:
                h, lock = s.enter(key, lock_class, on_fence, give_up_at)
            except _SessionLost:
                continue  # lost while we looked: the next one opens another
            if lock is not None:
                return lock  # re-entrant: the hold is this session's already
            assert h is not None
            try:
                return self._grant(s, h, wait, on_fence, give_up_at)
            except errors.NoQuorumSession:
                if no_quorum:
                    raise
                no_quorum = True  # ask again on a session opened without quorum
            except errors.SessionNotFound:
                if retried:
                    raise
                s.lose(errors.Expired("lock lost: session expired"), True)  # gone at lockd: open another
                retried = True
            except errors.SessionTTL:
                if retried:
                    raise
                self._forget_class(key, lock_class)  # the class TTL changed: look it up again
                ttl = self._ttl_of(key, lock_class)
                retried = True

    @contextlib.contextmanager
    def lock(self, key: str, *, on_fence: OnFence, wait: float = 0.0,
             lock_class: str = "") -> Iterator[Lock]:
        """``with client.lock(key, on_fence=...) as lock:`` -- acquire
        (see :meth:`acquire`), and release when the block ends."""
        held = self.acquire(key, on_fence=on_fence, wait=wait, lock_class=lock_class)
        try:
            yield held
        finally:
            held.release()

    def validate_token(self, key: str, token: int) -> Any:
        """Ask lockd whether ``token`` is the current grant's for ``key``
        (a ValidateTokenResponse). Not atomic with your next write: only
        for resources that cannot compare a fence themselves."""
        try:
            return self._stub.ValidateToken(lock_pb2.ValidateTokenRequest(key=key, token=token),
                                            timeout=CALL_TIMEOUT, metadata=self._metadata(key))
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    @property
    def stub(self) -> lock_pb2_grpc.LockServiceStub:
        """The raw lock.v1 LockService stub (for inspection tools); pass
        :meth:`metadata` with each call."""
        return self._stub

    def metadata(self, key: Optional[str] = None) -> Tuple[Tuple[str, str], ...]:
        """The call metadata this client sends (its insecure identity, the
        key's route header)."""
        return self._metadata(key)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """End every session at lockd (releasing its holds) and close the
        connection, within ``timeout`` seconds. Locks still held end with
        ClientClosed; their on_fence does not run."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions.values())
        for s in sessions:
            s.lose(errors.ClientClosed("client closed"), False)
        enders = [threading.Thread(target=self._end_session, args=(s.id,), daemon=True) for s in sessions]
        for t in enders:
            t.start()
        until = time.monotonic() + timeout
        for t in enders + list(self._background_threads):
            t.join(max(until - time.monotonic(), 0.0))
        self._stopped.set()
        self._ka.close()
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------

    def _metadata(self, key: Optional[str] = None) -> Tuple[Tuple[str, str], ...]:
        if key:
            return self._md + ((ROUTE_HEADER, key),)
        return self._md

    def _background(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on a thread; close() waits for it (within its bound).
        Runs nothing and returns False once the client is closed."""
        with self._mu:
            if self._closed:
                return False
            self._background_threads = [t for t in self._background_threads if t.is_alive()]
            t = threading.Thread(target=fn, name="lockd-background", daemon=True)
            self._background_threads.append(t)
        t.start()
        return True

    def _sleep(self, d: float) -> None:
        self._stopped.wait(d)

    def _forget_session(self, s: _Session) -> None:
        with self._mu:
            key = (s.ttl, s.no_quorum)
            if self._sessions.get(key) is s:
                del self._sessions[key]

    def _session_in(self, ttl: float, no_quorum: bool) -> _Session:
        """The open session of ``ttl`` (opened without quorum when
        ``no_quorum``), opening one if needed."""
        slot = (ttl, no_quorum)
        with self._mu:
            if self._closed:
                raise errors.ClientClosed("client closed")
            s = self._sessions.get(slot)
            if s is not None:
                return s
        sent = time.monotonic()
        try:
            resp = self._stub.OpenSession(lock_pb2.OpenSessionRequest(ttl=_duration(ttl)),
                                          timeout=CALL_TIMEOUT, metadata=self._metadata())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        s = _Session(self, resp.session_id, ttl, no_quorum, sent)
        with self._mu:
            other = self._sessions.get(slot)
            kept = other is None and not self._closed
            if kept:
                self._sessions[slot] = s
        if not kept:
            # Lost a race with another acquire (or closed meanwhile): keep
            # the first, end ours.
            if not self._background(lambda: self._end_session(s.id)):
                self._end_session(s.id)
            if other is None:
                raise errors.ClientClosed("client closed")
            return other
        self._ka.add(s)
        s.start()
        return s

    def _end_session(self, sid: int) -> None:
        """Tell lockd to end a session, asking again while lockd or its store
        is unavailable (for up to END_SESSION_FOR, until the client stops):
        a session merely left to expire would hold its keys for a TTL after
        an outage."""
        until = time.monotonic() + END_SESSION_FOR
        backoff = 0.2
        while True:
            try:
                self._stub.CloseSession(lock_pb2.CloseSessionRequest(session_id=sid), timeout=2.0,
                                        metadata=self._metadata())
                return
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return
            except ValueError:  # the channel is closed
                return
            if self._stopped.wait(backoff) or time.monotonic() > until:
                return
            backoff = min(2 * backoff, 2.0)

    def _grant(self, s: _Session, h: Any, wait: float, on_fence: OnFence, give_up_at: float) -> Lock:
        """Ask lockd for the hold ``h`` stands for, and settle ``h`` with
        the answer. An unknown outcome is asked again on the same session
        while the wait lasts (lockd answers a session's repeated acquire
        with its hold); after that it is resolved in the background."""
        start = time.monotonic()
        deadline = start + wait
        moving_until = start + max(wait, MOVING_RETRY)
        backoff = 0.1
        while True:
            now = time.monotonic()
            left = max(deadline - now, 0.0) if wait > 0 else 0.0
            rpc_timeout = max(min(left + ACQUIRE_SLACK, give_up_at - now), 0.001)
            req = lock_pb2.AcquireRequest(session_id=s.id, key=h.key, wait=_duration(left), **{"class": h.lock_class})
            try:
                resp = self._stub.Acquire(req, timeout=rpc_timeout, metadata=self._metadata(h.key))
            except grpc.RpcError as e:
                err = errors.from_rpc_error(e)
            else:
                if resp.cluster_lease:
                    self._refuse_cluster_lease(s, h, resp)
                return s.granted(h, resp, on_fence)
            if isinstance(err, errors.Moving) and not self._stopped.is_set():
                left_moving = moving_until - time.monotonic()
                if left_moving > 0.01:
                    pause = min(max(err.retry_after or 0.1, 0.01), 1.0, left_moving)
                    log.info("acquire of %s: its range is moving; asking again in %.2fs", h.key, pause)
                    self._sleep(pause)
                    continue
            if err.definite:
                s.settle(h)  # lockd refused: nothing was granted
                raise err
            if wait > 0 and deadline - time.monotonic() > backoff and s.alive() and not self._stopped.is_set():
                log.info("acquire of %s: outcome unknown (%s); asking again on the same session", h.key, err)
                self._sleep(backoff)
                backoff = min(2 * backoff, 1.0)
                continue
            # Unknown: lockd may have granted it on this session. Find out
            # and release it; until then acquires of the key wait.
            if not self._background(lambda: s.resolve_acquire(h)):
                s.settle(h)
            raise err

    def _refuse_cluster_lease(self, s: _Session, h: Any, resp: Any) -> None:
        """lockd put the hold on the session's lease on another etcd
        cluster (an entity shard), which this client does not renew: release
        it rather than hold a lock that would lapse unannounced."""
        token = resp.token.value

        def release() -> None:
            try:
                s.release_token(h.key, token)
            finally:
                s.settle(h)

        if not self._background(release):
            s.settle(h)
        raise errors.Unsupported(
            f"{h.key} was granted on a lease on etcd cluster {resp.cluster!r}, which this client does not "
            "renew (entity shards): use the Go client for such keys; the hold is released")

    def _class_ref(self, key: str, lock_class: str) -> str:
        if "/" in lock_class:
            return lock_class
        return key.split("/", 1)[0] + "/" + lock_class

    def _forget_class(self, key: str, lock_class: str) -> None:
        with self._mu:
            if lock_class:
                self._class_ttl.pop(self._class_ref(key, lock_class), None)
            else:
                self._ns_classes.pop(key.split("/", 1)[0], None)

    def _ttl_of(self, key: str, lock_class: str) -> float:
        """The TTL of the class ``key`` is acquired under, asking lockd once
        per class (once per namespace for a key acquired without one)."""
        if not lock_class:
            return self._key_ttl(key)
        ref = self._class_ref(key, lock_class)
        with self._mu:
            ttl = self._class_ttl.get(ref)
        if ttl is not None:
            return ttl
        ns, name = ref.split("/", 1)
        try:
            resp = self._stub.DescribeClass(lock_pb2.DescribeClassRequest(namespace=ns, name=name),
                                            timeout=CALL_TIMEOUT, metadata=self._metadata())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        ttl = seconds(getattr(resp, "class").ttl)
        with self._mu:
            self._class_ttl[ref] = ttl
        return ttl

    def _key_ttl(self, key: str) -> float:
        """The TTL of the key's own class, from lockd's list of its
        namespace's classes (asked once, and again when no class listed owns
        the key). lockd decides the class; this is only the TTL of the
        session to ask on."""
        ns = key.split("/", 1)[0]
        with self._mu:
            owner = _owner_of(self._ns_classes.get(ns, []), key)
        if owner is None:
            try:
                resp = self._stub.ListClasses(lock_pb2.ListClassesRequest(namespace=ns),
                                              timeout=CALL_TIMEOUT, metadata=self._metadata())
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None
            with self._mu:
                self._ns_classes[ns] = list(resp.classes)
            owner = _owner_of(resp.classes, key)
        if owner is not None:
            return seconds(owner.ttl)
        # No class listed owns it: lockd answers an acquire of it without a
        # session with its refusal of the key (NO_CLASS, or DENIED).
        try:
            self._stub.Acquire(lock_pb2.AcquireRequest(key=key), timeout=CALL_TIMEOUT, metadata=self._metadata(key))
        except grpc.RpcError as e:
            err = errors.from_rpc_error(e)
            if err.definite and not isinstance(err, errors.SessionNotFound):
                raise err from None
        raise errors.NoClass(f"lockd listed no class of namespace {ns} owning {key}", reason="NO_CLASS")


def _owner_of(classes: Sequence[Any], key: str) -> Optional[Any]:
    """The class owning the longest prefix of ``key``, or None."""
    best, n = None, -1
    for c in classes:
        for p in c.keys:
            if len(p) > n and key.startswith(p):
                best, n = c, len(p)
    return best


def _duration(secs: float) -> duration_pb2.Duration:
    whole = int(secs)
    return duration_pb2.Duration(seconds=whole, nanos=min(int((secs - whole) * 1e9), 999_999_999))

