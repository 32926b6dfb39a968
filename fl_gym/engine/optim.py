"""Local optimisers for K stacked clients, each with its own learning rate.

An update touches the whole flat parameter buffer in a handful of operations. A client's
learning rate is expanded over its rows of the buffer; clients that finished their steps get
rate 0, so they stop moving (their stale gradients and optimiser state are never used again,
because a finished client never restarts within a round). The arithmetic follows
``torch.optim.SGD`` (momentum without dampening, L2 weight decay) and ``torch.optim.Adam``
exactly, so the per-client reference loop can use those classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fl_gym.models.architecture import Stack
from fl_gym.validation import is_non_negative, is_positive, require, require_choice


@dataclass(frozen=True)
class OptimizerConfig:
    """Local optimiser, fresh each round (its state is not carried across rounds).

    Attributes:
        name: ``"sgd"`` or ``"adam"``.
        momentum: SGD momentum (no dampening).
        weight_decay: L2 penalty added to the gradient.
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's epsilon.
    """

    name: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        require_choice("optimizer", self.name, ("sgd", "adam"))
        require(0 <= self.momentum < 1, "momentum", self.momentum, "a float in [0, 1)")
        require(is_non_negative(self.weight_decay), "weight_decay", self.weight_decay, "a float >= 0")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas", self.betas,
                "two floats in [0, 1)")
        require(is_positive(self.eps), "eps", self.eps, "a float > 0")

    def torch_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        """The equivalent ``torch.optim`` optimiser for one client (the reference loop)."""
        if self.name == "adam":
            return torch.optim.Adam(params, lr=lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)


class StackOptimizer:
    """Optimiser state and update for one :class:`~fl_gym.models.architecture.Stack`.

    Args:
        stack: the parameters it updates in place.
        cfg: the optimiser.
        lr: ``(K,)`` learning rate per client.
        prox_mu: FedProx's ``mu``: adds ``mu * (w - anchor)`` to the gradient.
        anchor: the proximal centre (default: the parameters at construction).
    """

    def __init__(self, stack: Stack, cfg: OptimizerConfig, lr: Tensor, prox_mu: float = 0.0,
                 anchor: Tensor | None = None) -> None:
        self.stack, self.cfg, self.prox_mu, self.lr = stack, cfg, prox_mu, lr
        self.anchor = (stack.flat.clone() if anchor is None else anchor) if prox_mu else None
        self.t = 0
        self._state = [torch.zeros_like(stack.flat) for _ in range(2 if cfg.name == "adam" else int(cfg.momentum > 0))]
        uniform = bool((lr == lr[0]).all())
        self._scalar = float(lr[0]) if uniform else None  # one rate for everyone: a scalar alpha, no buffer
        self._rate = None if uniform else expand_rates(lr, stack.arch.sizes, stack.k)

    def set_active(self, active: int) -> None:
        """Freeze the clients from ``active`` on (they finished their local steps)."""
        self._rate = expand_rates(self.lr, self.stack.arch.sizes, active)

    def _descend(self, update: Tensor, scale: float = 1.0) -> None:
        """``w -= scale * lr * update``, per client."""
        if self._rate is None:
            self.stack.flat.add_(update, alpha=-scale * self._scalar)
        else:
            self.stack.flat.addcmul_(update, self._rate, value=-scale)

    def step(self, grad: Tensor) -> None:
        """Apply one update from the flat gradient buffer ``grad`` (modified in place)."""
        p, cfg = self.stack.flat, self.cfg
        self.t += 1
        if cfg.weight_decay:
            grad.add_(p, alpha=cfg.weight_decay)
        if self.prox_mu:
            grad.add_(p - self.anchor, alpha=self.prox_mu)
        if cfg.name == "adam":
            m, v = self._state
            b1, b2 = cfg.betas
            m.mul_(b1).add_(grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            denom = v.sqrt().div_(math.sqrt(1 - b2 ** self.t)).add_(cfg.eps)
            self._descend(m.div(denom), 1.0 / (1 - b1 ** self.t))
            return
        if cfg.momentum:
            buf = self._state[0]
            grad = buf.mul_(cfg.momentum).add_(grad)
        self._descend(grad)


def expand_rates(lr: Tensor, sizes: list[int], active: int) -> Tensor:
    """Spread ``(K,)`` per-client rates over a parameter-major buffer; clients ``>= active`` get 0."""
    lr = lr.clone()
    lr[active:] = 0
    return torch.cat([lr.view(-1, 1).expand(-1, size).reshape(-1) for size in sizes])
