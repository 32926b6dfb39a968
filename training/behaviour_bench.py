"""What device behaviour costs: rounds of a large timing-only federation, and the batched vector env.

``fl-gym bench --sections behaviour`` prints two tables, each rate against behaviour off measured
in the same run (interleaved medians):

* a timing-only federation of ``clients`` clients (MNIST's label counts, IID) sampling 100 per
  round: behaviour off, the availability chain, and a FedScale-format availability trace
  (:func:`write_synthetic_trace`: every device online at random times of a two-day period);
* every env id that plays device behaviour, ``copies`` copies in one batched process, with
  intermittent devices, dropout and a deadline against its defaults.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fl_gym.behaviour import BehaviourConfig
from fl_gym.clock import ClockConfig
from fl_gym.config import FederationConfig
from fl_gym.data.partition import partition_scheme
from fl_gym.envs.registry import env_ids, family_of, resolve
from fl_gym.federation import Federation
from fl_gym.records import RoundPlan
from fl_gym.training.bench import interleaved_medians, torch_threads
from fl_gym.training.vec_bench import stepper

TWO_DAYS = 2 * 86_400.0
# intermittent devices, 5 % dropout and a deadline of 8 simulated seconds (docs/behaviour.md's task)
BEHAVING = {"availability": 0.7, "availability_persistence": 0.8, "dropout": 0.05, "deadline": 8.0,
            "seconds_per_unit": 1.0}


@dataclass(frozen=True)
class BehaviourResult:
    """One case's rate, with behaviour off and on."""

    case: str
    behaviour: str
    rate: float
    unit: str
    ratio: float


def write_synthetic_trace(path: Path, devices: int, intervals: int = 24, seed: int = 0) -> None:
    """A FedScale-format availability trace: per device ``intervals`` spells of 1-30 minutes in two days."""
    rng = np.random.default_rng(seed)
    table = {}
    for device in range(devices):
        starts = np.sort(rng.choice(np.arange(0.0, TWO_DAYS, 1800.0), intervals, replace=False))
        ends = starts + rng.uniform(60.0, 1800.0, intervals)
        table[device] = {"active": starts.tolist(), "inactive": ends.tolist(), "finish_time": TWO_DAYS,
                         "duration": TWO_DAYS, "model": "synthetic"}
    path.write_bytes(pickle.dumps(table))


@contextmanager
def synthetic_trace(devices: int) -> Iterator[str]:
    """The path of a temporary synthetic trace of ``devices`` devices."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "availability.pkl"
        write_synthetic_trace(path, devices)
        yield str(path)


def _rounds(behaviour: BehaviourConfig, clients: int, rounds: int) -> Callable[[], None]:
    """``rounds`` timing-only rounds of a ``clients``-client federation, 100 (or all) sampled each."""
    cfg = FederationConfig(dataset="mnist", num_clients=clients, partition=partition_scheme("iid"),
                           train=False, clock=ClockConfig(seconds_per_unit=1.0), behaviour=behaviour)
    fed, k = Federation(cfg), min(100, clients)

    def run() -> None:
        for _ in range(rounds):
            opened = fed.open_round(k)
            plan = RoundPlan.make(clients, lr=0.05, selected=opened.candidates)
            fed.finish_round(fed.train_round(opened, plan))

    return run


def federation_benchmark(clients: int = 10_000, rounds: int = 50, repeats: int = 5) -> list[BehaviourResult]:
    """Rounds per second of a large timing-only federation with behaviour off, the chain and a trace."""
    with synthetic_trace(clients) as path:
        chain = BehaviourConfig(availability=0.7, availability_persistence=0.8)
        trace = BehaviourConfig(availability_trace=path)
        cases = {"off": BehaviourConfig(), "availability chain (pi 0.7, lam 0.8)": chain,
                 "availability trace (synthetic, 24 spells per device)": trace}
        runs = [_rounds(b, clients, rounds) for b in cases.values()]
        seconds = interleaved_medians(runs, [repeats] * len(runs), torch.device("cpu"))
    label = f"{clients:,} clients, timing only, 100 per round"
    return [BehaviourResult(label, name, rounds / s, "rounds/s", seconds[0] / s)
            for name, s in zip(cases, seconds, strict=True)]


def behaving_ids() -> list[str]:
    """The registered ids whose envs play device behaviour."""
    return [i for i in env_ids() if getattr(resolve(family_of(i).envs[i]), "device_behaviour", False)]


def vec_behaviour_benchmark(copies: int = 16, steps: int = 6, repeats: int = 5) -> list[BehaviourResult]:
    """Steps per second of each behaving id's batched env (one process), behaviour off and on."""
    results = []
    for env_id in behaving_ids():
        (off_run, off_vec), (on_run, on_vec) = (stepper(env_id, "batched-1", copies, steps, env_kwargs=kwargs)
                                                for kwargs in ({}, BEHAVING))
        off, on = interleaved_medians([off_run, on_run], [repeats] * 2, torch.device("cpu"))
        off_vec.close()
        on_vec.close()
        label = f"{env_id}, {copies} copies, batched, 1 process"
        results += [BehaviourResult(label, "off", copies * steps / off, "steps/s", 1.0),
                    BehaviourResult(label, ", ".join(f"{k}={v}" for k, v in BEHAVING.items()),
                                    copies * steps / on, "steps/s", off / on)]
    return results


def behaviour_benchmark(progress: Callable[[str], None] = print, clients: int = 10_000, copies: int = 16,
                        repeats: int = 5) -> list[BehaviourResult]:
    """Both tables' rows (module docstring), at one torch thread."""
    with torch_threads(1):
        progress(f"behaviour: a {clients:,}-client timing-only federation...")
        results = federation_benchmark(clients, repeats=repeats)
        progress(f"behaviour: {copies} copies of {', '.join(behaving_ids())}...")
        return results + vec_behaviour_benchmark(copies, repeats=repeats)


def behaviour_table(results: list[BehaviourResult]) -> str:
    """Markdown: each case's rate and its ratio to behaviour off."""
    rows = ["| case | behaviour | rate | against off |", "|---|---|---|---|"]
    rows += [f"| {r.case} | {r.behaviour} | {r.rate:,.1f} {r.unit} | {r.ratio:.2f}x |" for r in results]
    return "\n".join(rows)
