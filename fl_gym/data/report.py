"""What a partition looks like: sizes, per-client class histograms and label entropy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fl_gym.data.partition import class_count, class_ids


def label_entropy(histogram: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits of each row of a class histogram (``0 log 0 = 0``).

    A uniform 10-class row gives ``log2 10 = 3.3219``; a single-class row gives 0.
    """
    histogram = np.asarray(histogram, dtype=np.float64)
    totals = histogram.sum(axis=-1, keepdims=True)
    q = np.divide(histogram, totals, out=np.zeros_like(histogram), where=totals > 0)
    logs = np.log2(q, out=np.zeros_like(q), where=q > 0)
    return -(q * logs).sum(axis=-1)


@dataclass(frozen=True)
class PartitionReport:
    """Per-client summary of a partition.

    Attributes:
        sizes: ``(K,)`` samples per client.
        histogram: ``(K, C)`` samples per client and class.
        entropy: ``(K,)`` label entropy in bits.
    """

    sizes: np.ndarray
    histogram: np.ndarray
    entropy: np.ndarray

    @classmethod
    def of(cls, parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> PartitionReport:
        """Summarise ``parts`` (index arrays into ``labels``)."""
        labels = class_ids(labels)  # the arguments swapped, say: numpy's message named neither
        num_classes = class_count(num_classes, labels)  # a wider histogram would not stack
        hist = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
        return cls(hist.sum(axis=1), hist, label_entropy(hist))

    def table(self) -> str:
        """A plain-text table: one row per client."""
        num_classes = self.histogram.shape[1]
        head = f"{'client':>6} {'size':>6} {'H(bits)':>7} {'classes':>7}  histogram"
        rows = [head]
        for k, (n, h, hist) in enumerate(zip(self.sizes, self.entropy, self.histogram, strict=True)):
            shown = " ".join(f"{v:d}" for v in hist) if num_classes <= 20 else f"{num_classes} classes"
            rows.append(f"{k:>6} {n:>6} {h:>7.3f} {int((hist > 0).sum()):>7}  {shown}")
        rows.append(f"{'total':>6} {int(self.sizes.sum()):>6} {self.entropy.mean():>7.3f} (mean)")
        return "\n".join(rows)
