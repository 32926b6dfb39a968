"""DDFL as a Gymnasium env: a server data queue and the choice of which trained devices are aggregated.

**Server data is a privacy choice.** With ``server_data_fraction > 0`` (and the required
``allow_server_data=True``) the server keeps a class-balanced share of the raw training data and
sends it, sample by sample, to every device; each device also discloses the label entropy of its
data every round. This is the only fl-gym env that moves server data to clients; by default it
holds none and is plain FedAvg on one-class devices.

Each round every device trains on its working set (its own data, plus the segments of the
server's queue it has received); the agent sees each device's label entropy, size, label bias,
selection history and server share, and decides which trained devices are aggregated, weighted
by label entropy (DDFL) or data size. DDFL's rule, the top ``lambda`` devices by entropy, is the
fixed policy ``ddfl``. See ``docs/envs/flselect.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_gym.data.report import label_entropy
from fl_gym.envs.base import ClientRows, FLEnv, ValidationGain, ValidationTerms, loss_vs_all
from fl_gym.envs.select.config import QueueConfig, what_if_term
from fl_gym.envs.select.queue import DataQueue, bias, segment_size
from fl_gym.envs.select.spaces import ARRIVED_ROW, QUEUE_GLOBAL, QUEUE_ROW, UPDATE_ROW, QueueLayout
from fl_gym.records import RoundPlan, RoundReport, TrainedRound


@dataclass(frozen=True)
class QueueRound:
    """A trained round waiting for the aggregation decision.

    Attributes:
        trained: every device trained on its working set.
        entropy: ``(K,)`` label entropy of each working set, bits.
        bias: ``(K,)`` normalised distance of each label distribution to the population's.
        update_cos: ``(K,)`` ``(1 + cos) / 2`` of each update's angle to the round's mean update.
    """

    trained: TrainedRound
    entropy: np.ndarray
    bias: np.ndarray
    update_cos: np.ndarray


@dataclass(frozen=True)
class QueueOutcome:
    """A played round: the devices aggregated, what the validation set gained, what the devices showed.

    It holds the round's entropies and biases, not the round itself: its trained local models would
    otherwise stay alive until the next step.

    Attributes:
        keep: ``(K,)`` bool, the devices aggregated.
        gain: the round's validation reward terms.
        entropy: ``(K,)`` label entropy of each working set, bits.
        bias: ``(K,)`` normalised distance of each label distribution to the population's.
        empty: the action kept no device.
        fallback: every kept device holds one class, so data-size weights replaced entropy weights.
        loss_vs_all: the validation loss the kept devices saved against aggregating every device
            (:func:`~fl_gym.envs.base.loss_vs_all`; NaN unless ``reward_signal="loss_vs_all"``).
    """

    keep: np.ndarray
    gain: ValidationTerms
    entropy: np.ndarray
    bias: np.ndarray
    empty: bool
    fallback: bool
    loss_vs_all: float = math.nan


class FLSelectQueueEnv(FLEnv):
    """DDFL (Herath et al.): which trained devices are aggregated, with an opt-in server data queue.

    ## Description
    One step is one round: every device trains on its working set, the agent keeps a subset,
    the kept devices are averaged (weights: label entropy, or data size), and, with server data,
    every device then receives its next queue segment. Read the module docstring on privacy first.

    ## Action Space
    ``MultiBinary(K)``: bit ``k`` aggregates device ``k``. All zero: ``empty_action="skip"``
    keeps the global model (flagged), ``"all"`` aggregates everyone.

    ## Observation Space
    ``Box(0, 1, (6K + 3,))``, or ``(8K + 3,)`` with ``update_stats``, ``K`` more with device
    behaviour: :class:`~fl_gym.envs.select.spaces.QueueLayout`.

    ## Device behaviour
    With ``availability < 1``, dropout or a ``deadline`` (:mod:`fl_gym.behaviour`) only the
    reachable devices train, and an update lost to dropout or the deadline never arrives: each
    row ends with ``arrived``, a lost update cannot be aggregated, and ``info["select/lost"]`` and
    ``info["select/partial"]`` name the lost and cut updates. Queue segments reach every device.

    ## Rewards
    Validation accuracy gain (``reward_signal="loss"``: the drop of the validation cross-entropy;
    ``"loss_area"``: that drop times ``(T - t + 1) / T``; ``"loss_vs_all"``: the cross-entropy of
    aggregating every device minus that of the kept ones) ``- lambda_comm / T * kept / K``.

    ## Episode End
    Truncated after ``rounds_per_episode`` rounds.

    ## Arguments
    :class:`~fl_gym.envs.select.config.QueueConfig` and the shared scenario, plus ``scenario_seed``.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLSelectQueue-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space
    ((123,), MultiBinary(20))
    """

    family = "select"
    config_class = QueueConfig
    config: QueueConfig
    device_behaviour = True

    def _setup(self) -> None:
        cfg, fed = self.config, self.federation
        behaves = fed.config.behaviour.active
        row = QUEUE_ROW + (UPDATE_ROW if cfg.update_stats else ()) + (ARRIVED_ROW if behaves else ())
        self.layout = QueueLayout(fed.num_clients, row)
        self.client_rows = ClientRows(len(self.layout.row), len(QUEUE_GLOBAL))
        self.observation_space = self.layout.observation_space()
        self.action_space = self.layout.action_space()
        self._base = [p.cpu().numpy() for p in fed.train_parts]
        self._population = np.bincount(fed.y_train.cpu().numpy(), minlength=fed.num_classes)
        self._log2_c = math.log2(fed.num_classes)
        self._lr = np.full(fed.num_clients, cfg.scenario.lr)
        train = len(fed.y_train)
        self.segment = cfg.segment_size or segment_size(cfg.segment_rho, len(fed.server_indices),
                                                        fed.num_clients, train)
        if len(fed.server_indices):
            # the same text for every scenario, so that Python shows it once, not at every redrawn scenario
            warnings.warn(f"FLSelectQueue-v0: the server holds {cfg.server_data_fraction:.0%} of the "
                          "training data as raw samples and sends them to every device", stacklevel=2)

    def _reset_state(self) -> None:
        fed = self.federation
        if self.config.scenario.redraw_partition:  # the reset has just split the devices' data afresh
            self._base = [p.cpu().numpy() for p in fed.train_parts]
        fed.assign_many(dict(enumerate(self._base)))  # a new episode starts from the devices' own data
        self.queue = DataQueue(fed.server_indices, self._base, self.segment, self.config.queue_mode,
                               self.np_random)
        self._selected_prev = np.zeros(fed.num_clients)
        self._selections = np.zeros(fed.num_clients)
        self._cos_sum = np.zeros(fed.num_clients)  # of the played rounds' update_cos
        self._uplink_bytes = 0.0
        self._validation = ValidationGain(fed, self.rounds_per_episode)

    def _prepare(self) -> QueueRound:
        """Deliver this round's segments (from ``queue_start_round`` on), then train every device."""
        fed = self.federation
        if len(fed.server_indices) and self._round + 1 >= self.config.queue_start_round:
            grown = self.queue.advance()
            if grown:
                fed.assign_many(grown)
        opened = fed.open_round()  # every reachable device
        plan = RoundPlan.make(fed.num_clients, lr=self._lr, epochs=self.config.local_epochs,
                              selected=opened.candidates)
        trained = fed.train_round(opened, plan)
        cos = (1.0 + np.cos(np.nan_to_num(trained.stats.update_angle, nan=np.pi / 2))) / 2.0
        return QueueRound(trained, label_entropy(fed.histogram), bias(fed.histogram, self._population), cos)

    def _observe(self, pending: QueueRound) -> np.ndarray:
        return self.observe_copies([self])[0]

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's rows of :meth:`observe_copies`' arrays."""
        fed, pending = self.federation, self._pending
        return (pending.entropy, fed.sizes, pending.bias, self._selected_prev, self._selections,
                self.queue.received(), pending.update_cos, self._cos_sum, pending.trained.steps > 0,
                self._round,
                [self._round / self.rounds_per_episode, self._validation.observed, self.queue.undelivered()])

    @classmethod
    def observe_copies(cls, envs: Sequence[FLSelectQueueEnv]) -> np.ndarray:
        """Every copy's observation, the rule written over ``(copies, N)`` arrays (one env: one row)."""
        first = envs[0]
        inputs = cls.observed_columns(envs)
        entropy, sizes, biases, prev, selections, received, cos, cos_sum, arrived, rounds, glob = inputs
        played = rounds[:, None]
        rows = [entropy / first._log2_c, sizes / sizes.max(axis=1, keepdims=True), biases, prev,
                selections / np.maximum(1, played), received / sizes]
        if first.config.update_stats:
            rows += [cos, (cos_sum + cos) / (played + 1)]
        if ARRIVED_ROW[0] in first.layout.row:
            rows.append(arrived)
        columns = np.stack(rows, axis=-1).reshape(len(envs), -1)  # (copies, N x row width)
        return np.concatenate([columns, glob], axis=1).astype(np.float32)

    def _play(self, pending: QueueRound, action: np.ndarray) -> tuple[RoundReport, QueueOutcome]:
        fed = self.federation
        arrived = pending.trained.steps > 0  # a lost update cannot be aggregated
        keep = np.asarray(action).astype(bool) & arrived
        empty = not keep.any()
        if empty and self.config.empty_action == "all":
            keep = arrived.copy()
        by_entropy = self.config.aggregation_weights == "entropy"
        weight = pending.entropy.copy() if by_entropy else fed.sizes.astype(float)
        fallback = bool(keep.any() and weight[keep].sum() <= 1e-12)
        if fallback:  # every kept device holds one class: data-size weights (ours)
            weight = fed.sizes.astype(float)
        what_if = self.config.reward_signal == "loss_vs_all"
        # keeping all falls back as a kept set
        basis = weight if weight.sum() > 1e-12 else fed.sizes.astype(float)
        saved = loss_vs_all(fed, pending.trained, keep, basis) if what_if else math.nan
        report = fed.finish_round(pending.trained, aggregate=keep, weight=weight)
        self._selected_prev = keep.astype(float)
        self._selections += keep
        self._cos_sum += pending.update_cos
        self._uplink_bytes += report.upload_bytes
        gain = self._validation.update(report)
        return report, QueueOutcome(keep, gain, pending.entropy, pending.bias, empty, fallback, saved)

    def _reward_terms(self, report: RoundReport, outcome: QueueOutcome) -> dict[str, float]:
        return {**outcome.gain._asdict(), **what_if_term(outcome.loss_vs_all),
                "uplink": float(outcome.keep.mean())}

    def _reward_weights(self) -> dict[str, float]:
        return self.config.reward_weights(self.rounds_per_episode)

    def _family_info(self, report: RoundReport, outcome: QueueOutcome,
                     terms: Mapping[str, float]) -> dict[str, Any]:
        entropy_bits, bias, keep = outcome.entropy, outcome.bias, outcome.keep
        pooled = self.federation.histogram[keep].sum(axis=0, keepdims=True)  # the kept working sets' labels
        return {"select/kept": np.flatnonzero(keep), "select/kept_share": float(keep.mean()),
                "select/entropy_kept": float(label_entropy(pooled)[0] / self._log2_c),
                "select/cum_uplink_bytes": self._uplink_bytes,
                "select/entropy_bits": entropy_bits,
                "select/mean_entropy": float(entropy_bits.mean() / self._log2_c),
                "select/mean_bias": float(bias.mean()), "select/weights": report.weights,
                "select/fallback_weights": outcome.fallback, "select/empty_selection": outcome.empty,
                "select/val_accuracy": report.val_accuracy, "select/samples_sent": int(self.queue.sent),
                "select/lost": np.flatnonzero(report.lost), "select/partial": np.flatnonzero(report.partial),
                "select/privacy": {"server_data_fraction": self.config.server_data_fraction,
                                   "raw_samples_sent_total": int(self.queue.sent),
                                   "label_stats_exposed": "entropy"}}
