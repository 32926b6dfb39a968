"""Configuration of the learning-rate family (FedEnt: Zheng et al., IEEE TMC 2024).

| preset | data | N | m | partition | model | E | B | lr | T |
|---|---|---|---|---|---|---|---|---|---|
| ``small`` (default) | digits | 20 | 5 | 2 label shards | mlp-small | 1 | 10 | 0.05 | 20 |
| ``paper_mnist_pathological`` | mnist | 100 | 20 | 2 x 300 shards | fedent-mnist-cnn | 3 | 32 | 0.01 | 50 |
| ``paper_mnist_dirichlet`` | mnist | 100 | 20 | Dirichlet(0.5) | fedent-mnist-cnn | 3 | 32 | 0.01 | 50 |

``lr`` is ``eta0``: FedAvg's constant rate and every client's rate before its first round.
``small`` is for PPO on a 2-core CPU; the paper presets (its experiments and Table 4) are for evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fl_gym.envs.learning import LearningConfig
from fl_gym.validation import MAX_LR, is_int_at_least, is_positive, require, require_choice

_PAPER = dict(dataset="mnist", num_clients=100, lr=0.01, batch_size=32, rounds_per_episode=50)
_PAPER_OWN = dict(clients_per_round=20, local_epochs=3.0, model="fedent-mnist-cnn", validation_size=2000,
                  target_accuracy=0.95)
PRESETS = {
    "small": {"own": dict(clients_per_round=5, local_epochs=1.0, model="mlp-small", validation_size=150,
                          target_accuracy=0.85),
              "scenario": dict(dataset="digits", num_clients=20, partition="shards",
                               shards_per_client=2, lr=0.05, batch_size=10, rounds_per_episode=20)},
    "paper_mnist_pathological": {"own": _PAPER_OWN,
                                 "scenario": dict(partition="shards", shards_per_client=2, **_PAPER)},
    "paper_mnist_dirichlet": {"own": _PAPER_OWN,
                              "scenario": dict(partition="dirichlet", alpha=0.5, **_PAPER)},
}
ACTION_MODES = ("per_client", "shared")


@dataclass(frozen=True)
class RateConfig(LearningConfig):
    """Arguments of ``FLLearningRate-v0``: these, ``LearningConfig``'s and the shared scenario's.

    Attributes:
        clients_per_round: ``m`` clients sampled per round, one action slot each (preset).
        action_mode: ``per_client`` (a rate per slot) or ``shared`` (one rate for every client).
        lr_min: the rate of action ``-1`` (log scale).
        lr_max: the rate of action ``+1``.
    """

    presets: ClassVar[Mapping[str, Mapping[str, dict]]] = PRESETS
    preset: str = "small"
    clients_per_round: int | None = None
    action_mode: str = "per_client"
    lr_min: float = 1e-4
    lr_max: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        n = self.scenario.client_counts()[0]
        require(is_int_at_least(self.clients_per_round, 1) and self.clients_per_round <= n,
                "clients_per_round", self.clients_per_round, f"an integer in [1, fewest clients={n}]")
        require_choice("action_mode", self.action_mode, ACTION_MODES)
        require(is_positive(self.lr_min), "lr_min", self.lr_min, "a float > 0")
        require(is_positive(self.lr_max) and self.lr_min < self.lr_max <= MAX_LR, "lr_max", self.lr_max,
                f"a float in (lr_min={self.lr_min}, {MAX_LR:g}]")
