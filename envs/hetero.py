"""HAPFL as three Gymnasium views of one simulator (spec ``hapfl.md`` section 9).

Each round, ``k`` of ``K`` clients are sampled and time one LiteModel epoch (the assessment
``T^d``). The server sees the ratios ``S^1 = T^d / min T^d``, picks a model size per client
(PPO1) and splits the round's epoch budget over them (PPO2); the clients train (their local
model and the LiteModel by mutual distillation, in the torch backend), and both rewards are
timing-only. The envs differ in what the agent controls:

* ``FLHetero-v0`` (:class:`FLHeteroEnv`): both, as one ``Box(-1, 1, (2k,))`` action;
* ``FLHeteroAlloc-v0`` (:class:`FLHeteroAllocEnv`): the sizes, ``MultiDiscrete([delta]*k)``; the
  split comes from an injected ``intensity_policy`` (default: uniform);
* ``FLHeteroIntensity-v0`` (:class:`FLHeteroIntensityEnv`): the split, ``Box(-1, 1, (k,))``,
  observing ``S^2 = M(size) * S^1``; sizes come from an injected ``allocation_policy`` (default:
  :class:`~fl_gym.baselines.hetero.GreedyBySpeedPolicy`; the dual-agent recipe injects a frozen
  PPO1).

See ``docs/envs/flhetero.md`` for the tables of spaces, rewards, info keys and arguments.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from fl_gym.clock import RoundLoad
from fl_gym.envs.base import FLEnv
from fl_gym.envs.hetero_actions import HeteroSpec, integerize
from fl_gym.envs.hetero_config import HeteroConfig
from fl_gym.federation import Federation
from fl_gym.records import RoundPlan, RoundReport


class Predictor(Protocol):
    """Anything with SB3's ``predict`` (a PPO model or a fixed policy)."""

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Return ``(action, state)``."""


class _HeteroEnv(FLEnv):
    """Shared simulator, sampling, assessment, decoding, rewards and info of the three views."""

    view = "joint"
    config_class = HeteroConfig

    def __init__(self, config: HeteroConfig | None = None, *, scenario_seed: int = 0,
                 allocation_policy: Predictor | str | None = None, intensity_policy: Predictor | str | None = None,
                 **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - {f.name for f in dataclasses.fields(HeteroConfig)})
        if unknown:
            raise ValueError(f"{type(self).__name__}: argument {unknown[0]!r} is not accepted; allowed: "
                             f"{', '.join(f.name for f in dataclasses.fields(HeteroConfig))}, scenario_seed, "
                             "allocation_policy, intensity_policy")
        cfg = config.replace(**kwargs) if config is not None else HeteroConfig(**kwargs)
        self.cfg = cfg
        super().__init__(Federation(cfg.federation_config(), scenario_seed), cfg.rounds_per_episode)
        fed = self.federation
        self.k, self.num_sizes, self.total_epochs = cfg.clients_per_round, cfg.num_sizes, cfg.total_epochs
        self.time_ratio = cfg.time_ratio
        self.hetero = HeteroSpec(self.view, self.k, self.num_sizes, self.time_ratio)
        self._intensity_view = self.hetero.with_view("intensity")
        self.lite_cost = cfg.model_costs["lite"]
        lite_epoch = fed.clock.epoch_time(fed.sizes, self.lite_cost, RoundLoad.still(fed.num_clients))
        self.t_scale = cfg.local_epochs * self.time_ratio[-1] * float(np.median(lite_epoch))
        self._extras = np.stack([fed.sizes / fed.sizes.max(), fed.label_entropy / math.log2(fed.num_classes)])
        self.observation_space = self._obs_space()
        self.action_space = self._action_space()
        self._allocation = self._inner("alloc", allocation_policy or "greedy")
        self._intensity = self._inner("intensity", intensity_policy or "uniform")
        self._prev_size = np.full(cfg.num_clients, -1)
        self._lr = np.full(cfg.num_clients, cfg.lr)
        self._selected = np.arange(self.k)

    # ---- spaces and actions ------------------------------------------------------------------

    def _obs_space(self) -> spaces.Box:
        width = self.k if self.cfg.obs_mode == "paper" else 4 * self.k
        low = np.concatenate([np.ones(self.k), np.zeros(width - self.k)]).astype(np.float32)
        return spaces.Box(low, np.full(width, np.inf, np.float32), dtype=np.float32)

    def _action_space(self) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (2 * self.k,), np.float32)

    def encode_action(self, sizes: np.ndarray | None = None, sigma: np.ndarray | None = None) -> np.ndarray:
        """The action of this env that gives ``sizes`` (``(k,)`` indices) and/or ``sigma`` (simplex)."""
        return self.hetero.encode(sizes, sigma)

    def decode_action(self, action: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(sizes, sigma)`` that ``action`` sets (None for the half this env's agent does not control)."""
        return self.hetero.decode(action)

    def _inner(self, view: str, policy: Predictor | str) -> Predictor:
        if not isinstance(policy, str):
            return policy
        from fl_gym.baselines.hetero import named_policy

        return named_policy(policy, self.hetero.with_view(view))

    # ---- the round ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode (see :class:`~fl_gym.envs.base.FLEnv`); no client has a previous size yet."""
        self._prev_size[:] = -1
        return super().reset(seed=seed, options=options)

    def _observe(self) -> np.ndarray:
        """Sample the next round's clients, draw their load, time the LiteModel epoch."""
        fed = self.federation
        self._selected = np.sort(self.np_random.permutation(fed.num_clients)[: self.k])
        self._load = fed.draw_load()
        t_d = fed.clock.epoch_time(fed.sizes, self.lite_cost, self._load)[self._selected]
        self._t_d = t_d
        self._s1 = t_d / t_d.min()
        self._sizes = None
        if self.view == "intensity":
            self._sizes = self._predict(self._allocation, self._features(self._s1))
            return self._features(self.time_ratio[self._sizes] * self._s1)
        return self._features(self._s1)

    def _features(self, base: np.ndarray) -> np.ndarray:
        if self.cfg.obs_mode == "paper":
            return base.astype(np.float32)
        sel = self._selected
        prev = (self._prev_size[sel] + 1) / self.num_sizes
        return np.concatenate([base, self._extras[0, sel], self._extras[1, sel], prev]).astype(np.float32)

    @staticmethod
    def _predict(policy: Predictor, obs: np.ndarray) -> np.ndarray:
        action, _ = policy.predict(obs, deterministic=True)
        return np.asarray(action)

    def _decode(self, action: np.ndarray) -> RoundPlan:
        self._check_action(action)
        sizes, sigma = self.hetero.decode(action)
        sizes = self._sizes if sizes is None else sizes
        if sigma is None:
            s2 = self.time_ratio[sizes] * self._s1
            sigma = self._intensity_view.decode(self._predict(self._intensity, self._features(s2)))[1]
        tau = sigma * self.total_epochs if self.cfg.fractional_epochs else integerize(sigma, self.total_epochs)
        self._decision = (sizes, sigma, tau)
        n = self.federation.num_clients
        selected = np.zeros(n, bool)
        selected[self._selected] = True
        model, epochs = np.zeros(n, np.int64), np.zeros(n)
        model[self._selected], epochs[self._selected] = sizes, tau
        return RoundPlan(selected, model, epochs, self._lr, selected.copy())

    def _check_action(self, action: np.ndarray) -> None:
        a = np.asarray(action)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action has shape {a.shape}; allowed: {self.action_space}")
        if isinstance(self.action_space, spaces.MultiDiscrete):
            if np.any((a < 0) | (a >= self.num_sizes)) or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"action={a.tolist()} is out of range; allowed: integers in 0..{self.num_sizes - 1}")
        elif not np.all(np.isfinite(a)):
            raise ValueError(f"action={a.tolist()} is out of range; allowed: finite floats in [-1, 1]")

    def _run(self, plan: RoundPlan) -> RoundReport:
        report = self.federation.run_round(plan, self._load)
        self._prev_size[self._selected] = self._decision[0]
        return report

    # ---- reward, termination, info -------------------------------------------------------------

    def _reward_terms(self, report: RoundReport) -> dict[str, float]:
        sel = self._selected
        t_l = report.train_time[sel]
        per_epoch = t_l / report.epochs[sel]
        return {"r1": float(self.cfg.max_ratio - per_epoch.max() / per_epoch.min()),
                "r2": float(t_l.min() - t_l.max()) / self.t_scale,
                "neg_round_time": -report.round_time / self.t_scale}

    def _reward(self, terms: dict[str, float]) -> float:
        mode = self.cfg.reward_mode
        if mode != "joint":
            return terms[mode]
        w1, w2 = self.cfg.reward_weights
        return w1 * terms["r1"] / self.cfg.max_ratio + w2 * terms["r2"]

    def _accuracy(self, report: RoundReport) -> float:
        """The global LiteModel's test accuracy (baselines: the best global model's; NaN if none evaluated)."""
        if self.cfg.algorithm == "hapfl":
            return report.companion_global_accuracy
        acc = report.global_accuracy
        return np.nan if np.isnan(acc).all() else float(np.nanmax(acc))

    def _is_terminated(self, report: RoundReport) -> bool:
        target = self.cfg.target_accuracy
        if target is None or self.cfg.backend != "torch":
            return False
        return bool(self._accuracy(report) >= target)

    def _info(self, plan: RoundPlan, report: RoundReport, terms: dict[str, float]) -> dict[str, Any]:
        info = super()._info(plan, report, terms)
        sel = self._selected
        sizes, sigma, tau = self._decision
        t_c, t_l = report.compute_time[sel], report.train_time[sel]
        info.update(
            selected=sel.copy(), sizes=sizes.copy(), sigma=sigma, epochs=report.epochs[sel], T_d=self._t_d,
            T_l=t_l, T_l_per_epoch=t_l / report.epochs[sel], T_c=t_c, T_round=report.round_time,
            straggling_latency=float(t_c.max() - t_c.min()), straggling_local=float(t_l.max() - t_l.min()),
            cum_time=report.clock, r1=terms["r1"], r2_raw=terms["r2"] * self.t_scale, M=self.time_ratio.copy(),
            s2=self.time_ratio[sizes] * self._s1, entropy=self.federation.label_entropy[sel])
        if self.cfg.backend == "torch":
            names = self.cfg.size_names
            info.update(
                accuracy=self._accuracy(report),
                agg_weights_local={n: report.weights[sel][sizes == i] for i, n in enumerate(names)},
                acc_local=report.local_accuracy[sel], loss_local=report.loss[sel],
                global_acc_by_size=dict(zip(names, report.global_accuracy.tolist(), strict=True)))
            if self.cfg.algorithm == "hapfl":
                info.update(agg_weights_lite=report.companion_weights[sel], acc_lite=report.companion_accuracy[sel],
                            global_acc_lite=report.companion_global_accuracy, loss_lite=report.companion_loss[sel])
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
    ``Box(1, inf, (k,))``: ``S^1_i = T^d_i / min_j T^d_j``, slots in ascending client id
    (``obs_mode="extended"`` appends data size, label entropy and previous size: ``4k``).

    ## Rewards
    ``reward_mode="joint"``: ``w1 R^1 / MD + w2 R^2 / T_scale`` with ``R^1 = MD - max/min`` of
    per-epoch training time and ``R^2 = min - max`` of training time; ``"r1"``, ``"r2"``
    (scaled) and ``"neg_round_time"`` pick one term. Accuracy never enters the reward.

    ## Episode End
    Truncated after ``rounds_per_episode`` rounds; terminated only with the torch backend and
    ``target_accuracy``.

    ## Arguments
    See :class:`~fl_gym.envs.hetero_config.HeteroConfig` (keyword arguments), plus
    ``scenario_seed`` and, for the one-lever views, ``allocation_policy`` / ``intensity_policy``.

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

    Action ``MultiDiscrete([delta] * k)``; observation ``S^1`` as in :class:`FLHeteroEnv`; reward
    ``R^1 = MD - max_i(T^l_i/tau_i) / min_i(T^l_i/tau_i)`` (per-epoch, so independent of the
    epoch split, which ``intensity_policy`` decides: ``"uniform"`` by default, ``"inverse"``, or
    any predictor on ``FLHeteroIntensity-v0``'s spaces).
    """

    view = "alloc"

    def _action_space(self) -> spaces.Space:
        return spaces.MultiDiscrete([self.num_sizes] * self.k)

    def action_masks(self) -> np.ndarray:
        """Allowed sizes per slot, flattened, for sb3-contrib's ``MaskablePPO``.

        Every size fits every client: the catalogue's models all meet HAPFL's minimum-capacity
        constraint (14).
        """
        return np.ones(self.k * self.num_sizes, dtype=bool)

    def _reward(self, terms: dict[str, float]) -> float:
        return terms["r1"]


class FLHeteroIntensityEnv(_HeteroEnv):
    """HAPFL's PPO2 view: the agent splits the round's epochs; sizes come from ``allocation_policy``.

    Action ``Box(-1, 1, (k,))`` (``sigma = softmax(3 a)``); observation
    ``S^2_i = M(size_i) * S^1_i``; reward ``R^2 / T_scale`` with ``R^2 = min_i T^l_i - max_i T^l_i``.
    ``allocation_policy``: ``"greedy"`` (default), ``"large"``, ``"small"``, ``"oracle"``,
    ``"random"``, or any predictor on ``FLHeteroAlloc-v0``'s spaces (a frozen PPO1).
    """

    view = "intensity"

    def _action_space(self) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (self.k,), np.float32)

    def _reward(self, terms: dict[str, float]) -> float:
        return terms["r2"]
