"""Device profiles and the virtual clock: simulated times from a cost model, never from wall time.

Per-epoch time of a model of cost ``c`` on client ``i`` in round ``r`` (ours: the papers give the
form of such models, not their numbers):

    t = seconds_per_unit * c * D_i / (psi_i * xi_{r,i})

``psi_i`` is the client's static speed, log-uniform on ``[1/H, 1]`` with one client pinned at
each end so the full spread exists; ``xi_{r,i} = exp(sigma_dyn z)`` its availability this round.
Local training adds a drift ``exp(sigma_drift z)`` between the probe and training, and every
reported time a measurement noise ``exp(sigma_meas z)``. Availability and drift are i.i.d. per
round by default; with ``load_persistence = rho > 0`` each is a per-client AR(1) process in log
space, ``log x_r = rho log x_{r-1} + sqrt(1 - rho^2) sigma z_r``, with the same stationary law
``exp(sigma z)``: a device busy in one round tends to stay busy, so its history predicts it.
Communication is ``bytes / bandwidth`` (off by default: infinite bandwidth). All draws come from
generators passed in, so episodes are reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_gym.traces import assign_devices, load_capacity
from fl_gym.validation import is_non_negative, is_positive, require, require_field_types

MAX_SIGMA = 5.0  # log-std of a device's load: a factor of e^20 at four sigmas


@dataclass(frozen=True)
class ClockConfig:
    """Cost model of the simulated devices.

    Attributes:
        seconds_per_unit: seconds per sample per unit of model cost on the fastest device
            (``c0``; with FLOP-derived costs one unit is one MFLOP of forward+backward, so the
            default is a device that trains at 1 GFLOP/s).
        heterogeneity: ``H``, ratio of the fastest to the slowest static speed (1 = equal).
        sigma_dyn: log-std of the per-round availability ``xi``.
        sigma_drift: log-std of the drift between probe and local training.
        sigma_meas: log-std of the noise on each reported time.
        load_persistence: ``rho`` in ``[0, 1)``, the round-to-round autocorrelation of the log
            availability and log drift (0 = independent rounds).
        bandwidth: upload bytes per second of the best link (``inf`` = no communication time).
        bandwidth_heterogeneity: ratio of the best to the worst link (log-uniform between).
        download_ratio: download bandwidth as a multiple of upload bandwidth.
        aggregation_time: server seconds per round.
        capacity_trace: None, or the path of a FedScale capacity trace (:mod:`fl_gym.traces`):
            each client plays one of its devices, whose speed relative to the fastest played
            replaces the log-uniform draw (and ``heterogeneity``), whose link relative to the
            best played scales ``bandwidth`` (and replaces ``bandwidth_heterogeneity``).
    """

    seconds_per_unit: float = 1e-3
    heterogeneity: float = 10.0
    sigma_dyn: float = 0.2
    sigma_drift: float = 0.1
    sigma_meas: float = 0.0
    load_persistence: float = 0.0
    bandwidth: float = math.inf
    bandwidth_heterogeneity: float = 1.0
    download_ratio: float = 1.0
    aggregation_time: float = 0.0
    capacity_trace: str | None = None

    @property
    def free_communication(self) -> bool:
        """Whether communication takes no time (infinite bandwidth)."""
        return math.isinf(self.bandwidth)

    def __post_init__(self) -> None:
        require_field_types(self)
        require(is_positive(self.seconds_per_unit), "seconds_per_unit", self.seconds_per_unit, "a float > 0")
        require(is_positive(self.heterogeneity) and self.heterogeneity >= 1, "heterogeneity",
                self.heterogeneity, "a float >= 1")
        for name in ("sigma_dyn", "sigma_drift", "sigma_meas"):  # exp(sigma z) overflows far beyond the bound
            require(is_non_negative(getattr(self, name)) and getattr(self, name) <= MAX_SIGMA, name,
                    getattr(self, name), f"a float in [0, {MAX_SIGMA:g}]")
        require(is_non_negative(self.aggregation_time), "aggregation_time", self.aggregation_time,
                "a float >= 0")
        require(is_non_negative(self.load_persistence) and self.load_persistence < 1, "load_persistence",
                self.load_persistence, "a float in [0, 1)")
        require(self.bandwidth > 0, "bandwidth", self.bandwidth, "a float > 0 (inf = free communication)")
        require(is_positive(self.bandwidth_heterogeneity) and self.bandwidth_heterogeneity >= 1,
                "bandwidth_heterogeneity", self.bandwidth_heterogeneity, "a float >= 1")
        require(is_positive(self.download_ratio), "download_ratio", self.download_ratio, "a float > 0")
        if self.capacity_trace is not None:
            load_capacity(self.capacity_trace)  # a missing or malformed file fails here, by name


@dataclass(frozen=True)
class DeviceProfiles:
    """Static per-client capacities of a scenario.

    Attributes:
        speed: ``(K,)`` ``psi_i`` in ``[1/H, 1]``.
        bandwidth: ``(K,)`` upload bytes per second.
    """

    speed: np.ndarray
    bandwidth: np.ndarray

    @classmethod
    def draw(cls, num_clients: int, cfg: ClockConfig, rng: np.random.Generator) -> DeviceProfiles:
        """Draw log-uniform speeds (one client pinned at 1, one at ``1/H``) and bandwidths.

        With a capacity trace, each client's device is drawn from it instead (:mod:`fl_gym.traces`).
        """
        if cfg.capacity_trace is not None:
            trace = load_capacity(cfg.capacity_trace)
            devices = assign_devices(num_clients, len(trace.ids), rng)
            seconds, link = trace.seconds_per_sample[devices], trace.bandwidth[devices]
            return cls(seconds.min() / seconds, cfg.bandwidth * link / link.max())
        speed = _log_uniform(num_clients, cfg.heterogeneity, rng)
        bandwidth = cfg.bandwidth * _log_uniform(num_clients, cfg.bandwidth_heterogeneity, rng)
        return cls(speed, bandwidth)


def _log_uniform(n: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    values = np.exp(rng.uniform(-math.log(spread), 0.0, n))
    if n >= 2 and spread > 1:
        ends = rng.choice(n, size=2, replace=False)
        values[ends[0]], values[ends[1]] = 1.0, 1.0 / spread
    return values


@dataclass(frozen=True)
class RoundLoad:
    """Per-round dynamics of every client: ``(K,)`` availability, drift and measurement noise."""

    availability: np.ndarray
    drift: np.ndarray
    noise: np.ndarray

    @classmethod
    def draw(cls, num_clients: int, cfg: ClockConfig, rng: np.random.Generator,
             previous: RoundLoad | None = None) -> RoundLoad:
        """One round's draws (always three ``(K,)`` normals, so the stream does not depend on sigmas).

        ``previous``: the last round's load, which a persistent load (``load_persistence``)
        continues; None starts the chain from its stationary law.
        """
        return cls.of_normals(rng.standard_normal((3, num_clients)), cfg, previous)

    @classmethod
    def of_normals(cls, z: np.ndarray, cfg: ClockConfig, previous: RoundLoad | None = None) -> RoundLoad:
        """The load of standard normals ``z`` (``(3, K)``; ``(3, N, K)``: N copies) after ``previous``."""
        last = None if previous is None else np.array([previous.availability, previous.drift])
        return cls(*load_factors(z, cfg, last))

    def at(self, clients: np.ndarray) -> RoundLoad:
        """The load of ``clients`` (ids) alone."""
        return RoundLoad(self.availability[clients], self.drift[clients], self.noise[clients])

    @classmethod
    def still(cls, num_clients: int) -> RoundLoad:
        """No dynamics: every factor 1."""
        ones = np.ones(num_clients)
        return cls(ones, ones, ones)


def load_factors(z: np.ndarray, cfg: ClockConfig, previous: np.ndarray | None = None) -> np.ndarray:
    """Availability, drift and noise from standard normals ``z`` of shape ``(3, ...)``.

    ``previous``: ``(2, ...)`` last availability and drift (None = the first round). Any trailing
    shape works, so one federation's ``(3, K)`` and many copies' ``(3, N, K)`` take one path.
    """
    sigma = np.array([cfg.sigma_dyn, cfg.sigma_drift, cfg.sigma_meas]).reshape(3, *[1] * (z.ndim - 1))
    log = sigma * z
    rho = cfg.load_persistence
    if rho > 0 and previous is not None:
        log[:2] = rho * np.log(previous) + math.sqrt(1.0 - rho * rho) * log[:2]
    return np.exp(log)


class Clock:
    """Turns work into simulated seconds for a fixed set of device profiles."""

    def __init__(self, cfg: ClockConfig, profiles: DeviceProfiles) -> None:
        self.cfg, self.profiles = cfg, profiles

    def at(self, clients: np.ndarray) -> Clock:
        """The clock of ``clients`` alone (ids, or an index of copies' rows): a round's few among many."""
        return Clock(self.cfg, DeviceProfiles(self.profiles.speed[clients], self.profiles.bandwidth[clients]))

    def epoch_time(self, samples: np.ndarray, cost: np.ndarray | float, load: RoundLoad) -> np.ndarray:
        """One epoch of a model of ``cost`` over ``samples`` per client, before drift (the probe)."""
        return self.cfg.seconds_per_unit * cost * samples / (self.profiles.speed
                                                             * load.availability) * load.noise

    def train_time(self, samples: np.ndarray, epochs: np.ndarray, cost: np.ndarray,
                   load: RoundLoad) -> np.ndarray:
        """Local training of ``epochs`` epochs, with drift and noise."""
        base = self.cfg.seconds_per_unit * cost * samples / (self.profiles.speed * load.availability)
        return epochs * base * load.drift * load.noise

    def upload_time(self, num_bytes: np.ndarray) -> np.ndarray:
        """Seconds to send ``num_bytes`` per client to the server."""
        return num_bytes / self.profiles.bandwidth

    def download_time(self, num_bytes: np.ndarray) -> np.ndarray:
        """Seconds to receive ``num_bytes`` per client from the server."""
        return num_bytes / (self.profiles.bandwidth * self.cfg.download_ratio)
