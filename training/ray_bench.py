"""``fl-gym bench --sections ray``: Ray actors against worker processes, and a sharded federation.

Two tables (docs/integrations.md), medians of interleaved runs after one warm-up, one torch
thread per process:

* vector env steps/s of :class:`~fl_gym.integrations.ray.RayVecEnv` and of
  :class:`~fl_gym.envs.sharded.ShardedVecEnv` with the same 2 shards, built by ``make_env`` as the
  vec section builds its envs (each copy in a ``Monitor``);
* FedAvg rounds/s of a 10,000-client ``synthetic`` federation (1,000 clients per round) in one
  process and as :class:`~fl_gym.integrations.ray_federation.RayFederation` on 1 and 2 actors.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np
import torch

from fl_gym import Federation
from fl_gym.config import FederationConfig
from fl_gym.data.partition import IID
from fl_gym.integrations.ray import ensure_ray
from fl_gym.integrations.ray_federation import RayFederation
from fl_gym.records import RoundPlan
from fl_gym.training.bench import interleaved_medians, torch_threads
from fl_gym.training.vec_bench import stepper

VEC_CASES = (("FLLearningRate-v0", 16, 6), ("FLHetero-v0", 64, 200))  # id, copies, steps per timed run
CLIENTS, PER_ROUND, EPOCHS = 10_000, 1_000, 5


def vec_rows(repeats: int = 3,
             progress: Callable[[str], None] = print) -> list[tuple[str, int, float, float, float]]:
    """``(env id, copies, Ray actors steps/s, worker processes steps/s, start-up s with Ray)`` per case.

    The Ray shards are closed (their CPUs freed) before the next case asks for its own.
    """
    rows = []
    for env_id, n, steps in VEC_CASES:
        progress(f"ray vec: {env_id}, {n} copies")
        start = time.perf_counter()
        ray_run, ray_vec = stepper(env_id, "ray", n, steps, workers=2)
        startup = time.perf_counter() - start
        proc_run, proc_vec = stepper(env_id, "batched", n, steps, workers=2)
        seconds = interleaved_medians([ray_run, proc_run], [repeats, repeats], torch.device("cpu"))
        rows.append((env_id, n, n * steps / seconds[0], n * steps / seconds[1], startup))
        ray_vec.close()
        proc_vec.close()
    return rows


def federation_config() -> FederationConfig:
    """10,000 clients over Synthetic(1, 1) from 300 devices (123,471 samples, about 12 per client)."""
    return FederationConfig(dataset="synthetic", dataset_kwargs={"num_users": 300}, num_clients=CLIENTS,
                            partition=IID(), models=("mlp-medium",), batch_size=10,
                            eval_every=10**6)


def federation_rows(repeats: int = 3, progress: Callable[[str], None] = print) -> list[tuple[str, float]]:
    """``(how, rounds/s)``: one process, then 1 and 2 actors (median of ``repeats`` rounds each).

    One set-up at a time: the actors of one set-up hold the CPUs the next one asks Ray for.
    """
    cfg = federation_config()
    rng = np.random.default_rng(0)
    masks = [np.isin(np.arange(CLIENTS), rng.choice(CLIENTS, PER_ROUND, replace=False))
             for _ in range(repeats + 1)]
    alone = Federation(cfg, 0)
    alone.reset(1)
    play = _rounds(lambda m: alone.run_round(RoundPlan.make(CLIENTS, lr=0.05, selected=m,
                                                            epochs=EPOCHS)), masks)
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
    ensure_ray(num_cpus=2)
    with torch_threads(1):
        vec, federation = vec_rows(repeats, progress), federation_rows(repeats, progress)
    lines = ["| env id | copies | Ray actors (steps/s) | worker processes (steps/s) | Ray / processes | "
             "Ray start-up + reset (s) |", "|---|---|---|---|---|---|"]
    lines += [f"| {e} | {n} | {r:,.1f} | {p:,.1f} | {r / p:.2f} | {s:.1f} |" for e, n, r, p, s in vec]
    lines += ["", f"| {CLIENTS:,} clients, {PER_ROUND:,} per round, {EPOCHS} epochs | rounds/s |",
              "|---|---|"]
    lines += [f"| {label} | {rate:.2f} |" for label, rate in federation]
    return "\n".join(lines)
