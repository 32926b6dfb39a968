"""Clients with corrupted labels, on data every federation of a data set shares.

A noisy client trains on its own samples under corrupted labels: uniformly random ones
(``random``), or class ``c - 1 - y`` for a sample of class ``y`` (``flip``, the label-flipping
attack). So that federations with noisy clients still train merged with each other (a batched
vector env merges clients that read the same data tensors), the corrupted labels do not live in
a per-federation copy: every federation of one data set reads one shared *noisy view* per kind,
the training inputs twice and the true labels followed by the corrupted ones (one fixed draw for
``random``), and a noisy client's sample ``i`` is row ``i + N`` of it.
"""

from __future__ import annotations

import torch

NOISE_SEED = 0x6E6F697379  # the one draw of random labels per data set
LABEL_NOISE = ("random", "flip")
_VIEWS: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def corrupted_labels(y: torch.Tensor, num_classes: int, kind: str = "random") -> torch.Tensor:
    """The labels a noisy client trains on in place of ``y`` (module docstring)."""
    if kind == "flip":
        return num_classes - 1 - y
    gen = torch.Generator().manual_seed(NOISE_SEED)
    return torch.randint(num_classes, (len(y),), generator=gen, dtype=y.dtype).to(y.device)


def noisy_view(x: torch.Tensor, y: torch.Tensor, num_classes: int, kind: str = "random"
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cat(x, x), cat(y, corrupted labels))``, once per ``x`` and kind (the last data set's are kept)."""
    hit = _VIEWS.get((id(x), kind))
    if hit is None or hit[0] is not x:
        if any(view[0] is not x for view in _VIEWS.values()):
            _VIEWS.clear()
        hit = _VIEWS[(id(x), kind)] = (x, torch.cat([x, x]),
                                       torch.cat([y, corrupted_labels(y, num_classes, kind)]))
    return hit[1], hit[2]


def training_rows(parts: list[torch.Tensor], noisy: list[bool], num_samples: int) -> list[torch.Tensor]:
    """Each client's rows of the noisy view: its sample indices, shifted by ``num_samples`` if noisy."""
    return [p + num_samples if bad else p for p, bad in zip(parts, noisy, strict=True)]
