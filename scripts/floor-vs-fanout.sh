#!/usr/bin/env bash
# Fan-out CPU per delivered message against the floor, interleaved in one run.
# Each round starts a fresh gateway, measures a one-topic fan-out with
# relay-load, stops it, then (with BASELINE set) does the same with a second
# gateway binary, then runs "relay-load floor" with as many sockets and about
# as many deliveries. Prints the load average before each figure and, at the
# end, a table of every round with the medians and the ratios.
#
#   SOCKETS=10000 ROUNDS=3 scripts/floor-vs-fanout.sh
#   BASELINE=/tmp/relay-old/bin/gateway SOCKETS=10000 ROUNDS=3 scripts/floor-vs-fanout.sh
#
# BASELINE is a gateway binary to compare with (for example one built from an
# older commit: git worktree add --detach /tmp/relay-old <commit> &&
# (cd /tmp/relay-old && go build -o bin/gateway ./cmd/gateway)). GATEWAY_ENV
# adds environment to both gateways, BASELINE_ENV to the baseline only
# (BASELINE=bin/gateway BASELINE_ENV=WRITE_COALESCE=0 compares settings).
set -euo pipefail
cd "$(dirname "$0")/.."
SOCKETS=${SOCKETS:-10000}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-2}            # POSTs per second; each makes 5 events
DURATION=${DURATION:-15s}
PORT=${PORT:-4190}
BASELINE=${BASELINE:-}
GATEWAY_ENV=${GATEWAY_ENV:-}
BASELINE_ENV=${BASELINE_ENV:-}
secs=${DURATION%s}
MESSAGES=${MESSAGES:-$(awk "BEGIN{print int($RATE*5*$secs)}")}

source scripts/lib/embedded-env.sh

# fanout NAME BINARY: one fan-out run; appends "NAME us_per_delivery load1" to $out.
fanout() {
  local name=$1 bin=$2 log extra=
  [ "$name" = baseline ] && extra=$BASELINE_ENV
  # shellcheck disable=SC2086
  env ECHO_DELAY=0s ADDR=127.0.0.1:$PORT LOG_LEVEL=warn $GATEWAY_ENV $extra "$bin" >/dev/null 2>&1 &
  gw=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== round $r fan-out $name ($bin), load average: $load"
  log=$(bin/relay-load -ws ws://127.0.0.1:$PORT/socket/websocket -post http://127.0.0.1:$PORT \
    -token "$TOKEN" -sockets "$SOCKETS" -sessions 1 -rate "$RATE" -duration "$DURATION" -pids "$gw")
  echo "$log"
  # Frames, writes and parked writes (gateways that export them).
  curl -fsS "http://127.0.0.1:$PORT/metrics" 2>/dev/null | grep -E '^relay_socket_(frames_out|writes|writes_parked)_total ' | sed 's/^/   /' || true
  echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  kill "$gw"; wait "$gw" 2>/dev/null || true; gw=
  echo "$name $(echo "$log" | sed -nE 's/.*: ([0-9.]+) µs per delivered message/\1/p') ${load%% *}" >>"$out"
}

for r in $(seq 1 "$ROUNDS"); do
  fanout new bin/gateway
  [ -n "$BASELINE" ] && fanout baseline "$BASELINE"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== round $r floor, load average: $load"
  log=$(bin/relay-load floor -sockets "$SOCKETS" -messages "$MESSAGES" -rate "$(awk "BEGIN{print $RATE*5}")")
  echo "$log"
  echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "floor $(echo "$log" | sed -nE 's/.*: ([0-9.]+) µs per write/\1/p') ${load%% *}" >>"$out"
done

echo
echo "== summary (µs per delivery or per floor write; load average at start)"
awk -v rounds="$ROUNDS" '
  { n[$1]++; v[$1, n[$1]] = $2; l[$1, n[$1]] = $3 }
  function median(name,   i, j, t, a, k) {
    k = n[name]; for (i = 1; i <= k; i++) a[i] = v[name, i]
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }
  END {
    for (r = 1; r <= rounds; r++) {
      line = sprintf("round %d: new %s (load %s)", r, v["new", r], l["new", r])
      if (n["baseline"]) line = line sprintf("  baseline %s (load %s)", v["baseline", r], l["baseline", r])
      line = line sprintf("  floor %s (load %s)  new/floor %.2f", v["floor", r], l["floor", r], v["new", r] / v["floor", r])
      if (n["baseline"]) line = line sprintf("  new/baseline %.2f", v["new", r] / v["baseline", r])
      print line
    }
    mn = median("new"); mf = median("floor")
    line = sprintf("median: new %.2f  floor %.2f  new/floor %.2f", mn, mf, mn / mf)
    if (n["baseline"]) { mb = median("baseline"); line = line sprintf("  baseline %.2f  baseline/floor %.2f  new/baseline %.2f (%.0f%% below)", mb, mb / mf, mn / mb, 100 * (1 - mn / mb)) }
    print line
  }' "$out"
