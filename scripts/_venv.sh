# Sourced by the other scripts: create .venv with Python 3.11+ and install stepline (+ extras in $1) into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY=$candidate; break
    fi
  done
fi
[ -n "$PY" ] || { echo "error: stepline needs Python 3.11 or newer on PATH" >&2; exit 1; }
# A venv whose creation was interrupted has a python but no pip: make it again rather than fail in pip.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv
  "$PY" -m venv .venv
fi
stamp=".venv/.stepline-installed${1:+-$1}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
  .venv/bin/python -m pip install --quiet -e ".${1:+[$1]}"
  touch "$stamp"
fi
