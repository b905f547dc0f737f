"""Fixtures that start a real lockd: clients/testlockd, pkg/lockdtest's lockd
as a process (embedded etcd, insecure loopback, lockdtest's classes and
operators), built once per test session with ``go build`` and started once,
with a TCP proxy in front that a test can stall. A machine without ``go``
fails the tests that need it; none is skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from typing import Callable, Iterator, List, Optional

import grpc
import pytest

import lockd
from lockd._gen.lock.v1 import lock_pb2, lock_pb2_grpc

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

# pkg/lockdtest's identities (its Classes grant Alice and Bob t/; Carol
# only t/carol/; the operators run force-releases).
ALICE = "spiffe://test.local/alice"
BOB = "spiffe://test.local/bob"
CAROL = "spiffe://test.local/carol"
OPERATOR = "spiffe://test.local/operator"
OPERATOR2 = "spiffe://test.local/operator-2"


class Server:
    """A running testlockd."""

    def __init__(self, proc: subprocess.Popen, addr: str, proxy: str) -> None:
        self.proc = proc
        self.addr = addr
        self.proxy = proxy
        self._mu = threading.Lock()

    def _command(self, cmd: str) -> None:
        with self._mu:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline().strip()
        assert answer == "ok", f"testlockd answered {cmd!r} with {answer!r}"

    def stall(self) -> None:
        """Hold every byte through the proxy, both ways."""
        self._command("stall")

    def resume(self) -> None:
        self._command("resume")

    def raw(self, identity: str):
        """Raw lock.v1 stubs claiming ``identity``, and the metadata to send."""
        channel = grpc.insecure_channel(self.addr)
        md = ((lockd.client.INSECURE_IDENTITY_HEADER, identity),)
        return lock_pb2_grpc.LockServiceStub(channel), lock_pb2_grpc.AdminServiceStub(channel), md, channel


@pytest.fixture(scope="session")
def testlockd_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not on PATH: the tests build clients/testlockd to run a real lockd")
    out = str(tmp_path_factory.mktemp("bin") / "testlockd")
    build = subprocess.run([go, "build", "-o", out, "./clients/testlockd"], cwd=REPO,
                           capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"go build ./clients/testlockd failed:\n{build.stderr}")
    return out


@pytest.fixture(scope="session")
def server(testlockd_binary: str) -> Iterator[Server]:
    proc = subprocess.Popen([testlockd_binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if not first:
        proc.wait(10)
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"testlockd did not start:\n{err}")
    addrs = json.loads(first)
    srv = Server(proc, addrs["addr"], addrs["proxy"])
    try:
        yield srv
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def key() -> str:
    """A key of class t/std (15 s) no other test uses."""
    return f"t/py/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fast_key() -> str:
    """A key of class t/fast (5 s TTL) no other test uses."""
    return f"t/fast/py/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clients(server: Server) -> Iterator[Callable[..., lockd.Client]]:
    """Makes clients (closed after the test): clients(identity, via_proxy=False)."""
    made: List[lockd.Client] = []

    def make(identity: str = ALICE, via_proxy: bool = False) -> lockd.Client:
        c = lockd.Client(server.proxy if via_proxy else server.addr, insecure_identity=identity)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def inspect(server: Server, key: str) -> lock_pb2.InspectResponse:
    """lockd's view of ``key``, as an operator sees it."""
    stub, _, md, channel = server.raw(OPERATOR)
    try:
        return stub.Inspect(lock_pb2.InspectRequest(key=key), metadata=md, timeout=10)
    finally:
        channel.close()


class Fences:
    """An on_fence that records each call: (lock, time.monotonic(), thread)."""

    def __init__(self) -> None:
        self.calls: List[tuple] = []
        self.event = threading.Event()

    def __call__(self, lock: lockd.Lock) -> None:
        import time
        self.calls.append((lock, time.monotonic(), threading.current_thread()))
        self.event.set()

    def wait(self, timeout: float) -> Optional[tuple]:
        return self.calls[0] if self.event.wait(timeout) else None
