"""Client selection (FedEntropy; DDFL to come): who trains and which trained clients are aggregated."""

from fl_gym.envs.select.config import PickConfig, SelectConfig
from fl_gym.envs.select.entropy import entropy, judge, leave_one_out_gain, mixture
from fl_gym.envs.select.env import FLSelectEnv, FLSelectPickEnv
from fl_gym.envs.select.pools import Pools
from fl_gym.envs.select.spaces import PickLayout, SelectLayout

__all__ = ["FLSelectEnv", "FLSelectPickEnv", "PickConfig", "PickLayout", "Pools", "SelectConfig",
           "SelectLayout", "entropy", "judge", "leave_one_out_gain", "mixture"]
