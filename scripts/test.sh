#!/usr/bin/env bash
# Set everything up and run the whole test suite: ruff, mypy (strict, on src/), the docs build, pytest.
source "$(dirname "$0")/_venv.sh" dev
bash scripts/browser.sh  # Debian's chromium for tests/web/test_browser.py (skipped, saying so, where it cannot be had)
bash scripts/agents.sh   # the pinned real agent CLIs (npm, tests/agents) for tests/agentcli (skipped, saying so, where npm cannot be reached)
bash scripts/phoenix.sh  # Arize Phoenix in .venv-phoenix, the trace collector of tests/telemetry (skipped, saying so, where PyPI cannot be reached)
echo "== ruff check"; .venv/bin/ruff check src tests bench
echo "== mypy src"; .venv/bin/mypy src
echo "== docs"; .venv/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html  # the reference pages are made from the code
echo "== pytest"; .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
