"""One evaluation loop for fixed and learned policies: episodes on given seeds, metrics from ``info``.

Every step's ``info`` is flattened to its scalars: numbers as they are, dicts of numbers by key
(``family/metric/key``); per-client arrays and flags are left out. An episode is
summarised per metric by its mean over rounds, or by its final value for the metrics the
registry marks ``final`` (cumulative time, uploads, accuracy).
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.envs.registry import metrics_for
from fl_gym.envs.vector import BatchedVecEnv
from fl_gym.validation import require

SKIP = ("round", "reward_terms", "TimeLimit.truncated", "terminal_observation")


def flatten_info(info: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Scalars of an ``info`` dict (see the module docstring)."""
    out: dict[str, float] = {}
    for key, value in info.items():
        if key in SKIP or key.startswith("episode"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_info(value, prefix=f"{name}/"))
        elif isinstance(value, (bool, np.bool_)):
            continue
        elif isinstance(value, (int, float, np.integer, np.floating)):
            out[name] = float(value)
    return out


@dataclass
class Episode:
    """One evaluated episode: per-round metrics and rewards."""

    seed: int
    rewards: list[float] = field(default_factory=list)
    rounds: list[dict[str, float]] = field(default_factory=list)
    final: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        """The episode as JSON values (:meth:`of` reads it back)."""
        return {"seed": self.seed, "rewards": self.rewards, "rounds": self.rounds,
                "final": sorted(self.final)}

    @classmethod
    def of(cls, data: dict[str, Any]) -> Episode:
        """The episode :meth:`as_dict` wrote."""
        return cls(data["seed"], data["rewards"], data["rounds"], frozenset(data["final"]))

    def series(self, metric: str) -> list[float]:
        """The metric round by round (NaN where a round did not report it)."""
        return [r.get(metric, math.nan) for r in self.rounds]

    def summary(self) -> dict[str, float]:
        """``return``, mean ``reward``, and each metric's mean (or last value for :attr:`final` metrics)."""
        out = {"return": float(np.sum(self.rewards)), "reward": float(np.mean(self.rewards))}
        for metric in sorted({k for r in self.rounds for k in r}):
            values = [v for v in self.series(metric) if not math.isnan(v)]
            if values:
                out[metric] = values[-1] if metric in self.final else float(np.mean(values))
        return out


class _Runner:
    """One policy's episode on one env, a step at a time (so copies of a vector env can step together)."""

    def __init__(self, env: gym.Env, policy: Any, seed: int, max_rounds: int | None, deterministic: bool,
                 record: bool = False) -> None:
        self.env, self.policy, self.seed = env, policy, seed
        self.max_rounds, self.deterministic = max_rounds, deterministic
        final = frozenset(m.key for m in metrics_for(env.spec.id) if m.final) if env.spec else frozenset()
        self.episode = Episode(seed, final=final)
        self.state, self.start, self.done = None, np.ones((1,), dtype=bool), False
        self.trajectory: list[tuple[np.ndarray, Any]] | None = [] if record else None  # (observation, action)
        require(callable(getattr(policy, "predict", None)), "make_policy(env)", policy,
                "an object with SB3's predict(observation, state, episode_start, deterministic)")
        self.masks = _mask_source(env, policy)

    def reset(self) -> None:
        reseed = getattr(self.policy, "reseed", None)  # a fixed policy's own draws follow the episode seed
        if reseed is not None:
            reseed(self.seed)
        self.obs, _ = self.env.reset(seed=self.seed)
        self.done = self.max_rounds is not None and self.max_rounds < 1

    def step(self) -> None:
        if self.done:
            return
        masks = {} if self.masks is None else {"action_masks": self.masks()}
        action, self.state = self.policy.predict(self.obs, state=self.state, episode_start=self.start,
                                                 deterministic=self.deterministic, **masks)
        if self.trajectory is not None:
            self.trajectory.append((self.obs, action))
        self.obs, reward, terminated, truncated, info = self.env.step(action)
        self.start = np.zeros((1,), dtype=bool)
        self.episode.rewards.append(float(reward))
        self.episode.rounds.append(flatten_info(info))
        self.done = terminated or truncated or len(self.episode.rewards) == self.max_rounds


def _mask_source(env: gym.Env, policy: Any) -> Callable[[], np.ndarray] | None:
    """The env's ``action_masks`` where the policy's ``predict`` takes them (sb3-contrib's MaskablePPO)."""
    takes = "action_masks" in inspect.signature(policy.predict).parameters
    return getattr(env.unwrapped, "action_masks", None) if takes else None


def run_episode(env: gym.Env, policy: Any, seed: int, max_rounds: int | None = None,
                deterministic: bool = True) -> Episode:
    """Roll ``policy`` (anything with SB3's ``predict``) through one episode of ``env`` seeded ``seed``."""
    runner = _Runner(env, policy, seed, max_rounds, deterministic)
    runner.reset()
    while not runner.done:
        runner.step()
    return runner.episode


def evaluate(make_env: Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
             make_policy: Callable[[gym.Env], Any], seeds: Iterable[int], max_rounds: int | None = None
             ) -> list[Episode]:
    """Episodes of a fresh policy per seed on a fresh env per seed.

    The seeds' episodes run side by side as the copies of a batched vector env (their FL rounds
    merged into one engine call, :class:`~fl_gym.envs.vector.BatchedVecEnv`); each copy's policy
    acts on its own env, and a copy whose episode has ended waits for the others. A seeded fixed
    policy draws from its seed and the episode's (``reseed``).

    Args:
        make_env: the env factory of every episode, or one factory per seed (e.g. per federation).
        make_policy: ``make_policy(env)`` -> a predictor for that env.
        seeds: the episodes' seeds.
        max_rounds: stop each episode after this many rounds (None: at its end).
    """
    return [r.episode for r in _play(make_env, make_policy, seeds, max_rounds, record=False)]


def demonstrate(make_env: Callable[[], gym.Env], make_policy: Callable[[gym.Env], Any], seeds: Iterable[int]
                ) -> list[tuple[Episode, list[tuple[np.ndarray, Any]]]]:
    """:func:`evaluate`'s episodes with each step's ``(observation, action)``: a policy's demonstrations."""
    return [(r.episode, r.trajectory) for r in _play(make_env, make_policy, seeds, None, record=True)]


def _play(make_env: Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
          make_policy: Callable[[gym.Env], Any],
          seeds: Iterable[int], max_rounds: int | None, record: bool) -> list[_Runner]:
    seeds = list(seeds)
    makers = list(make_env) if isinstance(make_env, Sequence) else [make_env] * len(seeds)
    require(len(makers) == len(seeds), "make_env", f"{len(makers)} factories", f"one per seed ({len(seeds)})")
    vec = BatchedVecEnv(makers)
    try:
        runners = [_Runner(env, make_policy(env), seed, max_rounds, True, record)
                   for env, seed in zip(vec.envs, seeds, strict=True)]
        vec.for_each_copy(lambda i: runners[i].reset())
        while not all(r.done for r in runners):
            vec.for_each_copy(lambda i: runners[i].step())
    finally:
        vec.close()
    return runners


def aggregate(episodes: list[Episode]) -> dict[str, tuple[float, float]]:
    """``metric -> (mean, std)`` over episodes of their summaries (std 0 for one episode)."""
    return aggregate_summaries([e.summary() for e in episodes])


def aggregate_summaries(summaries: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """``metric -> (mean, std)`` over :meth:`Episode.summary` dicts (std 0 for one)."""
    metrics = sorted({k for s in summaries for k in s})
    out = {}
    for m in metrics:
        values = [s[m] for s in summaries if m in s]
        out[m] = (float(np.mean(values)), float(statistics.stdev(values)) if len(values) > 1 else 0.0)
    return out
