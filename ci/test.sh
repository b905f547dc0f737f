#!/usr/bin/env bash
# The README's test command: installs what the tests need (ci/tools.sh:
# Debian packages once, Gitea, MinIO and kube-apiserver built once into
# ~/.cache/lockd-tools; every later run finds them cached), then runs every
# test. Extra arguments go to `go test` (e.g. bash ci/test.sh -run TestX
# ./pkg/client).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/tools.sh all
if [ $# -eq 0 ]; then set -- ./...; fi
go test "$@"
