# Sourced by the one-gateway measurement scripts (floor-vs-fanout.sh,
# latency.sh): builds bin/gateway and bin/relay-load, raises the open-file
# limit to 20,000, exports a fresh JWT_SECRET and sets TOKEN (a load token for
# every session, 2 h), out (a temporary file for the run's figures) and gw
# (the running gateway's pid, "" when none). On exit the gateway is stopped
# (SIGTERM, then waited for) and out removed.
go build -o bin/gateway ./cmd/gateway
go build -o bin/relay-load ./cmd/relay-load
ulimit -n 20000

export JWT_SECRET=$(bin/gateway secret --bytes 32)
TOKEN=$(bin/gateway token --jwt-secret "$JWT_SECRET" --sub load --sessions '*' --ttl 2h)

out=$(mktemp)
gw=
trap '[ -n "$gw" ] && { kill "$gw" 2>/dev/null; wait "$gw" 2>/dev/null; }; rm -f "$out"; true' EXIT
