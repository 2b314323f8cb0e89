#!/usr/bin/env bash
# Makes sure headless Chromium is there for the browser tests (e2e/*-page.test.mjs):
# Debian's `chromium` package at $CHROMIUM_PATH or /usr/bin/chromium. When it is
# missing it installs the package with apt-get (as root, or through sudo); when it
# cannot, it fails with a message, so the browser tests never skip silently.
set -euo pipefail
bin=${CHROMIUM_PATH:-/usr/bin/chromium}
if [ -x "$bin" ]; then
  exit 0
fi
if [ -n "${CHROMIUM_PATH:-}" ]; then
  echo "chromium: CHROMIUM_PATH=$CHROMIUM_PATH is not an executable" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
fi
if ! command -v apt-get >/dev/null || { [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; }; then
  echo "chromium: $bin is missing and cannot be installed here: install Debian's chromium package (apt-get install -y chromium) or set CHROMIUM_PATH" >&2
  exit 1
fi
echo "chromium: installing Debian's chromium package"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
[ -x "$bin" ] || { echo "chromium: installed, but $bin is still missing" >&2; exit 1; }
"$bin" --version
