"""Benchmarks: the batched engine against the naive per-client loop, on the same work.

Each scenario times one FL round of local training (building the batch schedule plus training
every client) both ways, as the median of repeated runs after a warm-up (the two ways
interleaved, so that a noisy machine slows both alike), and reports the ratio and the achieved
GFLOP/s against the machine's measured matmul peak at the same thread count.

* S3: ``digits``, 10 clients x ~144 samples, batch 10, 2 epochs (overhead-bound, the envs' default);
* S4: the same with 100 clients x 144 samples (drawn from ``digits``, overlapping across clients);
* S1: 10 clients x 600 samples of 1x28x28, batch 32, 1 epoch, MLP 784-200-200-10 (compute-bound);
* S2: the same with FedAdp's CNN (1.66 M parameters);
* on a GPU also S1/S2 with 100 clients.

S1/S2 use random tensors of MNIST's shape: time does not depend on pixel values.

On a GPU, the ``graphs`` section times each scenario's batched round eager and as a CUDA graph
replay (:mod:`fl_gym.engine.graphs`), against the same machine's CPU.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from fl_gym.data import iid_split, load_dataset
from fl_gym.engine import (
    BatchSchedule,
    GraphedCohort,
    Member,
    OptimizerConfig,
    local_steps,
    make_schedule,
    train_cohort,
)
from fl_gym.engine.allocator import keep_freed_memory
from fl_gym.engine.reference import reference_train
from fl_gym.models import Stack, build_model


@dataclass(frozen=True)
class Scenario:
    """One benchmark workload."""

    name: str
    model: str
    clients: int
    samples: int | None  # per client; None = an even split of digits
    batch_size: int
    epochs: int
    image: tuple[int, ...]


SCENARIOS = {
    "S3": [Scenario("S3", m, 10, None, 10, 2, (1, 8, 8)) for m in ("mlp-small", "cnn-small")],
    "S4": [Scenario("S4", m, 100, 144, 10, 2, (1, 8, 8)) for m in ("mlp-small", "cnn-small")],
    "S1": [Scenario("S1", "mlp-large", 10, 600, 32, 1, (1, 28, 28))],
    "S2": [Scenario("S2", "fedadp-cnn", 10, 600, 32, 1, (1, 28, 28))],
    "S1-100": [Scenario("S1-100", "mlp-large", 100, 600, 32, 1, (1, 28, 28))],
    "S2-100": [Scenario("S2-100", "fedadp-cnn", 100, 600, 32, 1, (1, 28, 28))],
}


def _data(sc: Scenario, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    rng = np.random.default_rng(0)
    if sc.image == (1, 8, 8):
        d = load_dataset("digits")
        x, y = d.x_train, d.y_train
        n = len(y)
        if sc.samples is None:
            parts = iid_split(n, sc.clients, rng)
        else:
            parts = [np.sort(rng.choice(n, sc.samples, replace=False)) for _ in range(sc.clients)]
    else:
        g = torch.Generator().manual_seed(0)
        n = sc.clients * sc.samples
        x, y = torch.randn(n, *sc.image, generator=g), torch.randint(0, 10, (n,), generator=g)
        parts = np.array_split(np.arange(n), sc.clients)
    return x.to(device), y.to(device), [torch.as_tensor(p, device=device) for p in parts]


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def interleaved_medians(fns: list[Callable[[], object]], repeats: list[int],
                        device: torch.device) -> list[float]:
    """Median seconds of each function after one warm-up, runs interleaved so drifts hit all alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(max(repeats)):
        for fn, n, out in zip(fns, repeats, times, strict=True):
            if r < n:
                out.append(_timed(fn, device))
    return [statistics.median(t) for t in times]


def matmul_peak(device: torch.device, size: int = 2048, repeats: int = 10) -> float:
    """Float32 matmul GFLOP/s at the current thread count: the best of ``repeats`` after a warm-up.

    The best, not the median: on a shared or frequency-scaled CPU the median of a short run swings
    by 1.5x between runs, and a peak that a workload can beat would make "% of peak" meaningless.
    """
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    torch.mm(a, b)
    seconds = min(_timed(lambda: torch.mm(a, b), device) for _ in range(repeats))
    return 2 * size ** 3 / seconds / 1e9


@dataclass(frozen=True)
class EngineResult:
    """One row of the engine table."""

    scenario: str
    model: str
    clients: int
    threads: int
    batched_ms: float
    loop_ms: float
    gflops_batched: float
    gflops_loop: float
    peak: float

    @property
    def speedup(self) -> float:
        """Loop time over batched time."""
        return self.loop_ms / self.batched_ms


class Round:
    """One scenario's round of local training on a device: its data, its cohort, fresh batch draws."""

    def __init__(self, sc: Scenario, device: torch.device) -> None:
        self.sc, self.device = sc, device
        self.x, self.y, parts = _data(sc, device)
        self.arch = build_model(sc.model, sc.image, 10)
        self.start = self.arch.init(torch.Generator().manual_seed(0)).to(device)
        sizes = np.array([len(p) for p in parts])
        steps = local_steps(sizes, np.full(sc.clients, sc.epochs), sc.batch_size)
        order = np.argsort(-steps, kind="stable")
        self.cohort, self.steps = [parts[i] for i in order], steps[order]
        self.lr = torch.full((sc.clients,), 0.01, device=device)
        self.opt = OptimizerConfig()
        self.flops = self.arch.train_flops_per_sample * float(sizes.sum() * sc.epochs)

    def schedule(self, seed: int = 1) -> BatchSchedule:
        """A batch draw of the cohort (the draw is part of a round's cost)."""
        gen = torch.Generator(device=self.device).manual_seed(seed)
        return make_schedule(self.cohort, self.steps, self.sc.batch_size, gen)

    def stack(self) -> Stack:
        """Every client's rows at the round's start."""
        return Stack.broadcast(self.arch, self.start, self.sc.clients)

    def batched(self, schedule: BatchSchedule | None = None) -> Stack:
        """The batched engine's round; the trained rows."""
        stack = self.stack()
        train_cohort([Member("model", stack)], self.x, self.y, schedule or self.schedule(), self.lr, self.opt)
        return stack

    def loop(self) -> None:
        """The per-client loop's round."""
        reference_train(self.arch, self.start.expand(self.sc.clients, -1), self.x, self.y, self.schedule(),
                        self.lr, self.opt)

    def graphed(self) -> tuple[GraphedCohort, Stack]:
        """The batched round captured as a CUDA graph, and the rows it trains."""
        stack = self.stack()
        graphed = GraphedCohort([Member("model", stack)], self.x, self.y, self.schedule(), self.lr, self.opt)
        return graphed, stack


def run_engine_scenario(sc: Scenario, device: torch.device, repeats: int, loop_repeats: int, peak: float
                        ) -> EngineResult:
    """Time one scenario both ways."""
    work = Round(sc, device)
    t_batched, t_loop = interleaved_medians([work.batched, work.loop], [repeats, loop_repeats], device)
    return EngineResult(sc.name, sc.model, sc.clients, torch.get_num_threads(), t_batched * 1e3, t_loop * 1e3,
                        work.flops / t_batched / 1e9, work.flops / t_loop / 1e9, peak)


def engine_table(results: list[EngineResult]) -> str:
    """Markdown table of engine results."""
    head = ("| scenario | model | clients | threads | batched ms/round | loop ms/round | speed-up | "
            "batched GFLOP/s | loop GFLOP/s | matmul peak GFLOP/s | batched % of peak |")
    rows = [head, "|" + "---|" * 11]
    for r in results:
        rows.append(f"| {r.scenario} | {r.model} | {r.clients} | {r.threads} | {r.batched_ms:.1f} | "
                    f"{r.loop_ms:.1f} | {r.speedup:.1f}x | {r.gflops_batched:.1f} | {r.gflops_loop:.1f} | "
                    f"{r.peak:.0f} | {100 * r.gflops_batched / r.peak:.0f}% |")
    return "\n".join(rows)


def engine_benchmark(scenarios: list[str], threads: list[int], device: str = "cpu", repeats: int = 7,
                     loop_repeats: int = 3, progress: Callable[[str], None] = print) -> list[EngineResult]:
    """Run the named scenarios at each thread count; returns one result per (threads, scenario, model)."""
    dev = torch.device(device)
    keep_freed_memory()  # as the Federation does; applies to both paths
    results = []
    for n in threads:
        with torch_threads(n):
            peak = matmul_peak(dev)
            for name in scenarios:
                for sc in SCENARIOS[name]:
                    progress(f"{sc.name} {sc.model} x{sc.clients} on {device}, {n} thread(s)...")
                    results.append(run_engine_scenario(sc, dev, repeats, loop_repeats, peak))
    return results


@dataclass(frozen=True)
class GraphResult:
    """One row of the CUDA-graph table: a round on the CPU, eager on the GPU, and as a graph replay.

    ``max_diff`` is the largest difference between the rows the graph and the eager round train
    from the same batches: the graph replays the eager round's computation.
    """

    scenario: str
    model: str
    clients: int
    cpu_ms: float
    eager_ms: float
    graph_ms: float
    max_diff: float


def graph_benchmark(scenarios: list[str], device: str = "cuda", repeats: int = 7,
                    progress: Callable[[str], None] = print) -> list[GraphResult]:
    """Each scenario's batched round: the CPU (one thread), the GPU eager, the GPU replaying a CUDA graph.

    Every round draws its batches (eager) and the graph's copies them into its buffers, as a
    federation would each round.
    """
    dev, cpu = torch.device(device), torch.device("cpu")
    keep_freed_memory()
    results = []
    with torch_threads(1):
        for name in scenarios:
            for sc in SCENARIOS[name]:
                progress(f"{sc.name} {sc.model} x{sc.clients}: cpu, {device} eager, {device} graph...")
                on_cpu, on_gpu = Round(sc, cpu), Round(sc, dev)
                graphed, rows = on_gpu.graphed()
                schedule = on_gpu.schedule(seed=2)
                graphed.replay(schedule)
                diff = float((rows.flat - on_gpu.batched(schedule).flat).abs().max())
                (t_cpu,) = interleaved_medians([on_cpu.batched], [repeats], cpu)
                t_eager, t_graph = interleaved_medians(
                    [on_gpu.batched, lambda g=graphed, w=on_gpu: g.replay(w.schedule())], [repeats] * 2, dev)
                results.append(GraphResult(sc.name, sc.model, sc.clients, t_cpu * 1e3, t_eager * 1e3,
                                           t_graph * 1e3, diff))
    return results


def graph_table(results: list[GraphResult]) -> str:
    """Markdown table of CUDA-graph results."""
    rows = ["| scenario | model | clients | CPU ms/round | GPU eager ms/round | GPU graph ms/round | "
            "eager / graph | CPU / graph | largest graph - eager difference |", "|" + "---|" * 9]
    for r in results:
        rows.append(f"| {r.scenario} | {r.model} | {r.clients} | {r.cpu_ms:.1f} | {r.eager_ms:.1f} | "
                    f"{r.graph_ms:.2f} | {r.eager_ms / r.graph_ms:.1f}x | {r.cpu_ms / r.graph_ms:.1f}x | "
                    f"{r.max_diff:.1e} |")
    return "\n".join(rows)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` torch threads, then restore the previous count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass(frozen=True)
class EnvResult:
    """Steps per second of one env id under some arguments."""

    env_id: str
    arguments: str
    steps_per_s: float
    note: str


def _env_rate(env_id: str, steps: int, repeats: int, **kwargs) -> float:
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(64)]
    env.reset(seed=0)

    def run() -> None:
        for i in range(steps):
            *_, terminated, truncated, _ = env.step(actions[i % len(actions)])
            if terminated or truncated:
                env.reset()

    (seconds,) = interleaved_medians([run], [repeats], torch.device("cpu"))
    return steps / seconds


def env_benchmark(progress: Callable[[str], None] = print) -> list[EnvResult]:
    """Steps per second through ``gym.make`` (its wrappers included), at 1 torch thread.

    Every registered id at its defaults (median of 5 x 2,000 steps), then each family's extra
    cases (:attr:`~fl_gym.envs.registry.Family.bench`, median of 3 steps: real training).
    """
    from fl_gym.envs.registry import FAMILIES

    results = []
    with torch_threads(1):
        for family in FAMILIES.values():
            for env_id in family.envs:
                progress(f"{env_id}, defaults...")
                results.append(EnvResult(env_id, "defaults", _env_rate(env_id, 2000, 5), "defaults, digits"))
            for env_id, kwargs, note in family.bench:
                label = ", ".join(f"{k}={v}" for k, v in kwargs.items())
                progress(f"{env_id}, {label}...")
                results.append(EnvResult(env_id, label, _env_rate(env_id, 1, 3, **kwargs), note))
    return results


def env_table(results: list[EnvResult]) -> str:
    """Markdown table of env throughput."""
    rows = ["| env id | arguments | steps/s | scenario |", "|---|---|---|---|"]
    rows += [f"| {r.env_id} | {r.arguments} | {r.steps_per_s:,.1f} | {r.note} |" for r in results]
    return "\n".join(rows)


@dataclass(frozen=True)
class RecipeResult:
    """Wall time of one multi-stage recipe's training."""

    recipe: str
    preset: str
    steps: int
    seconds: float


def recipe_benchmark(presets: tuple[str, ...] = ("fast", "paper"),
                     progress: Callable[[str], None] = print) -> list[RecipeResult]:
    """Wall time of every registered recipe, per hyperparameter preset (``paper`` = the YAML base blocks)."""
    from fl_gym.agents.recipes import stage_hyperparams, train_recipe, yaml_preset
    from fl_gym.envs.registry import FAMILIES

    results = []
    with torch_threads(1):
        for recipe in (r for f in FAMILIES.values() for r in f.recipes):
            for preset in presets:
                name = yaml_preset(preset)
                steps = sum(int(b["n_timesteps"]) for b in stage_hyperparams(recipe, name).values())
                progress(f"recipe {recipe.name}, preset {preset} ({steps} steps)...")
                start = time.perf_counter()
                train_recipe(recipe, seed=0, preset=name)
                results.append(RecipeResult(recipe.name, preset, steps, time.perf_counter() - start))
    return results


def recipe_table(results: list[RecipeResult]) -> str:
    """Markdown table of recipe training times."""
    rows = ["| recipe | preset | steps (all stages) | wall time (s) | steps/s |", "|---|---|---|---|---|"]
    rows += [f"| {r.recipe} | {r.preset} | {r.steps:,} | {r.seconds:.0f} | {r.steps / r.seconds:,.0f} |"
             for r in results]
    return "\n".join(rows)
