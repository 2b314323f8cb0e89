#!/usr/bin/env bash
# Starts one gateway node from bin/gateway (built by `make build`) for
# `make run`; arguments and the environment reach the gateway as they are.
#
# Ctrl-C stops it: the gateway drains on SIGINT or SIGTERM, then exits 0, and
# no process of the run is left behind, whether the output goes to the
# terminal, to a pipe (`make run 2>&1 | tee run.log`), to a file, or nowhere.
#
# Two ways, chosen by what stdin and stderr are:
#   - Both terminals: job control. The node runs as a foreground job in its
#     own process group, so the terminal's SIGINT reaches only the node, not
#     make (which would otherwise report "Interrupt" although the node exited
#     0); the script exits with the node's status. Bash hands the terminal to
#     a job only when its stderr is the terminal, so stdout may be piped here
#     (`make run | tee run.log`), stderr not.
#   - Otherwise (stderr piped or in a file, or no terminal at all): the script
#     owns the signals. The node runs in a session of its own (setsid), so no
#     terminal signal reaches it; the script traps SIGINT, SIGTERM and SIGHUP,
#     sends the node one SIGTERM (it drains), waits for it and exits with its
#     status. A second signal while it drains sends a second SIGTERM, which
#     stops the node at once. With setpriv (util-linux) the node also gets
#     SIGTERM if the script dies (kill -9). The script ignores SIGPIPE, so a
#     log reader that died with the Ctrl-C (tee) cannot stop it mid-drain;
#     the gateway ignores SIGPIPE as well (its log lines are then lost).
#     make, which gets the terminal's SIGINT too, may report "Interrupt".
#     Started as a background job of a non-interactive shell (SIGINT ignored
#     there, and bash cannot trap a signal ignored at its start), stop it
#     with SIGTERM.
#
# Environment: GATEWAY_BIN [bin/gateway]; every gateway setting (README
# "Configuration").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GATEWAY_BIN:-bin/gateway}
[[ -x $BIN ]] || { echo "run: $BIN not found; run 'make build' first" >&2; exit 1; }
echo "--> starting $BIN (Ctrl-C stops it: it drains, then exits 0)" >&2
if [[ -t 0 && -t 2 ]]; then
  # Job control: the node gets its own process group and the terminal.
  set -m
  rc=0
  "$BIN" "$@" || rc=$?
  exit "$rc"
fi

# The script owns the signals.
trap '' PIPE
launch=()
command -v setsid >/dev/null && launch=(setsid)
if command -v setpriv >/dev/null && setpriv --help 2>&1 | grep -q -- --pdeathsig; then
  launch+=(setpriv --pdeathsig TERM --)
fi
"${launch[@]}" "$BIN" "$@" &
pid=$!
forward() { kill -TERM "$pid" 2>/dev/null || true; }
trap forward INT TERM HUP
# A trapped signal interrupts wait (status > 128) while the node still runs.
while :; do
  rc=0
  wait "$pid" 2>/dev/null || rc=$?
  if ((rc > 128)) && kill -0 "$pid" 2>/dev/null; then continue; fi
  break
done
exit "$rc"
