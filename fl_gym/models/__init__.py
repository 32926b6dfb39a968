"""Client-batched model families and the papers' named architectures."""

from fl_gym.models.architecture import Architecture, Stack
from fl_gym.models.zoo import MODELS, build_model

__all__ = ["MODELS", "Architecture", "Stack", "build_model"]
