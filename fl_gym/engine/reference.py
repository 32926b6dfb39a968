"""The naive per-client training loop: the reference the batched engine is proven and timed against.

Used by the tests and the benchmark only, never by :class:`~fl_gym.federation.Federation`. It is
what an FL simulator typically does: for each client, load the start weights into a
``torch.nn`` model, build a ``torch.optim`` optimiser, and step through the client's batches,
with autograd. It consumes the same :class:`~fl_gym.engine.schedule.BatchSchedule`, so the two
paths see identical batches.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from fl_gym.engine.optim import OptimizerConfig
from fl_gym.engine.schedule import BatchSchedule
from fl_gym.models.architecture import Architecture


def reference_train(arch: Architecture, start: Tensor, x: Tensor, y: Tensor, schedule: BatchSchedule,
                    lr: Tensor, optimizer: OptimizerConfig, prox_mu: float = 0.0,
                    correction: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Train each cohort client in turn; return final parameters, mean losses, last-epoch mean losses.

    ``(k, P)`` parameters; ``(k,)`` losses, the last epoch's over each client's last
    ``batches_per_epoch`` steps.

    Args:
        arch: the architecture (its :meth:`~fl_gym.models.architecture.Architecture.module` is used).
        start: ``(k, P)`` start parameters, cohort order.
        x: training inputs.
        y: training labels.
        schedule: the cohort's batches.
        lr: ``(k,)`` learning rates.
        optimizer: local optimiser.
        prox_mu: FedProx weight: adds ``mu/2 ||w - w_start||^2`` to the loss.
        correction: ``(k, P)`` added to each client's gradient every step (SCAFFOLD's ``c - c_i``).
    """
    module = arch.module().to(x.device)
    out_rows, mean_loss, last_epoch_loss = [], [], []
    for i in range(start.shape[0]):
        with torch.no_grad():
            vector_to_parameters(start[i].clone(), module.parameters())
        anchor = [p.detach().clone() for p in module.parameters()]
        opt = optimizer.torch_optimizer(module.parameters(), float(lr[i]))
        losses = []
        for s in range(int(schedule.steps[i])):
            ids = schedule.idx[s, i][schedule.weight[s, i] > 0]
            opt.zero_grad()
            loss = F.cross_entropy(module(x[ids]), y[ids])
            losses.append(float(loss.detach()))
            if prox_mu:
                pairs = zip(module.parameters(), anchor, strict=True)
                loss = loss + prox_mu / 2 * sum(((p - a) ** 2).sum() for p, a in pairs)
            loss.backward()
            if correction is not None:
                held = [cast(Tensor, p.grad) for p in module.parameters()]  # backward gave each one
                vector_to_parameters(parameters_to_vector(held) + correction[i], held)
            opt.step()
        out_rows.append(parameters_to_vector(module.parameters()).detach().clone())
        mean_loss.append(sum(losses) / len(losses))
        last = losses[max(len(losses) - int(schedule.batches_per_epoch[i]), 0):]
        last_epoch_loss.append(sum(last) / len(last))
    return torch.stack(out_rows), torch.tensor(mean_loss), torch.tensor(last_epoch_loss)
