"""The selection family's observation layouts and action encodings (ours: the papers' decisions as spaces).

The observation is flat: one row per candidate (ascending client id, row ``i`` = action bit
``i``), then the global features.

| part | width | content | range |
|---|---|---|---|
| row: soft label | ``c`` | mean softmax of the trained local model on its training data | [0, 1] |
| row: size | 1 | ``l_k / 2^ceil(log2 max_j l_j)`` (a power of two: size ratios stay exact) | (0, 1] |
| row: negative | 1 | 1 if the candidate was in the negative pool when drawn | {0, 1} |
| row: selections | 1 | times selected so far / rounds per episode | [0, 1] |
| row: leave-one-out gain | 1 | ``[H(mix(S - k)) - H(mix(S))] / log c`` | [-1, 1] |
| global | 6 | see :data:`GLOBAL` | [0, 1] |
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from fl_gym.validation import UserError

GLOBAL = ("progress", "val_accuracy", "entropy", "negative_share", "positive_branch", "kept_share")
"""Global features: round / rounds, last validation accuracy, ``H(mix(S)) / log c``, negative pool
share, 1 if the positive pool was drawn from first, last round's kept share."""
ROW_EXTRAS = ("size", "negative", "selections", "loo_gain")


@dataclass(frozen=True)
class SelectLayout:
    """What a policy needs to read the observation and write the action.

    Attributes:
        candidates: ``m``.
        num_classes: ``c``.
        encoding: ``multibinary`` or ``discrete``.
    """

    candidates: int
    num_classes: int
    encoding: str = "multibinary"

    @property
    def row_width(self) -> int:
        """Values per candidate row."""
        return self.num_classes + len(ROW_EXTRAS)

    def observation_space(self) -> spaces.Box:
        """``Box`` with the bounds of the table above."""
        low = np.zeros((self.candidates, self.row_width), np.float32)
        low[:, -1] = -1.0
        low = np.concatenate([low.ravel(), np.zeros(len(GLOBAL), np.float32)])
        return spaces.Box(low, np.ones_like(low), dtype=np.float32)

    def action_space(self) -> spaces.Space:
        """``MultiBinary(m)`` or ``Discrete(2^m - 1)``."""
        if self.encoding == "discrete":
            return spaces.Discrete(2 ** self.candidates - 1)
        return spaces.MultiBinary(self.candidates)

    def rows(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(soft_labels (m, c), sizes (m,))`` of one flat observation."""
        table = np.asarray(observation, np.float64)[: self.candidates * self.row_width]
        table = table.reshape(self.candidates, self.row_width)
        return table[:, : self.num_classes], table[:, self.num_classes]

    def encode(self, keep: np.ndarray) -> np.ndarray | int:
        """The action that keeps the candidates where ``keep`` is True."""
        keep = np.asarray(keep, bool)
        if self.encoding == "discrete":
            return int(keep @ (1 << np.arange(self.candidates))) - 1
        return keep.astype(np.int8)

    def decode(self, action: np.ndarray | int) -> np.ndarray:
        """The ``(m,)`` keep-mask of an action."""
        if self.encoding == "discrete":
            return ((int(action) + 1) >> np.arange(self.candidates)) & 1 == 1
        return np.asarray(action).astype(bool)


PICK_ROW_EXTRAS = ("seen", "staleness", "size", "negative", "selections")
# what a system-aware selector (Oort, FedCS) reads: with device behaviour on, or system_rows=True
SYSTEM_ROW_EXTRAS = ("available", "reliability", "duration", "loss")


@dataclass(frozen=True)
class PickLayout:
    """``FLSelectPick-v0``'s observation: one row per client (client id order), then the globals.

    A row is the client's last-known soft label (``c``; zeros if never trained), ``seen`` (1 once
    it has been picked), staleness ``(t - t_last) / T`` since it was last picked (1 if never;
    without device behaviour every pick trains, so both date its soft label), size as in
    :class:`SelectLayout`, 1 if in the negative pool, and times selected / T, all in ``[0, 1]``.
    The global features are :data:`GLOBAL` (entropy: of the last round's trained clients).
    With :attr:`system` rows (device behaviour on, :mod:`fl_gym.behaviour`, or
    ``system_rows=True``), a row ends with :data:`SYSTEM_ROW_EXTRAS`: 1 if the client is
    reachable this round; the share of its updates this episode that arrived (1 before it is
    first picked); the round time ``t`` it reports (``Federation.expected_times``) as
    ``t / (t + T)``, ``T`` the deadline or without one the median reported time (so 0.5 is
    exactly ``T``, and ``t / T = x / (1 - x)``); and its last reported mean training loss over
    ``log c``, capped at 1 (0 before it first trains).

    The action is ``MultiBinary(N)`` (bit ``i`` picks client ``i``), or with ``scores`` a
    ``Box(-1, 1, (N,))`` of which the ``m`` highest pick (a Gaussian policy starting at zero then
    picks uniformly, FedAvg's sampling, and every action picks exactly ``m``).

    Attributes:
        num_clients: ``N``.
        num_classes: ``c``.
        scores: the action is a score per client.
        system: rows carry :data:`SYSTEM_ROW_EXTRAS`.
    """

    num_clients: int
    num_classes: int
    scores: bool = False
    system: bool = False

    @property
    def extras(self) -> tuple[str, ...]:
        """The names of a row's values after the soft label."""
        return PICK_ROW_EXTRAS + (SYSTEM_ROW_EXTRAS if self.system else ())

    @property
    def row_width(self) -> int:
        """Values per client row."""
        return self.num_classes + len(self.extras)

    def observation_space(self) -> spaces.Box:
        """``Box(0, 1, (N (c + 5) + 6,))`` (``c + 9`` per row with system rows)."""
        return spaces.Box(0.0, 1.0, (self.num_clients * self.row_width + len(GLOBAL),), np.float32)

    def action_space(self) -> spaces.MultiBinary | spaces.Box:
        """``MultiBinary(N)``: bit ``i`` picks client ``i``; with :attr:`scores`, ``Box(-1, 1, (N,))``."""
        if self.scores:
            return spaces.Box(-1.0, 1.0, (self.num_clients,), np.float32)
        return spaces.MultiBinary(self.num_clients)

    def encode(self, pick: np.ndarray) -> np.ndarray:
        """The action that picks the clients where ``pick`` is True (scores: 1 picked, -1 not)."""
        pick = np.asarray(pick, bool)
        return np.where(pick, 1.0, -1.0).astype(np.float32) if self.scores else pick.astype(np.int8)

    def decode(self, action: np.ndarray, m: int, available: np.ndarray | None = None) -> np.ndarray:
        """The picked client ids: the set bits, or the ``m`` highest scores (lowest id on ties).

        ``available``: ``(N,)`` bool, the clients scores may pick (bits pick what they set).
        """
        if self.scores:
            scores = np.asarray(action, np.float64)
            if available is not None:
                scores, m = np.where(available, scores, -np.inf), min(m, int(available.sum()))
            return np.sort(np.argsort(-scores, kind="stable")[:m])
        return np.flatnonzero(action)

    def rows(self, observation: np.ndarray) -> np.ndarray:
        """The ``(N, row_width)`` client rows of one flat observation."""
        table = np.asarray(observation, np.float64)[: self.num_clients * self.row_width]
        return table.reshape(self.num_clients, self.row_width)

    def column(self, observation: np.ndarray, name: str) -> np.ndarray:
        """One of :attr:`extras` for every client."""
        return self.rows(observation)[:, self.num_classes + self.extras.index(name)]

    def available(self, observation: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the clients reachable this round (every client without system rows)."""
        if not self.system:
            return np.ones(self.num_clients, bool)
        return self.column(observation, "available") > 0.5


QUEUE_ROW = ("entropy", "size", "bias", "selected", "selection_rate", "server_share")
UPDATE_ROW = ("update_cos", "mean_update_cos")  # with update_stats=True
ARRIVED_ROW = ("arrived",)  # with device behaviour on
QUEUE_GLOBAL = ("progress", "val_accuracy", "undelivered")


@dataclass(frozen=True)
class QueueLayout:
    """``FLSelectQueue-v0``'s observation: one row per device (device order), then the globals.

    A row (:data:`QUEUE_ROW`): label entropy of the working set / ``log2 C``, size / largest,
    distance of its label distribution to the population's (DDFL's Eq. 19, normalised), selected last
    round, selection rate, share of server samples in its working set; with ``update_stats``
    (:data:`UPDATE_ROW`) also ``(1 + cos) / 2`` of the angle between its update and the round's
    mean update, and the mean of that value over the episode's rounds so far. Globals
    (:data:`QUEUE_GLOBAL`): round / rounds, last validation accuracy, mean undelivered share of
    the server data. All in ``[0, 1]``. With device behaviour on (:mod:`fl_gym.behaviour`) a row
    ends with ``arrived``: 1 if the device's update reached the server this round.

    Attributes:
        num_clients: ``K``.
        row: the row's features.
    """

    num_clients: int
    row: tuple[str, ...] = QUEUE_ROW

    def observation_space(self) -> spaces.Box:
        """``Box(0, 1, (len(row) K + 3,))``."""
        return spaces.Box(0.0, 1.0, (self.num_clients * len(self.row) + len(QUEUE_GLOBAL),), np.float32)

    def action_space(self) -> spaces.MultiBinary:
        """``MultiBinary(K)``: bit ``k`` aggregates device ``k``."""
        return spaces.MultiBinary(self.num_clients)

    def index(self, name: str) -> int:
        """The position of feature ``name`` in :attr:`row`."""
        if name not in self.row:
            raise UserError(f"column={name!r} is out of range; allowed: one of {', '.join(self.row)} (the "
                            f"update statistics need update_stats=True)")
        return self.row.index(name)

    def column(self, observation: np.ndarray, name: str) -> np.ndarray:
        """One of :attr:`row` for every device."""
        table = np.asarray(observation, np.float64)[: self.num_clients * len(self.row)]
        return table.reshape(self.num_clients, len(self.row))[:, self.index(name)]

    def arrived(self, observation: np.ndarray) -> np.ndarray:
        """``(K,)`` bool: the devices whose update arrived (every device without device behaviour)."""
        if ARRIVED_ROW[0] not in self.row:
            return np.ones(self.num_clients, bool)
        return self.column(observation, "arrived") > 0.5
