"""Configuration of the HAPFL env family (Chen et al., HAPFL), validated when the env is built.

The presets are the paper's scenario and its scalability runs:

| preset | K | k | sizes | H |
|---|---|---|---|---|
| ``paper10`` | 10 | 6 | small, large | 10 |
| ``scale20`` | 20 | 12 | small, medium, large | 20 |
| ``scale100`` | 100 | 60 | small, medium, large | 50 |

Explicit arguments override the preset. Costs per sample are ours (the paper gives none; LiteModel 1,
small 3.5, medium 7.5, large 13 units of ``c0 = 5e-4`` s); the rewards are timing-only, so the
``timing`` backend runs just the clock and the data's label counts. The shared scenario fields
(:class:`~fl_gym.envs.scenario.ScenarioConfig`) take HAPFL's defaults: Adam at lr 3e-4, batch
64, Dirichlet(0.4), ``c0 = 5e-4`` s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fl_gym.aggregation import WEIGHT_RULES
from fl_gym.config import FederationConfig
from fl_gym.engine.algorithms import PFedMeConfig
from fl_gym.engine.losses import MutualDistillation
from fl_gym.envs.scenario import EnvConfig
from fl_gym.validation import (
    MAX_EPOCHS,
    is_int_at_least,
    is_non_negative,
    is_positive,
    require,
    require_choice,
    require_fraction,
)

PRESETS = {
    "paper10": dict(num_clients=10, clients_per_round=6, num_sizes=2, heterogeneity=10.0),
    "scale20": dict(num_clients=20, clients_per_round=12, num_sizes=3, heterogeneity=20.0),
    "scale100": dict(num_clients=100, clients_per_round=60, num_sizes=3, heterogeneity=50.0),
}
SIZE_NAMES = {2: ("small", "large"), 3: ("small", "medium", "large")}
DEFAULT_COSTS = {"lite": 1.0, "small": 3.5, "medium": 7.5, "large": 13.0}
ALGORITHMS = ("hapfl", "fedavg", "fedprox", "pfedme")
REWARD_MODES = ("joint", "r1", "r2", "neg_round_time")
OBS_MODES = ("paper", "extended", "catalogue", "history")
# rounds after which a device's last measured slowdown counts as old (obs_mode="history")
HISTORY_HORIZON = 10
SCENARIO_DEFAULTS = dict(alpha=0.4, seconds_per_unit=5e-4, lr=3e-4, batch_size=64, optimizer="adam")


@dataclass(frozen=True)
class HeteroConfig(EnvConfig):
    """Arguments of ``FLHetero-v0``, ``FLHeteroAlloc-v0`` and ``FLHeteroIntensity-v0``.

    The shared scenario (data set, clients, clock, optimiser, episode length, device) is in
    ``scenario``; pass its fields flat to ``gym.make``. HAPFL's own fields:

    Attributes:
        preset: ``paper10``, ``scale20`` or ``scale100``: sets ``num_clients`` and
            ``heterogeneity`` (scenario) and the two fields below, unless given.
        clients_per_round: ``k``, sampled uniformly each round.
        num_sizes: ``delta`` (2: small, large; 3: small, medium, large).
        backend: ``"timing"`` (clock only; thousands of steps/s) or ``"torch"`` (real training).
        algorithm: ``hapfl`` (LiteModel mutual learning, entropy-accuracy aggregation) or a
            baseline without LiteModel: ``fedavg``, ``fedprox``, ``pfedme``.
        local_epochs: ``E_loc``; the round's epoch budget is ``k * E_loc``.
        max_ratio: ``MD`` of the PPO1 reward.
        model_costs: per-sample cost per size and ``"lite"``.
        pfedme_overhead: extra cost factor of pFedMe's inner loop (1, or its ``K`` inner steps).
        fractional_epochs: count ``sigma * tau_total`` as fractional epochs instead of integerizing.
        reward_mode: ``FLHetero-v0``'s reward: ``joint`` (default), ``r1``, ``r2`` or
            ``neg_round_time``. The one-lever views have one reward each (``r1`` for
            ``FLHeteroAlloc-v0``, ``r2`` for ``FLHeteroIntensity-v0``) and reject any other.
        reward_weights: ``(w1, w2)`` of the joint reward.
        obs_mode: ``"paper"`` (``k`` speed ratios), ``"extended"`` (adds data size, label
            entropy and previous size per slot: ``4k``) or ``"catalogue"`` (the paper's ``k``, then
            the size catalogue: the cost ``M`` of the size the ordinal size action picks at 1/6,
            1/2 and 5/6 of its range, over the largest size's, so an agent sees what a size
            costs in any catalogue: ``k + 3``) or ``"history"`` (adds, per slot, the slowdown
            ``d`` the server measured the last time the client trained, as ``1 / (1 + d)``, and
            how long ago, as ``(1 + min(rounds, 10)) / 11`` (1 = never): ``3k``; with a persistent
            load, ``load_persistence``, that history predicts this round's drift).
        residual_policy: a fixed policy's name (``oracle``, ``inverse``, ...): the agent's action
            is a correction added to that policy's action (clipped to ``[-1, 1]``) instead of the
            action itself (Box views only; ours, not the paper's).
        target_accuracy: torch backend: terminate when the headline accuracy (the global large
            model's) reaches it.
        prox_mu: FedProx ``mu``.
        pfedme: pFedMe settings.
        distillation: mutual-learning losses.
        aggregation: weight rule of HAPFL (its Eq. 38: ``entropy_acc``); baselines use ``datasize``.
    """

    preset: str = "paper10"
    clients_per_round: int | None = None
    num_sizes: int | None = None
    backend: str = "timing"
    algorithm: str = "hapfl"
    local_epochs: int = 20
    max_ratio: float = 10.0
    model_costs: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_COSTS))
    pfedme_overhead: float = 1.0
    fractional_epochs: bool = False
    reward_mode: str | None = None
    reward_weights: tuple[float, float] = (1.0, 1.0)
    obs_mode: str = "paper"
    residual_policy: str | None = None
    target_accuracy: float | None = None
    prox_mu: float = 0.01
    pfedme: PFedMeConfig = field(default_factory=PFedMeConfig)
    distillation: MutualDistillation = field(default_factory=MutualDistillation)
    aggregation: str = "entropy_acc"
    training_kwargs: ClassVar[Mapping[str, Any]] = {"backend": "torch"}

    @classmethod
    def default_scenario(cls, own: Mapping[str, Any]) -> dict[str, Any]:
        """HAPFL's scenario defaults, with the preset's ``num_clients`` and ``heterogeneity``."""
        preset = PRESETS.get(own.get("preset", "paper10"), PRESETS["paper10"])
        return {**SCENARIO_DEFAULTS, "num_clients": preset["num_clients"],
                "heterogeneity": preset["heterogeneity"]}

    def __post_init__(self) -> None:
        require_choice("preset", self.preset, PRESETS)
        for name in ("clients_per_round", "num_sizes"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, PRESETS[self.preset][name])
        super().__post_init__()
        n = self.scenario.client_counts()[0]
        require(is_int_at_least(self.clients_per_round, 2) and self.clients_per_round <= n,
                "clients_per_round", self.clients_per_round, f"an integer in [2, fewest clients={n}]")
        require(self.num_sizes in SIZE_NAMES, "num_sizes", self.num_sizes, "2 or 3")
        require_choice("backend", self.backend, ("timing", "torch"))
        require_choice("algorithm", self.algorithm, ALGORITHMS)
        require(is_int_at_least(self.local_epochs, 1) and self.local_epochs <= MAX_EPOCHS, "local_epochs",
                self.local_epochs, f"an integer in [1, {MAX_EPOCHS:g}]")
        require(is_positive(self.max_ratio), "max_ratio", self.max_ratio, "a float > 0")
        needed = {"lite", *self.size_names}
        require(needed <= set(self.model_costs) and all(is_positive(self.model_costs[n]) for n in needed),
                "model_costs", self.model_costs, f"positive costs for {sorted(needed)}")
        require(is_positive(self.pfedme_overhead), "pfedme_overhead", self.pfedme_overhead, "a float > 0")
        require(self.reward_mode is None or self.reward_mode in REWARD_MODES, "reward_mode", self.reward_mode,
                "None or one of " + ", ".join(map(repr, REWARD_MODES)))
        require(len(self.reward_weights) == 2 and all(map(is_non_negative, self.reward_weights)),
                "reward_weights", self.reward_weights, "two floats >= 0")
        require_choice("obs_mode", self.obs_mode, OBS_MODES)
        require(self.residual_policy is None or isinstance(self.residual_policy, str), "residual_policy",
                self.residual_policy, "None or a fixed policy's name")
        require_fraction("target_accuracy", self.target_accuracy, optional=True)
        require(is_non_negative(self.prox_mu), "prox_mu", self.prox_mu, "a float >= 0")
        require_choice("aggregation", self.aggregation, WEIGHT_RULES)

    @property
    def size_names(self) -> tuple[str, ...]:
        """Names of the local-model sizes, smallest first."""
        return SIZE_NAMES[self.num_sizes]

    @property
    def total_epochs(self) -> int:
        """``tau_total = k * E_loc``, the round's epoch budget."""
        return self.clients_per_round * self.local_epochs

    @property
    def time_ratio(self) -> np.ndarray:
        """``M(s) = (c(s) + c(lite)) / c(lite)`` per size."""
        lite = self.model_costs["lite"]
        return np.array([(self.model_costs[n] + lite) / lite for n in self.size_names])

    def federation_config(self) -> FederationConfig:
        """The simulator this env runs on: the scenario, HAPFL's model catalogue and algorithm."""
        hapfl = self.algorithm == "hapfl"
        costs = [self.model_costs[n] for n in self.size_names]
        if self.algorithm == "pfedme":
            costs = [c * self.pfedme_overhead for c in costs]
        return self.scenario.federation_config(
            local_test="matched", models=tuple(f"hapfl-{n}" for n in self.size_names),
            companion="hapfl-lite" if hapfl else None, distillation=self.distillation,
            model_costs=tuple(costs) + ((self.model_costs["lite"],) if hapfl else ()),
            probe_cost=self.model_costs["lite"], algorithm="fedavg" if hapfl else self.algorithm,
            prox_mu=self.prox_mu, pfedme=self.pfedme, aggregation=self.aggregation if hapfl else "datasize",
            train=self.backend == "torch", eval_local=True)
