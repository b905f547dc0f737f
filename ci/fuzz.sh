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

# inputs counts the files in a corpus directory (0 when there is none).
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

for t in "${targets[@]}"; do
	pkg=${t% *} name=${t#* }
	echo "== ./${pkg} ${name} (${fuzztime})"
	start=$SECONDS
	corpus="${pkg}/testdata/fuzz/${name}"
	for attempt in 1 2; do
		before=$(inputs "${corpus}")
		if out=$(go test "./${pkg}" -run '^$' -fuzz "^${name}\$" -fuzztime "${fuzztime}" \
			-fuzzminimizetime 10s -parallel 1 2>&1); then
			break
		fi
		echo "$out"
		# A failing input is written to the corpus directory. A failure
		# that wrote none is the fuzzing engine's own (a rehearsal saw it
		# end a run with "context deadline exceeded" and no input): run
		# the target once more; twice is a failure.
		if [ "$(inputs "${corpus}")" -ne "${before}" ] || [ "${attempt}" -eq 2 ]; then
			exit 1
		fi
		echo "   no failing input was written: running ${name} once more"
	done
	echo "$out" | grep -E '^fuzz: elapsed' | tail -1
	echo "   ok in $((SECONDS - start)) s"
done
echo "fuzz: ${#targets[@]} targets, 0 failing inputs"
