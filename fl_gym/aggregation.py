"""Server-side aggregation: client weights, the weighted average, and server optimisers.

Weight rules (renormalised over the clients aggregated into one model population):

* ``datasize``: ``n_i / sum n`` (FedAvg, McMahan et al. 2017);
* ``uniform``: ``1/m`` (Chen et al., Eq. 4/5);
* ``entropy_acc``: ``(softmax(H) + softmax(acc)) / 2`` over label entropy in bits and post-training
  local accuracy as a fraction (Chen et al., Eq. 38).

Server rules, each a step on the pseudo-gradient ``delta = sum_i W_i w_i - w``:

* ``average``: ``w <- w + delta`` (or pFedMe's ``w + beta delta``);
* ``fedavgm`` (Hsu et al., 2019): ``v <- momentum v + delta``, ``w <- w + lr v`` (``v0 = 0``;
  ``lr = 1``, ``momentum = 0`` is ``average``);
* ``fedadam`` (Reddi et al., 2021, with Zheng et al.'s settings): ``m <- b1 m + (1-b1) delta``,
  ``v <- b2 v + (1-b2) delta^2``, ``w <- w + lr m / (sqrt(v) + tau)`` with ``m0 = 0``,
  ``v0 = tau^2``, no bias correction. ``delta`` follows the weight rule (data size by default);
  Reddi et al. average uniformly: ``aggregation="uniform"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fl_gym.validation import UserError, is_positive, require, require_choice, require_field_types

WEIGHT_RULES = ("datasize", "uniform", "entropy_acc")
SERVER_RULES = ("average", "fedavgm", "fedadam")


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max())
    return e / e.sum()


def aggregation_weights(rule: str, sizes: np.ndarray, entropy: np.ndarray | None = None,
                        accuracy: np.ndarray | None = None) -> np.ndarray:
    """Weights of ``m`` aggregated clients under ``rule``; they sum to 1."""
    require_choice("aggregation", rule, WEIGHT_RULES)
    sizes = np.asarray(sizes, dtype=np.float64)
    if rule == "datasize":
        return sizes / sizes.sum()
    if rule == "uniform":
        return np.full(len(sizes), 1.0 / len(sizes))
    if entropy is None or accuracy is None:
        raise UserError("aggregation='entropy_acc' needs label entropy and local accuracy")
    return 0.5 * (_softmax(np.asarray(entropy, np.float64)) + _softmax(np.asarray(accuracy, np.float64)))


def weighted_average(rows: Tensor, weights: Tensor) -> Tensor:
    """``sum_i w_i rows_i`` for ``(m, P)`` rows."""
    return weights.to(rows.dtype) @ rows


@dataclass(frozen=True)
class ServerConfig:
    """How the server turns the clients' average into the next global model.

    Attributes:
        name: one of :data:`SERVER_RULES`.
        lr: the server learning rate ``eta_s`` (FedAdam, FedAvgM); None = 0.01 for FedAdam (the
            Zheng et al.'s setting), 1 for FedAvgM.
        betas: FedAdam's ``(beta1, beta2)``.
        tau: FedAdam's adaptivity ``tau``.
        momentum: FedAvgM's server momentum ``beta``.
    """

    name: str = "average"
    lr: float | None = None
    betas: tuple[float, float] = (0.9, 0.99)
    tau: float = 1e-3
    momentum: float = 0.9

    def __post_init__(self) -> None:
        require_field_types(self)  # a string or None reaches no comparison below
        require_choice("server", self.name, SERVER_RULES)
        require(self.lr is None or is_positive(self.lr), "server_lr", self.lr, "None or a float > 0")
        require(0 <= self.momentum < 1, "server_momentum", self.momentum, "a float in [0, 1)")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "server_betas", self.betas,
                "two floats in [0, 1)")
        require(is_positive(self.tau), "tau", self.tau, "a float > 0")


    @property
    def rate(self) -> float:
        """``eta_s`` with the rule's default filled in."""
        if self.lr is not None:
            return self.lr
        return 0.01 if self.name == "fedadam" else 1.0


class ServerOptimizer:
    """Server update for one global model; holds FedAvgM's and FedAdam's moments across rounds."""

    def __init__(self, cfg: ServerConfig, mix: float = 1.0) -> None:
        self.cfg, self.mix = cfg, mix
        self.m: Tensor | None = None
        self.v: Tensor | None = None

    def apply(self, global_vec: Tensor, average: Tensor) -> Tensor:
        """The next global model from the current one and the clients' weighted average."""
        cfg = self.cfg
        if cfg.name == "average":
            return average if self.mix == 1.0 else torch.lerp(global_vec, average, self.mix)
        delta = average - global_vec
        if self.m is None or self.v is None:
            self.m, self.v = torch.zeros_like(delta), torch.full_like(delta, cfg.tau ** 2)
        m, v = self.m, self.v
        if cfg.name == "fedavgm":
            m.mul_(cfg.momentum).add_(delta)
            return global_vec + cfg.rate * m
        b1, b2 = cfg.betas
        m.mul_(b1).add_(delta, alpha=1 - b1)
        v.mul_(b2).addcmul_(delta, delta, value=1 - b2)
        return global_vec + cfg.rate * m / (v.sqrt() + cfg.tau)
