"""Boundary checks shared by every config: one message format everywhere."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable


def require(ok: bool, name: str, value: object, allowed: str) -> None:
    """Raise ``ValueError`` naming the parameter, the value received and what is allowed."""
    if not ok:
        raise ValueError(f"{name}={value!r} is out of range; allowed: {allowed}")


def require_choice(name: str, value: object, choices: Iterable[object]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    require(value in choices, name, value, "one of " + ", ".join(repr(c) for c in choices))


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
