"""HAPFL (Chen et al.) as three Gymnasium views of one simulator: its two PPO agents' decisions, and both.

Each round, ``k`` of ``K`` clients are sampled and time one LiteModel epoch (the assessment
``T^d``, the federation's probe). The server sees how fast each is relative to the fastest,
picks a model size per client (PPO1) and splits the round's epoch budget over them (PPO2); the
clients train (their local model and the LiteModel by mutual distillation, in the torch
backend), and both rewards are timing-only. The envs differ in what the agent controls:

* ``FLHetero-v0`` (:class:`FLHeteroEnv`): both, as one ``Box(-1, 1, (2k,))`` action;
* ``FLHeteroAlloc-v0`` (:class:`FLHeteroAllocEnv`): the sizes, ``MultiDiscrete([delta]*k)``; the
  split comes from an injected ``intensity_policy`` (default: uniform);
* ``FLHeteroIntensity-v0`` (:class:`FLHeteroIntensityEnv`): the split, ``Box(-1, 1, (k,))``,
  observing ``1 / S^2`` with ``S^2 = M(size) * S^1``; sizes come from an injected
  ``allocation_policy`` (default: greedy by speed; the dual-agent recipe injects a frozen PPO1).

The paper's state is the raw ratio ``S^1_i = T^d_i / min_j T^d_j >= 1``, unbounded; the
observation is its inverse ``1 / S^1_i`` in ``(0, 1]`` (each client's speed relative to the
round's fastest), which carries the same information with finite bounds.

See ``docs/envs/flhetero.md`` for the tables of spaces, rewards, info keys and arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from fl_gym.clock import RoundLoad
from fl_gym.envs.base import ClientRows, FLEnv, Predictor, require_fitting
from fl_gym.envs.hetero.actions import ACTIONS, HeteroSpec, integerize, size_bins, split_of
from fl_gym.envs.hetero.config import HISTORY_HORIZON, HeteroConfig
from fl_gym.envs.registry import FAMILIES, family_of, resolve
from fl_gym.records import OpenedRound, RoundPlan, RoundReport
from fl_gym.validation import require

# the ordinal size action at 1/6, 1/2, 5/6 of its range
CATALOGUE_PROBES = np.array([-2.0 / 3.0, 0.0, 2.0 / 3.0])


@dataclass(frozen=True)
class HeteroRound:
    """A HAPFL round waiting for the server's decision.

    Attributes:
        opened: the federation's opened round (candidates = the ``k`` sampled clients).
        slots: ``(k,)`` the sampled client ids, ascending (the observation's slot order).
        probe_ratio: ``(k,)`` ``T^d_i / min_j T^d_j``.
        sizes: ``(k,)`` sizes chosen by the injected allocation policy (intensity view), else None.
    """

    opened: OpenedRound
    slots: np.ndarray
    probe_ratio: np.ndarray
    sizes: np.ndarray | None = None


@dataclass(frozen=True)
class HeteroDecision:
    """What the server decided for a round: sizes, epoch shares, whole epochs."""

    sizes: np.ndarray
    sigma: np.ndarray
    epochs: np.ndarray


@dataclass(frozen=True)
class HeteroOutcome:
    """A played round's outcome: the round as the server saw it, and what it decided."""

    played: HeteroRound
    decision: HeteroDecision


class ClientRecords(NamedTuple):
    """What a HAPFL env keeps per client across rounds, as rows of copies (a stand-alone env has one row).

    Attributes:
        prev_size: ``(N, K)`` the size each client last trained (-1: none yet this episode).
        sizes_used: ``(N, delta)`` the sizes trained this episode.
        seen: ``(N, 2, K)`` each client's last measured slowdown and the round it was measured.
        extras: ``(N, 2, K)`` data size and label entropy, normalised (the episode's partition).
    """

    prev_size: np.ndarray
    sizes_used: np.ndarray
    seen: np.ndarray
    extras: np.ndarray

    @classmethod
    def empty(cls, n: int, num_clients: int, num_sizes: int) -> ClientRecords:
        """``n`` rows of a new episode's records (extras zero)."""
        return cls(np.full((n, num_clients), -1), np.zeros((n, num_sizes), bool),
                   np.zeros((n, 2, num_clients)), np.zeros((n, 2, num_clients)))

    def row(self, i: int, num_clients: int | None = None) -> ClientRecords:
        """Row ``i`` as a one-row view of its first ``num_clients`` clients (None: all).

        Writes through it write these arrays; a copy with fewer clients than the widest is a padded row.
        """
        clients = slice(num_clients)
        return ClientRecords(self.prev_size[i: i + 1, clients], self.sizes_used[i: i + 1],
                             self.seen[i: i + 1, :, clients], self.extras[i: i + 1, :, clients])

    def start_episode(self) -> None:
        """No client has a previous size or a measured slowdown, no size was trained."""
        self.prev_size[:] = -1
        self.seen[:, 0], self.seen[:, 1] = 1.0, -np.inf
        self.sizes_used[:] = False

    def played(self, slots: np.ndarray, sizes: np.ndarray, slowdown: np.ndarray | None,
               rounds: np.ndarray | None
               ) -> None:
        """Record rows of rounds played.

        ``slots``, ``sizes`` and ``slowdown`` are ``(N, k)``: the clients, their sizes and measured
        slowdowns (None: not kept); ``rounds`` ``(N, 1)`` the round each copy has now played.
        """
        rows = np.arange(len(slots))[:, None]
        self.prev_size[rows, slots] = sizes
        self.sizes_used[rows, sizes] = True
        if slowdown is not None:
            self.seen[rows, 0, slots], self.seen[rows, 1, slots] = slowdown, rounds


def history_features(ratio: np.ndarray, slowdown: np.ndarray, age: np.ndarray) -> np.ndarray:
    """``obs_mode="history"``'s observation: ``1 / ratio``, ``1 / (1 + slowdown)``, age (per row).

    ``age``: rounds since the slowdown was measured (``inf`` = never), shown as
    ``(1 + min(age, HISTORY_HORIZON)) / (1 + HISTORY_HORIZON)``: every feature lies in ``(0, 1]``,
    so ``-log`` (SetPolicy's ``neglog``) reads each as a finite scale.
    """
    old = (1.0 + np.minimum(age, HISTORY_HORIZON)) / (1.0 + HISTORY_HORIZON)
    return np.concatenate([1.0 / ratio, 1.0 / (1.0 + slowdown), old], axis=-1).astype(np.float32)


class _HeteroEnv(FLEnv):
    """Shared simulator, sampling, assessment, decoding, rewards and info of the three views."""

    view = "joint"  # a key of ACTIONS: what the action carries
    family = "hetero"
    config_class = HeteroConfig
    any_client_count = True  # the observation and action cover the k sampled clients, not all K
    config: HeteroConfig

    def __init__(self, config: HeteroConfig | None = None, *, scenario_seed: int = 0,
                 allocation_policy: Predictor | str | None = None,
                 intensity_policy: Predictor | str | None = None, **kwargs: Any) -> None:
        # what was injected for each role (a fixed policy's name or a predictor)
        self.injected = {"alloc": allocation_policy or "greedy", "intensity": intensity_policy or "uniform"}
        super().__init__(config, scenario_seed=scenario_seed, **kwargs)

    def _setup(self) -> None:
        cfg, fed = self.config, self.federation
        mode = cfg.reward_mode
        own = ACTIONS[self.view].reward
        require(mode is None or own is None or mode == own, "reward_mode", mode,
                f"None or {own!r} ({type(self).__name__} has one reward)")
        self.reward_mode = mode or own or "joint"
        self.k, self.num_sizes, self.total_epochs = cfg.clients_per_round, cfg.num_sizes, cfg.total_epochs
        self.time_ratio = cfg.time_ratio
        self.hetero = HeteroSpec(self.view, self.k, self.num_sizes, self.time_ratio)
        lite_epoch = fed.probe_seconds(fed.clock, fed.sizes, RoundLoad.still(fed.num_clients))
        self.t_scale = cfg.local_epochs * self.time_ratio[-1] * float(np.median(lite_epoch))
        self._catalogue = self.time_ratio[size_bins(CATALOGUE_PROBES, self.num_sizes)] / self.time_ratio[-1]
        rows = {"paper": ClientRows(1), "extended": ClientRows(4),
                "catalogue": ClientRows(1, len(CATALOGUE_PROBES)), "history": ClientRows(3)}
        self.client_rows = replace(rows[cfg.obs_mode], feature_major=True)
        width = self.client_rows.width * self.k + self.client_rows.globals
        self.observation_space = spaces.Box(0.0, 1.0, (width,), np.float32)
        self.action_space = self.hetero.action.space(self.k, self.num_sizes)
        # the injected ones, built
        self._policies = {view: self._inner(view) for view in ("alloc", "intensity")}
        self._residual = self._residual_base(cfg.residual_policy)
        self.records = ClientRecords.empty(1, fed.num_clients, self.num_sizes)
        self._lr = np.full(fed.num_clients, cfg.scenario.lr)

    # ---- spaces and actions ------------------------------------------------------------------

    def encode_action(self, sizes: np.ndarray | None = None, sigma: np.ndarray | None = None) -> np.ndarray:
        """The action of this env that gives ``sizes`` (``(k,)`` indices) and/or ``sigma`` (epoch shares).

        Each half the view acts is required (:meth:`HeteroSpec.require_choices`); the other is not read.
        """
        self.hetero.require_choices(sizes, sigma)
        return self.hetero.encode(sizes, sigma)

    def _inner(self, view: str) -> Predictor:
        policy, name = self.injected[view], f"{'allocation' if view == 'alloc' else 'intensity'}_policy"
        if callable(getattr(policy, "predict", None)):
            require_fitting(name, policy, self.observation_space)
            return policy
        fixed = family_of(self.spec_id(view)).fixed_policies(self.spec_id(view))
        require(isinstance(policy, str) and policy in fixed, name, policy,
                "a predictor (with SB3's predict) or one of " + ", ".join(fixed))
        return fixed[policy].build(self.hetero.with_view(view))

    def _residual_base(self, name: str | None) -> Predictor | None:
        """The fixed policy the agent's action corrects (``residual_policy``), or None."""
        if name is None:
            return None
        require(isinstance(self.action_space, spaces.Box), "residual_policy", name,
                f"None for {type(self).__name__} (its action is not a Box)")
        fixed = family_of(self.spec_id(self.view)).fixed_policies(self.spec_id(self.view))
        require(name in fixed, "residual_policy", name, "None or one of " + ", ".join(fixed))
        return fixed[name].build(self.hetero)

    @classmethod
    def spec_id(cls, view: str) -> str:
        """The registered env id of a view (the family's env whose class has that view)."""
        ids = FAMILIES[cls.family].envs
        return next(env_id for env_id, entry in ids.items() if resolve(entry).view == view)

    # ---- the vector clock's protocol (envs/hetero/vector.py) ----------------------------------

    def share_records(self, records: ClientRecords) -> None:
        """Keep the client records in ``records`` (a row of a vector clock's, which writes every copy's)."""
        self.records = records

    def policy(self, role: str) -> Predictor:
        """The injected policy of ``role`` (``"alloc"`` or ``"intensity"``), built for this scenario."""
        return self._policies[role]

    def ask(self, role: str, obs: np.ndarray) -> np.ndarray:
        """The injected ``role`` policy's deterministic action on ``obs``."""
        return self._predict(self._policies[role], obs)

    @property
    def residual(self) -> Predictor | None:
        """The fixed policy the agent's action corrects (``residual_policy``), or None."""
        return self._residual

    # ---- the round ---------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self.records.start_episode()
        fed = self.federation  # the partition this reset may have redrawn (redraw_partition)
        self.records.extras[0] = fed.sizes / fed.sizes.max(), fed.label_entropy / math.log2(fed.num_classes)

    def _prepare(self) -> HeteroRound:
        """Open the next round: sample ``k`` clients, draw their load, time the LiteModel epoch."""
        opened = self.federation.open_round(self.k)
        slots = np.flatnonzero(opened.candidates)
        probe = opened.probe_time[slots]
        return HeteroRound(opened, slots, probe / probe.min())

    def _observe(self, pending: HeteroRound) -> np.ndarray:
        ratio = pending.probe_ratio
        ratio = ratio if pending.sizes is None else self.time_ratio[pending.sizes] * ratio
        return self._features(pending, ratio)

    def _features(self, pending: HeteroRound, ratio: np.ndarray) -> np.ndarray:
        """The observation of ``pending`` (:meth:`features` of one row)."""
        rounds = np.array([[self.federation.round]], np.float64)
        return self.features(ratio[None], pending.slots[None], rounds, self.records)[0]

    def features(self, ratio: np.ndarray, slots: np.ndarray, rounds: np.ndarray | None, records: ClientRecords
                 ) -> np.ndarray:
        """Observations of rows of rounds: ``1 / ratio`` per slot, and what ``obs_mode`` adds.

        Extended: size, label entropy and previous size; history: the slowdowns. ``ratio`` and
        ``slots`` are ``(N, k)``, ``rounds`` ``(N, 1)`` the rounds each copy has played (read in
        history mode only).
        """
        rows = np.arange(len(slots))[:, None]
        if self.config.obs_mode == "history":
            seen = records.seen
            return history_features(ratio, seen[rows, 0, slots], rounds - seen[rows, 1, slots])
        if self.config.obs_mode != "extended":
            catalogue = self._catalogue[: self.client_rows.globals]
            return np.concatenate([1.0 / ratio, np.tile(catalogue, (len(ratio), 1))],
                                  axis=1).astype(np.float32)
        prev = (records.prev_size[rows, slots] + 1) / self.num_sizes
        extras = records.extras
        return np.concatenate([1.0 / ratio, extras[rows, 0, slots], extras[rows, 1, slots], prev],
                              axis=1).astype(np.float32)

    @staticmethod
    def _predict(policy: Predictor, obs: np.ndarray) -> np.ndarray:
        action, _ = policy.predict(obs, deterministic=True)
        return np.asarray(action)

    def decide_round(self, pending: HeteroRound, action: np.ndarray) -> HeteroDecision:
        """The decision of one checked action (:meth:`decide` of one row), the residual's base added."""
        if self._residual is not None:
            action = np.clip(self._predict(self._residual, self._observe(pending)) + action, -1.0, 1.0)

        def ask(role: str, ratio: np.ndarray) -> np.ndarray:
            return self.ask(role, self._features(pending, ratio[0]))[None]

        sizes = None if pending.sizes is None else pending.sizes[None]
        rows = self.decide(np.asarray(action)[None], sizes, pending.probe_ratio[None], ask)
        return HeteroDecision(rows.sizes[0], rows.sigma[0], rows.epochs[0])

    def decide(self, actions: np.ndarray, sizes: np.ndarray | None, probe_ratio: np.ndarray,
               ask: Callable[[str, np.ndarray], np.ndarray]) -> HeteroDecision:
        """Rows of decisions from ``(N, ...)`` checked actions.

        The sizes are the action's, or the injected ``sizes``; the split is the action's, or the
        injected intensity policy's on the rows' cost ratios, ``ask("intensity", ratios)``.
        """
        decoded, sigma = self.hetero.decode(actions)
        sizes = sizes if decoded is None else decoded
        if sigma is None:
            sigma = split_of(ask("intensity", self.time_ratio[sizes] * probe_ratio))
        tau = (sigma * self.total_epochs if self.config.fractional_epochs
               else integerize(sigma, self.total_epochs))
        return HeteroDecision(sizes, sigma, tau)

    def _play(self, pending: HeteroRound, action: np.ndarray) -> tuple[RoundReport, HeteroOutcome]:
        decision = self.decide_round(pending, action)
        n, slots = self.federation.num_clients, pending.slots
        model, epochs = np.zeros(n, np.int64), np.zeros(n)
        model[slots], epochs[slots] = decision.sizes, decision.epochs
        selected = pending.opened.candidates
        plan = RoundPlan(selected.copy(), model, epochs, self._lr, selected.copy())
        report = self.federation.finish_round(self.federation.train_round(pending.opened, plan))
        # the slowdown the server measures (history): per-epoch time over the forecast, the drift
        slowdown = pending.opened.load.drift[slots][None] if self.config.obs_mode == "history" else None
        rounds = np.array([[self.federation.round]], np.float64)
        self.records.played(slots[None], decision.sizes[None], slowdown, rounds)
        return report, HeteroOutcome(pending, decision)

    # ---- reward, termination, info -------------------------------------------------------------

    def _reward_terms(self, report: RoundReport, outcome: HeteroOutcome) -> dict[str, float]:
        sel = outcome.played.slots
        terms = self.timing_terms(report.train_time[sel][None], report.epochs[sel][None],
                                  np.array([report.round_time]), np.array([self.t_scale]))
        return {name: value.item() for name, value in terms.items()}

    def timing_terms(self, train: np.ndarray, epochs: np.ndarray, round_time: np.ndarray, t_scale: np.ndarray
                     ) -> dict[str, np.ndarray]:
        """HAPFL's reward terms of rows of played rounds.

        ``train`` and ``epochs`` are ``(N, k)``, ``round_time`` and ``t_scale`` (``T_scale``) ``(N,)``.
        """
        per_epoch = train / epochs
        return {"r1": self.config.max_ratio - per_epoch.max(axis=1) / per_epoch.min(axis=1),
                "r2": (train.min(axis=1) - train.max(axis=1)) / t_scale,
                "neg_round_time": -round_time / t_scale}

    def _reward_weights(self) -> dict[str, float]:
        if self.reward_mode != "joint":
            return {self.reward_mode: 1.0}
        w1, w2 = self.config.reward_weights
        return {"r1": w1 / self.config.max_ratio, "r2": w2}

    def _accuracy(self, report: RoundReport) -> float:
        """The global large model's test accuracy (every algorithm has it).

        NaN between evaluations and while no client has trained it.
        """
        return float(report.global_accuracy[-1]) if self.records.sizes_used[0, -1] else math.nan

    def _is_terminated(self, report: RoundReport) -> bool:
        target = self.config.target_accuracy
        if target is None or self.config.backend != "torch":
            return False
        return bool(self._accuracy(report) >= target)

    def _family_info(self, report: RoundReport, outcome: HeteroOutcome, terms: Mapping[str, float]
                     ) -> dict[str, Any]:
        played, sel = outcome.played, outcome.played.slots
        rows = [x[None] for x in (report.epochs[sel], played.opened.probe_time[sel], report.train_time[sel],
                                  report.compute_time[sel], played.probe_ratio,
                                  self.federation.label_entropy[sel])]
        d = outcome.decision
        decision = HeteroDecision(d.sizes[None], d.sigma[None], d.epochs[None])
        columns = self.timing_info(decision, *rows, np.array([terms["r1"]]))
        info = {key: column.tolist()[0] if column.ndim == 1 else column[0] for key, column in columns.items()}
        if self.config.backend == "torch":
            info.update(self._learning_info(report, sel))
        return info

    def timing_info(self, decision: HeteroDecision, epochs: np.ndarray, probe: np.ndarray, train: np.ndarray,
                    compute: np.ndarray, probe_ratio: np.ndarray, entropy: np.ndarray, r1: np.ndarray
                    ) -> dict[str, np.ndarray]:
        """The timing ``info`` of rows of played rounds: ``(N, ...)`` per key (``(N,)``: a number per copy).

        ``decision`` and the times, ratios and label entropies are rows over the rounds' clients;
        ``r1`` is ``(N,)``, the rounds' ``R^1``.
        """
        per_epoch = train / epochs
        fastest, slowest = train.min(axis=1), train.max(axis=1)
        return {
            "hetero/sizes": decision.sizes.copy(), "hetero/epoch_share": decision.sigma,
            "hetero/epochs": epochs,
            "hetero/probe_time": probe, "hetero/train_time": train, "hetero/train_time_per_epoch": per_epoch,
            "hetero/compute_time": compute,
            "hetero/straggling_compute": compute.max(axis=1) - compute.min(axis=1),
            "hetero/straggling_local": slowest - fastest, "hetero/r1": r1,
            "hetero/r2_seconds": fastest - slowest,
            "hetero/time_ratio": np.tile(self.time_ratio, (len(train), 1)),
            "hetero/cost_ratio": self.time_ratio[decision.sizes] * probe_ratio,
            "hetero/label_entropy": entropy}

    def _learning_info(self, report: RoundReport, sel: np.ndarray) -> dict[str, Any]:
        names = self.config.size_names
        # a size nobody trained: NaN
        accuracy = np.where(self.records.sizes_used[0], report.global_accuracy, np.nan)
        info = {"hetero/global_accuracy": dict(zip(names, accuracy.tolist(), strict=True)),
                "hetero/weights": report.weights[sel], "hetero/local_accuracy": report.local_accuracy[sel],
                "hetero/mean_local_accuracy": float(np.mean(report.local_accuracy[sel])),
                "hetero/loss": report.loss[sel]}
        if self.config.algorithm == "hapfl":
            lite = report.companion
            info.update({"hetero/lite_accuracy": lite.global_accuracy,
                         "hetero/lite_weights": lite.weights[sel],
                         "hetero/lite_local_accuracy": lite.accuracy[sel],
                         "hetero/lite_loss": lite.loss[sel]})
        return info


class FLHeteroEnv(_HeteroEnv):
    """HAPFL with the joint action: model size and epoch share per sampled client.

    ## Description
    One step is one federated round of HAPFL (Chen et al.): ``k`` of ``K`` clients with
    heterogeneous compute are sampled, each times one LiteModel epoch, and the agent chooses a
    model size per client and how the round's ``k * E_loc`` epochs are split among them.

    ## Action Space
    ``Box(-1, 1, (2k,))``: ``a[:k]`` are ordinal size bins (``size = min(delta-1, floor((a+1)/2*delta))``),
    ``a[k:]`` logits of the epoch split ``sigma = softmax(3 a)``. ``encode_action(sizes, sigma)``
    builds one from semantic choices.

    ## Observation Space
    ``Box(0, 1, (k,))``: ``1 / S^1_i = min_j T^d_j / T^d_i``, each sampled client's speed relative
    to the round's fastest, slots in ascending client id (``obs_mode="extended"`` appends data
    size, label entropy and previous size, each in ``[0, 1]``: ``4k``).

    ## Rewards
    ``reward_mode="joint"``: ``w1 R^1 / MD + w2 R^2 / T_scale`` with ``R^1 = MD - max/min`` of
    per-epoch training time and ``R^2 = min - max`` of training time; ``"r1"``, ``"r2"``
    (scaled) and ``"neg_round_time"`` pick one term. Accuracy never enters the reward.

    ## Episode End
    Truncated after ``rounds_per_episode`` rounds; terminated only with the torch backend and
    ``target_accuracy``.

    ## Arguments
    See :class:`~fl_gym.envs.hetero.config.HeteroConfig` and the shared
    :class:`~fl_gym.envs.scenario.ScenarioConfig` (keyword arguments), plus ``scenario_seed``
    and, for the one-lever views, ``allocation_policy`` / ``intensity_policy``.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLHetero-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space.shape
    ((6,), (12,))
    """

    view = "joint"


class FLHeteroAllocEnv(_HeteroEnv):
    """HAPFL's PPO1 view: the agent picks a model size per sampled client.

    Action ``MultiDiscrete([delta] * k)``; observation ``1 / S^1`` as in :class:`FLHeteroEnv`;
    reward ``R^1 = MD - max_i(T^l_i/tau_i) / min_i(T^l_i/tau_i)`` (per-epoch, so independent of
    the epoch split, which ``intensity_policy`` decides: ``"uniform"`` by default, ``"inverse"``,
    or any predictor on ``FLHeteroIntensity-v0``'s spaces).
    """

    view = "alloc"

    def action_masks(self) -> np.ndarray:
        """Allowed sizes per slot, flattened, for sb3-contrib's ``MaskablePPO``.

        Every size fits every client: the catalogue's models all meet HAPFL's minimum-capacity
        constraint (14).
        """
        return np.ones(self.k * self.num_sizes, dtype=bool)


class FLHeteroIntensityEnv(_HeteroEnv):
    """HAPFL's PPO2 view: the agent splits the round's epochs; sizes come from ``allocation_policy``.

    Action ``Box(-1, 1, (k,))`` (``sigma = softmax(3 a)``); observation ``1 / S^2_i`` with
    ``S^2_i = M(size_i) * S^1_i``; reward ``R^2 / T_scale`` with ``R^2 = min_i T^l_i - max_i T^l_i``.
    ``allocation_policy``: ``"greedy"`` (default), ``"large"``, ``"small"``, ``"oracle"``,
    ``"random"``, or any predictor on ``FLHeteroAlloc-v0``'s spaces (a frozen PPO1).
    """

    view = "intensity"

    def _prepare(self) -> HeteroRound:
        """The round opened, with the sizes ``allocation_policy`` gives it (the agent sees and splits it)."""
        pending = super()._prepare()
        sizes = self.ask("alloc", self._features(pending, pending.probe_ratio))
        return replace(pending, sizes=sizes)
