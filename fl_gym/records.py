"""The two records that cross the env/simulator boundary: what the server decides, what it sees.

Both hold one entry per client (``K`` of them, in client-id order); clients that do not take
part in a round carry NaN (floats) or False (flags) in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RoundPlan:
    """The server's decisions for one round.

    Attributes:
        selected: ``(K,)`` bool: trains this round.
        model: ``(K,)`` int: index into ``FederationConfig.models`` (the client's model size).
        epochs: ``(K,)`` float >= 0: local epochs (fractional epochs round the step count).
        lr: ``(K,)`` float > 0: local learning rate.
        aggregate: ``(K,)`` bool: uploads and is aggregated (only selected clients can).
        weight: ``(K,)`` float >= 0 or None: aggregation weights, renormalised over the clients
            aggregated into each model; None = the config's rule.
    """

    selected: np.ndarray
    model: np.ndarray
    epochs: np.ndarray
    lr: np.ndarray
    aggregate: np.ndarray
    weight: np.ndarray | None = None

    @classmethod
    def make(cls, num_clients: int, *, lr: float | np.ndarray, selected: np.ndarray | None = None,
             model: int | np.ndarray = 0, epochs: float | np.ndarray = 1.0, aggregate: np.ndarray | None = None,
             weight: np.ndarray | None = None) -> RoundPlan:
        """Broadcast scalars to ``(K,)`` arrays; by default everyone trains and is aggregated."""
        full = lambda v, dtype: np.broadcast_to(np.asarray(v, dtype=dtype), (num_clients,)).copy()  # noqa: E731
        sel = full(True if selected is None else selected, bool)
        agg = sel.copy() if aggregate is None else full(aggregate, bool)
        return cls(sel, full(model, np.int64), full(epochs, np.float64), full(lr, np.float64), agg,
                   None if weight is None else full(weight, np.float64))

    def validate(self, num_clients: int, num_models: int) -> None:
        """Raise ``ValueError`` naming the first field that is malformed."""
        names = ("selected", "model", "epochs", "lr", "aggregate") + (("weight",) if self.weight is not None else ())
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.shape != (num_clients,):
                raise ValueError(f"plan.{name} has shape {getattr(value, 'shape', None)}; allowed: "
                                 f"a numpy array of shape ({num_clients},)")
        sel = self.selected
        if not sel.any():
            raise ValueError("plan.selected is all False; allowed: at least one selected client")
        model, epochs, lr = self.model[sel], self.epochs[sel], self.lr[sel]
        if model.min() < 0 or model.max() >= num_models:
            raise ValueError(f"plan.model={model.tolist()} is out of range; allowed: 0..{num_models - 1}")
        if not (np.isfinite(epochs).all() and epochs.min() >= 0):
            raise ValueError(f"plan.epochs={epochs.tolist()} is out of range; allowed: floats >= 0")
        if not (np.isfinite(lr).all() and lr.min() > 0):
            raise ValueError(f"plan.lr={lr.tolist()} is out of range; allowed: floats > 0")
        if (self.aggregate & ~sel).any():
            raise ValueError("plan.aggregate marks unselected clients; allowed: a subset of plan.selected")
        if self.weight is not None and not (np.isfinite(self.weight).all() and self.weight.min() >= 0):
            raise ValueError(f"plan.weight={self.weight.tolist()} is out of range; allowed: floats >= 0")


@dataclass(frozen=True)
class RoundReport:
    """What the server sees after a round.

    Per-client fields are ``(K,)`` (``soft_labels`` is ``(K, C)``), NaN where the client did not
    train. Times are simulated seconds from the virtual clock. Learning metrics are NaN in a
    timing-only federation.

    Attributes:
        round: 1-based round index.
        selected: clients that trained.
        aggregated: clients whose update entered the global model(s).
        model: model index per client.
        epochs: local epochs charged by the clock (the plan's; training runs the nearest whole
            number of steps, at least one).
        probe_time: the companion-model probe epoch (HAPFL's ``T^d``; 0 without companion).
        train_time: local training (HAPFL's ``T^l``).
        compute_time: probe + training (``T^c``).
        download_time: receiving the model(s).
        upload_time: sending the model(s) (0 for clients not aggregated).
        client_time: download + compute + upload.
        round_time: slowest client plus server aggregation time.
        straggling_latency: ``max - min`` of ``client_time`` over the selected clients.
        clock: simulated seconds since the episode began, this round included.
        upload_bytes: bytes sent to the server this round.
        loss: mean local training loss; ``last_epoch_loss`` over the last epoch only.
        companion_loss: mean training loss of the companion (LiteModel).
        local_accuracy: trained local model on the client's local test split.
        companion_accuracy: trained companion on the client's local test split.
        soft_labels: mean softmax output of the trained local model on its training data.
        update_norm: ``||w_i - w_global||``.
        update_angle: angle (radians) between the update and the data-size-weighted mean update
            of the client's model population.
        weights: aggregation weight applied (0 where not aggregated).
        companion_weights: weight in the companion's aggregation.
        global_accuracy: ``(M,)`` each global model on the test set; ``global_loss`` alike.
        companion_global_accuracy: the global companion on the test set; ``companion_global_loss``.
    """

    round: int
    selected: np.ndarray
    aggregated: np.ndarray
    model: np.ndarray
    epochs: np.ndarray
    probe_time: np.ndarray
    train_time: np.ndarray
    compute_time: np.ndarray
    download_time: np.ndarray
    upload_time: np.ndarray
    client_time: np.ndarray
    round_time: float
    straggling_latency: float
    clock: float
    upload_bytes: float
    loss: np.ndarray
    last_epoch_loss: np.ndarray
    companion_loss: np.ndarray
    local_accuracy: np.ndarray
    companion_accuracy: np.ndarray
    soft_labels: np.ndarray
    update_norm: np.ndarray
    update_angle: np.ndarray
    weights: np.ndarray
    companion_weights: np.ndarray
    global_accuracy: np.ndarray
    global_loss: np.ndarray
    companion_global_accuracy: float
    companion_global_loss: float

    @property
    def accuracy(self) -> float:
        """Test accuracy of the first global model (NaN when not evaluated)."""
        return float(self.global_accuracy[0])
