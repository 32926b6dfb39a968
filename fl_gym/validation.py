"""Boundary checks shared by every config: one message format everywhere."""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping

import numpy as np


class UserError(ValueError):
    """A value given to fl-gym is not allowed; the message names it and what is.

    A ``ValueError``, so code catching those keeps working; the command line prints a
    ``UserError`` as one line (exit 2) and any other exception as a traceback, a bug.
    """


def one_line(error: BaseException) -> str:
    """Another library's message on one line, to quote in a :class:`UserError` (its lines joined)."""
    return " ".join(str(error).split())


def as_array(name: str, values: object, allowed: str | Callable[[], str]) -> np.ndarray:
    """``np.asarray(values)``, or a :class:`UserError` naming ``name`` (a ragged list, a mix of types).

    numpy's own message ("an inhomogeneous shape after 1 dimensions") names neither the parameter
    nor what it takes. ``allowed`` may be a call that says it, made only for the message (an action
    space's text takes longer to write than an env's step spends on its action).
    """
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as err:
        said = allowed() if callable(allowed) else allowed
        raise UserError(f"{name}={reprlib.repr(values)} is out of range; allowed: {said} "
                        f"({one_line(err)})") from err


def require(ok: bool, name: str, value: object, allowed: str) -> None:
    """Raise :class:`UserError` naming the parameter, the value received and what is allowed."""
    if not ok:
        refuse(name, value, allowed)


def refuse(name: str, value: object, allowed: str) -> typing.NoReturn:
    """:func:`require`'s error, raised unconditionally (where a type checker must see the refusal)."""
    raise UserError(f"{name}={value!r} is out of range; allowed: {allowed}")


def require_choice(name: str, value: object, choices: Iterable[object]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    require(value in choices, name, value, "one of " + ", ".join(repr(c) for c in choices))


def require_device(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` names a torch device this machine has.

    Checked when the config is made, so a run asked for ``'cuda'`` on a machine without one stops
    with the parameter's name before any data is loaded, not in torch's driver error mid-build.
    """
    import torch  # here, not at the top: what only checks arguments loads no torch (fl_gym.lazy)

    try:
        device = torch.device(value) if isinstance(value, str) else None
    except (RuntimeError, ValueError):
        device = None
    if device is None:
        refuse(name, value, "a torch device such as 'cpu' or 'cuda:0'")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        cuda = "'cuda:0'" if count == 1 else f"'cuda:0' to 'cuda:{count - 1}'"
        present = f"'cpu' or {cuda}" if count else "'cpu' (torch sees no CUDA device here)"
        require((device.index or 0) < count, name, value, f"a device this machine has: {present}")
    elif device.type == "mps":
        require(torch.backends.mps.is_available(), name, value,
                "a device this machine has: 'cpu' (no MPS here)")


MAX_THREADS = 256  # torch threads; far more exhaust memory (libgomp aborts the process)
MAX_LR = 100.0  # a local or server learning rate above this only produces NaN
MAX_ROUNDS = 100_000  # rounds per episode (the papers use at most 1,000); more never returns from a reset
MAX_EPOCHS = 1_000.0  # local epochs per round
MAX_SCHEDULE = 2**28  # a round's batch schedule (steps x clients x batch size), built whole: 3 GiB
MAX_SEED = 2**31 - 1  # NumPy's legacy seeding (SB3's) takes seeds below 2**32; room is left for seed + copy
MAX_CLIENTS = 1_000_000  # clients of one federation (the largest cross-device data sets have about this many)
MAX_COPIES = 4_096  # vector-env copies; each holds a federation, so far more exhaust memory before a step
MAX_TIMESTEPS = 10**9  # an agent's steps: hours on the fastest env here, weeks on others; more is a typo


def require_threads(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is None or an integer in ``[1, MAX_THREADS]``."""
    ok = value is None or (is_int_at_least(value, 1) and int(value) <= MAX_THREADS)
    require(ok, name, value, f"None or an integer in [1, {MAX_THREADS}]")


def require_int_in(name: str, value: object, low: int, high: int, meaning: str = "") -> None:
    """Raise ``ValueError`` unless ``value`` is an integer in ``[low, high]`` (a count or a seed).

    ``meaning`` follows the range in the message (what ``low`` stands for, say).
    """
    require(is_int_at_least(value, low) and int(value) <= high, name, value,
            f"an integer in [{low}, {high}]{meaning}")


def require_timesteps(name: str, value: object, low: int = 1, meaning: str = "") -> None:
    """Raise ``ValueError`` unless ``value`` is a number of training steps in ``[low, MAX_TIMESTEPS]``."""
    require_int_in(name, value, low, MAX_TIMESTEPS, meaning)


def require_seed(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer seed in ``[0, MAX_SEED]``."""
    require_int_in(name, value, 0, MAX_SEED)


def require_seeds(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a list or tuple of one or more distinct seeds.

    A seed played twice would count its episode twice in a mean; a string would be read as its
    characters.
    """
    ok = isinstance(value, (list, tuple)) and len(value) >= 1 \
        and all(is_int_at_least(s, 0) and s <= MAX_SEED for s in value) and len(set(value)) == len(value)
    require(ok, name, value, f"a list of one or more distinct integer seeds in [0, {MAX_SEED}]")


def require_mapping(name: str, value: object, optional: bool = True, of: str = "argument names to values"
                    ) -> None:
    """Raise ``ValueError`` unless ``value`` is a mapping (None too where ``optional``) of ``of``."""
    require((optional and value is None) or isinstance(value, Mapping), name, value,
            ("None or " if optional else "") + f"a mapping of {of}")


def require_copies(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a number of vector-env copies in ``[1, MAX_COPIES]``."""
    require_int_in(name, value, 1, MAX_COPIES)


def require_clients(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a number of clients in ``[1, MAX_CLIENTS]``."""
    require_int_in(name, value, 1, MAX_CLIENTS)


def require_rounds(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a number of rounds in ``[1, MAX_ROUNDS]``."""
    require_int_in(name, value, 1, MAX_ROUNDS)


def require_rate(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a learning rate in ``(0, MAX_LR]``."""
    require(is_positive(value) and value <= MAX_LR, name, value, f"a float in (0, {MAX_LR:g}]")


def require_epochs(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a number of local epochs in ``(0, MAX_EPOCHS]``."""
    require(is_positive(value) and value <= MAX_EPOCHS, name, value, f"a float in (0, {MAX_EPOCHS:g}]")


def require_share(name: str, value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite float in ``[0, 1)`` (a share of clients or data)."""
    require(is_non_negative(value) and value < 1, name, value, "a float in [0, 1)")


def require_fraction(name: str, value: object, optional: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a float in ``(0, 1]`` (None too where ``optional``).

    A probability, a share kept, a target accuracy. A string or None gets this message, not the
    ``TypeError`` of comparing it.
    """
    require((optional and value is None) or (is_positive(value) and value <= 1), name, value,
            ("None or " if optional else "") + "a float in (0, 1]")


def is_finite(x: object) -> typing.TypeGuard[float]:
    """A finite real number that is no bool (:func:`is_real`, and neither NaN nor infinite)."""
    return is_real(x) and math.isfinite(x)


def is_positive(x: object) -> typing.TypeGuard[float]:
    """True for finite numbers > 0, Python's or numpy's (rejects NaN, inf and bools: ``True`` is no rate)."""
    return is_finite(x) and x > 0


def is_non_negative(x: object) -> typing.TypeGuard[float]:
    """True for finite numbers >= 0, Python's or numpy's (rejects NaN, inf and bools)."""
    return is_finite(x) and x >= 0


def is_real(x: object) -> typing.TypeGuard[float]:
    """A real number that is no bool (numpy's register as ``numbers.Real``; its bool does not).

    An integer beyond float range (``10**400``) is none: ``math.isfinite`` raises ``OverflowError`` on it.
    """
    return (isinstance(x, numbers.Real) and not isinstance(x, bool)
            and (not isinstance(x, numbers.Integral) or abs(int(x)) <= sys.float_info.max))


def is_int_at_least(x: object, low: int) -> typing.TypeGuard[int]:
    """True for Python or NumPy integers (not bools) that are >= ``low``."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and int(x) >= low


def require_types(owner: type | Callable, values: Mapping[str, object], label: str = "") -> None:
    """Raise ``ValueError`` for a value whose type its annotation in ``owner`` does not allow.

    ``owner``: a dataclass (its fields' annotations) or a function (its parameters'). The
    annotation is the one declaration of a type: ``float`` takes any real number but a bool or
    NaN, ``int`` an integer, ``tuple[float, float]`` a tuple or list of two, a ``Mapping`` a
    mapping, a class an instance of it, ``X | None`` either. Checked before a config's own range
    checks, so a string or None reaches none of its comparisons. ``label`` starts the message.
    """
    hints = _hints(owner)
    for name, value in values.items():
        if name in hints and not _matches(value, hints[name]):
            raise UserError(f"{label + ': ' if label else ''}{name}={value!r} is out of range; allowed: "
                            f"{_describe(hints[name])}")


def plain(value: object) -> object:
    """``value`` with numpy scalars as Python's (in tuples and lists too), as a config holds them.

    ``num_clients=np.int64(20)`` is an integer to :func:`require_types`, but gymnasium's spaces
    and JSON take only Python's.
    """
    if isinstance(value, np.generic):
        return value.item()
    if type(value) is tuple:  # not a NamedTuple, whose fields are positional
        return tuple(plain(v) for v in value)
    if type(value) is list:
        return [plain(v) for v in value]
    return value


def plain_fields(config: typing.Any) -> None:
    """Hold a dataclass's numpy scalars as Python's (:func:`plain`), frozen or not."""
    for field in dataclasses.fields(config):
        object.__setattr__(config, field.name, plain(getattr(config, field.name)))


def require_field_types(config: typing.Any) -> None:
    """:func:`require_types` for every field of a dataclass (a config built directly, not by ``gym.make``).

    Its numpy scalars are held as Python's first (:func:`plain_fields`), and afterwards an integer
    given where a float is declared as a float: torch takes no Python integer beyond int64
    (``weight_decay=2**70``) as a scalar.
    """
    plain_fields(config)
    require_fields(config)
    owner: type = type(config)
    hints = _hints(owner)
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, int) and not isinstance(value, bool) and _declares_float(hints[field.name]):
            object.__setattr__(config, field.name, float(value))


def require_fields(record: typing.Any, label: str = "") -> None:
    """:func:`require_types` for every field of a dataclass instance, as it holds them (nothing converted)."""
    require_types(type(record), {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}, label)


def _declares_float(hint: object) -> bool:
    """Whether ``hint`` is ``float``, alone or with None (``float | None``), not also ``int``."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return float in args and int not in args


@functools.cache
def _hints(owner: type | Callable) -> dict[str, object]:
    """``owner``'s resolved annotations, resolved once (every ``gym.make`` reads them)."""
    return typing.get_type_hints(owner)


def _matches(value: object, hint: object) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return is_real(value) and not math.isnan(value)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
    if origin in (Mapping, dict):
        return isinstance(value, Mapping) and all(_matches(k, args[0]) and _matches(v, args[1])
                                                  for k, v in value.items())
    if origin is Callable or hint is Callable:
        return callable(value)
    return not isinstance(hint, type) or isinstance(value, hint)


def _describe(hint: object) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if hint is type(None):
        return "None"
    if origin is tuple:
        if Ellipsis in args:
            return f"a tuple of {_describe(args[0])}"
        return f"a tuple of {len(args)} ({', '.join(_describe(a) for a in args)})"
    if origin in (Mapping, dict):
        return f"a mapping of {_describe(args[0])} to {_describe(args[1])}"
    if hint is typing.Any:
        return "any value"
    names = {bool: "True or False", int: "an integer", float: "a real number (not NaN)", str: "a string"}
    if hint in names:
        return names[hint]
    name = str(getattr(hint, "__name__", hint))
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


class MissingExtraError(ImportError):
    """An optional extra is not installed; the message says how to install it."""
