#!/usr/bin/env bash
# Runs the README's demo on a fresh copy of the tree: start lockd with no
# flags, then take a lock with lockctl and print its token.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$work")
cd "$work"
go build -o "$work/bin/lockd" ./cmd/lockd
go build -o "$work/bin/lockctl" ./cmd/lockctl
"$work/bin/lockd" >"$work/lockd.log" 2>&1 &
pid=$!
# Ready means this lockd wrote its lockctl config (it does so before serving)
# and /readyz answers; another lockd on the same ports must not pass for it.
for _ in $(seq 1 100); do
  [ -f "$work/.lockd/lockctl.yaml" ] && curl -fsS http://127.0.0.1:7421/readyz >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if ! kill -0 "$pid" 2>/dev/null || [ ! -f "$work/.lockd/lockctl.yaml" ]; then
  echo "lockd did not start (is another lockd on 127.0.0.1:7420-7423?):"; cat "$work/lockd.log"; exit 1
fi
curl -fsS http://127.0.0.1:7421/readyz
out=$("$work/bin/lockctl" lock demo/x --class demo -- sh -c 'echo $LOCK_TOKEN')
echo "lockctl printed: $out"
[[ "$out" =~ ^[0-9]+$ ]] || { echo "expected a token"; cat "$work/lockd.log"; exit 1; }
"$work/bin/lockctl" inspect demo/x
"$work/bin/lockctl" epoch status
echo "demo ok"
