#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job on the embedded data.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/fl-gym demo "$@"
