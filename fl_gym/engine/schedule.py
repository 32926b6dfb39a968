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


def padded(parts: list[Tensor], sizes: Tensor, width: int) -> Tensor:
    """``(k, width)`` int64 table whose row ``i`` starts with ``parts[i]`` (``sizes[i]`` long), then zeros.

    ``sizes``: the parts' lengths, on their device.
    """
    table = torch.zeros(len(parts), width, dtype=torch.int64, device=sizes.device)
    if len(parts):  # a mask fills its True places in row-major order: each row's part, then zeros
        filled = torch.arange(width, device=sizes.device) < sizes.unsqueeze(1)
        table.masked_scatter_(filled, torch.cat(parts))
    return table


def local_steps(sizes: np.ndarray, epochs: np.ndarray, batch_size: int) -> np.ndarray:
    """Steps per client: ``epochs * ceil(n / B)``, rounded, at least 1 where ``epochs > 0``."""
    nb = np.ceil(np.asarray(sizes) / batch_size).astype(np.int64)
    steps = np.rint(np.asarray(epochs, dtype=np.float64) * nb).astype(np.int64)
    return np.where(np.asarray(epochs) > 0, np.maximum(steps, 1), 0)


@dataclass(frozen=True, eq=False)
class BatchDraw:
    """A cohort's random batch order before it is laid out as a :class:`BatchSchedule`.

    The draw is the only random part of a schedule; the layout is index arithmetic. Keeping them
    apart lets a vector env draw each copy's batches from the copy's own generator and lay out
    all copies' cohorts at once (:meth:`concat`), with the batches each copy would draw alone.

    Attributes:
        parts: each client's training indices.
        steps: ``(k,)`` local steps per client.
        keys: ``(E, k, n_max)`` per-epoch sort keys in ``[0, 1)``; :func:`layout` sets those past a
            client's samples to ``2`` (so the argsort of a row is a permutation of the client's
            samples, padding last), once for every copy's cohort.
    """

    parts: list[Tensor]
    steps: np.ndarray
    keys: Tensor

    @classmethod
    def draw(cls, parts: list[Tensor], steps: np.ndarray, batch_size: int, gen: torch.Generator) -> BatchDraw:
        """One uniform key per sample and epoch, one vectorised draw for the whole cohort."""
        steps = np.asarray(steps)
        if len(parts) == 0 or steps.min() < 1:
            raise ValueError(f"make_schedule: expected a non-empty cohort with steps >= 1, got {steps}")
        n = np.array([p.shape[0] for p in parts])
        nb = -(-n // min(batch_size, int(n.max())))  # a batch beyond every client's data is its full batch
        epochs = int((-(-steps // nb)).max())
        # one draw for every epoch: on the CPU the same numbers as a draw per epoch, in one call
        keys = torch.rand((epochs, len(parts), int(n.max())), generator=gen, device=parts[0].device)
        return cls(parts, steps, keys)

    @staticmethod
    def concat(draws: list[BatchDraw], order: np.ndarray) -> BatchDraw:
        """The cohorts of ``draws`` side by side, clients permuted by ``order`` (keys padded with 2)."""
        epochs = max(d.keys.shape[0] for d in draws)
        width = max(d.keys.shape[2] for d in draws)
        keys = draws[0].keys.new_full((epochs, sum(d.keys.shape[1] for d in draws), width), 2.0)
        lo = 0
        for d in draws:
            e, k, w = d.keys.shape
            keys[:e, lo: lo + k, :w] = d.keys
            lo += k
        parts = [p for d in draws for p in d.parts]
        return BatchDraw([parts[i] for i in order], np.concatenate([d.steps for d in draws])[order],
                         keys[:, torch.as_tensor(order, device=keys.device)])


def make_schedule(parts: list[Tensor], steps: np.ndarray, batch_size: int,
                  gen: torch.Generator) -> BatchSchedule:
    """Build the schedule of a cohort whose clients are already sorted by ``steps``, most first.

    Args:
        parts: each client's training indices (1-D int64 tensors on the data device).
        steps: ``(k,)`` local steps per client, non-increasing, all >= 1.
        batch_size: ``B``.
        gen: generator for the per-epoch permutations.
    """
    return layout(BatchDraw.draw(parts, steps, batch_size, gen), batch_size)


def stable_order(keys: Tensor) -> Tensor:
    """``keys.argsort(dim=-1, stable=True)`` for keys that are not negative.

    On the CPU, float32 keys sort as one array of integers ``bits << 32 | position``: a non-negative
    float orders as its bit pattern, and the position breaks ties as a stable sort does. NumPy sorts
    those integers with vector instructions; torch's stable argsort of random keys, a comparison
    sort, stalls on mispredicted branches, and for a merged cohort of 160 clients took 3x as long.
    """
    if keys.device.type != "cpu" or keys.dtype != torch.float32:
        return keys.argsort(dim=-1, stable=True)
    bits = keys.contiguous().numpy().view(np.int32).astype(np.int64)
    ordered = np.sort(bits << 32 | np.arange(keys.shape[-1]), axis=-1)
    return torch.from_numpy(ordered & 0xFFFFFFFF)


def layout(draw: BatchDraw, batch_size: int) -> BatchSchedule:
    """The schedule of a drawn cohort whose clients are sorted by steps, most first."""
    parts, steps = draw.parts, draw.steps
    if np.any(np.diff(steps) > 0):
        raise ValueError(f"make_schedule: expected non-increasing steps, got {steps}")
    device = parts[0].device
    k = len(parts)
    n_np = np.array([p.shape[0] for p in parts])
    batch_size = min(batch_size, int(n_np.max()))  # a batch beyond every client's data is its full batch
    n = torch.as_tensor(n_np, device=device)
    nb = (n + batch_size - 1) // batch_size
    steps_t = torch.as_tensor(steps, device=device)
    num_steps = int(steps[0])
    epochs, _, width = draw.keys.shape
    pad = torch.as_tensor(np.arange(width) >= n_np[:, None], device=device)
    perms = stable_order(draw.keys.masked_fill(pad, 2.0))
    s = torch.arange(num_steps, device=device)
    epoch_of = s.unsqueeze(0) // nb.unsqueeze(1)  # (k, S)
    pos = ((s.unsqueeze(0) % nb.unsqueeze(1)).unsqueeze(-1) * batch_size
           + torch.arange(batch_size, device=device))
    valid = (pos < n.view(k, 1, 1)) & (s.view(1, -1, 1) < steps_t.view(k, 1, 1))  # (k, S, B)
    pos = torch.where(valid, pos, torch.zeros_like(pos))
    # flat positions taken in one gather each (indexing by three broadcast index tensors was the slowest line)
    row = torch.arange(k, device=device).view(k, 1, 1) * width  # each client's row of a (k, width) table
    local = perms.take((epoch_of.clamp(max=epochs - 1) * (k * width)).unsqueeze(-1) + row + pos)
    idx = padded(parts, n, width).take(row + local)
    count = valid.sum(-1, keepdim=True).clamp_min(1)
    weight = valid.float() / count
    active = (steps[None, :] > np.arange(num_steps)[:, None]).sum(axis=1).tolist()
    return BatchSchedule(idx.transpose(0, 1).contiguous(), weight.transpose(0, 1).contiguous(),
                         steps, nb.cpu().numpy(), active)
