#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy (strict, on src/), pytest.
source "$(dirname "$0")/_venv.sh" dev
echo "== ruff check"; .venv/bin/ruff check src tests bench
echo "== mypy src"; .venv/bin/mypy src
echo "== pytest"; .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
