"""Partitioners: pure functions of the labels and a seeded ``numpy`` generator.

Every function returns one sorted ``int64`` index array per client, and no sample lands in two
clients. Bad parameters raise ``ValueError`` naming the parameter; constraints that a draw can
miss (a minimum client size) are redrawn a bounded number of times, then raise with advice.

Schemes (:data:`SCHEMES`, one frozen config class each): ``iid``, ``dirichlet``, ``shards``,
``classes``, ``one_class``, ``mixed``, ``power_law`` and ``natural`` (the data set's own split,
``synthetic``). Build one by name with :func:`partition_scheme`, which refuses a knob the scheme
does not take, and split with :func:`partition`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from fl_gym.validation import (
    UserError,
    as_array,
    is_int_at_least,
    is_positive,
    plain_fields,
    require,
    require_choice,
)


@dataclass(frozen=True)
class PartitionScheme:
    """Base of the partition schemes: one frozen config per scheme, validated on construction.

    A scheme holds only its own knobs, so a knob that does not apply to it cannot be set
    (:func:`partition_scheme` says which it takes); :func:`partition` cuts the training indices
    with its ``_split``.

    Attributes:
        kind: the scheme's name in :data:`SCHEMES`.
        fixed_count: what client count the scheme takes where that rules out a range of counts
            (``num_clients_range``); empty where any count its data can serve will do.
    """

    kind: ClassVar[str] = ""
    fixed_count: ClassVar[str] = ""

    def __post_init__(self) -> None:
        plain_fields(self)  # numpy scalars held as Python's: np.True_ is a bool here as in gym.make
        self._check()

    def _check(self) -> None:
        """Refuse a knob out of range, by name (a scheme without knobs has none to check)."""

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        """One sorted index array per client (``labels``: the training labels to split)."""
        raise NotImplementedError

    def max_clients(self, num_samples: int) -> int:
        """The most clients a split of ``num_samples`` can serve by size alone.

        Each client holds at least one sample, or ``min_size`` where the scheme has one; some schemes
        ask more of the count (``one_class`` a multiple of the classes), checked when they split.
        """
        return num_samples // getattr(self, "min_size", 1)


@dataclass(frozen=True)
class IID(PartitionScheme):
    """A random equal split (McMahan et al., 2017)."""

    kind: ClassVar[str] = "iid"

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return iid_split(len(labels), num_clients, rng)


@dataclass(frozen=True)
class Dirichlet(PartitionScheme):
    """Per class, shares ``q_c ~ Dir(alpha * 1_K)`` (Hsu et al., arXiv:1909.06335).

    Attributes:
        alpha: concentration; smaller means more label skew.
        balance: the MOON/FedEntropy rule that a client holding ``>= N/K`` samples gets no more.
        min_size: smallest allowed client; draws are repeated until every client has it.
        max_attempts: draws before giving up on ``min_size``.
    """

    kind: ClassVar[str] = "dirichlet"
    alpha: float = 0.5
    balance: bool = False
    min_size: int = 10
    max_attempts: int = 100

    def _check(self) -> None:
        require(is_positive(self.alpha), "alpha", self.alpha, "a float > 0")
        require(isinstance(self.balance, bool), "balance", self.balance, "True or False")
        require(is_int_at_least(self.min_size, 1), "min_size", self.min_size, "an integer >= 1")
        require(is_int_at_least(self.max_attempts, 1), "max_attempts", self.max_attempts, "an integer >= 1")

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return dirichlet_split(labels, num_clients, self, rng, num_classes)


@dataclass(frozen=True)
class Shards(PartitionScheme):
    """McMahan's pathological split: sort by label, cut ``K * s`` equal shards, deal ``s`` to each client.

    Attributes:
        shards_per_client: ``s`` (a client may get two shards of one class).
    """

    kind: ClassVar[str] = "shards"
    shards_per_client: int = 2

    def _check(self) -> None:
        require(is_int_at_least(self.shards_per_client, 1), "shards_per_client", self.shards_per_client,
                "an integer >= 1")

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return shards_split(labels, num_clients, self.shards_per_client, rng)


@dataclass(frozen=True)
class Classes(PartitionScheme):
    """Each client picks ``k`` random classes and draws ``n`` samples from what is left (FedAdp's "x-class").

    Attributes:
        classes_per_client: ``k``.
        samples_per_client: ``n``; None = ``N // K``.
    """

    kind: ClassVar[str] = "classes"
    classes_per_client: int = 2
    samples_per_client: int | None = None

    def _check(self) -> None:
        require(is_int_at_least(self.classes_per_client, 1), "classes_per_client", self.classes_per_client,
                "an integer >= 1")
        require(self.samples_per_client is None or is_int_at_least(self.samples_per_client, 1),
                "samples_per_client", self.samples_per_client, "None or an integer >= 1")

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return self._classes(labels, num_clients, rng, num_classes, 0)

    def _classes(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int,
                 num_iid: int) -> list[np.ndarray]:
        n = self.samples_per_client or len(labels) // num_clients
        return classes_split(labels, num_clients, self.classes_per_client, n, rng, num_iid, num_classes)


@dataclass(frozen=True)
class Mixed(Classes):
    """``num_iid`` IID clients (lowest ids), then ``k``-class ones; ``n`` each (FedAdp's "a IID + b non-IID").

    Attributes:
        num_iid: the IID clients.
    """

    kind: ClassVar[str] = "mixed"
    num_iid: int = 0

    def _check(self) -> None:
        super()._check()
        require(is_int_at_least(self.num_iid, 0), "num_iid", self.num_iid, "an integer >= 0")

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        require(self.num_iid <= num_clients, "num_iid", self.num_iid, f"at most num_clients={num_clients}")
        return self._classes(labels, num_clients, rng, num_classes, self.num_iid)


@dataclass(frozen=True)
class OneClass(PartitionScheme):
    """Client ``k`` holds class ``k mod C`` only (Herath et al.'s DDFL setup)."""

    kind: ClassVar[str] = "one_class"
    fixed_count: ClassVar[str] = "a multiple of the number of classes"

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return one_class_split(labels, num_clients, rng, num_classes)


@dataclass(frozen=True)
class PowerLaw(PartitionScheme):
    """IID labels, sizes ``min_size + Pareto(exponent)`` shares of the rest.

    Attributes:
        exponent: Pareto shape; smaller is more skewed.
        min_size: smallest client.
    """

    kind: ClassVar[str] = "power_law"
    exponent: float = 1.5
    min_size: int = 10

    def _check(self) -> None:
        require(is_positive(self.exponent), "exponent", self.exponent, "a float > 0")
        require(is_int_at_least(self.min_size, 1), "min_size", self.min_size, "an integer >= 1")

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        return power_law_split(len(labels), num_clients, self, rng)


@dataclass(frozen=True)
class Natural(PartitionScheme):
    """The data set's own split (``synthetic``): :attr:`fl_gym.data.dataset.Dataset.natural_split`."""

    kind: ClassVar[str] = "natural"
    fixed_count: ClassVar[str] = "the data set's number of devices"

    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
               ) -> list[np.ndarray]:
        raise UserError("partition='natural' comes from the data set; use Dataset.natural_split")


SCHEMES: dict[str, type[PartitionScheme]] = {
    cls.kind: cls for cls in (IID, Dirichlet, Shards, Classes, OneClass, Mixed, PowerLaw, Natural)}
KINDS = tuple(SCHEMES)
# every scheme's knobs, the flat names gym.make takes them by
SCHEME_FIELDS = tuple(dict.fromkeys(f.name for cls in SCHEMES.values() for f in fields(cls)))


def scheme_fields(kind: str) -> tuple[str, ...]:
    """The knobs of scheme ``kind`` (none for an unknown one)."""
    return tuple(f.name for f in fields(SCHEMES[kind])) if kind in SCHEMES else ()


def partition_scheme(kind: str, **knobs: Any) -> PartitionScheme:
    """The scheme ``kind`` with ``knobs``; a knob the scheme does not take is an error naming its knobs."""
    require_choice("partition", kind, KINDS)
    own = scheme_fields(kind)
    for name, value in knobs.items():
        if name not in own:
            raise UserError(f"{name}={value!r} does not apply to partition={kind!r}; allowed: "
                            f"{', '.join(own) if own else 'no partition arguments'}")
    return SCHEMES[kind](**knobs)


def partition(labels: np.ndarray, num_clients: int, scheme: PartitionScheme, rng: np.random.Generator,
              num_classes: int | None = None) -> list[np.ndarray]:
    """Split sample indices ``0..len(labels)-1`` across ``num_clients`` clients by ``scheme``."""
    labels = class_ids(labels)
    _require_clients(num_clients, len(labels))
    return scheme._split(labels, num_clients, rng, class_count(num_classes, labels))


def class_ids(labels: object, name: str = "labels") -> np.ndarray:
    """``labels`` as a non-empty 1-D integer array of class ids >= 0, or a ``ValueError`` naming ``name``."""
    allowed = "a non-empty 1-D integer array of class ids >= 0, one per sample"
    ids = as_array(name, labels, allowed)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or not len(ids) or ids.min() < 0:
        raise UserError(f"{name} has shape {ids.shape} and dtype {ids.dtype}; allowed: {allowed}")
    return ids


def class_count(num_classes: int | None, *labels: np.ndarray) -> int:
    """``num_classes``, default one past the largest of ``labels`` (fewer would drop a class silently)."""
    least = max(int(ids.max()) for ids in labels) + 1
    require(num_classes is None or is_int_at_least(num_classes, least), "num_classes", num_classes,
            f"an integer >= {least}, one past the largest label (or None: {least})")
    return least if num_classes is None else num_classes


def _require_min_size(cfg: Dirichlet | PowerLaw, num_clients: int, num_samples: int) -> None:
    """A ``min_size`` that every one of ``num_clients`` clients can get from ``num_samples``."""
    require(num_clients <= cfg.max_clients(num_samples), "min_size", cfg.min_size,
            f"at most len(labels)/num_clients = {num_samples // num_clients}")


def _require_clients(num_clients: object, num_samples: int) -> None:
    """A client count the split can serve: at least one, at most one client per sample.

    Checked by :func:`partition` and by each ``*_split`` helper, which users may call directly.
    """
    require(is_int_at_least(num_samples, 1), "num_samples", num_samples, "an integer >= 1")
    require(is_int_at_least(num_clients, 1) and num_clients <= num_samples, "num_clients", num_clients,
            f"an integer from 1 to the number of samples ({num_samples})")


def one_class_split(labels: np.ndarray, num_clients: int, rng: np.random.Generator, num_classes: int
                    ) -> list[np.ndarray]:
    """DDFL's 1-class split: client ``k`` holds class ``k mod C`` only (Herath et al.'s DDFL setup).

    Each class's samples are shuffled and cut into ``K / C`` near-equal shards; ``K`` must be a
    multiple of ``C``.
    """
    labels = class_ids(labels)
    num_classes = class_count(num_classes, labels)
    _require_clients(num_clients, len(labels))
    require(num_clients % num_classes == 0, "num_clients", num_clients,
            f"a multiple of the number of classes ({num_classes}) for partition 'one_class'")
    per_class = num_clients // num_classes
    counts = np.bincount(labels, minlength=num_classes)
    scarce = int(counts.argmin())  # a client of a class with fewer samples than clients would hold none
    require(counts[scarce] >= per_class, "num_clients", num_clients,
            f"a multiple of the number of classes ({num_classes}) for partition 'one_class', with a sample "
            f"for each of a class's clients (class {scarce} has {counts[scarce]} for {per_class})")
    shards = {c: np.array_split(rng.permutation(np.flatnonzero(labels == c)), per_class)
              for c in range(num_classes)}
    return [np.sort(shards[k % num_classes][k // num_classes]).astype(np.int64) for k in range(num_clients)]


def iid_split(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random split into ``num_clients`` parts whose sizes differ by at most one."""
    _require_clients(num_clients, num_samples)
    return [np.sort(p) for p in np.array_split(rng.permutation(num_samples), num_clients)]


def dirichlet_split(labels: np.ndarray, num_clients: int, cfg: Dirichlet, rng: np.random.Generator,
                    num_classes: int) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) shares; redraw until every client has ``min_size`` samples."""
    labels = class_ids(labels)
    num_classes = class_count(num_classes, labels)
    _require_clients(num_clients, len(labels))
    _require_min_size(cfg, num_clients, len(labels))
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    for _ in range(cfg.max_attempts):
        parts = _dirichlet_once(by_class, num_clients, cfg, rng, len(labels))
        if min(len(p) for p in parts) >= cfg.min_size:
            return parts
    raise UserError(f"dirichlet_split: no draw gave every client >= min_size={cfg.min_size} samples in "
                     f"{cfg.max_attempts} tries with alpha={cfg.alpha} and num_clients={num_clients}; "
                     "raise alpha, lower min_size or use fewer clients")


def _dirichlet_once(by_class: list[np.ndarray], num_clients: int, cfg: Dirichlet,
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
    labels = class_ids(labels)
    _require_clients(num_clients, len(labels))
    require(is_int_at_least(shards_per_client, 1), "shards_per_client", shards_per_client, "an integer >= 1")
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
    labels = class_ids(labels)
    _require_clients(num_clients, len(labels))
    for name, value, low in (("classes_per_client", classes_per_client, 1),
                             ("samples_per_client", samples_per_client, 1), ("num_iid", num_iid, 0)):
        require(is_int_at_least(value, low), name, value, f"an integer >= {low}")
    num_classes = class_count(num_classes, labels)
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


def power_law_split(num_samples: int, num_clients: int, cfg: PowerLaw,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """IID labels with sizes ``min_size + share_k * rest``, ``share_k`` from Pareto(exponent) draws."""
    _require_clients(num_clients, num_samples)
    _require_min_size(cfg, num_clients, num_samples)
    rest = num_samples - num_clients * cfg.min_size
    draws = rng.pareto(cfg.exponent, num_clients) + 1.0
    if not np.isfinite(draws.sum()):  # a tiny exponent draws beyond float range: the largest share the rest
        draws = (draws == draws.max()).astype(np.float64)
    sizes = cfg.min_size + np.floor(rest * draws / draws.sum()).astype(int)
    cuts = np.cumsum(sizes)[:-1]
    used = rng.permutation(num_samples)[: sizes.sum()]
    return [np.sort(p).astype(np.int64) for p in np.split(used, cuts)]


def matched_test_split(train_parts: list[np.ndarray], train_labels: np.ndarray, test_labels: np.ndarray,
                       rng: np.random.Generator, num_classes: int | None = None) -> list[np.ndarray]:
    """Split the test set so each client's test labels follow its training labels.

    Class ``c``'s test samples go to clients in proportion to their share of class ``c`` in
    training (the ``train+matched_test`` protocol of Chen et al.; with a Dirichlet split these are the
    realised ``q_c``). Every test sample of a class some client trains on lands in exactly one client.
    """
    train_labels, test_labels = class_ids(train_labels, "train_labels"), class_ids(test_labels, "test_labels")
    num_classes = class_count(num_classes, train_labels, test_labels)
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
    """Cut each client's part into (train, local test), ``fraction`` of it to test.

    At least one sample to test, but a one-sample part keeps its sample to train (none to test).
    """
    require(0 < fraction < 1, "local_test_fraction", fraction, "a float in (0, 1)")
    train, test = [], []
    for p in parts:
        shuffled = rng.permutation(p)
        n_test = max(1, math.floor(fraction * len(p))) if len(p) > 1 else 0
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return train, test


def stratified_subset(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` sorted indices whose class counts follow ``labels``' (largest remainders), drawn by rng."""
    labels = np.asarray(labels)
    if not 1 <= size < len(labels):
        raise UserError(f"size={size} is out of range; allowed: 1..{len(labels) - 1} (the set has "
                        f"{len(labels)})")
    classes, counts = np.unique(labels, return_counts=True)
    share = size * counts / counts.sum()
    take = np.floor(share).astype(np.int64)
    take[np.argsort(-(share - take), kind="stable")[: size - take.sum()]] += 1
    picked = [rng.choice(np.flatnonzero(labels == c), n, replace=False)
              for c, n in zip(classes, take, strict=True)]
    return np.sort(np.concatenate(picked))
