"""``fl-gym bench --sections ray``: Ray actors against worker processes, and a sharded federation.

Two tables (docs/integrations.md), medians of interleaved runs after one warm-up, one torch
thread per process:

* vector env steps/s of :class:`~fl_gym.integrations.ray.RayVecEnv` and of
  :class:`~fl_gym.envs.sharded.ShardedVecEnv` with the same 2 shards;
* FedAvg rounds/s of a 10,000-client ``synthetic`` federation (1,000 clients per round) in one
  process and as :class:`~fl_gym.integrations.ray_federation.RayFederation` on 1 and 2 actors.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from fl_gym import Federation
from fl_gym.config import FederationConfig
from fl_gym.data.partition import PartitionConfig
from fl_gym.envs.sharded import ShardedVecEnv
from fl_gym.integrations.ray import RayVecEnv, import_ray
from fl_gym.integrations.ray_federation import RayFederation
from fl_gym.records import RoundPlan
from fl_gym.training.bench import interleaved_medians, torch_threads

VEC_CASES = (("FLLearningRate-v0", 16, 6), ("FLHetero-v0", 64, 200))  # id, copies, steps per timed run
CLIENTS, PER_ROUND, EPOCHS = 10_000, 1_000, 5


def _vec_run(cls: type, env_id: str, n: int, steps: int) -> tuple[Callable[[], None], object]:
    vec = cls([lambda: gym.make(env_id) for _ in range(n)], workers=2)
    vec.seed(0)
    vec.action_space.seed(0)
    actions = np.stack([vec.action_space.sample() for _ in range(n)])
    vec.reset()
    return (lambda: [vec.step(actions) for _ in range(steps)]), vec


def vec_rows(repeats: int = 3, progress: Callable[[str], None] = print) -> list[tuple[str, int, float, float, float]]:
    """``(env id, copies, Ray actors steps/s, worker processes steps/s, start-up s with Ray)`` per case.

    The Ray shards are closed (their CPUs freed) before the next case asks for its own.
    """
    rows = []
    for env_id, n, steps in VEC_CASES:
        progress(f"ray vec: {env_id}, {n} copies")
        start = time.perf_counter()
        ray_run, ray_vec = _vec_run(RayVecEnv, env_id, n, steps)
        startup = time.perf_counter() - start
        proc_run, proc_vec = _vec_run(ShardedVecEnv, env_id, n, steps)
        seconds = interleaved_medians([ray_run, proc_run], [repeats, repeats], torch.device("cpu"))
        rows.append((env_id, n, n * steps / seconds[0], n * steps / seconds[1], startup))
        ray_vec.close()
        proc_vec.close()
    return rows


def federation_config() -> FederationConfig:
    """10,000 clients over Synthetic(1, 1) from 300 devices (123,471 samples, about 12 per client)."""
    return FederationConfig(dataset="synthetic", dataset_kwargs={"num_users": 300}, num_clients=CLIENTS,
                            partition=PartitionConfig("iid"), models=("mlp-medium",), batch_size=10,
                            eval_every=10**6)


def federation_rows(repeats: int = 3, progress: Callable[[str], None] = print) -> list[tuple[str, float]]:
    """``(how, rounds/s)``: one process, then 1 and 2 actors (median of ``repeats`` rounds each).

    One set-up at a time: the actors of one set-up hold the CPUs the next one asks Ray for.
    """
    cfg = federation_config()
    rng = np.random.default_rng(0)
    masks = [np.isin(np.arange(CLIENTS), rng.choice(CLIENTS, PER_ROUND, replace=False)) for _ in range(repeats + 1)]
    alone = Federation(cfg, 0)
    alone.reset(1)
    play = _rounds(lambda m: alone.run_round(RoundPlan.make(CLIENTS, lr=0.05, selected=m, epochs=EPOCHS)), masks)
    rows = [("one process", 1.0 / interleaved_medians([play], [repeats], torch.device("cpu"))[0])]
    for workers in (1, 2):
        progress(f"ray federation: {workers} actor(s)")
        fed = RayFederation(cfg, 0, workers=workers)
        fed.reset(1)
        play = _rounds(lambda m, f=fed: f.run_round(m, 0.05, EPOCHS, evaluate=False), masks)
        rows.append((f"{workers} actor{'s' * (workers > 1)}",
                     1.0 / interleaved_medians([play], [repeats], torch.device("cpu"))[0]))
        fed.close()
    return rows


def _rounds(play: Callable[[np.ndarray], object], masks: list[np.ndarray]) -> Callable[[], None]:
    """One round per call, cycling through ``masks``."""
    cycle = itertools.cycle(masks)
    return lambda: play(next(cycle))


def ray_benchmark(repeats: int = 3, progress: Callable[[str], None] = print) -> str:
    """Both tables as Markdown (starts a local Ray with 2 CPUs if none runs)."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with torch_threads(1):
        vec, federation = vec_rows(repeats, progress), federation_rows(repeats, progress)
    lines = ["| env id | copies | Ray actors (steps/s) | worker processes (steps/s) | Ray / processes | "
             "Ray start-up + reset (s) |", "|---|---|---|---|---|---|"]
    lines += [f"| {e} | {n} | {r:,.1f} | {p:,.1f} | {r / p:.2f} | {s:.1f} |" for e, n, r, p, s in vec]
    lines += ["", f"| {CLIENTS:,} clients, {PER_ROUND:,} per round, {EPOCHS} epochs | rounds/s |", "|---|---|"]
    lines += [f"| {label} | {rate:.2f} |" for label, rate in federation]
    return "\n".join(lines)
