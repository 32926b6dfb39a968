"""The data sets by name, and the folder their files live in.

Apart from :mod:`fl_gym.data.datasets`, which loads them, so that what only names a data set
(a command line's choices, a config's check) loads no torch.
"""

from __future__ import annotations

import os
from pathlib import Path

EMBEDDED = ("digits", "synthetic")
TORCHVISION = ("mnist", "fashionmnist", "emnist-letters", "cifar10", "cifar100")
DATASETS = EMBEDDED + TORCHVISION


class DatasetNotFoundError(FileNotFoundError):
    """A torchvision data set is neither on disk nor downloadable, or its files are damaged."""


def default_root() -> Path:
    """``$FL_GYM_DATA`` if set, else ``~/.cache/fl_gym``."""
    return Path(os.environ.get("FL_GYM_DATA") or Path.home() / ".cache" / "fl_gym")
