"""Many federations' cohorts as one stacked batch: the engine side of a native vector env.

A vector env steps its ``N`` copies through one :class:`CohortBatcher`. Each copy's federation
hands its local training, its evaluations, its update statistics and its aggregation to the
batcher instead of running them; when every copy still stepping is waiting on it, the batcher
runs all compatible requests as one engine call (``N x k`` clients in one cohort, ``N`` global
models in one evaluation, every copy's probe gradients in one pass, every trained model's update
statistics in one reduction, every copy's weighted average of its own rows; in chunks that bound
its memory past ``MERGED_TRAIN_CLIENTS`` clients, ``MERGED_EVAL_ROWS`` pairs of model and sample
or ``MERGED_VALUES`` values of activations or models) and hands each copy its share. A copy
hands in the requests of one phase at once, in stages (a request's ``stage``): its training and
then the statistics and local evaluations of the models it trains, its averages and then the
evaluation of the models they make, each one hand-off. More than ``MERGED_COPIES`` copies
(``MERGED_COPIES_GPU`` on a GPU) step in turns of that many, one turn after the other. The
copies' Python runs one after the other (the GIL would serialise it anyway); what gains is the
engine, whose per-step cost grows far slower than the clients it stacks.

Requests are compatible when they train the same architecture in one role with the same local
optimiser, batch size, loss and a stateless local algorithm (``LocalAlgorithm.stateless``: SGD,
or FedProx with one ``mu``) on the same data tensors, of a model without dropout; anything else
(several model groups, a companion model, SCAFFOLD, MOON, FedDyn, pFedMe, dropout, whose masks
are each copy's own draws) runs alone, unchanged.
"""

from __future__ import annotations

import functools
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, cast

import greenlet
import numpy as np
import torch
from torch import Tensor

from fl_gym.aggregation import weighted_average
from fl_gym.engine.algorithms import LocalAlgorithm
from fl_gym.engine.evaluate import EvalResult, evaluate_stack
from fl_gym.engine.graphs import CohortGraphs, capturable
from fl_gym.engine.losses import cross_entropy
from fl_gym.engine.probe import Probe, gradients_at
from fl_gym.engine.schedule import BatchDraw, layout
from fl_gym.engine.trainer import Member, TrainResult, train_cohort
from fl_gym.engine.updates import update_statistics
from fl_gym.models.architecture import Architecture, Stack


@dataclass(eq=False)
class TrainRequest:
    """The arguments of one :func:`~fl_gym.engine.trainer.train_cohort` call."""

    members: list[Member]
    x: Tensor
    y: Tensor
    draw: BatchDraw
    batch_size: int
    lr: Tensor
    optimizer: Any
    loss_fn: Callable
    algorithm: LocalAlgorithm
    clients: np.ndarray
    gen: torch.Generator | None
    stage: ClassVar[int] = 0
    kind: ClassVar[str] = "training"

    def key(self) -> tuple | None:
        """Requests with equal keys merge; None = run alone.

        A merged request's rows are written from its member's ``start``, in the merged cohort. A
        model with dropout trains alone: its masks are its own generator's draws, in the shapes
        a stand-alone run draws them.
        """
        member = self.members[0]
        if len(self.members) != 1 or member.slots is not None or member.start is None:
            return None
        if member.stack.arch.random_in_training:
            return None
        algo = self.algorithm
        if self.loss_fn is not cross_entropy or not algo.stateless:
            return None
        return ("train", member.stack.arch.name, member.role, self.optimizer,
                getattr(algo, "mu", 0.0), id(self.x), id(self.y), self.batch_size)

    def run(self) -> TrainResult:
        """Alone."""
        for member in self.members:
            member.write_start()
        return train_cohort(self.members, self.x, self.y, layout(self.draw, self.batch_size), self.lr,
                            self.optimizer, loss_fn=self.loss_fn, algorithm=self.algorithm,
                            clients=self.clients, gen=self.gen)


@dataclass(eq=False)
class EvalRequest:
    """One :func:`~fl_gym.engine.evaluate.evaluate_stack` call."""

    stack: Stack
    x: Tensor
    y: Tensor
    parts: list[Tensor]
    batch_size: int
    scores: bool = True  # loss and accuracy (else NaN, not computed)
    soft_labels: bool = True
    stage: ClassVar[int] = 1
    kind: ClassVar[str] = "evaluation"

    def key(self) -> tuple:
        """Evaluations of one architecture on the same data tensors, of the same metrics, merge."""
        return ("eval", self.stack.arch.name, id(self.x), id(self.y), self.batch_size, self.scores,
                self.soft_labels)

    def run(self) -> EvalResult:
        """Alone."""
        return evaluate_stack(self.stack, self.x, self.y, self.parts, self.batch_size, scores=self.scores,
                              soft_labels=self.soft_labels)


@dataclass(eq=False)
class ProbeRequest:
    """One :func:`~fl_gym.engine.probe.gradients_at` call on one drawn batch per client."""

    arch: Architecture
    models: Tensor
    x: Tensor
    y: Tensor
    draw: BatchDraw
    batch_size: int
    into: Tensor | None = None  # where the (k, P) gradients go (the requester's lasting buffer), else new
    stage: ClassVar[int] = 0
    kind: ClassVar[str] = "probes"

    def key(self) -> tuple:
        """Probes of one architecture with one batch size on the same data tensors merge."""
        return ("probe", self.arch.name, id(self.x), id(self.y), self.batch_size)

    def run(self) -> Probe:
        """Alone."""
        return _probe(self.arch, self.models, self.x, self.y, self.draw, self.batch_size, self.into)


@dataclass(eq=False)
class StatsRequest:
    """One trained stack's :func:`~fl_gym.engine.updates.update_statistics`, read back as ``(4, k)``."""

    stack: Stack
    start: Tensor
    weights: Tensor
    stage: ClassVar[int] = 1
    kind: ClassVar[str] = "statistics"

    def key(self) -> tuple:
        """Stacks of one architecture merge."""
        return ("stats", self.stack.arch.name)

    def run(self) -> np.ndarray:
        """Alone."""
        return _statistics([self])[0]


@dataclass(eq=False)
class AverageRequest:
    """A global model's next value: a trained stack's kept rows averaged, then the server's step.

    Written into ``into``, the federation's next global model, so that the evaluations handed in
    with it (which run after it in their flush: ``stage``) read the new model.

    Attributes:
        stack: the trained rows.
        kept: the rows averaged, in order (None: every row).
        weights: ``(kept,)`` their weights.
        start: ``(P,)`` the model the rows started the round from.
        rest: FedNova's weight of ``start`` in the average (None: no share of it).
        step: the server's step from the average to the next global model.
        into: ``(P,)`` where the next global model goes (``step`` and ``into`` None: a what-if, whose
            :meth:`average` alone is asked for).
    """

    stack: Stack
    kept: np.ndarray | None
    weights: np.ndarray
    start: Tensor
    rest: float | None
    step: Callable[[Tensor], Tensor] | None = None
    into: Tensor | None = None
    stage: ClassVar[int] = 0
    kind: ClassVar[str] = "averages"

    def key(self) -> tuple:
        """Stacks of one architecture merge."""
        return ("average", self.stack.arch.name)

    def average(self) -> Tensor:
        """``sum_i w_i rows_i`` over the kept rows, plus FedNova's share of ``start``.

        The rows left out never enter it: they may hold anything (a diverged update's NaN).
        """
        kept = None if self.kept is None else torch.as_tensor(self.kept, device=self.stack.flat.device)
        rows = self.stack.rows(which=kept)
        average = weighted_average(rows, torch.as_tensor(self.weights, device=rows.device))
        return average if self.rest is None else average + self.rest * self.start

    def run(self) -> Tensor:
        """The server's step from the average, written into ``into``."""
        if self.step is None or self.into is None:
            raise ValueError("AverageRequest.run: a what-if (no step, no into) has only its average()")
        return self.into.copy_(self.step(self.average()))


def _average_merged(requests: list[AverageRequest]) -> list[Tensor]:
    """Every request's next global model, each the product of its own weights and rows.

    One product over every request's rows (a block-diagonal weight matrix) would carry a copy's
    diverged update into every other copy's average (``0 x NaN``), and on the CPU it took three
    times as long as these products of 16 copies' ten rows each.
    """
    return [r.run() for r in requests]


def _statistics_merged(requests: list[StatsRequest]) -> list[np.ndarray]:
    """The requests' statistics, one reduction per group of requests whose rows hold ``MERGED_VALUES``.

    A reduction copies every row it reads twice (the rows, the updates): 16 cohorts of ten CNNs of
    1.7 M parameters at once would hold 2 GiB, while a small model's cohorts still run as one.
    """
    return [values for group in _within_budget(requests, _models_held) for values in _statistics(group)]


def _statistics(requests: list[StatsRequest]) -> list[np.ndarray]:
    """Every request's rows reduced in one call and read back to the host in one transfer."""
    counts = [r.stack.k for r in requests]
    rows = requests[0].start.new_empty(sum(counts), len(requests[0].start))
    for r, out in zip(requests, rows.split(counts), strict=True):
        r.stack.rows(out=out)
    values = update_statistics(rows, torch.stack([r.start for r in requests]),
                               torch.cat([r.weights for r in requests]), counts)
    return np.split(values.cpu().numpy(), np.cumsum(counts)[:-1], axis=1)


def _probe(arch: Architecture, models: Tensor | Stack, x: Tensor, y: Tensor, draw: BatchDraw, batch_size: int,
           into: Tensor | None = None) -> Probe:
    schedule = layout(draw, batch_size)
    return gradients_at(arch, models, x, y, schedule.idx[0], schedule.weight[0], into)


Request = TrainRequest | EvalRequest | ProbeRequest | StatsRequest | AverageRequest
# A merged evaluation runs in chunks of at most this many pairs of model and sample: wider chunks
# of the default envs' MLPs computed more padding and ran no faster.
MERGED_EVAL_ROWS = 8192
# A merged call's working set (inputs, activations, their gradients in training) grows with its pairs
# of model and sample, each holding up to the architecture's widest activation (Architecture.widest).
# Chunks hold at most this many values of it (64 MiB of float32), so memory stays bounded whatever
# the copies and the model: a CNN's wide feature maps cut the copies' clients into more chunks, each
# still one batched call, while small models (an MLP of 64 units: 262,144 pairs) never reach it.
MERGED_VALUES = 1 << 24
# Every copy in a turn holds its mid-step state (its clients' models, probe gradients, results)
# until the turn ends; past this many copies they step in turns, one after the other, each turn's
# requests merged. On a CPU, merging 64 copies in one turn stepped them 1.00-1.17x as fast as turns
# of 16 and peaked at 1.35-1.55x their memory, over the 64-copy memory target (docs/performance.md).
MERGED_COPIES = 16
# On a GPU a merged call of the envs' small models is bound by its kernel launches, not its size:
# one turn of 64 copies stepped 64 copies of the three accuracy-driven defaults 1.14-1.33x faster
# than turns of 16 on one H200, eagerly (fl-gym bench --sections turns; docs/performance.md). With CUDA
# graphs turns stay at MERGED_COPIES: a turn of 64 replayed FLAggregate-v0's graphs 0.85x as fast.
MERGED_COPIES_GPU = 64
# A merged training's working set (the merged models, their gradients, the activations) grows with
# its clients; past this many (or MERGED_VALUES) it trains in chunks, each still one batched call.
MERGED_TRAIN_CLIENTS = 256
T = TypeVar("T")


@dataclass(eq=False)
class _Pending:
    request: Request
    copy: int
    result: Any = None
    error: BaseException | None = None


class CohortBatcher:
    """Runs the copies of one vector env in turn and merges their engine calls (module docstring).

    :meth:`run` steps every copy in a greenlet of its own (a coroutine with its own stack, all
    on the caller's thread): a copy runs its Python until it submits requests (:meth:`probe`,
    :meth:`run_all`) or finishes, then switches back, and
    the next copy runs, in copy order. When no copy is left to run, every pending request runs,
    merged by key and ordered by copy, and the waiting copies resume in copy order. All on one
    thread, a batched run is reproducible bit for bit, and it holds no per-copy thread stacks or
    allocator arenas (which a thread per copy, as the earlier designs had, did). The copies step
    in turns of ``turn`` consecutive copies, each turn run to its end before the next starts, so
    only one turn's mid-step state is alive at a time.

    Args:
        copies: the vector env's copies.
        device: where their engine calls run: turns of ``MERGED_COPIES_GPU`` copies on a GPU (unless
            CUDA graphs replay the trainings), of ``MERGED_COPIES`` elsewhere (read when the batcher
            is built).

    Attributes:
        turn: copies merged in one turn (``fl-gym bench --sections turns`` sets it to time others).
        flushes: engine calls made (merged groups and lone requests), for tests and benchmarks.
        engine_kinds: wall seconds spent in those calls by the requests' ``kind`` (``training``,
            ``evaluation``, ``probes``, ``statistics``, ``averages``), for the benchmark's engine
            share (on a GPU, until their kernels are launched, unless ``synchronize`` waits for them).
        synchronize: None, or a call made after each engine call and before its time is read
            (``torch.cuda.synchronize``: the benchmark times the kernels themselves, each kind's).
        graphs: with the environment variable ``FL_GYM_CUDA_GRAPHS=1``, the CUDA graphs of merged
            trainings whose shape recurs; None (every training eager) otherwise.
    """

    def __init__(self, copies: int, device: torch.device | str = "cpu") -> None:
        self.copies = copies
        self.flushes, self.engine_kinds = 0, defaultdict[str, float](float)
        self.graphs = CohortGraphs() if os.environ.get("FL_GYM_CUDA_GRAPHS") == "1" else None
        launch_bound = torch.device(device).type == "cuda" and self.graphs is None
        self.turn = MERGED_COPIES_GPU if launch_bound else MERGED_COPIES
        self.synchronize: Callable[[], None] | None = None
        self._pending: list[_Pending] = []
        self._current = -1  # the copy whose greenlet runs

    def run(self, fn: Callable[[int], T]) -> list[T]:
        """``fn(i)`` for every copy ``i``, taking turns; the results in copy order (or the first error)."""
        results: list[tuple[bool, Any]] = [(False, None)] * self.copies

        def body(copy: int) -> None:
            try:
                results[copy] = (True, fn(copy))
            except Exception as exc:  # noqa: BLE001 - re-raised below; Ctrl-C reaches the caller at once
                results[copy] = (False, exc)

        try:
            for lo in range(0, self.copies, self.turn):
                self._run_turn(body, range(lo, min(lo + self.turn, self.copies)))
        finally:
            self._current = -1
        for ok, value in results:
            if not ok:
                raise value
        return [value for _, value in results]

    def _run_turn(self, body: Callable[[int], None], turn: range) -> None:
        """Run ``body`` for the copies of one turn to their end, merging their requests."""
        hub = greenlet.getcurrent()
        copies = {i: greenlet.greenlet(functools.partial(body, i), parent=hub) for i in turn}
        ready, self._pending = list(turn), []
        while ready:
            for copy in ready:
                self._current = copy
                copies[copy].switch()
            ready = sorted({item.copy for item in self._pending})
            self._flush()

    def run_all(self, requests: Sequence[Request]) -> list[Any]:
        """Run ``requests`` in one flush (each with the others' compatible ones); their results in order.

        A copy's training with the update statistics (:class:`StatsRequest`) and evaluations of
        the models it trains, or its averages (:class:`AverageRequest`) with the evaluations of
        the models they make: a request of a later ``stage`` runs after every request of an
        earlier one, so it may read what they write.
        """
        return self._submit_all(requests)

    def probe(self, request: ProbeRequest) -> Probe:
        """Run ``request`` with the others' compatible ones; its own result."""
        return self._submit(request)

    def _submit(self, request: Request) -> Any:
        return self._submit_all([request])[0]

    def _submit_all(self, requests: Sequence[Request]) -> list[Any]:
        if self._current < 0:  # called outside run() (a copy's method called directly): nothing to merge with
            return [request.run() for request in requests]
        items = [_Pending(request, self._current) for request in requests]
        self._pending.extend(items)
        greenlet.getcurrent().parent.switch()
        for item in items:
            if item.error is not None:
                raise item.error
        return [item.result for item in items]

    def _flush(self) -> None:
        """Run every pending request, merged by key, each item getting its result or error."""
        pending, self._pending = sorted(self._pending, key=attrgetter("copy")), []
        groups: dict[Any, list[_Pending]] = {}
        for i, item in enumerate(pending):
            key = item.request.key()
            groups.setdefault(("alone", i) if key is None else key, []).append(item)
        # a later stage reads what an earlier one writes (an evaluation: the model its copy's average makes)
        for items in sorted(groups.values(), key=lambda items: items[0].request.stage):
            self.flushes += 1
            began = time.perf_counter()
            try:
                results = _run_group([it.request for it in items], self.graphs)
                for it, res in zip(items, results, strict=True):
                    it.result = res
            except BaseException as exc:  # noqa: BLE001 - every waiting copy gets the error
                for it in items:
                    it.error = exc
            if self.synchronize is not None:
                self.synchronize()
            self.engine_kinds[items[0].request.kind] += time.perf_counter() - began

    @property
    def engine_seconds(self) -> float:
        """Wall seconds spent in the engine calls so far (the sum of :attr:`engine_kinds`)."""
        return sum(self.engine_kinds.values())


def _run_group(requests: list[Request], graphs: CohortGraphs | None = None) -> list[Any]:
    if len(requests) == 1:
        return [requests[0].run()]
    if isinstance(requests[0], TrainRequest):
        return _train_merged(cast(list[TrainRequest], requests), graphs)
    return _MERGED[type(requests[0])](requests)


def _within_budget(requests: list[T], size: Callable[[T], int]) -> list[list[T]]:
    """Consecutive requests grouped while their sizes (in values) sum to at most ``MERGED_VALUES``.

    Every group has at least one request, however large.
    """
    groups: list[list[T]] = [[]]
    held = 0
    for request in requests:
        values = size(request)
        if groups[-1] and held + values > MERGED_VALUES:
            groups.append([])
            held = 0
        groups[-1].append(request)
        held += values
    return groups


def _models_held(request: StatsRequest | EvalRequest) -> int:
    """The values of the models a request brings, which its merged call copies."""
    return request.stack.k * request.stack.arch.num_params


def _probe_merged(requests: list[ProbeRequest]) -> list[Probe]:
    """Every request's probe, one pass per group of requests within ``MERGED_VALUES``.

    A group's models are copied into one stack and their gradients computed at once, and each
    client's batch holds the architecture's widest activation: a request counts the larger.
    """
    groups = _within_budget(requests, lambda r: r.models.shape[0] * max(r.arch.num_params,
                                                                     r.batch_size * r.arch.widest))
    return [probe for group in groups for probe in _probe_group(group)]


def _probe_group(requests: list[ProbeRequest]) -> list[Probe]:
    first = requests[0]
    draws = [r.draw for r in requests]
    draw = BatchDraw.concat(draws, np.arange(sum(len(d.parts) for d in draws)))
    models = Stack.from_rows(first.arch, [r.models for r in requests])
    res = _probe(first.arch, models, first.x, first.y, draw, first.batch_size)
    out, lo = [], 0
    for r in requests:
        k = r.models.shape[0]
        grad = res.grad[lo: lo + k]  # a view of the merged result, unless the request brought its own buffer
        out.append(Probe(res.loss[lo: lo + k],
                         grad if r.into is None else r.into.view(grad.shape).copy_(grad)))
        lo += k
    return out


def _evaluate_merged(requests: list[EvalRequest]) -> list[EvalResult]:
    """Every request's evaluation, one per group of requests whose models hold ``MERGED_VALUES``.

    A group's models are copied into one stack, and its samples run in chunks
    (``MERGED_EVAL_ROWS``, ``MERGED_VALUES``).
    """
    return [result for group in _within_budget(requests, _models_held) for result in _evaluate_group(group)]


def _evaluate_group(requests: list[EvalRequest]) -> list[EvalResult]:
    first = requests[0]
    parts = [p for r in requests for p in r.parts]
    # longest part first: a chunk of samples runs only the models with samples in it
    order = np.argsort([-p.shape[0] for p in parts], kind="stable")
    stack = _gathered([r.stack for r in requests], order)
    rows = min(MERGED_EVAL_ROWS, MERGED_VALUES // stack.arch.widest)
    batch_size = min(first.batch_size, max(rows // stack.k, 1))
    res = evaluate_stack(stack, first.x, first.y, [parts[i] for i in order], batch_size, scores=first.scores,
                         soft_labels=first.soft_labels)
    back = torch.as_tensor(np.argsort(order), device=res.loss.device)
    res = EvalResult(res.loss[back], res.accuracy[back], res.soft_labels[back], res.count[back])
    out, lo = [], 0
    for r in requests:
        k = r.stack.k
        out.append(EvalResult(res.loss[lo: lo + k], res.accuracy[lo: lo + k], res.soft_labels[lo: lo + k],
                              res.count[lo: lo + k]))
        lo += k
    return out


def _train_merged(requests: list[TrainRequest], graphs: CohortGraphs | None = None) -> list[TrainResult]:
    """Every request's clients as one cohort ordered by local steps (most first), split back.

    Past ``MERGED_TRAIN_CLIENTS`` clients, or ``MERGED_VALUES`` activations of a batch, the cohort
    trains in chunks of consecutive clients of that order, each one batched call. On a GPU, with
    ``graphs``, a chunk whose shape recurs replays a CUDA graph.
    """
    first = requests[0]
    role = first.members[0].role
    per_client = first.batch_size * first.members[0].stack.arch.widest  # its batch's widest activation
    width = min(MERGED_TRAIN_CLIENTS, max(MERGED_VALUES // per_client, 1))
    draws, stacks = [r.draw for r in requests], [r.members[0].stack for r in requests]
    order = np.argsort(-np.concatenate([d.steps for d in draws]), kind="stable")
    place = np.argsort(order, kind="stable")  # each client's row in the order
    starts = torch.stack([cast(Tensor, r.members[0].start) for r in requests])  # a federation's members: set
    copy_of = np.repeat(np.arange(len(requests)), [s.k for s in stacks])  # each client's request
    lr = torch.cat([r.lr for r in requests])
    mean, last = torch.empty_like(lr), torch.empty_like(lr)
    for lo in range(0, len(order), width):
        chunk = order[lo: lo + width]
        rows = _RowMap(stacks, place, lo, lo + len(chunk))
        at = torch.as_tensor(chunk, device=lr.device)
        member = Member(role, _starting(first.members[0].stack.arch, starts,
                                        torch.as_tensor(copy_of[chunk], device=lr.device)))
        schedule = layout(BatchDraw.concat(draws, chunk), first.batch_size)
        if graphs is not None and first.x.is_cuda and capturable(member, first.algorithm):
            result, trained = graphs.train(member, first.x, first.y, schedule, lr[at], first.optimizer,
                                           first.algorithm)
        else:
            result, trained = train_cohort([member], first.x, first.y, schedule, lr[at], first.optimizer,
                                           loss_fn=first.loss_fn, algorithm=first.algorithm), member.stack
        rows.scatter(trained)
        mean[at], last[at] = result.mean_loss[role], result.last_epoch_loss[role]
    out, lo = [], 0
    for stack in stacks:
        out.append(TrainResult({role: mean[lo: lo + stack.k]}, {role: last[lo: lo + stack.k]}))
        lo += stack.k
    return out


class _RowMap:
    """Which rows of which stacks are rows ``lo:hi`` of a merged order (``place``: each row's position).

    A stack wholly inside the chunk (every stack, unless the cohort is cut) is written whole, with
    no selection of its rows.
    """

    def __init__(self, stacks: list[Stack], place: np.ndarray, lo: int, hi: int) -> None:
        device = stacks[0].flat.device
        sizes = [stack.k for stack in stacks]  # each at least 1 (a request trains someone)
        starts = np.cumsum([0, *sizes[:-1]])
        inside = (place >= lo) & (place < hi)
        at = torch.as_tensor(place - lo, device=device)  # each row's row in the chunk
        # (stack, its rows or None = all, chunk rows)
        self.pairs: list[tuple[Stack, Tensor | None, Tensor]] = []
        for stack, start, count in zip(stacks, starts.tolist(), np.add.reduceat(inside, starts).tolist(),
                                       strict=True):
            if count == stack.k:
                self.pairs.append((stack, None, at[start: start + stack.k]))
            elif count:
                rows = torch.as_tensor(np.flatnonzero(inside[start: start + stack.k]), device=device)
                self.pairs.append((stack, rows, at[start + rows]))

    def scatter(self, merged: Stack) -> None:
        """Write the chunk's (trained) rows back to their stacks."""
        for i, block in enumerate(merged.blocks):
            for stack, src, dst in self.pairs:
                if src is None:
                    torch.index_select(block, 0, dst, out=stack.blocks[i])
                else:
                    stack.blocks[i].index_copy_(0, src, block.index_select(0, dst))


# the merged call of each request kind but training, which takes the batcher's graphs (_run_group)
_MERGED: dict[type, Callable[[list[Any]], list[Any]]] = {
    EvalRequest: _evaluate_merged, ProbeRequest: _probe_merged, StatsRequest: _statistics_merged,
    AverageRequest: _average_merged,
}


def _starting(arch: Architecture, starts: Tensor, rows: Tensor) -> Stack:
    """A stack whose row ``j`` is ``starts[rows[j]]``, written one parameter block at a time."""
    stack = Stack(arch, starts.new_empty(len(rows) * arch.num_params))
    for block, column in zip(stack.blocks, starts.split_with_sizes(arch.sizes, dim=1), strict=True):
        torch.index_select(column, 0, rows, out=block.view(len(rows), -1))
    return stack


def _gathered(stacks: list[Stack], order: np.ndarray) -> Stack:
    """Row ``order[j]`` of the stacks' rows (one stack's after another's) at row ``j``, a block at a time."""
    arch = stacks[0].arch
    merged = Stack(arch, stacks[0].flat.new_empty(len(order) * arch.num_params))
    rows = torch.as_tensor(order, device=merged.flat.device)
    for i, block in enumerate(merged.blocks):
        torch.index_select(torch.cat([s.blocks[i] for s in stacks]), 0, rows, out=block)
    return merged
