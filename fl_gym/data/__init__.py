"""Data sets, partitioners and partition reports.

The partitioners and reports need only numpy; ``Dataset`` and ``load_dataset`` (torch) are
imported when first read (:mod:`fl_gym.lazy`).
"""

from typing import TYPE_CHECKING

from fl_gym.data.catalog import DATASETS, DatasetNotFoundError, default_root
from fl_gym.data.partition import (
    IID,
    SCHEMES,
    Classes,
    Dirichlet,
    Mixed,
    Natural,
    OneClass,
    PartitionScheme,
    PowerLaw,
    Shards,
    classes_split,
    dirichlet_split,
    holdout_split,
    iid_split,
    matched_test_split,
    partition,
    partition_scheme,
    power_law_split,
    shards_split,
)
from fl_gym.data.report import PartitionReport, label_entropy
from fl_gym.lazy import exports

if TYPE_CHECKING:  # what type checkers read (``X as X``: re-exported); at run time, LAZY
    from fl_gym.data.dataset import Dataset as Dataset
    from fl_gym.data.datasets import load_dataset as load_dataset

LAZY = {"fl_gym.data.dataset": ("Dataset",), "fl_gym.data.datasets": ("load_dataset",)}

__all__ = [
    "DATASETS", "IID", "SCHEMES", "Classes", "Dataset", "DatasetNotFoundError", "Dirichlet", "Mixed",
    "Natural",
    "OneClass", "PartitionReport", "PartitionScheme", "PowerLaw", "Shards", "classes_split", "default_root",
    "dirichlet_split", "holdout_split", "iid_split", "label_entropy", "load_dataset", "matched_test_split",
    "partition", "partition_scheme", "power_law_split", "shards_split",
]
__getattr__, __dir__ = exports(__name__, LAZY)
