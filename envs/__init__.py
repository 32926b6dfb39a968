"""Gymnasium environments over the federated simulator; ``import fl_gym`` registers them."""

import gymnasium as gym

ENTRY_POINTS = {
    "FLHetero-v0": "fl_gym.envs.hetero:FLHeteroEnv",
    "FLHeteroAlloc-v0": "fl_gym.envs.hetero:FLHeteroAllocEnv",
    "FLHeteroIntensity-v0": "fl_gym.envs.hetero:FLHeteroIntensityEnv",
}


def register_envs() -> None:
    """Register every fl-gym env id with Gymnasium (idempotent)."""
    for env_id, entry_point in ENTRY_POINTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
