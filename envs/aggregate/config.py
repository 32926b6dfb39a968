"""Configuration of the aggregation-weight family (FedAdp: Wu and Wang, IEEE TCCN 2021).

| preset | data | N | partition | model | B | lr | rounds | target |
|---|---|---|---|---|---|---|---|---|
| ``small`` (default) | digits | 10 | Dirichlet(0.3) | mlp-small | 10 | 0.05 | 30 | 0.9 |
| ``paper_mnist_cnn`` | mnist | 10 x 600 | 5 IID + 5 one-class | fedadp-cnn | 32 | 0.01 | 300 | 0.95 |
| ``paper_fmnist_cnn`` | fashionmnist | 10 x 600 | 5 IID + 5 one-class | fedadp-cnn | 32 | 0.01 | 300 | 0.80 |
| ``paper_mlr`` | mnist | 10 x 600 | 5 IID + 5 one-class | fedadp-mlr | 50 | 0.01 | 50 | 0.85 |

Every client trains every round for one epoch, and the learning rate decays by ``lr_decay`` per
round (the paper's ``0.01 * 0.995^(t-1)``). ``small`` is for PPO on a 2-core CPU; the paper
presets (the paper's experimental setup) are for evaluation. The paper gives no MLR target; 0.85 is ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fl_gym.envs.aggregate.gompertz import require_alpha
from fl_gym.envs.learning import LearningConfig
from fl_gym.validation import is_positive, require, require_fraction

_PAPER = dict(num_clients=10, partition="mixed", num_iid=5, classes_per_client=1,
              samples_per_client=600, lr=0.01, batch_size=32, rounds_per_episode=300)
PRESETS = {
    "small": {"own": dict(local_epochs=1.0, model="mlp-small", validation_size=150, target_accuracy=0.9),
              "scenario": dict(dataset="digits", num_clients=10, partition="dirichlet", alpha=0.3, lr=0.05,
                               batch_size=10, rounds_per_episode=30)},
    "paper_mnist_cnn": {"own": dict(local_epochs=1.0, model="fedadp-cnn", validation_size=1000,
                                    target_accuracy=0.95),
                        "scenario": dict(dataset="mnist", **_PAPER)},
    "paper_fmnist_cnn": {"own": dict(local_epochs=1.0, model="fedadp-cnn", validation_size=1000,
                                     target_accuracy=0.80),
                         "scenario": dict(dataset="fashionmnist", **_PAPER)},
    "paper_mlr": {"own": dict(local_epochs=1.0, model="fedadp-mlr", validation_size=1000,
                              target_accuracy=0.85),
                  "scenario": dict(dataset="mnist",
                                   **{**_PAPER, "batch_size": 50, "rounds_per_episode": 50})},
}


@dataclass(frozen=True)
class AggregateConfig(LearningConfig):
    """Arguments of ``FLAggregate-v0``: these, ``LearningConfig``'s and the shared scenario's.

    Attributes:
        lr_decay: per-round factor of the learning rate (``lr * lr_decay^(t-1)``).
        action_scale: ``L``: an action ``a`` in ``[-1, 1]`` adds ``L a`` to client ``i``'s logit
            ``ln D_i`` (so the zero action is FedAvg, and FedAdp is ``a = f / L``).
        gompertz_alpha: ``alpha`` of the observation's Gompertz feature.
    """

    presets: ClassVar[Mapping[str, Mapping[str, dict]]] = PRESETS
    preset: str = "small"
    lr_decay: float = 0.995
    action_scale: float = 10.0
    gompertz_alpha: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_fraction("lr_decay", self.lr_decay)
        require(is_positive(self.action_scale), "action_scale", self.action_scale, "a float > 0")
        require_alpha("gompertz_alpha", self.gompertz_alpha)
