#!/usr/bin/env bash
# Runs every Go fuzz target in the module (found by name: func FuzzX in a
# _test.go file), one after another, each for FUZZTIME (default 20s) with
# one fuzzing worker. A target that finds a failing input stops the run;
# Go writes the input under the package's testdata/fuzz/<target>/, where it
# becomes a seed that every `go test` replays.
#
#   bash ci/fuzz.sh                          # every target, 20 s each (.ci/run)
#   FUZZTIME=10m bash ci/fuzz.sh FuzzParse   # targets whose name matches, longer
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20s}
match=${1:-.}

mapfile -t targets < <(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' \
	--exclude-dir=.git --exclude-dir=node_modules . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz.*)$#\1 \2#' | sort -u | grep -E " .*${match}")
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no target matches ${match}" >&2; exit 1; }

for t in "${targets[@]}"; do
	pkg=${t% *} name=${t#* }
	echo "== ./${pkg} ${name} (${fuzztime})"
	start=$SECONDS
	out=$(go test "./${pkg}" -run '^$' -fuzz "^${name}\$" -fuzztime "${fuzztime}" \
		-fuzzminimizetime 10s -parallel 1 2>&1) || { echo "$out"; exit 1; }
	echo "$out" | grep -E '^fuzz: elapsed' | tail -1
	echo "   ok in $((SECONDS - start)) s"
done
echo "fuzz: ${#targets[@]} targets, 0 failing inputs"
