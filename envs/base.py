"""The base class of every fl-gym env: decode, one federated round, encode.

One ``step`` is one FL round. Families override hooks only (as HighwayEnv does):

* :meth:`FLEnv._decode` turns an action into a :class:`~fl_gym.records.RoundPlan` (no training);
* :meth:`FLEnv._reward_terms` names the reward components of a report; :meth:`FLEnv._reward`
  combines them;
* :meth:`FLEnv._observe` prepares the next round (what the server sees before it decides) and
  returns the observation;
* :meth:`FLEnv._info` adds family-specific metrics to ``info``.

``reset(seed=...)`` seeds everything the episode draws (client sampling, device dynamics,
model initialisation, data order); the static scenario (who holds which data on which device)
comes from the ``scenario_seed`` the federation was built with.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.federation import Federation
from fl_gym.records import RoundPlan, RoundReport


class FLEnv(gym.Env[np.ndarray, np.ndarray]):
    """A Gymnasium env whose step runs one round of a :class:`~fl_gym.federation.Federation`.

    Args:
        federation: the simulator this env drives.
        rounds_per_episode: rounds until ``truncated``.
    """

    metadata = {"render_modes": []}

    def __init__(self, federation: Federation, rounds_per_episode: int) -> None:
        self.federation = federation
        self.rounds_per_episode = rounds_per_episode
        self._round = 0
        self._last_report: RoundReport | None = None

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run the pending round under ``action``; return the next round's observation."""
        if self._round >= self.rounds_per_episode:
            raise gym.error.ResetNeeded("step() after the episode ended; call reset()")
        plan = self._decode(action)
        report = self._run(plan)
        self._round += 1
        self._last_report = report
        terms = self._reward_terms(report)
        reward = self._reward(terms)
        terminated = self._is_terminated(report)
        truncated = self._round >= self.rounds_per_episode and not terminated
        info = self._info(plan, report, terms)
        return self._observe(), float(reward), terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: fresh models and dynamics, same scenario; observe round 1."""
        super().reset(seed=seed)
        self.federation.reset(seed=int(self.np_random.integers(2**63 - 1)))
        self._round = 0
        self._last_report = None
        return self._observe(), {"round": 0}

    # ---- hooks -------------------------------------------------------------------------------

    def _run(self, plan: RoundPlan) -> RoundReport:
        return self.federation.run_round(plan)

    def _decode(self, action: np.ndarray) -> RoundPlan:
        raise NotImplementedError

    def _observe(self) -> np.ndarray:
        raise NotImplementedError

    def _reward_terms(self, report: RoundReport) -> dict[str, float]:
        raise NotImplementedError

    def _reward(self, terms: dict[str, float]) -> float:
        raise NotImplementedError

    def _is_terminated(self, report: RoundReport) -> bool:
        return False

    def _info(self, plan: RoundPlan, report: RoundReport, terms: dict[str, float]) -> dict[str, Any]:
        info = {"round": self._round, "round_time": report.round_time, "sim_time": report.clock,
                "straggling_latency": report.straggling_latency, "upload_bytes": report.upload_bytes,
                "reward_terms": terms}
        if self.federation.config.train:  # learning metrics exist only when something learns
            info["accuracy"] = report.accuracy
        return info
