"""FedEnt's decision as a Gymnasium env: the learning rate of every sampled client, before it trains.

Each round ``m`` clients are sampled (the whole episode's schedule is drawn at ``reset``, as
FedEnt's Algorithm 1 needs it); each computes one probe minibatch gradient at the global model
(its own random stream, so training batches never move); the agent sets their rates; they train
and the server aggregates. See ``docs/envs/fllearningrate.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from fl_gym.envs.base import ClientRows
from fl_gym.envs.learning import Scored, TargetReward, TargetRewardEnv
from fl_gym.envs.rates.config import RateConfig
from fl_gym.records import OpenedRound, RoundPlan, RoundReport
from fl_gym.validation import as_array, is_int_at_least, require

ROW = ("share", "size", "label_entropy", "last_rate", "participation", "probe_loss", "cosine", "grad_norm")
GLOBAL = ("progress", "val_accuracy", "probe_loss", "val_gain", "model_norm", "share_entropy", "mean_rate")
BOUND = 10.0


def rate_of(u: np.ndarray, lr_min: float, lr_max: float) -> np.ndarray:
    """The rate of action ``u`` in ``[-1, 1]``, log-uniform between ``lr_min`` and ``lr_max`` (ours)."""
    lo, hi = math.log(lr_min), math.log(lr_max)
    return np.exp(lo + (np.clip(np.asarray(u, np.float64), -1, 1) + 1) / 2 * (hi - lo))


def unit_of(lr: np.ndarray, lr_min: float, lr_max: float) -> np.ndarray:
    """The action of rate ``lr`` (inverse of :func:`rate_of`, clipped to ``[-1, 1]``; a rate of 0 is -1).

    A negative rate is no rate: its action is NaN, which the env refuses by name.
    """
    lo, hi = math.log(lr_min), math.log(lr_max)
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf, clipped to -1; log(-1) = NaN
        log = np.log(np.asarray(lr, np.float64))
    return np.clip(2 * (log - lo) / (hi - lo) - 1, -1, 1)


@dataclass(frozen=True)
class RoundStats:
    """The exact statistics of the pending round's clients (what FedEnt reads), in slot order.

    Attributes:
        round: the round about to be played (1-based).
        clients: ``(m,)`` client ids, ascending.
        theta: ``(m,)`` data shares within the round.
        s: ``||w(t)||^2`` of the global model.
        a: ``(m,)`` ``w(t)^T g_i``.
        b: ``(m,)`` ``||g_i||^2``.
        last_lr: ``(m,)`` each client's last rate (``lr`` before its first round).
        probe_loss: ``(m,)`` the probe batch's loss at ``w(t)``.
        grad: ``(m, P)`` the probe gradients (for Algorithm 1's ``phi1(t)^T g_i``).
    """

    round: int
    clients: np.ndarray
    theta: np.ndarray
    s: float
    a: np.ndarray
    b: np.ndarray
    last_lr: np.ndarray
    probe_loss: np.ndarray
    grad: torch.Tensor


@dataclass(frozen=True)
class Pending:
    """A round opened and probed, waiting for its rates."""

    opened: OpenedRound
    stats: RoundStats


@dataclass(frozen=True)
class Rated(Scored):
    """A played round: its reward terms, its clients' rates, and how even their shares came out.

    The clients and rates, not the round's ``(m, P)`` probe gradients, which would otherwise stay
    alive until the next step.
    """

    clients: np.ndarray
    lrs: np.ndarray
    share_entropy: float


class FLLearningRateEnv(TargetRewardEnv):
    """FedEnt (Zheng et al., TMC 2024): per-client learning rates set before local training.

    ## Description
    One step is one round: the agent sets the rate of each of the ``m`` sampled clients (slots in
    ascending client id), they train ``local_epochs`` epochs of SGD at those rates, and the server
    aggregates (FedAvg, or the configured variant).

    ## Action Space
    ``Box(-1, 1, (m,))`` (``action_mode="per_client"``) or ``Box(-1, 1, (1,))`` (``"shared"``):
    rates log-uniform in ``[lr_min, lr_max]`` (:func:`rate_of`). FedAvg is ``unit_of(lr)``.

    ## Observation Space
    ``Box(-10, 10, (8m + 7,))``: per slot (:data:`ROW`) ``m theta_i``, ``D_i / mean D``, label
    entropy / log2 C, ``unit_of(last rate)``, participations / (T m / N), probe loss / ln C,
    ``cos(w, g_i)``, ``log10 ||g_i|| / 4`` (clipped to [-1, 1]); then (:data:`GLOBAL`) round / T,
    validation accuracy, mean probe loss / ln C, last validation gain, ``log10 ||w||^2 / 4``,
    normalised entropy of last round's shares ``theta_j ||w_j||^2`` (1 before the first round),
    mean ``unit_of`` of last round's rates. :attr:`round_stats` holds the exact values.

    ## Rewards
    ``reward``: validation accuracy gain (default), ``rounds`` or ``favor``
    (:mod:`fl_gym.envs.learning`).

    ## Episode End
    Terminated at the target accuracy with ``stop_at_target``; truncated after
    ``rounds_per_episode`` rounds.

    ## Arguments
    :class:`~fl_gym.envs.rates.config.RateConfig` and the shared scenario.

    ## Example
    >>> import gymnasium as gym, fl_gym
    >>> env = gym.make("FLLearningRate-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space.shape
    ((47,), (5,))
    """

    family = "rates"
    any_client_count = True  # rows and rates cover the round's m sampled clients, not all K
    config_class = RateConfig
    config: RateConfig

    def _setup(self) -> None:
        cfg, fed = self.config, self.federation
        m = cfg.clients_per_round
        self.client_rows = ClientRows(len(ROW), len(GLOBAL),
                                      per_client_action=cfg.action_mode == "per_client")
        self.observation_space = spaces.Box(-BOUND, BOUND, (len(ROW) * m + len(GLOBAL),), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (m if cfg.action_mode == "per_client" else 1,), np.float32)
        self._log_c = math.log(fed.num_classes)
        # participations per client per episode
        self._expected = self.rounds_per_episode * m / fed.num_clients

    def _reset_state(self) -> None:
        cfg, fed = self.config, self.federation
        n, m = fed.num_clients, cfg.clients_per_round
        self.schedule = [np.sort(self.np_random.permutation(n)[:m]) for _ in range(self.rounds_per_episode)]
        self._gradient_key = int(self.np_random.integers(2**62))
        self.last_lr = np.full(n, cfg.scenario.lr)
        self.participations = np.zeros(n, np.int64)
        self._target = TargetReward(fed, cfg)
        self._last_gain, self._share_entropy = 0.0, 1.0
        self._mean_unit = float(unit_of(cfg.scenario.lr, cfg.lr_min, cfg.lr_max))

    def _prepare(self) -> Pending:
        """Open the scheduled round and probe its clients at the global model."""
        fed = self.federation
        # past the end: a round never played
        clients = self.schedule[min(self._round, len(self.schedule) - 1)]
        mask = np.zeros(fed.num_clients, bool)
        mask[clients] = True
        opened = fed.open_round(mask)
        probe = fed.probe(clients)
        w = fed.global_models[0]
        grad = probe.grad
        sizes = fed.sizes[clients].astype(np.float64)
        stats = RoundStats(round=opened.round, clients=clients, theta=sizes / sizes.sum(), s=float(w @ w),
                           a=(grad @ w).double().cpu().numpy(), b=(grad * grad).sum(1).double().cpu().numpy(),
                           last_lr=self.last_lr[clients].copy(), probe_loss=probe.loss.double().cpu().numpy(),
                           grad=grad)
        return Pending(opened, stats)

    def client_gradients(self, clients: np.ndarray, w: torch.Tensor, t: int) -> torch.Tensor:
        """``(k, P)`` minibatch gradients of ``clients`` at model ``w``, batches fixed per (episode, ``t``).

        The hook of FedEnt's Algorithm 1 (it re-evaluates round ``t`` at every sweep).
        """
        fed, params = self.federation, self.federation.archs[0].num_params
        require(isinstance(w, torch.Tensor) and tuple(w.shape) == (params,), "w", getattr(w, "shape", w),
                f"a tensor of the model's {params} parameters")
        require(is_int_at_least(t, 0), "t", t, "a round index >= 0")
        ids = as_array("clients", clients, "a 1-D array of integer client ids")  # which the probe checks
        key = np.random.SeedSequence([self._gradient_key, t]).generate_state(1)[0]
        gen = torch.Generator(device=fed.device).manual_seed(int(key))
        model = w.to(device=fed.device, dtype=fed.global_models[0].dtype)
        return fed.probe(ids, model.expand(ids.size, -1), gen).grad

    @property
    def round_stats(self) -> RoundStats:
        """The pending round's exact statistics (what FedEnt's closed form reads)."""
        return self._pending.stats

    def _observe(self, pending: Pending) -> np.ndarray:
        return self.observe_copies([self])[0]

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's row of :meth:`observe_copies`' arrays."""
        fed, st = self.federation, self._pending.stats
        return (st.theta, fed.sizes[st.clients] / fed.sizes.mean(), fed.label_entropy[st.clients],
                st.last_lr, self.participations[st.clients] / self._expected, st.probe_loss, st.a, st.b, st.s,
                self._round / self.rounds_per_episode, self._target.validation.observed, self._last_gain,
                self._share_entropy, self._mean_unit)

    @classmethod
    def observe_copies(cls, envs: Sequence[FLLearningRateEnv]) -> np.ndarray:
        """Every copy's observation, the rule written over ``(copies, m)`` arrays (one env: one row)."""
        first = envs[0]
        cfg, log_c, log2_c = first.config, first._log_c, math.log2(first.federation.num_classes)
        theta, size, entropy, last_lr, participation, loss, a, b, s, progress, val, gain, shares, unit = (
            cls.observed_columns(envs))
        g_norm = np.sqrt(b)
        rows = np.stack([
            theta.shape[1] * theta, size, entropy / log2_c, unit_of(last_lr, cfg.lr_min, cfg.lr_max),
            participation, loss / log_c, a / np.maximum(np.sqrt(s)[:, None] * g_norm, 1e-12),
            np.clip(np.log10(np.maximum(g_norm, 1e-12)) / 4, -1, 1)], axis=-1)
        glob = np.stack([progress, val, loss.mean(axis=1) / log_c, gain, np.log10(np.maximum(s, 1e-12)) / 4,
                         shares, unit], axis=1)
        observations = np.concatenate([rows.reshape(len(envs), -1), glob], axis=1)
        return np.clip(observations, -BOUND, BOUND).astype(np.float32)

    def rates(self, action: np.ndarray) -> np.ndarray:
        """``(m,)`` rates of the pending round's slots under ``action``."""
        cfg = self.config
        lr = rate_of(action, cfg.lr_min, cfg.lr_max)
        return np.full(cfg.clients_per_round, lr)

    def _play(self, pending: Pending, action: np.ndarray) -> tuple[RoundReport, Rated]:
        cfg, fed, st = self.config, self.federation, pending.stats
        lr = np.ones(fed.num_clients)
        lr[st.clients] = self.rates(action)
        plan = RoundPlan.make(fed.num_clients, lr=lr, selected=pending.opened.candidates,
                              epochs=cfg.local_epochs)
        trained = fed.train_round(pending.opened, plan)
        report = fed.finish_round(trained)
        self.last_lr[st.clients] = lr[st.clients]
        self.participations[st.clients] += 1
        outcome = Rated(self._target.update(report), st.clients, lr[st.clients],
                        _share_entropy(st.theta, trained.stats.model_norm[st.clients]))
        # observed next
        self._last_gain, self._share_entropy = outcome.terms["acc_gain"], outcome.share_entropy
        self._mean_unit = float(unit_of(outcome.lrs, cfg.lr_min, cfg.lr_max).mean())
        return report, outcome

    def _family_info(self, report: RoundReport, outcome: Rated, terms: Mapping[str, float]) -> dict[str, Any]:
        return {"rates/clients": outcome.clients, "rates/lrs": outcome.lrs,
                "rates/val_accuracy": report.val_accuracy,
                "rates/share_entropy": outcome.share_entropy,
                "rates/rounds_to_target": self._target.rounds_to_target}


def _share_entropy(theta: np.ndarray, norms: np.ndarray) -> float:
    """``-sum p ln p / ln m`` of the shares ``p_j ~ theta_j ||w_j||^2`` (1 for one client)."""
    p = theta * norms ** 2
    p = p / p.sum()
    if len(p) < 2:
        return 1.0
    return float(-(p * np.log(np.maximum(p, 1e-300))).sum() / math.log(len(p)))
