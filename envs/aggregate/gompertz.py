"""FedAdp's angle signal (Wu and Wang, IEEE TCCN 2021): smoothed angles and the Gompertz map."""

from __future__ import annotations

import numpy as np

from fl_gym.validation import is_positive, require

MAX_ALPHA = 100.0  # steeper is a step at 1 rad; at theta = 0, exp(alpha) overflows float64 beyond 709


def require_alpha(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a Gompertz ``alpha`` in ``(0, MAX_ALPHA]``."""
    require(is_positive(value) and value <= MAX_ALPHA, name, value,
            f"a float in (0, {MAX_ALPHA:g}] (FedAdp: 5)")


def gompertz(theta: np.ndarray, alpha: float = 5.0) -> np.ndarray:
    """``f(theta) = alpha (1 - exp(-exp(-alpha (theta - 1))))``, ``theta`` in radians.

    Near ``alpha`` for aligned updates (small angles), near 0 for opposed ones; steepest at 1 rad.
    """
    theta = np.asarray(theta, np.float64)
    return alpha * (1.0 - np.exp(-np.exp(-alpha * (theta - 1.0))))


def fedadp_weights(theta: np.ndarray, sizes: np.ndarray, alpha: float = 5.0) -> np.ndarray:
    """``softmax(f(theta) + ln D)``: FedAdp's aggregation weights (the equal-size case, which covers both)."""
    z = gompertz(theta, alpha) + np.log(np.asarray(sizes, np.float64))
    e = np.exp(z - z.max())
    return e / e.sum()


class AngleTracker:
    """Each client's smoothed angle: the running mean of its angles over its own participations.

    ``theta~ <- theta~ + (theta - theta~) / n`` with ``n`` the client's participation count: FedAdp's
    Eq. (8) (Wu and Wang, IEEE TCCN 2021) divides by the round index ``t``, which equals the
    participation count under the paper's full participation; counting participations is ours,
    so a client sampled rarely is not frozen by rounds it missed. Never-seen clients read ``pi / 2``.
    """

    def __init__(self, num_clients: int) -> None:
        self.count = np.zeros(num_clients, np.int64)
        self.smoothed = np.full(num_clients, np.pi / 2)

    def update(self, clients: np.ndarray, theta: np.ndarray) -> None:
        """Fold this round's angles of ``clients`` in."""
        self.count[clients] += 1
        first = self.count[clients] == 1
        old = np.where(first, 0.0, self.smoothed[clients])
        self.smoothed[clients] = old + (np.asarray(theta, np.float64) - old) / self.count[clients]
