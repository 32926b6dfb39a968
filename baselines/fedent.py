"""FedEnt's closed-form learning rate (Zheng et al., IEEE TMC 2024, Eqs. 15-31 and Algorithm 1).

Everything is scalar arithmetic in float64 on three numbers per client: ``s = ||w||^2``,
``a_i = w^T g_i`` and ``b_i = ||g_i||^2`` (our scalar reduction of Eq. 21), where ``w`` is the broadcast
(or mean-field) model and ``g_i`` a minibatch gradient of client ``i`` there.

* :func:`solve_eta`: one client's Eq. (21) root with ``Phi = phi2(t+1)`` held fixed, by the
  Picard iteration of Eq. 21 (or :func:`argmin_eta`, our safeguard).
* :func:`joint_solve`: the one-round fixed point of Eq. (26) over the clients (Mode B, the online
  mean-field default, ours: Algorithm 1's fixed point, Eq. 26, solved each round on the real trajectory).
* :func:`mean_field_offline`: Algorithm 1, the paper's precomputed ``phi1(t), phi2(t)`` (Mode A).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fl_gym.validation import is_positive, require, require_choice

FLOOR = 1e-12
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class FedEntSettings:
    """FedEnt's constants (the paper's Table 4 where it gives them).

    Attributes:
        beta: weight of the entropy term against the rate penalty.
        eta_max: upper clamp of the raw rate.
        denominator: ``sq_norm`` (the algebra of Eq. 21, default) or ``norm`` (the printed Eq. 22).
        solver: ``foc`` (the paper's root, default) or ``argmin`` (minimise the one-round cost).
    """

    beta: float = 0.99
    eta_max: float = 1.0
    denominator: str = "sq_norm"
    solver: str = "foc"

    def __post_init__(self) -> None:
        require(is_positive(self.beta) and self.beta < 1, "beta", self.beta, "a float in (0, 1)")
        require(is_positive(self.eta_max), "eta_max", self.eta_max, "a float > 0")
        require_choice("denominator", self.denominator, ("sq_norm", "norm"))
        require_choice("solver", self.solver, ("foc", "argmin"))


@dataclass(frozen=True)
class Solution:
    """Raw rates of one round.

    Attributes:
        eta: ``(k,)`` raw rates in ``[0, eta_max]`` (before Eq. 31's smoothing).
        phi2: the ``phi2(t+1)`` they imply.
        iterations: fixed-point iterations used (0 for a single :func:`solve_eta` per client).
        foc_not_min: ``(k,)`` the root is not a minimiser of the one-round cost (``f(eta) > f(0)``).
    """

    eta: np.ndarray
    phi2: float
    iterations: int
    foc_not_min: np.ndarray


def _share(eta: float, theta: float, s: float, a: float, b: float, phi: float) -> float:
    return max(theta * (s - 2 * eta * a + eta * eta * b) / max(phi, FLOOR), FLOOR)


def one_round_cost(eta: float, theta: float, s: float, a: float, b: float, phi: float, beta: float) -> float:
    """Eq. 21's one-round cost ``beta p ln p + (1 - beta) eta^2``, ``p = theta ||w - eta g||^2 / Phi``."""
    p = _share(eta, theta, s, a, b, phi)
    return beta * p * math.log(p) + (1 - beta) * eta * eta


def argmin_eta(theta: float, s: float, a: float, b: float, phi: float, cfg: FedEntSettings) -> float:
    """Minimise :func:`one_round_cost` on ``[0, eta_max]``: a 1001-point grid, golden-section, end points."""
    f = lambda e: one_round_cost(e, theta, s, a, b, phi, cfg.beta)  # noqa: E731
    grid = np.linspace(0.0, cfg.eta_max, 1001)
    best = int(np.argmin([f(e) for e in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, 1000)]
    for _ in range(60):
        x1, x2 = hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo)
        lo, hi = (lo, x2) if f(x1) < f(x2) else (x1, hi)
    return float(min((0.5 * (lo + hi), 0.0, cfg.eta_max), key=f))


def solve_eta(theta: float, s: float, a: float, b: float, phi: float, cfg: FedEntSettings) -> float:
    """One client's rate from Eq. (21) with ``Phi`` fixed, clamped to ``[0, eta_max]``."""
    if cfg.solver == "argmin":
        return argmin_eta(theta, s, a, b, phi, cfg)
    q = b if cfg.denominator == "sq_norm" else math.sqrt(b)
    eta = 0.0
    for _ in range(50):
        c = 1 + math.log(_share(eta, theta, s, a, b, phi))
        k = cfg.beta * theta * c / ((1 - cfg.beta) * max(phi, FLOOR))
        den = 1 + k * q
        new = k * a / den if abs(den) >= FLOOR else (cfg.eta_max if k * a > 0 else 0.0)
        new = min(max(new, 0.0), cfg.eta_max)
        if not math.isfinite(new):
            break
        if abs(new - eta) < 1e-10:
            return new
        eta = new
    return argmin_eta(theta, s, a, b, phi, cfg)  # no convergence: the robust fallback (ours)


def joint_solve(theta: Sequence[float], s: float, a: Sequence[float], b: Sequence[float], cfg: FedEntSettings,
                tol: float = 1e-9) -> Solution:
    """Rates and ``phi2(t+1)`` at their joint fixed point (Eqs. 21 and 26), damped after 20 iterations."""
    theta, a, b = (np.asarray(v, np.float64) for v in (theta, a, b))
    phi, eta = float(s), np.zeros(len(theta))
    for it in range(1, 101):
        eta = np.array([solve_eta(t, s, ai, bi, phi, cfg) for t, ai, bi in zip(theta, a, b, strict=True)])
        new = float(theta @ (s - 2 * eta * a + eta * eta * b))
        if abs(new - phi) <= tol * max(1.0, phi):
            phi = new
            break
        phi = new if it <= 20 else 0.5 * phi + 0.5 * new
    not_min = np.array([one_round_cost(e, t, s, ai, bi, phi, cfg.beta)
                        > one_round_cost(0.0, t, s, ai, bi, phi, cfg.beta) + 1e-15
                        for e, t, ai, bi in zip(eta, theta, a, b, strict=True)])
    return Solution(eta, phi, it, not_min)


@dataclass(frozen=True)
class MeanField:
    """Algorithm 1's output.

    Attributes:
        phi1: ``(T+1, P)`` mean-field models ``phi1(0..T)``.
        phi2: ``(T+1,)`` mean-field squared norms ``phi2(0..T)``.
        sweeps: sweeps run.
        converged: both tolerances met before the sweep cap.
    """

    phi1: Tensor
    phi2: np.ndarray
    sweeps: int
    converged: bool


Gradient = Callable[[np.ndarray, Tensor, int], Tensor]  # (clients, model, round) -> (k, P) gradients


def mean_field_offline(gradient: Gradient, w0: Tensor, schedule: Sequence[np.ndarray],
                       thetas: Sequence[np.ndarray],
                       cfg: FedEntSettings, eps: float = 1e-3, max_sweeps: int = 50, gauss_seidel: bool = True
                       ) -> MeanField:
    """Algorithm 1 of Zheng et al.: sweep the one-step-per-round trajectory until ``phi1``, ``phi2`` settle.

    Args:
        gradient: ``gradient(clients, w, t)`` -> each client's (fixed, seeded per ``t``) minibatch
            gradient at ``w``.
        w0: the initial model ``w(0)``.
        schedule: ``S_t`` for ``t = 0..T-1``.
        thetas: the data shares within each ``S_t``.
        cfg: FedEnt's constants.
        eps: ``epsilon_1 = epsilon_2``; the sweeps stop when both hold.
        max_sweeps: ``K_max``.
        gauss_seidel: base each round on this sweep's ``phi1(t)`` (default) or the last sweep's (Jacobi).
    """
    horizon, w0 = len(schedule), w0.to(torch.float64)
    phi1 = w0.expand(horizon + 1, -1).clone()
    phi2 = np.full(horizon + 1, float(w0 @ w0))
    for sweep in range(1, max_sweeps + 1):
        new1, new2 = phi1.clone(), phi2.copy()
        for t in range(horizon):
            base = new1[t] if gauss_seidel else phi1[t]
            g = gradient(schedule[t], base, t).to(torch.float64)
            s, a, b = float(base @ base), (g @ base).tolist(), (g * g).sum(1).tolist()
            eta = np.array([solve_eta(th, s, ai, bi, phi2[t + 1], cfg)
                            for th, ai, bi in zip(thetas[t], a, b, strict=True)])
            weights = torch.as_tensor(thetas[t] * eta, dtype=g.dtype)
            new1[t + 1] = base - weights @ g
            new2[t + 1] = float(thetas[t] @ (s - 2 * eta * np.asarray(a) + eta * eta * np.asarray(b)))
        d1 = float((new1 - phi1).norm(dim=1).max())
        d2 = float(np.abs(new2 - phi2).max())
        phi1, phi2 = new1, new2
        if d1 < eps and d2 < eps:
            return MeanField(phi1, phi2, sweep, True)
    return MeanField(phi1, phi2, max_sweeps, False)
