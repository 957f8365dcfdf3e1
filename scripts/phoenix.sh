#!/usr/bin/env bash
# Arize Phoenix, the trace collector tests/telemetry starts on loopback to check the spans a run exports (OTLP
# over HTTP) by querying them back from its API. It lives in its own venv, .venv-phoenix, at the version pinned
# here: its large dependency tree never touches stepline's .venv.
#
#   scripts/phoenix.sh     install it; skipped when the pin has not changed since (a stamp)
#
# Where PyPI cannot be reached this says so in one line and exits 0: the Phoenix tests then skip, saying why.
# Anywhere else a failing install fails the caller.
set -euo pipefail
cd "$(dirname "$0")/.."
PIN="arize-phoenix==20.26.1"
venv=.venv-phoenix
stamp=$venv/.stepline-phoenix
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.12 python3.11 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info < (3, 14))' 2>/dev/null; then
      PY=$candidate; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "note: Phoenix needs Python 3.10-3.13 on PATH: the Phoenix tests will skip" >&2
  exit 0
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PIN" ] && [ -x "$venv/bin/phoenix" ]; then
  echo "Phoenix up to date in $PWD/$venv"
  exit 0
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  "$PY" -m venv "$venv"
fi
if ! timeout 60 "$venv/bin/python" -m pip index versions arize-phoenix >/dev/null 2>&1; then
  echo "note: PyPI cannot be reached (pip index versions arize-phoenix failed): the Phoenix tests will skip" >&2
  exit 0
fi
echo "== installing $PIN into $venv (the trace collector of tests/telemetry)"
started=$(date +%s)
"$venv/bin/python" -m pip install --quiet "$PIN"
echo "$PIN" >"$stamp"
echo "Phoenix installed in $PWD/$venv in $(( $(date +%s) - started ))s"
