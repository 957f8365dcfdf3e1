#!/usr/bin/env bash
# Set everything up and run the example workflow end to end in a scratch project, then show its timeline.
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python examples/demo.py "$@"
