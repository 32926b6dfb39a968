"""Configuration of the aggregation-weight family (spec ``fedadp.md`` 7.1).

The default preset is small enough for PPO on a 2-core CPU: digits, 10 clients of a Dirichlet(0.3)
split, all training every round for one epoch, 30 rounds. Every round the learning rate decays
by ``lr_decay`` (the paper's ``0.01 * 0.995^(t-1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fl_gym.config import FederationConfig
from fl_gym.envs.scenario import EnvConfig
from fl_gym.models.zoo import MODELS
from fl_gym.validation import is_int_at_least, is_positive, require, require_choice


@dataclass(frozen=True)
class AggregateConfig(EnvConfig):
    """Arguments of ``FLAggregate-v0``, and the shared scenario's.

    Attributes:
        local_epochs: ``E``.
        model: architecture.
        validation_size: test samples held out for the reward's accuracy.
        lr_decay: per-round factor of the learning rate (``lr * lr_decay^(t-1)``).
        action_scale: ``L``: an action ``a`` in ``[-1, 1]`` adds ``L a`` to client ``i``'s logit
            ``ln D_i`` (so the zero action is FedAvg, and FedAdp is ``a = f / L``).
        gompertz_alpha: ``alpha`` of the observation's Gompertz feature.
    """

    local_epochs: float = 1.0
    model: str = "mlp-small"
    validation_size: int = 150
    lr_decay: float = 0.995
    action_scale: float = 10.0
    gompertz_alpha: float = 5.0
    scenario_defaults = {"num_clients": 10, "partition": "dirichlet", "alpha": 0.3, "rounds_per_episode": 30,
                         "lr": 0.05, "batch_size": 10}

    def __post_init__(self) -> None:
        super().__post_init__()
        require(is_positive(self.local_epochs), "local_epochs", self.local_epochs, "a float > 0")
        require_choice("model", self.model, MODELS)
        require(is_int_at_least(self.validation_size, 1), "validation_size", self.validation_size, "an integer >= 1")
        require(is_positive(self.lr_decay) and self.lr_decay <= 1, "lr_decay", self.lr_decay, "a float in (0, 1]")
        require(is_positive(self.action_scale), "action_scale", self.action_scale, "a float > 0")
        require(is_positive(self.gompertz_alpha), "gompertz_alpha", self.gompertz_alpha, "a float > 0")

    def federation_config(self) -> FederationConfig:
        """Real training with a validation set."""
        return self.scenario.federation_config(models=(self.model,), local_test="none",
                                               validation_size=self.validation_size, train=True)
