#!/usr/bin/env bash
# Installs the servers the tests start for real, once per machine:
#   - Debian packages: iproute2, postgresql, redis-server, prometheus,
#     prometheus-alertmanager (amtool), clickhouse-server and clickhouse-client;
#     for the Python client (clients/python) and its stubs: python3-grpcio,
#     python3-protobuf, python3-pytest, python3-pyflakes, protobuf-compiler
#     (protoc), libprotobuf-dev (the well-known types protoc imports) and
#     protobuf-compiler-grpc (grpc_python_plugin). The Python modules are
#     checked with /usr/bin/python3, the interpreter Debian installs them for
#     (the repository's .python-version picks it under pyenv).
#   - Gitea v1.26.0 built from the Go module proxy into $LOCKD_TOOLS/bin/gitea
#     (about 12 minutes cold, cached after that; the tests find it there)
#   - MinIO (latest) built with go install into $LOCKD_TOOLS/bin/minio
#     (about 6.5 minutes and 1.6 GB peak cold, cached after that; pkg/fence tests find it there)
#   - kube-apiserver v1.37.2 built from the k8s.io/kubernetes module into
#     $LOCKD_TOOLS/bin/kube-apiserver (about 10 minutes on a quiet machine, 22 under
#     load; 2.4 GB peak memory and 3.4 GB of build caches, deleted after;
#     internal/kubetest finds it there)
# gitea, minio and kube build side by side under all.
# Usage: bash ci/tools.sh [apt|gitea|minio|kube|builds|all]   (default all; builds is the three builds)
set -euo pipefail
LOCKD_TOOLS="${LOCKD_TOOLS:-$HOME/.cache/lockd-tools}"
what="${1:-all}"

apt_packages() {
  local need=()
  command -v ip >/dev/null || need+=(iproute2)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v prometheus >/dev/null || need+=(prometheus)
  command -v amtool >/dev/null || need+=(prometheus-alertmanager)
  command -v clickhouse-server >/dev/null || [ -x /usr/sbin/clickhouse-server ] || need+=(clickhouse-server clickhouse-client)
  command -v protoc >/dev/null || need+=(protobuf-compiler)
  [ -f /usr/include/google/protobuf/duration.proto ] || need+=(libprotobuf-dev)
  command -v grpc_python_plugin >/dev/null || need+=(protobuf-compiler-grpc)
  command -v pytest-3 >/dev/null || need+=(python3-pytest)
  /usr/bin/python3 -c 'import grpc' 2>/dev/null || need+=(python3-grpcio)
  /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || need+=(python3-protobuf)
  /usr/bin/python3 -c 'import pyflakes' 2>/dev/null || need+=(python3-pyflakes)
  if [ ${#need[@]} -gt 0 ]; then
    echo "apt: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    # Debian starts prometheus (:9090) and clickhouse-server (:9000) as
    # services; the tests start their own on free ports.
    if command -v systemctl >/dev/null; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
      systemctl disable --now prometheus-alertmanager >/dev/null 2>&1 || true
      systemctl disable --now clickhouse-server >/dev/null 2>&1 || true
    fi
  fi
}

gitea() {
  local version=1.26.0
  local bin="$LOCKD_TOOLS/bin/gitea"
  local src="$LOCKD_TOOLS/gitea-$version-src"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$version"; then
    echo "gitea $version: cached at $bin"
    return
  fi
  echo "gitea $version: building from the module proxy (about 12 minutes, once)"
  mkdir -p "$LOCKD_TOOLS/bin"
  local dir
  dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "code.gitea.io/gitea@v$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
  (cd "$src" && CGO_ENABLED=1 go build -tags 'sqlite sqlite_unlock_notify' \
      -ldflags "-s -w -X main.Version=$version" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  # Gitea serves its templates and assets from the source tree (STATIC_ROOT_PATH).
  echo "$src" > "$LOCKD_TOOLS/gitea-static-root"
  echo "gitea $version: built at $bin"
}

minio() {
  # Pinned to the pseudo-version @latest resolved to when this was written,
  # so every machine tests against the same server.
  local version=v0.0.0-20260212201848-7aac2a2c5b7c
  local bin="$LOCKD_TOOLS/bin/minio"
  if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "$version"; then
    echo "minio $version: cached at $bin"
    return
  fi
  echo "minio $version: building with go install (about 6.5 minutes, once)"
  mkdir -p "$LOCKD_TOOLS/bin"
  (cd /tmp && GOBIN="$LOCKD_TOOLS/bin" GOFLAGS=-mod=mod go install "github.com/minio/minio@$version")
  echo "minio: built at $bin"
}

kube() {
  local version=1.37.2
  local bin="$LOCKD_TOOLS/bin/kube-apiserver"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qx "Kubernetes v$version"; then
    echo "kube-apiserver v$version: cached at $bin"
    return
  fi
  echo "kube-apiserver v$version: building from the module proxy (about 10-20 minutes, once)"
  mkdir -p "$LOCKD_TOOLS/bin"
  # Caches of its own: 3.4 GB that nothing else reads, deleted after the build.
  local work="$LOCKD_TOOLS/kube-build"
  local src="$work/src"
  (
    export GOMODCACHE="$work/mod" GOCACHE="$work/cache" GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
    local dir
    dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
    cd "$src"
    # The module zip has no staging/: its replaces point nowhere. vendor/
    # holds only OWNERS files and would force -mod=vendor. The staging
    # modules are published at v0.<minor>.<patch> of the same release.
    rm -rf vendor go.work go.work.sum
    sed -i '/^replace (/,/^)/d' go.mod
    sed -i -E "s#^(\tk8s\.io/[a-z0-9-]+) v0\.0\.0\$#\1 v0.${version#1.}#" go.mod
    go build -mod=mod -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=v$version \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2)" \
      -o "$bin.tmp" ./cmd/kube-apiserver
  )
  mv "$bin.tmp" "$bin"
  # Module cache files are read-only: go clean -modcache removes them.
  GOMODCACHE="$work/mod" go clean -modcache
  rm -rf "$work"
  echo "kube-apiserver v$version: built at $bin"
}

# builds runs the three builds side by side (they are mostly independent
# work) and fails if any of them failed, after all have finished.
builds() {
  gitea & local g=$!
  minio & local m=$!
  kube & local k=$!
  local rc=0
  wait $g || rc=1
  wait $m || rc=1
  wait $k || rc=1
  return $rc
}

case "$what" in
  apt) apt_packages ;;
  gitea) gitea ;;
  minio) minio ;;
  kube) kube ;;
  builds) builds ;;
  all) apt_packages; builds ;;
  *) echo "usage: ci/tools.sh [apt|gitea|minio|kube|builds|all]" >&2; exit 2 ;;
esac
