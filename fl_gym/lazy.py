"""A package's public names imported when first read (PEP 562), so that importing it is cheap.

``import fl_gym`` registers the env ids and loads no torch: the simulator loads with the first
name that needs it (``gym.make`` of an id, ``fl_gym.Federation``), and a command line that only
parses its arguments (``fl-gym --help``, a refused argument) answers without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, modules: Mapping[str, tuple[str, ...]]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``modules`` map to the names they export.

    A name is imported from its module when first read, then kept on the package, so later reads
    are plain attribute reads. A submodule is imported when first read too (``fl_gym.data``
    after ``import fl_gym``), as eager imports of the package had loaded it.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(importlib.import_module(where[name]), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
