#!/usr/bin/env bash
# Publish→socket latency at 1,000 sockets over 10 sessions, interleaved in one
# run: the steady stream (ECHO_DELAY=50ms, -rate 1 -words 16: a delta every
# 50 ms, 20 messages/s per socket) and bursty turns (ECHO_DELAY=0s, -rate 4:
# five events per turn, 20 messages/s per socket), each against a fresh
# gateway, then (with BASELINE set) the same with a second gateway binary.
# Prints the load average before each run and a summary at the end.
#
#   ROUNDS=3 scripts/latency.sh
#   BASELINE=/tmp/relay-old/bin/gateway ROUNDS=3 scripts/latency.sh
#
# GATEWAY_ENV adds environment to both gateways, BASELINE_ENV to the baseline
# only: BASELINE=bin/gateway BASELINE_ENV=WRITE_COALESCE=0 compares settings.
set -euo pipefail
cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-1000}
SESSIONS=${SESSIONS:-10}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20s}
PORT=${PORT:-4191}
BASELINE=${BASELINE:-}
GATEWAY_ENV=${GATEWAY_ENV:-}
BASELINE_ENV=${BASELINE_ENV:-}

source scripts/lib/embedded-env.sh

# run NAME BINARY TRAFFIC ECHO_DELAY LOAD_FLAGS...
run() {
  local name=$1 bin=$2 traffic=$3 delay=$4 log load extra=
  shift 4
  [ "$name" = baseline ] && extra=$BASELINE_ENV
  # shellcheck disable=SC2086
  env ECHO_DELAY=$delay ADDR=127.0.0.1:$PORT LOG_LEVEL=warn $GATEWAY_ENV $extra "$bin" >/dev/null 2>&1 &
  gw=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== round $r $traffic $name ($bin), load average: $load"
  log=$(bin/relay-load -ws ws://127.0.0.1:$PORT/socket/websocket -post http://127.0.0.1:$PORT \
    -token "$TOKEN" -sockets "$SOCKETS" -sessions "$SESSIONS" -duration "$DURATION" -pids "$gw" "$@")
  echo "$log"
  kill "$gw"; wait "$gw" 2>/dev/null || true; gw=
  echo "$traffic $name ${load%% *} $(echo "$log" | sed -nE 's/.*p50 ([^ ]+) +p90 ([^ ]+) +p99 ([^ ]+) .*/\1 \2 \3/p') $(echo "$log" | sed -nE 's/.*: ([0-9.]+) µs per delivered message/\1/p')" >>"$out"
}

for r in $(seq 1 "$ROUNDS"); do
  run new bin/gateway steady 50ms -rate 1 -words 16
  [ -n "$BASELINE" ] && run baseline "$BASELINE" steady 50ms -rate 1 -words 16
  run new bin/gateway bursty 0s -rate 4
  [ -n "$BASELINE" ] && run baseline "$BASELINE" bursty 0s -rate 4
done

echo
echo "== summary: traffic gateway load1 p50 p90 p99 µs-CPU-per-message"
sort -s -k1,2 "$out"
