#!/usr/bin/env bash
# serve-check.sh BIN: runs the gateway binary BIN in its embedded mode from an
# empty temporary directory (no checkout around it) on a port the kernel
# picks, and checks that it serves the embedded web bundle (/assets/app.js)
# without warning that a bundle is missing, and that SIGTERM stops it with
# exit status 0. Used by check-image.sh.
#
# It stops the process it started, by its own pid, on every path out (trap
# EXIT), and fails if that process still runs afterwards. Prints the node's
# pid ("serve-check: node pid N") and, on failure, the node's log.
#
# Environment: SERVE_TIMEOUT [60] seconds for the node to serve the bundle.
# Tools: bash, curl, sed.
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[[ -x $bin ]] || { echo "serve-check: $1 is not an executable" >&2; exit 2; }
dir=$(mktemp -d -t relay-serve-check.XXXXXX)
pid=
cleanup() {
  local rc=$?
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if kill -0 "$pid" 2>/dev/null; then
      echo "serve-check: the node (pid $pid) still runs after SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      rc=1
    fi
  fi
  rm -rf "$dir"
  exit "$rc"
}
trap cleanup EXIT
fail() {
  echo "serve-check: $*" >&2
  echo "--- node log" >&2
  cat "$dir/node.log" >&2 || true
  exit 1
}

: >"$dir/node.log" # exists before the node's redirection opens it: the loop below reads it at once
(cd "$dir" && ADDR=127.0.0.1:0 LOG_LEVEL=info NODE_NAME=check DATABASE_URL= REDIS_URL= NATS_URL= exec "$bin" >"$dir/node.log" 2>&1) &
pid=$!
echo "serve-check: node pid $pid"
ok= addr=
deadline=$((SECONDS + ${SERVE_TIMEOUT:-60}))
while ((SECONDS <= deadline)); do
  kill -0 "$pid" 2>/dev/null || break
  addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$dir/node.log" | head -n1)
  if [[ -n $addr ]] && curl -fsS --max-time 5 -o /dev/null "http://$addr/assets/app.js" 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
[[ -n $ok ]] || fail "the binary did not serve /assets/app.js"
if grep -q 'bundles are missing' "$dir/node.log"; then fail "the binary warns that its web bundle is missing"; fi

# Stop it (SIGTERM: it drains and exits 0) and check it is gone.
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 0 ]] || fail "the node exited with status $rc after SIGTERM"
! kill -0 "$pid" 2>/dev/null || fail "the node (pid $pid) still runs after SIGTERM"
pid=
echo "serve-check: ok: served the embedded bundle; SIGTERM stopped it with exit 0"
