"""Named presets: a family's config fields and scenario fields set together by one name.

A preset maps to ``{"own": {...}, "scenario": {...}}``; explicit arguments override it. Small
presets are for PPO on a CPU, ``paper*`` presets reproduce a paper's setup for evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fl_gym.envs.scenario import EnvConfig
from fl_gym.models.zoo import MODELS
from fl_gym.validation import is_int_at_least, require, require_choice, require_epochs


@dataclass(frozen=True)
class PresetConfig(EnvConfig):
    """A family config with presets, and the training fields every preset sets.

    Subclasses set :attr:`presets` and redeclare ``preset`` with their default.

    Attributes:
        preset: a key of :attr:`presets`; sets the fields marked (preset) and the scenario's.
        local_epochs: local epochs (preset).
        model: architecture (preset).
        validation_size: test samples held out for the reward's accuracy (preset).
    """

    presets: ClassVar[Mapping[str, Mapping[str, dict]]] = {}
    preset: str = ""
    local_epochs: float | None = None
    model: str | None = None
    validation_size: int | None = None

    @classmethod
    def default_scenario(cls, own: Mapping[str, Any]) -> dict[str, Any]:
        """The preset's scenario (the default preset's for an unknown name, which validation rejects)."""
        default = cls.__dataclass_fields__["preset"].default
        return dict(cls.presets.get(own.get("preset", default), cls.presets[default])["scenario"])

    def __post_init__(self) -> None:
        require_choice("preset", self.preset, self.presets)
        for name, value in self.presets[self.preset]["own"].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        super().__post_init__()
        require_epochs("local_epochs", self.local_epochs)
        require_choice("model", self.model, MODELS)
        require(is_int_at_least(self.validation_size, 1), "validation_size", self.validation_size,
                "an integer >= 1")
