#!/usr/bin/env bash
# Fan-out CPU per delivered message against the floor, interleaved in one run.
# Each round starts a fresh embedded gateway, measures a one-topic fan-out with
# relay-load, stops it, then runs "relay-load floor" with as many sockets and
# about as many deliveries. Prints the load average before each figure.
#
#   SOCKETS=10000 ROUNDS=3 scripts/floor-vs-fanout.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-10000}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-2}            # POSTs per second; each makes 5 events
DURATION=${DURATION:-15s}
PORT=${PORT:-4190}
secs=${DURATION%s}
MESSAGES=${MESSAGES:-$(awk "BEGIN{print int($RATE*5*$secs)}")}

go build -o bin/gateway ./cmd/gateway
go build -o bin/relay-load ./cmd/relay-load
ulimit -n 20000

export JWT_SECRET=$(openssl rand -hex 32)
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
head=$(printf '{"alg":"HS256","typ":"JWT"}' | b64url)
body=$(printf '{"sub":"load","sessions":["*"],"exp":%d}' "$(($(date +%s) + 7200))" | b64url)
sig=$(printf '%s.%s' "$head" "$body" | openssl dgst -sha256 -mac HMAC -macopt "key:$JWT_SECRET" -binary | b64url)
TOKEN="$head.$body.$sig"

gw=
trap '[ -n "$gw" ] && kill "$gw" 2>/dev/null; true' EXIT
for r in $(seq 1 "$ROUNDS"); do
  ECHO_DELAY=0s ADDR=127.0.0.1:$PORT LOG_LEVEL=warn bin/gateway >/dev/null 2>&1 &
  gw=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "== round $r fan-out, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  bin/relay-load -ws ws://127.0.0.1:$PORT/socket/websocket -post http://127.0.0.1:$PORT \
    -token "$TOKEN" -sockets "$SOCKETS" -sessions 1 -rate "$RATE" -duration "$DURATION" -pids "$gw"
  echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  kill "$gw"; wait "$gw" 2>/dev/null || true; gw=
  echo "== round $r floor, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  bin/relay-load floor -sockets "$SOCKETS" -messages "$MESSAGES" -rate "$(awk "BEGIN{print $RATE*5}")"
  echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
