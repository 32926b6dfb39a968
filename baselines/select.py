"""Fixed policies for the selection envs (FedEntropy: Ling et al.; DDFL: Herath et al.; and simple baselines).

Every policy reads the soft labels and sizes from the observation
(:class:`~fl_gym.envs.select.spaces.SelectLayout`), has SB3's ``predict`` and accepts one
observation or a batch.

| policy | keeps | reproduces |
|---|---|---|
| :class:`MaxEntropyJudgePolicy` | FedEntropy's greedy maximum entropy judgement | FedEntropy (+ its pools) |
| :class:`SelectAllPolicy` | every candidate | FedAvg (and FedProx with its local algorithm) |
| :class:`RandomDropPolicy` | each candidate with probability ``q`` | the communication-matched control |
| :class:`ExhaustiveMaxEntropyPolicy` | the subset of largest mixture entropy | what greedy misses (m <= 12) |

On ``FLSelectPick-v0`` (who trains, before training): :class:`PoolSamplerPolicy` (FedEntropy's
epsilon-greedy draw, read from the observation's pool column), :class:`RandomPickPolicy` and
:class:`StalestPickPolicy`; the system-aware FedCS, power-of-choice and Oort are in
:mod:`fl_gym.baselines.system_aware`.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
from gymnasium import Env

from fl_gym.baselines.base import RowPolicy, env_of
from fl_gym.data.report import label_entropy
from fl_gym.envs.registry import PolicyEntry
from fl_gym.envs.select.entropy import exhaustive_max_entropy, judge
from fl_gym.envs.select.env import FLSelectEnv, FLSelectPickEnv
from fl_gym.envs.select.pools import Pools
from fl_gym.envs.select.queue_env import FLSelectQueueEnv
from fl_gym.envs.select.spaces import PickLayout, QueueLayout, SelectLayout
from fl_gym.validation import UserError, is_int_at_least, is_non_negative, require, require_fraction

L = TypeVar("L", SelectLayout, PickLayout, QueueLayout)
# each layout's env: a policy built on another env refuses it by name
ENVS: dict[type, type] = {SelectLayout: FLSelectEnv, PickLayout: FLSelectPickEnv,
                          QueueLayout: FLSelectQueueEnv}


def _layout(env: Env | L, kind: type[L], policy: RowPolicy) -> L:
    """``env`` if it is a layout of ``kind``, else the layout of ``env``, which must be that layout's env."""
    return env if isinstance(env, kind) else env_of(env, ENVS[kind], policy).layout


class SelectPolicy(RowPolicy):
    """Base: decide a keep-mask per observation, encode it for the env's action space.

    Args:
        env: a selection env (or its :class:`~fl_gym.envs.select.spaces.SelectLayout`).
    """

    def __init__(self, env: Env | SelectLayout) -> None:
        self.layout = _layout(env, SelectLayout, self)
        super().__init__(self.layout.observation_space())

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The keep-mask of the observation's rows, encoded for the action space.

        Rows of size 0 (an update lost to device behaviour, or no candidate) are never kept and
        never passed to :meth:`keep`.
        """
        soft_labels, sizes = self.layout.rows(observation)
        present = sizes > 0
        keep = np.zeros(len(sizes), bool)
        if present.any():
            keep[present] = self.keep(soft_labels[present], sizes[present])
        return self.layout.encode(keep)

    def keep(self, soft_labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """``(k,)`` bool: which of the candidates' rows to aggregate."""
        raise NotImplementedError


class MaxEntropyJudgePolicy(SelectPolicy):
    """FedEntropy (Ling et al.): the maximum entropy judgement (Algorithm 1, float64).

    Candidates are dropped greedily while one removal raises the entropy of the size-weighted
    soft-label mixture.
    """

    def keep(self, soft_labels, sizes):
        mask = np.zeros(len(sizes), bool)
        mask[judge(soft_labels, sizes)[0]] = True
        return mask


class SelectAllPolicy(SelectPolicy):
    """Every candidate uploads: FedAvg (McMahan et al., 2017) on the selection env."""

    def keep(self, soft_labels, sizes):
        return np.ones(len(sizes), bool)


class RandomDropPolicy(SelectPolicy):
    """Each candidate kept with probability ``q`` (at least one): FedEntropy's upload rate, no judgement."""

    def __init__(self, env: Env | SelectLayout, q: float = 0.8, seed: int = 0) -> None:
        super().__init__(env)
        require_fraction("q", q)
        self.q = q
        self._seed_rng(seed)

    def keep(self, soft_labels, sizes):
        mask = self.rng.random(len(sizes)) < self.q
        if not mask.any():
            mask[self.rng.integers(len(sizes))] = True
        return mask


class ExhaustiveMaxEntropyPolicy(SelectPolicy):
    """The non-empty subset of largest mixture entropy, by exhaustive search (``m <= 12``)."""

    def keep(self, soft_labels, sizes):
        mask = np.zeros(len(sizes), bool)
        mask[exhaustive_max_entropy(soft_labels, sizes)] = True
        return mask


class EntropyTrimPolicy(SelectPolicy):
    """Drop the ``k`` candidates whose soft label has the highest entropy (at least one kept).

    A practitioner's robust filter, FedEntropy's judgement turned around: a model trained on
    corrupted or random labels predicts near-uniformly, so its soft label is the most uncertain.
    """

    def __init__(self, env: Env | SelectLayout, k: int = 1) -> None:
        super().__init__(env)
        require(is_int_at_least(k, 0), "k", k, "an integer >= 0")
        self.k = k

    def keep(self, soft_labels, sizes):
        drop = np.argsort(-label_entropy(soft_labels), kind="stable")[: min(self.k, len(sizes) - 1)]
        mask = np.ones(len(sizes), bool)
        mask[drop] = False
        return mask


def uncertainty(soft_labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Each soft label's entropy as a share of the largest, ``log c``: 1 for a uniform prediction."""
    return label_entropy(soft_labels) / np.log2(num_classes)


class EntropyCutPolicy(SelectPolicy):
    """Drop every candidate whose soft label's entropy is at least ``h`` of the maximum (``log c``).

    :class:`EntropyTrimPolicy` with a threshold instead of a count: it drops as many candidates
    as look corrupted this round, none where none does. The least uncertain candidate is always kept.
    """

    def __init__(self, env: Env | SelectLayout, h: float = 0.93) -> None:
        super().__init__(env)
        require_fraction("h", h)
        self.h = h

    def keep(self, soft_labels, sizes):
        uncertain = uncertainty(soft_labels, self.layout.num_classes)
        mask = uncertain < self.h
        mask[np.argmin(uncertain)] = True
        return mask


def clean_or_all(noisy: np.ndarray) -> np.ndarray:
    """The clean clients of a ``noisy`` mask, or every client if none is clean (a round must aggregate)."""
    clean = ~np.asarray(noisy, bool)
    return clean if clean.any() else np.ones_like(clean)


class CleanKeepPolicy(SelectPolicy):
    """Privileged: keep the candidates whose labels are clean (``federation.noisy``; all if none is).

    Not a server's policy (the server cannot see label noise): the upper reference of a benchmark
    task with noisy clients.
    """

    reads_env = True

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.env = env.unwrapped

    def act(self, observation):
        """The clean candidates whose update arrived (rows of size > 0); all of those if none is clean."""
        present = self.layout.rows(observation)[1] > 0
        ids = self.env.candidate_ids
        clean = present.copy()
        clean[: len(ids)] &= ~self.env.federation.noisy[ids]
        return self.layout.encode(clean if clean.any() else present)


class PickPolicy(RowPolicy):
    """Base of the ``FLSelectPick-v0`` policies: a pick-mask per observation (client rows).

    Every policy picks among the clients the observation shows reachable (all of them without
    device behaviour), as a server would.

    Args:
        env: a pick env (or its :class:`~fl_gym.envs.select.spaces.PickLayout`, then ``m``).
        seed: the policy's own generator (it never touches the env's).
    """

    def __init__(self, env: Env | PickLayout, m: int | None = None, seed: int = 0) -> None:
        self.layout = _layout(env, PickLayout, self)
        super().__init__(self.layout.observation_space())
        n = self.layout.num_clients
        require(m is None or (is_int_at_least(m, 1) and m <= n), "m", m,
                f"None (the env's) or an integer in [1, {n}]")
        self.m = m if m is not None else env.unwrapped.m
        self._seed_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The pick-mask, encoded for the env's action (bits, or scores)."""
        return self.layout.encode(self.pick(observation))

    def pick(self, observation: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the clients that train."""
        raise NotImplementedError

    def _mask(self, ids: np.ndarray) -> np.ndarray:
        mask = np.zeros(self.layout.num_clients, bool)
        mask[ids] = True
        return mask

    def _draw_among(self, good: np.ndarray, available: np.ndarray) -> np.ndarray:
        """``m`` available clients drawn uniformly where ``good``, topped up uniformly from the rest."""
        first = self.rng.permutation(np.flatnonzero(good & available))
        rest = self.rng.permutation(np.flatnonzero(~good & available))
        return self._mask(np.concatenate([first, rest])[: self.m])

    def _lowest(self, key: np.ndarray, available: np.ndarray) -> np.ndarray:
        """The ``m`` available clients of lowest ``key`` (lowest id on ties)."""
        ranked = np.argsort(key, kind="stable")
        return self._mask(ranked[available[ranked]][: self.m])


class PoolSamplerPolicy(PickPolicy):
    """FedEntropy's epsilon-greedy draw from the pools the observation shows (Ling et al., Algorithm 2).

    ``m`` clients from the positive pool with probability ``p_positive``, else from the negative
    one, topped up from the other.
    """

    def __init__(self, env: Env | PickLayout, m: int | None = None, seed: int = 0,
                 p_positive: float | None = None
                 ) -> None:
        super().__init__(env, m, seed)
        require(p_positive is None or (is_non_negative(p_positive) and p_positive <= 1), "p_positive",
                p_positive, "None (the env's) or a float in [0, 1]")
        self.p_positive = p_positive if p_positive is not None else env.unwrapped.config.p_positive

    def pick(self, observation):
        pools = Pools(self.layout.num_clients, self.p_positive)
        pools.negative = self.layout.column(observation, "negative") > 0.5
        return pools.draw(self.m, self.rng, self.layout.available(observation)).candidates


class RandomPickPolicy(PickPolicy):
    """``m`` clients uniformly: FedAvg's client sampling."""

    def pick(self, observation):
        available = np.flatnonzero(self.layout.available(observation))
        return self._mask(self.rng.choice(available, min(self.m, len(available)), replace=False))


class StalestPickPolicy(PickPolicy):
    """The ``m`` clients whose soft label is oldest (never trained first; lowest id on ties): round robin."""

    def pick(self, observation):
        stale = self.layout.column(observation, "staleness")
        return self._lowest(-stale, self.layout.available(observation))


class ConfidentPickPolicy(PickPolicy):
    """The ``m`` clients of lowest ``H(last soft label) / log c - w * staleness`` (never trained: entropy 0).

    A practitioner's pick that avoids clients whose models stay uncertain (corrupted or random
    labels) while ``w`` keeps the rest in rotation; ``w = 0`` is greedy, a large ``w`` round robin.
    """

    def __init__(self, env: Env | PickLayout, m: int | None = None, w: float = 0.5) -> None:
        super().__init__(env, m)
        require(is_non_negative(w), "w", w, "a float >= 0")
        self.w = w

    def pick(self, observation):
        soft = self.layout.rows(observation)[:, : self.layout.num_classes]
        uncertain = uncertainty(soft, self.layout.num_classes)
        score = uncertain - self.w * self.layout.column(observation, "staleness")
        return self._lowest(score, self.layout.available(observation))


class EntropyCutPickPolicy(PickPolicy):
    """``m`` clients drawn uniformly among those whose last soft label looks clean (topped up if too few).

    :class:`EntropyCutPolicy` before training: a client is avoided once its last soft label's
    entropy reached ``h`` of ``log c``; one never trained counts as clean.
    """

    def __init__(self, env: Env | PickLayout, m: int | None = None, h: float = 0.93, seed: int = 0) -> None:
        super().__init__(env, m, seed)
        require_fraction("h", h)
        self.h = h

    def pick(self, observation):
        soft = self.layout.rows(observation)[:, : self.layout.num_classes]
        return self._draw_among(uncertainty(soft, self.layout.num_classes) < self.h,
                                self.layout.available(observation))


class CleanPickPolicy(PickPolicy):
    """Privileged: ``m`` clients drawn uniformly among those with clean labels (topped up if too few).

    The upper reference of a pick task with noisy clients (``federation.noisy``, which a server
    cannot see).
    """

    reads_env = True

    def __init__(self, env: Env, m: int | None = None, seed: int = 0) -> None:
        super().__init__(env, m, seed)
        self.env = env.unwrapped

    def pick(self, observation):
        return self._draw_among(~self.env.federation.noisy, self.layout.available(observation))


class TopLambdaEntropyPolicy(RowPolicy):
    """DDFL (Herath et al.): aggregate the ``floor(lam K)`` devices of highest label entropy (Algorithm 3).

    Reads the entropy column of the observation; ties are broken by the policy's own seeded
    permutation, so the lowest-entropy devices are dropped first.

    Args:
        env: a queue env (or its :class:`~fl_gym.envs.select.spaces.QueueLayout`).
        lam: the kept fraction ``lambda`` (paper: 0.9 or 0.8).
        seed: the tie-breaking generator's seed.
    """

    def __init__(self, env: Env | QueueLayout, lam: float = 0.9, seed: int = 0) -> None:
        require_fraction("lam", lam)
        self.layout = _layout(env, QueueLayout, self)
        super().__init__(self.layout.observation_space())
        self.lam = lam
        self._seed_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """``(K,)`` int8: the top ``floor(lam K)`` by entropy (``K`` the devices whose update arrived)."""
        arrived = self.layout.arrived(observation)
        k = int(arrived.sum())
        m = max(1, min(k, int(np.floor(self.lam * k + 1e-9))))
        entropy = np.where(arrived, self.layout.column(observation, "entropy"), -np.inf)
        tie = self.rng.permutation(self.layout.num_clients)
        order = np.lexsort((tie, -entropy))  # entropy descending, ties by the random permutation
        mask = np.zeros(self.layout.num_clients, np.int8)
        mask[order[:m]] = 1
        return mask


class AggregateAllPolicy(RowPolicy):
    """Every device is aggregated: FedAvg on the queue env (DDFL with ``lambda = 1`` with server data)."""

    def __init__(self, env: Env | QueueLayout) -> None:
        self.layout = _layout(env, QueueLayout, self)
        super().__init__(self.layout.observation_space())

    def act(self, observation: np.ndarray) -> np.ndarray:
        """All ones."""
        return np.ones(self.layout.num_clients, np.int8)


class CosTrimPolicy(RowPolicy):
    """Aggregate every device but the ``k`` whose update agrees least with the round's mean update.

    Reads ``update_cos`` (this round) or ``mean_update_cos`` (its mean over the episode so far;
    ``smooth=True``) of a queue env with ``update_stats=True``: a robust filter in the spirit of
    FedAdp's angles (Wu and Wang, 2021), against devices whose updates point elsewhere.

    Args:
        env: a queue env with ``update_stats=True`` (or its layout).
        k: devices dropped per round.
        smooth: rank by the episode's mean instead of this round's value.
    """

    def __init__(self, env: Env | QueueLayout, k: int = 3, smooth: bool = True) -> None:
        self.layout = _layout(env, QueueLayout, self)
        super().__init__(self.layout.observation_space())
        if not (isinstance(k, int) and 0 <= k < self.layout.num_clients):
            raise UserError(f"k={k!r} is out of range; allowed: an integer in [0, "
                            f"{self.layout.num_clients - 1}]")
        require(isinstance(smooth, bool), "smooth", smooth, "True or False")
        self.column = "mean_update_cos" if smooth else "update_cos"
        self.layout.index(self.column)  # a layout without update_stats has none
        self.k = k

    def act(self, observation: np.ndarray) -> np.ndarray:
        """Every device whose update arrived but the ``k`` lowest (ties to the lower id)."""
        arrived = self.layout.arrived(observation)
        keep = arrived.astype(np.int8)
        ranked = np.argsort(self.layout.column(observation, self.column), kind="stable")
        keep[ranked[arrived[ranked]][: self.k]] = 0
        return keep


class CleanQueuePolicy(RowPolicy):
    """Privileged: aggregate the devices whose labels are clean (``federation.noisy``; all if none is).

    A server cannot see label noise: the upper reference of a queue task with noisy devices.
    """

    reads_env = True

    def __init__(self, env: Env) -> None:
        self.env = env_of(env, FLSelectQueueEnv, self)
        super().__init__(env.observation_space)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """``1`` for every clean device."""
        return clean_or_all(self.env.federation.noisy).astype(np.int8)


UNIFORM, PROX, MOON = {"sampler": "uniform"}, {"local_algorithm": "fedprox"}, {"local_algorithm": "moon"}
SCAFFOLD = {"local_algorithm": "scaffold", "momentum": 0.0}  # option II needs plain SGD
SELECT, PICK, QUEUE = ("FLSelect-v0",), ("FLSelectPick-v0",), ("FLSelectQueue-v0",)
SYSTEM, SYSTEM_ROWS = "fl_gym.baselines.system_aware", {"post_filter": "all", "system_rows": True}
SERVER_DATA = {"server_data_fraction": 0.1, "allow_server_data": True, "aggregation_weights": "entropy"}
POLICIES = {
    "fedentropy": PolicyEntry(MaxEntropyJudgePolicy, "FedEntropy: maximum entropy judgement, pools sampler",
                              {"sampler": "pools"}, SELECT),
    "fedentropy-nopools": PolicyEntry(MaxEntropyJudgePolicy, "the judgement with uniform candidates (the "
                                      "paper's ablation)", UNIFORM, SELECT),
    "fedavg": PolicyEntry(SelectAllPolicy, "FedAvg: every uniform candidate uploads", UNIFORM, SELECT),
    "fedprox": PolicyEntry(SelectAllPolicy, "FedProx: FedAvg with the proximal local solver",
                           {**UNIFORM, **PROX}, SELECT),
    "fedprox+fedentropy": PolicyEntry(MaxEntropyJudgePolicy, "FedProx's local solver with FedEntropy",
                                      {"sampler": "pools", **PROX}, SELECT),
    "scaffold": PolicyEntry(SelectAllPolicy,
                            "SCAFFOLD: control variates, every uniform candidate uploads (twice "
                            "the bytes)", {**UNIFORM, **SCAFFOLD}, SELECT),
    "scaffold+fedentropy": PolicyEntry(MaxEntropyJudgePolicy, "SCAFFOLD's local solver with FedEntropy",
                                       {"sampler": "pools", **SCAFFOLD}, SELECT),
    "moon": PolicyEntry(SelectAllPolicy,
                        "MOON: model-contrastive local training, every uniform candidate uploads",
                        {**UNIFORM, **MOON}, SELECT),
    "moon+fedentropy": PolicyEntry(MaxEntropyJudgePolicy, "MOON's local solver with FedEntropy",
                                   {"sampler": "pools", **MOON}, SELECT),
    "all": PolicyEntry(SelectAllPolicy, "every candidate uploads, on the env's own sampler", {}, SELECT),
    "random-drop": PolicyEntry(RandomDropPolicy,
                               "keep each candidate with probability q (kwargs q=0.8, seed=0): "
                               "FedEntropy's upload rate without its judgement", {}, SELECT),
    "entropy-trim": PolicyEntry(EntropyTrimPolicy,
                                "drop the k most uncertain soft labels (kwarg k=1): a robust "
                                "filter against corrupted clients", {}, SELECT),
    "entropy-cut": PolicyEntry(EntropyCutPolicy,
                               "drop every candidate whose soft label's entropy is at least h "
                               "of log c (kwarg h=0.93; the least uncertain always kept)", {}, SELECT),
    "clean": PolicyEntry(CleanKeepPolicy,
                         "privileged: keep the clean-label candidates (reads federation.noisy): "
                         "an upper reference, not a server's policy", {}, SELECT),
    "exhaustive": PolicyEntry(ExhaustiveMaxEntropyPolicy, "exhaustive maximum entropy subset (m <= 12)",
                              {}, SELECT),
    "pools": PolicyEntry(PoolSamplerPolicy,
                         "FedEntropy's epsilon-greedy pool draw (kwargs seed, p_positive), "
                         "judge filter: FedEntropy", {"post_filter": "judge"}, PICK),
    "pools-all": PolicyEntry(PoolSamplerPolicy, "the pool draw, every picked client uploads",
                             {"post_filter": "all"}, PICK),
    "random-pick": PolicyEntry(RandomPickPolicy,
                               "m clients uniformly (kwarg seed), every one uploads: FedAvg",
                               {"post_filter": "all"}, PICK),
    "stalest": PolicyEntry(StalestPickPolicy, "the m stalest clients (round robin), judge filter",
                           {"post_filter": "judge"}, PICK),
    "confident-pick": PolicyEntry(ConfidentPickPolicy,
                                  "the m clients of most certain last soft label, minus w x "
                                  "staleness (kwarg w=0.5); every one uploads", {"post_filter": "all"}, PICK),
    "entropy-cut-pick": PolicyEntry(EntropyCutPickPolicy,
                                    "m clients uniformly among those whose last soft label's "
                                    "entropy is below h of log c (kwargs h=0.93, seed), every one uploads",
                                    {"post_filter": "all"}, PICK),
    "clean-pick": PolicyEntry(CleanPickPolicy,
                              "privileged: m clean-label clients uniformly (reads federation.noisy): "
                              "an upper reference", {"post_filter": "all"}, PICK),
    "fedcs": PolicyEntry(f"{SYSTEM}:FedCSPickPolicy",
                         "FedCS (Nishio and Yonetani): the fastest reachable clients whose reported time "
                         "fits the deadline, up to m; every one uploads", SYSTEM_ROWS, PICK),
    "pow-d": PolicyEntry(f"{SYSTEM}:PowerOfChoicePickPolicy",
                         "power-of-choice rpow-d (Cho et al.): d size-weighted candidates (kwargs "
                         "d=2m, seed), the m of highest last loss; every one uploads", SYSTEM_ROWS, PICK),
    "oort": PolicyEntry(f"{SYSTEM}:OortPickPolicy",
                        "Oort (Lai et al.): loss and staleness utility, penalised past the preferred "
                        "duration, with exploration (kwargs alpha=2, epsilon=0.9, seed); every one uploads",
                        SYSTEM_ROWS, PICK),
    "ddfl": PolicyEntry(TopLambdaEntropyPolicy,
                        "DDFL: 10 % server data streamed to the devices, top 90 % by label "
                        "entropy, entropy weights (kwargs lam, seed)", SERVER_DATA, QUEUE),
    "ddfl-0.8": PolicyEntry(lambda env, seed=0: TopLambdaEntropyPolicy(env, 0.8, seed),
                            "DDFL with lambda = 0.8", SERVER_DATA, QUEUE),
    "queue-all": PolicyEntry(AggregateAllPolicy,
                             "DDFL's queue and weights, every device aggregated (lambda = 1)",
                             SERVER_DATA, QUEUE),
    "fedavg-noniid": PolicyEntry(AggregateAllPolicy,
                                 "FedAvg on the one-class devices: no server data, data-size "
                                 "weights",
                                 {"server_data_fraction": 0.0, "aggregation_weights": "data_size"}, QUEUE),
    "cos-trim": PolicyEntry(CosTrimPolicy,
                            "drop the k devices whose updates agree least with the mean update "
                            "(kwargs k=3, smooth=True: the episode's mean); runs with update_stats=True",
                            {"update_stats": True}, QUEUE),
    "clean-queue": PolicyEntry(CleanQueuePolicy, "privileged: aggregate the clean-label devices (reads "
                               "federation.noisy): an upper reference", {}, QUEUE),
    "top-entropy": PolicyEntry(TopLambdaEntropyPolicy,
                               "DDFL's selection without server data (kwargs lam, seed)",
                               {"server_data_fraction": 0.0}, QUEUE),
}
