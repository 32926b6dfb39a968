"""fl-gym: federated learning as Gymnasium environments.

Importing the package registers every env id with Gymnasium and loads no torch: the public
names below are imported when first read (:mod:`fl_gym.lazy`), so the simulator loads with the
first env built or name used, and :func:`make_vec` (an SB3 ``VecEnv``) loads stable-baselines3.
"""

from typing import TYPE_CHECKING

from fl_gym.envs import register_envs
from fl_gym.lazy import exports

if TYPE_CHECKING:  # what type checkers read (``X as X``: re-exported); at run time, LAZY
    from fl_gym.aggregation import ServerConfig as ServerConfig
    from fl_gym.behaviour import BehaviourConfig as BehaviourConfig
    from fl_gym.clock import ClockConfig as ClockConfig
    from fl_gym.clock import DeviceProfiles as DeviceProfiles
    from fl_gym.clock import RoundLoad as RoundLoad
    from fl_gym.config import FederationConfig as FederationConfig
    from fl_gym.data import PartitionScheme as PartitionScheme
    from fl_gym.data import load_dataset as load_dataset
    from fl_gym.data import partition_scheme as partition_scheme
    from fl_gym.engine import MutualDistillation as MutualDistillation
    from fl_gym.engine import OptimizerConfig as OptimizerConfig
    from fl_gym.engine import PFedMeConfig as PFedMeConfig
    from fl_gym.envs.vectorize import make_vec as make_vec
    from fl_gym.federation import Federation as Federation
    from fl_gym.records import RoundPlan as RoundPlan
    from fl_gym.records import RoundReport as RoundReport

__version__ = "0.1.0"
register_envs()

LAZY = {
    "fl_gym.aggregation": ("ServerConfig",),
    "fl_gym.behaviour": ("BehaviourConfig",),
    "fl_gym.clock": ("ClockConfig", "DeviceProfiles", "RoundLoad"),
    "fl_gym.config": ("FederationConfig",),
    "fl_gym.data": ("PartitionScheme", "load_dataset", "partition_scheme"),
    "fl_gym.engine": ("MutualDistillation", "OptimizerConfig", "PFedMeConfig"),
    "fl_gym.envs.vectorize": ("make_vec",),
    "fl_gym.federation": ("Federation",),
    "fl_gym.records": ("RoundPlan", "RoundReport"),
}
__all__ = sorted(name for names in LAZY.values() for name in names)
__getattr__, __dir__ = exports(__name__, LAZY)
