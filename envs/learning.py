"""What the learning-rate and aggregation-weight families share: algorithm variants and the reward.

Both families run every sampled client through real local training, so their baselines are
algorithm variants of the same env (FedProx, FedDyn locally; FedAvgM, FedAdam on the server, the
baselines of Zheng et al., IEEE TMC 2024) and their rewards read the validation accuracy:

| ``reward`` | per round | return |
|---|---|---|
| ``acc_gain`` (default) | ``acc_val(t) - acc_val(t-1)`` | final minus initial validation accuracy |
| ``acc_area`` | ``acc_gain`` x ``(T - t + 1) / T`` | mean of ``acc_val(t) - acc_val(0)`` over rounds |
| ``loss_drop`` | ``loss_val(t-1) - loss_val(t)`` (cross-entropy) | initial minus final validation loss |
| ``loss_area`` | ``loss_drop`` x ``(T - t + 1) / T`` | mean of ``loss_val(0) - loss_val(t)`` over rounds |
| ``rounds`` | ``-1`` | minus the rounds played (to the target with ``stop_at_target``) |
| ``favor`` | ``64^(acc_val(t) - target) - 1`` | FAVOR's (Wang et al., INFOCOM 2020) |

The reward's accuracy comes from the validation split held out of the test set; the reported
accuracy (``info["accuracy"]``) and the rounds to the target come from the rest of the test set.
The loss rewards charge a validation cross-entropy at most ``10 ln C``, and a diverged model's
(NaN) that cap (``fl_gym.envs.base.charged_loss``), so their returns stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fl_gym.aggregation import SERVER_RULES, ServerConfig
from fl_gym.config import FederationConfig
from fl_gym.envs.base import FLEnv, ValidationGain, favor
from fl_gym.envs.presets import PresetConfig
from fl_gym.federation import Federation
from fl_gym.records import RoundReport
from fl_gym.validation import is_non_negative, is_positive, require, require_choice, require_fraction

REWARDS = ("acc_gain", "acc_area", "loss_drop", "loss_area", "rounds", "favor")
LOCAL_ALGORITHMS = ("fedavg", "fedprox", "feddyn")


@dataclass(frozen=True)
class LearningConfig(PresetConfig):
    """Algorithm variants and the accuracy-target reward (module docstring), with the preset's fields.

    Attributes:
        local_algorithm: ``fedavg``, ``fedprox`` (``prox_mu``) or ``feddyn`` (``feddyn_alpha``).
        prox_mu: FedProx's ``mu`` (Zheng et al.'s setting: 0.01).
        feddyn_alpha: FedDyn's ``alpha`` (Zheng et al.'s setting: 0.001).
        server: ``average`` (FedAvg), ``fedavgm`` (server momentum) or ``fedadam``.
        server_lr: the server's rate ``eta_s``; None = 1 for FedAvgM, 0.01 for FedAdam.
        server_momentum: FedAvgM's momentum.
        reward: one of :data:`REWARDS`.
        target_accuracy: the target of ``rounds``, ``favor``, ``stop_at_target`` and the reported
            rounds to target (preset).
        stop_at_target: end the episode (``terminated``) once validation accuracy reaches the target.
    """

    local_algorithm: str = "fedavg"
    prox_mu: float = 0.01
    feddyn_alpha: float = 0.001
    server: str = "average"
    server_lr: float | None = None
    server_momentum: float = 0.9
    reward: str = "acc_gain"
    target_accuracy: float | None = None
    stop_at_target: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice("local_algorithm", self.local_algorithm, LOCAL_ALGORITHMS)
        require(is_non_negative(self.prox_mu), "prox_mu", self.prox_mu, "a float >= 0")
        require(is_positive(self.feddyn_alpha), "feddyn_alpha", self.feddyn_alpha, "a float > 0")
        require_choice("server", self.server, SERVER_RULES)
        self.server_config()
        require_choice("reward", self.reward, REWARDS)
        require_fraction("target_accuracy", self.target_accuracy)
        require(isinstance(self.stop_at_target, bool), "stop_at_target", self.stop_at_target, "True or False")

    def server_config(self) -> ServerConfig:
        """The server rule."""
        return ServerConfig(self.server, lr=self.server_lr, momentum=self.server_momentum)

    def federation_config(self) -> FederationConfig:
        """Real training with a validation set, under the configured algorithm variant."""
        return self.scenario.federation_config(
            models=(self.model,), local_test="none", validation_size=self.validation_size, train=True,
            algorithm=self.local_algorithm, prox_mu=self.prox_mu, feddyn_alpha=self.feddyn_alpha,
            server=self.server_config())


class TargetReward:
    """The reward terms of :data:`REWARDS` for one episode, and when the target is reached.

    Attributes:
        rounds_to_target: the first round whose reported (test) accuracy reached the target;
            None until then.
        reached: validation accuracy has reached the target.
    """

    def __init__(self, federation: Federation, config: LearningConfig) -> None:
        self.config = config
        self.validation = ValidationGain(federation, config.scenario.rounds_per_episode)
        self.rounds_to_target: int | None = None
        self.reached = False

    def update(self, report: RoundReport) -> dict[str, float]:
        """This round's terms (every one, whichever is rewarded)."""
        target = self.config.target_accuracy
        terms = self.validation.update(report)
        self.reached = report.val_accuracy >= target
        if self.rounds_to_target is None and not math.isnan(report.accuracy) and report.accuracy >= target:
            self.rounds_to_target = report.round
        return {**terms._asdict(), "rounds": -1.0, "favor": favor(report.val_accuracy, target)}

    def weights(self) -> Mapping[str, float]:
        """Weight 1 on the configured term."""
        return {self.config.reward: 1.0}

    @property
    def terminated(self) -> bool:
        """The episode ends here (``stop_at_target`` and the target reached)."""
        return self.config.stop_at_target and self.reached


@dataclass(frozen=True)
class Scored:
    """A played round's outcome in a :class:`TargetRewardEnv`: its reward terms (families add the rest)."""

    terms: dict[str, float]


class TargetRewardEnv(FLEnv):
    """Base of the envs scored by a :class:`TargetReward`: the reward hooks, written once.

    A subclass creates ``self._target`` in ``_reset_state``, and its ``_play`` returns a
    :class:`Scored` outcome with the terms ``self._target.update(report)`` gives.
    """

    _target: TargetReward

    def _reward_terms(self, report: RoundReport, outcome: Scored) -> dict[str, float]:
        return outcome.terms

    def _reward_weights(self) -> Mapping[str, float]:
        return self._target.weights()

    def _is_terminated(self, report: RoundReport) -> bool:
        return self._target.terminated
