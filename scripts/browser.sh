#!/usr/bin/env bash
# The browser the dashboard's tests drive (tests/web/test_browser.py): Debian's chromium, installed when missing.
# Installing needs root and apt; where either is missing the browser tests skip, saying so. Never fails the caller.
chromium=${STEPLINE_CHROMIUM:-$(command -v chromium || true)}
if [ -n "$chromium" ] && [ -x "$chromium" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: no chromium and no way to install it here (needs root and apt-get): the browser tests will skip" >&2
  exit 0
fi
echo "== installing chromium for the browser tests (apt-get)"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/tmp/stepline-chromium-install.log 2>&1; then
  echo "note: apt-get could not install chromium (see /tmp/stepline-chromium-install.log): the browser tests will skip" >&2
fi
exit 0
