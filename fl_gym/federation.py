"""The federation: global models, client data views, device profiles, the clock, the round loop.

:meth:`Federation.run_round` is the single entry point every env and script uses: a plan in,
a report out. A plain FL run is a loop over it with a fixed plan::

    fed = Federation(FederationConfig(dataset="digits", num_clients=10))
    for _ in range(20):
        report = fed.run_round(RoundPlan.make(10, lr=0.05, epochs=2))
    print(report.accuracy, report.clock)

One round: draw this round's device load, time every client on the virtual clock, train the
cohort as stacked batches (:mod:`fl_gym.engine`), evaluate what the aggregation rule or the
report needs, aggregate each model population with its weights, update the global models,
evaluate them on the test set. With ``train=False`` only the clock runs (fast, for agents whose
rewards are timing-only).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fl_gym.aggregation import ServerOptimizer, aggregation_weights, weighted_average
from fl_gym.clock import Clock, DeviceProfiles, RoundLoad
from fl_gym.config import FederationConfig
from fl_gym.data.datasets import TORCHVISION, Dataset, DatasetNotFoundError, label_only, load_dataset
from fl_gym.data.partition import holdout_split, matched_test_split, partition
from fl_gym.data.report import PartitionReport
from fl_gym.engine.allocator import keep_freed_memory
from fl_gym.engine.evaluate import evaluate_models, evaluate_stack
from fl_gym.engine.losses import cross_entropy
from fl_gym.engine.schedule import local_steps, make_schedule
from fl_gym.engine.trainer import Member, TrainResult, train_cohort
from fl_gym.models.architecture import Stack
from fl_gym.models.zoo import build_model
from fl_gym.records import RoundPlan, RoundReport

LOCAL, LITE, MODEL = "local", "lite", "model"


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
        histogram: ``(K, C)`` training labels per client and class.
        label_entropy: ``(K,)`` entropy of each client's training labels, in bits.
        profiles: static device speeds and bandwidths.
        global_models: one ``(P_m,)`` parameter vector per entry of ``config.models``.
        companion_model: the companion's ``(P,)`` vector, or None.
    """

    def __init__(self, config: FederationConfig, scenario_seed: int = 0, dataset: Dataset | None = None) -> None:
        self.config = cfg = config
        self.device = torch.device(cfg.device)
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        if cfg.train and cfg.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()
        data = dataset if dataset is not None else self._load(cfg)
        self.num_classes = data.num_classes
        scenario = np.random.default_rng(scenario_seed)
        self.server_indices = np.zeros(0, np.int64)
        train_parts, test_parts = self._split(data, scenario)
        self._labels = data.y_train.numpy()
        self.x_train, self.y_train = data.x_train.to(self.device), data.y_train.to(self.device)
        self.x_test, self.y_test = data.x_test.to(self.device), data.y_test.to(self.device)
        self.train_parts: list[torch.Tensor] = []
        self._set_train_parts(train_parts)
        self.test_parts = [torch.as_tensor(p, device=self.device) for p in test_parts]
        self.archs = [build_model(m, data.input_shape, data.num_classes) for m in cfg.models]
        self.companion_arch = build_model(cfg.companion, data.input_shape, data.num_classes) if cfg.companion else None
        every = self.archs + ([self.companion_arch] if self.companion_arch else [])
        costs = cfg.model_costs or tuple(a.train_flops_per_sample / 1e6 for a in every)
        self.model_costs = np.asarray(costs[: len(self.archs)], dtype=np.float64)
        self.companion_cost = float(costs[-1]) if self.companion_arch else 0.0
        self.model_bytes = np.asarray([a.num_bytes for a in self.archs], dtype=np.float64)
        self.companion_bytes = float(self.companion_arch.num_bytes) if self.companion_arch else 0.0
        self.profiles = DeviceProfiles.draw(cfg.num_clients, cfg.clock, scenario)
        self.clock = Clock(cfg.clock, self.profiles)
        self._free_comm = math.isinf(cfg.clock.bandwidth)
        self._no_learning = _no_learning(cfg.num_clients, len(self.archs), self.num_classes)
        for value in self._no_learning.values():  # shared by every timing-only report: read-only
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        self.reset(scenario_seed)

    @staticmethod
    def _load(cfg: FederationConfig) -> Dataset:
        if cfg.train or cfg.dataset not in TORCHVISION:
            return load_dataset(cfg.dataset, root=cfg.data_root, download=cfg.download, **dict(cfg.dataset_kwargs))
        try:  # the clock needs only label counts: the real ones if the files are here
            return load_dataset(cfg.dataset, root=cfg.data_root, download=False)
        except DatasetNotFoundError:
            return label_only(cfg.dataset)

    def _set_train_parts(self, parts: list[np.ndarray]) -> None:
        report = PartitionReport.of(parts, self._labels, self.num_classes)
        self.partition_report = report
        self.sizes, self.histogram, self.label_entropy = report.sizes, report.histogram, report.entropy
        self.train_parts = [torch.as_tensor(np.asarray(p, np.int64), device=self.device) for p in parts]
        self._nb = np.ceil(self.sizes / self.config.batch_size)

    def assign_data(self, client: int, indices: np.ndarray) -> None:
        """Replace ``client``'s training indices (e.g. a server data queue growing its working set).

        Sizes, label histograms and entropy follow; the clock and the next round use the new data.
        """
        indices = np.asarray(indices)
        if not 0 <= client < self.num_clients:
            raise ValueError(f"client={client} is out of range; allowed: 0..{self.num_clients - 1}")
        if indices.ndim != 1 or len(indices) == 0 or indices.min() < 0 or indices.max() >= len(self._labels):
            raise ValueError(f"indices of client {client} are out of range; allowed: a non-empty 1-D array in "
                             f"0..{len(self._labels) - 1}")
        parts = [p.cpu().numpy() for p in self.train_parts]
        parts[client] = np.sort(indices)
        self._set_train_parts(parts)

    @property
    def num_clients(self) -> int:
        """``K``."""
        return self.config.num_clients

    def _split(self, data: Dataset, rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
        cfg = self.config
        if cfg.partition.kind == "natural":
            if len(data.natural_split) != cfg.num_clients:
                raise ValueError(f"num_clients={cfg.num_clients} is out of range; allowed: "
                                 f"{len(data.natural_split)} (the devices of {data.name})")
            return [p[0] for p in data.natural_split], [p[1] for p in data.natural_split]
        y = data.y_train.numpy()
        pool = np.arange(len(y))
        if cfg.server_data_fraction > 0:  # class-balanced server share, disjoint from the clients
            per_class = int(cfg.server_data_fraction * len(y) / data.num_classes)
            self.server_indices = np.sort(np.concatenate(
                [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in range(data.num_classes)]))
            pool = np.setdiff1d(pool, self.server_indices)
        parts = [pool[p] for p in partition(y[pool], cfg.num_clients, cfg.partition, rng, data.num_classes)]
        if cfg.local_test == "matched":
            return parts, matched_test_split(parts, y, data.y_test.numpy(), rng, data.num_classes)
        if cfg.local_test == "holdout":
            return holdout_split(parts, cfg.local_test_fraction, rng)
        return parts, [np.zeros(0, np.int64) for _ in parts]

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode: fresh global models, server state and clock; same scenario."""
        cfg = self.config
        self.rng = np.random.default_rng(seed)
        self.global_models, self.companion_model = [], None
        if cfg.train:  # a timing-only federation has no models
            gen = self._torch_generator()
            self.global_models = [a.init(gen, self.device) for a in self.archs]
            self.companion_model = self.companion_arch.init(gen, self.device) if self.companion_arch else None
        mix = cfg.pfedme.beta if cfg.algorithm == "pfedme" else 1.0
        self._servers = [ServerOptimizer(cfg.server, mix) for _ in self.archs]
        self._companion_server = ServerOptimizer(cfg.server)
        self.round, self.elapsed = 0, 0.0

    def _torch_generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(int(self.rng.integers(2**62)))

    def draw_load(self) -> RoundLoad:
        """Draw the next round's device dynamics from the episode generator."""
        return RoundLoad.draw(self.num_clients, self.config.clock, self.rng)

    def run_round(self, plan: RoundPlan, load: RoundLoad | None = None) -> RoundReport:
        """Run one FL round under ``plan``; ``load`` defaults to a fresh :meth:`draw_load`."""
        cfg, k_all = self.config, self.num_clients
        plan.validate(k_all, len(self.archs))
        load = self.draw_load() if load is None else load
        steps = np.where(plan.selected, local_steps(self.sizes, plan.epochs, cfg.batch_size), 0)
        times = self._times(plan, steps, load)
        self.round += 1
        self.elapsed += times["round_time"]
        learn = self._learn(plan, steps) if cfg.train else self._no_learning
        return RoundReport(round=self.round, selected=plan.selected.copy(),
                           aggregated=plan.aggregate & (steps > 0), model=plan.model.copy(),
                           clock=self.elapsed, **times, **learn)

    def _times(self, plan: RoundPlan, steps: np.ndarray, load: RoundLoad) -> dict:
        sel, uploads = plan.selected, plan.aggregate & (steps > 0)
        epochs = np.where(steps > 0, plan.epochs, 0.0)  # the clock charges the epochs asked for
        cost = self.model_costs[plan.model] + self.companion_cost
        probe = self.clock.epoch_time(self.sizes, self.companion_cost, load)
        train = self.clock.train_time(self.sizes, epochs, cost, load)
        nbytes = self.model_bytes[plan.model] + self.companion_bytes
        if self._free_comm:
            download = upload = np.zeros_like(train)
        else:
            download, upload = self.clock.download_time(nbytes), self.clock.upload_time(nbytes) * plan.aggregate
        compute = probe + train
        client = download + compute + upload
        rows = np.stack([epochs, probe, train, compute, download, upload, client])
        rows[:, ~sel] = math.nan
        active = client[sel]
        return dict(zip(("epochs", "probe_time", "train_time", "compute_time", "download_time", "upload_time",
                         "client_time"), rows, strict=True),
                    round_time=float(active.max()) + self.config.clock.aggregation_time,
                    straggling_latency=float(active.max() - active.min()), upload_bytes=float(nbytes @ uploads))

    # ---- learning -------------------------------------------------------------------------------

    def _learn(self, plan: RoundPlan, steps: np.ndarray) -> dict:
        out = _no_learning(self.num_clients, len(self.archs), self.num_classes)
        order = np.flatnonzero(steps > 0)
        if len(order):
            order = order[np.argsort(-steps[order], kind="stable")]
            members = self._train(plan, steps, order, out)
            self._local_metrics(members, order, out)
            self._aggregate(plan, members, order, out)
        self._evaluate_globals(out)
        return out

    @property
    def _role(self) -> str:
        """Loss role of the clients' own models: ``local`` beside a companion, else ``model``."""
        return LOCAL if self.companion_arch else MODEL

    def _members(self, plan: RoundPlan, order: np.ndarray) -> list[Member]:
        role = self._role
        members = []
        for m in np.unique(plan.model[order]):
            slots = np.flatnonzero(plan.model[order] == m)
            stack = Stack.broadcast(self.archs[m], self.global_models[m], len(slots))
            full = len(slots) == len(order)
            members.append(Member(role, stack, None if full else torch.as_tensor(slots, device=self.device)))
        if self.companion_arch:
            members.append(Member(LITE, Stack.broadcast(self.companion_arch, self.companion_model, len(order))))
        return members

    def _train(self, plan: RoundPlan, steps: np.ndarray, order: np.ndarray, out: dict) -> list[Member]:
        cfg = self.config
        gen = self._torch_generator()
        schedule = make_schedule([self.train_parts[i] for i in order], steps[order], cfg.batch_size, gen)
        members = self._members(plan, order)
        lr = torch.as_tensor(plan.lr[order], dtype=torch.float32, device=self.device)
        loss_fn = cfg.distillation if self.companion_arch else cross_entropy
        result: TrainResult = train_cohort(
            members, self.x_train, self.y_train, schedule, lr, cfg.optimizer, loss_fn=loss_fn,
            prox_mu=cfg.prox_mu if cfg.algorithm == "fedprox" else 0.0,
            pfedme=cfg.pfedme if cfg.algorithm == "pfedme" else None, gen=gen)
        out["loss"][order] = result.mean_loss[self._role].cpu().numpy()
        out["last_epoch_loss"][order] = result.last_epoch_loss[self._role].cpu().numpy()
        if self.companion_arch:
            out["companion_loss"][order] = result.mean_loss[LITE].cpu().numpy()
        return members

    def _clients(self, member: Member, order: np.ndarray) -> np.ndarray:
        return order if member.slots is None else order[member.slots.cpu().numpy()]

    def _local_metrics(self, members: list[Member], order: np.ndarray, out: dict) -> None:
        cfg = self.config
        need_acc = cfg.eval_local or cfg.aggregation == "entropy_acc"
        for member in members:
            clients = self._clients(member, order)
            evaluated = member.stack if member.personal is None else member.personal  # pFedMe: theta
            if need_acc and cfg.local_test != "none":
                acc = evaluate_stack(evaluated, self.x_test, self.y_test, [self.test_parts[i] for i in clients],
                                     cfg.eval_batch_size).accuracy.cpu().numpy()
                out["companion_accuracy" if member.role == LITE else "local_accuracy"][clients] = acc
            if cfg.soft_labels and member.role != LITE:
                res = evaluate_stack(evaluated, self.x_train, self.y_train, [self.train_parts[i] for i in clients],
                                     cfg.eval_batch_size)
                out["soft_labels"][clients] = res.soft_labels.cpu().numpy()

    def _weights(self, plan: RoundPlan, clients: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
        if plan.weight is not None:
            w = plan.weight[clients]
            if w.sum() <= 0:
                raise ValueError(f"plan.weight={w.tolist()} sums to 0 over aggregated clients {clients.tolist()}; "
                                 "allowed: at least one positive weight per aggregated model")
            return w / w.sum()
        return aggregation_weights(self.config.aggregation, self.sizes[clients], self.label_entropy[clients],
                                   accuracy[clients])

    def _aggregate(self, plan: RoundPlan, members: list[Member], order: np.ndarray, out: dict) -> None:
        for member in members:
            clients = self._clients(member, order)
            rows = member.stack.rows()
            lite = member.role == LITE
            old = self.companion_model if lite else self.global_models[plan.model[clients[0]]]
            delta = rows - old
            norm = delta.norm(dim=1)
            mean_update = weighted_average(delta, torch.as_tensor(self.sizes[clients] / self.sizes[clients].sum(),
                                                                  device=self.device))
            cos = (delta @ mean_update) / (norm * mean_update.norm()).clamp_min(1e-12)
            if not lite:
                out["update_norm"][clients] = norm.cpu().numpy()
                out["update_angle"][clients] = torch.arccos(cos.clamp(-1, 1)).cpu().numpy()
            keep = plan.aggregate[clients]
            if not keep.any():
                continue
            acc = out["companion_accuracy" if lite else "local_accuracy"]
            w = self._weights(plan, clients[keep], acc)
            out["companion_weights" if lite else "weights"][clients[keep]] = w
            average = weighted_average(rows[torch.as_tensor(keep, device=self.device)],
                                       torch.as_tensor(w, device=self.device))
            if lite:
                self.companion_model = self._companion_server.apply(old, average)
            else:
                m = int(plan.model[clients[0]])
                self.global_models[m] = self._servers[m].apply(old, average)

    def _evaluate_globals(self, out: dict) -> None:
        due = self.round % self.config.eval_every == 0 or self.round == 1
        n = len(self.archs)
        values = self.evaluate() if due else (np.full(n, math.nan), np.full(n, math.nan), math.nan, math.nan)
        keys = ("global_accuracy", "global_loss", "companion_global_accuracy", "companion_global_loss")
        out.update(zip(keys, values, strict=True))

    def evaluate(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        """Test accuracy and loss of every global model (``(M,)`` each), then of the companion (NaN if none)."""
        def one(arch, vec) -> tuple[float, float]:
            res = evaluate_models(Stack(arch, vec), self.x_test, self.y_test, self.config.eval_batch_size)
            return float(res.accuracy[0]), float(res.loss[0])
        results = [one(a, v) for a, v in zip(self.archs, self.global_models, strict=True)]
        lite = one(self.companion_arch, self.companion_model) if self.companion_arch else (math.nan, math.nan)
        return np.asarray([r[0] for r in results]), np.asarray([r[1] for r in results]), lite[0], lite[1]


def _no_learning(k: int, n_models: int, num_classes: int) -> dict:
    """Learning fields of a report before (or without) training: all NaN."""
    nan = lambda *shape: np.full(shape, math.nan)  # noqa: E731
    return dict(loss=nan(k), last_epoch_loss=nan(k), companion_loss=nan(k), local_accuracy=nan(k),
                companion_accuracy=nan(k), soft_labels=nan(k, num_classes), update_norm=nan(k),
                update_angle=nan(k), weights=np.zeros(k), companion_weights=np.zeros(k),
                global_accuracy=nan(n_models), global_loss=nan(n_models), companion_global_accuracy=math.nan,
                companion_global_loss=math.nan)
