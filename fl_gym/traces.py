"""Device traces in FedScale's format: each device's compute and network speed, and when it is online.

FedScale (Lai et al., ICML 2022) describes real devices with two pickled dicts keyed by client id
(its ``client_device_capacity`` and ``client_behave_trace`` files):

* capacity: ``{id: {"computation": ms per sample, "communication": kbit/s}}``, the time of one
  sample's forward pass and the link's speed;
* availability: ``{id: {"active": [t, ...], "inactive": [t, ...], "finish_time": t, ...}}``: the
  device is online from ``active[j]`` until ``inactive[j]`` (seconds), the whole trace repeating
  every ``finish_time`` seconds.

fl-gym ships none of them (FedScale's traces are for research use only): give their paths
(:class:`~fl_gym.behaviour.BehaviourConfig`). A trace sets the shape of a federation's devices,
the clock its scale: client ``i`` plays device ``d_i`` (drawn with the scenario), its speed is
the device's relative to the fastest device played (``psi``, as the log-uniform draw it
replaces), its link the best link (``bandwidth``) times the device's relative to the best.
Unpickling runs code from the file: load only traces you trust.
"""

from __future__ import annotations

import functools
import math
import numbers
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fl_gym.validation import UserError, is_positive

CAPACITY_FORMAT = ("a pickled dict {client id: {'computation': ms per sample > 0, "
                   "'communication': kbit/s > 0}}")
AVAILABILITY_FORMAT = ("a pickled dict {client id: {'active': [start s, ...], 'inactive': [end s, ...], "
                       "'finish_time': period s > 0}}")


@dataclass(frozen=True)
class DeviceCapacity:
    """Devices' compute and network speeds (``(D,)`` each, in the trace's order of client ids).

    Attributes:
        ids: the trace's client ids.
        seconds_per_sample: forward and backward of one sample (FedScale counts three forward passes).
        bandwidth: bytes per second.
    """

    ids: np.ndarray
    seconds_per_sample: np.ndarray
    bandwidth: np.ndarray


@dataclass(frozen=True)
class DeviceAvailability:
    """Devices' online intervals, repeating every ``period`` seconds.

    Every device's intervals are one block of the flat arrays, in time order, so one binary search
    finds the interval a device is in for all devices at once (a 10,000-client round reads it).

    Attributes:
        ids: the trace's client ids.
        starts: every interval's start, device by device (device ``d``'s block from ``first[d]``).
        ends: every interval's end.
        first: ``(D,)`` where each device's block begins.
        count: ``(D,)`` its intervals.
        period: ``(D,)`` seconds after which a device's trace repeats.
    """

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    first: np.ndarray
    count: np.ndarray
    period: np.ndarray

    @functools.cached_property
    def _span(self) -> float:
        """A device's block's share of a time line that lays the blocks end to end."""
        return float(max(self.ends.max(), self.period.max())) + 1.0

    @functools.cached_property
    def _keys(self) -> np.ndarray:
        """The starts on that time line: ascending, so ``searchsorted`` finds each device's interval."""
        return self.starts + np.repeat(np.arange(len(self.first)), self.count) * self._span

    def online(self, devices: np.ndarray, time: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Whether each of ``devices`` (trace rows) is online at ``time`` seconds, and until when.

        Returns ``(K,)`` each: online, the seconds until each next comes online (0 if it is), and
        the seconds until each goes on or off. The search is four times faster over ascending
        ``devices`` (:class:`PlayedDevices` sorts them).
        """
        period, first = self.period[devices], self.first[devices]
        now = time % period
        last = np.searchsorted(self._keys, devices * self._span + now, side="right") - 1  # latest start
        inside = last >= first
        end = self.ends[np.maximum(last, 0)]
        on = inside & (now < end)
        following = np.where(inside, last + 1, first)
        later = following < first + self.count[devices]
        upcoming = self.starts[np.minimum(following, len(self.starts) - 1)]
        wait = np.where(later, upcoming - now, self.starts[first] + period - now)  # until the next start
        change = np.minimum(np.where(on, end - now, wait), period - now)  # or until the trace repeats
        return on, np.where(on, 0.0, wait), change


@functools.cache
def load_capacity(path: str) -> DeviceCapacity:
    """FedScale's capacity trace at ``path`` (cached per path: the copies of a vector env share it)."""
    table = _load("capacity_trace", path, CAPACITY_FORMAT)
    ids, rows = list(table), []
    for key in ids:
        entry = table[key]
        values = [entry.get(name) if isinstance(entry, dict) else None
                  for name in ("computation", "communication")]
        if not all(is_positive(v) for v in values):  # finite, > 0, and no bool
            raise UserError(f"capacity_trace={path!r}: client {key!r} has {entry!r}; allowed: "
                            f"{CAPACITY_FORMAT}")
        rows.append(values)
    table_values = np.asarray(rows, np.float64)
    # FedScale: 3 forward passes per trained sample, in ms; kbit/s to bytes/s
    return DeviceCapacity(np.asarray(ids), 3e-3 * table_values[:, 0], table_values[:, 1] * 1e3 / 8)


@functools.cache
def load_availability(path: str) -> DeviceAvailability:
    """FedScale's availability trace at ``path`` (cached per path)."""
    table = _load("availability_trace", path, AVAILABILITY_FORMAT)
    ids = list(table)
    intervals = [_intervals(path, key, table[key]) for key in ids]
    unreached = [key for key, (starts, _, period) in zip(ids, intervals, strict=True) if starts[-1] >= period]
    if unreached:  # time is read modulo the period (by FedScale too): such an interval never comes
        warnings.warn(f"availability_trace={path!r}: {len(unreached)} of {len(ids)} clients (first "
                      f"{unreached[0]!r}) have intervals that start at or after their finish_time; the trace "
                      "repeats every finish_time seconds, so those intervals are never reached", stacklevel=2)
    count = np.array([len(s) for s, _, _ in intervals])
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    starts = np.concatenate([s for s, _, _ in intervals])
    ends = np.concatenate([e for _, e, _ in intervals])
    period = np.array([p for _, _, p in intervals])
    return DeviceAvailability(np.asarray(ids), starts, ends, first, count, period)


def _intervals(path: str, key: object, entry: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """One device's interval starts, ends and period, checked."""
    try:
        starts = np.asarray(entry["active"], np.float64)
        ends = np.asarray(entry["inactive"], np.float64)
        period = float(entry["finish_time"])
    except (TypeError, KeyError, ValueError) as err:
        raise UserError(f"availability_trace={path!r}: client {key!r} has {entry!r} ({err}); allowed: "
                        f"{AVAILABILITY_FORMAT}") from None
    ok = (starts.ndim == 1 and starts.shape == ends.shape and len(starts) >= 1 and math.isfinite(period)
          and period > 0 and np.isfinite(ends).all() and (0 <= starts).all() and (starts < ends).all())
    order = np.argsort(starts, kind="stable") if ok else None
    if not ok or (ends[order][:-1] > starts[order][1:]).any():
        raise UserError(f"availability_trace={path!r}: client {key!r}'s intervals are malformed (need as "
                        f"many starts as ends, each start >= 0, before its end and before the next "
                        f"interval, a finite period > 0); allowed: {AVAILABILITY_FORMAT}")
    return starts[order], ends[order], period


def _load(name: str, path: str, allowed: str) -> dict:
    """The non-empty dict pickled at ``path``; a ``ValueError`` naming ``name`` for anything else."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{name}={path!r} is not a file; allowed: the path of {allowed}")
    try:
        with file.open("rb") as f:
            table = pickle.load(f)
    except Exception as err:  # any unpickling failure is a malformed file
        raise UserError(f"{name}={path!r} does not unpickle ({type(err).__name__}: {err}); allowed: "
                        f"{allowed}") from None
    if not isinstance(table, dict) or not table:
        raise UserError(f"{name}={path!r} holds a {type(table).__name__}; allowed: {allowed}")
    odd = [k for k in table if isinstance(k, bool) or not isinstance(k, (numbers.Integral, str))]
    if odd:  # a tuple id made the ids a table of rows, numpy's inhomogeneous-shape error
        raise UserError(f"{name}={path!r} has client id {odd[0]!r}; allowed: {allowed}, each id an integer "
                        "or a string (FedScale's are integers)")
    return table


class PlayedDevices:
    """Which devices of an availability trace a federation's clients play, online when theirs are.

    Args:
        trace: the availability trace.
        devices: ``(K,)`` the trace row each client plays.
    """

    def __init__(self, trace: DeviceAvailability, devices: np.ndarray) -> None:
        self.trace = trace
        self._order = np.argsort(devices, kind="stable")  # the search runs over ascending devices
        self._sorted = devices[self._order]
        n = len(devices)
        # per client in ascending device order: when it next comes online, when it next changes
        self._back, self._next = np.zeros(n), np.zeros(n)
        self._on = np.zeros(n, bool)  # per client in client order: its device online
        self._time, self._out = math.inf, np.zeros(n, bool)

    def online(self, time: float) -> np.ndarray:
        """``(K,)`` bool, read-only: the clients whose devices are online at ``time``.

        A round needs a client: where none is online, the one back soonest is (the lowest id on
        ties). Devices change state only at their intervals' ends, so a later time searches
        only the devices whose next change it has passed (a new episode, earlier, all of them).
        """
        rows = np.arange(len(self._sorted)) if time < self._time else np.flatnonzero(self._next <= time)
        self._time = time
        if len(rows):
            on, back, change = self.trace.online(self._sorted[rows], time)
            self._on[self._order[rows]], self._back[rows], self._next[rows] = on, time + back, time + change
            self._out = self._clients()
        return self._out

    def _clients(self) -> np.ndarray:
        """The online flags, one client forced on where none is."""
        on = self._on.copy()
        if not on.any():
            back = np.empty(len(on))
            back[self._order] = self._back
            on[np.argmin(back)] = True
        on.flags.writeable = False
        return on


def assign_devices(num_clients: int, num_devices: int, rng: np.random.Generator) -> np.ndarray:
    """``(K,)`` the trace row each client plays: distinct while the trace has enough devices."""
    return rng.choice(num_devices, num_clients, replace=num_clients > num_devices)
