"""fl-gym: federated learning as Gymnasium environments.

Importing the package registers every env id with Gymnasium. The simulator and the envs need no
RL library; :func:`make_vec` (an SB3 ``VecEnv``) loads stable-baselines3 when first used.
"""

from typing import Any

from fl_gym.aggregation import ServerConfig
from fl_gym.behaviour import BehaviourConfig
from fl_gym.clock import ClockConfig, DeviceProfiles, RoundLoad
from fl_gym.config import FederationConfig
from fl_gym.data import PartitionScheme, load_dataset, partition_scheme
from fl_gym.engine import MutualDistillation, OptimizerConfig, PFedMeConfig
from fl_gym.envs import register_envs
from fl_gym.federation import Federation
from fl_gym.records import RoundPlan, RoundReport

__version__ = "0.1.0"
register_envs()

__all__ = [
    "BehaviourConfig", "ClockConfig", "DeviceProfiles", "Federation", "FederationConfig",
    "MutualDistillation", "OptimizerConfig",
    "PFedMeConfig", "PartitionScheme", "RoundLoad", "RoundPlan", "RoundReport", "ServerConfig",
    "load_dataset", "make_vec", "partition_scheme",
]


def __getattr__(name: str) -> Any:
    if name == "make_vec":  # the vector env is an SB3 VecEnv: load SB3 on first use only
        from fl_gym.envs.vectorize import make_vec

        return make_vec
    raise AttributeError(f"module 'fl_gym' has no attribute {name!r}")
