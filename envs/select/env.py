"""Client selection as Gymnasium envs (FedEntropy: Ling et al.; the pick view after FAVOR, Wang et al., 2020).

* ``FLSelect-v0`` (:class:`FLSelectEnv`) decides after training: ``m`` candidates are drawn
  (FedEntropy's epsilon-greedy pools, or uniformly) and train; the agent sees them trained (soft
  labels, sizes, pool flags, selection counts, the leave-one-out entropy hint, global features)
  and decides which of them upload and are aggregated. FedEntropy's maximum entropy judgement
  is the fixed policy ``fedentropy``.
* ``FLSelectPick-v0`` (:class:`FLSelectPickEnv`) decides before training: the agent picks up to
  ``m`` of all ``N`` clients from per-client rows (last soft label, staleness, ``seen``), as the
  earlier RL selection work (FAVOR) does; after training, FedEntropy's judgement (or nothing)
  filters them.

Both share the pools, the aggregation of a kept subset, the reward and the ``select/`` info keys
(:class:`_SelectionEnv`). See ``docs/envs/flselect.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.envs.base import ClientRows, FLEnv, ValidationGain, ValidationTerms, favor, loss_vs_all
from fl_gym.envs.select.config import PickConfig, SelectConfig, SelectionConfig, what_if_term
from fl_gym.envs.select.entropy import entropy, judge, leave_one_out_gain, mixture
from fl_gym.envs.select.pools import Draw, Pools
from fl_gym.envs.select.spaces import GLOBAL, PickLayout, SelectLayout
from fl_gym.records import OpenedRound, RoundPlan, RoundReport, TrainedRound


@dataclass(frozen=True)
class SelectRound:
    """A trained round waiting for the selection.

    Attributes:
        draw: how the candidates were drawn.
        trained: the federation's trained round.
        slots: ``(m,)`` candidate ids, ascending (row order).
        soft_labels: ``(m, c)`` float32, as observed (zeros where the update was lost).
        entropy: ``H(mix(S))`` in nats, over the updates that arrived.
        arrived: ``(m,)`` bool: the candidate's update arrived (not lost to dropout or the deadline).
    """

    draw: Draw
    trained: TrainedRound
    slots: np.ndarray
    soft_labels: np.ndarray
    entropy: float
    arrived: np.ndarray


@dataclass(frozen=True)
class Selection:
    """A played round's outcome: what the server kept, and what it gained.

    It holds what the info reports of the played round, not the round itself: its trained local
    models, aggregated already, would otherwise stay alive until the next step.

    Attributes:
        slots: ``(m,)`` the played round's candidate ids, ascending (row order).
        positive_branch: the candidates were drawn from the positive pool first.
        entropy: ``H(mix(S))`` of the candidates, nats.
        local_steps: ``(m,)`` local steps each candidate took.
        keep: ``(m,)`` bool per row.
        repaired: an all-zero action was repaired.
        gain: the round's validation reward terms.
        kept_entropy: ``H(mix(kept)) / log c``.
        loss_vs_all: the validation loss the kept subset saved against keeping every candidate
            (:func:`~fl_gym.envs.base.loss_vs_all`; NaN unless ``reward_signal="loss_vs_all"``).
        fallback: (``FLSelectPick-v0``) no client was picked: FedEntropy's draw trained instead.
        trimmed: (``FLSelectPick-v0``) more than ``m`` clients were picked: ``m`` of them trained.
        unavailable: (``FLSelectPick-v0``) picked clients that were unreachable this round.
        time_scale: (``FLSelectPick-v0``) ``T``, the seconds its time reward divides the round's by.
    """

    slots: np.ndarray
    positive_branch: bool
    entropy: float
    local_steps: np.ndarray
    keep: np.ndarray
    repaired: bool
    gain: ValidationTerms
    kept_entropy: float
    loss_vs_all: float = math.nan
    fallback: bool = False
    trimmed: bool = False
    unavailable: int = 0
    time_scale: float = math.nan


class _SelectionEnv(FLEnv):
    """Pools, the aggregation of a kept subset, the reward and the info of both selection envs."""

    family = "select"
    config: SelectionConfig

    def _setup(self) -> None:
        cfg, fed = self.config, self.federation
        self.m = cfg.clients_per_round
        self.pools = Pools(fed.num_clients, cfg.p_positive)
        self._log_c = math.log(fed.num_classes)
        self._lr = np.full(fed.num_clients, cfg.scenario.lr)

    def _reset_state(self) -> None:
        fed = self.federation
        n = fed.num_clients
        # the largest client's size, up to a power of two (ratios stay exact); per episode, as the
        # partition may be redrawn at the reset (redraw_partition), so every size stays within the space
        self._size_scale = 2.0 ** math.ceil(math.log2(fed.sizes.max()))
        self.pools = Pools(n, self.config.p_positive)
        self._selections = np.zeros(n)
        self._validation = ValidationGain(fed, self.rounds_per_episode)
        self._last_kept = 1.0
        self._uplink_bytes = 0.0
        self._lost = 0  # updates lost this episode (dropout, the deadline)

    def _train(self, opened: OpenedRound, draw: Draw) -> SelectRound:
        """Train the drawn clients of ``opened``; their soft labels as observed (float32)."""
        fed = self.federation
        plan = RoundPlan.make(fed.num_clients, lr=self._lr, selected=draw.candidates,
                              epochs=self.config.local_epochs)
        trained = fed.train_round(opened, plan)
        slots = draw.candidates.nonzero()[0]
        soft, arrived = trained.stats.soft_labels[slots].astype(np.float32), ~trained.lost[slots]
        soft[~arrived] = 0.0  # a lost update's soft label never reaches the server
        mixed = mixed_entropy(soft[arrived], fed.sizes[slots][arrived])
        return SelectRound(draw, trained, slots, soft, mixed, arrived)

    def _global_features(self, entropy_now: float, positive_branch: bool) -> list[float]:
        return [self._round / self.rounds_per_episode, self._validation.observed, entropy_now / self._log_c,
                self.pools.negative_share, float(positive_branch), self._last_kept]

    def _keep(self, played: SelectRound, keep: np.ndarray, repaired: bool) -> tuple[RoundReport, Selection]:
        """Aggregate the kept rows of ``played``, update pools and bookkeeping."""
        fed, slots, keep = self.federation, played.slots, keep & played.arrived  # a lost update cannot enter
        aggregate = np.zeros(fed.num_clients, bool)
        aggregate[slots[keep]] = True
        what_if = self.config.reward_signal == "loss_vs_all"
        saved = loss_vs_all(fed, played.trained, aggregate) if what_if else math.nan
        report = fed.finish_round(played.trained, aggregate=aggregate)
        self.pools.update(slots[keep], slots[~keep])
        self._selections[slots] += 1
        kept_entropy = mixed_entropy(played.soft_labels[keep], fed.sizes[slots][keep]) / self._log_c
        selection = Selection(slots, played.draw.positive_branch, played.entropy,
                              played.trained.steps[slots], keep,
                              repaired, self._validation.update(report), kept_entropy, saved)
        self._last_kept = np.count_nonzero(keep) / len(keep)
        self._uplink_bytes += report.upload_bytes + self._soft_label_bytes(len(slots))
        self._lost += int(report.lost.sum())
        return report, selection

    def _soft_label_bytes(self, candidates: int) -> int:
        """``c`` float32 and one int32 per candidate."""
        return candidates * (4 * self.federation.num_classes + 4)

    # ---- reward and info -----------------------------------------------------------------------

    def _reward_terms(self, report: RoundReport, outcome: Selection) -> dict[str, float]:
        return {**outcome.gain._asdict(), **what_if_term(outcome.loss_vs_all),
                "uplink": outcome.keep.sum() / self.m,
                "entropy": outcome.kept_entropy, "repaired": float(outcome.repaired)}

    def _reward_weights(self) -> dict[str, float]:
        cfg, horizon = self.config, self.rounds_per_episode
        return {**cfg.reward_weights(horizon), "entropy": cfg.lambda_entropy / horizon,
                "repaired": -cfg.lambda_repair}

    def _family_info(self, report: RoundReport, outcome: Selection,
                     terms: Mapping[str, float]) -> dict[str, Any]:
        slots, keep = outcome.slots, outcome.keep
        return {"select/kept": slots[keep], "select/removed": slots[~keep],
                "select/kept_share": self._last_kept, "select/positive_branch": outcome.positive_branch,
                "select/repaired": outcome.repaired,
                "select/uplink_models": int(keep.sum()) * self.federation.algorithm.upload_factor,
                "select/uplink_bytes": report.upload_bytes,
                "select/soft_label_bytes": self._soft_label_bytes(len(slots)),
                "select/downlink_models": len(slots), "select/cum_uplink_bytes": self._uplink_bytes,
                "select/entropy_candidates": outcome.entropy / self._log_c,
                "select/entropy_kept": outcome.kept_entropy,
                "select/val_accuracy": report.val_accuracy, "select/local_steps": outcome.local_steps,
                "select/lost": report.lost.nonzero()[0], "select/partial": report.partial.nonzero()[0],
                "select/cum_lost": self._lost, "select/fairness": jain_index(self._selections)}


def jain_index(counts: np.ndarray) -> float:
    """Jain's fairness index of the clients' selection counts, ``(sum x)^2 / (N sum x^2)`` (1: all equal)."""
    total = float((counts**2).sum())
    return float(counts.sum() ** 2 / (len(counts) * total)) if total > 0 else 1.0


def _padded(values: np.ndarray, m: int) -> np.ndarray:
    """``values`` followed by zero rows up to ``m``."""
    out = np.zeros((m, *values.shape[1:]), values.dtype)
    out[: len(values)] = values
    return out


def mixed_entropy(soft_labels: np.ndarray, sizes: np.ndarray) -> float:
    """``H(mix(rows))`` in nats; 0 without a row (every update of the round lost)."""
    return entropy(mixture(soft_labels, sizes)) if len(sizes) else 0.0


class FLSelectEnv(_SelectionEnv):
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

    ## Device behaviour
    With ``availability < 1`` (:mod:`fl_gym.behaviour`) the candidates are drawn among the
    reachable clients; fewer than ``m`` reachable: the rows after theirs are zeros and their bits
    are ignored. With dropout or a ``deadline``, a candidate's update may be lost: its row shows
    size 0 and a zero soft label (so no mixture counts it), it cannot be kept, and
    ``info["select/lost"]`` and ``info["select/partial"]`` name the lost and cut updates.

    ## Rewards
    ``acc_gain`` (validation accuracy now minus last round's; with ``reward_signal="loss"`` the
    drop of the validation cross-entropy, ``loss_drop``, with ``"loss_area"`` that drop times
    ``(T - t + 1) / T``, with ``"loss_vs_all"`` the cross-entropy of averaging every candidate minus
    that of the kept ones, ``loss_vs_all``) ``- lambda_comm / T * uploads / m``
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

    any_client_count = True  # rows and bits cover the round's m candidates, not all K
    device_behaviour = True
    config_class = SelectConfig
    config: SelectConfig

    def _setup(self) -> None:
        super()._setup()
        self.layout = SelectLayout(self.m, self.federation.num_classes, self.config.action_encoding)
        per_client = self.layout.encoding != "discrete"  # Discrete(2^m - 1) names a subset, not a bit per row
        self.client_rows = ClientRows(self.layout.row_width, len(GLOBAL), per_client_action=per_client)
        self.observation_space = self.layout.observation_space()
        self.action_space = self.layout.action_space()

    @property
    def candidate_ids(self) -> np.ndarray:
        """``(m,)`` the client ids of the pending round's candidates, in row (and action bit) order."""
        return self._pending.slots

    def _prepare(self) -> SelectRound:
        """Draw the candidates among the reachable clients and train them."""
        opened = self.federation.open_round()  # every reachable client: the draw picks from them
        sample = self.pools.draw if self.config.sampler == "pools" else self.pools.uniform
        return self._train(opened, sample(self.m, self.np_random, opened.candidates))

    def _observe(self, pending: SelectRound) -> np.ndarray:
        return self.observe_copies([self])[0]

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's rows of :meth:`observe_copies`' arrays.

        Sizes are relative to the scenario's scale, a lost update shows no data (size 0: no mixture
        counts it), and with fewer reachable candidates than ``m`` zero rows follow theirs.
        """
        fed, pending = self.federation, self._pending
        slots = pending.slots
        rows = (pending.soft_labels, fed.sizes[slots] * pending.arrived / self._size_scale,
                pending.draw.was_negative[slots], self._selections[slots] / self.rounds_per_episode)
        if len(slots) < self.m:
            rows = tuple(_padded(values, self.m) for values in rows)
        return (*rows, self._global_features(pending.entropy, pending.draw.positive_branch))

    @classmethod
    def observe_copies(cls, envs: Sequence[FLSelectEnv]) -> np.ndarray:
        """Every copy's observation, the rule written over ``(copies, m)`` arrays (one env: one row)."""
        first = envs[0]
        soft, sizes, negative, selections, glob = cls.observed_columns(envs)
        gain = np.clip(leave_one_out_gain(soft, sizes) / first._log_c, -1, 1)
        features = np.stack([sizes, negative, selections, gain], axis=-1)
        rows = np.concatenate([soft, features], axis=-1)
        return np.concatenate([rows.reshape(len(envs), -1), glob], axis=1).astype(np.float32)

    def _play(self, pending: SelectRound, action: np.ndarray) -> tuple[RoundReport, Selection]:
        keep = self.layout.decode(action)[: len(pending.slots)] & pending.arrived
        repaired = not keep.any() and pending.arrived.any()
        if repaired:  # at least one upload: the largest candidate that arrived (lowest id on ties)
            keep[int(np.argmax(self.federation.sizes[pending.slots] * pending.arrived))] = True
        return self._keep(pending, keep, repaired)


class FLSelectPickEnv(_SelectionEnv):
    """The server picks who trains: up to ``m`` of all ``N`` clients, before training.

    ## Description
    The shape of the earlier RL selection work (FAVOR, Wang et al., INFOCOM 2020), on
    FedEntropy's federation. The agent sees every client's last-known soft label, how
    stale it is, whether it has ever trained, its size, pool and selection count, and picks the
    clients that train this round; after training, ``post_filter="judge"`` runs FedEntropy's
    judgement on them (``"all"``: every picked client uploads).

    ## Action Space
    ``MultiBinary(N)``. No client picked: FedEntropy's epsilon-greedy draw of ``m`` from the pools
    (``info["select/fallback"]``, so the all-zero action *is* FedEntropy with the judge filter).
    More than ``m``: ``m`` of them uniformly (``info["select/trimmed"]``, penalised as a repair).
    ``action_masks()`` gives the clients reachable this round for sb3-contrib's ``MaskablePPO``.
    With ``pick_action="scores"``, ``Box(-1, 1, (N,))``: the ``m`` highest scores pick, so every
    action picks exactly ``m`` (a PPO agent on bits learns to pick none, the unpenalised fallback).

    ## Observation Space
    ``Box(0, 1, (N (c + 5) + 6,))``: :class:`~fl_gym.envs.select.spaces.PickLayout`.

    ## Device behaviour
    With ``availability < 1`` (:mod:`fl_gym.behaviour`) a client is reachable in some rounds
    only: an unreachable pick is dropped (``info["select/unavailable_picks"]``), scores pick the
    ``m`` best reachable clients, the fallback draws among the reachable, and ``action_masks()``
    forbids setting an unreachable client's bit. With dropout or a ``deadline``, picked clients'
    updates may be lost or cut short (``info["select/lost"]``, ``info["select/partial"]``). Each
    row then also carries the client's reachability, the share of its updates that arrived, the
    round time it reports and its last loss (``system_rows=True`` adds them without behaviour).

    ## Rewards
    ``reward="accuracy"``: as ``FLSelect-v0``, minus ``lambda_time / T_ep * round_time / T`` (``T``
    the deadline, or the round's median reported time; 0 by default). ``reward="favor"``:
    ``64^(acc - target) - 1`` on the validation accuracy (FAVOR's reward).

    ## Episode End
    Truncated after ``rounds_per_episode`` rounds.

    ## Arguments
    :class:`~fl_gym.envs.select.config.PickConfig` and the shared scenario, plus ``scenario_seed``.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLSelectPick-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space
    ((306,), MultiBinary(20))
    """

    config_class = PickConfig
    config: PickConfig
    device_behaviour = True

    def _setup(self) -> None:
        super()._setup()
        fed = self.federation
        self.layout = PickLayout(fed.num_clients, fed.num_classes, self.config.pick_action == "scores",
                                 self.config.system_rows or fed.config.behaviour.active)
        self.client_rows = ClientRows(self.layout.row_width, len(GLOBAL))
        self.observation_space = self.layout.observation_space()
        self.action_space = self.layout.action_space()

    def _reset_state(self) -> None:
        super()._reset_state()
        n, c = self.federation.num_clients, self.federation.num_classes
        self._soft = np.zeros((n, c), np.float32)
        self._last_round = np.full(n, -1)
        self._last_entropy, self._last_branch = math.log(c), True
        self._arrived = np.zeros(n)  # this episode's updates that arrived (of its _selections)
        self._loss = np.zeros(n)  # each client's last reported mean training loss / log c

    def action_masks(self) -> np.ndarray:
        """``(2N,)``: per client, whether its bit may be 0 (always) and 1 (the client is reachable)."""
        if self._pending is None:  # reachability is the pending round's
            raise gym.error.ResetNeeded("action_masks() before reset(); call reset() first")
        allowed = np.ones((self.federation.num_clients, 2), bool)
        allowed[:, 1] = self._pending.candidates
        return allowed.ravel()

    def _prepare(self) -> OpenedRound:
        """Open the round with every client a candidate; nothing trains before the agent picks."""
        return self.federation.open_round()

    def _observe(self, pending: OpenedRound) -> np.ndarray:
        return self.observe_copies([self])[0]

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's rows of :meth:`observe_copies`' arrays."""
        n = self.federation.num_clients
        system = np.reshape(self._system_columns(self._pending) if self.layout.system else [], (-1, n))
        return (self._soft, self._round - self._last_round, self._last_round >= 0,
                self.federation.sizes / self._size_scale, self.pools.negative, self._selections, system,
                self._global_features(self._last_entropy, self._last_branch))

    @classmethod
    def observe_copies(cls, envs: Sequence[FLSelectPickEnv]) -> np.ndarray:
        """Every copy's observation, the rule written over ``(copies, N)`` arrays (one env: one row)."""
        horizon = envs[0].rounds_per_episode
        soft, since, seen, sizes, negative, selections, system, glob = cls.observed_columns(envs)
        stale = np.clip(np.where(seen, since / horizon, 1.0), 0, 1)
        columns = np.stack([seen, stale, sizes, negative, selections / horizon, *system.transpose(1, 0, 2)],
                           axis=-1)  # (copies, N, 5 + system columns)
        rows = np.concatenate([soft, columns], axis=-1).reshape(len(envs), -1)
        return np.concatenate([rows, glob], axis=1).astype(np.float32)

    def _system_columns(self, pending: OpenedRound) -> list[np.ndarray]:
        """Reachability, reliability, reported duration and last loss (:class:`PickLayout`)."""
        fed = self.federation
        picked = self._selections
        reliability = np.divide(self._arrived, picked, out=np.ones(fed.num_clients), where=picked > 0)
        duration = fed.expected_times(pending, self.config.local_epochs)
        scale = self._time_scale(pending, duration)
        return [pending.candidates, reliability, duration / (duration + scale), self._loss]

    def _time_scale(self, pending: OpenedRound, duration: np.ndarray | None = None) -> float:
        """``T``: the deadline, or without one the median of the round's reported times ``duration``.

        ``duration``: ``Federation.expected_times`` of ``pending``, computed here if not given
        (and only without a deadline).
        """
        deadline = self.federation.config.behaviour.deadline
        if math.isfinite(deadline):
            return deadline
        if duration is None:
            duration = self.federation.expected_times(pending, self.config.local_epochs)
        return float(np.median(duration))

    def _play(self, pending: OpenedRound, action: np.ndarray) -> tuple[RoundReport, Selection]:
        available = pending.candidates  # every client unless some are unreachable this round
        picked = self.layout.decode(action, self.m, available)
        reachable = available[picked]
        unavailable, picked = int(len(picked) - reachable.sum()), picked[reachable]
        fallback, trimmed = len(picked) == 0, len(picked) > self.m
        if fallback:
            draw = self.pools.draw(self.m, self.np_random, available)
        else:
            if trimmed:
                picked = self.np_random.choice(picked, self.m, replace=False)
            mask = np.zeros(self.federation.num_clients, bool)
            mask[picked] = True
            draw = Draw(mask, True, self.pools.negative.copy())
        played = self._train(pending, draw)
        rows = played.arrived.nonzero()[0]
        arrived = played.slots[rows]
        self._soft[arrived] = played.soft_labels[rows]
        loss = played.trained.stats.loss[arrived] / self._log_c
        self._loss[arrived] = np.minimum(np.nan_to_num(loss, nan=1.0), 1.0)  # a diverged model: the cap
        self._last_round[played.slots] = self._round  # picked: seen, even where its update was lost
        self._arrived[arrived] += 1
        self._last_entropy, self._last_branch = played.entropy, draw.positive_branch
        keep = played.arrived.copy()
        if self.config.post_filter == "judge" and len(rows):
            keep[:] = False
            keep[rows[judge(played.soft_labels[rows], self.federation.sizes[arrived])[0]]] = True
        report, selection = self._keep(played, keep, trimmed)
        return report, replace(selection, fallback=fallback, trimmed=trimmed, unavailable=unavailable,
                               time_scale=self._time_scale(pending))

    def _reward_terms(self, report: RoundReport, outcome: Selection) -> dict[str, float]:
        terms = super()._reward_terms(report, outcome)
        terms["favor"] = favor(report.val_accuracy, self.config.target_accuracy)
        terms["time"] = report.round_time / outcome.time_scale
        return terms

    def _reward_weights(self) -> dict[str, float]:
        if self.config.reward == "favor":
            return {"favor": 1.0}
        return {**super()._reward_weights(), "time": -self.config.lambda_time / self.rounds_per_episode}

    def _family_info(self, report: RoundReport, outcome: Selection,
                     terms: Mapping[str, float]) -> dict[str, Any]:
        return {**super()._family_info(report, outcome, terms), "select/fallback": outcome.fallback,
                "select/trimmed": outcome.trimmed, "select/unavailable_picks": outcome.unavailable}
