"""Building, training, saving and loading SB3 agents (and HAPFL's dual agent)."""

from fl_gym.agents.features import Log1pFeatures
from fl_gym.agents.hapfl import hapfl_policy, load_dual_agent, save_dual_agent, train_dual_agent
from fl_gym.agents.ppo import ALGOS, build_agent, load_hyperparams

__all__ = ["ALGOS", "Log1pFeatures", "build_agent", "hapfl_policy", "load_dual_agent", "load_hyperparams",
           "save_dual_agent", "train_dual_agent"]
