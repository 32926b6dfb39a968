"""The federation: global models, client data views, device profiles, the clock, the round in phases.

A round runs in four phases, each a method, with a typed record carrying the pending round
between them (:mod:`fl_gym.records`); an env decides at the phase where its method decides:

1. :meth:`Federation.open_round` draws what the server knows before it decides: the round's
   candidates, the device load, the probe times (-> :class:`~fl_gym.records.OpenedRound`);
2. :meth:`Federation.train_round` times and trains the clients a plan selects, with their
   per-client statistics (losses, soft labels, update norms and angles to the mean update)
   (-> :class:`~fl_gym.records.TrainedRound`);
3. :meth:`Federation.finish_round` aggregates the trained updates that enter, with their weights,
   through the server optimiser, advances the clock and evaluates the global models
   (-> :class:`~fl_gym.records.RoundReport`).

:meth:`Federation.run_round` composes them for plain FL::

    fed = Federation(FederationConfig(dataset="digits", num_clients=10))
    for _ in range(20):
        report = fed.run_round(RoundPlan.make(10, lr=0.05, epochs=2))
    print(report.accuracy, report.clock)

Every random draw (candidates, load, batches, initialisation) comes from the federation's own
generators; nothing random leaves it and comes back. With ``train=False`` only the clock runs
(fast, for agents whose rewards are timing-only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple, Protocol, cast

import numpy as np
import torch

from fl_gym.aggregation import ServerOptimizer, aggregation_weights
from fl_gym.behaviour import dropout_probability, finished_share, next_availability, next_link
from fl_gym.clock import Clock, DeviceProfiles, RoundLoad
from fl_gym.config import FederationConfig
from fl_gym.data.catalog import TORCHVISION, DatasetNotFoundError
from fl_gym.data.dataset import Dataset
from fl_gym.data.datasets import label_only, load_dataset
from fl_gym.data.noise import noisy_view, training_rows
from fl_gym.data.partition import holdout_split, matched_test_split, partition, stratified_subset
from fl_gym.data.report import PartitionReport
from fl_gym.engine.algorithms import LocalAlgorithm
from fl_gym.engine.allocator import keep_freed_memory
from fl_gym.engine.batcher import (
    AverageRequest,
    CohortBatcher,
    EvalRequest,
    ProbeRequest,
    Request,
    StatsRequest,
    TrainRequest,
)
from fl_gym.engine.evaluate import EvalResult
from fl_gym.engine.losses import MutualDistillation, cross_entropy
from fl_gym.engine.pool import BufferPool
from fl_gym.engine.probe import Probe
from fl_gym.engine.schedule import BatchDraw, local_steps
from fl_gym.engine.trainer import Member, TrainResult
from fl_gym.engine.updates import STATISTICS
from fl_gym.models.architecture import Architecture, Stack
from fl_gym.models.zoo import build_model
from fl_gym.records import (
    Cohort,
    CompanionReport,
    LocalStats,
    OpenedRound,
    RoundPlan,
    RoundReport,
    TrainedRound,
    as_mask,
    check_aggregation,
    is_mask,
)
from fl_gym.traces import PlayedDevices, assign_devices, load_availability
from fl_gym.validation import (
    MAX_SCHEDULE,
    UserError,
    as_array,
    is_int_at_least,
    is_non_negative,
    one_line,
    require,
    require_mapping,
)

LOCAL, LITE = MutualDistillation.local, MutualDistillation.lite  # a companion pair's roles, named by its loss
MODEL = "model"
BEHAVIOUR_STREAM = 1 << 20  # the spawn key of the behaviour stream: far from the children reset spawns
# a round's (K,) epochs, probe, training, compute (probe + training) and download seconds per client
Times = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class GlobalEvaluation(NamedTuple):
    """The global models on the test set's evaluation samples.

    Attributes:
        accuracy: ``(M,)`` each global model's accuracy (NaN where not evaluated).
        loss: ``(M,)`` each one's mean cross-entropy.
        companion_accuracy: the global companion's accuracy (NaN without one).
        companion_loss: its mean cross-entropy.
    """

    accuracy: np.ndarray
    loss: np.ndarray
    companion_accuracy: float = math.nan
    companion_loss: float = math.nan


class Population(NamedTuple):
    """A trained population (a model size, or the companion) whose aggregated updates enter its model.

    Attributes:
        member: its trained rows.
        clients: ``(k,)`` the client id of each row.
        keep: ``(k,)`` bool: the rows aggregated.
        weights: the aggregated rows' weights, in order.
    """

    member: Member
    clients: np.ndarray
    keep: np.ndarray
    weights: np.ndarray

    @property
    def aggregated(self) -> np.ndarray:
        """The aggregated clients' ids."""
        return self.clients[self.keep]


class RemoteClients(Protocol):
    """Where the clients' side of a round runs when it runs outside this process (a real federation).

    The server side (sampling, the clock, update statistics, aggregation, evaluation) stays in the
    :class:`Federation`; local training and probing go to the clients, which answer with what a
    client computes on its own data. :mod:`fl_gym.integrations.flower` is one.
    """

    def train_clients(self, fed: Federation, plan: RoundPlan, steps: np.ndarray, key: int
                      ) -> tuple[LocalStats, Cohort | None]:
        """What :meth:`Federation.train_clients` returns, from the clients (batch streams from ``key``)."""

    def probe(self, fed: Federation, clients: np.ndarray, models: torch.Tensor, key: int) -> Probe:
        """What :meth:`Federation.probe` returns, from the clients (batches from ``key``)."""

    def round_finished(self, report: RoundReport) -> None:
        """The round's outcome (which updates entered, with which weights), for the clients' logs."""


def first_available(order: np.ndarray, available: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` ids of ``order`` that are ``available`` (fewer if fewer are).

    It reads a head of ``order`` a few times ``k`` long, widened only when too few there are
    available, so a round of ``k`` among many clients costs ``O(k)``, not ``O(K)``.
    """
    span = 2 * k
    while True:
        head = order[:span]
        found = head[available[head]]
        if len(found) >= k or span >= len(order):
            return found[:k]
        span *= 4


class Federation:
    """A simulated federation built from one :class:`~fl_gym.config.FederationConfig`.

    Args:
        config: the validated configuration.
        scenario_seed: seeds the static scenario (partition, local test splits, device profiles)
            and, until :meth:`reset` is called with another seed, the episode.
        dataset: an already loaded data set to use instead of loading ``config.dataset``. A
            timing-only federation (``train=False``) on a torchvision data set never downloads:
            it uses the files' labels if they are present, else the nominal class counts
            (:func:`fl_gym.data.datasets.label_only`).

    Attributes:
        server_indices: training samples the server holds (``server_data_fraction``; empty by default).
        sizes: ``(K,)`` training samples per client.
        histogram: ``(K, C)`` training labels per client and class (the clean labels: a noisy
            client's corruption shows only in how it trains).
        scenario_seed: the seed the static scenario was drawn from.
        noisy: ``(K,)`` bool, read-only: the clients whose training labels are corrupted
            (``noisy_clients``, random or flipped by ``label_noise``); what a server cannot see, for
            privileged reference policies.
        label_entropy: ``(K,)`` entropy of each client's training labels, in bits.
        partition_report: the :class:`~fl_gym.data.PartitionReport` of the current partition
            (``print(fed.partition_report.table())``: a row per client).
        profiles: static device speeds and bandwidths.
        global_models: one ``(P_m,)`` parameter vector per entry of ``config.models``.
        companion_model: the companion's ``(P,)`` vector, or None.
        algorithm: the local algorithm's strategy object (:mod:`fl_gym.engine.algorithms`).
        batcher: None, or the :class:`~fl_gym.engine.batcher.CohortBatcher` a batched vector env
            shares among its copies (training and evaluation then run merged with theirs).
        buffers: the :class:`~fl_gym.engine.pool.BufferPool` the cohorts' models, the global
            models and the probe gradients are written to, so they do not fragment the heap (a
            batched vector env gives its copies one).
        remote: None (the clients train here), or the :class:`RemoteClients` they train on.
        val_indices: test-set indices of the validation split (None without one).
        eval_indices: test-set indices the reported accuracy is measured on.
    """

    def __init__(self, config: FederationConfig, scenario_seed: int = 0,
                 dataset: Dataset | None = None) -> None:
        require(is_int_at_least(scenario_seed, 0), "scenario_seed", scenario_seed, "an integer >= 0")
        self.config = cfg = config
        self.scenario_seed = scenario_seed
        self.device = torch.device(cfg.device)
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        if cfg.train and cfg.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()
        data = self._dataset = dataset if dataset is not None else self._load_dataset(cfg)
        self.num_classes = data.num_classes
        scenario = np.random.default_rng(scenario_seed)
        self.server_indices = np.zeros(0, np.int64)
        train_parts, test_parts = self._split(data, scenario)
        self._labels = data.y_train.numpy()
        self.x_train, self.y_train, self.x_test, self.y_test = data.on(self.device)
        self.train_parts: list[torch.Tensor] = []
        self.noisy = np.zeros(cfg.num_clients, bool)  # drawn below, after every other scenario draw
        self._set_train_parts(train_parts)
        self.test_parts = [torch.as_tensor(p, device=self.device) for p in test_parts]
        # what the local test parts index: a holdout of the clients' training samples, else the test set
        held_out = cfg.local_test == "holdout"
        self._local_test = (self.x_train, self.y_train) if held_out else (self.x_test, self.y_test)
        self.archs = [build_model(m, data.input_shape, data.num_classes) for m in cfg.models]
        self.companion_arch = build_model(cfg.companion, data.input_shape,
                                          data.num_classes) if cfg.companion else None
        every = self.archs + ([self.companion_arch] if self.companion_arch else [])
        costs = cfg.model_costs or tuple(a.train_flops_per_sample / 1e6 for a in every)
        self.model_costs = np.asarray(costs[: len(self.archs)], dtype=np.float64)
        self.companion_cost = float(costs[-1]) if self.companion_arch else 0.0
        self.model_bytes = np.asarray([a.num_bytes for a in self.archs], dtype=np.float64)
        self.companion_bytes = float(self.companion_arch.num_bytes) if self.companion_arch else 0.0
        self.profiles = DeviceProfiles.draw(cfg.num_clients, cfg.clock, scenario)
        self.clock = Clock(cfg.clock, self.profiles)
        self.probe_cost = self.companion_cost if cfg.probe_cost is None else cfg.probe_cost
        self._split_validation(scenario)
        self.noisy = self._draw_noisy(scenario)
        self._online = self._trace_devices(scenario)
        self._train_x, self._train_y = (noisy_view(self.x_train, self.y_train, self.num_classes,
                                                   cfg.label_noise)
                                        if self.noisy.any()
                                        else (self.x_train, self.y_train))
        self._rows = training_rows(self.train_parts, self.noisy.tolist(), len(self._labels))
        nan = np.full(len(self.archs), math.nan)
        nan.flags.writeable = False
        # shared by every report of a round without evaluation
        self._not_evaluated = GlobalEvaluation(nan, nan)
        self.algorithm: LocalAlgorithm = cfg.local_algorithm()
        self.batcher: CohortBatcher | None = None  # set by a batched vector env
        # lasting per-round state (cohorts, global models, probe gradients) at the same addresses each round
        self.buffers = BufferPool()
        self.remote: RemoteClients | None = None
        self._everyone = np.ones(cfg.num_clients, bool)  # who is reachable while behaviour is off
        self._everyone.flags.writeable = False
        self._nobody = np.zeros(cfg.num_clients, bool)  # whose update is lost while behaviour is off
        self._nobody.flags.writeable = False
        self._no_learning = LocalStats.empty(cfg.num_clients, self.num_classes,
                                             self.companion_arch is not None, read_only=True)
        self._episode = self._openings = 0
        self.reset(scenario_seed)

    def _draw_noisy(self, rng: np.random.Generator) -> np.ndarray:
        """``(K,)`` bool, read-only: the clients with corrupted labels (none without ``noisy_clients``)."""
        noisy = np.zeros(self.num_clients, bool)
        count = round(self.config.noisy_clients * self.num_clients)
        if count:  # drawn after every other scenario draw, so a federation without noise is unchanged
            noisy[rng.choice(self.num_clients, count, replace=False)] = True
        noisy.flags.writeable = False
        return noisy

    def _trace_devices(self, rng: np.random.Generator) -> PlayedDevices | None:
        """The availability trace's devices the clients play (None without a trace).

        Drawn after every other scenario draw, so a federation without a trace is unchanged.
        """
        path = self.config.behaviour.availability_trace
        if path is None:
            return None
        trace = load_availability(path)
        return PlayedDevices(trace, assign_devices(self.num_clients, len(trace.ids), rng))

    def _split_validation(self, rng: np.random.Generator) -> None:
        """Global evaluation sets (test-set indices): the test set, or its rest beside a validation split."""
        everyone = np.arange(len(self.y_test))
        self.val_indices, self.eval_indices = None, torch.as_tensor(everyone, device=self.device)
        size, labels = self.config.validation_size, self.y_test.cpu().numpy()
        if size and self.config.train:
            require(size < len(labels), "validation_size", size,
                    f"an integer in [1, {len(labels) - 1}] (the {self.config.dataset} test set has "
                    f"{len(labels)} samples, and some must stay for the test)")
            val = stratified_subset(labels, size, rng)
            self.val_indices = torch.as_tensor(val, device=self.device)
            self.eval_indices = torch.as_tensor(np.setdiff1d(everyone, val), device=self.device)

    def _test_request(self, arch: Architecture, vector: torch.Tensor, indices: torch.Tensor) -> EvalRequest:
        """One model on the test-set samples ``indices``."""
        # one row: the stack's parameter-major layout is the vector's own, so it is a view, not a copy
        return self._eval_request(Stack(arch, vector.contiguous()), self.x_test, self.y_test, [indices])

    def _eval_request(self, stack: Stack, x: torch.Tensor, y: torch.Tensor, parts: list[torch.Tensor],
                      soft_labels: bool = False) -> EvalRequest:
        """Each model of ``stack`` on its part of ``x``, in chunks of the config's evaluation batch.

        Its loss and accuracy, or with ``soft_labels`` its mean softmax output instead (what is not
        asked for is NaN).
        """
        return EvalRequest(stack, x, y, parts, self.config.eval_batch_size, scores=not soft_labels,
                           soft_labels=soft_labels)

    def _run_all(self, requests: Sequence[Request]) -> list[Any]:
        """Run ``requests`` (through the batcher, in one of its flushes, if there is one)."""
        return self.batcher.run_all(requests) if self.batcher else [request.run() for request in requests]

    def _evaluate(self, stack: Stack, x: torch.Tensor, y: torch.Tensor, parts: list[torch.Tensor],
                  soft_labels: bool = False) -> EvalResult:
        """Each model of ``stack`` on its part of ``x`` (as :meth:`_eval_request` asks)."""
        return self._run_all([self._eval_request(stack, x, y, parts, soft_labels)])[0]

    def _validation_requests(self) -> list[EvalRequest]:
        """The first global model on the validation set (none without one)."""
        if self.val_indices is None:
            return []
        return [self._test_request(self.archs[0], self.global_models[0], self.val_indices)]

    @staticmethod
    def _validation(results: list[EvalResult]) -> tuple[float, float]:
        """The accuracy and loss in the results of :meth:`_validation_requests` (NaN where there was none)."""
        return (float(results[0].accuracy[0]), float(results[0].loss[0])) if results else (math.nan, math.nan)

    def validation(self) -> tuple[float, float]:
        """The first global model's accuracy and cross-entropy on the validation set (NaN without one)."""
        return self._validation(self._run_all(self._validation_requests()))

    @staticmethod
    def _load_dataset(cfg: FederationConfig) -> Dataset:
        if cfg.train or cfg.dataset not in TORCHVISION:
            return load_dataset(cfg.dataset, root=cfg.data_root, download=cfg.download,
                                **dict(cfg.dataset_kwargs))
        try:  # the clock needs only label counts: the real ones if the files are here
            return load_dataset(cfg.dataset, root=cfg.data_root, download=False)
        except DatasetNotFoundError:
            return label_only(cfg.dataset)

    def _set_train_parts(self, parts: list[np.ndarray]) -> None:
        report = PartitionReport.of(parts, self._labels, self.num_classes)
        self.partition_report = report
        self.sizes, self.histogram, self.label_entropy = report.sizes, report.histogram, report.entropy
        self.train_parts = [torch.as_tensor(np.asarray(p, np.int64), device=self.device) for p in parts]
        self._rows = training_rows(self.train_parts, self.noisy.tolist(), len(self._labels))

    def assign_data(self, client: int, indices: np.ndarray) -> None:
        """Replace ``client``'s training indices (e.g. a server data queue growing its working set).

        Sizes, label histograms and entropy follow; the clock and the next round use the new data.
        """
        self._require_client(client)  # before it keys a mapping: an array is no key
        self.assign_many({client: indices})

    def _require_client(self, client: object) -> None:
        require(is_int_at_least(client, 0) and client < self.num_clients, "client", client,
                f"0..{self.num_clients - 1}")

    def assign_many(self, assignment: dict[int, np.ndarray]) -> None:
        """:meth:`assign_data` for several clients at once (one recount)."""
        require_mapping("assignment", assignment, optional=False, of="client ids to index arrays")
        parts = [p.cpu().numpy() for p in self.train_parts]
        for client, indices in assignment.items():
            indices = as_array(f"assignment[{client!r}]", indices, "a 1-D integer array")
            self._require_client(client)
            if (indices.ndim != 1 or len(indices) == 0 or indices.dtype.kind not in "iu" or indices.min() < 0
                    or indices.max() >= len(self._labels)):
                raise UserError(f"indices of client {client} are out of range; allowed: a non-empty 1-D "
                                 f"integer array in 0..{len(self._labels) - 1}")
            parts[client] = np.sort(indices)
        self._set_train_parts(parts)

    @property
    def dataset(self) -> Dataset:
        """The data set the clients' partitions index (shared by a federation rebuilt on it)."""
        return self._dataset

    @property
    def num_clients(self) -> int:
        """``K``."""
        return self.config.num_clients

    def _split(self, data: Dataset, rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
        cfg = self.config
        if cfg.partition.kind == "natural":
            _require_devices(data, cfg.num_clients)
            return [p[0] for p in data.natural_split], [p[1] for p in data.natural_split]
        y = data.y_train.numpy()
        pool = np.arange(len(y))
        if cfg.server_data_fraction > 0:
            self.server_indices = self._server_share(y, data.num_classes, rng)
            pool = np.setdiff1d(pool, self.server_indices)
        parts = [pool[p] for p in partition(y[pool], cfg.num_clients, cfg.partition, rng, data.num_classes)]
        if cfg.local_test == "matched":
            return parts, matched_test_split(parts, y, data.y_test.numpy(), rng, data.num_classes)
        if cfg.local_test == "holdout":
            return holdout_split(parts, cfg.local_test_fraction, rng)
        return parts, [np.zeros(0, np.int64) for _ in parts]

    def check_client_count(self, num_clients: int) -> None:
        """Refuse a client count that this federation's partition cannot split its training data into.

        A randomised scenario draws its count at a reset (``num_clients_range``): an env splits
        for both ends of its range when it is built (one fixed draw each), so that a count the
        data cannot serve is an error then, not at the reset that draws it.
        """
        data = self._dataset
        if self.config.partition.kind == "natural":
            _require_devices(data, num_clients)
            return
        y = self._labels
        pool = np.setdiff1d(np.arange(len(y)), self.server_indices)  # a server share: the same size each draw
        partition(y[pool], num_clients, self.config.partition, np.random.default_rng(0), data.num_classes)

    def _server_share(self, y: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
        """The server's class-balanced share of the training labels ``y``: sorted ids no client gets."""
        fraction = self.config.server_data_fraction
        per_class = int(fraction * len(y) / num_classes)
        smallest = int(np.bincount(y, minlength=num_classes).min())
        require(per_class <= smallest, "server_data_fraction", fraction,
                f"a float in [0, {smallest * num_classes / len(y):.4f}] (an equal share of every class: the "
                f"{self.config.dataset} training set's smallest class has {smallest} samples)")
        return np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False)
                                       for c in range(num_classes)]))

    def reset(self, seed: int | None = None, *, sampler: np.random.Generator | None = None) -> None:
        """Start a new episode: fresh global models, server state and clock; same scenario.

        Args:
            seed: seeds the episode's draws (device load, initialisation, batches).
            sampler: the generator :meth:`open_round` draws candidates from (an env passes its
                ``np_random``); default: the episode generator.
        """
        require(seed is None or is_int_at_least(seed, 0), "seed", seed, "None or an integer >= 0")
        cfg = self.config
        seeds = np.random.SeedSequence(seed)
        self.rng = np.random.default_rng(seeds)
        self.sampler = self.rng if sampler is None else sampler
        self._episode += 1  # a round opened before this reset is no longer pending
        self.global_models, self.companion_model = [], None
        # a timing-only federation has no models and takes no probes
        self._probe_gen = self.generator(int(seeds.spawn(1)[0].generate_state(1)[0])) if cfg.train else None
        if cfg.train:
            gen = self._torch_generator()
            self.global_models = [self.buffers.keep(a.init(gen, self.device)) for a in self.archs]
            self.companion_model = self.buffers.keep(self.companion_arch.init(gen, self.device)) \
                if self.companion_arch else None
        self.algorithm.reset()
        self._servers = [ServerOptimizer(cfg.server, self.algorithm.server_mix) for _ in self.archs]
        self._companion_server = ServerOptimizer(cfg.server)
        self._round, self._elapsed = 0, 0.0
        self._load: RoundLoad | None = None  # see last_load
        self._load_source: Callable[[], RoundLoad] | None = None
        # its own stream, apart from every other (fl_gym.behaviour); drawn from only while behaviour is on
        self._behaviour_rng = np.random.default_rng(np.random.SeedSequence(seeds.entropy,
                                                                           spawn_key=(BEHAVIOUR_STREAM,)))
        self._available: np.ndarray | None = None  # the chain starts from its stationary law
        self._link = np.ones(self.num_clients)  # this round's bandwidth factors (static links: 1)
        self._trace_start = 0.0  # a trace's episode starts at a time drawn within its longest period
        if self._online is not None:
            self._trace_start = self._behaviour_rng.uniform(0, self._online.trace.period.max())

    @property
    def episode(self) -> int:
        """Resets since the federation was built (1 after the first): which episode a round belongs to."""
        return self._episode

    @property
    def round(self) -> int:
        """Rounds played since :meth:`reset` (read-only: :meth:`finish_round` and :meth:`advance` count)."""
        return self._round

    @property
    def elapsed(self) -> float:
        """Simulated seconds since :meth:`reset` (read-only, as :attr:`round`)."""
        return self._elapsed

    @property
    def last_load(self) -> RoundLoad | None:
        """The latest round's device load, which a persistent load (``load_persistence``) continues.

        After :meth:`defer_load` the first read builds it.
        """
        if self._load_source is not None:
            self._load, self._load_source = self._load_source(), None
        return self._load

    def advance(self, round_time: float) -> None:
        """Count a round of ``round_time`` seconds that the caller played itself.

        For a driver that times many federations' rounds as arrays (a family's vector clock) or
        trains them elsewhere; :meth:`finish_round` counts its own rounds.
        """
        try:
            ok = 0.0 <= round_time < math.inf  # NaN and a string fail too
        except TypeError:
            ok = False
        if not ok:
            raise UserError(f"round_time={round_time!r} is out of range; allowed: a finite float >= 0")
        self._round += 1
        self._elapsed += round_time

    def defer_load(self, source: Callable[[], RoundLoad]) -> None:
        """The device load of a round the caller opened itself (see :meth:`advance`); the next continues it.

        ``source`` builds it when :attr:`last_load` is first read, so a driver that opens many
        federations' rounds as arrays builds none of them until a federation opens its own.
        """
        self._load_source = source

    def redraw_partition(self, seed: int) -> None:
        """Split the training data afresh from ``seed`` (same kind, same clients and devices).

        For envs that redraw the partition per episode, so a policy cannot learn client ids.
        """
        require(is_int_at_least(seed, 0), "seed", seed, "an integer >= 0")
        rng = np.random.default_rng(seed)
        train_parts, test_parts = self._split(self._dataset, rng)
        order = rng.permutation(self.num_clients)  # kinds listed in order (mixed: IID first) move too
        self._set_train_parts([train_parts[i] for i in order])
        self.test_parts = [torch.as_tensor(test_parts[i], device=self.device) for i in order]

    def probe(self, clients: np.ndarray, models: torch.Tensor | None = None,
              gen: torch.Generator | None = None
              ) -> Probe:
        """One minibatch gradient per client (``batch_size`` samples, evaluation mode).

        Batches come from the episode's probe stream, separate from training's, so probing never
        changes what the clients train on.

        Args:
            clients: ``(k,)`` client ids.
            models: ``(k, P)`` the models to take the gradients at; default the first global model.
            gen: the batches' generator instead of the probe stream (fixed batches per key).
        """
        require(self.config.train, "train", False, "True (a timing-only federation takes no probes)")
        # a bool mask would be read as the ids 0 and 1
        ids = as_array("clients", clients, "a 1-D array of integer client ids")
        require(ids.ndim == 1 and len(ids) > 0 and ids.dtype.kind in "iu"
                and bool(((ids >= 0) & (ids < self.num_clients)).all()), "clients", ids.tolist(),
                f"a non-empty 1-D array of integer client ids in 0..{self.num_clients - 1} (not a mask)")
        clients = ids.astype(np.int64, copy=False)
        shape = (len(clients), self.archs[0].num_params)
        if models is None:
            models = self.global_models[0].expand(*shape)
        else:  # the caller's: the default is the right shape by construction
            fits = isinstance(models, torch.Tensor) and tuple(models.shape) == shape
            require(fits, "models", getattr(models, "shape", models), f"a tensor of shape {shape} (a "
                    "first-size model per client)")
        stream = cast(torch.Generator, self._probe_gen if gen is None else gen)  # set where training is on
        if self.remote is not None:
            key = int(torch.randint(2**62, (1,), generator=stream))
            return self.remote.probe(self, clients, models, key)
        batch_size = self.config.batch_size
        draw = BatchDraw.draw([self._rows[i] for i in clients], np.ones(len(clients), np.int64), batch_size,
                              stream)
        into = self.buffers.take(len(clients) * self.archs[0].num_params, models)
        request = ProbeRequest(self.archs[0], models, self._train_x, self._train_y, draw, batch_size, into)
        return self.batcher.probe(request) if self.batcher else request.run()

    def _torch_generator(self) -> torch.Generator:
        return self.generator(int(self.rng.integers(2**62)))

    def generator(self, key: int) -> torch.Generator:
        """A torch generator on the federation's device seeded with ``key``."""
        require(is_int_at_least(key, 0) and key < 2**64, "key", key, "an integer in [0, 2**64)")  # torch's
        return torch.Generator(device=self.device).manual_seed(key)

    # ---- the round in phases ----------------------------------------------------------------------

    def open_round(self, candidates: int | np.ndarray | None = None, *, load: RoundLoad | None = None
                   ) -> OpenedRound:
        """Phase 1: draw what the server knows before it decides.

        With device behaviour (:mod:`fl_gym.behaviour`) only the clients reachable this round can
        be candidates: every one of them, ``k`` of them (fewer if fewer are reachable), or those
        of a mask that are reachable.

        Args:
            candidates: None = every client; an int ``k`` = ``k`` clients drawn uniformly without
                replacement from :attr:`sampler`; a ``(K,)`` bool mask = those clients.
            load: a fixed device load instead of a draw (tests and what-if analyses).
        """
        k_all = self.num_clients
        count, asked = self._requested(candidates)  # checked before any draw, as a given load is
        if load is not None:
            self._check_load(load)
        order, z = np.arange(k_all) if count else None, np.empty((3, k_all))
        available = self.draw_round(order, z if load is None else None)
        if order is not None:
            mask = np.zeros(k_all, bool)
            mask[np.sort(first_available(order, available, count))] = True
        else:
            mask = available.copy() if asked is None else self._reachable(asked, available)
        if load is None:
            load = RoundLoad.of_normals(z, self.config.clock, self.last_load)
        self._load, self._load_source = load, None
        probe = self.probe_seconds(self.clock, self.sizes, load)
        return OpenedRound(self.round + 1, mask, load, probe, self._episode, self.begin_round())

    def _requested(self, candidates: object) -> tuple[int, np.ndarray | None]:
        """``candidates`` checked: a count ``k`` to draw (0: none), and a mask (None: every client).

        Checked before the round's draws, so that a refused one leaves every stream where it was.
        """
        k_all = self.num_clients
        if isinstance(candidates, (int, np.integer)) and not isinstance(candidates, (bool, np.bool_)):
            if not 1 <= candidates <= k_all:
                raise UserError(f"candidates={candidates} is out of range; allowed: 1..{k_all}")
            return int(candidates), None
        if candidates is None:
            return 0, None
        allowed = (f"an int, or a mask of shape ({k_all},), bool or 0/1 (not client ids), with at least one "
                   "client")
        mask = as_mask("candidates", candidates, k_all, allowed)
        if not mask.any():
            raise UserError(f"candidates has shape {mask.shape} with 0 set; allowed: {allowed}")
        return 0, mask

    @staticmethod
    def _reachable(asked: np.ndarray, available: np.ndarray) -> np.ndarray:
        """The clients of mask ``asked`` that are ``available``, or a clear error if none is."""
        mask = asked & available
        if not mask.any():
            raise UserError(f"candidates={np.flatnonzero(asked).tolist()} are all unavailable this round; "
                            "allowed: a mask with an available client "
                            f"({np.flatnonzero(available).tolist()})")
        return mask

    def begin_round(self) -> int:
        """Count a round as opened; its number among the openings (earlier ones are no longer pending).

        :meth:`open_round` counts its own; a driver that opens rounds itself (a family's vector
        clock, drawing with :meth:`draw_round`) counts each here.
        """
        self._openings += 1
        return self._openings

    @property
    def openings(self) -> int:
        """Rounds opened since the federation was built: the latest is the one that may be trained."""
        return self._openings

    def _check_load(self, load: object) -> None:
        """Refuse a given load unless it is a ``RoundLoad`` of finite factors > 0, one per client.

        Else its times would fail at :meth:`advance`, after the round had trained, or not broadcast.
        """
        k = self.num_clients
        factors = (load.availability, load.drift, load.noise) if isinstance(load, RoundLoad) else ()
        fits = len(factors) == 3 and all(isinstance(v, np.ndarray) and v.shape == (k,)
                                         and np.isfinite(v).all() and (v > 0).all() for v in factors)
        with np.printoptions(threshold=20, edgeitems=3):  # a large federation's factors, elided
            require(fits, "load", load, f"a RoundLoad of three ({k},) arrays of finite factors > 0 "
                    f"(RoundLoad.still({k}): every factor 1)")

    def _next_availability(self) -> np.ndarray:
        """``(K,)`` bool: which intermittent clients are reachable this round (the trace or the chain)."""
        if self._online is not None:
            return self._online.online(self._trace_start + self.elapsed)
        self._available = next_availability(self._available, self._behaviour_rng.random(self.num_clients),
                                            self.config.behaviour)
        return self._available

    def _next_link(self) -> None:
        """Step the links' bandwidth factors, of links that vary (:func:`~fl_gym.behaviour.next_link`)."""
        z = self._behaviour_rng.standard_normal(self.num_clients)
        last = self._link if self.round else None  # round 1: the stationary draw
        self._link = next_link(last, z, self.config.behaviour)

    def expected_times(self, opened: OpenedRound, epochs: float, model: int = 0) -> np.ndarray:
        """``(K,)`` what the server expects each client's round to take under ``opened``'s load.

        Download, ``epochs`` local epochs of ``model`` (and the companion) and the upload, as a
        client reports its resources before it is picked (FedCS's resource request); the drift
        the round brings after it opens is not known yet.
        """
        require(is_int_at_least(model, 0) and model < len(self.model_costs), "model", model,
                f"an integer in [0, {len(self.model_costs) - 1}]")
        require(is_non_negative(epochs), "epochs", epochs, "a float >= 0")
        cost = self.model_costs[model] + self.companion_cost
        train = epochs * self.clock.epoch_time(self.sizes, cost, opened.load)
        models, links = np.full(self.num_clients, model), self._links()
        return self.download_seconds(models, *links) + train + self.upload_seconds(models, *links)

    def draw_round(self, order: np.ndarray | None, normals: np.ndarray | None) -> np.ndarray:
        """A round's draws, in the order every opening makes them; ``(K,)`` bool: who is reachable.

        Device behaviour's availability and links, then the shuffle of ``order`` (``arange(K)``)
        with :attr:`sampler`, whose first ``k`` reachable ids, sorted, are ``k`` candidates drawn
        uniformly without replacement, then the ``(3, K)`` standard normals of the round's device
        load into ``normals``. None skips a draw the opening does not make (no count of candidates;
        a given load). The draws fill callers' buffers, so many federations' draws fill the rows of
        one array (a family's vector clock, which counts each opening with :meth:`begin_round`).
        """
        behaviour = self.config.behaviour  # while off, all are reachable and the links static (no draw)
        available = self._next_availability() if behaviour.intermittent else self._everyone
        if behaviour.link_sigma > 0:
            self._next_link()
        if order is not None:
            self.sampler.shuffle(order)
        if normals is not None:
            self.rng.standard_normal(out=normals)
        return available

    def train_round(self, opened: OpenedRound, plan: RoundPlan) -> TrainedRound:
        """Phase 2: time and train the clients ``plan`` selects (a subset of the candidates)."""
        self._check_pending(opened, "train_round")
        return self._train_round(opened, plan, self._validate(plan))

    def _validate(self, plan: RoundPlan) -> np.ndarray:
        """``plan.validate``, and a round whose batch schedule fits in memory; the ``(K,)`` local steps.

        The schedule holds the most local steps x the training clients x the batch size sample
        slots, at most ``MAX_SCHEDULE`` (the clock alone, with nothing to train, lays out none). A
        batch larger than every training client's data is the largest one's, as the schedule lays
        it out (:func:`~fl_gym.engine.schedule.layout`).
        """
        require(isinstance(plan, RoundPlan), "plan", plan, "a RoundPlan (RoundPlan.make builds one)")
        plan.validate(self.num_clients, len(self.archs))
        sel = plan.selected
        batch_size = min(self.config.batch_size, int(self.sizes[sel].max()))
        steps = np.zeros(self.num_clients, np.int64)
        steps[sel] = local_steps(self.sizes[sel], plan.epochs[sel], batch_size)
        slots = int(steps.max()) * int(sel.sum()) * batch_size
        if self.config.train and slots > MAX_SCHEDULE:
            raise UserError(f"plan.epochs={plan.epochs[sel].tolist()} is out of range; allowed: a round "
                            f"whose batch schedule fits in memory, at most {MAX_SCHEDULE:,} sample slots "
                            f"(the most local steps x training clients x batch_size; these epochs make "
                            f"{slots:,})")
        return steps

    def _train_round(self, opened: OpenedRound, plan: RoundPlan, steps: np.ndarray) -> TrainedRound:
        """:meth:`train_round` for a plan already validated (``steps``: what :meth:`_validate` returned)."""
        if (plan.selected & ~opened.candidates).any():
            asked = np.flatnonzero(plan.selected).tolist()
            allowed = np.flatnonzero(opened.candidates).tolist()
            raise UserError(f"plan.selected={asked} is out of range; allowed: a subset of round "
                             f"{opened.round}'s candidates {allowed}")
        chosen = plan.selected.nonzero()[0]  # the round's arithmetic runs over these clients only
        times = self._compute_times(opened, plan, steps, chosen)
        lost = partial = self._nobody
        if self.config.behaviour.losing:
            steps, times, lost, partial = self._lose(plan, steps, times)
        stats, cohort = (self._learn(plan, steps) if self.config.train else (self._no_learning, None))
        return TrainedRound(opened, plan, steps, *times, lost, partial, stats, cohort)

    def _lose(self, plan: RoundPlan, steps: np.ndarray, times: Times
              ) -> tuple[np.ndarray, Times, np.ndarray, np.ndarray]:
        """Dropout and the deadline (:mod:`fl_gym.behaviour`): steps and times left, who is lost, who is cut.

        A lost client trains nothing here (its update would never arrive); a cut one runs the
        local steps it finished by the deadline, and the clock charges that share of its training.
        """
        behaviour, sel = self.config.behaviour, plan.selected
        epochs, probe, train, _, download = times
        fixed = download + probe + self.upload_seconds(plan.model, *self._links())  # as if it uploads
        share = finished_share(fixed, train, behaviour)
        done = np.where(sel, np.floor(steps * np.nan_to_num(share)), 0).astype(steps.dtype)
        late = sel & (share < 1)
        partial = late & (done > 0) if behaviour.late == "partial" else self._nobody
        time = np.minimum(fixed + train, behaviour.deadline)
        u = self._behaviour_rng.random(self.num_clients)  # every client's, so who drew what never shifts
        lost = (late & ~partial) | (sel & (u < dropout_probability(time, behaviour)))
        partial = partial & ~lost
        done_share = np.divide(done, steps, out=np.ones(len(steps)), where=partial)
        steps = np.where(lost, 0, np.where(partial, done, steps))
        epochs, train = epochs * done_share, train * done_share
        return steps, (epochs, probe, train, probe + train, download), lost, partial

    def finish_round(self, trained: TrainedRound, aggregate: np.ndarray | None = None,
                     weight: np.ndarray | None = None) -> RoundReport:
        """Phase 3: aggregate, advance the clock, evaluate.

        Args:
            trained: the round from :meth:`train_round`.
            aggregate: ``(K,)`` bool: trained clients that upload and enter the global model(s);
                default ``plan.aggregate``.
            weight: ``(K,)`` aggregation weights, renormalised over each model's aggregated
                clients (a 0 leaves that update out of the average, even a NaN one); default
                ``plan.weight`` (None = the config's rule).
        """
        require(isinstance(trained, TrainedRound), "trained", trained, "the TrainedRound of train_round()")
        self._check_pending(trained.opened, "finish_round")
        plan = trained.plan
        if aggregate is not None or weight is not None:  # the plan's own were checked by train_round
            k = self.num_clients
            aggregate = plan.aggregate if aggregate is None else as_mask("aggregate", aggregate, k)
            weight = plan.weight if weight is None else _floats("weight", weight)
            check_aggregation(plan.selected, aggregate, weight)
        aggregate = plan.aggregate if aggregate is None else aggregate
        weight = plan.weight if weight is None else weight
        aggregated = aggregate & (trained.steps > 0)
        populations = self._populations(trained, aggregated, weight)  # a bad weight raises before any change
        comm = self._communication(trained, aggregate)
        self.advance(comm["round_time"])
        if trained.cohort is not None:
            self.algorithm.commit(aggregated.nonzero()[0])  # before the server correction reads it
        weights, lite_weights = self._weight_columns(populations)
        evaluation, (val_accuracy, val_loss) = self._evaluate_round(self._aggregate(trained, populations))
        lite = trained.stats.companion
        companion = None if lite is None else CompanionReport(
            lite.loss, lite.accuracy, lite_weights, evaluation.companion_accuracy, evaluation.companion_loss)
        report = RoundReport.of(trained, aggregated=aggregated, clock=self.elapsed, weights=weights,
                                companion=companion, val_accuracy=val_accuracy, val_loss=val_loss, **comm,
                                global_accuracy=evaluation.accuracy, global_loss=evaluation.loss)
        if self.remote is not None:
            self.remote.round_finished(report)
        return report

    def run_round(self, plan: RoundPlan) -> RoundReport:
        """Open, train and finish one round under ``plan`` (plain FL: every decision made up front)."""
        steps = self._validate(plan)  # before anything is drawn
        opened = self.open_round(plan.selected)
        return self.finish_round(self._train_round(opened, plan, steps))

    def _check_pending(self, opened: OpenedRound, phase: str) -> None:
        require(isinstance(opened, OpenedRound), f"{phase}: opened", opened,
                "the OpenedRound of open_round()")
        if opened.episode != self._episode:
            raise UserError(f"{phase}: round {opened.round} of episode {opened.episode} is not pending (the "
                            f"federation was reset since, to episode {self._episode}); allowed: a round "
                            "opened after the latest reset()")
        if opened.opening != self._openings:
            later = self._openings - opened.opening
            raise UserError(f"{phase}: round {opened.round} is not pending (a round was opened since it, "
                            f"{later} more time(s)); allowed: the OpenedRound of the latest open_round()")
        if opened.round != self.round + 1:
            raise UserError(f"{phase}: round {opened.round} is not pending (this federation has finished "
                             f"{self.round} rounds since reset); allowed: the round of the latest "
                             "open_round()")

    def _compute_times(self, opened: OpenedRound, plan: RoundPlan, steps: np.ndarray,
                       chosen: np.ndarray) -> Times:
        """``(epochs, probe, train, compute, download)`` per client, NaN but for the ``chosen`` ids."""
        epochs = np.where(steps[chosen] > 0, plan.epochs[chosen], 0.0)  # the epochs asked for are charged
        clock, link = self._links(chosen)
        model = plan.model[chosen]
        probe, train = self.training_seconds(clock, self.sizes[chosen], model, epochs, opened.load.at(chosen),
                                             opened.probe_time[chosen])
        times = np.full((5, self.num_clients), math.nan)
        times[:, chosen] = [epochs, probe, train, probe + train, self.download_seconds(model, clock, link)]
        return times[0], times[1], times[2], times[3], times[4]

    # ---- the cost model, of clients given as arrays: one call times many copies' clients ----------

    def probe_seconds(self, clock: Clock, samples: np.ndarray, load: RoundLoad) -> np.ndarray:
        """Seconds of one probe epoch (``probe_cost``) of clients given as arrays, before drift.

        ``clock`` and ``load`` are the clients', as in :meth:`training_seconds`.
        """
        return clock.epoch_time(samples, self.probe_cost, load)

    def training_seconds(self, clock: Clock, samples: np.ndarray, model: np.ndarray, epochs: np.ndarray,
                         load: RoundLoad, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The probe's and the local training's seconds of clients given as arrays of any one shape.

        ``clock`` and ``load`` are the clients' (rows of copies', for a driver that times many
        federations' rounds as arrays); ``model`` their model indices; ``probe`` their probe
        epochs' seconds, which only a companion model's federation charges (0 otherwise).
        """
        train = clock.train_time(samples, epochs, self.model_costs[model] + self.companion_cost, load)
        return (probe if self.companion_arch else np.zeros(train.shape)), train

    def _bytes(self, model: np.ndarray) -> np.ndarray:
        """Bytes each client receives: its ``model`` (an index per client) and the companion."""
        return self.model_bytes[model] + self.companion_bytes

    def upload_bytes(self, model: np.ndarray) -> np.ndarray:
        """Bytes each client sends when it uploads its ``model`` (e.g. SCAFFOLD's control variate too)."""
        return self._bytes(model) * self.algorithm.upload_factor

    def download_seconds(self, model: np.ndarray, clock: Clock, link: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds each client's download of its ``model`` takes (0: free communication).

        ``clock`` is the clients' (as :meth:`training_seconds`), ``link`` their bandwidth factors
        this round (device behaviour's; 1 while links are static).
        """
        if self.config.clock.free_communication:
            return np.zeros(model.shape)
        return clock.download_time(self._bytes(model)) / link

    def upload_seconds(self, model: np.ndarray, clock: Clock, link: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds each client's upload of its ``model`` takes (as :meth:`download_seconds`)."""
        if self.config.clock.free_communication:
            return np.zeros(model.shape)
        return clock.upload_time(self.upload_bytes(model)) / link

    def _links(self, clients: np.ndarray | None = None) -> tuple[Clock, np.ndarray]:
        """The clock and this round's bandwidth factors of ``clients`` (None: every client)."""
        return (self.clock, self._link) if clients is None else (self.clock.at(clients), self._link[clients])

    def _communication(self, trained: TrainedRound, aggregate: np.ndarray) -> dict:
        chosen = trained.plan.selected.nonzero()[0]
        model, uploads = trained.plan.model[chosen], aggregate[chosen]
        upload, client = np.full((2, self.num_clients), math.nan)
        upload[chosen] = self.upload_seconds(model, *self._links(chosen)) * uploads
        active, round_time, latency = self.round_seconds(
            trained.download_time[chosen] + trained.compute_time[chosen] + upload[chosen])
        client[chosen] = active
        return dict(upload_time=upload, client_time=client, round_time=float(round_time),
                    straggling_latency=float(latency),
                    upload_bytes=float(self.upload_bytes(model) @ (uploads & (trained.steps[chosen] > 0))))

    def round_seconds(self, client: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the server waits for each client, the round's seconds and its straggling latency.

        ``client``: the round's clients' seconds along the last axis (rows of copies before it).
        The server waits for no one past the deadline (a lost client: its time or the deadline),
        then aggregates; the latency is the slowest less the fastest.
        """
        active = np.minimum(client, self.config.behaviour.deadline)
        slowest = active.max(axis=-1)
        return active, slowest + self.config.clock.aggregation_time, slowest - active.min(axis=-1)

    # ---- learning -------------------------------------------------------------------------------

    def _learn(self, plan: RoundPlan, steps: np.ndarray) -> tuple[LocalStats, Cohort | None]:
        if not (steps > 0).any():
            return LocalStats.empty(self.num_clients, self.num_classes, self.companion_arch is not None), None
        key = int(self.rng.integers(2**62))  # the round's batch stream, drawn alike here or remote
        if self.remote is None:  # the update statistics are handed in with the training
            return self._train_clients(plan, steps, key, statistics=True)
        stats, cohort = self.remote.train_clients(self, plan, steps, key)
        if cohort is not None:
            self._update_stats(cohort, stats)
        return stats, cohort

    def train_clients(self, plan: RoundPlan, steps: np.ndarray, key: int) -> tuple[LocalStats, Cohort | None]:
        """The clients' side of phase 2: local training and what each client measures on its own data.

        Losses, local accuracy and soft labels; the update statistics that compare clients are the
        server's (:meth:`train_round`). Batches come from a generator seeded with ``key``; ``steps``
        holds each client's local steps (0: it does not train).
        """
        allowed = f"a ({self.num_clients},) array of integer local steps >= 0"
        counts = as_array("steps", steps, allowed)
        whole = counts.shape == (self.num_clients,) and counts.dtype.kind in "iu"
        require(whole and bool((counts >= 0).all()), "steps", steps, allowed)
        return self._train_clients(plan, counts, key, statistics=False)

    def _train_clients(self, plan: RoundPlan, steps: np.ndarray, key: int, statistics: bool
                       ) -> tuple[LocalStats, Cohort | None]:
        """:meth:`train_clients`, and with ``statistics`` the server's update statistics too."""
        stats = LocalStats.empty(self.num_clients, self.num_classes, self.companion_arch is not None)
        order = self.cohort_order(steps)
        if not len(order):
            return stats, None
        return stats, self._train(plan, steps, order, stats, self.generator(key), statistics)

    @staticmethod
    def cohort_order(steps: np.ndarray) -> np.ndarray:
        """The clients that train (``steps > 0``), most local steps first: a cohort's row order."""
        return np.argsort(-steps, kind="stable")[: np.count_nonzero(steps)]  # steps >= 0: the 0s sort last

    @property
    def _role(self) -> str:
        """Loss role of the clients' own models: ``local`` beside a companion, else ``model``."""
        return LOCAL if self.companion_arch else MODEL

    def members(self, plan: RoundPlan, order: np.ndarray) -> list[Member]:
        """The stacks a cohort trains (one per model size, and the companion), each from its global model.

        The rows are pooled buffers (a cohort's models may outlive the round), written from each
        member's ``start`` when its training runs (:meth:`~fl_gym.engine.trainer.Member.write_start`).
        """
        role, models = self._role, plan.model[order]
        kinds = np.unique(models) if len(self.archs) > 1 else (0,)  # one architecture: every client's is 0
        members = []
        for m in kinds:
            rows = np.flatnonzero(models == m) if len(kinds) > 1 else None  # None: every row
            slots = None if rows is None else torch.as_tensor(rows, device=self.device)
            size = len(order) if rows is None else len(rows)
            members.append(Member(role, self._stack(self.archs[m], size), slots, start=self.global_models[m]))
        if self.companion_arch:
            members.append(Member(LITE, self._stack(self.companion_arch, len(order)),
                                  start=self.companion_model))
        return members

    def _stack(self, arch: Architecture, k: int) -> Stack:
        """``k`` rows of ``arch`` in a pooled buffer, not yet written."""
        return Stack(arch, self.buffers.take(k * arch.num_params, self.global_models[0]))

    def _train(self, plan: RoundPlan, steps: np.ndarray, order: np.ndarray, stats: LocalStats,
               gen: torch.Generator, statistics: bool) -> Cohort:
        """Train the cohort ``order``, measure it on the clients' data (``statistics``: its updates too).

        One engine call (a batcher's flush) unless training makes the personal models that local
        evaluation scores.
        """
        cfg = self.config
        draw = BatchDraw.draw([self._rows[i] for i in order], steps[order], cfg.batch_size, gen)
        cohort = Cohort(order, self.members(plan, order))
        lr = torch.as_tensor(plan.lr[order], dtype=torch.float32, device=self.device)
        loss_fn = cfg.distillation if self.companion_arch else cross_entropy
        request = TrainRequest(cohort.members, self._train_x, self._train_y, draw, cfg.batch_size, lr,
                               cfg.optimizer, loss_fn, self.algorithm, order, gen)
        measured, requests = self._statistics_requests(cohort) if statistics else ([], [])
        # the local evaluations score the trained rows, unless training makes the personal models they score
        personal = self.algorithm.personal_models
        local = [] if personal else self._local_requests(cohort, stats)
        result: TrainResult  # the statistics and evaluations run after training (their stage)
        result, *values = self._run_all([request, *requests, *(r for *_, r in local)])
        self._write_statistics(measured, values[: len(requests)], stats)
        self._write_local(local, values[len(requests):])
        if personal:
            self._local_metrics(cohort, stats)
        stats.loss[order] = result.mean_loss[self._role].cpu().numpy()
        stats.last_epoch_loss[order] = result.last_epoch_loss[self._role].cpu().numpy()
        if stats.companion is not None:
            stats.companion.loss[order] = result.mean_loss[LITE].cpu().numpy()
        return cohort

    def _local_metrics(self, cohort: Cohort, stats: LocalStats) -> None:
        """The trained models' local accuracy and soft labels (as the config asks) into ``stats``."""
        local = self._local_requests(cohort, stats)
        self._write_local(local, self._run_all([r for *_, r in local]))

    def _local_requests(self, cohort: Cohort, stats: LocalStats
                        ) -> list[tuple[np.ndarray, np.ndarray, str, EvalRequest]]:
        """Each local evaluation the config asks for, and where it goes.

        A tuple each: the field of ``stats`` it fills, at which clients, which value of its result,
        and its request.
        """
        cfg = self.config
        need_acc = (cfg.eval_local or cfg.aggregation == "entropy_acc") and cfg.local_test != "none"
        local = []
        for member in cohort.members:
            clients, lite = cohort.clients(member), member.role == LITE
            evaluated = member.stack if member.personal is None else member.personal  # pFedMe: theta
            if need_acc:
                local.append((stats.accuracy_of(lite), clients, "accuracy",
                              self._eval_request(evaluated, *self._local_test,
                                                 [self.test_parts[i] for i in clients])))
            if cfg.soft_labels and not lite:
                local.append((stats.soft_labels, clients, "soft_labels",
                              self._eval_request(evaluated, self._train_x, self._train_y,
                                                 [self._rows[i] for i in clients], soft_labels=True)))
        return local

    @staticmethod
    def _write_local(local: list[tuple[np.ndarray, np.ndarray, str, EvalRequest]], results: list[EvalResult]
                     ) -> None:
        """Each local evaluation's value (:meth:`_local_requests`) into its field at its clients."""
        for (field, clients, value, _), result in zip(local, results, strict=True):
            field[clients] = getattr(result, value).cpu().numpy()

    def _update_stats(self, cohort: Cohort, stats: LocalStats) -> None:
        """Each update's norm and angle to its population's mean update; each model's cosine to the global."""
        measured, requests = self._statistics_requests(cohort)
        self._write_statistics(measured, self._run_all(requests), stats)

    def _statistics_requests(self, cohort: Cohort) -> tuple[list[np.ndarray], list[StatsRequest]]:
        """The clients of each population but the companion's, and the request of its update statistics.

        Through the batcher, the copies' statistics are one call (:mod:`fl_gym.engine.updates`).
        """
        members = [(m, cohort.clients(m)) for m in cohort.members if m.role != LITE]
        requests = [StatsRequest(m.stack, cast(torch.Tensor, m.start),  # members() gives each a global model
                                 torch.as_tensor(self.sizes[clients] / self.sizes[clients].sum(),
                                                 dtype=torch.float32, device=self.device))
                    for m, clients in members]
        return [clients for _, clients in members], requests

    @staticmethod
    def _write_statistics(measured: list[np.ndarray], values: list[np.ndarray], stats: LocalStats) -> None:
        """Each population's statistics (``(4, k)`` values) into ``stats`` at its clients."""
        for clients, rows in zip(measured, values, strict=True):
            for name, value in zip(STATISTICS, rows, strict=True):
                getattr(stats, name)[clients] = value

    def _weights(self, weight: np.ndarray | None, clients: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
        if weight is not None:
            w = weight[clients]
            with np.errstate(over="ignore"):
                total = w.sum()
            if not np.isfinite(total):  # finite weights whose sum is beyond float range: the same shares
                w = w / w.max()
                total = w.sum()
            if total <= 0:
                raise UserError(f"weight={w.tolist()} sums to 0 over aggregated clients {clients.tolist()}; "
                                 "allowed: at least one positive weight per aggregated model")
            return w / total
        return aggregation_weights(self.config.aggregation, self.sizes[clients], self.label_entropy[clients],
                                   accuracy[clients])

    def _populations(self, trained: TrainedRound, aggregated: np.ndarray, weight: np.ndarray | None
                     ) -> list[Population]:
        """Each trained population with an update that enters its global model, and their weights.

        Raises the ``ValueError`` of a weight that sums to 0 over a population's aggregated clients.
        """
        cohort, stats = trained.cohort, trained.stats
        populations: list[Population] = []
        if cohort is None:  # nothing trained
            return populations
        for member in cohort.members:
            clients = cohort.clients(member)
            keep = aggregated[clients]
            if keep.any():
                acc = stats.accuracy_of(member.role == LITE)
                populations.append(Population(member, clients, keep,
                                              self._weights(weight, clients[keep], acc)))
        return populations

    def _weight_columns(self, populations: list[Population]) -> np.ndarray:
        """``(2, K)``: each client's aggregation weight in its model, then in the companion (0: left out)."""
        columns = np.zeros((2, self.num_clients))
        for population in populations:
            columns[int(population.member.role == LITE), population.aggregated] = population.weights
        return columns

    def _aggregate(self, trained: TrainedRound, populations: list[Population]) -> list[AverageRequest]:
        """Each population's next global model, as requests to run before the round's evaluation.

        The global models are the requests' ``into`` buffers from here on (written when they run).
        """
        requests = []
        for member, clients, keep, w in populations:
            m = None if member.role == LITE else int(trained.plan.model[clients[0]])
            old = cast(torch.Tensor, member.start)  # a cohort's members start from a global model
            into = self.buffers.take(old.numel(), old).view(old.shape)
            requests.append(self._average_request(member.stack, keep, w, trained.steps[clients], old,
                                                  partial(self._server_step, m, old), into))
            if m is None:
                self.companion_model = into
            else:
                self.global_models[m] = into
        return requests

    def _server_step(self, model: int | None, start: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        """The next global model ``model`` (None: the companion) from its clients' ``average``.

        The local algorithm's correction (FedDyn's), then the server optimiser.
        """
        if model is None:
            return self._companion_server.apply(start, average)
        average = self.algorithm.server_correction(self.archs[model].name, average)
        return self._servers[model].apply(start, average)

    def _average_request(self, stack: Stack, keep: np.ndarray, w: np.ndarray, steps: np.ndarray,
                         start: torch.Tensor, step: Callable[[torch.Tensor], torch.Tensor] | None = None,
                         into: torch.Tensor | None = None) -> AverageRequest:
        """A request that averages the ``keep`` rows of ``stack`` with weights ``w``, or as FedNova does.

        ``step`` and ``into``: the server's step and where the next global model goes (None: a
        what-if, whose :meth:`~fl_gym.engine.batcher.AverageRequest.average` alone is asked for).
        ``steps`` are every row's local steps. FedNova (``behaviour.fednova``, :mod:`fl_gym.behaviour`):
        ``start + tau_eff sum_i w_i (rows_i - start) / steps_i`` with ``tau_eff = sum_i w_i steps_i``,
        i.e. the rows weighted ``w_i tau_eff / steps_i`` and ``start`` the rest (which equal steps make 0).
        """
        if not w.all():  # a zero weight's row is left out: 0 x NaN would make a diverged update count
            nonzero, keep = w != 0, keep.copy()
            keep[keep], w = nonzero, w[nonzero]
        kept = None if keep.all() else keep.nonzero()[0]  # every row kept (the usual round): no selection
        rest = None  # the rows' weights sum to 1: no share of start
        if self.config.behaviour.fednova:
            steps = np.asarray(steps[keep], np.float64)
            w = w * float(w @ steps) / steps
            rest = 1.0 - float(w.sum())
        return AverageRequest(stack, kept, w, start, rest, step, into)

    def validate_averages(self, trained: TrainedRound, subsets: np.ndarray, weight: np.ndarray | None = None
                          ) -> np.ndarray:
        """What-if: the validation accuracy and loss of averaging each subset of the round's trained clients.

        Each ``(K,)`` bool row of ``subsets`` is averaged as :meth:`finish_round` would average it
        into the first global model (``weight`` as there; the server's step and the local
        algorithm's correction left out; an empty subset keeps the global model). Nothing changes:
        call it before :meth:`finish_round`. Returns ``(len(subsets), 2)``; NaN without a
        validation split or a trained cohort.
        """
        subsets = self._subsets(subsets)
        if weight is not None:
            weight = _floats("weight", weight)
            check_aggregation(trained.plan.selected, trained.plan.aggregate, weight)
        if len(subsets) == 0:
            return np.empty((0, 2))
        if self.val_indices is None or trained.cohort is None:
            return np.full((len(subsets), 2), np.nan)
        cohort = trained.cohort
        member = next((m for m in cohort.members
                       if m.role != LITE and int(trained.plan.model[cohort.clients(m)[0]]) == 0), None)
        # no client trained the first model: every subset keeps it
        clients = np.zeros(0, np.int64) if member is None else cohort.clients(member)
        averages = []
        for subset in subsets:
            keep = subset[clients] & (trained.steps[clients] > 0)
            if member is None or not keep.any():
                averages.append(self.global_models[0])
                continue
            w = self._weights(weight, clients[keep], trained.stats.local_accuracy)
            request = self._average_request(member.stack, keep, w, trained.steps[clients],
                                            cast(torch.Tensor, member.start))
            averages.append(request.average())
        stack = Stack.from_rows(self.archs[0], torch.stack(averages))
        result = self._evaluate(stack, self.x_test, self.y_test, [self.val_indices] * len(subsets))
        return torch.stack([result.accuracy, result.loss], dim=1).double().cpu().numpy()

    def _subsets(self, subsets: np.ndarray) -> np.ndarray:
        """``(n, K)`` bool rows, or a ``ValueError`` (client ids would average other clients silently)."""
        k = self.num_clients
        rows = np.atleast_2d(as_array("subsets", subsets, f"(n, {k}) or ({k},) masks, bool or 0/1"))
        if rows.ndim != 2 or rows.shape[1] != k or not is_mask(rows):
            raise UserError(f"subsets has shape {rows.shape} and dtype {rows.dtype}; allowed: (n, {k}) or "
                            f"({k},) masks, bool or 0/1 (not client ids)")
        return rows.astype(bool)

    def _evaluate_round(self, averages: list[AverageRequest]) -> tuple[GlobalEvaluation, tuple[float, float]]:
        """The round's test evaluation of the global models (when due) and validation accuracy and loss.

        ``averages`` make the global models first, in the same engine call (a batcher's flush).
        """
        due = self.config.train and (self.round % self.config.eval_every == 0 or self.round == 1)
        tests = self._global_requests() if due else []
        results = self._run_all([*averages, *tests, *self._validation_requests()])[len(averages):]
        evaluation = self._global_values(results[: len(tests)]) if due else self._not_evaluated
        return evaluation, self._validation(results[len(tests):])

    def _global_requests(self) -> list[EvalRequest]:
        """Every global model, then the companion, on the test set's evaluation samples."""
        models = list(zip(self.archs, self.global_models, strict=True))
        if self.companion_arch and self.companion_model is not None:
            models.append((self.companion_arch, self.companion_model))
        return [self._test_request(arch, vector, self.eval_indices) for arch, vector in models]

    def _global_values(self, results: list[EvalResult]) -> GlobalEvaluation:
        accuracy = [float(r.accuracy[0]) for r in results]
        loss = [float(r.loss[0]) for r in results]
        m = len(self.archs)
        lite = (accuracy[m], loss[m]) if self.companion_arch else (math.nan, math.nan)
        return GlobalEvaluation(np.asarray(accuracy[:m]), np.asarray(loss[:m]), *lite)

    def evaluate(self) -> GlobalEvaluation:
        """Test accuracy and loss of every global model (``(M,)`` each), then the companion's (NaN: none).

        A timing-only federation (``train=False``) has no models: NaN for each, as its rounds report.
        """
        if not self.config.train:
            return self._not_evaluated
        return self._global_values(self._run_all(self._global_requests()))


def _require_devices(data: Dataset, num_clients: int) -> None:
    """Refuse a client count other than the data set's devices (the ``natural`` partition's clients)."""
    if len(data.natural_split) != num_clients:
        raise UserError(f"num_clients={num_clients} is out of range; allowed: {len(data.natural_split)} (the "
                        f"devices of {data.name})")


def _floats(name: str, values: object) -> np.ndarray:
    """``values`` as float64, or a ``ValueError`` naming ``name`` (numpy's names neither it nor the value)."""
    try:
        return np.asarray(values, np.float64)
    except (TypeError, ValueError) as err:
        raise UserError(f"{name}={values!r} is out of range; allowed: numbers ({one_line(err)})") from err
