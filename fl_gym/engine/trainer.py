"""Local training of a whole cohort of clients as stacked batches.

A cohort is the ``k`` clients that train this round, ordered by local steps (most first, see
:mod:`fl_gym.engine.schedule`). Each client trains one model per *role* (``"model"``; or
``"local"`` and ``"lite"`` for mutual learning with a companion). Clients that share a role and an
architecture form one :class:`Member`, a :class:`~fl_gym.models.architecture.Stack`; a role may
have several members (model-size groups). One local step is then: gather every client's batch,
forward each member, assemble logits per role, one loss call for all, backward each member,
one optimiser update per member. The Python work per step is a loop over members (one to a
handful), never over clients.

How each member steps is the local algorithm's (:mod:`fl_gym.engine.algorithms`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import Tensor

from fl_gym.engine.algorithms import SGD, LocalAlgorithm, MemberRun
from fl_gym.engine.losses import LossFn, cross_entropy
from fl_gym.engine.optim import OptimizerConfig
from fl_gym.engine.schedule import BatchSchedule
from fl_gym.models.architecture import Stack

PLAIN = SGD()


@dataclass(eq=False)
class Member:
    """Clients of a cohort that train the same architecture in the same role.

    Attributes:
        role: loss role, e.g. ``"model"``.
        stack: their parameters, one row per member client, in cohort order.
        slots: ``(K_m,)`` ascending cohort positions of the member clients; None = the whole cohort.
        personal: after training, the models local evaluation scores when they differ from
            ``stack`` (pFedMe's personal models ``theta``); None otherwise.
        start: ``(P,)`` the model every row starts the round from, written into the rows when
            the training request runs (:meth:`write_start`); None = the rows as they are.
    """

    role: str
    stack: Stack
    slots: Tensor | None = None
    personal: Stack | None = None
    start: Tensor | None = None

    def write_start(self) -> None:
        """Every row set to ``start`` (a no-op without one)."""
        if self.start is not None:
            Stack.broadcast(self.stack.arch, self.start, self.stack.k, self.stack.flat)

    def active(self, cohort_active: int) -> int:
        """Member clients among the first ``cohort_active`` cohort clients."""
        if self.slots is None:
            return cohort_active
        return int(torch.searchsorted(self.slots, cohort_active))


@dataclass(frozen=True)
class TrainResult:
    """Per-role ``(k,)`` statistics of a cohort's local training.

    Attributes:
        mean_loss: mean training loss over all local steps.
        last_epoch_loss: mean training loss over the last epoch's steps.
    """

    mean_loss: dict[str, Tensor]
    last_epoch_loss: dict[str, Tensor]


def train_cohort(members: list[Member], x: Tensor, y: Tensor, schedule: BatchSchedule, lr: Tensor,
                 optimizer: OptimizerConfig, *, loss_fn: LossFn = cross_entropy,
                 algorithm: LocalAlgorithm = PLAIN,
                 clients: np.ndarray | None = None, gen: torch.Generator | None = None) -> TrainResult:
    """Run every local step of a cohort, updating the members' stacks in place.

    Args:
        members: the stacks to train; together they cover every (cohort slot, role) once.
        x: training inputs of the whole data set.
        y: its labels.
        schedule: the cohort's batches (see :func:`~fl_gym.engine.schedule.make_schedule`).
        lr: ``(k,)`` learning rate per cohort client.
        optimizer: local optimiser (fresh state).
        loss_fn: loss over role logits (:mod:`fl_gym.engine.losses`).
        algorithm: the local algorithm (:mod:`fl_gym.engine.algorithms`; plain steps by default).
        clients: ``(k,)`` client ids of the cohort slots, for stateful algorithms (default ``0..k-1``).
        gen: generator for dropout.
    """
    check_rates(lr, len(schedule.steps), "train_cohort")
    runs, member_clients, history = start_runs(members, schedule, lr, optimizer, algorithm, clients, x.device)
    run_steps(members, runs, x, y, schedule, history, loss_fn, gen, algorithm)
    algorithm.finish(runs, member_clients)
    for member, run in zip(members, runs, strict=True):
        member.personal = None if run.trained is run.stack else run.trained
    return mean_losses(history, schedule, x.device)


def check_rates(lr: Tensor, k: int, where: str) -> None:
    """Refuse rates of any shape but ``(k,)``, one per client (a scalar would broadcast silently)."""
    if lr.shape != (k,):
        raise ValueError(f"{where}: expected lr of shape ({k},), got {tuple(lr.shape)}")


def start_runs(members: list[Member], schedule: BatchSchedule, lr: Tensor, optimizer: OptimizerConfig,
               algorithm: LocalAlgorithm, clients: np.ndarray | None, device: torch.device
               ) -> tuple[list[MemberRun], list[np.ndarray], dict[str, Tensor]]:
    """Every member's run, its clients' ids, and a zero ``(S, k)`` loss history per role."""
    k = len(schedule.steps)
    ids = np.arange(k) if clients is None else np.asarray(clients)
    member_clients = [ids if m.slots is None else ids[m.slots.cpu().numpy()] for m in members]
    steps = np.asarray(schedule.steps)
    runs = [algorithm.start(m.stack, c, lr if m.slots is None else lr[m.slots],
                            steps if m.slots is None else steps[m.slots.cpu().numpy()], optimizer)
            for m, c in zip(members, member_clients, strict=True)]
    roles = sorted({m.role for m in members})
    history = {r: torch.zeros(schedule.num_steps, k, device=device) for r in roles}
    return runs, member_clients, history


def run_steps(members: list[Member], runs: list[MemberRun], x: Tensor, y: Tensor, schedule: BatchSchedule,
              history: dict[str, Tensor], loss_fn: LossFn, gen: torch.Generator | None,
              algorithm: LocalAlgorithm) -> None:
    """Every local step, each step's losses written into ``history``.

    Without member slots the host only launches kernels here, so a CUDA graph can capture it
    (:mod:`fl_gym.engine.graphs`).
    """
    k = len(schedule.steps)
    prev_active = k
    # each step's rows as views made in one call, not indexed out step by step
    idx_rows, weight_rows = schedule.idx.unbind(0), schedule.weight.unbind(0)
    history_rows = {r: h.unbind(0) for r, h in history.items()}
    for s, a in enumerate(schedule.active):
        if a != prev_active:
            for member, run in zip(members, runs, strict=True):
                run.set_active(member.active(a))
            prev_active = a
        idx, w = (idx_rows[s], weight_rows[s]) if a == k else (idx_rows[s][:a], weight_rows[s][:a])
        gradients = partial(_gradients, members, runs, x, idx, y.take(idx), w, a, loss_fn, gen, algorithm)
        for r, v in algorithm.step(runs, gradients).items():
            history_rows[r][s][:a].copy_(v)


def mean_losses(history: dict[str, Tensor], schedule: BatchSchedule, device: torch.device) -> TrainResult:
    """The mean loss over every step and over the last epoch's, per role."""
    total = torch.as_tensor(schedule.steps, device=device, dtype=torch.float32)
    last_start = total - torch.as_tensor(schedule.batches_per_epoch, device=device, dtype=torch.float32)
    step = torch.arange(schedule.num_steps, device=device).unsqueeze(1)
    in_last = (step >= last_start) & (step < total)  # not the steps after a client finished
    last_n = in_last.sum(0).clamp_min(1)
    return TrainResult({r: h.sum(0) / total for r, h in history.items()},
                       {r: (h * in_last).sum(0) / last_n for r, h in history.items()})


def _gradients(members: list[Member], runs: list[MemberRun], x: Tensor, idx: Tensor, yb: Tensor,
               w: Tensor, a: int, loss_fn: LossFn, gen: torch.Generator | None,
               algorithm: LocalAlgorithm = PLAIN, descend: bool = False) -> dict[str, Tensor]:
    """Forward every active member, call the loss once, backpropagate into each ``run.grad``.

    An algorithm with a representation term (:meth:`LocalAlgorithm.representation_gradient`)
    adds its gradient at the penultimate layer. With ``descend``, each backward pass takes its
    member's SGD step instead (:class:`~fl_gym.engine.algorithms.Gradients`).
    """
    live = [(m, run) for m, run in zip(members, runs, strict=True) if run.active]
    logits: dict[str, Tensor] = {}
    tapes = []
    for m, run in live:
        arch, params = run.trained.arch, run.live_params
        ids = idx if m.slots is None else idx[m.slots[: run.active]]
        xb = arch.gather(x, ids)
        out, tape = arch.forward(params, xb, True, gen)
        rows = slice(None) if m.slots is None else m.slots[: run.active]
        extra = algorithm.representation_gradient(run, xb, arch.representation(tape), w[rows]) \
            if algorithm.uses_representation else None
        tapes.append((params, tape, extra))
        if m.slots is None:
            logits[m.role] = out
        else:
            if m.role not in logits:
                logits[m.role] = out.new_empty((a, *out.shape[1:]))
            logits[m.role][m.slots[: run.active]] = out
    losses, dlogits = loss_fn(logits, yb, w)
    for (m, run), (params, tape, extra) in zip(live, tapes, strict=True):
        d = dlogits[m.role] if m.slots is None else dlogits[m.role][m.slots[: run.active]]
        rate = run.opt.fused_rate() if descend else None
        run.trained.arch.backward(params, tape, d, run.live_grads, extra, rate)
    return losses
