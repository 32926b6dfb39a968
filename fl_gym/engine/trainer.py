"""Local training of a whole cohort of clients as stacked batches.

A cohort is the ``k`` clients that train this round, ordered by local steps (most first, see
:mod:`fl_gym.engine.schedule`). Each client trains one model per *role* (``"model"``; or
``"local"`` and ``"lite"`` for HAPFL's mutual learning). Clients that share a role and an
architecture form one :class:`Member`, a :class:`~fl_gym.models.architecture.Stack`; a role may
have several members (HAPFL's size groups). One local step is then: gather every client's batch,
forward each member, assemble logits per role, one loss call for all, backward each member,
one optimiser update per member. The Python work per step is a loop over members (one to a
handful), never over clients.

pFedMe (Dinh et al., 2020) replaces the plain step: per batch, ``inner_steps`` updates of a
personal model ``theta`` toward ``argmin f(theta) + lam/2 ||theta - w||^2``, then
``w <- w - lr * lam * (w - theta)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fl_gym.engine.losses import LossFn, cross_entropy
from fl_gym.engine.optim import OptimizerConfig, StackOptimizer
from fl_gym.engine.schedule import BatchSchedule
from fl_gym.models.architecture import Stack, prefix
from fl_gym.validation import is_int_at_least, is_positive, require


@dataclass(frozen=True)
class PFedMeConfig:
    """pFedMe's local solver (spec hapfl.md section 6.5 defaults).

    Attributes:
        lam: Moreau-envelope regularisation ``lambda``.
        inner_steps: personal-model steps per batch ``K``.
        personal_lr: learning rate of the personal model.
        beta: server mixing, ``w <- (1 - beta) w + beta * mean(w_i)``.
    """

    lam: float = 15.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: float = 1.0

    def __post_init__(self) -> None:
        require(is_positive(self.lam), "pfedme.lam", self.lam, "a float > 0")
        require(is_int_at_least(self.inner_steps, 1), "pfedme.inner_steps", self.inner_steps, "an integer >= 1")
        require(is_positive(self.personal_lr), "pfedme.personal_lr", self.personal_lr, "a float > 0")
        require(0 < self.beta <= 2, "pfedme.beta", self.beta, "a float in (0, 2]")


@dataclass(eq=False)
class Member:
    """Clients of a cohort that train the same architecture in the same role.

    Attributes:
        role: loss role, e.g. ``"model"``.
        stack: their parameters, one row per member client, in cohort order.
        slots: ``(K_m,)`` ascending cohort positions of the member clients; None = the whole cohort.
        personal: after pFedMe training, the clients' personal models ``theta``.
    """

    role: str
    stack: Stack
    slots: Tensor | None = None
    personal: Stack | None = None

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
                 optimizer: OptimizerConfig, *, loss_fn: LossFn = cross_entropy, prox_mu: float = 0.0,
                 pfedme: PFedMeConfig | None = None, gen: torch.Generator | None = None) -> TrainResult:
    """Run every local step of a cohort, updating the members' stacks in place.

    Args:
        members: the stacks to train; together they cover every (cohort slot, role) once.
        x: training inputs of the whole data set.
        y: its labels.
        schedule: the cohort's batches (see :func:`~fl_gym.engine.schedule.make_schedule`).
        lr: ``(k,)`` learning rate per cohort client.
        optimizer: local optimiser (fresh state).
        loss_fn: loss over role logits (:mod:`fl_gym.engine.losses`).
        prox_mu: FedProx proximal weight (0 = off).
        pfedme: use pFedMe's local solver instead of plain steps.
        gen: generator for dropout.
    """
    k = len(schedule.steps)
    if lr.shape != (k,):
        raise ValueError(f"train_cohort: expected lr of shape ({k},), got {tuple(lr.shape)}")
    roles = sorted({m.role for m in members})
    runs = [_Run(m, lr, optimizer, prox_mu, pfedme) for m in members]
    history = {r: torch.zeros(schedule.num_steps, k, device=x.device) for r in roles}
    step = _pfedme_step if pfedme is not None else _plain_step
    prev_active = k
    for s, a in enumerate(schedule.active):
        if a != prev_active:
            for run in runs:
                run.set_active(run.member.active(a))
            prev_active = a
        idx, w = schedule.idx[s, :a], schedule.weight[s, :a]
        yb = y[idx]
        for r, v in step(runs, x, idx, yb, w, a, loss_fn, gen).items():
            history[r][s, :a] = v
    if pfedme is not None:
        for run in runs:
            run.member.personal = run.trained
    steps = torch.as_tensor(schedule.steps, device=x.device, dtype=torch.float32)
    last_start = steps - torch.as_tensor(schedule.batches_per_epoch, device=x.device, dtype=torch.float32)
    in_last = torch.arange(schedule.num_steps, device=x.device).unsqueeze(1) >= last_start
    last_n = in_last.sum(0).clamp_min(1)
    return TrainResult({r: h.sum(0) / steps for r, h in history.items()},
                       {r: (h * in_last).sum(0) / last_n for r, h in history.items()})


class _Run:
    """A member's training state for one round: optimiser(s), gradient buffer, active count."""

    def __init__(self, member: Member, lr: Tensor, optimizer: OptimizerConfig, prox_mu: float,
                 pfedme: PFedMeConfig | None) -> None:
        self.member, self.pfedme = member, pfedme
        stack = member.stack
        self.lr = lr if member.slots is None else lr[member.slots]
        self.grad = torch.zeros_like(stack.flat)
        self.grad_blocks = stack.views(self.grad)
        self.active = stack.k
        if pfedme is None:
            self.trained, self.opt = stack, StackOptimizer(stack, optimizer, self.lr, prox_mu)
        else:  # the personal model theta trains, pulled toward the live local model w
            self.trained = Stack(stack.arch, stack.flat.clone())
            self.opt = StackOptimizer(self.trained, OptimizerConfig(), torch.full_like(self.lr, pfedme.personal_lr),
                                      pfedme.lam, anchor=stack.flat)
            self.w_opt = StackOptimizer(stack, OptimizerConfig(), self.lr)  # w <- w - lr * lam * (w - theta)

    def set_active(self, active: int) -> None:
        self.active = active
        self.opt.set_active(active)
        if self.pfedme is not None:
            self.w_opt.set_active(active)


def _gradients(runs: list[_Run], x: Tensor, idx: Tensor, yb: Tensor, w: Tensor, a: int, loss_fn: LossFn,
               gen: torch.Generator | None) -> dict[str, Tensor]:
    """Forward every active member, call the loss once, backpropagate into each ``run.grad``."""
    live = [run for run in runs if run.active]
    logits: dict[str, Tensor] = {}
    tapes = []
    for run in live:
        m, arch = run.member, run.trained.arch
        params = prefix(run.trained.blocks, run.active)
        ids = idx if m.slots is None else idx[m.slots[: run.active]]
        out, tape = arch.forward(params, arch.gather(x, ids), True, gen)
        tapes.append((params, tape))
        if m.slots is None:
            logits[m.role] = out
        else:
            if m.role not in logits:
                logits[m.role] = out.new_empty((a, *out.shape[1:]))
            logits[m.role][m.slots[: run.active]] = out
    losses, dlogits = loss_fn(logits, yb, w)
    for run, (params, tape) in zip(live, tapes, strict=True):
        m = run.member
        d = dlogits[m.role] if m.slots is None else dlogits[m.role][m.slots[: run.active]]
        run.trained.arch.backward(params, tape, d, prefix(run.grad_blocks, run.active))
    return losses


def _plain_step(runs, x, idx, yb, w, a, loss_fn, gen) -> dict[str, Tensor]:
    losses = _gradients(runs, x, idx, yb, w, a, loss_fn, gen)
    for run in runs:
        if run.active:
            run.opt.step(run.grad)
    return losses


def _pfedme_step(runs, x, idx, yb, w, a, loss_fn, gen) -> dict[str, Tensor]:
    for _ in range(runs[0].pfedme.inner_steps):
        losses = _gradients(runs, x, idx, yb, w, a, loss_fn, gen)
        for run in runs:
            if run.active:
                run.opt.step(run.grad)
    for run in runs:  # w <- w - lr * lam * (w - theta): an SGD step on the gradient lam * (w - theta)
        if run.active:
            torch.sub(run.member.stack.flat, run.trained.flat, out=run.grad).mul_(run.pfedme.lam)
            run.w_opt.step(run.grad)
    return losses
