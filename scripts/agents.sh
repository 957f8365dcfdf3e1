#!/usr/bin/env bash
# The real agent CLIs the tests drive against a scripted local model server (tests/agentcli/, tests/fakes/):
# claude, codex, gemini, qwen, opencode and mcp-inspector-cli — and typescript-language-server with TypeScript 5 for
# the language-server test (tests/context/test_lsp.py) — at the versions pinned in tests/agents/package.json and
# package-lock.json, installed into tests/agents/node_modules (binaries in its .bin/, which the tests look up).
#
#   scripts/agents.sh            install what the lock says; skipped when the lock has not changed since (a stamp)
#   scripts/agents.sh --update   move every pin to the newest release (rewrites package.json and the lock);
#                                TypeScript to the newest 5.x (TypeScript 7 has no tsserver for the language server)
#
# Where node/npm or the registry cannot be reached this says so in one line and exits 0: the real-CLI tests then
# skip, naming the missing binary. Anywhere else a failing install fails the caller.
#
# Not `npm ci`: npm ci demands a lock entry for every platform's optional binary package (opencode-darwin-arm64,
# @teddyzhu/clipboard-win32-x64-msvc, ...), and a registry mirror that lacks some of them can never write such a
# lock. `npm install` with the committed lock installs exactly the locked tree; the lock must come out unchanged.
set -euo pipefail
cd "$(dirname "$0")/../tests/agents"
if ! command -v npm >/dev/null 2>&1; then
  echo "note: npm is not installed: the real agent-CLI tests will skip" >&2
  exit 0
fi
if [ "${1:-}" = "--update" ]; then
  mapfile -t names < <(node -e 'for (const n of Object.keys(require("./package.json").dependencies)) console.log(n)')
  specs=("${names[@]/%/@latest}")
  specs=("${specs[@]/#typescript@latest/typescript@5}")
  npm install --save-exact --no-audit --no-fund "${specs[@]}"
  echo "== pins now:"; node -e 'console.log(require("./package.json").dependencies)'
  echo "commit tests/agents/package.json and package-lock.json"
  exit 0
fi
stamp=node_modules/.stepline-lock.sha256
want=$( (cat package.json package-lock.json; node --version) | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "agent CLIs up to date in $PWD/node_modules/.bin"
  exit 0
fi
if ! timeout 20 npm ping >/dev/null 2>&1; then
  echo "note: the npm registry ($(npm config get registry)) cannot be reached: the real agent-CLI tests will skip" >&2
  exit 0
fi
echo "== installing the pinned agent CLIs (npm, tests/agents)"
cp package-lock.json node_modules.lock.tmp
trap 'rm -f node_modules.lock.tmp' EXIT
npm install --no-audit --no-fund --loglevel=error
if ! cmp -s package-lock.json node_modules.lock.tmp; then
  cp node_modules.lock.tmp package-lock.json
  echo "error: tests/agents/package-lock.json does not match package.json (npm wanted to change it): run 'npm install' in tests/agents (or scripts/agents.sh --update for the newest of everything) and commit both files" >&2
  exit 1
fi
echo "$want" >"$stamp"
echo "agent CLIs installed in $PWD/node_modules/.bin: $(ls node_modules/.bin | tr '\n' ' ')"
