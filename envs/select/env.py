"""Client selection after training: FedEntropy's decision as a Gymnasium env (spec ``fedentropy.md`` 8).

Each round, ``m`` candidates are drawn (FedEntropy's epsilon-greedy pools, or uniformly) and
train; the agent sees them trained (soft labels, sizes, pool flags, selection counts, the
leave-one-out entropy hint, global features) and decides which of them upload and are
aggregated. FedEntropy's maximum entropy judgement is the fixed policy ``fedentropy``.

See ``docs/envs/flselect.md`` for spaces, rewards, info keys and arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_gym.envs.base import FLEnv
from fl_gym.envs.select.config import SelectConfig
from fl_gym.envs.select.entropy import entropy, leave_one_out_gain, mixture
from fl_gym.envs.select.pools import Draw, Pools
from fl_gym.envs.select.spaces import SelectLayout
from fl_gym.records import RoundPlan, RoundReport, TrainedRound


@dataclass(frozen=True)
class SelectRound:
    """A trained round waiting for the selection.

    Attributes:
        draw: how the candidates were drawn.
        trained: the federation's trained round.
        slots: ``(m,)`` candidate ids, ascending (row order).
        soft_labels: ``(m, c)`` float32, as observed.
        entropy: ``H(mix(S))`` in nats.
    """

    draw: Draw
    trained: TrainedRound
    slots: np.ndarray
    soft_labels: np.ndarray
    entropy: float


@dataclass(frozen=True)
class Selection:
    """What the server kept in the last round, and what it gained.

    Attributes:
        round: the played round.
        keep: ``(m,)`` bool per row.
        repaired: an all-zero action was repaired.
        acc_gain: validation accuracy after the round minus before it.
        kept_entropy: ``H(mix(kept)) / log c``.
    """

    round: SelectRound
    keep: np.ndarray
    repaired: bool
    acc_gain: float
    kept_entropy: float


class FLSelectEnv(FLEnv):
    """FedEntropy's decision: which of this round's trained candidates upload and are aggregated.

    ## Description
    One step is one federated round (Ling et al., FedEntropy): ``m`` of ``N`` clients are drawn
    (epsilon-greedy over positive and negative pools, or uniformly), train locally, and report the
    mean softmax of their trained model on their data (a soft label). The agent keeps a subset;
    only the kept clients upload their model, which is aggregated by data size. Kept clients join
    the positive pool, the others the negative one.

    ## Action Space
    ``MultiBinary(m)``: bit ``i`` keeps candidate ``i`` (rows in ascending client id). An all-zero
    action keeps the largest candidate (``info["select/repaired"]``, penalised).
    ``action_encoding="discrete"``: ``Discrete(2^m - 1)``, the mask ``action + 1`` in binary.

    ## Observation Space
    ``Box(-1, 1, (m (c + 4) + 6,))``: per candidate its soft label, size, pool flag, selection
    count and leave-one-out entropy gain, then six global features (``envs/select/spaces.py``).

    ## Rewards
    ``acc_gain`` (validation accuracy now minus last round's) ``- lambda_comm / T * uploads / m``
    ``+ lambda_entropy / T * H(mix(kept)) / log c - lambda_repair * repaired``.

    ## Episode End
    Truncated after ``rounds_per_episode`` rounds.

    ## Arguments
    :class:`~fl_gym.envs.select.config.SelectConfig` and the shared scenario, plus ``scenario_seed``.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLSelect-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space
    ((76,), MultiBinary(5))
    """

    family = "select"
    config_class = SelectConfig
    config: SelectConfig

    def _setup(self) -> None:
        cfg, fed = self.config, self.federation
        self.m = cfg.clients_per_round
        self.layout = SelectLayout(self.m, fed.num_classes, cfg.action_encoding)
        self.observation_space = self.layout.observation_space()
        self.action_space = self.layout.action_space()
        self.pools = Pools(fed.num_clients, cfg.p_positive)
        self._size_scale = 2.0 ** math.ceil(math.log2(fed.sizes.max()))
        self._log_c = math.log(fed.num_classes)
        self._soft_label_bytes = self.m * (4 * fed.num_classes + 4)  # c float32 and one int32 per candidate
        self._lr = np.full(fed.num_clients, cfg.scenario.lr)

    def _reset_state(self) -> None:
        self.pools = Pools(self.federation.num_clients, self.config.p_positive)
        self._selections = np.zeros(self.federation.num_clients)
        self._last_acc = self.federation.validation_accuracy()
        self._last_kept = 1.0
        self._uplink_bytes = 0.0

    # ---- the round ---------------------------------------------------------------------------

    def _prepare(self) -> SelectRound:
        """Draw the candidates and train them."""
        fed, cfg = self.federation, self.config
        sample = self.pools.draw if cfg.sampler == "pools" else self.pools.uniform
        draw = sample(self.m, self.np_random)
        opened = fed.open_round(draw.candidates)
        plan = RoundPlan.make(fed.num_clients, lr=self._lr, selected=draw.candidates, epochs=cfg.local_epochs)
        trained = fed.train_round(opened, plan)
        slots = np.flatnonzero(draw.candidates)
        soft = trained.stats.soft_labels[slots].astype(np.float32)
        return SelectRound(draw, trained, slots, soft, entropy(mixture(soft, fed.sizes[slots])))

    def _observe(self, pending: SelectRound) -> np.ndarray:
        fed, slots = self.federation, pending.slots
        gain = leave_one_out_gain(pending.soft_labels, fed.sizes[slots]) / self._log_c
        rows = np.column_stack([pending.soft_labels, fed.sizes[slots] / self._size_scale,
                                pending.draw.was_negative[slots], self._selections[slots] / self.rounds_per_episode,
                                np.clip(gain, -1, 1)])
        last_acc = 0.0 if math.isnan(self._last_acc) else self._last_acc
        glob = [self._round / self.rounds_per_episode, last_acc, pending.entropy / self._log_c,
                self.pools.negative.mean(), float(pending.draw.positive_branch), self._last_kept]
        return np.concatenate([rows.ravel(), glob]).astype(np.float32)

    def _play(self, pending: SelectRound, action: np.ndarray) -> RoundReport:
        fed, slots = self.federation, pending.slots
        keep = self.layout.decode(action)
        repaired = not keep.any()
        if repaired:  # at least one upload: the largest candidate (lowest id on ties)
            keep[int(np.argmax(fed.sizes[slots]))] = True
        aggregate = np.zeros(fed.num_clients, bool)
        aggregate[slots[keep]] = True
        report = fed.finish_round(pending.trained, aggregate=aggregate)
        self.pools.update(slots[keep], slots[~keep])
        self._selections[slots] += 1
        kept_entropy = entropy(mixture(pending.soft_labels[keep], fed.sizes[slots][keep])) / self._log_c
        self._last = Selection(pending, keep, repaired, report.val_accuracy - self._last_acc, kept_entropy)
        self._last_acc, self._last_kept = report.val_accuracy, float(keep.mean())
        self._uplink_bytes += report.upload_bytes + self._soft_label_bytes
        return report

    # ---- reward and info -----------------------------------------------------------------------

    def _reward_terms(self, report: RoundReport) -> dict[str, float]:
        last = self._last
        return {"acc_gain": last.acc_gain, "uplink": last.keep.sum() / self.m, "entropy": last.kept_entropy,
                "repaired": float(last.repaired)}

    def _reward_weights(self) -> dict[str, float]:
        cfg, horizon = self.config, self.rounds_per_episode
        return {"acc_gain": 1.0, "uplink": -cfg.lambda_comm / horizon, "entropy": cfg.lambda_entropy / horizon,
                "repaired": -cfg.lambda_repair}

    def _family_info(self, report: RoundReport, terms: Mapping[str, float]) -> dict[str, Any]:
        last = self._last
        played, keep = last.round, last.keep
        return {"select/kept": played.slots[keep], "select/removed": played.slots[~keep],
                "select/kept_share": float(keep.mean()), "select/positive_branch": played.draw.positive_branch,
                "select/repaired": last.repaired,
                "select/uplink_models": int(keep.sum()) * self.federation.algorithm.upload_factor,
                "select/uplink_bytes": report.upload_bytes, "select/soft_label_bytes": self._soft_label_bytes,
                "select/downlink_models": self.m, "select/cum_uplink_bytes": self._uplink_bytes,
                "select/entropy_candidates": played.entropy / self._log_c, "select/entropy_kept": last.kept_entropy,
                "select/val_accuracy": report.val_accuracy, "select/local_steps": played.trained.steps[played.slots]}
