"""FedAdp's decision as a Gymnasium env: the aggregation weights of this round's trained updates.

Each round every client trains; the agent sees each update's angle to the round's mean update
(and the clients' smoothed angles, their Gompertz values, data shares, update norms, losses) and
sets the weights; ``a = 0`` is exactly FedAvg. See ``docs/envs/flaggregate.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from fl_gym.envs.aggregate.config import AggregateConfig
from fl_gym.envs.aggregate.gompertz import AngleTracker, gompertz
from fl_gym.envs.base import ClientRows
from fl_gym.envs.learning import Scored, TargetReward, TargetRewardEnv
from fl_gym.records import LocalStats, RoundPlan, RoundReport, TrainedRound

ROW = ("participating", "cos", "smoothed_angle", "gompertz", "data_share", "norm_ratio", "last_loss")
GLOBAL = ("progress", "val_accuracy", "lr_ratio")


def action_weights(action: np.ndarray, sizes: np.ndarray, scale: float) -> np.ndarray:
    """Weights proportional to ``D_i exp(L a_i)`` (the federation normalises them).

    At ``a = 0`` they are the data sizes themselves, so the round is FedAvg's bit for bit.
    """
    z = scale * np.clip(np.asarray(action, np.float64), -1, 1)
    return np.exp(z - z.max()) * np.asarray(sizes, np.float64)


@dataclass(frozen=True)
class Aggregated(Scored):
    """A played round: its reward terms and the ``(K,)`` update angles its weights were decided on.

    The angles, not the round's trained models, which would otherwise stay alive until the next step.
    """

    angles: np.ndarray


class FLAggregateEnv(TargetRewardEnv):
    """FedAdp (Wu and Wang): per-client aggregation weights from this round's update angles.

    ## Description
    One step is one round: every client has trained from the global model; the agent weights
    their updates; the weighted average becomes the next global model.

    ## Action Space
    ``Box(-1, 1, (N,))``, one slot per client id: weights ``D_i exp(L a_i)`` normalised
    (``L = action_scale``). The zero action is FedAvg; FedAdp is ``a_i = f(theta~_i) / L``.

    ## Observation Space
    ``Box(-1, 3, (7N + 3,))``: per client (:data:`ROW`) participation, cosine of its update with
    the round's data-weighted mean update, smoothed angle / pi, Gompertz value / alpha, data share,
    update norm / mean norm (clipped at 3), last-epoch loss / ln C (clipped at 3); then
    (:data:`GLOBAL`) round / rounds, last validation accuracy, learning rate / initial.

    ## Device behaviour
    With ``availability < 1``, dropout or a ``deadline`` (:mod:`fl_gym.behaviour`) only the
    reachable clients train, and an update lost to dropout or the deadline does not arrive: its
    row shows it not participating, its weight is ignored, and ``info["aggregate/lost"]`` and
    ``info["aggregate/partial"]`` name the lost and cut updates.

    ## Rewards
    ``reward``: validation accuracy gain (default), ``rounds`` (-1 per round) or ``favor``
    (:mod:`fl_gym.envs.learning`).

    ## Episode End
    Terminated at the target accuracy with ``stop_at_target``; truncated after
    ``rounds_per_episode`` rounds.

    ## Arguments
    :class:`~fl_gym.envs.aggregate.config.AggregateConfig` and the shared scenario.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLAggregate-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space.shape
    ((73,), (10,))
    """

    family = "aggregate"
    config_class = AggregateConfig
    config: AggregateConfig
    device_behaviour = True

    def _setup(self) -> None:
        n = self.federation.num_clients
        low = np.tile(np.array([0, -1, 0, 0, 0, 0, 0], np.float32), n)
        high = np.tile(np.array([1, 1, 1, 1, 1, 3, 3], np.float32), n)
        self.observation_space = spaces.Box(np.r_[low, np.zeros(3, np.float32)],
                                            np.r_[high, np.ones(3, np.float32)], dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (n,), np.float32)
        self.client_rows = ClientRows(len(ROW), len(GLOBAL))
        self._log_c = math.log(self.federation.num_classes)

    def _reset_state(self) -> None:
        self.tracker = AngleTracker(self.federation.num_clients)
        self._target = TargetReward(self.federation, self.config)

    def _lr_ratio(self) -> float:
        return self.config.lr_decay ** self._round

    def _prepare(self) -> TrainedRound:
        """Train every (reachable) client from the global model; fold the angles into the tracker."""
        fed = self.federation
        opened = fed.open_round()
        plan = RoundPlan.make(fed.num_clients, lr=self.config.scenario.lr * self._lr_ratio(),
                              epochs=self.config.local_epochs, selected=opened.candidates)
        trained = fed.train_round(opened, plan)
        clients = (trained.steps > 0).nonzero()[0]
        self.tracker.update(clients, trained.stats.update_angle[clients])
        return trained

    def _observe(self, pending: TrainedRound) -> np.ndarray:
        return self.observe_copies([self])[0]

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's row of :meth:`observe_copies`' arrays."""
        fed, trained = self.federation, self._pending
        stats = trained.stats
        return (trained.steps > 0, stats.update_norm, stats.update_angle, self.tracker.smoothed,
                fed.sizes / fed.sizes.sum(), stats.last_epoch_loss,
                (self._round / self.rounds_per_episode, self._target.validation.observed, self._lr_ratio()))

    @classmethod
    def observe_copies(cls, envs: Sequence[FLAggregateEnv]) -> np.ndarray:
        """Every copy's observation, the rule written over ``(copies, K)`` arrays (one env: one row)."""
        first = envs[0]
        part, norm, angle, smoothed, share, loss, glob = cls.observed_columns(envs)
        alpha = first.config.gompertz_alpha
        norm = np.nan_to_num(norm, posinf=np.finfo(np.float32).max)  # a diverged update's: no sum overflows
        counted, total = part.sum(axis=1, keepdims=True), (norm * part).sum(axis=1, keepdims=True)
        mean_norm = np.where(counted > 0, total / np.maximum(counted, 1), 1.0)  # every update lost: 1
        rows = np.stack([
            part, np.where(part, np.cos(np.nan_to_num(angle)), 0.0), smoothed / np.pi,
            gompertz(smoothed, alpha) / alpha, share, np.clip(norm / np.maximum(mean_norm, 1e-12), 0, 3),
            np.clip(np.nan_to_num(loss) / first._log_c, 0, 3)], axis=-1)
        space = first.observation_space
        observations = np.concatenate([rows.reshape(len(envs), -1), glob], axis=1)
        return np.clip(observations, space.low, space.high).astype(np.float32)

    def _play(self, pending: TrainedRound, action: np.ndarray) -> tuple[RoundReport, Aggregated]:
        weight = action_weights(action, self.federation.sizes, self.config.action_scale)
        report = self.federation.finish_round(pending, weight=weight)
        return report, Aggregated(self._target.update(report), pending.stats.update_angle)

    @property
    def round_stats(self) -> LocalStats:
        """The pending round's exact local statistics (for fixed policies such as FedCos)."""
        return self._pending.stats

    def _family_info(self, report: RoundReport, outcome: Aggregated,
                     terms: Mapping[str, float]) -> dict[str, Any]:
        return {"aggregate/weights": report.weights, "aggregate/angles": outcome.angles,
                "aggregate/smoothed_angles": self.tracker.smoothed.copy(),
                "aggregate/val_accuracy": report.val_accuracy,
                "aggregate/rounds_to_target": self._target.rounds_to_target,
                "aggregate/lost": report.lost.nonzero()[0],
                "aggregate/partial": report.partial.nonzero()[0]}
