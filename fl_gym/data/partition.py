"""Partitioners: pure functions of the labels and a seeded ``numpy`` generator.

Every function returns one sorted ``int64`` index array per client, and no sample lands in two
clients. Bad parameters raise ``ValueError`` naming the parameter; constraints that a draw can
miss (a minimum client size) are redrawn a bounded number of times, then raise with advice.

Schemes:

* ``iid``: a random equal split (McMahan et al., 2017).
* ``dirichlet``: per class, shares ``q_c ~ Dir(alpha * 1_K)`` (Hsu et al., arXiv:1909.06335);
  ``balance=True`` adds the MOON/FedEntropy rule that a client holding ``>= N/K`` samples gets no
  more.
* ``shards``: sort by label, cut ``K * s`` equal shards, give each client ``s`` random shards
  (McMahan's pathological split; a client may get two shards of one class).
* ``classes``: each client picks ``k`` random classes and draws ``n`` samples from what is left
  of them (FedAdp's "x-class non-IID" node).
* ``mixed``: ``num_iid`` IID clients, then ``K - num_iid`` ``k``-class clients, all of size ``n``
  (FedAdp's "a IID + b non-IID(x)"); IID clients get the lowest ids.
* ``power_law``: IID labels, sizes ``min_size + Pareto(exponent)`` shares of the rest.
* ``natural``: the data set's own split (``synthetic``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_gym.validation import UserError, is_int_at_least, is_positive, require, require_choice

KINDS = ("iid", "dirichlet", "shards", "classes", "one_class", "mixed", "power_law", "natural")


@dataclass(frozen=True)
class PartitionConfig:
    """How training samples are split across clients.

    Attributes:
        kind: one of :data:`KINDS`.
        alpha: Dirichlet concentration (``dirichlet``); smaller means more label skew.
        balance: cap a client at ``N/K`` samples while drawing (``dirichlet``).
        min_size: smallest allowed client (``dirichlet``, ``power_law``).
        shards_per_client: shards per client (``shards``).
        classes_per_client: classes per non-IID client (``classes``, ``mixed``).
        samples_per_client: samples per client (``classes``, ``mixed``); None = ``N // K``.
        num_iid: IID clients first (``mixed``).
        exponent: Pareto shape of the sizes (``power_law``); smaller is more skewed.
        max_attempts: redraws before giving up on ``min_size``.
    """

    kind: str = "dirichlet"
    alpha: float = 0.5
    balance: bool = False
    min_size: int = 10
    shards_per_client: int = 2
    classes_per_client: int = 2
    samples_per_client: int | None = None
    num_iid: int = 0
    exponent: float = 1.5
    max_attempts: int = 100

    def __post_init__(self) -> None:
        require_choice("partition.kind", self.kind, KINDS)
        require(is_positive(self.alpha), "alpha", self.alpha, "a float > 0")
        require(is_int_at_least(self.min_size, 1), "min_size", self.min_size, "an integer >= 1")
        require(is_int_at_least(self.shards_per_client, 1), "shards_per_client", self.shards_per_client,
                "an integer >= 1")
        require(is_int_at_least(self.classes_per_client, 1), "classes_per_client",
                self.classes_per_client, "an integer >= 1")
        require(self.samples_per_client is None or is_int_at_least(self.samples_per_client, 1),
                "samples_per_client", self.samples_per_client, "None or an integer >= 1")
        require(is_int_at_least(self.num_iid, 0), "num_iid", self.num_iid, "an integer >= 0")
        require(is_positive(self.exponent), "exponent", self.exponent, "a float > 0")
        require(is_int_at_least(self.max_attempts, 1), "max_attempts", self.max_attempts, "an integer >= 1")


def partition(labels: np.ndarray, num_clients: int, cfg: PartitionConfig, rng: np.random.Generator,
              num_classes: int | None = None) -> list[np.ndarray]:
    """Split sample indices ``0..len(labels)-1`` across ``num_clients`` clients by ``cfg``."""
    labels = np.asarray(labels)
    num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
    require(is_int_at_least(num_clients, 1), "num_clients", num_clients, "an integer >= 1")
    require(num_clients <= len(labels), "num_clients", num_clients,
            f"at most the number of samples ({len(labels)})")
    if cfg.kind == "iid":
        return iid_split(len(labels), num_clients, rng)
    if cfg.kind == "dirichlet":
        return dirichlet_split(labels, num_clients, cfg, rng, num_classes)
    if cfg.kind == "shards":
        return shards_split(labels, num_clients, cfg.shards_per_client, rng)
    if cfg.kind == "power_law":
        return power_law_split(len(labels), num_clients, cfg, rng)
    if cfg.kind == "one_class":
        return one_class_split(labels, num_clients, rng, num_classes)
    if cfg.kind in ("classes", "mixed"):
        num_iid = cfg.num_iid if cfg.kind == "mixed" else 0
        require(num_iid <= num_clients, "num_iid", num_iid, f"at most num_clients={num_clients}")
        n = cfg.samples_per_client or len(labels) // num_clients
        return classes_split(labels, num_clients, cfg.classes_per_client, n, rng, num_iid, num_classes)
    raise UserError("partition.kind='natural' comes from the data set; use Dataset.natural_split")


def one_class_split(labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
                    ) -> list[np.ndarray]:
    """DDFL's 1-class split: client ``k`` holds class ``k mod C`` only (Herath et al.'s DDFL setup).

    Each class's samples are shuffled and cut into ``K / C`` near-equal shards; ``K`` must be a
    multiple of ``C``.
    """
    require(num_clients % num_classes == 0, "num_clients", num_clients,
            f"a multiple of the number of classes ({num_classes}) for partition 'one_class'")
    per_class = num_clients // num_classes
    shards = {c: np.array_split(rng.permutation(np.flatnonzero(labels == c)), per_class) for c in range(num_classes)}
    return [np.sort(shards[k % num_classes][k // num_classes]).astype(np.int64) for k in range(num_clients)]


def iid_split(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random split into ``num_clients`` parts whose sizes differ by at most one."""
    return [np.sort(p) for p in np.array_split(rng.permutation(num_samples), num_clients)]


def dirichlet_split(labels: np.ndarray, num_clients: int, cfg: PartitionConfig, rng: np.random.Generator,
                    num_classes: int) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) shares; redraw until every client has ``min_size`` samples."""
    require(num_clients * cfg.min_size <= len(labels), "min_size", cfg.min_size,
            f"at most len(labels)/num_clients = {len(labels) // num_clients}")
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    for _ in range(cfg.max_attempts):
        parts = _dirichlet_once(by_class, num_clients, cfg, rng, len(labels))
        if min(len(p) for p in parts) >= cfg.min_size:
            return parts
    raise UserError(f"dirichlet_split: no draw gave every client >= min_size={cfg.min_size} samples in "
                     f"{cfg.max_attempts} tries with alpha={cfg.alpha} and num_clients={num_clients}; "
                     "raise alpha, lower min_size or use fewer clients")


def _dirichlet_once(by_class: list[np.ndarray], num_clients: int, cfg: PartitionConfig,
                    rng: np.random.Generator, total: int) -> list[np.ndarray]:
    chunks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    held = np.zeros(num_clients)
    for members in by_class:
        if len(members) == 0:
            continue
        q = rng.dirichlet(np.full(num_clients, cfg.alpha))
        if cfg.balance:
            q = q * (held < total / num_clients)
            q = q / q.sum() if q.sum() > 0 else np.full(num_clients, 1 / num_clients)
        cuts = (np.cumsum(q)[:-1] * len(members)).astype(int)
        for k, piece in enumerate(np.split(rng.permutation(members), cuts)):
            chunks[k].append(piece)
            held[k] += len(piece)
    return [np.sort(np.concatenate(c)).astype(np.int64) for c in chunks]


def shards_split(labels: np.ndarray, num_clients: int, shards_per_client: int,
                 rng: np.random.Generator) -> list[np.ndarray]:
    """McMahan's shards: sort by label, cut equal shards, deal ``shards_per_client`` to each."""
    num_shards = num_clients * shards_per_client
    require(num_shards <= len(labels), "shards_per_client", shards_per_client,
            f"at most len(labels)/num_clients = {len(labels) // num_clients}")
    order = np.argsort(labels, kind="stable")
    shard_len = len(labels) // num_shards
    shards = order[: num_shards * shard_len].reshape(num_shards, shard_len)
    dealt = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(shards[d].ravel()).astype(np.int64) for d in dealt]


def classes_split(labels: np.ndarray, num_clients: int, classes_per_client: int, samples_per_client: int,
                  rng: np.random.Generator, num_iid: int = 0, num_classes: int | None = None,
                  ) -> list[np.ndarray]:
    """Clients ``< num_iid`` draw from every class, the rest from ``classes_per_client`` random classes.

    Samples are drawn without replacement from what earlier clients left, so clients are
    disjoint. Class sets are drawn uniformly among the classes that still hold at least
    ``ceil(n / classes_per_client)`` free samples (so two one-class clients may share a class
    while it lasts); when too few classes qualify, ``ValueError`` says what to change.
    """
    num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
    require(classes_per_client <= num_classes, "classes_per_client", classes_per_client,
            f"at most the number of classes ({num_classes})")
    require(num_clients * samples_per_client <= len(labels), "samples_per_client", samples_per_client,
            f"at most len(labels)/num_clients = {len(labels) // num_clients}")
    free = np.ones(len(labels), dtype=bool)
    parts = []
    for k in range(num_clients):
        if k < num_iid:
            pool = np.flatnonzero(free)
        else:
            left = np.bincount(labels[free], minlength=num_classes)
            eligible = np.flatnonzero(left >= math.ceil(samples_per_client / classes_per_client))
            if len(eligible) < classes_per_client:
                eligible = np.arange(num_classes)  # fails below with the error that says what to change
            chosen = rng.choice(eligible, size=classes_per_client, replace=False)
            pool = np.flatnonzero(free & np.isin(labels, chosen))
        if len(pool) < samples_per_client:
            raise UserError(f"classes_split: client {k} needs samples_per_client={samples_per_client} but "
                             f"only {len(pool)} samples of its classes are left; lower samples_per_client "
                             "or raise classes_per_client")
        take = rng.choice(pool, size=samples_per_client, replace=False)
        free[take] = False
        parts.append(np.sort(take).astype(np.int64))
    return parts


def power_law_split(num_samples: int, num_clients: int, cfg: PartitionConfig,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """IID labels with sizes ``min_size + share_k * rest``, ``share_k`` from Pareto(exponent) draws."""
    rest = num_samples - num_clients * cfg.min_size
    require(rest >= 0, "min_size", cfg.min_size, f"at most len(labels)/num_clients = {num_samples // num_clients}")
    draws = rng.pareto(cfg.exponent, num_clients) + 1.0
    sizes = cfg.min_size + np.floor(rest * draws / draws.sum()).astype(int)
    cuts = np.cumsum(sizes)[:-1]
    used = rng.permutation(num_samples)[: sizes.sum()]
    return [np.sort(p).astype(np.int64) for p in np.split(used, cuts)]


def matched_test_split(train_parts: list[np.ndarray], train_labels: np.ndarray, test_labels: np.ndarray,
                       rng: np.random.Generator, num_classes: int | None = None) -> list[np.ndarray]:
    """Split the test set so each client's test labels follow its training labels.

    Class ``c``'s test samples go to clients in proportion to their share of class ``c`` in
    training (the ``train+matched_test`` protocol of Chen et al.; with a Dirichlet split these are the realised
    ``q_c``). Every test sample of a class some client trains on lands in exactly one client.
    """
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1 if num_classes is None else num_classes
    counts = np.stack([np.bincount(train_labels[p], minlength=num_classes) for p in train_parts])  # (K, C)
    chunks: list[list[np.ndarray]] = [[] for _ in train_parts]
    for c in range(num_classes):
        total = counts[:, c].sum()
        members = rng.permutation(np.flatnonzero(test_labels == c))
        if total == 0 or len(members) == 0:
            continue
        cuts = np.floor(np.cumsum(counts[:, c])[:-1] / total * len(members)).astype(int)
        for k, piece in enumerate(np.split(members, cuts)):
            chunks[k].append(piece)
    return [np.sort(np.concatenate(c)).astype(np.int64) if c else np.zeros(0, np.int64) for c in chunks]


def holdout_split(parts: list[np.ndarray], fraction: float, rng: np.random.Generator
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Cut each client's part into (train, local test), ``fraction`` of it (at least 1) to test."""
    require(0 < fraction < 1, "local_test_fraction", fraction, "a float in (0, 1)")
    train, test = [], []
    for p in parts:
        shuffled = rng.permutation(p)
        n_test = max(1, math.floor(fraction * len(p))) if len(p) > 1 else 0
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return train, test


def stratified_subset(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` sorted indices whose class counts follow ``labels``' (largest remainders), drawn with ``rng``."""
    labels = np.asarray(labels)
    if not 1 <= size < len(labels):
        raise UserError(f"size={size} is out of range; allowed: 1..{len(labels) - 1} (the set has {len(labels)})")
    classes, counts = np.unique(labels, return_counts=True)
    share = size * counts / counts.sum()
    take = np.floor(share).astype(np.int64)
    take[np.argsort(-(share - take), kind="stable")[: size - take.sum()]] += 1
    picked = [rng.choice(np.flatnonzero(labels == c), n, replace=False) for c, n in zip(classes, take, strict=True)]
    return np.sort(np.concatenate(picked))
