"""Fixed policies for the HAPFL envs (Chen et al., HAPFL: its baselines and analytic references).

Every policy has SB3's ``predict(observation, state=None, episode_start=None, deterministic=True)``
and accepts one observation or a batch, so one evaluation loop runs fixed and learned policies
alike. A policy reads ``S^1 = 1 / obs[:k]`` (or ``S^2`` on the intensity view), decides sizes
(or the epoch split) and writes them in the action format of the env's view through
:class:`~fl_gym.envs.hetero.actions.HeteroSpec`.

| policy | sizes | epoch split | role |
|---|---|---|---|
| :class:`UniformPolicy` | one size for all | equal | FedAvg/FedProx/pFedMe allocation |
| :class:`RandomPolicy` | uniform random | Dirichlet(1) | floor |
| :class:`GreedyBySpeedPolicy` | ``delta`` groups by ``S^1``, fastest largest | equal | sizes-only ablation |
| :class:`InverseTimePolicy` | one size | ``sigma ∝ 1/S^2`` | "RL intensity only"; optimum of ``R^2`` |
| :class:`BalancedOraclePolicy` | minimise ``max/min`` of ``M(s_i) S^1_i`` | ``sigma ∝ 1/S^2`` | analytic |
| :class:`HistoryOraclePolicy` | the oracle's, on forecast times | the oracle's, forecast | history-based |
| :class:`ClairvoyantOraclePolicy` | the oracle's, on true times | the oracle's, true | privileged upper |
| :class:`HAPFLPolicy` | PPO1 | PPO2 on ``M(sizes) S^1`` | the method |
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import Env

from fl_gym.baselines.base import RowPolicy, env_of
from fl_gym.envs.base import require_fitting
from fl_gym.envs.hetero.actions import HeteroSpec, split_of
from fl_gym.envs.hetero.config import HISTORY_HORIZON, SIZE_NAMES
from fl_gym.envs.hetero.env import FLHeteroAllocEnv, FLHeteroEnv, FLHeteroIntensityEnv
from fl_gym.envs.registry import PolicyEntry
from fl_gym.validation import UserError, is_non_negative, require


class HeteroPolicy(RowPolicy):
    """Base of the fixed HAPFL policies: sizes from ``S^1``, split from ``S^2``, encoded for the view.

    :meth:`sizes` and :meth:`split` take one observation's ``(k,)`` ratios or ``(n, k)`` rows of
    several and decide every row on its own, so a batch is decided as arrays.

    Args:
        env: a HAPFL env (or its :class:`~fl_gym.envs.hetero.actions.HeteroSpec`).
    """

    batchable = True

    def __init__(self, env: Env | HeteroSpec) -> None:
        given = isinstance(env, HeteroSpec)  # a HeteroSpec alone says nothing of the observation's width
        u = None if given else env_of(env, (FLHeteroEnv, FLHeteroAllocEnv, FLHeteroIntensityEnv), self)
        super().__init__(None if u is None else env.observation_space)
        self.hetero = env if u is None else u.hetero

    def act(self, row: np.ndarray) -> np.ndarray:
        """Sizes from ``S^1``, the split from ``S^2``, encoded for the view."""
        return self._decide(row[None])[0]

    def act_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every row at once where the policy is :attr:`batchable`, else row by row."""
        return self._decide(rows) if self.batchable else super().act_rows(rows)

    def _decide(self, rows: np.ndarray) -> np.ndarray:
        h = self.hetero
        base = 1.0 / rows[:, : h.clients_per_round]  # the observation is 1 / ratio
        sizes = self.sizes(base) if h.action.acts_sizes else None
        # the split view observes S^2 already
        cost_ratio = base if sizes is None else h.time_ratio[sizes] * base
        return h.encode(sizes, self.split(cost_ratio) if h.action.acts_split else None)

    def sizes(self, probe_ratio: np.ndarray) -> np.ndarray:
        """Size index per slot from ``S^1`` (each row of a batch on its own)."""
        raise NotImplementedError

    def split(self, cost_ratio: np.ndarray) -> np.ndarray:
        """Epoch shares from ``S^2`` (default: equal)."""
        return np.full(cost_ratio.shape, 1.0 / cost_ratio.shape[-1])


def _size_index(spec: HeteroSpec, size: str) -> int:
    names = SIZE_NAMES[spec.num_sizes]
    if size not in names:
        others = [n for n, sizes in SIZE_NAMES.items() if size in sizes]
        hint = f"; num_sizes={others[0]} has {size}" if others else ""
        raise UserError(f"size={size!r} is out of range; allowed: one of {', '.join(names)} "
                        f"(num_sizes={spec.num_sizes}{hint})")
    return names.index(size)


class UniformPolicy(HeteroPolicy):
    """Everyone gets ``size`` and ``E_loc`` epochs: FedAvg's allocation (McMahan et al., 2017).

    Combine with ``algorithm="fedavg"``, ``"fedprox"`` or ``"pfedme"`` in the torch backend for the
    paper's three baselines.
    """

    def __init__(self, env: Env | HeteroSpec, size: str = "large") -> None:
        super().__init__(env)
        self.size = _size_index(self.hetero, size)

    def sizes(self, probe_ratio):
        return np.full(probe_ratio.shape, self.size)


class RandomPolicy(HeteroPolicy):
    """Uniform random sizes and a Dirichlet(1) split: the floor (per row: its sizes, then its split)."""

    batchable = False

    def __init__(self, env: Env | HeteroSpec, seed: int | None = None) -> None:
        super().__init__(env)
        self._seed_rng(seed)

    def sizes(self, probe_ratio):
        return self.rng.integers(0, self.hetero.num_sizes, probe_ratio.shape)

    def split(self, cost_ratio):
        return self.rng.dirichlet(np.ones(cost_ratio.shape[-1]), cost_ratio.shape[:-1])


class GreedyBySpeedPolicy(HeteroPolicy):
    """Rank clients by ``S^1``, cut ``delta`` equal-count groups; the fastest group gets the largest model."""

    def sizes(self, probe_ratio):
        d, k = self.hetero.num_sizes, np.shape(probe_ratio)[-1]
        order = np.argsort(probe_ratio, axis=-1, kind="stable").reshape(-1, k)
        # the size at each rank, fastest first: d equal-count groups, the first k % d one larger
        by_rank = np.repeat(np.arange(d - 1, -1, -1), k // d + (np.arange(d) < k % d))
        sizes = np.empty(order.shape, np.int64)
        sizes[np.arange(len(order))[:, None], order] = by_rank
        return sizes.reshape(np.shape(probe_ratio))


class InverseTimePolicy(UniformPolicy):
    """A fixed size and ``sigma_i ∝ 1/S^2_i``: equal local-training time, the analytic optimum of R^2."""

    def split(self, cost_ratio):
        inv = 1.0 / np.asarray(cost_ratio, dtype=np.float64)
        return inv / inv.sum(axis=-1, keepdims=True)


FITS = ("largest", "smallest")


def balanced_sizes(probe_ratio: np.ndarray, time_ratio: np.ndarray, fit: str = "largest") -> np.ndarray:
    """Sizes minimising ``max_i / min_i`` of ``M(s_i) S^1_i``, exactly.

    The ``k * delta`` candidates ``log(M(s) S^1_i)`` are sorted and the narrowest window holding a
    candidate of every client is found by a sliding window (the "smallest range covering k
    lists" problem, ``O(k delta log(k delta))``); each client then gets the largest size whose
    candidate lies in the window, or with ``fit="smallest"`` the smallest: the balance is the same
    where a client has two sizes in the window, and the smaller trains in less time, which
    HAPFL's ``R^2`` counts in absolute seconds.
    """
    k, d = len(probe_ratio), len(time_ratio)
    log_probe = np.log(np.asarray(probe_ratio, np.float64))
    log_time = np.log(np.asarray(time_ratio, np.float64))
    cand = log_probe[:, None] + log_time[None, :]
    flat, owner = cand.ravel(), np.repeat(np.arange(k), d)
    order = np.argsort(flat, kind="stable")
    counts, covered, lo = np.zeros(k, np.int64), 0, 0
    best = (np.inf, 0.0, 0.0)
    for hi in range(k * d):
        o = owner[order[hi]]
        counts[o] += 1
        covered += counts[o] == 1
        while covered == k:
            width = flat[order[hi]] - flat[order[lo]]
            if width < best[0]:
                best = (width, flat[order[lo]], flat[order[hi]])
            o_lo = owner[order[lo]]
            counts[o_lo] -= 1
            covered -= counts[o_lo] == 0
            lo += 1
    _, low, high = best
    inside = (cand >= low - 1e-12) & (cand <= high + 1e-12)
    if fit == "smallest":
        return np.argmax(inside, axis=1).astype(np.int64)
    return (d - 1 - np.argmax(inside[:, ::-1], axis=1)).astype(np.int64)


class BalancedOraclePolicy(HeteroPolicy):
    """Sizes that balance per-epoch cost exactly (:func:`balanced_sizes`) and ``sigma ∝ 1/S^2``.

    The analytic reference for HAPFL: with noise and drift off it solves both rewards from the
    observation; the env's default dynamics keep it from being exact.

    Args:
        env: a HAPFL env (or its :class:`~fl_gym.envs.hetero.actions.HeteroSpec`).
        fit: which size a client gets where several lie in the balance window: ``largest`` (the
            most capacity) or ``smallest`` (the least training time).
    """

    def __init__(self, env: Env | HeteroSpec, fit: str = "largest") -> None:
        super().__init__(env)
        if fit not in FITS:
            raise UserError(f"fit={fit!r} is out of range; allowed: one of {', '.join(FITS)}")
        self.fit = fit

    def sizes(self, probe_ratio):
        return np.apply_along_axis(balanced_sizes, -1, probe_ratio, self.hetero.time_ratio, self.fit)

    split = InverseTimePolicy.split


class HistoryOraclePolicy(BalancedOraclePolicy):
    """The oracle on forecast per-epoch times: ``S^1`` times each client's last measured slowdown.

    Reads ``obs_mode="history"``: a slowdown ``d`` measured ``a`` rounds before this one forecasts
    ``d ** (rho ** (a + 1))``, the conditional median of an AR(1) log drift of persistence
    ``rho``; a client never measured (or measured longer ago than the observation shows)
    forecasts 1. ``rho=0`` is the plain oracle.

    Args:
        env: a HAPFL env with ``obs_mode="history"``.
        rho: the persistence the forecast assumes.
        fit: as in :class:`BalancedOraclePolicy`.
    """

    def __init__(self, env: Env | HeteroSpec, rho: float = 0.9, fit: str = "largest") -> None:
        super().__init__(env, fit)
        require(is_non_negative(rho) and rho <= 1, "rho", rho, "a float in [0, 1]")
        self.rho = rho

    def _decide(self, rows: np.ndarray) -> np.ndarray:
        k = self.hetero.clients_per_round
        if rows.shape[-1] != 3 * k:
            raise UserError(f"observation width={rows.shape[-1]} is out of range; allowed: {3 * k} "
                             f"(obs_mode='history')")
        slowdown = 1.0 / rows[:, k: 2 * k].astype(np.float64) - 1.0
        age = np.rint(rows[:, 2 * k:].astype(np.float64) * (1 + HISTORY_HORIZON)) - 1
        forecast = np.where(age < HISTORY_HORIZON, slowdown ** (self.rho ** (age + 1)), 1.0)
        return super()._decide(np.concatenate([rows[:, :k] / forecast, rows[:, k:]], axis=-1))


class ClairvoyantOraclePolicy(BalancedOraclePolicy):
    """Privileged: the oracle on the true per-epoch times, this round's drift included.

    Reads the pending round's drift, which the server learns only after training: the upper
    reference of a task with a persistent load, not a server's policy.
    """

    reads_env, batchable = True, False

    def __init__(self, env: Env, fit: str = "largest") -> None:
        super().__init__(env, fit)
        self.env = env.unwrapped

    def _decide(self, rows: np.ndarray) -> np.ndarray:
        pending, k = self.env.pending, self.hetero.clients_per_round
        drift = pending.opened.load.drift[pending.slots]
        return super()._decide(np.concatenate([rows[:, :k] / drift, rows[:, k:]], axis=-1))


class HAPFLPolicy(HeteroPolicy):
    """HAPFL: a frozen PPO1 picks sizes from ``S^1``, a frozen PPO2 splits epochs from ``M(sizes) S^1``.

    Args:
        env: the joint env (``FLHetero-v0``) it acts on.
        ppo1: a predictor on ``FLHeteroAlloc-v0``'s spaces.
        ppo2: a predictor on ``FLHeteroIntensity-v0``'s spaces.
    """

    batchable = False  # its networks' products on a batch may round differently from one row's

    def __init__(self, env: Env | HeteroSpec, ppo1: Any, ppo2: Any) -> None:
        super().__init__(env)
        h = self.hetero
        if h.view != "joint":
            raise UserError(f"HAPFLPolicy: expected the joint view (FLHetero-v0), got {h.view!r}")
        if isinstance(env, Env):
            for name, model in (("ppo1", ppo1), ("ppo2", ppo2)):
                require_fitting(f"HAPFLPolicy: {name}", model, env.observation_space)
        self.ppo1, self.ppo2 = ppo1, ppo2

    def act(self, row: np.ndarray) -> np.ndarray:
        """PPO1's sizes, then PPO2's split on the implied ``S^2``."""
        h = self.hetero
        k = h.clients_per_round
        sizes = np.asarray(self.ppo1.predict(row.astype(np.float32), deterministic=True)[0], dtype=np.int64)
        s2_obs = np.concatenate([row[:k] / h.time_ratio[sizes], row[k:]]).astype(np.float32)
        sigma = split_of(self.ppo2.predict(s2_obs, deterministic=True)[0])
        return h.encode(sizes, sigma)


def _uniform(env: Env | HeteroSpec, size: str = "large") -> UniformPolicy:
    return UniformPolicy(env, size)


def _history_oracle(env: Env | HeteroSpec, rho: float = 0.9, fit: str = "largest") -> HistoryOraclePolicy:
    policy = HistoryOraclePolicy(env, rho, fit)  # first: it refuses another family's env
    if isinstance(env, Env) and (mode := env.unwrapped.config.obs_mode) != "history":
        raise UserError(f"obs_mode={mode!r} is out of range; allowed: 'history' (history-oracle reads the "
                         f"measured slowdowns)")
    return policy


POLICIES = {
    "uniform": PolicyEntry(_uniform,
                           "one size for all (kwarg size, default large), equal epochs: FedAvg's allocation"),
    "large": PolicyEntry(lambda env: _uniform(env, "large"), "every client the large model, equal epochs"),
    "small": PolicyEntry(lambda env: _uniform(env, "small"), "every client the small model, equal epochs"),
    "medium": PolicyEntry(lambda env: _uniform(env, "medium"), "every client the medium model (num_sizes=3)"),
    "random": PolicyEntry(lambda env, seed=0: RandomPolicy(env, seed),
                          "uniform random sizes, Dirichlet(1) split (kwarg seed, default 0): the floor"),
    "greedy": PolicyEntry(GreedyBySpeedPolicy, "fastest third gets the largest model, equal epochs"),
    "inverse": PolicyEntry(InverseTimePolicy, "one size (kwarg size), epochs proportional to speed"),
    "oracle": PolicyEntry(BalancedOraclePolicy,
                          "exactly balanced sizes, epochs proportional to speed "
                          "(kwarg fit: the largest or smallest size inside the balance window)"),
    "history-oracle": PolicyEntry(_history_oracle,
                                  "the oracle on forecast times: each client's last measured "
                                  "slowdown, shrunk by its age (kwargs rho=0.9, fit)",
                                  {"obs_mode": "history"}),
    "clairvoyant": PolicyEntry(ClairvoyantOraclePolicy,
                               "privileged: the oracle on the true times, this round's "
                               "drift included (reads the pending round; kwarg fit): an upper reference"),
    "fedavg": PolicyEntry(_uniform, "FedAvg (McMahan et al., 2017): large models, equal epochs, no LiteModel",
                          {"algorithm": "fedavg"}),
    "fedprox": PolicyEntry(_uniform, "FedProx (Li et al., 2020): FedAvg's allocation with the proximal term",
                           {"algorithm": "fedprox"}),
    "pfedme": PolicyEntry(_uniform, "pFedMe (Dinh et al., 2020): FedAvg's allocation, Moreau-envelope solver "
                          "(its K=5 inner passes charged: pfedme_overhead=5)",
                          {"algorithm": "pfedme", "pfedme_overhead": 5.0}),
}

