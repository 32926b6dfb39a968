"""The records that cross the env/simulator boundary: what the server decides, what it sees.

A round passes through three records, one per phase of :class:`~fl_gym.federation.Federation`:
:class:`OpenedRound` (before the server decides), :class:`TrainedRound` (local updates done,
not yet aggregated) and :class:`RoundReport` (aggregated, evaluated); :class:`RoundPlan` is the
server's decision. Every per-client field holds one entry per client (``K`` of them, in
client-id order); clients that do not take part carry NaN (floats) or False (flags).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_gym.clock import RoundLoad
from fl_gym.engine.trainer import Member
from fl_gym.validation import UserError, as_array, is_int_at_least, one_line, require


def _casts_exactly(values: object, dtype: type) -> bool:
    """Whether ``values`` are numbers that ``dtype`` (float64 or int64) holds as they are (int64: whole)."""
    array = values if isinstance(values, np.ndarray) else np.asarray(values)
    kind = array.dtype.kind
    if kind in "iu" or (kind == "f" and dtype is np.float64):
        return True
    with np.errstate(invalid="ignore"):
        return kind == "f" and bool(np.all(np.mod(array, 1) == 0))  # NaN and inf are not whole


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
             model: int | np.ndarray = 0, epochs: float | np.ndarray = 1.0,
             aggregate: np.ndarray | None = None, weight: np.ndarray | None = None) -> RoundPlan:
        """Broadcast scalars to ``(K,)`` arrays; by default everyone trains and is aggregated."""
        require(is_int_at_least(num_clients, 1), "num_clients", num_clients, "an integer >= 1")

        def full(name: str, v: object, dtype: type, allowed: str = "a number") -> np.ndarray:
            def refused(why: str = "") -> UserError:
                shown = v.tolist() if isinstance(v, np.ndarray) else repr(v)
                return UserError(f"{name}={shown} is out of range; allowed: {allowed} or an array of them of "
                                 f"shape ({num_clients},){why}")

            out: np.ndarray = np.empty(num_clients, dtype)
            try:
                out[...] = v  # a scalar or a (K,) array (np.broadcast_to costs several times more per plan)
            except (TypeError, ValueError, OverflowError) as err:  # numpy's names neither field nor shape
                raise refused(f" ({one_line(err)})") from err
            if dtype is not bool and not _casts_exactly(v, dtype):  # numpy read "1" as 1, cut 1.7 to 1
                raise refused()
            return out

        def mask(name: str, v: np.ndarray) -> np.ndarray:
            v = as_array(name, v, f"a mask of shape ({num_clients},), bool or 0/1")
            if not is_mask(v):
                raise UserError(f"{name}={v.tolist()} is out of range; allowed: a mask of shape "
                                f"({num_clients},), bool or 0/1 (not client ids)")
            return full(name, v, bool, "a bool")

        sel = full("selected", True, bool) if selected is None else mask("selected", selected)
        agg = sel.copy() if aggregate is None else mask("aggregate", aggregate)
        return cls(sel, full("model", model, np.int64, "an integer"), full("epochs", epochs, np.float64),
                   full("lr", lr, np.float64), agg,
                   None if weight is None else full("weight", weight, np.float64))

    def validate(self, num_clients: int, num_models: int) -> None:
        """Raise ``ValueError`` naming the first field that is malformed."""
        names = ("selected", "model", "epochs", "lr",
                 "aggregate") + (("weight",) if self.weight is not None else ())
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.shape != (num_clients,):
                raise UserError(f"plan.{name} has shape {getattr(value, 'shape', None)}; allowed: "
                                 f"a numpy array of shape ({num_clients},)")
        sel = self.selected
        if sel.dtype != bool:
            raise UserError(f"plan.selected has dtype {sel.dtype}; allowed: bool")
        if not sel.any():
            raise UserError("plan.selected is all False; allowed: at least one selected client")
        model, epochs, lr = self.model[sel], self.epochs[sel], self.lr[sel]
        if model.min() < 0 or model.max() >= num_models:
            raise UserError(f"plan.model={model.tolist()} is out of range; allowed: 0..{num_models - 1}")
        if not (np.isfinite(epochs).all() and epochs.min() >= 0):
            raise UserError(f"plan.epochs={epochs.tolist()} is out of range; allowed: floats >= 0")
        if not (np.isfinite(lr).all() and lr.min() > 0):
            raise UserError(f"plan.lr={lr.tolist()} is out of range; allowed: floats > 0")
        check_aggregation(sel, self.aggregate, self.weight, "plan.")


def is_mask(values: np.ndarray) -> bool:
    """Bool, or only 0 and 1: client ids read as a mask would select other clients silently."""
    return values.dtype == bool or bool(np.isin(values, (0, 1)).all())


def as_mask(name: str, values: object, k: int, allowed: str | None = None) -> np.ndarray:
    """``values`` as a ``(k,)`` bool mask, or a ``ValueError`` naming ``name`` (see :func:`is_mask`).

    ``allowed``: what the parameter takes, as the error says it (default: such a mask). Values are
    checked before they are cast: ids would pick other clients, and numpy 1 cannot cast text.
    """
    allowed = allowed or f"a mask of shape ({k},), bool or 0/1 (not client ids)"
    given = as_array(name, values, allowed)
    if given.shape != (k,) or not is_mask(given):
        raise UserError(f"{name} has shape {given.shape} and dtype {given.dtype}; allowed: {allowed}")
    return given.astype(bool)


def check_aggregation(selected: np.ndarray, aggregate: np.ndarray, weight: np.ndarray | None,
                      prefix: str = "") -> None:
    """Raise ``ValueError`` unless the aggregation decision fits the selection.

    ``aggregate`` must be a ``(K,)`` bool subset of ``selected``; ``weight`` None or ``(K,)``
    finite floats >= 0.
    """
    k = selected.shape
    if not isinstance(aggregate, np.ndarray) or aggregate.shape != k or aggregate.dtype != bool:
        raise UserError(f"{prefix}aggregate has shape {getattr(aggregate, 'shape', None)}; allowed: a bool "
                         f"array of shape {k}")
    if (aggregate & ~selected).any():
        raise UserError(f"{prefix}aggregate marks unselected clients; allowed: a subset of plan.selected")
    if weight is None:
        return
    if not isinstance(weight, np.ndarray) or weight.shape != k:
        raise UserError(f"{prefix}weight has shape {getattr(weight, 'shape', None)}; allowed: None or shape "
                        f"{k}")
    if not (np.isfinite(weight).all() and weight.min() >= 0):
        raise UserError(f"{prefix}weight={weight.tolist()} is out of range; allowed: floats >= 0")


@dataclass(frozen=True)
class OpenedRound:
    """A round the server has opened: what it knows before it decides (phase 1).

    Attributes:
        round: 1-based index of this round.
        candidates: ``(K,)`` bool: clients drawn for this round (every client by default).
        load: the round's device dynamics; the clock charges this round's training under it.
        probe_time: ``(K,)`` seconds of one probe epoch per client under ``load``
            (``FederationConfig.probe_cost``; 0 without one).
        episode: the federation's episode it was opened in (:attr:`Federation.episode
            <fl_gym.federation.Federation.episode>`): after a reset it cannot be trained or finished.
        opening: its number among the federation's openings (:attr:`Federation.openings
            <fl_gym.federation.Federation.openings>`): once a later round is opened it cannot be
            trained or finished either.
    """

    round: int
    candidates: np.ndarray
    load: RoundLoad
    probe_time: np.ndarray
    episode: int = 0
    opening: int = 0


@dataclass(frozen=True, kw_only=True)
class ClientResults:
    """Per-client results of local training, NaN where a client did not train.

    Attributes:
        loss: ``(K,)`` mean local training loss; ``last_epoch_loss`` over the last epoch only.
        local_accuracy: ``(K,)`` trained local model on the client's local test split.
        soft_labels: ``(K, C)`` mean softmax output of the trained local model on its training data.
        update_norm: ``(K,)`` ``||w_i - w_global||``.
        update_angle: ``(K,)`` angle (radians) between the update and the data-size-weighted mean
            update of the client's model population.
        model_cosine: ``(K,)`` cosine between the trained local model and the global model it
            started from (FedCos's weight).
        model_norm: ``(K,)`` ``||w_i||`` of the trained local model (FedEnt's shares).
    """

    loss: np.ndarray
    last_epoch_loss: np.ndarray
    local_accuracy: np.ndarray
    soft_labels: np.ndarray
    update_norm: np.ndarray
    update_angle: np.ndarray
    model_cosine: np.ndarray
    model_norm: np.ndarray


@dataclass(frozen=True)
class CompanionStats:
    """A companion model's per-client results in a trained round (``FederationConfig.companion``).

    Attributes:
        loss: ``(K,)`` its mean local training loss (NaN where the client did not train).
        accuracy: ``(K,)`` the trained companion on the client's local test split.
    """

    loss: np.ndarray
    accuracy: np.ndarray


@dataclass(frozen=True)
class CompanionReport(CompanionStats):
    """:class:`CompanionStats` of a finished round, with the companion's aggregation and evaluation.

    Attributes:
        weights: ``(K,)`` the aggregation weight of each client's companion (0 where not aggregated).
        global_accuracy: the global companion on the test set (NaN in rounds without an evaluation).
        global_loss: its mean cross-entropy there.
    """

    weights: np.ndarray
    global_accuracy: float = math.nan
    global_loss: float = math.nan


@dataclass(frozen=True, kw_only=True)
class LocalStats(ClientResults):
    """:class:`ClientResults` of a trained round, before aggregation.

    Attributes:
        companion: the companion model's results (None without one).
    """

    companion: CompanionStats | None = None

    @classmethod
    def empty(cls, num_clients: int, num_classes: int, companion: bool = False, read_only: bool = False
              ) -> LocalStats:
        """All-NaN statistics (before training, or for a timing-only federation)."""
        columns = np.full((9 if companion else 7, num_clients), np.nan)  # one block: a row per (K,) field
        lite = CompanionStats(columns[7], columns[8]) if companion else None
        stats = cls(loss=columns[0], last_epoch_loss=columns[1], local_accuracy=columns[2],
                    soft_labels=np.full((num_clients, num_classes), np.nan), update_norm=columns[3],
                    update_angle=columns[4], model_cosine=columns[5], model_norm=columns[6], companion=lite)
        if read_only:  # shared by every timing-only round
            arrays = [getattr(stats, f.name) for f in dataclasses.fields(ClientResults)]
            for value in arrays + ([lite.loss, lite.accuracy] if lite else []):
                value.flags.writeable = False
        return stats

    def accuracy_of(self, companion: bool) -> np.ndarray:
        """``(K,)`` local accuracies of the clients' own models, or (``companion``) of their companions'."""
        if not companion:
            return self.local_accuracy
        if self.companion is None:
            raise ValueError("LocalStats.accuracy_of: these statistics have no companion model")
        return self.companion.accuracy


@dataclass(frozen=True, eq=False)
class Cohort:
    """The stacks a round trained, and which clients each row belongs to (engine-level).

    Attributes:
        order: ``(k,)`` client ids in cohort order (most local steps first).
        members: the trained stacks (:class:`~fl_gym.engine.trainer.Member`).
    """

    order: np.ndarray
    members: list[Member]

    def clients(self, member: Member) -> np.ndarray:
        """Client ids of ``member``'s rows."""
        return self.order if member.slots is None else self.order[member.slots.cpu().numpy()]


@dataclass(frozen=True, eq=False)
class TrainedRound:
    """A round whose selected clients have trained, before aggregation (phase 2).

    Attributes:
        opened: the round as opened.
        plan: the plan it trained under.
        steps: ``(K,)`` local steps run (0 = did not train).
        epochs: ``(K,)`` local epochs charged by the clock (the plan's; training runs the nearest
            whole number of steps, at least one).
        probe_time: ``(K,)`` the probe epoch the clock charges (with a companion model, whose
            training it is part of; else 0).
        train_time: ``(K,)`` local training.
        compute_time: ``(K,)`` probe + training.
        download_time: ``(K,)`` receiving the model(s).
        lost: ``(K,)`` bool: selected clients whose update is lost (dropout, or late past the
            deadline; :mod:`fl_gym.behaviour`): they train nothing and can enter no model.
        partial: ``(K,)`` bool: selected clients that upload only the local steps they finished
            by the deadline (``steps`` and the times are theirs).
        stats: the local training statistics.
        cohort: the trained stacks (None when nothing trained or timing only).
    """

    opened: OpenedRound
    plan: RoundPlan
    steps: np.ndarray
    epochs: np.ndarray
    probe_time: np.ndarray
    train_time: np.ndarray
    compute_time: np.ndarray
    download_time: np.ndarray
    lost: np.ndarray
    partial: np.ndarray
    stats: LocalStats
    cohort: Cohort | None = None


@dataclass(frozen=True, kw_only=True)
class RoundReport(ClientResults):
    """What the server sees after a round.

    Per-client fields are ``(K,)`` (``soft_labels`` is ``(K, C)``), NaN where the client did not
    train. Times are simulated seconds from the virtual clock. Learning metrics are NaN in a
    timing-only federation. The :class:`ClientResults` fields (``loss``, ``local_accuracy``,
    ``soft_labels``, ``update_norm``, ``update_angle``, ...) and the times of
    :class:`TrainedRound` are carried over under the same names.

    Attributes:
        round: 1-based round index.
        selected: clients that trained.
        aggregated: clients whose update entered the global model(s).
        lost: selected clients whose update was lost (dropout or the deadline).
        partial: selected clients that uploaded part of their local work (the deadline).
        model: model index per client.
        epochs: local epochs charged by the clock (the plan's; training runs the nearest whole
            number of steps, at least one).
        probe_time: the probe epoch charged (with a companion model; else 0).
        train_time: local training.
        compute_time: probe + training.
        download_time: receiving the model(s).
        upload_time: sending the model(s) (0 for clients not aggregated).
        client_time: download + compute + upload, at most the round's deadline.
        round_time: slowest client plus server aggregation time.
        straggling_latency: ``max - min`` of ``client_time`` over the selected clients.
        clock: simulated seconds since the episode began, this round included.
        upload_bytes: bytes sent to the server this round.
        weights: aggregation weight applied (0 where not aggregated).
        global_accuracy: ``(M,)`` each global model on the test set (less the validation set, if
            any); ``global_loss`` alike. NaN in rounds without an evaluation.
        val_accuracy: the first global model on the validation set, every round (NaN without one).
        val_loss: its mean cross-entropy there (NaN without one): a reward with less noise than
            the accuracy of a small validation set.
        companion: the companion model's results, aggregation and evaluation (None without one).
    """

    round: int
    selected: np.ndarray
    aggregated: np.ndarray
    lost: np.ndarray
    partial: np.ndarray
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
    weights: np.ndarray
    global_accuracy: np.ndarray
    global_loss: np.ndarray
    val_accuracy: float = math.nan
    val_loss: float = math.nan
    companion: CompanionReport | None = None

    @classmethod
    def of(cls, trained: TrainedRound, **finished: Any) -> RoundReport:
        """The report of ``trained`` finished with ``finished`` (the fields phase 3 adds)."""
        plan, stats = trained.plan, trained.stats
        carried = {name: getattr(trained, name) for name in _CARRIED}
        local = {name: getattr(stats, name) for name in _CLIENT_RESULTS}
        return cls(round=trained.opened.round, selected=plan.selected.copy(), model=plan.model.copy(),
                   **carried, **local, **finished)

    @property
    def accuracy(self) -> float:
        """Test accuracy of the first global model (NaN when not evaluated)."""
        return float(self.global_accuracy[0])


_CARRIED = tuple(f.name for f in dataclasses.fields(TrainedRound)
                 if f.name in RoundReport.__dataclass_fields__)
_CLIENT_RESULTS = tuple(f.name for f in dataclasses.fields(ClientResults))
