"""Data sets, partitioners and partition reports."""

from fl_gym.data.dataset import Dataset
from fl_gym.data.datasets import DATASETS, DatasetNotFoundError, default_root, load_dataset
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

__all__ = [
    "DATASETS", "IID", "SCHEMES", "Classes", "Dataset", "DatasetNotFoundError", "Dirichlet", "Mixed",
    "Natural",
    "OneClass", "PartitionReport", "PartitionScheme", "PowerLaw", "Shards", "classes_split", "default_root",
    "dirichlet_split", "holdout_split", "iid_split", "label_entropy", "load_dataset", "matched_test_split",
    "partition", "partition_scheme", "power_law_split", "shards_split",
]
