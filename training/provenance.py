"""The code (and machine) a result or a trained model comes from; warnings when it is not this code.

Results and models outlive an upgrade in their folders (a resumed reproduction, a benchmark run,
a run folder reused for its model). They are kept, not recomputed (that may take hours), and
what was made by other code is said, with how to make it again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import warnings
from pathlib import Path
from typing import Any

import numpy as np

# fl-gym's packages, whose folders differ between an installed copy and a checkout
PACKAGES = ("fl_gym", "fl_gym.envs", "fl_gym.baselines", "fl_gym.agents", "fl_gym.training",
            "fl_gym.integrations")


@functools.cache
def code_versions() -> dict[str, str]:
    """The code numbers come from: a digest of fl-gym's source, torch's and numpy's versions.

    Part of a kept episode's key, so a folder of them that outlives an upgrade (or an edit of the
    source) has them played again rather than mixed with the new code's. Each file counts by its
    module path (``fl_gym/envs/base.py``), so a checkout and an installed copy of the same source
    (whose sub-packages lie in other folders) agree.
    """
    import torch

    files = {f"{name.replace('.', '/')}/{f.relative_to(folder).as_posix()}": f for name in PACKAGES
             for folder in map(Path, importlib.util.find_spec(name).submodule_search_locations)
             for f in folder.rglob("*.py")}
    digest = hashlib.sha256()
    for key in sorted(files):
        digest.update(key.encode() + files[key].read_bytes())
    return {"fl_gym": digest.hexdigest()[:16], "torch": torch.__version__, "numpy": np.__version__}


def hardware() -> dict[str, Any]:
    """The machine numbers are measured on, and the torch threads they use."""
    import torch

    return {"machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def origin() -> dict[str, Any]:
    """What a record's numbers come from: this ``code`` (:func:`code_versions`) and ``hardware``."""
    return {"code": code_versions(), "hardware": hardware()}


def warn_if_other_code(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """``record`` (results read back from ``path``), with a warning where other code computed them.

    Records older than this check hold no ``code``.
    """
    if record.get("code") != code_versions():
        warnings.warn(f"{path} was computed by other code ({record.get('code', 'not recorded')}, now "
                      f"{code_versions()}): its numbers are kept; delete it to compute them again",
                      stacklevel=3)
    return record


def warn_if_trained_by_other_code(folder: Path, codes: list[dict[str, str] | None]) -> None:
    """Warn where a run's model was trained, in part or whole, by other code than this.

    ``codes``: the code of each training session whose steps the run's model holds (None: a
    session from before sessions recorded it). Issued from here, so a process warns once per
    folder (Python's default filter), however many callers reuse the model.
    """
    others = [code for code in codes if code != code_versions()]
    if others:
        warnings.warn(f"run {folder} was trained by other code ({others[0] or 'not recorded'}, now "
                      f"{code_versions()}): its model and checkpoints are used as they are; delete the run "
                      f"folder to train it again", stacklevel=1)
