#!/usr/bin/env bash
# Runs every Fuzz target of the module for a short time each (default 5s).
# Usage: scripts/fuzz.sh [fuzztime]
#
# Each package with fuzz targets is compiled once (go test -c -fuzz, which
# adds the coverage instrumentation fuzzing needs); its binary then fuzzes
# one target after the other. `go test -fuzz` would rebuild the package for
# every target. A binary runs in its package's directory, so it reads the
# seed corpus in testdata/fuzz and writes a failing input there, and it
# shares go test's fuzz cache ($GOCACHE/fuzz/<import path>).
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
for dir in "${dirs[@]}"; do
  pkg=$(go list -f '{{.ImportPath}}' "./$dir")
  test="$bin/$(echo "$dir" | tr / _).test"
  echo "fuzz: build $pkg"
  go test -c -fuzz . -o "$test" "./$dir"
  for target in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(/\1/'); do
    echo "fuzz: $dir $target ($fuzztime)"
    targets=$((targets + 1))
    (cd "$dir" && "$test" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
      -test.fuzzcachedir "$cache/$pkg" -test.timeout 10m)
  done
done
echo "fuzz: ${targets} targets in ${#dirs[@]} packages, ${SECONDS}s"
