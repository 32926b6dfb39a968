"""Client selection (FedEntropy; DDFL to come): which trained clients are aggregated."""

from fl_gym.envs.select.config import SelectConfig
from fl_gym.envs.select.entropy import entropy, judge, leave_one_out_gain, mixture
from fl_gym.envs.select.env import FLSelectEnv
from fl_gym.envs.select.pools import Pools
from fl_gym.envs.select.spaces import SelectLayout

__all__ = ["FLSelectEnv", "Pools", "SelectConfig", "SelectLayout", "entropy", "judge", "leave_one_out_gain", "mixture"]
