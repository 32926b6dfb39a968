"""FedEntropy's positive and negative pools and its epsilon-greedy candidate draw (Ling et al., Algorithm 2).

The pools partition the ``N`` clients; a client's pool is the verdict of its latest judgement
(never judged = positive). Each round a coin with ``P(positive) = p_positive`` picks the primary
pool; ``m`` candidates are drawn uniformly without replacement from it and topped up from the
other pool when it holds fewer than ``m``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Draw:
    """One round's candidates and how they were drawn.

    Attributes:
        candidates: ``(N,)`` bool.
        positive_branch: the primary pool was the positive one (always True for a uniform draw).
        was_negative: ``(N,)`` bool: in the negative pool when drawn.
    """

    candidates: np.ndarray
    positive_branch: bool
    was_negative: np.ndarray


class Pools:
    """The two pools of ``num_clients`` clients; all positive at the start.

    Args:
        num_clients: ``N``.
        p_positive: probability that the positive pool is the primary one (the paper's
            ``epsilon = 0.8``: the probability of exploiting, not of exploring).
    """

    def __init__(self, num_clients: int, p_positive: float = 0.8) -> None:
        self.p_positive = p_positive
        self.negative = np.zeros(num_clients, bool)

    @property
    def negative_share(self) -> float:
        """The share of the clients in the negative pool."""
        return np.count_nonzero(self.negative) / len(self.negative)

    def draw(self, m: int, rng: np.random.Generator, available: np.ndarray | None = None) -> Draw:
        """Epsilon-greedy: ``m`` candidates from the primary pool, topped up from the other.

        ``available``: ``(N,)`` bool, the clients that can be drawn (default all; fewer than
        ``m`` available: all of them).
        """
        positive = bool(rng.random() < self.p_positive)
        reachable = np.ones(len(self.negative), bool) if available is None else available
        m = min(m, int(reachable.sum()))
        primary = ((~self.negative if positive else self.negative) & reachable).nonzero()[0]
        secondary = ((self.negative if positive else ~self.negative) & reachable).nonzero()[0]
        if len(primary) >= m:
            chosen = rng.choice(primary, m, replace=False)
        else:
            chosen = np.concatenate([primary, rng.choice(secondary, m - len(primary), replace=False)])
        return Draw(_mask(len(self.negative), chosen), positive, self.negative.copy())

    def uniform(self, m: int, rng: np.random.Generator, available: np.ndarray | None = None) -> Draw:
        """``m`` candidates uniformly from every (available) client, the pool-free ablation; no coin."""
        ids = np.arange(len(self.negative)) if available is None else np.flatnonzero(available)
        chosen = rng.choice(ids, min(m, len(ids)), replace=False)
        return Draw(_mask(len(self.negative), chosen), True, self.negative.copy())

    def update(self, kept: np.ndarray, removed: np.ndarray) -> None:
        """Each judged client joins the pool of its verdict."""
        self.negative[kept] = False
        self.negative[removed] = True


def _mask(n: int, ids: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, bool)
    mask[ids] = True
    return mask
