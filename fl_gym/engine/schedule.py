"""Which samples each client trains on at each local step, for all clients at once.

A client with ``n`` samples, batch size ``B`` and ``e`` epochs takes ``e * ceil(n/B)`` steps, each
epoch a fresh permutation, the last batch of an epoch short when ``B`` does not divide ``n`` (a
``DataLoader(shuffle=True, drop_last=False)``). Fractional epochs round the step count, with at
least one step. Clients are ordered by step count, most first, so that the clients still training
at any step are a prefix of the cohort and finished clients simply drop off the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class BatchSchedule:
    """Sample indices and loss weights for every local step of a cohort.

    Attributes:
        idx: ``(S, k, B)`` int64 indices into the training tensors; padding repeats a valid index.
        weight: ``(S, k, B)`` float32, ``1/b`` on a client's ``b`` real samples and 0 on padding,
            so a weighted sum is each client's mean batch loss.
        steps: ``(k,)`` local steps per client, non-increasing.
        batches_per_epoch: ``(k,)`` ``ceil(n_i / B)``.
        active: ``active[s]`` = clients still training at step ``s`` (a prefix of the cohort).
    """

    idx: Tensor
    weight: Tensor
    steps: np.ndarray
    batches_per_epoch: np.ndarray
    active: list[int]

    @property
    def num_steps(self) -> int:
        """Steps of the longest client."""
        return len(self.active)


def local_steps(sizes: np.ndarray, epochs: np.ndarray, batch_size: int) -> np.ndarray:
    """Steps per client: ``epochs * ceil(n / B)``, rounded, at least 1 where ``epochs > 0``."""
    nb = np.ceil(np.asarray(sizes) / batch_size).astype(np.int64)
    steps = np.rint(np.asarray(epochs, dtype=np.float64) * nb).astype(np.int64)
    return np.where(np.asarray(epochs) > 0, np.maximum(steps, 1), 0)


def make_schedule(parts: list[Tensor], steps: np.ndarray, batch_size: int, gen: torch.Generator) -> BatchSchedule:
    """Build the schedule of a cohort whose clients are already sorted by ``steps``, most first.

    Args:
        parts: each client's training indices (1-D int64 tensors on the data device).
        steps: ``(k,)`` local steps per client, non-increasing, all >= 1.
        batch_size: ``B``.
        gen: generator for the per-epoch permutations.
    """
    if len(parts) == 0 or np.any(np.diff(steps) > 0) or steps[-1] < 1:
        raise ValueError(f"make_schedule: expected a non-empty cohort with non-increasing steps >= 1, got {steps}")
    device = parts[0].device
    k = len(parts)
    n = torch.tensor([len(p) for p in parts], device=device)
    n_max = int(n.max())
    nb = (n + batch_size - 1) // batch_size
    steps_t = torch.as_tensor(steps, device=device)
    num_steps = int(steps[0])
    epochs = int(((steps_t + nb - 1) // nb).max())
    col = torch.arange(n_max, device=device)
    pad = col.unsqueeze(0) >= n.unsqueeze(1)  # (k, n_max)
    perms = torch.empty(epochs, k, n_max, dtype=torch.int64, device=device)
    for e in range(epochs):  # one vectorised draw per epoch for the whole cohort
        keys = torch.rand(k, n_max, generator=gen, device=device).masked_fill_(pad, 2.0)
        perms[e] = keys.argsort(dim=1, stable=True)
    s = torch.arange(num_steps, device=device)
    epoch_of = s.unsqueeze(0) // nb.unsqueeze(1)  # (k, S)
    pos = (s.unsqueeze(0) % nb.unsqueeze(1)).unsqueeze(-1) * batch_size + torch.arange(batch_size, device=device)
    valid = (pos < n.view(k, 1, 1)) & (s.view(1, -1, 1) < steps_t.view(k, 1, 1))  # (k, S, B)
    pos = torch.where(valid, pos, torch.zeros_like(pos))
    client = torch.arange(k, device=device).view(k, 1, 1)
    local = perms[epoch_of.clamp(max=epochs - 1).unsqueeze(-1), client, pos]
    table = torch.zeros(k, n_max, dtype=torch.int64, device=device)
    for i, p in enumerate(parts):
        table[i, : len(p)] = p
    idx = table[client, local]
    count = valid.sum(-1, keepdim=True).clamp_min(1)
    weight = valid.float() / count
    active = (np.asarray(steps)[None, :] > np.arange(num_steps)[:, None]).sum(axis=1).tolist()
    return BatchSchedule(idx.transpose(0, 1).contiguous(), weight.transpose(0, 1).contiguous(),
                         np.asarray(steps), nb.cpu().numpy(), active)
