"""A toy method family, defined outside the package: docs/extending.md walks through it.

The agent picks which clients train each round (``MultiBinary(K)``), before training; the
reward is minus the round's simulated time. Timing only, so it is fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from fl_gym.envs.base import ClientRows, FLEnv
from fl_gym.envs.registry import Family, Metric, PolicyEntry, register_family
from fl_gym.envs.scenario import EnvConfig
from fl_gym.records import OpenedRound, RoundPlan, RoundReport
from fl_gym.validation import require_epochs


@dataclass(frozen=True)
class ToyConfig(EnvConfig):
    """Arguments of ``FLToy-v0``.

    Attributes:
        epochs: local epochs of every chosen client.
    """

    epochs: float = 1.0
    scenario_defaults = {"num_clients": 4, "rounds_per_episode": 5}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_epochs("epochs", self.epochs)

    def federation_config(self):
        """Timing only: the clock and the data's label counts."""
        return self.scenario.federation_config(train=False)


class FLToyEnv(FLEnv):
    """Toy: choose which clients train; reward ``-round_time`` (s).

    Observation ``Box(0, 1, (K,))``: each client's speed this round relative to the fastest.
    """

    family = "toy"
    config_class = ToyConfig

    def _setup(self) -> None:
        n = self.federation.num_clients
        self.action_space = spaces.MultiBinary(n)
        self.observation_space = spaces.Box(0.0, 1.0, (n,), np.float32)
        self.client_rows = ClientRows(width=1)  # one value per client: SetPolicy can read it

    def _prepare(self) -> OpenedRound:
        return self.federation.open_round()

    def _observe(self, opened: OpenedRound) -> np.ndarray:
        t = self.federation.clock.epoch_time(self.federation.sizes, 1.0, opened.load)
        return (t.min() / t).astype(np.float32)

    def _play(self, opened: OpenedRound, action: np.ndarray) -> tuple[RoundReport, bool]:
        """The report, and whether the action was repaired (the outcome)."""
        chosen = action.astype(bool)
        repaired = not chosen.any()
        if repaired:  # at least one client trains: the fastest (flagged in info)
            chosen[np.argmax(self._observe(opened))] = True
        plan = RoundPlan.make(len(chosen), lr=self.config.scenario.lr, selected=chosen,
                              epochs=self.config.epochs)
        return self.federation.finish_round(self.federation.train_round(opened, plan)), repaired

    def _reward_terms(self, report: RoundReport, repaired: bool) -> dict[str, float]:
        return {"neg_round_time": -report.round_time}

    def _reward_weights(self) -> dict[str, float]:
        return {"neg_round_time": 1.0}

    def _family_info(self, report: RoundReport, repaired: bool, terms: dict[str, float]) -> dict:
        return {"toy/chosen": int(report.selected.sum()), "toy/repaired": repaired}


class FastestHalfPolicy:
    """The faster half of the clients train."""

    def __init__(self, env) -> None:
        self.n = env.action_space.n

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        """SB3's signature; one observation or a batch."""
        obs = np.asarray(observation)
        return (obs >= np.median(obs, axis=-1, keepdims=True)).astype(np.int8), state


TOY = Family(name="toy", paper="a toy family (tests/toy_family.py)", envs={"FLToy-v0": "toy_family:FLToyEnv"},
             policies={"fastest-half": PolicyEntry(FastestHalfPolicy,
                                                   "the faster half of the clients train")},
             metrics=(Metric("toy/chosen", "clients chosen"),))


def register() -> None:
    """Add the toy family to the registry (what a family's registry entry does)."""
    register_family(TOY)
