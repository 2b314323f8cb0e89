#!/usr/bin/env bash
# Fails when the tree cites something that is not in the repository:
#
#   - a design file outside the repository, or an absolute path of a machine;
#   - a "docs/NAME.md" that does not exist;
#   - a test that does not exist. A cited test is, in a tracked markdown file,
#     a Go comment, a shell script or the Makefile, a token TestFoo, FuzzFoo
#     or BenchmarkFoo (also pkg.TestFoo, TestFoo/subtest, and TestFoo* for
#     the tests whose names start so), which must be declared as
#     "func TestFoo(" in a tracked _test.go file (for pkg.TestFoo, in a
#     directory named pkg); or an end-to-end test file name.test.mjs (or
#     dir/name.test.mjs, or a glob such as e2e/*-page.test.mjs), which must
#     match a tracked file (a bare name anywhere in the tree). Each missing
#     citation is printed as file:line.
#
# scripts/lint-refs.sh --self-test runs the script on a scratch repository
# that cites a test that does not exist and checks that it fails and names it.
set -euo pipefail

if [ "${1:-}" = "--self-test" ]; then
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (
    cd "$tmp"
    git init -q .
    mkdir -p scripts pkga e2e docs
    cp "$self" scripts/lint-refs.sh
    printf 'package pkga\n\nimport "testing"\n\nfunc TestThere(t *testing.T) {}\n\nfunc BenchmarkThere(b *testing.B) {}\n' >pkga/a_test.go
    printf 'x\n' >e2e/here.test.mjs
    printf '# Doc\n\nTestThere, pkga.TestThere/sub, pkga.TestTh*, BenchmarkThere, e2e/here.test.mjs, here.test.mjs, e2e/*re.test.mjs.\n' >docs/GOOD.md
    printf 'package pkga\n\n// Covered by TestThere.\n' >pkga/a.go
    git add -A
    scripts/lint-refs.sh >out 2>&1 || { cat out >&2; echo "lint-refs --self-test: a tree citing only existing tests failed" >&2; exit 1; }
    printf '# Doc\n\nSee TestThere and\nTestDoesNotExist, TestNo*.\n' >docs/BAD.md
    printf 'package pkga\n\n// Covered by pkgb.TestThere and e2e/gone.test.mjs, e2e/*-page.test.mjs.\n' >pkga/b.go
    git add -A
    if scripts/lint-refs.sh >out 2>&1; then
      echo "lint-refs --self-test: a tree citing TestDoesNotExist passed" >&2; exit 1
    fi
    for want in 'docs/BAD.md:4: TestDoesNotExist' 'docs/BAD.md:4: TestNo*' 'pkga/b.go:3: pkgb.TestThere' 'pkga/b.go:3: e2e/gone.test.mjs' 'pkga/b.go:3: e2e/*-page.test.mjs'; do
      grep -qF "$want" out || { cat out >&2; echo "lint-refs --self-test: output lacks \"$want\"" >&2; exit 1; }
    done
    if grep -qF 'docs/BAD.md:3:' out; then cat out >&2; echo "lint-refs --self-test: reported an existing test" >&2; exit 1; fi
  )
  exit
fi

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

# Every cited test exists. Declarations: "path:func TestFoo(" from the
# tracked _test.go files; citations: every line of markdown, shell or the
# Makefile that names one, and Go comments (the part of a line after "//").
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files >"$tmp/files"
git grep -oE '^func (Test|Fuzz|Benchmark)[A-Za-z0-9_]*\(' -- '*_test.go' >"$tmp/defs" || true
git grep -nE '(Test|Fuzz|Benchmark)[A-Z0-9_]|\.test\.mjs' -- '*.md' '*.go' '*.sh' Makefile ':!scripts/lint-refs.sh' >"$tmp/cites" || true
if ! awk -v filesf="$tmp/files" -v defsf="$tmp/defs" '
  BEGIN {
    while ((getline l < filesf) > 0) {
      file[l] = 1; n = split(l, p, "/"); base[p[n]] = 1
    }
    while ((getline l < defsf) > 0) {
      # path/to/x_test.go:func TestFoo(
      i = index(l, ":func "); path = substr(l, 1, i - 1)
      name = substr(l, i + 6); sub(/\($/, "", name)
      def[name] = 1
      n = split(path, p, "/"); dir = (n > 1) ? p[n - 1] : "."
      def[dir "." name] = 1
    }
    bad = 0
  }
  {
    # path:line:text, where path and line hold no colon.
    i = index($0, ":"); path = substr($0, 1, i - 1); rest = substr($0, i + 1)
    i = index(rest, ":"); line = substr(rest, 1, i - 1); text = substr(rest, i + 1)
    if (path ~ /\.go$/) {
      i = index(text, "//"); if (i == 0) next
      text = substr(text, i + 2)
    }
    s = text
    while (match(s, /[A-Za-z0-9_.\/-]*(Test|Fuzz|Benchmark)[A-Z0-9_][A-Za-z0-9_]*|[A-Za-z0-9_.\/*-]*\.test\.mjs/)) {
      tok = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
      if (tok ~ /\.test\.mjs$/) {
        sub(/^\.\//, "", tok)
        if (tok ~ /\*/) {
          # A glob: some tracked file matches it.
          re = tok; gsub(/\./, "\\.", re); gsub(/\*/, "[^/]*", re)
          re = (tok ~ /\//) ? ("^" re "$") : ("(^|/)" re "$")
          ok = 0
          for (f in file) if (f ~ re) { ok = 1; break }
        } else if (tok ~ /\//) ok = (tok in file)
        else ok = (tok in base)
      } else {
        # Keep "pkg.Name" or "Name": drop what comes before the last "/"
        # or before a dot that is not the package qualifier.
        sub(/^.*\//, "", tok)
        n = split(tok, p, ".")
        if (n > 2) tok = p[n - 1] "." p[n]
        name = tok; sub(/^.*\./, "", name)
        if (name !~ /^(Test|Fuzz|Benchmark)[A-Z0-9_]/) continue
        pkg = (tok ~ /\./) ? tok : ""
        sub(/\..*$/, "", pkg); sub(/_test$/, "", pkg)
        key = (pkg == "") ? name : (pkg "." name)
        ok = (key in def)
        # TestFoo* names every test whose name starts with TestFoo.
        if (substr(s, 1, 1) == "*") {
          s = substr(s, 2); ok = 0
          for (d in def) if (index(d, key) == 1) { ok = 1; break }
          key = key "*"
        }
        tok = key
        # A subtest (TestFoo/sub) is not checked beyond its test.
        if (match(s, /^\/[A-Za-z0-9_\/=.:+-]*/)) s = substr(s, RLENGTH + 1)
      }
      if (!ok) {
        if (!bad) print "lint-refs: cites a test that does not exist:" > "/dev/stderr"
        print path ":" line ": " tok > "/dev/stderr"
        bad = 1
      }
    }
  }
  END { exit bad }
' "$tmp/cites"; then
  status=1
fi
exit $status
