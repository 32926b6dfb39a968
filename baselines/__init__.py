"""Fixed (non-RL) policies with SB3's ``predict`` signature, by env family."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

HETERO_IDS = ("FLHetero-v0", "FLHeteroAlloc-v0", "FLHeteroIntensity-v0")


def fixed_policies(env_id: str) -> dict[str, Callable[[gym.Env], Any]]:
    """Name -> factory (taking the env) of every fixed policy that acts on ``env_id``."""
    if env_id in HETERO_IDS:
        from fl_gym.baselines.hetero import POLICIES, named_policy

        return {name: (lambda env, n=name: named_policy(n, env)) for name in POLICIES}
    return {}
