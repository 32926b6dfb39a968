"""Fixed policies for ``FLAggregate-v0`` (spec ``fedadp.md`` 7.2), reading the observation.

| policy | action | weights |
|---|---|---|
| :class:`FedAvgWeightsPolicy` | 0 | data size (FedAvg) |
| :class:`UniformWeightsPolicy` | ``-ln(share) / L`` (centred) | equal |
| :class:`FedAdpPolicy` | ``f(theta~) / L`` | FedAdp's Gompertz weights |
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import Env

from fl_gym.envs.aggregate.env import ROW
from fl_gym.envs.aggregate.gompertz import gompertz
from fl_gym.envs.registry import PolicyEntry


class WeightsPolicy:
    """Base: an action per observation from the client rows."""

    def __init__(self, env: Env) -> None:
        u = env.unwrapped
        self.n, self.scale = u.federation.num_clients, u.config.action_scale

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Action(s) for one observation or a batch."""
        obs = np.asarray(observation, np.float64)
        rows = obs if obs.ndim == 2 else obs[None]
        actions = np.stack([self.act(r[: self.n * len(ROW)].reshape(self.n, len(ROW))) for r in rows])
        actions = np.clip(actions, -1, 1).astype(np.float32)
        return (actions if obs.ndim == 2 else actions[0]), state

    def act(self, rows: np.ndarray) -> np.ndarray:
        """``(N,)`` action from the ``(N, 7)`` client rows."""
        raise NotImplementedError


class FedAvgWeightsPolicy(WeightsPolicy):
    """Zeros: data-size weights, FedAvg (McMahan et al., 2017)."""

    def act(self, rows):
        return np.zeros(self.n)


class UniformWeightsPolicy(WeightsPolicy):
    """Equal weights: ``a_i = -ln(share_i) / L``, centred."""

    def act(self, rows):
        a = -np.log(rows[:, ROW.index("data_share")])
        return (a - a.mean()) / self.scale


class FedAdpPolicy(WeightsPolicy):
    """FedAdp (Wu and Wang, 2021): ``a_i = f(theta~_i) / L``, the smoothed angle read back as ``pi * obs``."""

    def __init__(self, env: Env, alpha: float = 5.0) -> None:
        super().__init__(env)
        self.alpha = alpha

    def act(self, rows):
        theta = np.pi * rows[:, ROW.index("smoothed_angle")]
        f = gompertz(theta, self.alpha)
        return np.where(rows[:, ROW.index("participating")] > 0.5, f - self.alpha / 2, 0.0) / self.scale


POLICIES = {
    "fedavg": PolicyEntry(FedAvgWeightsPolicy, "FedAvg: data-size weights (the zero action)"),
    "uniform": PolicyEntry(UniformWeightsPolicy, "equal weights for every client"),
    "fedadp": PolicyEntry(FedAdpPolicy, "FedAdp: Gompertz weights of the smoothed angles (kwarg alpha=5)"),
}
