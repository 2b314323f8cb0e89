# Sourced by the cluster load scripts (load-cluster.sh, routing-modes.sh,
# scale-100k.sh): builds bin/gateway and bin/relay-load, and gives the run
# its own cluster on the shared services.
#
# cluster_env NAME exports CLUSTER (NAME-<run>), DATABASE_URL (the database
# PG with its own schema NAME_<run>), JWT_SECRET, API_KEYS, ADMIN_TOKEN,
# LOG_LEVEL=warn, ECHO_DELAY [20ms], MUSTER_HEARTBEAT [1s] and
# MUSTER_PEER_DOWN [5s]; sets run, schema and LOG_DIR (a fresh temporary
# directory); and on exit stops every process in the array pids (SIGTERM,
# then waits), drops the schema and the cluster's Redis keys and prints
# LOG_DIR. PG and REDIS_URL must be set.
pids=()

cluster_env() {
  go build -o bin/gateway ./cmd/gateway
  go build -o bin/relay-load ./cmd/relay-load
  run=$(bin/gateway secret --bytes 16 | cut -c1-8)
  schema=$1_$run
  export CLUSTER=$1-$run
  export DATABASE_URL="$PG?sslmode=disable&search_path=$schema"
  export JWT_SECRET=$(bin/gateway secret --bytes 32)
  export API_KEYS=key-$(bin/gateway secret --bytes 16)
  export ADMIN_TOKEN=admin-$(bin/gateway secret --bytes 16)
  export LOG_LEVEL=warn ECHO_DELAY=${ECHO_DELAY:-20ms}
  export MUSTER_HEARTBEAT=${MUSTER_HEARTBEAT:-1s} MUSTER_PEER_DOWN=${MUSTER_PEER_DOWN:-5s}
  LOG_DIR=$(mktemp -d -t "relay-$1.XXXXXX")
  trap cluster_cleanup EXIT
}

cluster_cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  psql "$PG" -qAtc "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true
  redis-cli -u "$REDIS_URL" --scan --pattern "$CLUSTER:*" 2>/dev/null | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
  echo "logs: $LOG_DIR"
}
