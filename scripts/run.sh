#!/usr/bin/env bash
# Starts one gateway node from bin/gateway (built by `make build`) for
# `make run`; arguments and the environment reach the gateway as they are.
#
# Ctrl-C stops it with exit status 0: the gateway drains on SIGINT, then
# exits 0. From a terminal the node runs as a foreground job in its own
# process group, so the terminal's SIGINT reaches only the node, not make
# (which would otherwise report "Interrupt" or "Error" although the node
# exited 0); the script then exits with the node's status. Without a
# terminal the script becomes the node (exec).
#
# Environment: GATEWAY_BIN [bin/gateway]; every gateway setting (README
# "Configuration").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GATEWAY_BIN:-bin/gateway}
[[ -x $BIN ]] || { echo "run: $BIN not found; run 'make build' first" >&2; exit 1; }
echo "--> starting $BIN (Ctrl-C stops it: it drains, then exits 0)" >&2
if [[ -t 0 ]]; then
  # Job control: the node gets its own process group and the terminal.
  set -m
  rc=0
  "$BIN" "$@" || rc=$?
  exit "$rc"
fi
exec "$BIN" "$@"
