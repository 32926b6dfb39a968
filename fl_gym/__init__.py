"""fl-gym: federated learning as Gymnasium environments.

Importing the package registers every env id with Gymnasium.
"""

from fl_gym.aggregation import ServerConfig
from fl_gym.clock import ClockConfig, DeviceProfiles, RoundLoad
from fl_gym.config import FederationConfig
from fl_gym.data import PartitionConfig, load_dataset
from fl_gym.engine import MutualDistillation, OptimizerConfig, PFedMeConfig
from fl_gym.envs import register_envs
from fl_gym.envs.vectorize import make_vec
from fl_gym.federation import Federation
from fl_gym.records import RoundPlan, RoundReport

__version__ = "0.1.0"
register_envs()

__all__ = [
    "ClockConfig", "DeviceProfiles", "Federation", "FederationConfig", "MutualDistillation", "OptimizerConfig",
    "PFedMeConfig", "PartitionConfig", "RoundLoad", "RoundPlan", "RoundReport", "ServerConfig", "load_dataset",
    "make_vec",
]
