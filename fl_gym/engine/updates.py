"""How far each client moved in a round, for many cohorts in one call.

A vector env's copies each train a cohort from their own global model. The statistics that
compare a client's trained model with where it started (the angle of its update to the mean
update, the update and model norms, the cosine to the global model) are a handful of row-wise
reductions, so the copies' rows are reduced together: one call over every cohort's ``(k, P)``
rows, a stand-alone federation being the case of one cohort.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

STATISTICS = ("model_cosine", "model_norm", "update_norm", "update_angle")


def update_statistics(rows: Tensor, starts: Tensor, weights: Tensor, counts: Sequence[int]) -> Tensor:
    """The :data:`STATISTICS` of every row, ``(4, n)``.

    Args:
        rows: ``(n, P)`` trained models, one run of rows per cohort.
        starts: ``(len(counts), P)`` the model each cohort started from.
        weights: ``(n,)`` each row's weight in its cohort's mean update (a cohort's sum to 1; the
            federation weighs by data size).
        counts: each cohort's number of rows, in the order of ``rows``.

    Per row: the cosine between the trained model and its start, the model's norm, the norm of its
    update (model less start) and the angle in radians between the update and its cohort's
    weighted mean update (0 in a cohort of one; a zero vector's cosines count as 0).
    """
    norm = torch.linalg.vector_norm  # Tensor.norm dispatches in Python: slower than the kernel here
    runs = list(counts)
    delta = torch.empty_like(rows)
    means, dots = [], []
    for r, d, s, w in zip(rows.split(runs), delta.split(runs), starts, weights.split(runs), strict=True):
        means.append(w @ torch.sub(r, s, out=d))
        dots.append(d @ means[-1])
    sizes = torch.as_tensor(runs, device=rows.device)
    each = torch.repeat_interleave(torch.arange(len(runs), device=rows.device), sizes)
    update_norm, model_norm = norm(delta, dim=1), norm(rows, dim=1)
    start_norm, mean_norm = norm(starts, dim=1)[each], norm(torch.stack(means), dim=1)[each]
    # rows . start from the three norms (the law of cosines): no pass over the rows for it
    model_dot = (model_norm.square() + start_norm.square() - update_norm.square()) / 2
    model_cosine = model_dot / (model_norm * start_norm).clamp_min(1e-12)
    cos = torch.cat(dots) / (update_norm * mean_norm).clamp_min(1e-12)
    # a cohort of one's update is its mean, at angle 0: the arccos of a cosine rounded to within a few
    # ulps of 1 is up to sqrt(2 ulp), 3e-4 rad in float32, and differs between a merged and a lone reduction
    alone = (sizes[each] == 1) & (update_norm > 0)  # a NaN update (a diverged model) stays NaN
    angle = torch.where(alone, 0.0, torch.arccos(cos.clamp(-1, 1)))
    return torch.stack([model_cosine, model_norm, update_norm, angle])
