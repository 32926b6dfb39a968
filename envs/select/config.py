"""Configuration of the client-selection family (FedEntropy: Ling et al.; DDFL: Herath et al.).

| preset | data | N | m | model | partition | E | rounds |
|---|---|---|---|---|---|---|---|
| ``tiny`` (default) | ``digits`` | 20 | 5 | ``mlp-small`` | Dirichlet(0.3) | 1 | 30 |
| ``paper`` | ``cifar10`` | 100 | 10 | ``fedentropy-lenet`` | one class per client (case 1) | 5 | 1000 |

``tiny`` is small enough for PPO on a 2-core CPU; ``paper`` is FedEntropy's experimental setup (
batch 50, SGD lr 0.01 momentum 0.5), for evaluation. Explicit arguments override the preset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fl_gym.config import FederationConfig
from fl_gym.envs.presets import PresetConfig
from fl_gym.validation import is_int_at_least, is_non_negative, require, require_choice, require_fraction

PRESETS = {
    "tiny": {"own": dict(clients_per_round=5, local_epochs=1, model="mlp-small", validation_size=150),
             "scenario": dict(dataset="digits", num_clients=20, partition="dirichlet", alpha=0.3, lr=0.05,
                              batch_size=10, rounds_per_episode=30)},
    "paper": {"own": dict(clients_per_round=10, local_epochs=5, model="fedentropy-lenet",
                          validation_size=2000),
              "scenario": dict(dataset="cifar10", num_clients=100, partition="classes", classes_per_client=1,
                               lr=0.01, momentum=0.5, batch_size=50, rounds_per_episode=1000)},
}
QUEUE_PRESETS = {
    "tiny": {"own": dict(local_epochs=1, model="mlp-small", validation_size=150, segment_rho=0.04),
             "scenario": dict(dataset="digits", num_clients=20, partition="one_class", lr=0.05, batch_size=10,
                              rounds_per_episode=30)},
    "paper": {"own": dict(local_epochs=1, model="ddfl-mnist-cnn", validation_size=5000, segment_rho=0.0037),
              "scenario": dict(dataset="mnist", num_clients=100, partition="one_class", lr=0.01, momentum=0.9,
                               batch_size=100, rounds_per_episode=100)},
}
SAMPLERS = ("pools", "uniform")
LOCAL_ALGORITHMS = ("fedavg", "fedprox", "scaffold", "moon")
ENCODINGS = ("multibinary", "discrete")
SIGNALS = {"accuracy": "acc_gain", "loss": "loss_drop", "loss_area": "loss_area",
           "loss_vs_all": "loss_vs_all"}  # reward_signal: its term


def what_if_term(loss_vs_all: float) -> dict[str, float]:
    """The ``loss_vs_all`` reward term where it was measured (``reward_signal="loss_vs_all"``), else none."""
    return {} if math.isnan(loss_vs_all) else {"loss_vs_all": loss_vs_all}


@dataclass(frozen=True)
class RewardConfig(PresetConfig):
    """What every selection env's config shares: the uplink penalty and the validation signal rewarded.

    Attributes:
        lambda_comm: weight of the uplink penalty (per episode: uploading everything every round
            costs ``lambda_comm``).
        reward_signal: the validation gain rewarded (:class:`~fl_gym.envs.base.ValidationTerms`):
            ``accuracy`` (its accuracy gain), ``loss`` (the drop of its cross-entropy, less noisy on
            a small validation set), ``loss_area`` (that drop weighted by the rounds it lasts) or,
            where the decision is which trained updates to aggregate, ``loss_vs_all`` (the
            cross-entropy of averaging every trained update minus that of the kept ones':
            :func:`~fl_gym.envs.base.loss_vs_all`, 0 for keeping all). A cross-entropy counts at
            most ``10 ln C``, a diverged model's (NaN) that (:func:`~fl_gym.envs.base.charged_loss`).
    """

    lambda_comm: float = 0.05
    reward_signal: str = "accuracy"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(is_non_negative(self.lambda_comm), "lambda_comm", self.lambda_comm, "a float >= 0")
        require_choice("reward_signal", self.reward_signal, tuple(SIGNALS))

    def reward_weights(self, rounds: int) -> dict[str, float]:
        """The weights of the validation gain rewarded and of the uplink penalty, over ``rounds`` rounds."""
        gain = dict.fromkeys(SIGNALS.values(), 0.0) | {SIGNALS[self.reward_signal]: 1.0}
        return {**gain, "uplink": -self.lambda_comm / rounds}


@dataclass(frozen=True)
class SelectionConfig(RewardConfig):
    """What ``FLSelect-v0`` and ``FLSelectPick-v0`` share (their own configs add the rest).

    ``preset``: ``tiny`` (default) or ``paper`` (the module table), with :class:`PresetConfig`'s fields.

    Attributes:
        clients_per_round: ``m`` clients that train per round (preset).
        p_positive: probability that the positive pool is drawn from first (the paper's epsilon).
        local_algorithm: ``fedavg``, ``fedprox``, ``scaffold`` (uploads its control variate too) or
            ``moon`` (contrastive term, mu 0.1, tau 0.5).
        prox_mu: FedProx's ``mu``.
        lambda_entropy: weight of the selected mixture's normalised entropy (shaping; 0 = off).
        lambda_repair: penalty of an action the env had to repair (empty, or too many clients).
    """

    presets: ClassVar[Mapping[str, Mapping[str, dict]]] = PRESETS
    preset: str = "tiny"
    clients_per_round: int | None = None
    p_positive: float = 0.8
    local_algorithm: str = "fedavg"
    prox_mu: float = 0.01
    lambda_entropy: float = 0.0
    lambda_repair: float = 0.01

    def __post_init__(self) -> None:
        super().__post_init__()
        n = self.scenario.client_counts()[0]
        require(is_int_at_least(self.clients_per_round, 1) and self.clients_per_round <= n,
                "clients_per_round", self.clients_per_round, f"an integer in [1, fewest clients={n}]")
        require(0 <= self.p_positive <= 1, "p_positive", self.p_positive, "a float in [0, 1]")
        require_choice("local_algorithm", self.local_algorithm, LOCAL_ALGORITHMS)
        require(is_non_negative(self.prox_mu), "prox_mu", self.prox_mu, "a float >= 0")
        for name in ("lambda_entropy", "lambda_repair"):
            require(is_non_negative(getattr(self, name)), name, getattr(self, name), "a float >= 0")

    def federation_config(self) -> FederationConfig:
        """Real training with soft labels and a validation set."""
        return self.scenario.federation_config(
            models=(self.model,), local_test="none", algorithm=self.local_algorithm, prox_mu=self.prox_mu,
            soft_labels=True, validation_size=self.validation_size, train=True)


@dataclass(frozen=True)
class SelectConfig(SelectionConfig):
    """Arguments of ``FLSelect-v0``: :class:`SelectionConfig`'s, the shared scenario's, and these.

    Attributes:
        sampler: ``pools`` (FedEntropy's epsilon-greedy pools) or ``uniform`` (from all clients).
        action_encoding: ``multibinary`` (one bit per candidate) or ``discrete`` (``2^m - 1``
            non-empty masks; ``m <= 12``).
    """

    sampler: str = "pools"
    action_encoding: str = "multibinary"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice("sampler", self.sampler, SAMPLERS)
        require_choice("action_encoding", self.action_encoding, ENCODINGS)
        require(self.action_encoding != "discrete" or self.clients_per_round <= 12, "action_encoding",
                self.action_encoding, "'multibinary' when clients_per_round > 12")


@dataclass(frozen=True)
class PickConfig(SelectionConfig):
    """Arguments of ``FLSelectPick-v0``: :class:`SelectionConfig`'s, the shared scenario's, and these.

    Attributes:
        post_filter: after training, ``judge`` (FedEntropy's judgement keeps a subset) or ``all``.
        reward: ``accuracy`` (validation accuracy gain minus the uplink penalty, as ``FLSelect-v0``)
            or ``favor`` (FAVOR's ``64^(acc - target) - 1``, Wang et al., INFOCOM 2020).
        target_accuracy: the ``favor`` reward's target.
        pick_action: ``bits`` (``MultiBinary(N)``, up to ``m`` set) or ``scores`` (``Box(-1, 1,
            (N,))``, the ``m`` highest pick: what a Gaussian policy learns well, starting uniform).
        system_rows: each client row also carries what a system-aware selector reads (reachable,
            share of updates arrived, reported round time, last loss; Oort and FedCS). Always on
            with device behaviour (``availability``, ``dropout``, ``deadline``).
        lambda_time: weight of the round time in the ``accuracy`` reward (per episode: rounds that
            each take ``T``, the deadline or the round's median reported time, cost
            ``lambda_time``); 0 = time is free.
    """

    post_filter: str = "judge"
    reward: str = "accuracy"
    target_accuracy: float = 0.9
    pick_action: str = "bits"
    system_rows: bool = False
    lambda_time: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice("post_filter", self.post_filter, ("judge", "all"))
        require_choice("reward", self.reward, ("accuracy", "favor"))
        require_choice("pick_action", self.pick_action, ("bits", "scores"))
        require(self.reward_signal != "loss_vs_all", "reward_signal", self.reward_signal,
                f"one of {', '.join(s for s in SIGNALS if s != 'loss_vs_all')} (every picked client is "
                "aggregated, so there is no choice of uploads to compare with keeping all)")
        require_fraction("target_accuracy", self.target_accuracy)
        require(is_non_negative(self.lambda_time) and math.isfinite(self.lambda_time), "lambda_time",
                self.lambda_time, "a finite float >= 0")


@dataclass(frozen=True)
class QueueConfig(RewardConfig):
    """Arguments of ``FLSelectQueue-v0`` (DDFL, Herath et al.), and the shared scenario's.

    ``preset``: ``tiny`` (digits, 20 one-class clients, 30 rounds, ``segment_rho`` 0.04) or
    ``paper`` (the paper's Table III, Approach 02: MNIST, 100 one-class clients, DDFL's CNN, batch 100,
    SGD 0.01 with momentum 0.9, 100 rounds, ``segment_rho`` 0.0037), with :class:`PresetConfig`'s
    fields.

    Attributes:
        server_data_fraction: ``gamma``, the class-balanced share of the training set the server
            holds and streams to the devices. 0 (default) = no server data.
        allow_server_data: must be True for ``server_data_fraction > 0``: raw training samples are
            sent to every device (a privacy choice).
        queue_mode: ``accumulate`` (segments pile up) or ``replace`` (the latest segment only).
        segment_rho: segment size as a share of the mean initial device size (the paper's
            Algorithm 2; preset: 0.04 for ``tiny``'s 30 rounds, 0.0037, ours, calibrated to 100 rounds,
            for ``paper``).
        segment_size: samples per segment, overriding ``segment_rho``.
        queue_start_round: the first round whose working sets include a segment.
        aggregation_weights: ``entropy`` (DDFL: weights proportional to label entropy, data size if
            all kept devices have zero entropy) or ``data_size`` (FedAvg).
        empty_action: an all-zero action ``skip`` s aggregation (the global model stays) or keeps ``all``.
        lambda_comm: as :class:`RewardConfig`'s, default 0 (DDFL-vs-PPO comparisons are pure accuracy).
        update_stats: the observation adds, per device, the cosine of its update with the
            round's mean update, this round's and its mean over the episode so far (ours, not
            DDFL's: what the server computes from the uploaded models, from which corrupted
            devices can be told).
    """

    presets: ClassVar[Mapping[str, Mapping[str, dict]]] = QUEUE_PRESETS
    preset: str = "tiny"
    server_data_fraction: float = 0.0
    allow_server_data: bool = False
    queue_mode: str = "accumulate"
    segment_rho: float | None = None
    segment_size: int | None = None
    queue_start_round: int = 2
    aggregation_weights: str = "entropy"
    empty_action: str = "skip"
    lambda_comm: float = 0.0
    update_stats: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require(isinstance(self.update_stats, bool), "update_stats", self.update_stats, "True or False")
        require(0 <= self.server_data_fraction < 1, "server_data_fraction", self.server_data_fraction,
                "a float in [0, 1)")
        require(self.server_data_fraction == 0 or self.allow_server_data is True, "server_data_fraction",
                self.server_data_fraction,
                "0 unless allow_server_data=True: the server's raw training samples "
                "are sent to every device")
        require_choice("queue_mode", self.queue_mode, ("accumulate", "replace"))
        require(is_non_negative(self.segment_rho) and self.segment_rho > 0, "segment_rho", self.segment_rho,
                "a float > 0")
        require(self.segment_size is None or is_int_at_least(self.segment_size, 1), "segment_size",
                self.segment_size, "None or an integer >= 1")
        require(is_int_at_least(self.queue_start_round, 1), "queue_start_round", self.queue_start_round,
                "an integer >= 1")
        require_choice("aggregation_weights", self.aggregation_weights, ("entropy", "data_size"))
        require_choice("empty_action", self.empty_action, ("skip", "all"))

    def federation_config(self) -> FederationConfig:
        """Real training with a validation set and, opted in, the server's data share."""
        return self.scenario.federation_config(
            models=(self.model,), local_test="none", server_data_fraction=self.server_data_fraction,
            validation_size=self.validation_size, train=True)
