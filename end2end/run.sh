#!/usr/bin/env bash
# Browser tests of the dashboard against the real server binary.
#
# Expects, built beforehand:  cargo build                      (target/debug/oncehook)
#                             scripts/build-frontend.sh        (target/site, for hydration)
# Usage: end2end/run.sh [playwright test arguments...]
# Env:   ONCEHOOK_BIN, ONCEHOOK_SITE_ROOT (see global-setup.ts), CHROMIUM_PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

started=$SECONDS

# Playwright's own browser download cannot work here; Debian's Chromium does.
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "$chromium not found: install Debian's chromium or set CHROMIUM_PATH" >&2
    exit 1
  fi
fi

# package-lock.json pins the exact versions; reinstall only when it changed.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
fi

npx playwright test "$@"
echo "end2end: $((SECONDS - started))s"
