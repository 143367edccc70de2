#!/usr/bin/env bash
# The web console's checks (issue 37), run by .ci/run after `cargo test --workspace` (which
# built target/debug/ctxstore-server, ctxstore and the seed_tree example):
#   1. npm ci (the committed lockfile), type check and unit tests of the front-end;
#   2. the build is reproducible: rebuilding dist/ from the sources gives the committed files
#      (the server embeds dist/, decision 0025);
#   3. the browser tests: Debian's Chromium (installed with apt-get when missing), headless,
#      driven by playwright-core against a real server; screenshots of failures in
#      $CTXSTORE_ARTIFACTS_DIR (default console/test-results).
# Needs Node >= 20 and npm; CTXSTORE_SERVER_BIN overrides the server binary.
set -euo pipefail
cd "$(dirname "$0")"
repository="$(cd .. && pwd)"
export CTXSTORE_SERVER_BIN="${CTXSTORE_SERVER_BIN:-$repository/target/debug/ctxstore-server}"
export CTXSTORE_ARTIFACTS_DIR="${CTXSTORE_ARTIFACTS_DIR:-$PWD/test-results}"

echo "-- node $(node --version), npm $(npm --version)"
npm ci --no-audit --no-fund --loglevel=error

echo "-- type check and unit tests"
npx tsc --noEmit
npx vitest run --reporter=dot

echo "-- dist/ is what the sources build"
npx vite build --logLevel warn
if ! git -C "$repository" diff --quiet --exit-code -- console/dist ||
  [ -n "$(git -C "$repository" ls-files --others --exclude-standard -- console/dist)" ]; then
  git -C "$repository" status --short -- console/dist
  echo "console/dist differs from a build of console/src: run 'npm run build' in console/ and commit dist/"
  exit 1
fi

echo "-- Chromium"
if [ ! -x "${CHROMIUM_BIN:-/usr/bin/chromium}" ]; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
"${CHROMIUM_BIN:-/usr/bin/chromium}" --version

echo "-- browser tests against $CTXSTORE_SERVER_BIN"
rm -rf "$CTXSTORE_ARTIFACTS_DIR"
if ! node --test --test-concurrency=1 tests/browser.test.mjs; then
  echo "screenshots of the failures: $CTXSTORE_ARTIFACTS_DIR"
  ls -l "$CTXSTORE_ARTIFACTS_DIR" 2>/dev/null || true
  exit 1
fi
