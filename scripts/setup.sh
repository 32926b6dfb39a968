#!/usr/bin/env bash
# Create .venv once and install fl-gym (editable) with its test tools and the Ray and Flower extras (so
# their tests run rather than skip; not the RLlib extra, which pins an older gymnasium). Flower's
# simulation extra pins its Ray release, which the Ray extra accepts. torch is pinned to the
# release the project is tested with (constraints.txt); on Python 3.11 x86_64 pip may take it
# from a local wheel cache, elsewhere it downloads. pip's output goes to .venv/setup.log and is
# shown only if the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || { echo "creating .venv"; "$python" -m venv .venv; }
echo "installing fl-gym into .venv (log: .venv/setup.log)"
if ! .venv/bin/python -m pip install --disable-pip-version-check -c constraints.txt -e ".[dev,ray,flower]" \
    > .venv/setup.log 2>&1; then
  tail -n 40 .venv/setup.log >&2
  exit 1
fi
