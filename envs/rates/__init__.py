"""Per-client learning rates (FedEnt): the rate each sampled client trains at this round."""

from fl_gym.envs.rates.config import RateConfig
from fl_gym.envs.rates.env import FLLearningRateEnv, RoundStats, rate_of, unit_of

__all__ = ["FLLearningRateEnv", "RateConfig", "RoundStats", "rate_of", "unit_of"]
