#!/usr/bin/env bash
# SOCKETS idle joined sockets over GATEWAYS cluster-mode gateway processes on
# this machine (loopback; real Postgres, Redis and NATS), then one POST whose
# events fan out to all of them. Reports:
#   - total gateway RSS before and after the joins, and per joined socket
#   - join rate: joined sockets per second, from the first dial to the last
#     join reply (LOAD_PROCS relay-load processes, each dialing at
#     CONNECT_RATE/s to one gateway)
#   - the fan-out: deliveries counted by the load processes against the
#     expected SOCKETS x 5 (the echo agent emits five events for one message),
#     and the time from an event's stamp on the owner to its last delivery
#     (the largest delivery latency over all processes)
#
# The open-file limit bounds the sockets one process holds (ulimit -n; each
# gateway also keeps RESERVE descriptors for its listener and its Postgres,
# Redis and NATS connections); the script refuses a split that does not fit.
# Loopback ephemeral ports (ip_local_port_range) bound the connections to one
# server port: each gateway listens on its own port.
#
# Environment (defaults in brackets):
#   SOCKETS [100000]  GATEWAYS [5, or the fewest above that fit the open-file
#   limit: 6 for 100,000 sockets under 20,000]  LOAD_PROCS [2 x GATEWAYS]
#   CONNECT_RATE [2000] dials/s per load process, DIAL_WINDOW [64] dials or joins
#   in flight per load process (the join rate is the gateways' pace, not the
#   offered one)  RESERVE [100]  HOLD [5] seconds  FANOUT_WAIT [120s]
#   BASE_PORT [4301]  PG [postgres://postgres@127.0.0.1:5432/test]
#   REDIS_URL [redis://127.0.0.1:6379/0]  NATS_URL [nats://127.0.0.1:4222]
#   PUBSUB_ROUTING [muster]
set -euo pipefail

cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-100000}
RESERVE=${RESERVE:-100}
limit=$(ulimit -Hn)
# Default: five gateways, or the fewest above five that fit the open-file limit
# (six for 100,000 sockets under a 20,000 limit).
GATEWAYS=${GATEWAYS:-$(((SOCKETS + limit - RESERVE - 1) / (limit - RESERVE) > 5 ? (SOCKETS + limit - RESERVE - 1) / (limit - RESERVE) : 5))}
LOAD_PROCS=${LOAD_PROCS:-$((2 * GATEWAYS))}
CONNECT_RATE=${CONNECT_RATE:-2000}
DIAL_WINDOW=${DIAL_WINDOW:-64}
FANOUT_WAIT=${FANOUT_WAIT:-120s}
HOLD=${HOLD:-5}
BASE_PORT=${BASE_PORT:-4301}
PG=${PG:-postgres://postgres@127.0.0.1:5432/test}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}
export PUBSUB_ROUTING=${PUBSUB_ROUTING:-muster}

per_gw=$(((SOCKETS + GATEWAYS - 1) / GATEWAYS))
per_proc=$(((SOCKETS + LOAD_PROCS - 1) / LOAD_PROCS))
if ((per_gw > limit - RESERVE)); then
  echo "scale: $SOCKETS sockets over $GATEWAYS gateways is $per_gw per gateway, above the open-file limit ($limit) less $RESERVE for the node's own descriptors; raise GATEWAYS (e.g. $(((SOCKETS + limit - RESERVE - 1) / (limit - RESERVE))))" >&2
  exit 2
fi
if ((per_proc > limit - RESERVE)) || ((LOAD_PROCS % GATEWAYS != 0)); then
  echo "scale: LOAD_PROCS must be a multiple of GATEWAYS with at most $((limit - RESERVE)) sockets each" >&2
  exit 2
fi
ports=$(cat /proc/sys/net/ipv4/ip_local_port_range | awk '{ print $2 - $1 + 1 }')
if ((per_gw > ports)); then
  echo "scale: $per_gw connections to one gateway port exceed the $ports ephemeral ports" >&2
  exit 2
fi

source scripts/lib/cluster-env.sh
export MUSTER_PEER_DOWN=${MUSTER_PEER_DOWN:-10s}
cluster_env scale
gw=() lpids=()

for i in $(seq 0 $((GATEWAYS - 1))); do
  ADDR=127.0.0.1:$((BASE_PORT + i)) NODE_NAME=scale$i bin/gateway >"$LOG_DIR/scale$i.log" 2>&1 &
  gw+=($!)
  pids+=($!)
done
for i in $(seq 0 $((GATEWAYS - 1))); do
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
for _ in $(seq 1 150); do
  views=$(for i in $(seq 0 $((GATEWAYS - 1))); do curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "http://127.0.0.1:$((BASE_PORT + i))/admin/node"; echo; done)
  [[ $(grep -c '"status":"ready"' <<<"$views") == "$GATEWAYS" && $(grep -o '"view_hash":"[0-9a-f]*"' <<<"$views" | sort -u | wc -l) == 1 ]] && break
  sleep 0.2
done

rss() { for p in "${gw[@]}"; do awk '/^VmRSS:/ { print $2 }' "/proc/$p/status"; done | paste -sd+ | bc; }
rss0=$(rss)
TOKEN=$(bin/gateway token --jwt-secret "$JWT_SECRET" --sub load --sessions '*' --ttl 2h)
session=scale-$run
echo "scale: $SOCKETS sockets on session $session over $GATEWAYS gateways ($per_gw each), $LOAD_PROCS load processes at up to $CONNECT_RATE dials/s and $DIAL_WINDOW in flight each"
t0=$(date +%s.%N)
left=$SOCKETS
for j in $(seq 0 $((LOAD_PROCS - 1))); do
  n=$((left / (LOAD_PROCS - j)))
  left=$((left - n))
  # -sessions 1 with a one-session prefix: every socket joins session:$session-0.
  bin/relay-load -ws "ws://127.0.0.1:$((BASE_PORT + j % GATEWAYS))/socket/websocket" -token "$TOKEN" \
    -sockets "$n" -sessions 1 -prefix "$session" -rate -1 -expect $((n * 5)) -duration "$FANOUT_WAIT" \
    -connect-rate "$CONNECT_RATE" -dial-window "$DIAL_WINDOW" >"$LOG_DIR/load$j.out" 2>&1 &
  lpids+=($!)
  pids+=($!)
done
for j in $(seq 0 $((LOAD_PROCS - 1))); do
  until grep -q '^sockets joined' "$LOG_DIR/load$j.out"; do
    if ! kill -0 "${lpids[$j]}" 2>/dev/null; then echo "load process $j exited:"; cat "$LOG_DIR/load$j.out"; exit 1; fi
    sleep 0.2
  done
done
t1=$(date +%s.%N)
joined=$(cat "$LOG_DIR"/load*.out | awk '/^sockets joined/ { s += $3 } END { print s }')
sleep "$HOLD"
rss1=$(rss)
lrss=$(for p in "${lpids[@]}"; do awk '/^VmRSS:/ { print $2 }' "/proc/$p/status"; done | paste -sd+ | bc)
echo "joined: $joined of $SOCKETS in $(echo "$t1 - $t0" | bc) s: $(echo "$joined / ($t1 - $t0)" | bc) sockets/s"
echo "gateway RSS: $((rss0 / 1024)) MiB before, $((rss1 / 1024)) MiB after $HOLD s idle: $(echo "scale=1; ($rss1 - $rss0) / $joined" | bc) KiB per joined socket"
echo "load tool RSS: $((lrss / 1024)) MiB over $LOAD_PROCS processes"
for i in $(seq 0 $((GATEWAYS - 1))); do
  echo "  gateway $i: $(awk '/^VmRSS:/ { print $2 / 1024 " MiB" }' "/proc/${gw[$i]}/status"), $(ls "/proc/${gw[$i]}/fd" | wc -l) descriptors"
done

tp=$(date +%s.%N)
curl -fsS -X POST -H "Authorization: Bearer $API_KEYS" -H 'Content-Type: application/json' \
  -d '{"type":"message","data":{"text":"fan"}}' "http://127.0.0.1:$BASE_PORT/api/sessions/$session-0/events" >/dev/null
status=0
for p in "${lpids[@]}"; do wait "$p" || status=1; done
te=$(date +%s.%N)
lpids=()
delivered=$(cat "$LOG_DIR"/load*.out | awk '/^expected deliveries:/ { s += $3 } END { print s }')
# The largest "last delivery" over the processes, in ms (Go durations: µs, ms, s).
last=$(cat "$LOG_DIR"/load*.out | awk '/^expected deliveries:/ {
    d = $8; v = d + 0
    if (d ~ /µs$/) v /= 1000; else if (d ~ /ms$/) v += 0; else if (d ~ /s$/) v *= 1000
    if (v > m) m = v } END { printf "%.1f ms", m }')
lost=$(cat "$LOG_DIR"/load*.out | awk '/^expected deliveries:/ { s += $(NF - 6) } END { print s }')
echo "fan-out of one POST (5 events): $delivered deliveries of $((joined * 5)) expected ($lost sockets lost their connection after joining); last delivery $last after its event's stamp; all load processes done $(echo "$te - $tp" | bc) s after the POST"
exit $status
