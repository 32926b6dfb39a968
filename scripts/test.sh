#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the test suite; extra arguments go to pytest (e.g. -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
