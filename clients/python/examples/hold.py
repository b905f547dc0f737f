#!/usr/bin/env python3
"""Hold a lock on a key and do a few units of work under it.

Connects with lockctl's config file (lockd's dev server writes
./.lockd/lockctl.yaml), takes the key, and before each unit asks the lock
whether a new one may start. Each unit would write to the guarded resource
with ``lock.token`` as its fence (never printed: it is a capability).

    python3 clients/python/examples/hold.py demo/x
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import lockd  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("key", help="the key to lock, <namespace>/<path>")
    p.add_argument("--config", default=".lockd/lockctl.yaml", help="lockctl config file")
    p.add_argument("--context", help="its context (default: the current one)")
    p.add_argument("--units", type=int, default=3, help="units of work to do")
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait in line")
    args = p.parse_args()

    def on_fence(lock: lockd.Lock) -> None:
        # Runs on its own thread when the lock is lost: stop writing at once.
        print(f"fenced: {lock.error}", flush=True)

    try:
        with lockd.Client.from_config(args.config, args.context) as client:
            with client.lock(args.key, on_fence=on_fence, wait=args.wait) as lock:
                print(f"holding {lock.key} under class {lock.lock_class}, "
                      f"local deadline in {lock.remaining_ttl():.0f}s")
                for unit in range(1, args.units + 1):
                    if not lock.can_start():  # a keepalive failed: drain
                        print(f"not starting unit {unit}: {lock.state()}")
                        break
                    time.sleep(0.2)  # one unit of work, fenced with lock.token
                    print(f"unit {unit} done")
            print(f"released {args.key}")
    except lockd.errors.Held as e:  # WaitTimeout too
        print(f"{args.key} is held by another session: {e.reason}", file=sys.stderr)
        return 1
    except lockd.errors.LockdError as e:
        print(f"lockd: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
