"""HAPFL (Chen et al.): model size and local epochs per client, as three env views."""

from fl_gym.envs.hetero.actions import HeteroSpec, integerize
from fl_gym.envs.hetero.config import HeteroConfig
from fl_gym.envs.hetero.env import FLHeteroAllocEnv, FLHeteroEnv, FLHeteroIntensityEnv

__all__ = ["FLHeteroAllocEnv", "FLHeteroEnv", "FLHeteroIntensityEnv", "HeteroConfig", "HeteroSpec",
           "integerize"]
