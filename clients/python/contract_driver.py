#!/usr/bin/env python3
"""The client contract suite's driver for the Python client.

Reads steps as JSON lines on stdin and writes results and events as JSON
lines on stdout; the protocol is in the suite's package doc
(clients/contract/doc.go). Each step runs on its own thread, so a waiting
acquire does not hold up the steps after it.

    python3 clients/python/contract_driver.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import lockd  # noqa: E402
from lockd import errors  # noqa: E402
from lockd._gen.rpcstatus import status_pb2  # noqa: E402

_LOST_KINDS = [
    (errors.DeadlinePassed, "deadline"),
    (errors.Expired, "expired"),
    (errors.ForcedError, "forced"),
    (errors.EpochAdvanced, "epoch"),
    (errors.SessionEnded, "session_ended"),
    (errors.UnprotectedEnded, "unprotected_ended"),
    (errors.Released, "released"),
    (errors.ClientClosed, "closed"),
]


class _Answer(grpc.RpcError):
    """An error answer as grpc would raise it, for the decode step."""

    def __init__(self, code: grpc.StatusCode, message: str, trailing: List[Any]) -> None:
        super().__init__(message)
        self._code, self._message, self._trailing = code, message, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> List[Any]:
        return self._trailing


def describe(err: BaseException) -> Dict[str, Any]:
    """An error as the protocol reports it: never a token in it."""
    kinds = [c.__name__ for c in type(err).__mro__ if c.__module__ == errors.__name__]
    return {
        "type": type(err).__name__,
        "kinds": kinds,
        "reason": getattr(err, "reason", None) or "",
        "definite": bool(getattr(err, "definite", False)),
        "message": str(err),
    }


def lost(err: Optional[BaseException]) -> Optional[Dict[str, Any]]:
    if err is None:
        return None
    out: Dict[str, Any] = {"kind": "unknown", "type": type(err).__name__, "message": str(err)}
    for cls, kind in _LOST_KINDS:
        if isinstance(err, cls):
            out["kind"] = kind
            break
    if isinstance(err, errors.ForcedError):
        out.update(requester=err.requester, approver=err.approver, why=err.reason)
    return out


def decode(reason: str, code: str, message: str) -> errors.ServerError:
    status_code = getattr(grpc.StatusCode, code or "UNKNOWN")
    trailing: List[Any] = []
    if reason:
        info = status_pb2.ErrorInfo(reason=reason, domain=errors.DOMAIN)
        st = status_pb2.Status(code=status_code.value[0], message=message)
        detail = st.details.add()
        detail.type_url = "type.googleapis.com/google.rpc.ErrorInfo"
        detail.value = info.SerializeToString()
        trailing.append(("grpc-status-details-bin", st.SerializeToString()))
    return errors.from_rpc_error(_Answer(status_code, message, trailing))


class Driver:
    def __init__(self) -> None:
        self.out_lock = threading.Lock()
        self.mu = threading.Lock()
        self.clients: Dict[str, lockd.Client] = {}
        self.locks: Dict[str, lockd.Lock] = {}

    def emit(self, msg: Dict[str, Any]) -> None:
        line = json.dumps(msg)
        with self.out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def step(self, s: Dict[str, Any]) -> None:
        try:
            result = self.do(s)
        except (errors.LockdError, TimeoutError) as e:
            self.emit({"id": s["id"], "ok": False, "error": describe(e)})
        except Exception as e:  # a driver bug: say so
            self.emit({"id": s["id"], "ok": False,
                       "error": {"type": "DriverError", "message": f"{type(e).__name__}: {e}"}})
        else:
            self.emit({"id": s["id"], "ok": True, "result": result})

    def fenced(self, name: str, lock: lockd.Lock) -> None:
        self.emit({"event": "fenced", "lock": name, "mono": time.monotonic(), "deadline": lock.deadline,
                   "can_start": lock.can_start(), "lost": lost(lock.error)})

    def do(self, s: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        op = s["op"]
        if op == "clock":
            return {"mono": time.monotonic()}
        if op == "open":
            client = lockd.Client(s["addr"], insecure_identity=s["identity"])
            with self.mu:
                self.clients[s["client"]] = client
            return None
        if op == "close":
            self.clients[s["client"]].close()
            return None
        if op == "decode":
            return {"error": describe(decode(s.get("reason", ""), s.get("code", ""), s.get("message", "")))}
        if op == "acquire":
            name = s["lock"]
            client = self.clients[s["client"]]
            lock = client.acquire(s["key"], on_fence=lambda lk: self.fenced(name, lk),
                                  wait=float(s.get("wait") or 0), lock_class=s.get("class") or "")
            with self.mu:
                self.locks[name] = lock
            return {"token": str(lock.token), "epoch": lock.epoch, "class": lock.lock_class,
                    "unprotected": lock.unprotected, "can_start": lock.can_start(),
                    "remaining_ttl": lock.remaining_ttl()}
        with self.mu:
            lock = self.locks[s["lock"]]
        if op == "release":
            return {"held": lock.release()}
        if op == "can_start":
            return {"value": lock.can_start()}
        if op == "remaining_ttl":
            return {"seconds": lock.remaining_ttl()}
        if op == "token":
            return {"token": str(lock.token), "epoch": lock.epoch}
        if op == "deadline":
            return {"mono": lock.deadline}
        if op == "state":
            return {"state": str(lock.state()), "lost": lost(lock.error)}
        raise ValueError(f"unknown op {op!r}")

    def run(self) -> int:
        threads = []
        for line in sys.stdin:
            if not line.strip():
                continue
            s = json.loads(line)
            if s.get("op") == "quit":
                break
            t = threading.Thread(target=self.step, args=(s,), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(60)
        for client in list(self.clients.values()):
            client.close()
        return 0


if __name__ == "__main__":
    sys.exit(Driver().run())
