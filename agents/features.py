"""Observation transforms that live inside a saved policy, so a loaded agent needs nothing else."""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor


class Log1pFeatures(BaseFeaturesExtractor):
    """``log(1 + obs)`` of a flat non-negative ``Box`` observation.

    HAPFL's states are raw timing ratios ``>= 1`` (the paper normalises only by the round's
    fastest client) that reach ~100 on the default scenario; tanh networks saturate on them. The
    log keeps their order and ratios (a ratio becomes a difference) on a scale of a few units.
    """

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, features_dim=int(observation_space.shape[0]))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Features for a batch of observations."""
        return torch.log1p(observations.clamp_min(0.0))


FEATURE_EXTRACTORS = {"log1p": Log1pFeatures}
