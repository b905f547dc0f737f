"""The client against a real lockd (clients/testlockd): grants, re-entry,
drain then fence, force-release, refusals, the class from the key."""

from __future__ import annotations

import threading
import time

import pytest

import lockd
from lockd import errors
from lockd._gen.lock.v1 import lock_pb2

from conftest import ALICE, BOB, CAROL, OPERATOR, OPERATOR2, Fences, inspect

FAST_TTL = 5.0


def never(lock):
    raise AssertionError(f"on_fence ran for {lock.key}: {lock.error}")


def test_a_grant_carries_a_token_that_increases(clients, key, server):
    c = clients()
    first = c.acquire(key, on_fence=never)
    assert first.token > 0 and first.can_start() and first.state() is lockd.State.SAFE
    assert inspect(server, key).hold.token.value == first.token
    assert first.release() is True
    second = c.acquire(key, on_fence=never)
    assert second.token > first.token
    second.release()


def test_the_context_manager_releases_at_the_end_of_the_block(clients, key, server):
    c = clients()
    with c.lock(key, on_fence=never) as lock:
        assert inspect(server, key).held
        assert lock.key == key
    assert not inspect(server, key).held
    assert lock.ended and isinstance(lock.error, errors.Released)


def test_on_fence_is_required(clients, key):
    with pytest.raises(TypeError, match="on_fence"):
        clients().acquire(key, on_fence=None)


def test_reentry_shares_the_hold_without_a_call_and_releases_at_zero(clients, key, server):
    c = clients()
    outer = c.acquire(key, on_fence=never)
    calls = []
    real = c._stub.Acquire

    def counting(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    c._stub.Acquire = counting
    inner = c.acquire(key, on_fence=never)
    assert calls == [], "the re-entrant acquire called lockd"
    assert inner.token == outer.token and inner is not outer
    assert inner.release() is True
    assert inspect(server, key).held, "released at lockd while the outer acquirer still holds it"
    assert outer.can_start()
    assert outer.release() is True
    assert not inspect(server, key).held


def test_the_class_and_its_ttl_are_taken_from_the_key(clients, fast_key, key):
    c = clients()
    with c.lock(fast_key, on_fence=never) as fast, c.lock(key, on_fence=never) as std:
        assert fast.lock_class == "t/fast"
        assert FAST_TTL - 3 < fast.remaining_ttl() <= FAST_TTL - 1
        assert std.lock_class == "t/std"
        assert 12 < std.remaining_ttl() <= 14
        assert fast.deadline == pytest.approx(time.monotonic() + fast.remaining_ttl(), abs=0.05)


def test_naming_another_class_is_refused(clients, fast_key):
    with pytest.raises(errors.ClassMismatch) as e:
        clients().acquire(fast_key, on_fence=never, lock_class="std")
    assert e.value.definite and e.value.reason == "CLASS_MISMATCH"


def test_a_wait_ends_with_wait_timeout_after_the_wait(clients, key):
    bob = clients(BOB)
    held = bob.acquire(key, on_fence=never)
    alice = clients(ALICE)
    with pytest.raises(errors.Held):  # no wait: held, at once
        alice.acquire(key, on_fence=never)
    began = time.monotonic()
    with pytest.raises(errors.WaitTimeout):
        alice.acquire(key, on_fence=never, wait=1.0)
    assert 0.9 < time.monotonic() - began < 3
    # A waiter in line gets it when the holder lets go.
    threading.Timer(0.5, held.release).start()
    got = alice.acquire(key, on_fence=never, wait=10)
    assert got.token > held.token
    got.release()


def test_the_same_identity_under_another_session_is_a_leak(clients, key):
    first, second = clients(ALICE), clients(ALICE)
    held = first.acquire(key, on_fence=never)
    began = time.monotonic()
    with pytest.raises(errors.Leak):
        second.acquire(key, on_fence=never, wait=5)
    assert time.monotonic() - began < 2, "a leak queued behind itself"
    held.release()


def test_a_key_the_identity_may_not_use_is_denied(clients, key):
    with pytest.raises(errors.Denied):
        clients(CAROL).acquire(key, on_fence=never)


def test_drain_at_the_first_failed_keepalive_then_fence_at_the_send_time_deadline(clients, fast_key, server):
    c = clients(via_proxy=True)
    fences = Fences()
    lock = c.acquire(fast_key, on_fence=fences)
    time.sleep(2)  # past one keepalive
    stalled = time.monotonic()
    server.stall()
    try:
        # An RPC in flight on the stalled connection must not delay the fence.
        hung = threading.Thread(target=lambda: _try(lambda: c.acquire(fast_key + "-other", on_fence=never)),
                                daemon=True)
        hung.start()
        while lock.can_start():
            assert time.monotonic() - stalled < FAST_TTL / 3 + 1.5, "can_start still true after a keepalive failed"
            time.sleep(0.05)
        drained = time.monotonic()
        assert lock.state() is lockd.State.JEOPARDY and not lock.ended
        assert lock.remaining_ttl() > 0, "drained only at the deadline"
        called = fences.wait(FAST_TTL + 2)
        assert called is not None, "on_fence did not run"
        got, at, thread = called
        assert got is lock and isinstance(lock.error, errors.DeadlinePassed)
        assert thread is not threading.main_thread()
        # Every keepalive answered was sent before the stall.
        assert at <= stalled + FAST_TTL - 1 + 0.5, f"fenced {at - stalled:.2f}s after the stall"
        assert at >= lock.deadline - 0.01
        assert drained < at
        assert lock.state() is lockd.State.ENDED and not lock.can_start() and lock.remaining_ttl() == 0
        assert lock.release() is False  # lost: nothing to release
    finally:
        server.resume()


def _try(fn):
    try:
        fn()
    except Exception:
        pass


def test_a_blip_drains_and_recovers_without_a_fence(clients, fast_key, server):
    c = clients(via_proxy=True)
    lock = c.acquire(fast_key, on_fence=never)
    server.stall()
    try:
        began = time.monotonic()
        while lock.can_start():
            assert time.monotonic() - began < FAST_TTL / 3 + 1.5
            time.sleep(0.05)
    finally:
        server.resume()
    began = time.monotonic()
    while not lock.can_start():
        assert time.monotonic() - began < 2 * FAST_TTL / 3 + 1, "can_start did not come back"
        time.sleep(0.05)
    assert lock.release() is True


def test_a_force_release_tells_who_requested_who_approved_and_why(clients, fast_key, server):
    c = clients()
    fences = Fences()
    lock = c.acquire(fast_key, on_fence=fences)
    _, admin1, md1, ch1 = server.raw(OPERATOR)
    _, admin2, md2, ch2 = server.raw(OPERATOR2)
    try:
        req = admin1.RequestForceRelease(lock_pb2.RequestForceReleaseRequest(key=fast_key, reason="pytest: wedged"),
                                         metadata=md1, timeout=10)
        admin2.ApproveForceRelease(lock_pb2.ApproveForceReleaseRequest(id=req.force_release.id), metadata=md2, timeout=10)
    finally:
        ch1.close()
        ch2.close()
    assert fences.wait(FAST_TTL / 3 + 2) is not None, "not told within a keepalive interval"
    err = lock.error
    assert isinstance(err, errors.ForcedError)
    assert (err.requester, err.approver, err.reason) == (OPERATOR, OPERATOR2, "pytest: wedged")
    again = c.acquire(fast_key, on_fence=never)
    assert again.token > lock.token
    again.release()


def test_close_ends_the_sessions_so_the_key_is_free_at_once(clients, key, server):
    c = lockd.Client(server.addr, insecure_identity=ALICE)
    lock = c.acquire(key, on_fence=never)
    c.close()
    assert isinstance(lock.error, errors.ClientClosed)
    assert not inspect(server, key).held
    with pytest.raises(errors.ClientClosed):
        c.acquire(key, on_fence=never)


def test_a_lock_never_shows_its_token(clients, key):
    with clients().lock(key, on_fence=never) as lock:
        assert str(lock.token) not in repr(lock)
