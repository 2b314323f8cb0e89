#!/usr/bin/env bash
# Load run over a three-node cluster, loopback only and bounded in time:
# starts three cluster-mode gateways on 127.0.0.1 (fresh Postgres schema, own
# CLUSTER prefix for Redis keys and NATS subjects), drives SOCKETS phoenix
# sockets joined to one session topic spread round-robin over the three nodes
# with cmd/relay-load, posts events round-robin to the nodes, prints delivery
# latency (event stamp on the owner -> socket) and deliveries per second,
# then stops the nodes and drops the schema.
#
# Environment (defaults in brackets):
#   SOCKETS [10000]  RATE [1] posts/s  WORDS [1]  DURATION [20s]
#   PROCS [1]        load-tool processes (each opens SOCKETS/PROCS sockets;
#                    only the first posts, all measure)
#   BASE_PORT [4101] PG [postgres://postgres@127.0.0.1:5432/test]
#   REDIS_URL [redis://127.0.0.1:6379/0]  NATS_URL [nats://127.0.0.1:4222]
set -euo pipefail

cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-10000}
RATE=${RATE:-1}
WORDS=${WORDS:-1}
DURATION=${DURATION:-20s}
PROCS=${PROCS:-1}
BASE_PORT=${BASE_PORT:-4101}
PG=${PG:-postgres://postgres@127.0.0.1:5432/test}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}

source scripts/lib/cluster-env.sh
cluster_env load

ulimit -n 20000
ws=() post=()
for i in 0 1 2; do
  port=$((BASE_PORT + i))
  ADDR=127.0.0.1:$port NODE_NAME=load$i bin/gateway >"$LOG_DIR/load$i.log" 2>&1 &
  pids+=($!)
  ws+=("ws://127.0.0.1:$port/socket/websocket")
  post+=("http://127.0.0.1:$port")
done
gw_pids=$(IFS=,; echo "${pids[*]}")
for i in 0 1 2; do
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
# Muster must agree on one view before routing is trusted.
for _ in $(seq 1 100); do
  views=$(for i in 0 1 2; do curl -fsS -H "Authorization: Bearer $ADMIN_TOKEN" "http://127.0.0.1:$((BASE_PORT + i))/admin/node"; echo; done)
  [[ $(grep -c '"status":"ready"' <<<"$views") == 3 && $(grep -o '"view_hash":"[0-9a-f]*"' <<<"$views" | sort -u | wc -l) == 1 ]] && break
  sleep 0.2
done

TOKEN=$(bin/gateway token --jwt-secret "$JWT_SECRET" --sub load --sessions '*' --ttl 2h)
WS=$(IFS=,; echo "${ws[*]}")
POST=$(IFS=,; echo "${post[*]}")
prefix=load-$run
per=$((SOCKETS / PROCS))
echo "load: $SOCKETS sockets on one topic over 3 nodes ($PROCS load process(es)), $RATE posts/s of $WORDS word(s) for $DURATION"
lpids=()
for p in $(seq 1 "$PROCS"); do
  rate=$RATE
  [[ $p -gt 1 ]] && rate=-1 # measure only
  bin/relay-load -ws "$WS" -post "$POST" -token "$TOKEN" -sockets "$per" -sessions 1 -prefix "$prefix" \
    -rate "$rate" -words "$WORDS" -duration "$DURATION" -pids "$gw_pids" >"$LOG_DIR/relay-load-$p.out" 2>&1 &
  lpids+=($!)
  pids+=($!) # stopped on exit with the nodes
done
status=0
for p in "${lpids[@]}"; do wait "$p" || status=1; done
for p in $(seq 1 "$PROCS"); do echo "--- load process $p"; cat "$LOG_DIR/relay-load-$p.out"; done
exit $status
