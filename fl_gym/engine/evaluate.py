"""Batched evaluation: many clients' models on their own data, or global models on the test set."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fl_gym.engine.losses import log_softmax
from fl_gym.engine.schedule import padded
from fl_gym.models.architecture import Stack, prefix


@dataclass(frozen=True)
class EvalResult:
    """Per-model ``(K,)`` metrics; ``soft_labels`` is ``(K, C)``, the mean softmax output."""

    loss: Tensor
    accuracy: Tensor
    soft_labels: Tensor
    count: Tensor


@torch.no_grad()
def evaluate_stack(stack: Stack, x: Tensor, y: Tensor, parts: list[Tensor], batch_size: int = 512, *,
                   scores: bool = True, soft_labels: bool = True) -> EvalResult:
    """Evaluate row ``i`` of ``stack`` on samples ``parts[i]`` (dropout off), all rows together.

    The samples run in chunks of at most ``batch_size`` (:func:`chunks`), each through the rows up
    to the last one with samples in it, so rows ordered longest part first compute little past
    their own part. Rows whose part is empty get NaN loss and accuracy. Without ``scores`` (loss
    and accuracy) or ``soft_labels`` those are NaN and not computed: a client's soft labels need
    no ``argmax``, a global model's scores no mean softmax.
    """
    if len(parts) != stack.k:
        raise ValueError(f"evaluate_stack: expected {stack.k} index arrays, got {len(parts)}")
    arch, device = stack.arch, x.device
    sizes = np.array([p.shape[0] for p in parts], np.int64)
    n = torch.as_tensor(sizes, device=device)
    n_max = int(sizes.max()) if len(parts) else 0
    table = padded(parts, n, max(n_max, 1))
    loss = torch.zeros(stack.k, device=device)
    correct = torch.zeros(stack.k, device=device)
    soft = torch.zeros(stack.k, arch.num_classes, device=device)
    for lo, hi in chunks(sizes, batch_size):
        a = int((sizes > lo).nonzero()[0][-1]) + 1  # the rows up to the last with samples from lo on
        idx = table[:a, lo: hi]
        valid = (torch.arange(lo, lo + idx.shape[1], device=device) < n[:a].unsqueeze(1)).float()
        logits, _ = arch.forward(prefix(stack.blocks, a), arch.gather(x, idx), False)
        logp = log_softmax(logits)
        if scores:
            yb = y[idx]
            loss[:a] -= (logp.gather(-1, yb.unsqueeze(-1)).squeeze(-1) * valid).sum(1)
            correct[:a] += ((logits.argmax(-1) == yb).float() * valid).sum(1)
        if soft_labels:
            soft[:a] += (logp.exp() * valid.unsqueeze(-1)).sum(1)
    count = n.float()
    soft = soft / count.clamp_min(1).unsqueeze(1) if soft_labels else soft.fill_(math.nan)
    if not scores:
        return EvalResult(loss.fill_(math.nan), correct.fill_(math.nan), soft, n)
    return EvalResult(loss / count, correct / count, soft, n)


def chunks(sizes: np.ndarray, width: int) -> list[tuple[int, int]]:
    """Column ranges ``[lo, hi)`` covering the longest part, each at most ``width`` wide.

    A range ends where a part ends, at the first such end at least a quarter of ``width`` past
    its start (else ``width`` past it): a part that ends inside a range pads it, and a range costs
    a few calls of its own, so a short part may pad the rest of a short range.
    """
    ends, out, lo = np.unique(sizes[sizes > 0]), [], 0
    n_max = int(ends[-1]) if len(ends) else 0
    while lo < n_max:
        hi = min(lo + width, n_max)
        later = ends[(ends >= lo + max(width // 4, 1)) & (ends <= hi)]
        hi = int(later[0]) if len(later) else hi
        out.append((lo, hi))
        lo = hi
    return out


@torch.no_grad()
def evaluate_models(stack: Stack, x: Tensor, y: Tensor, batch_size: int = 1024) -> EvalResult:
    """Evaluate every row of ``stack`` on the same samples (e.g. global models on the test set)."""
    everyone = torch.arange(len(y), device=x.device)
    return evaluate_stack(stack, x, y, [everyone] * stack.k, batch_size)
