#!/usr/bin/env bash
# Fuzzes every Fuzz target of the module for a while each (make fuzz).
# Usage: scripts/fuzz.sh [fuzztime]   (default 5s; a count such as 20000x
# also works: see -fuzztime in go help testflag)
#
# Not part of make test: every target's seed corpus (f.Add and
# testdata/fuzz) already runs there as an ordinary test.
#
# Each package with fuzz targets is compiled once (go test -c -fuzz, which
# adds the coverage instrumentation fuzzing needs); its binary then fuzzes
# one target after the other. `go test -fuzz` would rebuild the package for
# every target. A binary runs in its package's directory, so it reads the
# seed corpus in testdata/fuzz and writes a failing input there, and it
# shares go test's fuzz cache ($GOCACHE/fuzz/<import path>).
#
# A target fails the run when it finds something: a failing input is
# written to testdata/fuzz/<target>/ and the script stops with the
# command that replays it. One failure is not a finding: Go's fuzzing
# coordinator can report its own -fuzztime deadline as an error ("context
# deadline exceeded", no failing input written), most often on a loaded
# machine. Such a run is reported, its seed corpus replayed as a check, and
# the script goes on; a count-based fuzztime (20000x) has no deadline and
# never hits it.
set -euo pipefail
fuzztime=${1:-5s}
root=$(git rev-parse --show-toplevel)
cd "$root"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache=$(go env GOCACHE)/fuzz

# Package directories holding fuzz targets, each once.
mapfile -t dirs < <(git ls-files '*_test.go' | xargs grep -lE '^func Fuzz[A-Za-z0-9_]*\(' | xargs -n1 dirname | sort -u)
[ ${#dirs[@]} -gt 0 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }

targets=0
deadline=()
for dir in "${dirs[@]}"; do
  pkg=$(go list -f '{{.ImportPath}}' "./$dir")
  test="$bin/$(echo "$dir" | tr / _).test"
  echo "fuzz: build $pkg"
  go test -c -fuzz . -o "$test" "./$dir"
  for target in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(/\1/'); do
    echo "fuzz: $dir $target ($fuzztime)"
    targets=$((targets + 1))
    out="$bin/out"
    if (cd "$dir" && "$test" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
      -test.fuzzcachedir "$cache/$pkg" -test.timeout 10m) 2>&1 | tee "$out"; then
      continue
    fi
    # A finding writes its input first ("Failing input written to ...");
    # the coordinator's own deadline is the bare context error and nothing
    # else failed.
    if ! grep -q 'Failing input written to' "$out" &&
      grep -qx '    context deadline exceeded' "$out" &&
      [ "$(grep -c -- '^--- FAIL' "$out")" -eq 1 ]; then
      echo "fuzz: $dir $target: the fuzzing coordinator reported its own -fuzztime deadline (no failing input written); not a finding. Replaying the seed corpus:"
      (cd "$dir" && "$test" -test.run "^${target}\$" -test.timeout 10m)
      deadline+=("$dir $target")
      continue
    fi
    echo "fuzz: $dir $target failed; replay: go test -run '^${target}\$' ./$dir" >&2
    exit 1
  done
done
echo "fuzz: ${targets} targets in ${#dirs[@]} packages, ${SECONDS}s"
if [ ${#deadline[@]} -gt 0 ]; then
  echo "fuzz: stopped by the coordinator's deadline error, seeds replayed: ${deadline[*]}"
fi
