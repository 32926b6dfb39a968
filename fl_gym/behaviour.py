"""How devices come and go: availability, dropout and a round deadline, as arrays over clients.

Off by default: every client is always reachable, no update is lost and no round has a deadline,
so a federation draws nothing more and the papers' envs do not move. Each rule below is a
function of arrays whose last axis is the clients, so one federation's ``(K,)`` and many
copies' ``(N, K)`` take one path.

* **Availability** (:func:`next_availability`): each client is a two-state Markov chain, on or
  off, stepped once per round. With a long-run share ``pi`` on and a persistence ``lam``,

      P(on at r | on at r-1)  = 1 - (1 - lam)(1 - pi)
      P(on at r | off at r-1) = (1 - lam) pi

  so ``pi`` is the chain's stationary share, ``lam`` the lag-one autocorrelation of the on/off
  indicator, and a spell on lasts ``1 / ((1 - lam)(1 - pi))`` rounds on average (``lam = 0``:
  independent rounds). The first round draws from the stationary law. An unavailable client is
  neither a candidate nor selectable. A round needs one client: when the chain turns every client
  of a row off, the client closest to staying on (its uniform draw least above its probability)
  stays on.
* **Dropout** (:func:`dropout_probability`): a selected client goes offline before it uploads
  with probability ``1 - (1 - dropout) exp(-dropout_rate t)``, ``t`` its time this round
  (download, compute, upload): a longer round loses more devices.
* **Links** (:func:`next_link`): each client's bandwidth this round is its static bandwidth times
  ``exp(l_r)``, a log-AR(1) process ``l_r = lam l_{r-1} + sqrt(1 - lam^2) sigma z_r`` with the
  stationary law ``N(0, sigma^2)``: a congested link tends to stay congested.
* **Deadline** (:func:`finished_share`): the server stops waiting ``deadline`` seconds into the
  round. A client that would finish later is lost (``late="drop"``), or uploads the local steps
  it finished by then (``late="partial"``; none finished: lost). With ``fednova`` the server
  averages as FedNova does with plain local SGD (Wang et al., NeurIPS 2020): each update
  ``w_i - w`` is divided by the ``tau_i`` local steps it ran and the weighted mean is scaled by
  ``tau_eff = sum_i p_i tau_i``, so ``w <- w + tau_eff sum_i p_i (w_i - w) / tau_i``: a client
  cut short counts as a direction, not as a short step, and uneven steps no longer bias the
  average towards the clients that ran most.

A lost update never enters the global model and uploads no bytes; the server waited for it
until its time or the deadline, whichever came first. An availability trace in FedScale's format
(:mod:`fl_gym.traces`) may replace the chain. All draws come from the episode's behaviour
stream, apart from every other stream, so equal seeds give equal episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_gym.clock import MAX_SIGMA
from fl_gym.traces import load_availability
from fl_gym.validation import is_non_negative, require, require_choice, require_field_types, require_fraction

LATE = ("drop", "partial")


@dataclass(frozen=True)
class BehaviourConfig:
    """The devices' availability, dropout and the round deadline (module docstring); off by default.

    Attributes:
        availability: ``pi`` in ``(0, 1]``, the long-run share of rounds a client is available.
        availability_persistence: ``lam`` in ``[0, 1)``, the round-to-round autocorrelation of a
            client's availability (0: independent rounds; 0.9: spells ten times as long).
        dropout: in ``[0, 1)``, the probability that a selected client drops out of a round
            however short it is.
        dropout_rate: per simulated second ``>= 0``: how fast the chance of dropping out grows
            with the client's time in the round.
        deadline: the server's timeout in simulated seconds (``inf``: it waits for everyone).
        late: what a client past the deadline does: ``drop`` (its update is lost) or ``partial``
            (it uploads the local steps it finished).
        fednova: the server normalises each aggregated update by the local steps it ran
            (FedNova; module docstring), the remedy for partial work's uneven steps.
        link_sigma: log-std of each client's per-round bandwidth factor (0: static links).
        link_persistence: ``lam`` in ``[0, 1)``, the round-to-round autocorrelation of its log.
        availability_trace: None, or the path of a FedScale availability trace
            (:mod:`fl_gym.traces`), which replaces the chain: each client plays one of its
            devices and is reachable when the device is online at the round's simulated time
            (from an offset each episode draws uniformly within the trace's longest period).
    """

    availability: float = 1.0
    availability_persistence: float = 0.0
    dropout: float = 0.0
    dropout_rate: float = 0.0
    deadline: float = math.inf
    late: str = "drop"
    fednova: bool = False
    link_sigma: float = 0.0
    link_persistence: float = 0.0
    availability_trace: str | None = None

    def __post_init__(self) -> None:
        require_field_types(self)
        require_fraction("availability", self.availability)
        require(is_non_negative(self.availability_persistence) and self.availability_persistence < 1,
                "availability_persistence", self.availability_persistence, "a float in [0, 1)")
        require(is_non_negative(self.dropout) and self.dropout < 1, "dropout", self.dropout,
                "a float in [0, 1)")
        require(is_non_negative(self.dropout_rate) and math.isfinite(self.dropout_rate), "dropout_rate",
                self.dropout_rate, "a finite float >= 0 (per simulated second)")
        require(self.deadline > 0, "deadline", self.deadline, "a float > 0 (inf = no deadline)")
        require_choice("late", self.late, LATE)
        require(is_non_negative(self.link_sigma) and self.link_sigma <= MAX_SIGMA, "link_sigma",
                self.link_sigma, f"a float in [0, {MAX_SIGMA:g}]")
        require(is_non_negative(self.link_persistence) and self.link_persistence < 1, "link_persistence",
                self.link_persistence, "a float in [0, 1)")
        if self.availability_trace is not None:
            require(self.availability == 1, "availability", self.availability,
                    "1.0 with an availability_trace (the trace decides who is online)")
            load_availability(self.availability_trace)  # a missing or malformed file fails here, by name

    @property
    def intermittent(self) -> bool:
        """Whether clients are ever unavailable."""
        return self.availability < 1 or self.availability_trace is not None

    @property
    def losing(self) -> bool:
        """Whether a selected client's update can be lost or cut short (dropout or a deadline)."""
        return self.dropout > 0 or self.dropout_rate > 0 or math.isfinite(self.deadline)

    @property
    def active(self) -> bool:
        """Whether any behaviour is on."""
        return self.intermittent or self.losing or self.link_sigma > 0


def next_availability(previous: np.ndarray | None, u: np.ndarray, cfg: BehaviourConfig) -> np.ndarray:
    """This round's availability from the last (None: the first round) and uniforms ``u`` in ``[0, 1)``.

    Bool of ``u``'s shape; every row (last axis) has at least one client on.
    """
    pi, lam = cfg.availability, cfg.availability_persistence
    if previous is None:
        p = np.full(u.shape, pi)
    else:
        p = np.where(previous, 1.0 - (1.0 - lam) * (1.0 - pi), (1.0 - lam) * pi)
    on = np.less(u, p)
    empty = ~on.any(axis=-1)
    if empty.any():  # the client closest to staying on stays on
        closest = np.argmin(u - p, axis=-1)
        np.put_along_axis(on, closest[..., None], (np.take_along_axis(on, closest[..., None], -1)
                                                   | empty[..., None]), axis=-1)
    return on


def next_link(previous: np.ndarray | None, z: np.ndarray, cfg: BehaviourConfig) -> np.ndarray:
    """This round's bandwidth factors ``exp(l_r)`` from the last (None: the first round) and normals ``z``."""
    log = cfg.link_sigma * z
    if previous is not None:
        lam = cfg.link_persistence
        log = lam * np.log(previous) + math.sqrt(1.0 - lam * lam) * log
    return np.exp(log)


def dropout_probability(time: np.ndarray, cfg: BehaviourConfig) -> np.ndarray:
    """The chance that a client whose round takes ``time`` seconds drops out before it uploads."""
    return 1.0 - (1.0 - cfg.dropout) * np.exp(-cfg.dropout_rate * time)


def finished_share(fixed: np.ndarray, train: np.ndarray, cfg: BehaviourConfig) -> np.ndarray:
    """The share of its local training a client finishes by the deadline, in ``[0, 1]``.

    ``fixed``: its time outside local training (download, probe, upload); ``train``: its local
    training's time. 1 without a deadline, or where training fits.
    """
    left = cfg.deadline - fixed
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(train > 0, left / train, np.where(left >= 0, 1.0, 0.0))
    return np.clip(share, 0.0, 1.0)
