#!/usr/bin/env bash
# Starts three gateway nodes in cluster mode on ports 4001-4003 against the
# local Postgres, Redis and NATS, with one shared JWT secret, API key and admin
# token; prints the URLs and tokens; stops every node on Ctrl-C.
#
# The script owns the signals: each node runs in a session of its own
# (setsid), so the terminal's Ctrl-C reaches only the script, whose trap (on
# SIGINT, SIGTERM or SIGHUP) sends each node one SIGTERM (each drains: sessions handed back, leases released,
# sockets closed with 1012), waits for every node to exit, reports each
# node's status and exits 0 when all exited 0 (1 otherwise). A second Ctrl-C
# while they drain sends a second SIGTERM, which stops a node at once (the
# gateway's second signal). With setpriv (util-linux), a node also gets
# SIGTERM if the script itself dies (kill -9), so none outlives it. The script
# ignores SIGPIPE and failed writes, so a reader of its output that died with
# the Ctrl-C (`make cluster 2>&1 | tee cl.log`) cannot stop it mid-drain; the
# nodes write to their log files, not to the script's output.
#
# A node that fails to start (Postgres unreachable, port taken, ...) stops the
# script: its log tail is printed, the nodes already started are stopped,
# and the exit status is 1.
#
# A node that dies later (kill -9 it to demo failover) does not stop the
# others: the script reports it and keeps running; type the node's number
# (1-3) and Enter to start it again. Secrets and the token come from the
# gateway binary itself (gateway secret, gateway token).
#
# Tools: bash, curl, setsid (util-linux; optional setpriv).
#
# Environment (defaults in brackets):
#   GATEWAY_BIN   [bin/gateway]
#   DATABASE_URL  [postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=relay_cluster]
#   REDIS_URL     [redis://127.0.0.1:6379/0]
#   NATS_URL      [nats://127.0.0.1:4222]
#   CLUSTER       [relay-demo]  prefixes NATS subjects and Redis keys
#   JWT_SECRET, API_KEYS, ADMIN_TOKEN  [random per run]
#   MUSTER_HEARTBEAT [2s], MUSTER_PEER_DOWN [3s]
#   BASE_PORT     [4001]  node N listens on 127.0.0.1:BASE_PORT+N-1
#   LOG_DIR       [a temporary directory; one <node>.log per node]
#   START_TIMEOUT [60]  seconds for every node to answer /healthz
# Every other gateway setting in the environment (LEASE_TTL, LEASE_RENEW,
# DRAIN_WINDOW, ...) reaches all three nodes; e2e/cluster-script.test.mjs runs
# this script with its own ports, schema, CLUSTER and short lease timings.
set -euo pipefail

# From a terminal, run as a foreground job of its own (job control), so the
# terminal's Ctrl-C reaches this script only and not make, which would report
# "Interrupt" after the clean stop; the exit status is the script's. Bash
# hands the terminal to a job only when its stderr is the terminal, so this
# needs stdin and stderr on it (stdout may be piped). Otherwise (stderr piped
# or in a file) the script runs in make's process group and gets the Ctrl-C
# itself, and so does make, which may then report "Interrupt".
if [[ -t 0 && -t 2 && -z ${RELAY_CLUSTER_FG:-} ]]; then
  set -m
  rc=0
  RELAY_CLUSTER_FG=1 "$0" "$@" || rc=$?
  exit "$rc"
fi

trap '' PIPE
cd "$(dirname "$0")/.."
BIN=${GATEWAY_BIN:-bin/gateway}
[[ -x $BIN ]] || { echo "cluster: $BIN not found; run 'make build' first" >&2; exit 1; }

rand() { "$BIN" secret --bytes "$1"; }
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=relay_cluster}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}
export CLUSTER=${CLUSTER:-relay-demo}
export JWT_SECRET=${JWT_SECRET:-$(rand 32)}
export API_KEYS=${API_KEYS:-key-$(rand 16)}
export ADMIN_TOKEN=${ADMIN_TOKEN:-admin-$(rand 16)}
export MUSTER_HEARTBEAT=${MUSTER_HEARTBEAT:-2s}
export MUSTER_PEER_DOWN=${MUSTER_PEER_DOWN:-3s}
BASE_PORT=${BASE_PORT:-4001}
LOG_DIR=${LOG_DIR:-$(mktemp -d -t relay-cluster.XXXXXX)}

# mint SUB: an HS256 JWT for every session, valid 30 days (gateway token).
mint() { "$BIN" token --sub "$1" --sessions '*' --ttl 720h; }

names=(node1 node2 node3)
pids=()
declare -A reported=() # node index -> 1 once its exit was seen and reaped

# wait_node I: waits for node I's exit and sets status to its exit status. A
# signal that interrupts the wait (a trapped Ctrl-C) is not the node's exit.
status=0
wait_node() {
  local p=${pids[$1]}
  while :; do
    status=0
    wait "$p" 2>/dev/null || status=$?
    if ((status > 128)) && kill -0 "$p" 2>/dev/null; then continue; fi
    return 0
  done
}

# stop RC: sends each running node one SIGTERM (it drains), waits for all,
# reports each, exits RC, or 1 when a node did not exit 0.
stop() {
  local rc=$1 i live=()
  trap - EXIT
  # Drain whatever happens to the output: a failed echo (its reader gone)
  # must not end the script before every node exited.
  set +e
  for i in 0 1 2; do
    [[ -n ${pids[$i]:-} && -z ${reported[$i]:-} ]] && live+=("$i")
  done
  # A second Ctrl-C: a second SIGTERM, the gateway stops at once.
  trap 'for i in "${live[@]}"; do kill -TERM "${pids[$i]}" 2>/dev/null || true; done' INT TERM HUP
  echo
  echo "stopping ${#live[@]} nodes (SIGTERM, each drains; Ctrl-C again stops them at once)..."
  for i in "${live[@]}"; do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for i in "${live[@]}"; do
    wait_node "$i"
    reported[$i]=1
    if [[ $status == 0 ]]; then
      echo "cluster: ${names[$i]} (pid ${pids[$i]}) drained and exited 0"
    else
      echo "cluster: ${names[$i]} (pid ${pids[$i]}) exited with status $status; log: $LOG_DIR/${names[$i]}.log" >&2
      rc=1
    fi
  done
  echo "stopped; logs in $LOG_DIR"
  exit "$rc"
}
trap 'stop 0' INT TERM HUP
trap 'stop $?' EXIT

# Each node in a session of its own (no terminal signals), and with setpriv
# SIGTERM when the script dies.
launch=()
command -v setsid >/dev/null && launch=(setsid)
if command -v setpriv >/dev/null && setpriv --help 2>&1 | grep -q -- --pdeathsig; then
  launch+=(setpriv --pdeathsig TERM --)
fi

# start_node I: start node I (0-2) in the background, appending to its log.
start_node() {
  local i=$1 port=$((BASE_PORT + $1))
  ADDR=127.0.0.1:$port NODE_NAME=${names[$i]} "${launch[@]}" "$BIN" >>"$LOG_DIR/${names[$i]}.log" 2>&1 &
  pids[i]=$!
}
for i in 0 1 2; do start_node "$i"; done
echo "cluster: starting node1 (pid ${pids[0]}), node2 (pid ${pids[1]}), node3 (pid ${pids[2]}); logs in $LOG_DIR"

# Wait until each node listens; a node that exits first stops the script.
deadline=$((SECONDS + ${START_TIMEOUT:-60}))
for i in 0 1 2; do
  port=$((BASE_PORT + i))
  until curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait_node "$i"
      reported[$i]=1
      echo "cluster: ${names[$i]} failed to start (exit status $status); last lines of $LOG_DIR/${names[$i]}.log:" >&2
      tail -20 "$LOG_DIR/${names[$i]}.log" >&2
      stop 1
    fi
    if ((SECONDS > deadline)); then
      echo "cluster: ${names[$i]} did not answer http://127.0.0.1:$port/healthz within ${START_TIMEOUT:-60} s; last lines of $LOG_DIR/${names[$i]}.log:" >&2
      tail -20 "$LOG_DIR/${names[$i]}.log" >&2
      stop 1
    fi
    sleep 0.1
  done
done

TOKEN=$(mint demo)
cat <<EOF

Relay cluster "$CLUSTER": three nodes (logs in $LOG_DIR)
  node1  http://127.0.0.1:$BASE_PORT/#token=$TOKEN&session=demo-1
  node2  http://127.0.0.1:$((BASE_PORT + 1))/#token=$TOKEN&session=demo-1
  node3  http://127.0.0.1:$((BASE_PORT + 2))/#token=$TOKEN&session=demo-1
Open two of them: each page shows the node serving its socket and the node owning the session.

  socket/API token (JWT, all sessions): $TOKEN
  API key:      $API_KEYS
  admin token:  $ADMIN_TOKEN

Post an event on any node:
  curl -s -XPOST http://127.0.0.1:$((BASE_PORT + 2))/api/sessions/demo-1/events \\
    -H "Authorization: Bearer $API_KEYS" -H 'Content-Type: application/json' \\
    -d '{"type":"message","data":{"text":"hello from node3"}}'
Muster view of a node:
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:$BASE_PORT/admin/node

Failover demo: kill -9 one node (pids: node1=${pids[0]} node2=${pids[1]}
node3=${pids[2]}); the other two keep running and take over its sessions once
its leases lapse (LEASE_TTL). Type 1, 2 or 3 and Enter to (re)start a node.
Ctrl-C stops all three.
EOF

# Watch the nodes: report one that dies and keep the others running; restart
# a node on request (its number on stdin). Ctrl-C runs the trap.
while true; do
  for i in 0 1 2; do
    if [[ -z ${reported[$i]:-} ]] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait_node "$i"
      echo "cluster: ${names[$i]} (pid ${pids[$i]}) exited with status $status; the others keep running. Type $((i + 1)) and Enter to restart it. Log: $LOG_DIR/${names[$i]}.log" >&2
      reported[$i]=1
    fi
  done
  line=
  if read -r -t 1 line 2>/dev/null; then
    case $line in
      1 | 2 | 3)
        i=$((line - 1))
        if kill -0 "${pids[$i]}" 2>/dev/null; then
          echo "cluster: ${names[$i]} is running (pid ${pids[$i]})" >&2
        else
          start_node "$i"
          unset "reported[$i]"
          echo "cluster: ${names[$i]} restarted (pid ${pids[$i]})" >&2
        fi
        ;;
    esac
  elif [[ $? -le 128 ]]; then
    # stdin closed (not a terminal): just watch.
    sleep 1
  fi
done
