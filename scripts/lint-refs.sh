#!/usr/bin/env bash
# Fails when the tree cites a design file that is not in the repository, or
# names an absolute path of a machine. Every "docs/NAME.md" a tracked file
# cites must exist; nothing may cite the outside design notes by name.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
files=$(git ls-files -- ':!package-lock.json' ':!go.sum' ':!scripts/lint-refs.sh')

# Design notes that live outside the repository, and machine paths.
outside='DESIGN\.md|phoenix-protocol\.md|muster-(history|scenarios)\.md|agent-protocols\.md|aesthetics\.md|shared/(seeds|research)|/work/|/home/[a-z]|/root/|/Users/'
if hits=$(git grep -nE "$outside" -- $files); then
  echo "lint-refs: cites a file outside the repository or a machine path:" >&2
  echo "$hits" >&2
  status=1
fi

# Every docs/*.md that is cited exists.
while IFS= read -r ref; do
  [ -f "$ref" ] || { echo "lint-refs: cited but missing: $ref" >&2; status=1; }
done < <(git grep -ohE 'docs/[A-Za-z0-9_-]+\.md' -- $files | sort -u)
exit $status
