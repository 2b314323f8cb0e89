#!/usr/bin/env bash
# Runs every Fuzz target of the module for a short time each (default 5s).
# Usage: scripts/fuzz.sh [fuzztime]
set -euo pipefail
fuzztime=${1:-5s}
found=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    found=1
    echo "fuzz: $dir $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir"
  done
done < <(git ls-files '*_test.go')
[ "$found" = 1 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
