"""Local losses as functions of the logits that also return their gradient.

A loss takes ``logits[role]`` ``(k, B, C)`` for every model role a client trains (``"model"``, or
``"local"`` and ``"lite"`` in mutual learning with a companion model), the labels ``(k, B)`` and the
per-sample weights ``(k, B)`` (``1/b`` on real samples, 0 on padding), and returns per-role ``(k,)`` loss
values and per-role ``(k, B, C)`` gradients with respect to the logits. The engine backpropagates
those through the batched layers. The weights make each client's loss its own batch mean, so
clients never mix.

Any differentiable loss can be plugged in through :func:`autograd_loss`, which differentiates
with respect to the logits only (small tensors), never through the network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from fl_gym.validation import is_non_negative, require, require_field_types

LossFn = Callable[[dict[str, Tensor], Tensor, Tensor], tuple[dict[str, Tensor], dict[str, Tensor]]]
# torch's CPU log-softmax over a last dim narrower than this (10 classes) is 7-12x slower than the same
# reduction over a leading dim, which it vectorises across the rows (docs/performance.md)
NARROW_CLASSES = 16


def log_softmax(logits: Tensor) -> Tensor:
    """``logits.log_softmax(-1)``; on the CPU, over few classes, computed with the classes leading."""
    if logits.device.type != "cpu" or logits.shape[-1] >= NARROW_CLASSES:
        return logits.log_softmax(-1)
    return logits.movedim(-1, 0).contiguous().log_softmax(0).movedim(0, -1).contiguous()


def _ce(logits: Tensor, y: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Weighted cross-entropy: ``(loss (k,), dlogits (k,B,C), probabilities (k,B,C))``."""
    logp = log_softmax(logits)
    label = y.unsqueeze(-1)
    loss = (logp.gather(-1, label).squeeze(-1) * w).sum(1).neg_()
    p = logp.exp()
    grad = p.scatter_add(-1, label, torch.full_like(w, -1.0).unsqueeze(-1))  # p - one-hot
    return loss, grad.mul_(w.unsqueeze(-1)), p


def cross_entropy(logits: dict[str, Tensor], y: Tensor,
                  w: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Cross-entropy on every role independently (plain FedAvg/FedProx local training)."""
    losses, grads = {}, {}
    for role, z in logits.items():
        losses[role], grads[role], _ = _ce(z, y, w)
    return losses, grads


@dataclass(frozen=True)
class MutualDistillation:
    """Mutual learning of a local model and a small companion model (Chen et al., section 4.1).

    ``L_local = l1 CE(local) + l2 KL(p_lite || p_local)`` and
    ``L_lite = l3 CE(lite) + l4 KL(p_local || p_lite)``, each with the other model detached
    (deep mutual learning; ``direction="literal"`` swaps the KL arguments to the paper's
    ``KL(X || Y)`` with ``X`` the model being trained). Temperature ``T`` softens both
    distributions; the KL term is scaled by ``T^2`` as usual so gradients keep their size.
    ``local`` and ``lite`` name the two roles whose logits pair up (a federation's are the defaults).
    """

    l1: float = 0.4
    l2: float = 0.6
    l3: float = 0.5
    l4: float = 0.5
    temperature: float = 1.0
    direction: str = "dml"
    local: str = "local"
    lite: str = "lite"

    def __post_init__(self) -> None:
        require_field_types(self)  # a string or None reaches no comparison below
        for name in ("l1", "l2", "l3", "l4"):
            require(is_non_negative(getattr(self, name)), name, getattr(self, name), "a float >= 0")
        require(self.temperature > 0, "kd_temperature", self.temperature, "a float > 0")
        require(self.direction in ("dml", "literal"), "kd_direction", self.direction, "'dml' or 'literal'")
        require(self.lite != self.local, "lite", self.lite, f"a role other than local={self.local!r}")

    def __call__(self, logits: dict[str, Tensor], y: Tensor,
                 w: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Losses and logit gradients of both roles (see the class docstring)."""
        z_loc, z_lite = logits[self.local], logits[self.lite]
        ce_loc, g_loc, _ = _ce(z_loc, y, w)
        ce_lite, g_lite, _ = _ce(z_lite, y, w)
        kl_loc, gk_loc = self._kl(z_loc, z_lite, w)
        kl_lite, gk_lite = self._kl(z_lite, z_loc, w)
        losses = {self.local: self.l1 * ce_loc + self.l2 * kl_loc,
                  self.lite: self.l3 * ce_lite + self.l4 * kl_lite}
        grads = {self.local: g_loc.mul_(self.l1).add_(gk_loc, alpha=self.l2),
                 self.lite: g_lite.mul_(self.l3).add_(gk_lite, alpha=self.l4)}
        return losses, grads

    def _kl(self, student: Tensor, teacher: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        """KL term for ``student`` with ``teacher`` detached, and its gradient w.r.t. the student logits."""
        t = self.temperature
        log_s = log_softmax(student / t)
        log_t = log_softmax(teacher / t)
        p_s, p_t = log_s.exp(), log_t.exp()
        if self.direction == "dml":  # KL(p_t || p_s): gradient t * (p_s - p_t)
            kl = (p_t * (log_t - log_s)).sum(-1)
            grad = (p_s - p_t) * t
        else:  # KL(p_s || p_t): gradient t * p_s * (log p_s - log p_t - KL)
            kl = (p_s * (log_s - log_t)).sum(-1)
            grad = p_s * (log_s - log_t - kl.unsqueeze(-1)) * t
        return (kl * w).sum(1) * t * t, grad.mul_(w.unsqueeze(-1))


def autograd_loss(fn: Callable[[dict[str, Tensor], Tensor], dict[str, Tensor]]) -> LossFn:
    """Wrap a per-sample loss ``fn(logits, y) -> {role: (k, B)}`` into an engine loss.

    The gradient comes from ``torch.autograd`` on the logits alone, so any differentiable loss of
    the outputs works without writing its derivative.
    """
    def loss(logits: dict[str, Tensor], y: Tensor, w: Tensor):
        with torch.enable_grad():
            leaves = {r: z.detach().requires_grad_(True) for r, z in logits.items()}
            per_sample = fn(leaves, y)
            values = {r: (v * w).sum(1) for r, v in per_sample.items()}
            total = torch.stack([v.sum() for v in values.values()]).sum()
            grads = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
        dlogits = {r: (g if g is not None else torch.zeros_like(leaves[r]))
                   for r, g in zip(leaves, grads, strict=True)}
        return {r: v.detach() for r, v in values.items()}, dlogits
    return loss
