"""FedProx's Synthetic(alpha, beta) generator (Li et al., arXiv:1812.06127).

Follows the public generator scripts of ``litian96/FedProx`` (``data/synthetic_*``), vectorised
and seeded (the originals set no seed):

* samples per device ``n_k = int(lognormal(4, 2)) + 50``;
* ``u_k ~ N(0, alpha)`` shared by the weight and bias means; ``B_k ~ N(0, beta)``, where alpha and
  beta are numpy *scales* (standard deviations), as in the scripts;
* ``v_k ~ N(B_k, 1)`` per coordinate, ``Sigma = diag(j^-1.2)``, ``W_k ~ N(u_k, 1)``,
  ``b_k ~ N(u_k, 1)``, ``x ~ N(v_k, Sigma)``, ``y = argmax(x W_k + b_k)``;
* ``iid=True`` is ``generate_iid.py``: ``v_k = 0`` and one global ``W, b ~ N(0, 1)``;
* each device's samples are shuffled and split 90 % train / 10 % test.

The result comes naturally partitioned: ``Dataset.natural_split`` holds one
``(train, test)`` index pair per device. Labels are very concentrated per device (a median of
about two classes); that is a property of the benchmark, not a bug.
"""

from __future__ import annotations

import numpy as np
import torch

from fl_gym.data.dataset import Dataset
from fl_gym.validation import is_int_at_least, is_non_negative, require


def synthetic(alpha: float = 1.0, beta: float = 1.0, *, iid: bool = False, num_users: int = 30,
              dimension: int = 60, num_classes: int = 10, seed: int = 0) -> Dataset:
    """Generate Synthetic(alpha, beta) (or Synthetic-IID) as a naturally partitioned data set."""
    require(is_non_negative(alpha), "alpha", alpha, "a float >= 0 (numpy scale of u_k)")
    require(is_non_negative(beta), "beta", beta, "a float >= 0 (numpy scale of B_k)")
    require(is_int_at_least(num_users, 1), "num_users", num_users, "an integer >= 1")
    require(is_int_at_least(dimension, 1), "dimension", dimension, "an integer >= 1")
    require(is_int_at_least(num_classes, 2), "num_classes", num_classes, "an integer >= 2")
    require(isinstance(iid, bool), "iid", iid, "True or False")
    require(is_int_at_least(seed, 0), "seed", seed, "an integer >= 0")
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4, 2, num_users).astype(int) + 50
    std_x = np.arange(1, dimension + 1, dtype=np.float64) ** (-1.2 / 2)
    if iid:
        mean_x = np.zeros((num_users, dimension))
        w_global = rng.normal(0, 1, (dimension, num_classes))
        b_global = rng.normal(0, 1, num_classes)
    else:
        mean_w = rng.normal(0, alpha, num_users)
        b_shift = rng.normal(0, beta, num_users)
        mean_x = rng.normal(b_shift[:, None], 1, (num_users, dimension))
    xs, ys, split = [], [], []
    offset = 0
    for k, n in enumerate(sizes):
        if iid:
            w, b = w_global, b_global
        else:
            w = rng.normal(mean_w[k], 1, (dimension, num_classes))
            b = rng.normal(mean_w[k], 1, num_classes)  # mean_b = mean_W in the scripts
        x = mean_x[k] + rng.normal(0, 1, (n, dimension)) * std_x
        y = np.argmax(x @ w + b, axis=1)
        order = rng.permutation(n)
        n_train = int(0.9 * n)
        xs.append(x[order])
        ys.append(y[order])
        split.append((offset, n_train, n))
        offset += n
    x_all = torch.tensor(np.concatenate(xs), dtype=torch.float32)
    y_all = torch.tensor(np.concatenate(ys), dtype=torch.int64)
    train_parts = [np.arange(o, o + t) for o, t, _ in split]
    test_parts = [np.arange(o + t, o + n) for o, t, n in split]
    train_idx, test_idx = np.concatenate(train_parts), np.concatenate(test_parts)
    # re-index so that each device's indices point into the train / test tensors
    train_pos = np.cumsum([0] + [len(p) for p in train_parts])
    test_pos = np.cumsum([0] + [len(p) for p in test_parts])
    natural = tuple((np.arange(train_pos[k], train_pos[k + 1]), np.arange(test_pos[k], test_pos[k + 1]))
                    for k in range(num_users))
    name = "synthetic-iid" if iid else f"synthetic({alpha:g},{beta:g})"
    return Dataset(name, x_all[train_idx], y_all[train_idx], x_all[test_idx], y_all[test_idx],
                   num_classes, natural)
