#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a bounded time each
# (SBX_FUZZTIME, default 10s), after the seed corpus runs as plain tests.
# Finds targets by name, so a new Fuzz function is picked up without editing
# this file. A failure leaves its input under the package's testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${SBX_FUZZTIME:-10s}
root=$PWD
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
fuzzcache=$(go env GOCACHE)/fuzz
rc=0
declare -A built
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/^.*:func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$line")
	dir=$(dirname "$file")
	pkg=./$dir
	echo "== fuzz $pkg $name ($fuzztime)"
	# Each package's test binary is built once, instrumented for fuzzing
	# as go test -fuzz builds it, and runs each of its targets: go test
	# -fuzz per target linked it again every time (7 s for ./server here,
	# which has ten targets).
	bin=$bins/${dir//\//_}.test
	if [ -z "${built[$dir]:-}" ]; then
		# A package that does not build fails once, not once per target.
		built[$dir]=-
		go test -c -fuzz=. -o "$bin" "$pkg" && built[$dir]=$(go list "$pkg") || rc=1
	fi
	[ "${built[$dir]}" = - ] && continue
	log=$(mktemp)
	# As go test runs it: in the package's folder (its testdata/fuzz seeds
	# are read and a failing input is written there), with go's cache of
	# generated inputs for the package.
	run() { (cd "$root/$dir" && "$bin" -test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$fuzztime" \
		-test.fuzzcachedir="$fuzzcache/${built[$dir]}" -test.paniconexit0) >"$log" 2>&1; }
	# Go's fuzz coordinator can fail a target with a bare "context
	# deadline exceeded" as -fuzztime runs out, having found nothing (a
	# race in its deadline handling, seen under load): such a run, with no
	# failing input written, is run once more; a second one fails.
	ok=1
	run || ok=
	if [ -z "$ok" ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written to' "$log"; then
		echo "scripts/fuzz.sh: $name: the fuzz coordinator's deadline race, no failing input; once more" >&2
		ok=1
		run || ok=
	fi
	if [ -z "$ok" ] || ! grep -q '^PASS$' "$log"; then
		cat "$log"
		echo "scripts/fuzz.sh: $name in $pkg failed" >&2
		rc=1
	elif ! grep -q '^fuzz: elapsed' "$log"; then
		# The test binary passes when -test.fuzz matches nothing: a renamed
		# target must not pass unfuzzed.
		echo "scripts/fuzz.sh: $name in $pkg did not run" >&2
		cat "$log"
		rc=1
	fi
	rm -f "$log"
done < <(git grep -n '^func Fuzz' -- '*_test.go')
exit $rc
