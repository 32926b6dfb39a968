"""Boundary checks shared by every config: one message format everywhere."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch


def require(ok: bool, name: str, value: object, allowed: str) -> None:
    """Raise ``ValueError`` naming the parameter, the value received and what is allowed."""
    if not ok:
        raise ValueError(f"{name}={value!r} is out of range; allowed: {allowed}")


def require_choice(name: str, value: object, choices: Iterable[object]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    require(value in choices, name, value, "one of " + ", ".join(repr(c) for c in choices))


def require_device(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` names a torch device this machine has.

    Checked when the config is made, so a run asked for ``'cuda'`` on a machine without one stops
    with the parameter's name before any data is loaded, not in torch's driver error mid-build.
    """
    try:
        device = torch.device(value) if isinstance(value, str) else None
    except (RuntimeError, ValueError):
        device = None
    require(device is not None, name, value, "a torch device such as 'cpu' or 'cuda:0'")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        cuda = "'cuda:0'" if count == 1 else f"'cuda:0' to 'cuda:{count - 1}'"
        present = f"'cpu' or {cuda}" if count else "'cpu' (torch sees no CUDA device here)"
        require((device.index or 0) < count, name, value, f"a device this machine has: {present}")
    elif device.type == "mps":
        require(torch.backends.mps.is_available(), name, value, "a device this machine has: 'cpu' (no MPS here)")


MAX_THREADS = 256  # torch threads; far more exhaust memory (libgomp aborts the process)
MAX_LR = 100.0  # a local or server learning rate above this only produces NaN
MAX_ROUNDS = 100_000  # rounds per episode (the papers use at most 1,000); more never returns from a reset
MAX_EPOCHS = 1_000.0  # local epochs per round


def require_threads(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is None or an integer in ``[1, MAX_THREADS]``."""
    ok = value is None or (is_int_at_least(value, 1) and int(value) <= MAX_THREADS)
    require(ok, name, value, f"None or an integer in [1, {MAX_THREADS}]")


def require_share(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite float in ``[0, 1)`` (a share of clients or data)."""
    require(is_non_negative(value) and value < 1, name, value, "a float in [0, 1)")


def is_positive(x: float) -> bool:
    """True for finite numbers > 0 (rejects NaN and inf)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def is_non_negative(x: float) -> bool:
    """True for finite numbers >= 0 (rejects NaN and inf)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


def is_int_at_least(x: object, low: int) -> bool:
    """True for Python or NumPy integers (not bools) that are >= ``low``."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and int(x) >= low


class MissingExtraError(ImportError):
    """An optional extra is not installed; the message says how to install it."""
