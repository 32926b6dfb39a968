"""The one validated configuration a :class:`~fl_gym.federation.Federation` is built from."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fl_gym.aggregation import WEIGHT_RULES, ServerConfig
from fl_gym.behaviour import BehaviourConfig
from fl_gym.clock import ClockConfig
from fl_gym.data.catalog import DATASETS
from fl_gym.data.noise import LABEL_NOISE
from fl_gym.data.partition import Dirichlet, PartitionScheme
from fl_gym.engine.algorithms import ALGORITHMS as ALGORITHM_CLASSES
from fl_gym.engine.algorithms import LocalAlgorithm, PFedMeConfig
from fl_gym.engine.losses import MutualDistillation
from fl_gym.engine.optim import OptimizerConfig
from fl_gym.models.zoo import MODELS
from fl_gym.validation import (
    UserError,
    is_int_at_least,
    is_non_negative,
    is_positive,
    require,
    require_choice,
    require_clients,
    require_device,
    require_field_types,
    require_share,
    require_threads,
)

ALGORITHMS = tuple(ALGORITHM_CLASSES)
# each algorithm setting, and the algorithms that read it
SETTINGS_OF = {name: tuple(a for a, cls in ALGORITHM_CLASSES.items() if name in cls.settings_fields)
               for cls in ALGORITHM_CLASSES.values() for name in cls.settings_fields}
# clients can train anywhere
STATELESS = tuple(name for name, cls in ALGORITHM_CLASSES.items() if cls.stateless)


@dataclass(frozen=True)
class FederationConfig:
    """Everything static about a federation; validated on construction.

    Attributes:
        dataset: data set name (:data:`fl_gym.data.DATASETS`); ``digits`` is embedded.
        dataset_kwargs: generator options (``synthetic``: alpha, beta, iid, num_users, seed).
        data_root: folder of torchvision files (default ``$FL_GYM_DATA`` or ``~/.cache/fl_gym``).
        download: allow torchvision downloads.
        num_clients: ``K``.
        partition: how training data is split (:data:`fl_gym.data.partition.SCHEMES`; ``Natural()`` for
            ``synthetic``).
        local_test: each client's local test split: ``"matched"`` (test samples split like the
            client's training labels), ``"holdout"`` (a fraction of its training data, kept out of
            its training and scored with the data set's labels, as the matched split is) or ``"none"``.
        local_test_fraction: share held out with ``local_test="holdout"``.
        validation_size: test samples held out as a validation set (stratified, drawn with the
            scenario): ``RoundReport.val_accuracy`` is measured on them every round (an RL reward's
            accuracy), and ``global_accuracy`` on the rest of the test set. 0 = off.
        server_data_fraction: share of the training set the server keeps, class-balanced and
            disjoint from every client (DDFL's ``G_D``; ``Federation.server_indices``). Off (0) by
            default: server-held data is a privacy choice a scenario must opt into.
        noisy_clients: share of the clients (rounded to a count) whose training labels are all
            replaced (``label_noise``), drawn with the scenario (``Federation.noisy``): corrupted
            or free-riding devices that a selection or weighting policy can learn to detect from
            their updates. Off (0) by default.
        label_noise: what a noisy client's labels become: ``random`` (uniform over the classes:
            its model predicts near-uniformly, which its soft label shows) or ``flip`` (class
            ``c - 1 - y``, the label-flipping attack: its model stays confident, and only where
            its update points tells it apart).
        models: architectures a client can be given (``RoundPlan.model`` indexes them); one global
            model per entry, aggregated over the clients that trained it.
        companion: an architecture every client also trains alongside its model by mutual
            distillation (a small shared model), aggregated over all; None = off.
        distillation: the mutual-learning losses when ``companion`` is set.
        model_costs: per-model relative cost per sample (``models`` then ``companion``); None =
            training MFLOPs per sample from the architecture.
        probe_cost: per-sample cost of the probe epoch each opened round times (an assessment of
            each client's speed before the server decides); None = the companion's cost, 0 without
            one. The clock charges the probe only with a companion model, whose training it is part of.
        batch_size: local minibatch size.
        optimizer: local optimiser (fresh each round).
        algorithm: local algorithm: ``fedavg``, ``fedprox`` (proximal term ``prox_mu``),
            ``pfedme`` (``pfedme`` settings), ``scaffold`` (control variates, per client across
            rounds), ``moon`` (model-contrastive term, ``moon_mu``, ``moon_tau``) or ``feddyn``
            (dual variables per client, ``feddyn_alpha``; :mod:`fl_gym.engine.algorithms`).
        moon_mu: MOON's weight of the contrastive term (FedEntropy's setting: 0.1).
        moon_tau: MOON's temperature (FedEntropy's setting: 0.5).
        feddyn_alpha: FedDyn's ``alpha`` (Zheng et al.'s setting: 0.001).
        prox_mu: FedProx's ``mu``.
        pfedme: pFedMe's local solver and server mixing.
        aggregation: default weight rule (:data:`fl_gym.aggregation.WEIGHT_RULES`).
        server: the server update (plain average or FedAdam).
        clock: the device cost model.
        behaviour: the devices' availability, dropout and the round deadline
            (:mod:`fl_gym.behaviour`; off by default).
        train: run real training; False = timing only (the clock and data statistics).
        eval_every: evaluate the global models on the test set every this many rounds.
        eval_local: evaluate trained local models on local test splits every round (forced on
            by ``aggregation="entropy_acc"``).
        soft_labels: report each trained model's mean softmax output on its training data.
        device: torch device for data and training.
        eval_batch_size: samples per client per evaluation batch.
        num_threads: if set, ``torch.set_num_threads`` when the federation is built
            (process-wide; 1 is fastest for the small default models on 2 cores, see
            docs/performance.md).
        keep_freed_memory: on CPU, keep freed memory in the heap for reuse
            (:func:`fl_gym.engine.allocator.keep_freed_memory`, process-wide; up to 1.4x faster
            rounds with large activations, at the cost of holding peak memory).
    """

    dataset: str = "digits"
    dataset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    data_root: str | None = None
    download: bool = True
    num_clients: int = 10
    partition: PartitionScheme = field(default_factory=Dirichlet)
    local_test: str = "matched"
    local_test_fraction: float = 0.2
    validation_size: int = 0
    server_data_fraction: float = 0.0
    noisy_clients: float = 0.0
    label_noise: str = "random"
    models: tuple[str, ...] = ("mlp-small",)
    companion: str | None = None
    distillation: MutualDistillation = field(default_factory=MutualDistillation)
    model_costs: tuple[float, ...] | None = None
    probe_cost: float | None = None
    batch_size: int = 10
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    algorithm: str = "fedavg"
    prox_mu: float = 0.01
    moon_mu: float = 0.1
    moon_tau: float = 0.5
    feddyn_alpha: float = 0.001
    pfedme: PFedMeConfig = field(default_factory=PFedMeConfig)
    aggregation: str = "datasize"
    server: ServerConfig = field(default_factory=ServerConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)
    behaviour: BehaviourConfig = field(default_factory=BehaviourConfig)
    train: bool = True
    eval_every: int = 1
    eval_local: bool = False
    soft_labels: bool = False
    device: str = "cpu"
    eval_batch_size: int = 512
    num_threads: int | None = None
    keep_freed_memory: bool = True

    def __post_init__(self) -> None:
        require_field_types(self)  # by the annotations, before any range check compares a value
        require_choice("dataset", self.dataset, DATASETS)
        require_clients("num_clients", self.num_clients)
        require_choice("local_test", self.local_test, ("matched", "holdout", "none"))
        require(0 < self.local_test_fraction < 1, "local_test_fraction", self.local_test_fraction,
                "a float in (0, 1)")
        require(is_int_at_least(self.validation_size, 0), "validation_size", self.validation_size,
                "an integer >= 0")
        require(0 <= self.server_data_fraction < 1, "server_data_fraction", self.server_data_fraction,
                "a float in [0, 1)")
        require(self.server_data_fraction == 0 or self.partition.kind != "natural", "server_data_fraction",
                self.server_data_fraction, "0 with partition 'natural'")
        require_share("noisy_clients", self.noisy_clients)
        require_choice("label_noise", self.label_noise, LABEL_NOISE)
        require(len(self.models) >= 1, "models", self.models, "a non-empty tuple of model names")
        for name in self.models:
            require_choice("models", name, MODELS)
        if self.companion:
            require_choice("companion", self.companion, MODELS)
        roles = (MutualDistillation.local, MutualDistillation.lite)  # the federation's (its default's)
        require((self.distillation.local, self.distillation.lite) == roles, "distillation", self.distillation,
                f"a MutualDistillation of the roles local={roles[0]!r} and lite={roles[1]!r} "
                "(the federation's)")
        n_costs = len(self.models) + (1 if self.companion else 0)
        costs = self.model_costs
        costs_ok = costs is None or (len(costs) == n_costs and all(map(is_positive, costs)))
        require(costs_ok, "model_costs", self.model_costs,
                f"None or {n_costs} floats > 0 (models, then companion)")
        require(self.probe_cost is None or is_non_negative(self.probe_cost), "probe_cost", self.probe_cost,
                "None or a float >= 0")
        require(is_int_at_least(self.batch_size, 1), "batch_size", self.batch_size, "an integer >= 1")
        require_choice("algorithm", self.algorithm, ALGORITHMS)
        self._check_settings_apply()
        self.local_algorithm()  # the algorithm validates its own settings (cheap: its state starts empty)
        plain = self.optimizer.name == "sgd" and self.optimizer.momentum == 0
        require(self.algorithm != "scaffold" or plain, "momentum", self.optimizer.momentum,
                "0 with optimizer='sgd' for algorithm='scaffold' (its option-II control variate assumes "
                "plain SGD steps; with momentum it overstates the drift and training diverges)")
        stateful = self.algorithm not in STATELESS
        require(not (stateful and self.companion), "algorithm", self.algorithm,
                "'fedavg' or 'fedprox' when a companion model is set")
        require_choice("aggregation", self.aggregation, WEIGHT_RULES)
        require(not (self.aggregation == "entropy_acc" and self.local_test == "none"), "aggregation",
                self.aggregation,
                "'datasize' or 'uniform' when local_test='none' (entropy_acc needs local accuracy)")
        require(is_int_at_least(self.eval_every, 1), "eval_every", self.eval_every, "an integer >= 1")
        require(is_int_at_least(self.eval_batch_size, 1), "eval_batch_size", self.eval_batch_size,
                "an integer >= 1")
        require_device("device", self.device)
        require_threads("num_threads", self.num_threads)
        require(self.partition.kind != "natural" or self.dataset == "synthetic", "partition",
                self.partition.kind, "'natural' only with dataset='synthetic'")

    def _check_settings_apply(self) -> None:
        """Another algorithm's setting changed from its default is an error: it would be ignored."""
        defaults = FederationConfig._defaults()
        for name, owners in SETTINGS_OF.items():
            if self.algorithm not in owners and getattr(self, name) != defaults[name]:
                raise UserError(f"{name}={getattr(self, name)!r} does not apply to "
                                f"algorithm={self.algorithm!r} (it would be ignored); allowed: it with "
                                f"algorithm in {list(owners)}")

    @staticmethod
    @functools.cache
    def _defaults() -> dict[str, Any]:
        return {f.name: f.default_factory() if callable(f.default_factory) else f.default
                for f in dataclasses.fields(FederationConfig)}

    def local_algorithm(self) -> LocalAlgorithm:
        """The strategy object of ``algorithm`` (:data:`fl_gym.engine.algorithms.ALGORITHMS`)."""
        return ALGORITHM_CLASSES[self.algorithm].from_config(self)

    def replace(self, **changes: Any) -> FederationConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
