"""Local optimisers for K stacked clients, each with its own learning rate.

The arithmetic follows ``torch.optim.SGD`` (momentum without dampening, L2 weight decay) and
``torch.optim.Adam`` exactly, so the per-client reference loop can use those classes. An update
runs in one of two ways:

* every client active and one shared rate: a few operations over the whole flat buffer;
* otherwise: per parameter block, over the active clients only (a prefix of each block, see
  :mod:`fl_gym.engine.schedule`), with the per-client rates broadcast from a ``(a, 1, ...)`` view.
  Clients that finished their local steps are not touched at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from fl_gym.models.architecture import Stack
from fl_gym.validation import is_non_negative, is_positive, require, require_choice, require_field_types


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
        require_field_types(self)  # a string or None reaches no comparison below
        require_choice("optimizer", self.name, ("sgd", "adam"))
        require(0 <= self.momentum < 1, "momentum", self.momentum, "a float in [0, 1)")
        require(is_non_negative(self.weight_decay), "weight_decay", self.weight_decay, "a float >= 0")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas", self.betas,
                "two floats in [0, 1)")
        require(is_positive(self.eps), "eps", self.eps, "a float > 0")

    def torch_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        """The equivalent ``torch.optim`` optimiser for one client (the reference loop)."""
        if self.name == "adam":
            return torch.optim.Adam(params, lr=lr, betas=self.betas, eps=self.eps,
                                    weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)


class StackOptimizer:
    """Optimiser state and update for one :class:`~fl_gym.models.architecture.Stack`.

    Args:
        stack: the parameters it updates in place.
        cfg: the optimiser.
        lr: ``(K,)`` learning rate per client.
        prox_mu: FedProx's ``mu``: adds ``mu * (w - anchor)`` to the gradient.
        anchor: the proximal centre, a flat buffer of the stack's layout (default: the
            parameters at construction).
    """

    def __init__(self, stack: Stack, cfg: OptimizerConfig, lr: Tensor, prox_mu: float = 0.0,
                 anchor: Tensor | None = None) -> None:
        self.stack, self.cfg, self.prox_mu, self.lr = stack, cfg, prox_mu, lr
        self.anchor = (stack.flat.clone() if anchor is None else anchor) if prox_mu else None
        self._anchored_at_start = prox_mu and anchor is None
        self.t = 0
        self.active = stack.k
        n_state = 2 if cfg.name == "adam" else int(cfg.momentum > 0)
        self._state = [torch.zeros_like(stack.flat) for _ in range(n_state)]
        self._shared: float | Tensor | None = float(lr[0]) if shared_rate(lr) else None
        # the block views of (the gradient buffer they were made with, and the rest), and _groups' pieces per
        # active count: a run steps with one gradient buffer, and slicing the blocks anew at each step costs
        # more than updating them
        self._views: tuple[Tensor, list[list[Tensor]]] | None = None
        self._pieces: dict[int, list[tuple[list[Tensor], Tensor]]] = {}

    def set_active(self, active: int) -> None:
        """Update only the first ``active`` clients from now on (the rest finished their steps)."""
        self.active = active

    def restart(self) -> None:
        """Back to a fresh optimiser over all clients: zero state, step count 0, anchored at the rows now."""
        self.t, self.active = 0, self.stack.k
        for state in self._state:
            state.zero_()
        if self._anchored_at_start and self.anchor is not None:
            self.anchor.copy_(self.stack.flat)

    def rates_from_tensor(self) -> None:
        """Read the rates from ``lr`` on the device at every update, not as numbers read once.

        A CUDA graph replays its round on rates copied into ``lr``. Equal rates stay one update of
        each whole buffer, by ``lr[0]``.
        """
        if self._shared is not None:
            self._shared = self.lr[0]

    def fused_rate(self) -> float | Tensor | None:
        """The rate of a step that is ``p -= rate * grad`` alone, for a backward pass to take it; else None.

        Plain SGD (no momentum, weight decay or proximal term): the shared rate, or the active
        clients' ``(a,)`` rates (:meth:`~fl_gym.models.layers.Layer.descend`).
        """
        cfg = self.cfg
        if cfg.name != "sgd" or cfg.momentum or cfg.weight_decay or self.prox_mu:
            return None
        return self.lr[: self.active] if self._shared is None else self._shared

    def _groups(self, grad: Tensor) -> Iterator[tuple[list[Tensor], float | Tensor]]:
        """``([param, grad, anchor?, *state], rate)`` per piece of the update."""
        flats = [self.stack.flat, grad] + ([self.anchor] if self.anchor is not None else []) + self._state
        a = self.active
        if a == self.stack.k and self._shared is not None:
            yield flats, self._shared
            return
        if self._views is None or self._views[0] is not grad:
            self._views, self._pieces = (grad, [self.stack.views(t) for t in flats]), {}
        views = self._views[1]
        if a not in self._pieces:
            self._pieces[a] = [([v[i][:a] for v in views], self.lr[:a].view(-1, *[1] * (block.dim() - 1)))
                               for i, block in enumerate(views[0])]
        yield from self._pieces[a]

    def step(self, grad: Tensor) -> None:
        """Apply one update from the flat gradient buffer ``grad`` (modified in place)."""
        self.t += 1
        for tensors, rate in self._groups(grad):
            self._update(tensors, rate)

    def _update(self, tensors: list[Tensor], rate: float | Tensor) -> None:
        cfg = self.cfg
        p, g, *rest = tensors
        if self.prox_mu:
            anchor, *rest = rest
        if cfg.weight_decay:
            g.add_(p, alpha=cfg.weight_decay)
        if self.prox_mu:
            g.add_(p - anchor, alpha=self.prox_mu)
        if cfg.name == "adam":
            m, v = rest
            b1, b2 = cfg.betas
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = v.sqrt().div_(math.sqrt(1 - b2 ** self.t)).add_(cfg.eps)
            descend(p, m.div(denom), rate, 1.0 / (1 - b1 ** self.t))
            return
        if cfg.momentum:
            g = rest[0].mul_(cfg.momentum).add_(g)
        descend(p, g, rate)


def shared_rate(lr: Tensor) -> bool:
    """Whether every client has the same learning rate (an update then runs over whole buffers)."""
    return bool((lr == lr[0]).all())


def descend(p: Tensor, update: Tensor, rate: float | Tensor, scale: float = 1.0) -> None:
    """``p -= scale * rate * update`` with a shared (float) or per-client (broadcast tensor) rate."""
    if isinstance(rate, float):
        p.add_(update, alpha=-scale * rate)
    else:
        p.addcmul_(update, rate, value=-scale)
