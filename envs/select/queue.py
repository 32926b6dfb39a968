"""DDFL's dynamic server data queue and its label statistics (Herath et al., Algorithm 2 and Eq. 19).

The server holds a class-balanced share ``G_D`` of the training set (``Federation.server_indices``).
From ``start_round`` on, every device receives the next ``segment`` indices of its own seeded
permutation of ``G_D`` each round (independent sharing: devices may get the same sample, a device
never gets one twice). In ``accumulate`` mode its working set grows, ``S = D_k + segments``; in
``replace`` mode it is ``D_k`` plus the latest segment only.
"""

from __future__ import annotations

import math

import numpy as np


def bias(histogram: np.ndarray, population: np.ndarray) -> np.ndarray:
    """``||q_k - q_pop||_2 / sqrt(1 - 1/C)``, clipped to ``[0, 1]`` (Eq. 19, normalised: ours)."""
    h = np.asarray(histogram, np.float64)
    q = h / np.maximum(h.sum(axis=-1, keepdims=True), 1)
    pop = np.asarray(population, np.float64) / np.sum(population)
    c = h.shape[-1]
    return np.clip(np.linalg.norm(q - pop, axis=-1) / math.sqrt(1 - 1 / c), 0, 1)


def segment_size(rho: float, server: int, clients: int, train: int) -> int:
    """``max(1, round(rho * mean initial device size))`` (the segment of Algorithm 2; rho ours)."""
    return max(1, round(rho * (train - server) / clients))


class DataQueue:
    """Per-device cursors into per-device permutations of the server share.

    Args:
        server_indices: ``G_D``'s training indices.
        base: each device's own training indices ``D_k``.
        segment: samples per device per round.
        mode: ``accumulate`` or ``replace``.
        rng: draws the permutations.
    """

    def __init__(self, server_indices: np.ndarray, base: list[np.ndarray], segment: int, mode: str,
                 rng: np.random.Generator) -> None:
        self.base, self.segment, self.mode = [np.asarray(b) for b in base], segment, mode
        self.order = [rng.permutation(server_indices) for _ in base]
        self.cursor = np.zeros(len(base), np.int64)
        self.latest = np.zeros(len(base), np.int64)
        self.sent = 0

    def advance(self) -> dict[int, np.ndarray]:
        """The next segment for every device that has one left: its new working set by device."""
        out = {}
        for k, order in enumerate(self.order):
            if self.cursor[k] >= len(order):
                continue
            lo, hi = self.cursor[k], min(self.cursor[k] + self.segment, len(order))
            self.cursor[k], self.latest[k] = hi, hi - lo
            self.sent += hi - lo
            received = order[:hi] if self.mode == "accumulate" else order[lo:hi]
            out[k] = np.concatenate([self.base[k], received])
        return out

    def received(self) -> np.ndarray:
        """``(K,)`` server samples in each device's working set."""
        return self.cursor.copy() if self.mode == "accumulate" else self.latest.copy()

    def undelivered(self) -> float:
        """Mean share of ``G_D`` a device has not received yet (0 without server data)."""
        total = len(self.order[0]) if self.order else 0
        return 0.0 if total == 0 else float(1 - self.cursor.mean() / total)
