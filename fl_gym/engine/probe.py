"""Probe gradients: one minibatch gradient per client at given models, as one stacked batch.

A server that sets per-client learning rates before local training (FedEnt) asks each sampled
client for one minibatch gradient at the broadcast model. The probe runs the forward pass in
evaluation mode (no dropout; ours) and never changes the models.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fl_gym.engine.losses import cross_entropy
from fl_gym.models.architecture import Architecture, Stack


@dataclass(frozen=True)
class Probe:
    """Per-client results of a probe.

    Attributes:
        loss: ``(k,)`` mean cross-entropy of each client's probe batch.
        grad: ``(k, P)`` gradient of that loss at the client's model.
    """

    loss: Tensor
    grad: Tensor


def gradients_at(arch: Architecture, models: Tensor | Stack, x: Tensor, y: Tensor, idx: Tensor, w: Tensor,
                 into: Tensor | None = None) -> Probe:
    """The mean cross-entropy of each row of ``models`` on its batch, and its gradient (evaluation mode).

    ``models`` is ``(k, P)`` (or already a :class:`Stack`); ``idx`` and ``w`` are one step of a
    schedule (``(k, B)`` each); ``into``, if given, a ``(k*P,)`` buffer the gradients are written to.
    """
    stack = models if isinstance(models, Stack) else Stack.from_rows(arch, models)
    shape = (stack.k, arch.num_params)
    # written as rows: no copy
    grad = stack.flat.new_zeros(shape) if into is None else into.view(shape).zero_()
    out, tape = arch.forward(stack.blocks, arch.gather(x, idx), False)
    losses, dlogits = cross_entropy({"model": out}, y[idx], w)
    arch.backward(stack.blocks, tape, dlogits["model"], stack.row_views(grad), None)
    return Probe(losses["model"], grad)

