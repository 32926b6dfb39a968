"""Building, training, saving and loading SB3 agents, and multi-stage training recipes."""

from fl_gym.agents.features import NegLogFeatures
from fl_gym.agents.ppo import ALGOS, build_agent, load_hyperparams
from fl_gym.agents.recipes import compose, find_recipe, load_recipe, save_recipe, train_recipe

__all__ = ["ALGOS", "NegLogFeatures", "build_agent", "compose", "find_recipe", "load_hyperparams",
           "load_recipe", "save_recipe", "train_recipe"]
