"""Configuration of the HAPFL env family (spec ``hapfl.md``), validated when the env is built.

The presets are the paper's scenario and its scalability runs (spec 9.6):

| preset | K | k | sizes | H |
|---|---|---|---|---|
| ``paper10`` | 10 | 6 | small, large | 10 |
| ``scale20`` | 20 | 12 | small, medium, large | 20 |
| ``scale100`` | 100 | 60 | small, medium, large | 50 |

Explicit arguments override the preset. Costs per sample follow spec 2.3 (LiteModel 1,
small 3.5, medium 7.5, large 13 units of ``c0 = 5e-4`` s); the rewards are timing-only, so the
``timing`` backend runs just the clock and the data's label counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from fl_gym.aggregation import WEIGHT_RULES
from fl_gym.clock import ClockConfig
from fl_gym.config import FederationConfig
from fl_gym.data.datasets import DATASETS
from fl_gym.data.partition import PartitionConfig
from fl_gym.engine.losses import MutualDistillation
from fl_gym.engine.optim import OptimizerConfig
from fl_gym.engine.trainer import PFedMeConfig
from fl_gym.validation import is_int_at_least, is_non_negative, is_positive, require, require_choice

PRESETS = {
    "paper10": dict(num_clients=10, clients_per_round=6, num_sizes=2, heterogeneity=10.0),
    "scale20": dict(num_clients=20, clients_per_round=12, num_sizes=3, heterogeneity=20.0),
    "scale100": dict(num_clients=100, clients_per_round=60, num_sizes=3, heterogeneity=50.0),
}
SIZE_NAMES = {2: ("small", "large"), 3: ("small", "medium", "large")}
DEFAULT_COSTS = {"lite": 1.0, "small": 3.5, "medium": 7.5, "large": 13.0}
ALGORITHMS = ("hapfl", "fedavg", "fedprox", "pfedme")
REWARD_MODES = ("joint", "r1", "r2", "neg_round_time")


@dataclass(frozen=True)
class HeteroConfig:
    """Arguments of ``FLHetero-v0``, ``FLHeteroAlloc-v0`` and ``FLHeteroIntensity-v0``.

    Attributes:
        preset: ``paper10``, ``scale20`` or ``scale100``; the four fields below override it.
        num_clients: ``K``.
        clients_per_round: ``k``, sampled uniformly each round.
        num_sizes: ``delta`` (2: small, large; 3: small, medium, large).
        heterogeneity: ``H``, fastest/slowest static speed.
        dataset: data set (``digits`` embedded; ``mnist``, ``cifar10`` ... by name).
        data_root: folder of torchvision files.
        alpha: Dirichlet concentration of the train+matched-test split.
        min_size: smallest client (training samples).
        backend: ``"timing"`` (clock only; thousands of steps/s) or ``"torch"`` (real training).
        algorithm: ``hapfl`` (LiteModel mutual learning, entropy-accuracy aggregation) or a
            baseline without LiteModel: ``fedavg``, ``fedprox``, ``pfedme``.
        rounds_per_episode: rounds until ``truncated``.
        local_epochs: ``E_loc``; the round's epoch budget is ``k * E_loc``.
        max_ratio: ``MD`` of the PPO1 reward.
        sigma_dyn: log-std of per-round availability.
        sigma_drift: log-std of drift between assessment and training.
        sigma_meas: log-std of timing noise.
        seconds_per_unit: ``c0``, seconds per sample of the LiteModel on the fastest device.
        model_costs: per-sample cost per size and ``"lite"``.
        pfedme_overhead: extra cost factor of pFedMe's inner loop (spec: 1, or ``K_inner``).
        fractional_epochs: count ``sigma * tau_total`` as fractional epochs instead of integerizing.
        reward_mode: ``FLHetero-v0``'s reward: ``joint``, ``r1``, ``r2`` or ``neg_round_time``.
        reward_weights: ``(w1, w2)`` of the joint reward.
        obs_mode: ``"paper"`` (``k`` timing ratios) or ``"extended"`` (adds data size, label
            entropy and previous size per slot: ``4k``).
        target_accuracy: torch backend: terminate when the global LiteModel (baselines: the best
            global model) reaches it.
        lr: local learning rate (paper: 3e-4).
        batch_size: local batch size.
        optimizer: ``adam`` (spec) or ``sgd``.
        prox_mu: FedProx ``mu``.
        pfedme: pFedMe settings.
        distillation: mutual-learning losses.
        aggregation: weight rule of HAPFL (spec: ``entropy_acc``); baselines use ``datasize``.
        eval_every: torch backend: evaluate global models every this many rounds.
        device: torch device.
    """

    preset: str = "paper10"
    num_clients: int | None = None
    clients_per_round: int | None = None
    num_sizes: int | None = None
    heterogeneity: float | None = None
    dataset: str = "digits"
    data_root: str | None = None
    alpha: float = 0.4
    min_size: int = 10
    backend: str = "timing"
    algorithm: str = "hapfl"
    rounds_per_episode: int = 100
    local_epochs: int = 20
    max_ratio: float = 10.0
    sigma_dyn: float = 0.2
    sigma_drift: float = 0.1
    sigma_meas: float = 0.0
    seconds_per_unit: float = 5e-4
    model_costs: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_COSTS))
    pfedme_overhead: float = 1.0
    fractional_epochs: bool = False
    reward_mode: str = "joint"
    reward_weights: tuple[float, float] = (1.0, 1.0)
    obs_mode: str = "paper"
    target_accuracy: float | None = None
    lr: float = 3e-4
    batch_size: int = 64
    optimizer: str = "adam"
    prox_mu: float = 0.01
    pfedme: PFedMeConfig = field(default_factory=PFedMeConfig)
    distillation: MutualDistillation = field(default_factory=MutualDistillation)
    aggregation: str = "entropy_acc"
    eval_every: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        require_choice("preset", self.preset, PRESETS)
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        require(is_int_at_least(self.num_clients, 2), "num_clients", self.num_clients, "an integer >= 2")
        require(is_int_at_least(self.clients_per_round, 2) and self.clients_per_round <= self.num_clients,
                "clients_per_round", self.clients_per_round, f"an integer in [2, num_clients={self.num_clients}]")
        require(self.num_sizes in SIZE_NAMES, "num_sizes", self.num_sizes, "2 or 3")
        require(is_positive(self.heterogeneity) and self.heterogeneity >= 1, "heterogeneity", self.heterogeneity,
                "a float >= 1")
        require_choice("dataset", self.dataset, DATASETS)
        require(is_positive(self.alpha), "alpha", self.alpha, "a float > 0")
        require_choice("backend", self.backend, ("timing", "torch"))
        require_choice("algorithm", self.algorithm, ALGORITHMS)
        require(is_int_at_least(self.rounds_per_episode, 1), "rounds_per_episode", self.rounds_per_episode,
                "an integer >= 1")
        require(is_int_at_least(self.local_epochs, 1), "local_epochs", self.local_epochs, "an integer >= 1")
        require(is_positive(self.max_ratio), "max_ratio", self.max_ratio, "a float > 0")
        for name in ("sigma_dyn", "sigma_drift", "sigma_meas"):
            require(is_non_negative(getattr(self, name)), name, getattr(self, name), "a float >= 0")
        needed = {"lite", *self.size_names}
        require(needed <= set(self.model_costs) and all(is_positive(self.model_costs[n]) for n in needed),
                "model_costs", self.model_costs, f"positive costs for {sorted(needed)}")
        require(is_positive(self.pfedme_overhead), "pfedme_overhead", self.pfedme_overhead, "a float > 0")
        require_choice("reward_mode", self.reward_mode, REWARD_MODES)
        require(len(self.reward_weights) == 2 and all(map(is_non_negative, self.reward_weights)), "reward_weights",
                self.reward_weights, "two floats >= 0")
        require_choice("obs_mode", self.obs_mode, ("paper", "extended"))
        require(self.target_accuracy is None or 0 < self.target_accuracy <= 1, "target_accuracy",
                self.target_accuracy, "None or a float in (0, 1]")
        require(is_positive(self.lr), "lr", self.lr, "a float > 0")
        require_choice("optimizer", self.optimizer, ("adam", "sgd"))
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
        """The simulator this env runs on."""
        hapfl = self.algorithm == "hapfl"
        costs = [self.model_costs[n] for n in self.size_names]
        if self.algorithm == "pfedme":
            costs = [c * self.pfedme_overhead for c in costs]
        return FederationConfig(
            dataset=self.dataset, data_root=self.data_root, num_clients=self.num_clients,
            partition=PartitionConfig("dirichlet", alpha=self.alpha, min_size=self.min_size), local_test="matched",
            models=tuple(f"hapfl-{n}" for n in self.size_names), companion="hapfl-lite" if hapfl else None,
            distillation=self.distillation,
            model_costs=tuple(costs) + ((self.model_costs["lite"],) if hapfl else ()),
            batch_size=self.batch_size, optimizer=OptimizerConfig(self.optimizer),
            algorithm="fedavg" if hapfl else self.algorithm, prox_mu=self.prox_mu, pfedme=self.pfedme,
            aggregation=self.aggregation if hapfl else "datasize",
            clock=ClockConfig(seconds_per_unit=self.seconds_per_unit, heterogeneity=self.heterogeneity,
                              sigma_dyn=self.sigma_dyn, sigma_drift=self.sigma_drift, sigma_meas=self.sigma_meas),
            train=self.backend == "torch", eval_every=self.eval_every, eval_local=True, device=self.device)

    def replace(self, **changes) -> HeteroConfig:
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)
