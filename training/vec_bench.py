"""``fl-gym bench --sections vec``: env steps/s of the vector envs on each family's default preset.

For every family's first env id that trains for real (its default preset), SB3's
``DummyVecEnv`` (copies one after the other), ``SubprocVecEnv`` (one process per copy; up to 16
copies) and the batched vector env in one process and with its default workers
(:func:`~fl_gym.envs.vectorize.auto_workers`: one process per core with at least 8 copies each)
at several copy counts, each the median of repeated timed runs of a few vector steps
(interleaved, after a warm-up), with the ratios measured in the same run. One torch thread per
process (the env's ``num_threads=1``, so worker processes do not oversubscribe the cores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from fl_gym.agents.ppo import make_env
from fl_gym.envs.registry import FAMILIES
from fl_gym.envs.vectorize import auto_workers
from fl_gym.training.bench import interleaved_medians, torch_threads

KINDS = ("dummy", "subproc", "batched-1", "batched")
SUBPROC_MAX = 16


@dataclass(frozen=True)
class VecResult:
    """Steps/s of each vector-env kind for one id and copy count (NaN where not measured)."""

    env_id: str
    n_envs: int
    steps_per_s: dict[str, float]


def _learning_ids() -> list[str]:
    """The first id of every family whose default env trains models."""
    ids = []
    for family in FAMILIES.values():
        env_id = next(iter(family.envs))
        env = gym.make(env_id)
        if env.unwrapped.federation.config.train:
            ids.append(env_id)
        env.close()
    return ids


def _stepper(env_id: str, kind: str, n: int, steps: int) -> Callable[[], None]:
    workers = 1 if kind == "batched-1" else None
    vec = make_env(env_id, n, seed=0, vec_env=kind.removesuffix("-1"), env_kwargs={"num_threads": 1}, workers=workers)
    vec.action_space.seed(0)
    actions = np.stack([vec.action_space.sample() for _ in range(n)])
    vec.reset()

    def run() -> None:
        for _ in range(steps):
            vec.step(actions)

    return run


def vec_benchmark(counts: tuple[int, ...] = (1, 4, 16, 64), steps: int = 3, repeats: int = 3,
                  progress: Callable[[str], None] = print) -> list[VecResult]:
    """Every learning family's default id at every copy count."""
    results = []
    with torch_threads(1):
        for env_id in _learning_ids():
            for n in counts:
                kinds = [k for k in KINDS if (k != "subproc" or n <= SUBPROC_MAX) and (k != "batched-1" or
                                                                                     auto_workers(n) > 1)]
                progress(f"{env_id}, {n} copies: {', '.join(kinds)}...")
                runs = [_stepper(env_id, k, n, steps) for k in kinds]
                seconds = interleaved_medians(runs, [repeats] * len(runs), torch.device("cpu"))
                rates = {k: n * steps / s for k, s in zip(kinds, seconds, strict=True)}
                rates.setdefault("batched-1", rates["batched"])  # auto is one process here
                rates.setdefault("subproc", float("nan"))
                results.append(VecResult(env_id, n, rates))
    return results


def vec_table(results: list[VecResult]) -> str:
    """Markdown: steps/s per kind and the batched (default workers) / dummy and / subproc ratios."""
    rows = ["| env id | copies | dummy (steps/s) | subproc | batched, 1 process | batched (workers) | "
            "batched / dummy | batched / subproc |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r.steps_per_s
        rows.append(f"| {r.env_id} | {r.n_envs} | {s['dummy']:,.1f} | {s['subproc']:,.1f} | {s['batched-1']:,.1f} | "
                    f"{s['batched']:,.1f} ({auto_workers(r.n_envs)}) | {s['batched'] / s['dummy']:.2f} | "
                    f"{s['batched'] / s['subproc']:.2f} |")
    return "\n".join(rows).replace("nan", "-")
