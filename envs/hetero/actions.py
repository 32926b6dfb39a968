"""HAPFL's action algebra: model sizes, the epoch split, and how actions encode them.

After Chen et al. (HAPFL), PPO2's epoch split and its Algorithm 1, with our encodings:

* PPO1 picks a size index per client slot (``0`` = smallest ... ``delta-1`` = largest);
* PPO2 outputs ``k`` logits in ``[-1, 1]``; ``sigma = softmax(3 a)`` splits the round's epoch
  budget ``tau_total``, and :func:`integerize` turns ``sigma * tau_total`` into whole epochs
  ``>= 1`` that sum to the budget (largest remainders; ties to the lower slot);
* on the joint action, sizes are ordinal bins of ``[-1, 1]``; a size ``s`` encodes as the bin
  centre ``-1 + (2s+1)/delta`` and ``sigma`` as centred log-ratios scaled by 1/3, so
  ``decode(encode(x)) == x`` whenever the centred log-ratios lie within +-3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from gymnasium import spaces

from fl_gym.validation import UserError, as_array, require

LOGIT_SCALE = 3.0


def softmax(a: np.ndarray, scale: float = LOGIT_SCALE) -> np.ndarray:
    """``softmax(scale * a)`` over the last axis, stable; invariant to adding a constant to ``a``."""
    z = scale * np.asarray(a, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def integerize(sigma: np.ndarray, total: int) -> np.ndarray:
    """Whole epochs ``tau_i >= 1`` with ``sum(tau) == total``, each within 1 of ``sigma_i * total``.

    Proportional largest-remainder rounding with a floor of 1 (ours: the paper leaves it open);
    needs ``total >= k``. ``sigma``: ``(k,)`` or rows ``(..., k)`` (each row alone, the same steps
    on every row at once).
    """
    k = np.shape(sigma)[-1]
    if total < k:
        raise UserError(f"total_epochs={total} is out of range; allowed: >= clients per round ({k})")
    x = np.asarray(sigma, dtype=np.float64).reshape(-1, k) * total
    tau = np.maximum(1, np.floor(x)).astype(np.int64)
    short = total - tau.sum(axis=1)
    rows = np.arange(len(tau))[:, None]
    order = np.argsort(tau - x, axis=1, kind="stable")  # largest remainder first, ties to the lower slot
    tau[rows, order] += np.arange(k) < short[:, None]
    for step in range(-int(short.min(initial=0))):  # only the floor of 1 can overshoot
        slack = np.where(tau > 1, x - tau, np.inf)
        over = -short > step
        tau[rows[over, 0], slack.argmin(axis=1)[over]] -= 1
    return tau.reshape(np.shape(sigma))


def split_of(logits: np.ndarray) -> np.ndarray:
    """The epoch split that split logits give: ``softmax(3 a)`` of ``a`` clipped to ``[-1, 1]`` (per row)."""
    return softmax(np.asarray(logits).clip(-1, 1))


def size_bins(a: np.ndarray, num_sizes: int) -> np.ndarray:
    """Ordinal bins of ``[-1, 1]``: ``min(delta-1, floor((a+1)/2 * delta))``."""
    bins = np.floor((np.asarray(a, dtype=np.float64) + 1.0) / 2.0 * num_sizes).astype(np.int64)
    return np.minimum(np.maximum(bins, 0), num_sizes - 1)  # np.clip's dtype checks cost 3x as much


def size_centres(sizes: np.ndarray, num_sizes: int) -> np.ndarray:
    """Bin centres ``-1 + (2s+1)/delta`` of size indices."""
    return -1.0 + (2.0 * np.asarray(sizes, dtype=np.float64) + 1.0) / num_sizes


def sigma_logits(sigma: np.ndarray) -> np.ndarray:
    """Logits in ``[-1, 1]`` whose :func:`softmax` is ``sigma`` (clipped at +-3 centred log-ratio)."""
    logs = np.log(np.asarray(sigma, dtype=np.float64) + 1e-12)
    return np.clip(logs - logs.mean(axis=-1, keepdims=True), -LOGIT_SCALE, LOGIT_SCALE) / LOGIT_SCALE


class HeteroAction:
    """What one HAPFL view's action carries, its space, and how sizes and a split encode into it.

    A view acts the sizes, the epoch split or both (HighwayEnv's action types, per view). Subclasses
    set :attr:`name` (the view), :attr:`reward` (the one reward of a one-lever view; None: any),
    :attr:`acts_sizes`, :attr:`acts_split` and implement the three methods. ``encode`` and ``decode``
    take one action or a batch of them (the last axis).
    """

    name: ClassVar[str]
    reward: ClassVar[str | None]
    acts_sizes: ClassVar[bool]
    acts_split: ClassVar[bool]

    def space(self, k: int, num_sizes: int) -> spaces.Space:
        """The action space for ``k`` client slots and ``num_sizes`` model sizes."""
        raise NotImplementedError

    def encode(self, num_sizes: int, sizes: np.ndarray | None, sigma: np.ndarray | None) -> np.ndarray:
        """The action that carries ``sizes`` and/or ``sigma``."""
        raise NotImplementedError

    def decode(self, num_sizes: int, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(sizes, sigma)`` an action specifies (None for the half it does not carry)."""
        raise NotImplementedError


class SizesAndSplit(HeteroAction):
    """The joint view: ``k`` size slots (ordinal bins of ``[-1, 1]``), then ``k`` split logits."""

    name, reward, acts_sizes, acts_split = "joint", None, True, True

    def space(self, k: int, num_sizes: int) -> spaces.Space:
        """``Box(-1, 1, (2k,))``."""
        return spaces.Box(-1.0, 1.0, (2 * k,), np.float32)

    def encode(self, num_sizes: int, sizes: np.ndarray | None, sigma: np.ndarray | None) -> np.ndarray:
        """Size bin centres, then centred log-ratios of ``sigma`` over 3."""
        return np.concatenate([size_centres(sizes, num_sizes), sigma_logits(sigma)],
                              axis=-1).astype(np.float32)

    def decode(self, num_sizes: int, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The bins of the first half, ``softmax(3 a)`` of the second."""
        a = np.asarray(action).clip(-1, 1)
        k = a.shape[-1] // 2
        return size_bins(a[..., :k], num_sizes), softmax(a[..., k:])


class Sizes(HeteroAction):
    """HAPFL's PPO1 view: a size index per slot; the split comes from an injected policy."""

    name, reward, acts_sizes, acts_split = "alloc", "r1", True, False

    def space(self, k: int, num_sizes: int) -> spaces.Space:
        """``MultiDiscrete([delta] * k)``."""
        return spaces.MultiDiscrete([num_sizes] * k)

    def encode(self, num_sizes: int, sizes: np.ndarray | None, sigma: np.ndarray | None) -> np.ndarray:
        """The size indices themselves."""
        return np.asarray(sizes, dtype=np.int64)

    def decode(self, num_sizes: int, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The indices; no split."""
        return np.asarray(action).astype(np.int64), None


class Split(HeteroAction):
    """HAPFL's PPO2 view: ``k`` split logits; the sizes come from an injected policy."""

    name, reward, acts_sizes, acts_split = "intensity", "r2", False, True

    def space(self, k: int, num_sizes: int) -> spaces.Space:
        """``Box(-1, 1, (k,))``."""
        return spaces.Box(-1.0, 1.0, (k,), np.float32)

    def encode(self, num_sizes: int, sizes: np.ndarray | None, sigma: np.ndarray | None) -> np.ndarray:
        """Centred log-ratios of ``sigma`` over 3."""
        return sigma_logits(sigma).astype(np.float32)

    def decode(self, num_sizes: int, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """No sizes; :func:`split_of` the logits."""
        return None, split_of(action)


ACTIONS: dict[str, HeteroAction] = {a.name: a for a in (SizesAndSplit(), Sizes(), Split())}  # by view


@dataclass(frozen=True)
class HeteroSpec:
    """What a policy needs to know to act on a HAPFL env.

    Attributes:
        view: a key of :data:`ACTIONS`: ``"joint"`` (observes ``S^1``; acts sizes and split),
            ``"alloc"`` (observes ``S^1``; acts sizes) or ``"intensity"`` (observes ``S^2``; acts the split).
        clients_per_round: ``k`` (slots).
        num_sizes: ``delta``.
        time_ratio: ``(delta,)`` ``M(s) = (c(s) + c(lite)) / c(lite)``, per-epoch local-training
            cost of size ``s`` in LiteModel epochs.
    """

    view: str
    clients_per_round: int
    num_sizes: int
    time_ratio: np.ndarray

    @property
    def action(self) -> HeteroAction:
        """The view's action type."""
        return ACTIONS[self.view]

    def with_view(self, view: str) -> HeteroSpec:
        """The same scenario seen through another view (e.g. the intensity view of a joint env)."""
        return dataclasses.replace(self, view=view)

    def encode(self, sizes: np.ndarray | None, sigma: np.ndarray | None) -> np.ndarray:
        """The action of this view that carries ``sizes`` and/or ``sigma`` (or the rows of several)."""
        return self.action.encode(self.num_sizes, sizes, sigma)

    def require_choices(self, sizes: object, sigma: object) -> None:
        """Refuse, by name, a half of the action this view carries that :meth:`encode` cannot encode.

        ``sizes``: ``k`` size indices per row; ``sigma``: ``k`` epoch shares per row, >= 0 and not all
        0 (their centred log-ratios are encoded, so they need not sum to 1). A half the view does not
        carry is not read.
        """
        k, act = self.clients_per_round, self.action
        if act.acts_sizes:
            allowed = f"{k} size indices in 0..{self.num_sizes - 1} per row (the {self.view} view acts sizes)"
            s = self._rows("sizes", sizes, allowed)
            require(s is not None and bool(np.all((s == np.floor(s)) & (s >= 0) & (s < self.num_sizes))),
                    "sizes", sizes, allowed)
        if act.acts_split:
            allowed = f"{k} epoch shares >= 0, not all 0, per row (the {self.view} view acts the epoch split)"
            g = self._rows("sigma", sigma, allowed)
            require(g is not None and bool(np.all(np.isfinite(g) & (g >= 0)) and np.all(g.sum(axis=-1) > 0)),
                    "sigma", sigma, allowed)

    def _rows(self, name: str, value: object, allowed: str) -> np.ndarray | None:
        """``value`` as rows of ``k`` real numbers, or None where it is none (missing, another shape)."""
        rows = as_array(name, value, allowed)
        whole = value is not None and rows.ndim >= 1 and rows.shape[-1] == self.clients_per_round
        return rows if whole and rows.dtype.kind in "iuf" else None

    def decode(self, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(sizes, sigma)`` an action of this view specifies (None for the half it does not)."""
        return self.action.decode(self.num_sizes, action)
