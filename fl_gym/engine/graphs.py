"""CUDA graphs of a cohort's local training: captured once per cohort shape, replayed on new batches.

On a GPU, a round of small models is bound by kernel launches: each local step launches every
member's forward, loss, backward and update kernels, each a few microseconds of work. A graph
launches a whole round's kernels in one call (docs/performance.md measures the gain). A graph
replays one shape: the same architecture, optimiser and local algorithm, the same number of
clients with the same local steps each, the same batch size. Rows, learning rates and batches
are copied into the graph's buffers before each replay.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial

import numpy as np
import torch
from torch import Tensor

from fl_gym.engine.algorithms import LocalAlgorithm
from fl_gym.engine.losses import LossFn, cross_entropy
from fl_gym.engine.optim import OptimizerConfig, shared_rate
from fl_gym.engine.schedule import BatchSchedule
from fl_gym.engine.trainer import (
    PLAIN,
    Member,
    TrainResult,
    check_rates,
    mean_losses,
    run_steps,
    start_runs,
    train_cohort,
)
from fl_gym.models.architecture import Stack


class GraphedCohort:
    """A cohort's local training captured once as a CUDA graph, then replayed on new batches.

    What it captures is fixed: the members, the optimiser, the local algorithm and the schedule's
    shape (every client's steps and the batch size). :meth:`replay` copies a new schedule's
    batches and learning rates into the captured ones' buffers, which the graph owns, and restarts
    the members' rows from the rows they held when captured, or from ``start``.

    Args are :func:`~fl_gym.engine.trainer.train_cohort`'s, on a CUDA device, for members without
    slots (a slot lookup reads the device mid-round), models without dropout, and algorithms
    without per-client state or personal models.
    """

    def __init__(self, members: list[Member], x: Tensor, y: Tensor, schedule: BatchSchedule, lr: Tensor,
                 optimizer: OptimizerConfig, *, loss_fn: LossFn = cross_entropy,
                 algorithm: LocalAlgorithm = PLAIN, warmup: int = 2) -> None:
        if x.device.type != "cuda":
            raise ValueError(f"GraphedCohort: expected data on a CUDA device, got {x.device}; allowed: cuda")
        if not all(capturable(m, algorithm) for m in members):
            raise ValueError("GraphedCohort: expected members without slots or dropout and a stateless "
                             f"algorithm, got {[m.role for m in members]} with {algorithm.name!r}")
        check_rates(lr, len(schedule.steps), "GraphedCohort")
        self.members, self.schedule, self._device = members, schedule, x.device
        self._data = (x, y)  # the graph reads their memory: alive as long as it is
        self._rows = [m.stack.flat.clone() for m in members]
        self._lr, self._shared = lr.clone(), shared_rate(lr)
        self._runs, _, self._history = start_runs(members, schedule, self._lr, optimizer, algorithm, None,
                                                  x.device)
        if any(run.trained is not run.stack for run in self._runs):
            raise ValueError(f"GraphedCohort: algorithm {algorithm.name!r} trains personal models; "
                             "allowed: one that trains the members' stacks")
        for run in self._runs:
            for opt in (run.opt, *run.extra):
                opt.rates_from_tensor()
        steps = partial(run_steps, members, self._runs, x, y, schedule, self._history, loss_fn, None,
                        algorithm)
        side = torch.cuda.Stream(x.device)  # warm-up off the capturing stream, as torch asks
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self._restart()
                steps()
        torch.cuda.current_stream(x.device).wait_stream(side)
        self._restart()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            steps()

    def _restart(self, start: list[Tensor] | None = None) -> None:
        for member, rows, run in zip(self.members, start or self._rows, self._runs, strict=True):
            member.stack.flat.copy_(rows)
            run.restart()

    def replay(self, schedule: BatchSchedule, start: list[Tensor] | None = None,
               lr: Tensor | None = None) -> TrainResult:
        """Train the members on ``schedule``'s batches (the captured shape); the rows end in the members.

        Args:
            schedule: this round's batches.
            start: each member's flat rows to start from (default: the rows it held when captured).
            lr: ``(k,)`` learning rates (default: the captured ones); all equal where the
                captured ones were, and not all equal where they were not.
        """
        captured = self.schedule
        if schedule.idx.shape != captured.idx.shape or not np.array_equal(schedule.steps, captured.steps):
            raise ValueError(f"GraphedCohort.replay: expected a schedule of steps {captured.steps.tolist()} "
                             f"and batches {tuple(captured.idx.shape)}, got {schedule.steps.tolist()} and "
                             f"{tuple(schedule.idx.shape)}")
        if start is not None and [t.shape for t in start] != [r.shape for r in self._rows]:
            raise ValueError(f"GraphedCohort.replay: expected start rows of shapes "
                             f"{[tuple(r.shape) for r in self._rows]}, got {[tuple(t.shape) for t in start]}")
        if lr is not None:
            check_rates(lr, len(captured.steps), "GraphedCohort.replay")
            if shared_rate(lr) != self._shared:
                raise ValueError(f"GraphedCohort.replay: expected {'equal' if self._shared else 'unequal'} "
                                 f"learning rates, as captured, got {lr.tolist()}")
            self._lr.copy_(lr)
        captured.idx.copy_(schedule.idx)
        captured.weight.copy_(schedule.weight)
        self._restart(start)
        self.graph.replay()
        return mean_losses(self._history, schedule, self._device)  # its epochs: 12 steps are 2 x 6 or 1 x 12


def capturable(member: Member, algorithm: LocalAlgorithm) -> bool:
    """Whether a member's training can be captured: no slots, no dropout, a stateless algorithm."""
    return member.slots is None and not member.stack.arch.random_in_training and algorithm.stateless


def shape_key(member: Member, x: Tensor, y: Tensor, schedule: BatchSchedule, lr: Tensor,
              optimizer: OptimizerConfig, algorithm: LocalAlgorithm) -> tuple:
    """What a graph of ``member``'s round fixes; rounds with equal keys replay one graph."""
    return (member.stack.arch.name, member.role, optimizer, type(algorithm), getattr(algorithm, "mu", 0.0),
            id(x), id(y), tuple(schedule.steps), schedule.idx.shape, shared_rate(lr))


class CohortGraphs:
    """The graphs of the cohort shapes that recur, each captured the second time its shape is seen.

    A shape seen once trains eagerly, so cohorts that never recur (clients drawn at random) pay
    nothing for a capture. The ``limit`` most recently used graphs are kept, and the shapes of the
    last ``remembered`` rounds without one.
    """

    def __init__(self, limit: int = 16, remembered: int = 1024) -> None:
        self.limit, self.remembered = limit, remembered
        self.captures = self.replays = 0
        self._graphs: OrderedDict[tuple, GraphedCohort] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()

    def train(self, member: Member, x: Tensor, y: Tensor, schedule: BatchSchedule, lr: Tensor,
              optimizer: OptimizerConfig, algorithm: LocalAlgorithm) -> tuple[TrainResult, Stack]:
        """One member's round, replayed where its shape has a graph; the result and the trained rows.

        The trained rows are the member's stack, or the graph's, which the next replay overwrites.
        """
        key = shape_key(member, x, y, schedule, lr, optimizer, algorithm)
        graphed = self._graphs.get(key)
        if graphed is None and key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > self.remembered:
                self._seen.popitem(last=False)
            return train_cohort([member], x, y, schedule, lr, optimizer, algorithm=algorithm), member.stack
        start: list[Tensor] | None = [member.stack.flat]
        if graphed is None:  # the second time: capture (the member's stack becomes the graph's)
            graphed = self._graphs[key] = GraphedCohort([member], x, y, schedule, lr, optimizer,
                                                        algorithm=algorithm)
            self.captures, start = self.captures + 1, None
            if len(self._graphs) > self.limit:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        self.replays += 1
        result = graphed.replay(schedule, start, lr)
        return result, graphed.members[0].stack
