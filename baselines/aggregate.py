"""Fixed policies for ``FLAggregate-v0`` (FedAdp: Wu and Wang, IEEE TCCN 2021), reading the observation.

| policy | action | weights |
|---|---|---|
| :class:`FedAvgWeightsPolicy` | 0 | data size (FedAvg) |
| :class:`UniformWeightsPolicy` | ``-ln(share) / L`` (centred) | equal |
| :class:`FedAdpPolicy` | ``f(theta~) / L`` | FedAdp's Gompertz weights |
| :class:`FedCosPolicy` | ``(ln cos - ln D) / L`` (centred) | ``cos(w_i, w)``, FedEnt's figure baseline |
| :class:`CleanWeightsPolicy` | ``-1`` on noisy clients, else 0 | privileged: the noisy clients left out |
"""

from __future__ import annotations

import numpy as np
from gymnasium import Env

from fl_gym.baselines.base import RowPolicy, env_of
from fl_gym.envs.aggregate.env import ROW, FLAggregateEnv
from fl_gym.envs.aggregate.gompertz import gompertz, require_alpha
from fl_gym.envs.registry import PolicyEntry


class WeightsPolicy(RowPolicy):
    """Base: an action per observation from the ``(N, 7)`` client rows (:meth:`offsets`)."""

    def __init__(self, env: Env) -> None:
        u = env_of(env, FLAggregateEnv, self)
        super().__init__(env.observation_space)
        self.n, self.scale = u.federation.num_clients, u.config.action_scale

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The offsets of the client rows, clipped to the action space."""
        rows = observation[: self.n * len(ROW)].reshape(self.n, len(ROW))
        return np.clip(self.offsets(rows), -1, 1).astype(np.float32)

    def offsets(self, rows: np.ndarray) -> np.ndarray:
        """``(N,)`` logit offsets ``a`` from the client rows."""
        raise NotImplementedError


class FedAvgWeightsPolicy(WeightsPolicy):
    """Zeros: data-size weights, FedAvg (McMahan et al., 2017)."""

    def offsets(self, rows):
        return np.zeros(self.n)


class UniformWeightsPolicy(WeightsPolicy):
    """Equal weights: ``a_i = -ln(share_i) / L``, centred."""

    def offsets(self, rows):
        a = -np.log(rows[:, ROW.index("data_share")])
        return (a - a.mean()) / self.scale


class FedAdpPolicy(WeightsPolicy):
    """FedAdp (Wu and Wang, 2021): ``a_i = f(theta~_i) / L``, the smoothed angle read back as ``pi * obs``."""

    def __init__(self, env: Env, alpha: float = 5.0) -> None:
        super().__init__(env)
        require_alpha("alpha", alpha)
        self.alpha = alpha

    def offsets(self, rows):
        theta = np.pi * rows[:, ROW.index("smoothed_angle")]
        f = gompertz(theta, self.alpha)
        return np.where(rows[:, ROW.index("participating")] > 0.5, f - self.alpha / 2, 0.0) / self.scale


class FedCosPolicy(WeightsPolicy):
    """FedCos, as Zheng et al. (IEEE TMC 2024, Eq. 51) state it: weights ``cos(w_i(t), w(t))``, normalised.

    The cosine of each local model with the global model is read from the env's exact
    statistics (the observation holds the update's angle, not the model's).
    """

    reads_env = True

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.env = env.unwrapped

    def offsets(self, rows):
        cos = np.clip(np.nan_to_num(self.env.round_stats.model_cosine), 1e-6, 1)
        a = np.log(cos) - np.log(rows[:, ROW.index("data_share")])
        return (a - a.mean()) / self.scale


class CleanWeightsPolicy(WeightsPolicy):
    """Privileged: data-size weights with the noisy clients' weight driven to ~0 (``a = -1``).

    Reads ``federation.noisy``, which a server cannot see: the upper reference of a benchmark task
    with noisy clients, not a server's policy.
    """

    reads_env = True

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.env = env.unwrapped

    def offsets(self, rows):
        return np.where(self.env.federation.noisy, -1.0, 0.0)


POLICIES = {
    "fedavg": PolicyEntry(FedAvgWeightsPolicy, "FedAvg: data-size weights (the zero action)"),
    "uniform": PolicyEntry(UniformWeightsPolicy, "equal weights for every client"),
    "fedadp": PolicyEntry(FedAdpPolicy, "FedAdp: Gompertz weights of the smoothed angles (kwarg alpha=5)"),
    "fedcos": PolicyEntry(FedCosPolicy, "FedCos: weights = cosine of each local model with the global model"),
    "clean": PolicyEntry(CleanWeightsPolicy,
                         "privileged: FedAvg's weights with the noisy clients left out (reads "
                         "federation.noisy): an upper reference"),
}
