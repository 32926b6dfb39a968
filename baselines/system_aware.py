"""System-aware client selection on ``FLSelectPick-v0``: FedCS, power-of-choice and Oort.

Each reads the client rows' system columns (:data:`~fl_gym.envs.select.spaces.SYSTEM_ROW_EXTRAS`:
reachable, share of updates arrived, reported round time, last loss), present with device
behaviour on or ``system_rows=True``, and picks among the reachable clients only.

The reported round time ``t`` reaches a policy as ``x = t / (t + T)``, ``T`` the deadline or
without one the round's median reported time; so ``t / T = x / (1 - x)``.

* :class:`FedCSPickPolicy` (Nishio and Yonetani, ICC 2019, Algorithm 2): greedily add the client
  whose reported round time is shortest while it fits the round's deadline. FedCS schedules the
  uploads one after the other on a shared channel; fl-gym's clients upload in parallel, so the
  greedy schedule is the fastest clients whose own time fits, up to ``m`` (without a deadline:
  the ``m`` fastest; none fits: the fastest one).
* :class:`PowerOfChoicePickPolicy` (Cho, Wang and Joshi, AISTATS 2022, ``rpow-d``): draw ``d``
  candidates without replacement with probability proportional to their data size, pick the
  ``m`` of highest last reported local loss (a client never trained first: its loss is unknown).
* :class:`OortPickPolicy` (Lai et al., OSDI 2021, Algorithm 1): a client's utility is its
  statistical utility ``|B_i| * loss_i`` plus the staleness bonus ``sqrt(0.1 log R / L_i)``
  (``L_i`` the round it last trained), times ``(T / t_i)^alpha`` where its reported time
  ``t_i`` exceeds the preferred round duration ``T`` (the deadline, else the round's median
  reported time). A share ``epsilon`` of the ``m`` slots explores clients never trained, faster
  ones more likely; the rest exploit: drawn, in proportion to utility, among the clients whose
  utility is at least ``cutoff`` of the last slot's. ``epsilon`` starts at 0.9 and decays by 0.98
  per round to 0.2. Two simplifications, both for what the observation holds: the loss is the
  client's mean training loss (Oort's root mean square of per-sample losses), and the pacer that
  relaxes ``T`` over time is left out.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import Env

from fl_gym.baselines.select import PickPolicy
from fl_gym.envs.select.spaces import GLOBAL
from fl_gym.validation import is_int_at_least, is_non_negative, require, require_fraction


class SystemPickPolicy(PickPolicy):
    """Base: a pick policy that reads the rows' system columns (module docstring).

    Args:
        env: a pick env whose rows carry them (its episode length dates the rounds).
        m: clients per round (default the env's).
        seed: the policy's own generator.
    """

    def __init__(self, env: Env, m: int | None = None, seed: int = 0) -> None:
        super().__init__(env, m, seed)
        require(self.layout.system, "system_rows", False,
                "True, or device behaviour on (a FLSelectPick-v0 env whose rows carry the system columns)")
        self.horizon = env.unwrapped.rounds_per_episode

    def columns(self, observation: np.ndarray) -> tuple[np.ndarray, ...]:
        """The reachable mask, reported durations, last losses, sizes, seen flags and stalenesses."""
        col = self.layout.column
        return (self.layout.available(observation), col(observation, "duration"), col(observation, "loss"),
                col(observation, "size"), col(observation, "seen") > 0.5, col(observation, "staleness"))

    def round_of(self, observation: np.ndarray) -> int:
        """The 1-based round about to be played."""
        progress = observation[self.layout.num_clients * self.layout.row_width + GLOBAL.index("progress")]
        return int(round(progress * self.horizon)) + 1


class FedCSPickPolicy(SystemPickPolicy):
    """FedCS: the fastest reachable clients whose reported time fits the deadline (module docstring)."""

    def __init__(self, env: Env, m: int | None = None, seed: int = 0) -> None:
        super().__init__(env, m, seed)
        self.deadline = math.isfinite(env.unwrapped.federation.config.behaviour.deadline)

    def pick(self, observation):
        available, duration = self.columns(observation)[:2]
        ranked = np.argsort(duration, kind="stable")
        ranked = ranked[available[ranked]]
        fits = ranked[duration[ranked] < 0.5] if self.deadline else ranked  # t < T
        return self._mask((fits if len(fits) else ranked[:1])[: self.m])


class PowerOfChoicePickPolicy(SystemPickPolicy):
    """Power-of-choice (``rpow-d``): ``d`` size-weighted candidates, the ``m`` of highest loss."""

    def __init__(self, env: Env, m: int | None = None, seed: int = 0, d: int | None = None) -> None:
        super().__init__(env, m, seed)
        require(d is None or is_int_at_least(d, self.m), "d", d, f"None (2m) or an integer >= m = {self.m}")
        self.d = 2 * self.m if d is None else d

    def pick(self, observation):
        available, _, loss, size, seen, _ = self.columns(observation)
        ids = np.flatnonzero(available)
        weight = size[ids] / size[ids].sum()
        candidates = self.rng.choice(ids, min(self.d, len(ids)), replace=False, p=weight)
        key = np.where(seen[candidates], loss[candidates], np.inf)
        return self._mask(candidates[np.argsort(-key, kind="stable")][: self.m])


class OortPickPolicy(SystemPickPolicy):
    """Oort: utility-driven exploitation and speed-biased exploration (module docstring)."""

    def __init__(self, env: Env, m: int | None = None, seed: int = 0, alpha: float = 2.0,
                 epsilon: float = 0.9, decay: float = 0.98, min_epsilon: float = 0.2, cutoff: float = 0.95
                 ) -> None:
        super().__init__(env, m, seed)
        require(is_non_negative(alpha), "alpha", alpha, "a float >= 0")
        for name, value in (("epsilon", epsilon), ("decay", decay), ("min_epsilon", min_epsilon),
                            ("cutoff", cutoff)):
            require_fraction(name, value)
        self.alpha, self.cutoff = alpha, cutoff
        self.epsilon, self.decay, self.min_epsilon = epsilon, decay, min_epsilon

    def utility(self, observation: np.ndarray) -> np.ndarray:
        """``(N,)`` each client's utility this round (a client that reported no loss: its bonus only)."""
        _, duration, loss, size, _, stale = self.columns(observation)
        r = self.round_of(observation)
        last = np.maximum(r - stale * self.horizon, 1.0)  # the round it was last picked
        statistical = size * loss + np.sqrt(0.1 * math.log(r) / last)
        over = duration / np.maximum(1.0 - duration, 1e-12)  # t / T (float32 rounds a huge t to 1)
        penalty = np.where(over > 1.0, over ** -self.alpha, 1.0)
        return statistical * penalty

    def pick(self, observation):
        available, duration, _, _, seen, _ = self.columns(observation)
        epsilon = max(self.min_epsilon, self.epsilon * self.decay ** (self.round_of(observation) - 1))
        known, unknown = np.flatnonzero(available & seen), np.flatnonzero(available & ~seen)
        m = min(self.m, len(known) + len(unknown))
        explore = min(len(unknown), max(round(epsilon * m), m - len(known)))
        chosen = [self._exploit(known, self.utility(observation)[known], m - explore)]
        if explore:
            speed = (1.0 - duration[unknown]) / np.maximum(duration[unknown], 1e-12)  # T / t
            chosen.append(self.rng.choice(unknown, explore, replace=False, p=speed / speed.sum()))
        return self._mask(np.concatenate(chosen).astype(np.int64))

    def _exploit(self, ids: np.ndarray, utility: np.ndarray, k: int) -> np.ndarray:
        """``k`` of ``ids`` drawn in proportion to utility among those within ``cutoff`` of the k-th best."""
        if k <= 0:
            return ids[:0]
        ranked = np.argsort(-utility, kind="stable")
        pool = ranked[utility[ranked] >= self.cutoff * utility[ranked[k - 1]]]
        weight = utility[pool]
        p = weight / weight.sum() if np.count_nonzero(weight) >= k else None  # too few positive: uniformly
        return ids[self.rng.choice(pool, k, replace=False, p=p)]
