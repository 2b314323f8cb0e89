#!/usr/bin/env bash
# Builds what the Dockerfile builds without a Docker engine: copies the
# checkout (as the build context: tracked and untracked files, .gitignore
# honoured) to a temporary directory and runs the Dockerfile's RUN lines there,
# in order, with /src and /out mapped into it and the build args VERSION and
# COMMIT set. Then checks the result: a static binary that prints its
# version, serves the embedded web bundle, and a runtime stage that runs as
# non-root.
#
# Environment: VERSION [check-image], COMMIT [git rev-parse HEAD],
# KEEP=1 keeps the temporary directory.
#
# Tools: bash, git, tar, file, curl, sed; and what the Dockerfile's RUN lines
# use (go, npm). The node it starts for the check is stopped on every exit.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d -t relay-image.XXXXXX)
[[ ${KEEP:-} == 1 ]] || trap 'rm -rf "$tmp"' EXIT
src=$tmp/src out=$tmp/out
mkdir -p "$src" "$out"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [[ -e $f ]] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$src"

export VERSION=${VERSION:-check-image}
export COMMIT=${COMMIT:-$(git rev-parse HEAD)}

fail() { echo "check-image: $*" >&2; exit 1; }

# The runtime stage: a non-root user on a minimal base, the binary as entrypoint.
grep -q '^FROM gcr.io/distroless/static-debian12:nonroot$' Dockerfile || fail "the runtime stage is not distroless static nonroot"
grep -q '^USER nonroot:nonroot$' Dockerfile || fail "the runtime stage does not set USER nonroot"
grep -q '^ENTRYPOINT \["/gateway"\]$' Dockerfile || fail "ENTRYPOINT is not /gateway"

n=0
while IFS= read -r line; do
  cmd=${line#RUN }
  cmd=${cmd//\/src/$src}
  cmd=${cmd//\/out/$out}
  n=$((n + 1))
  echo "check-image: RUN $cmd"
  (cd "$src" && bash -c "$cmd") || fail "RUN line $n failed: $line"
done < <(grep '^RUN ' Dockerfile)
[[ $n -ge 4 ]] || fail "found $n RUN lines in the Dockerfile, want the web, download, build and --version steps"

bin=$out/gateway
[[ -x $bin ]] || fail "no binary at /out/gateway"
if file "$bin" | grep -q 'dynamically linked'; then fail "the binary is dynamically linked: $(file "$bin")"; fi
ver=$("$bin" --version)
[[ $ver == "relay $VERSION (commit $COMMIT"* ]] || fail "--version printed '$ver', want relay $VERSION (commit $COMMIT ...)"

# The bundle is embedded: the binary serves it from a directory of its own
# and stops cleanly (scripts/lib/serve-check.sh, which stops the node it
# starts on every path out).
scripts/lib/serve-check.sh "$bin" || fail "the binary's serve check failed"
echo "check-image: ok: $ver; static; serves the embedded bundle"
