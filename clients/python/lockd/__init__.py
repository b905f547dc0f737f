"""Python client for lockd, the fenced lock service.

The library is thin: lockd enforces every rule; the client keeps sessions
alive, drains at the first failed keepalive and fences at the send-time
deadline::

    import lockd

    client = lockd.Client.from_config(".lockd/lockctl.yaml")
    with client.lock("payments/ledger/42", on_fence=lambda lock: stop_writing()) as lock:
        while lock.can_start():          # false from the first failed keepalive
            write_one_batch(lock.token)  # the resource rejects a token not above its last

* ``on_fence`` is required. It runs on its own thread at the local deadline
  -- the ``time.monotonic()`` send time of the last successful keepalive
  plus the TTL minus one second, which passes before the store can expire
  the session -- or as soon as lockd says the hold is gone (expired, forced
  by operators, epoch advanced). No RPC in flight can delay it.
* Neither stage stops a holder that is paused (GC, SIGSTOP, a VM freeze)
  past its deadline: only a resource that compares the token on its own
  write rejects such a late write.
* Errors are in :mod:`lockd.errors`, one class per lockd reason.
"""

import logging

from . import errors
from .client import TLS, Client
from .lock import Lock, OnFence, State

# The library logs to "lockd" (never a token); the application decides
# where that goes.
logging.getLogger("lockd").addHandler(logging.NullHandler())

__all__ = ["Client", "TLS", "Lock", "OnFence", "State", "errors"]
