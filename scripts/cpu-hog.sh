#!/usr/bin/env bash
# Keeps N CPUs busy for a bounded time, to check that the tests hold on a
# loaded machine: run it beside `make test` or a `go test` run.
# Usage: scripts/cpu-hog.sh N [seconds]   (default 900 s)
# Each busy loop ends by itself after the given seconds; Ctrl-C or SIGTERM
# ends them all at once.
set -euo pipefail
n=${1:?usage: scripts/cpu-hog.sh N [seconds]}
secs=${2:-900}
[[ $n =~ ^[0-9]+$ && $secs =~ ^[0-9]+$ ]] || { echo "cpu-hog: N and seconds must be whole numbers" >&2; exit 2; }

pids=()
stop() {
  trap - INT TERM EXIT
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

for _ in $(seq 1 "$n"); do
  # A subshell spinning until its own deadline (bash's SECONDS counts
  # seconds since the shell started).
  ( end=$((SECONDS + secs)); while ((SECONDS < end)); do :; done ) &
  pids+=($!)
done
echo "cpu-hog: $n busy loop(s) for ${secs}s (pids ${pids[*]})"
wait
