"""Gymnasium's vector entry points of the registered ids, by name: ``"fl_gym.envs.vector_entry:FLSelect-v0"``.

An id's entry point is a string, not a callable, so that ``env.spec.to_json()`` works: Gymnasium
serialises no callables, and tools that store an env's spec (Minari's datasets) call it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from gymnasium.vector import VectorEnv

from fl_gym.envs.registry import env_ids, vector_env


def __getattr__(name: str) -> Callable[..., VectorEnv]:
    """``gym.make_vec``'s constructor of env id ``name`` (any other name is no attribute)."""
    if name not in env_ids():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return functools.partial(vector_env, env_id=name)
