"""One episode's per-client decisions, round by round, for several policies: a plot of what they do.

For envs whose ``info`` reports a per-client decision array (``rates/lrs``, ``aggregate/weights``):
each policy plays the same seed and the plot shows the mean over clients per round with a band of
one standard deviation across clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.training.compare import policy_spec
from fl_gym.training.plots import plot_bands


def decision_trace(env_id: str, policies: list[str], seed: int, key: str, path: Path, ylabel: str,
                   env_kwargs: dict[str, Any] | None = None) -> dict[str, list[np.ndarray]]:
    """Play one episode per policy on ``seed``; plot ``info[key]`` per round to ``path``; the arrays."""
    traces = {}
    for spec in policies:
        p = policy_spec(spec, env_id, (seed,))
        env = gym.make(env_id, **{**(env_kwargs or {}), **p.env_kwargs})
        policy = p.factory(env)
        obs, _ = env.reset(seed=seed)
        rows, done = [], False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy.predict(obs, deterministic=True)[0])
            rows.append(np.asarray(info[key], np.float64))
            done = terminated or truncated
        env.close()
        traces[p.label] = rows
    lines = {label: (None, {"mean": [r.mean() for r in rows], "std": [r.std() for r in rows]})
             for label, rows in traces.items()}
    plot_bands(lines, "round", ylabel, f"{env_id}: {key} over clients (mean, band: std), seed {seed}", path)
    return traces
