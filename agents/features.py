"""Observation transforms that live inside a saved policy, so a loaded agent needs nothing else."""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor


class NegLogFeatures(BaseFeaturesExtractor):
    """``-log(obs)`` of a flat ``Box`` observation of ratios in ``(0, 1]`` (clamped at ``1e-6``).

    Speed ratios relative to the round's fastest client span two orders of magnitude on the
    default scenarios, bunched near 0 for the slow clients; on a log scale a ratio becomes a
    difference and the slow clients spread out over a few units, where tanh networks resolve them.
    """

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, features_dim=int(observation_space.shape[0]))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Features for a batch of observations."""
        return -torch.log(observations.clamp_min(1e-6))


FEATURE_EXTRACTORS = {"neglog": NegLogFeatures}
