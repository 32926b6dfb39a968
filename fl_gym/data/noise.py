"""Clients with corrupted labels, on data every federation of a data set shares.

A noisy client trains on its own samples under uniformly random labels. So that federations
with noisy clients still train merged with each other (a batched vector env merges clients that
read the same data tensors), the random labels do not live in a per-federation copy: every
federation of one data set reads one shared *noisy view*, the training inputs twice and the true
labels followed by one fixed draw of random labels, and a noisy client's sample ``i`` is row
``i + N`` of it.
"""

from __future__ import annotations

import torch

NOISE_SEED = 0x6E6F697379  # the one draw of random labels per data set
_VIEWS: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def noisy_view(x: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cat(x, x), cat(y, random labels))``, built once per ``x`` (the last data set's view is kept)."""
    hit = _VIEWS.get(id(x))
    if hit is None or hit[0] is not x:
        gen = torch.Generator().manual_seed(NOISE_SEED)
        random = torch.randint(num_classes, (len(y),), generator=gen, dtype=y.dtype).to(y.device)
        _VIEWS.clear()
        hit = _VIEWS[id(x)] = (x, torch.cat([x, x]), torch.cat([y, random]))
    return hit[1], hit[2]


def training_rows(parts: list[torch.Tensor], noisy: list[bool], num_samples: int) -> list[torch.Tensor]:
    """Each client's rows of the noisy view: its sample indices, shifted by ``num_samples`` if noisy."""
    return [p + num_samples if bad else p for p, bad in zip(parts, noisy, strict=True)]
