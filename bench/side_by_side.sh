#!/usr/bin/env bash
# Make .venv-bench (stepline + LangGraph, Burr and DBOS with SQLite persistence) and run bench/side_by_side.py in it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-bench/bin/python ]; then
  python3 -m venv .venv-bench
fi
.venv-bench/bin/python -m pip install --quiet -e . "langgraph>=1.0" "langgraph-checkpoint-sqlite>=3.0" "apache-burr>=0.40" "dbos>=2.0"
exec .venv-bench/bin/python bench/side_by_side.py "$@"
