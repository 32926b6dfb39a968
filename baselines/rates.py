"""Fixed policies for ``FLLearningRate-v0`` (FedEnt: Zheng et al., IEEE TMC 2024, and its baselines).

| policy | rate of client ``i`` this round |
|---|---|
| :class:`ConstantLRPolicy` | ``eta0``, or cosine-annealed (FedAvg, FedProx, FedDyn, FedAvgM, FedAdam) |
| :class:`FedEntPolicy` | ``gamma last_i + (1 - gamma) eta_raw_i``, ``eta_raw`` FedEnt's closed form |
| :class:`DecayOnlyPolicy` | ``gamma last_i`` (FedEnt with ``eta_raw = 0``: its adaptive part ablated) |

FedEnt reads the env's exact statistics (:attr:`~fl_gym.envs.rates.FLLearningRateEnv.round_stats`);
the observation carries the same information, normalised (:func:`stats_from_observation`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from gymnasium import Env

from fl_gym.baselines.base import RowPolicy, env_of
from fl_gym.baselines.fedent import FedEntSettings, MeanField, joint_solve, mean_field_offline, solve_eta
from fl_gym.envs.rates.env import GLOBAL, ROW, FLLearningRateEnv, RoundStats, unit_of
from fl_gym.envs.registry import PolicyEntry
from fl_gym.validation import is_int_at_least, is_non_negative, is_positive, require, require_fraction


class RatePolicy(RowPolicy):
    """Base: rates from the env's pending round (:meth:`rates`), as actions of the env's mode."""

    reads_env = True

    def __init__(self, env: Env) -> None:
        self.env = env_of(env, FLLearningRateEnv, self)
        super().__init__(env.observation_space)
        self.cfg = self.env.config

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action of :meth:`rates` (FedEnt's Eq. 37 share-weighted mean in ``shared`` mode)."""
        st = self.env.round_stats
        lr = self.rates(st)
        if self.cfg.action_mode == "shared":
            lr = np.array([float(st.theta @ lr)])
        return unit_of(lr, self.cfg.lr_min, self.cfg.lr_max).astype(np.float32)

    def rates(self, st: RoundStats) -> np.ndarray:
        """``(m,)`` rates of the pending round's clients."""
        raise NotImplementedError


SCHEDULES = ("constant", "cosine", "step")


class ConstantLRPolicy(RatePolicy):
    """FedAvg's rate ``lr`` for every client (default: the scenario's ``lr``, i.e. ``eta0``), on a schedule.

    ``schedule="constant"`` keeps it; ``"cosine"`` anneals it over the episode's rounds,
    ``lr (1 + cos(pi t / T)) / 2`` in round ``t = 0 .. T-1`` (Loshchilov and Hutter, ICLR 2017,
    without restarts), the schedule a practitioner tries first; ``"step"`` multiplies it by
    ``gamma`` every ``step_size`` rounds, ``lr gamma^floor(t / step_size)`` (step decay, as
    torch's ``StepLR``). A schedule's rate never falls below the env's ``lr_min``.
    """

    def __init__(self, env: Env, lr: float | None = None, schedule: str = "constant",
                 gamma: float | None = None, step_size: int | None = None) -> None:
        super().__init__(env)
        self.lr = self.cfg.scenario.lr if lr is None else lr
        lo, hi = self.cfg.lr_min, self.cfg.lr_max  # the env's rates: outside, it would play the bound
        require(is_positive(self.lr) and lo <= self.lr <= hi, "lr", self.lr,
                f"a float in [lr_min, lr_max] = [{lo:g}, {hi:g}] (the env's rates)")
        require(schedule in SCHEDULES, "schedule", schedule, ", ".join(SCHEDULES))
        if schedule == "step":
            gamma, step_size = 0.5 if gamma is None else gamma, 5 if step_size is None else step_size
            require_fraction("gamma", gamma)
            require(is_int_at_least(step_size, 1), "step_size", step_size, "an integer >= 1")
        else:
            require(gamma is None and step_size is None, "gamma, step_size", (gamma, step_size),
                    "None unless schedule='step'")
        self.schedule, self.gamma, self.step_size = schedule, gamma, step_size

    def rate(self) -> float:
        """This round's rate of the schedule."""
        if self.schedule == "constant":
            return self.lr
        t, horizon = self.env.rounds_played, self.env.rounds_per_episode
        if self.schedule == "step":
            factor = self.gamma ** (t // self.step_size)
        else:
            factor = (1.0 + math.cos(math.pi * t / horizon)) / 2.0
        return max(self.cfg.lr_min, self.lr * factor)

    def rates(self, st):
        return np.full(len(st.clients), self.rate())


class DecayOnlyPolicy(RatePolicy):
    """``gamma * last rate``: FedEnt's smoothing with ``eta_raw = 0`` (our ablation of its adaptive part)."""

    def __init__(self, env: Env, gamma: float = 0.99) -> None:
        super().__init__(env)
        require(is_non_negative(gamma) and gamma <= 1, "gamma", gamma, "a float in [0, 1]")
        self.gamma = gamma

    def rates(self, st):
        return self.gamma * st.last_lr


class FedEntPolicy(DecayOnlyPolicy):
    """FedEnt: ``gamma last + (1 - gamma) eta_raw`` with ``eta_raw`` from the closed form (Eq. 21).

    Args:
        env: the env (its exact statistics are read each round).
        beta: entropy weight.
        gamma: smoothing of Eq. (31).
        eta_max: clamp of the raw rate.
        mode: ``online`` (Mode B: the one-round mean-field fixed point at the real ``w(t)``,
            default) or ``offline`` (Mode A: the paper's Algorithm 1 at every reset, then
            ``phi1(t)``, ``phi2(t+1)`` from it; for small configurations).
        solver: ``foc`` (the root of Eq. 21, the paper's) or ``argmin`` (the minimiser of the
            one-round cost). The root is not always a minimiser: deep networks give roots that
            are maxima of the cost they are meant to minimise, and the policy warns when it first
            plays one (once per process under Python's default filter, however many policies;
            ``last.foc_not_min`` says which clients; ``argmin`` avoids them).
        denominator: ``sq_norm`` or ``norm`` (the printed Eq. 22).

    Attributes:
        last: the last round's :class:`~fl_gym.baselines.fedent.Solution` (online) for logging.
        mean_field: Algorithm 1's output of this episode (offline).
    """

    def __init__(self, env: Env, beta: float = 0.99, gamma: float = 0.99, eta_max: float = 1.0,
                 mode: str = "online", solver: str = "foc", denominator: str = "sq_norm") -> None:
        super().__init__(env, gamma)
        require(mode in ("online", "offline"), "mode", mode, "'online' or 'offline'")
        self.settings = FedEntSettings(beta, eta_max, denominator, solver)
        self.mode = mode
        self.last = None
        self.mean_field: MeanField | None = None
        self._episode: object = None
        self._warned = False

    def rates(self, st):
        return self.gamma * st.last_lr + (1 - self.gamma) * self.raw(st)

    def raw(self, st: RoundStats) -> np.ndarray:
        """``(m,)`` raw rates of the pending round."""
        if self.mode == "online":
            self.last = joint_solve(st.theta, st.s, st.a, st.b, self.settings)
            if self.last.foc_not_min.any() and not self._warned:
                self._warned = True
                # one text for every policy and round: Python's default filter prints it once per process
                warnings.warn("FedEnt (solver='foc'): a root of Eq. 21 is not a minimiser of the one-round "
                              "cost for some clients (policy.last.foc_not_min names them each round); "
                              "solver='argmin' plays the minimiser", RuntimeWarning, stacklevel=2)
            return self.last.eta
        if self._episode is not self.env.schedule:  # a new episode: run Algorithm 1 once
            self._episode = self.env.schedule
            self.mean_field = self._algorithm1()
        t = st.round - 1
        phi1, phi2 = self.mean_field.phi1[t], self.mean_field.phi2[t + 1]
        a = (st.grad.double() @ phi1.to(st.grad.device)).cpu().numpy()
        s = float(phi1 @ phi1)
        return np.array([solve_eta(th, s, ai, bi, phi2, self.settings)
                         for th, ai, bi in zip(st.theta, a, st.b, strict=True)])

    def _algorithm1(self) -> MeanField:
        env = self.env
        fed = env.federation
        thetas = [fed.sizes[c] / fed.sizes[c].sum() for c in env.schedule]
        return mean_field_offline(env.client_gradients, fed.global_models[0].cpu(), env.schedule, thetas,
                                  self.settings)


def stats_from_observation(observation: np.ndarray, m: int) -> dict[str, np.ndarray | float]:
    """Recover FedEnt's inputs from the observation (the agent sees the same information).

    Returns ``theta``, ``s``, ``a``, ``b`` and ``last_unit`` (the last rates as actions), exact up to
    float32 rounding while ``||g_i||`` lies in ``[1e-4, 1e4]`` and ``||w||^2 < 1e40``.
    """
    rows = np.asarray(observation, np.float64)[: m * len(ROW)].reshape(m, len(ROW))
    glob = np.asarray(observation, np.float64)[m * len(ROW):]
    s = 10 ** (4 * glob[GLOBAL.index("model_norm")])
    b = (10 ** (4 * rows[:, ROW.index("grad_norm")])) ** 2
    a = rows[:, ROW.index("cosine")] * math.sqrt(s) * np.sqrt(b)
    return {"theta": rows[:, ROW.index("share")] / m, "s": s, "a": a, "b": b,
            "last_unit": rows[:, ROW.index("last_rate")]}


class CleanRatePolicy(ConstantLRPolicy):
    """Privileged: FedAvg's rate (and schedule) for clean clients, ``lr_min`` for noisy ones.

    A server cannot see label noise: the upper reference of a benchmark task with noisy clients.
    """

    def rates(self, st):
        return np.where(self.env.federation.noisy[st.clients], self.cfg.lr_min, self.rate())


POLICIES = {
    "fedavg": PolicyEntry(ConstantLRPolicy,
                          "FedAvg: every client at the rate lr (kwargs lr in [lr_min, lr_max], "
                          "schedule=constant|cosine|step; with step, gamma=0.5 and step_size=5)"),
    "fedprox": PolicyEntry(ConstantLRPolicy, "FedProx (mu=0.01) at the constant rate",
                           {"local_algorithm": "fedprox"}),
    "feddyn": PolicyEntry(ConstantLRPolicy, "FedDyn (alpha=0.001) at the constant rate",
                          {"local_algorithm": "feddyn"}),
    "fedadam": PolicyEntry(ConstantLRPolicy, "FedAdam on the server (eta_s=0.01) at the constant rate",
                           {"server": "fedadam"}),
    "fedavgm": PolicyEntry(ConstantLRPolicy, "FedAvgM: server momentum 0.9 at the constant rate",
                           {"server": "fedavgm"}),
    "fedent": PolicyEntry(FedEntPolicy, "FedEnt, online mean-field (kwargs beta, gamma, mode=online|offline, "
                                        "solver=foc|argmin)"),
    "decay": PolicyEntry(DecayOnlyPolicy, "FedEnt's smoothing alone: gamma * last rate (kwarg gamma=0.99)"),
    "clean": PolicyEntry(CleanRatePolicy,
                         "privileged: FedAvg's rate lr (and schedule) for clean clients, lr_min for "
                         "noisy ones (reads federation.noisy): an upper reference"),
}
