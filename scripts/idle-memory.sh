#!/usr/bin/env bash
# What an idle joined socket holds: a fresh embedded gateway, SOCKETS sockets
# joined over 50 session topics and held idle, then the gateway's RSS, Go
# memory classes (/metrics), a heap profile (after a GC) and the goroutine
# stacks, all written to OUT.
#
#   SOCKETS=5000 OUT=/tmp/idle scripts/idle-memory.sh
#
# PROFILE_RATE=1 records every heap allocation (GODEBUG=memprofilerate=1 for
# the gateway only) for an exact breakdown; it slows the gateway down.
set -euo pipefail
cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-5000}
PORT=${PORT:-4191}
OUT=${OUT:-$(mktemp -d -t relay-idle.XXXXXX)}
mkdir -p "$OUT"
go build -o bin/gateway ./cmd/gateway
go build -o bin/relay-load ./cmd/relay-load
ulimit -n 20000
export JWT_SECRET=$(bin/gateway secret --bytes 32) ADMIN_TOKEN=admin-$(bin/gateway secret --bytes 16)
TOKEN=$(bin/gateway token --jwt-secret "$JWT_SECRET" --sub load --sessions '*' --ttl 2h)

GODEBUG=${PROFILE_RATE:+memprofilerate=$PROFILE_RATE} ADDR=127.0.0.1:$PORT LOG_LEVEL=warn bin/gateway >"$OUT/gateway.log" 2>&1 &
gw=$!
# On exit stop what this script started, by pid: the load process (once
# started) and the gateway, waiting for the gateway to finish draining (until
# then it holds PORT).
load=
trap '[ -n "$load" ] && { kill "$load" 2>/dev/null; wait "$load" 2>/dev/null; }; kill "$gw" 2>/dev/null; wait "$gw" 2>/dev/null; true' EXIT
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
snap() {
  local tag=$1 a="Authorization: Bearer $ADMIN_TOKEN" base=http://127.0.0.1:$PORT
  curl -fsS -H "$a" "$base/admin/debug/pprof/heap?gc=1" -o "$OUT/heap-$tag.pb.gz"
  curl -fsS -H "$a" "$base/admin/debug/pprof/goroutine?debug=1" -o "$OUT/goroutine-$tag.txt"
  curl -fsS "$base/metrics" | grep -E '^go_(memstats|goroutines|gc_heap|sched)' >"$OUT/metrics-$tag.txt" || true
  grep -E 'VmRSS|RssAnon' /proc/$gw/status >"$OUT/rss-$tag.txt"
}
snap before
bin/relay-load -ws ws://127.0.0.1:$PORT/socket/websocket -token "$TOKEN" -sockets "$SOCKETS" -sessions 50 \
  -rate 0 -hold 40s -pids "$gw" >"$OUT/load.txt" 2>&1 &
load=$!
# Snapshot while the sockets are held idle (joins take SOCKETS/2000 s).
sleep $((SOCKETS / 2000 + 25))
snap after
wait "$load"
cat "$OUT/load.txt"
echo "profiles in $OUT"
