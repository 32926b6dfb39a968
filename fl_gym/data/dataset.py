"""The record every data set loads into: a labelled train/test pair as normalised CPU tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

Tensors = tuple[Tensor, Tensor, Tensor, Tensor]  # train inputs and labels, test inputs and labels


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled train/test pair, normalised, as CPU tensors.

    Attributes:
        name: registry name, e.g. ``"digits"``.
        x_train: ``(N, *input_shape)`` float32, normalised per channel.
        y_train: ``(N,)`` int64 labels in ``[0, num_classes)``.
        x_test: ``(M, *input_shape)`` float32.
        y_test: ``(M,)`` int64.
        num_classes: number of classes.
        natural_split: per-client ``(train_indices, test_indices)`` for data sets that come
            partitioned (``synthetic``); empty otherwise.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    natural_split: tuple[tuple[np.ndarray, np.ndarray], ...] = field(default=())
    _placed: dict[str, Tensors] = field(default_factory=dict, init=False, repr=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 8, 8)``."""
        return tuple(self.x_train.shape[1:])

    def on(self, device: torch.device | str) -> Tensors:
        """``(x_train, y_train, x_test, y_test)`` on ``device``, copied there once and then shared.

        Every federation of a process that trains on this data set on one device holds the same
        tensors: the batched vector env merges only requests on the same data tensors, and one copy
        of the data per device is all the memory it needs. The copies live as long as the data set
        (:func:`~fl_gym.data.load_dataset` holds its sets for the process).
        """
        key = str(torch.device(device))
        if key not in self._placed:
            self._placed[key] = (self.x_train.to(device), self.y_train.to(device), self.x_test.to(device),
                                 self.y_test.to(device))
        return self._placed[key]

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, train={len(self.y_train)}, test={len(self.y_test)}, "
                f"input_shape={self.input_shape}, classes={self.num_classes})")
