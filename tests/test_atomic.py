"""Crash-safe writes (fl_gym/atomic.py)."""

from __future__ import annotations

import os

from fl_gym.atomic import write_json


def test_result_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_json(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
