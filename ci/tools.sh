#!/usr/bin/env bash
# Installs the servers the tests start for real, once per machine:
#   - Debian packages: iproute2, postgresql, redis-server, prometheus,
#     prometheus-alertmanager (amtool), clickhouse-server and clickhouse-client
#   - Gitea v1.26.0 built from the Go module proxy into $LOCKD_TOOLS/bin/gitea
#     (about 12 minutes cold, cached after that; the tests find it there)
#   - MinIO (latest) built with go install into $LOCKD_TOOLS/bin/minio
#     (about 6.5 minutes and 1.6 GB peak cold, cached after that; pkg/fence tests find it there)
# Usage: bash ci/tools.sh [apt|gitea|minio|all]   (default all)
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

case "$what" in
  apt) apt_packages ;;
  gitea) gitea ;;
  minio) minio ;;
  # The two builds are mostly independent work; run them side by side.
  all) apt_packages; gitea & g=$!; minio & m=$!; wait $g; wait $m ;;
  *) echo "usage: ci/tools.sh [apt|gitea|minio|all]" >&2; exit 2 ;;
esac
