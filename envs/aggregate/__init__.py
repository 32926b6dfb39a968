"""Aggregation weights (FedAdp): how this round's trained updates are weighted."""

from fl_gym.envs.aggregate.config import AggregateConfig
from fl_gym.envs.aggregate.env import FLAggregateEnv, action_weights
from fl_gym.envs.aggregate.gompertz import AngleTracker, fedadp_weights, gompertz

__all__ = ["AggregateConfig", "AngleTracker", "FLAggregateEnv", "action_weights", "fedadp_weights",
           "gompertz"]
