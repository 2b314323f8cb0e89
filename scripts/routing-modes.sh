#!/usr/bin/env bash
# Measures one PUBSUB_ROUTING on three cluster-mode gateways (loopback, real
# Postgres and Redis, a private NATS server with its monitoring port so the
# counts are this run's alone).
#
#   scripts/routing-modes.sh MODE SPREAD
#
# MODE is muster, subjects or flood. Events are posted to node 0, which owns
# every session; the sockets of each session sit on SPREAD nodes: 1 (node 1
# only: every delivery crosses nodes), 2 (nodes 1 and 2) or 3 (all nodes:
# node 0's sockets are local). One relay-load process per socket node, so
# latency is reported per node (node 1 and 2: cross-node).
#
# Reported, over the posting window:
#   - events published (sum of relay_events_published_total over the nodes)
#   - NATS messages and bytes per event: the server's /varz in_msgs, out_msgs,
#     in_bytes, out_bytes deltas, less the idle rate of the same nodes
#     measured over IDLE before the sockets join (Muster and Census
#     heartbeats), divided by the events; and the nodes' own count of event
#     messages they handed to NATS (relay_pubsub_node_messages_total,
#     relay_pubsub_floods_total, relay_pubsub_sent_bytes_total)
#   - publish→socket latency p50/p99 per socket node
#   - gateway CPU (all three processes) per delivered message
#
# Environment (defaults in brackets):
#   SESSIONS [20] topics   SOCKETS [200] sockets per socket node
#   RATE [1] posts/s per session (the echo agent emits 5 events per post)
#   DURATION [20s] (whole seconds)  IDLE [10]  seconds of idle baseline
#   BASE_PORT [4201]  NATS_PORT [4322]  NATS_MON [8322]
#   PG [postgres://postgres@127.0.0.1:5432/test]  REDIS_URL [redis://127.0.0.1:6379/0]
set -euo pipefail

cd "$(dirname "$0")/.."
MODE=${1:?usage: routing-modes.sh muster|subjects|flood SPREAD}
SPREAD=${2:?usage: routing-modes.sh MODE 1|2|3}
[[ $SPREAD =~ ^[123]$ ]] || { echo "SPREAD must be 1, 2 or 3" >&2; exit 2; }
SESSIONS=${SESSIONS:-20}
SOCKETS=${SOCKETS:-200}
RATE=${RATE:-1}
DURATION=${DURATION:-20s}
IDLE=${IDLE:-10}
BASE_PORT=${BASE_PORT:-4201}
NATS_PORT=${NATS_PORT:-4322}
NATS_MON=${NATS_MON:-8322}
PG=${PG:-postgres://postgres@127.0.0.1:5432/test}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export NATS_URL=nats://127.0.0.1:$NATS_PORT
export PUBSUB_ROUTING=$MODE

source scripts/lib/cluster-env.sh
cluster_env route

nats-server -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MON" >"$LOG_DIR/nats.log" 2>&1 &
nats_pid=$!
pids+=("$nats_pid")
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$NATS_MON/varz" >/dev/null 2>&1 && break; sleep 0.1; done

ulimit -n 20000
gw=()
for i in 0 1 2; do
  ADDR=127.0.0.1:$((BASE_PORT + i)) NODE_NAME=route$i bin/gateway >"$LOG_DIR/route$i.log" 2>&1 &
  gw+=($!)
done
pids+=("${gw[@]}")
gw_pids=$(IFS=,; echo "${gw[*]}")
for i in 0 1 2; do
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
for _ in $(seq 1 100); do
  views=$(for i in 0 1 2; do curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "http://127.0.0.1:$((BASE_PORT + i))/admin/node"; echo; done)
  [[ $(grep -c '"status":"ready"' <<<"$views") == 3 && $(grep -o '"view_hash":"[0-9a-f]*"' <<<"$views" | sort -u | wc -l) == 1 ]] && break
  sleep 0.2
done

varz() { curl -fsS "http://127.0.0.1:$NATS_MON/varz" | jq -c '{in_msgs, out_msgs, in_bytes, out_bytes}'; }
# metric NAME: the sum of a counter over the three nodes.
metric() {
  for i in 0 1 2; do curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/metrics"; done |
    awk -v m="$1" '$1 == m { s += $2 } END { printf "%.0f", s }'
}
cpu_ticks() { for p in "${gw[@]}"; do awk '{ print $14 + $15 }' "/proc/$p/stat"; done | paste -sd+ | bc; }

# Idle baseline: Muster, Census and readiness traffic with no sockets.
v0=$(varz); sleep "$IDLE"; v1=$(varz)

TOKEN=$(bin/gateway token --jwt-secret "$JWT_SECRET" --sub load --sessions '*' --ttl 2h)
POST=http://127.0.0.1:$BASE_PORT
prefix=route-$run
case $SPREAD in 1) nodes=(1) ;; 2) nodes=(1 2) ;; 3) nodes=(0 1 2) ;; esac
echo "routing $MODE: $SESSIONS sessions owned by node 0, $SOCKETS sockets on each of node(s) ${nodes[*]}, $RATE post/s per session for $DURATION"
lpids=()
first=1
for i in "${nodes[@]}"; do
  rate=$RATE dur=$DURATION
  # Measure-only processes listen 5 s longer than the poster posts, so a
  # process that joined first does not stop before the last turn lands.
  [[ $first == 1 ]] || { rate=-1; dur=$(($(sed 's/s$//' <<<"$DURATION") + 5))s; }
  first=0
  bin/relay-load -ws "ws://127.0.0.1:$((BASE_PORT + i))/socket/websocket" -post "$POST" -token "$TOKEN" \
    -sockets "$SOCKETS" -sessions "$SESSIONS" -prefix "$prefix" -rate "$rate" -duration "$dur" \
    >"$LOG_DIR/load-node$i.out" 2>&1 &
  lpids+=($!)
  pids+=($!) # stopped on exit with the nodes
done
# The window starts when every load process has joined its sockets.
for i in "${nodes[@]}"; do
  until grep -q '^sockets joined' "$LOG_DIR/load-node$i.out"; do sleep 0.05; done
done
v2=$(varz); c2=$(cpu_ticks); t2=$(date +%s.%N)
e2=$(metric relay_events_published_total); m2=$(metric relay_pubsub_node_messages_total)
f2=$(metric relay_pubsub_floods_total); b2=$(metric relay_pubsub_sent_bytes_total)
status=0
for p in "${lpids[@]}"; do wait "$p" || status=1; done
v3=$(varz); c3=$(cpu_ticks); t3=$(date +%s.%N)
e3=$(metric relay_events_published_total); m3=$(metric relay_pubsub_node_messages_total)
f3=$(metric relay_pubsub_floods_total); b3=$(metric relay_pubsub_sent_bytes_total)

for i in "${nodes[@]}"; do echo "--- sockets on node $i"; cat "$LOG_DIR/load-node$i.out"; done
deliveries=$(cat "$LOG_DIR"/load-node*.out | awk '/^deliveries:/ { s += $2 } END { print s }')
events=$((e3 - e2))
python3 - "$v0" "$v1" "$v2" "$v3" "$IDLE" "$t2" "$t3" "$events" "$((m3 - m2))" "$((f3 - f2))" "$((b3 - b2))" "$((c3 - c2))" "$deliveries" <<'PY'
import json, sys
v0, v1, v2, v3 = (json.loads(a) for a in sys.argv[1:5])
idle, t2, t3 = float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
events, msgs, floods, sent_bytes, ticks, deliveries = (int(a) for a in sys.argv[8:14])
span = t3 - t2
print(f"events published: {events}; deliveries to sockets: {deliveries}; window {span:.1f} s")
for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"):
    rate = (v1[k] - v0[k]) / idle
    d = v3[k] - v2[k]
    print(f"nats {k}: {d} in the window, idle {rate:.1f}/s -> {(d - rate * span) / max(1, events):.2f} per event")
print(f"node event messages to NATS: {msgs} sends + {floods} floods, {sent_bytes} bytes -> {(msgs + floods) / max(1, events):.2f} msgs, {sent_bytes / max(1, events):.0f} bytes per event")
print(f"gateway CPU: {ticks / 100:.2f} s -> {ticks * 10000 / max(1, deliveries):.1f} µs per delivery")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
