"""``fl-gym bench --sections vec,turns,memory,ppo``: the vector envs, their merged turns, memory, PPO.

For each env id (by default every family's first, its default preset), SB3's
``DummyVecEnv`` (copies one after the other), ``SubprocVecEnv`` (one process per copy; up to 16
copies) and the batched vector env in one process and with its default workers
(:func:`~fl_gym.envs.vectorize.auto_workers`: one process per core with at least 8 copies each)
at several copy counts, each the median of repeated timed runs of a few vector steps
(interleaved, after a warm-up), with the ratios measured in the same run. One torch thread per
process (the env's ``num_threads=1``, so worker processes do not oversubscribe the cores). The
``turns`` section times the one-process batched env with its copies merged in turns of several
sizes (:class:`~fl_gym.engine.batcher.CohortBatcher`'s ``turn``). The
``memory`` section reads the resident memory of the batched and the dummy vector env of every
family that trains (and the models the copies hold, which the memory target adds), each in a
fresh process; the ``ppo`` section times SB3 PPO for 100k steps on one accuracy-driven default
with each vector env.
"""

from __future__ import annotations

import cProfile
import gc
import math
import multiprocessing as mp
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from fl_gym.agents.ppo import build_agent, load_hyperparams, make_env
from fl_gym.engine.batcher import CohortBatcher
from fl_gym.envs.registry import FAMILIES
from fl_gym.envs.vectorize import auto_workers
from fl_gym.federation import Federation
from fl_gym.training.bench import interleaved_medians, torch_threads

KINDS = ("dummy", "subproc", "batched-1", "batched")
SUBPROC_MAX = 16
PPO_ENV = "FLLearningRate-v0"  # the accuracy-driven default the ppo section trains on
REPO_ROOT = str(Path(__file__).resolve().parents[1])  # the folder of fl_gym/ and envs/ in a checkout
# where a vector step's Python calls are made: under the merged engine calls, or under one of a copy's
# round phases; the rest are the env's own (its family's rules, records, observations, the hand-offs)
PHASES: dict[str, Callable[..., Any]] = {
    "merged engine calls": CohortBatcher._flush, "open_round": Federation.open_round,
    "probe": Federation.probe, "train_round": Federation.train_round, "finish_round": Federation.finish_round}
REST = "the rest"


@dataclass(frozen=True)
class VecResult:
    """Steps/s of each vector-env kind for one id and copy count (NaN where not measured).

    ``workers`` is the batched env's default worker count; ``engine_share`` the median share of a
    one-process batched run's wall time spent in its merged engine calls (local training,
    evaluation, probes): the rest is per-copy Python, so ``steps/s / engine_share`` is what the
    engine alone would allow (NaN where nothing is merged: copies that train nothing).
    ``calls`` is the one-process batched run's Python calls per copy-step (:func:`python_calls`),
    ``busiest`` the functions it called most, with their calls per copy-step (:func:`call_counts`);
    ``phases`` its calls per copy-step by where they are made (:func:`calls_by_phase`);
    ``engine_kinds`` the engine share by request kind (training, evaluation...), most first;
    ``engine_calls`` the merged engine calls per vector step: as many for any number of copies
    up to a turn (``MERGED_COPIES``) where the copies' requests merge, more where some do not.
    """

    env_id: str
    n_envs: int
    steps_per_s: dict[str, float]
    workers: int = 1
    engine_share: float = math.nan
    calls: float = math.nan
    busiest: tuple[tuple[str, float], ...] = ()
    phases: tuple[tuple[str, float], ...] = ()
    engine_kinds: tuple[tuple[str, float], ...] = ()
    engine_calls: float = math.nan

    @property
    def engine_bound(self) -> float:
        """What one process would reach over ``DummyVecEnv`` if its per-copy Python cost nothing.

        The one-process rate over its engine share, by the dummy rate: the bound a faster round
        path approaches, which only a faster engine raises (NaN where nothing is merged).
        """
        return self.steps_per_s["batched-1"] / self.engine_share / self.steps_per_s["dummy"]


def default_ids() -> list[str]:
    """The first id of every family (its default preset)."""
    return [next(iter(family.envs)) for family in FAMILIES.values()]


def _trains(env_id: str) -> bool:
    """Whether the federation of ``env_id`` (default kwargs) trains."""
    env = gym.make(env_id)
    trains = env.unwrapped.federation.config.train
    env.close()
    return trains


def stepper(env_id: str, kind: str, n: int, steps: int, workers: int | None = None, device: str = "cpu",
            env_kwargs: dict | None = None) -> tuple[Callable[[], None], VecEnv]:
    """A timed run of ``steps`` vector steps of a ``make_env`` kind, and the vector env.

    ``kind`` ``batched-1`` is the batched env in one process; ``workers`` (None = the kind's
    default) sets the shards of ``batched`` and ``ray``; ``device`` is every copy's torch device;
    ``env_kwargs`` go to every copy.
    """
    workers = 1 if kind == "batched-1" else workers
    vec = make_env(env_id, n, seed=0, vec_env=kind.removesuffix("-1"),
                   env_kwargs={"num_threads": 1, "device": device, **(env_kwargs or {})}, workers=workers)
    vec.action_space.seed(0)
    actions = np.stack([vec.action_space.sample() for _ in range(n)])
    vec.reset()

    def run() -> None:
        for _ in range(steps):
            vec.step(actions)

    return run, vec


def vec_benchmark(counts: tuple[int, ...] = (1, 4, 16, 64), env_ids: Sequence[str] | None = None,
                  steps: int = 6, timing_steps: int = 200, repeats: int = 5, device: str = "cpu",
                  busiest: int = 0, progress: Callable[[str], None] = print) -> list[VecResult]:
    """Each id (default: every family's default) at every copy count (``timing_steps`` where none trains).

    ``device`` is every copy's torch device (each timed run ends when its kernels have); where
    nothing trains it changes nothing. ``busiest``: how many of the most-called functions each
    result lists (not 0: each result also splits its calls by phase).
    """
    results = []
    with torch_threads(1):
        for env_id in env_ids or default_ids():
            trains = _trains(env_id)
            for n in counts:
                kinds = [k for k in KINDS if (k != "subproc" or n <= SUBPROC_MAX)
                         and (k != "batched-1" or auto_workers(n, trains) > 1)]
                progress(f"{env_id}, {n} copies on {device}: {', '.join(kinds)}...")
                per_run = steps if trains else timing_steps
                runs, vecs = zip(*[stepper(env_id, k, n, per_run, device=device) for k in kinds], strict=True)
                alone = kinds.index("batched-1" if "batched-1" in kinds else "batched")  # the one-process run
                shares: list[dict[str, float]] = []
                timed = [engine_share(run, vecs[alone], shares, device) if i == alone else run
                         for i, run in enumerate(runs)]
                seconds = interleaved_medians(timed, [repeats] * len(runs), torch.device(device))
                # after the timed runs: profiling slows it
                counts_by_function = call_counts(runs[alone], n * per_run)
                engine_calls = engine_calls_per_step(vecs[alone], per_run)
                calls = sum(counts_by_function.values())
                most = sorted(counts_by_function.items(), key=lambda item: -item[1])[:busiest]
                phases = tuple(calls_by_phase(runs[alone], n * per_run).items()) if busiest else ()
                workers = len(getattr(vecs[-1], "shards", [()]))  # the batched env's (the last kind)
                for vec in vecs:
                    vec.close()
                rates = {k: n * per_run / s for k, s in zip(kinds, seconds, strict=True)}
                rates.setdefault("batched-1", rates["batched"])  # auto is one process here
                rates.setdefault("subproc", float("nan"))
                share, kinds = median_shares(shares[1:])  # after the warm-up
                results.append(VecResult(env_id, n, rates, workers, share, calls, tuple(most), phases, kinds,
                                         engine_calls))
    return results


def python_calls(run: Callable[[], None], copy_steps: int) -> float:
    """Python calls that one ``run`` makes (functions and C builtins, as cProfile counts them) per copy-step.

    A measure of the per-copy work that a busy host does not move, unlike wall time: the same
    code, seeds and actions make the same calls.
    """
    return sum(call_counts(run, copy_steps).values())


def engine_calls_per_step(vec: VecEnv, steps: int) -> float:
    """The median merged engine calls of ``steps`` vector steps of random actions (NaN: no batcher).

    The median, so that a step whose copies reset (and evaluate their first models) does not count.
    """
    batcher = getattr(vec, "batcher", None)
    if batcher is None:
        return math.nan
    calls = []
    for _ in range(steps):
        before = batcher.flushes
        vec.step(np.stack([vec.action_space.sample() for _ in range(vec.num_envs)]))
        calls.append(batcher.flushes - before)
    return float(np.median(calls))


def call_counts(run: Callable[[], None], copy_steps: int) -> dict[str, float]:
    """Calls per copy-step of each function that one ``run`` calls, by where it is defined.

    Not ``run`` itself, nor the profiler's own ``disable``, nor the finalisers of earlier garbage
    (the collector runs first, and not during ``run``: where it would strike depends on what ran
    before). Where the calls of :func:`python_calls` go: on two devices, or before and after a
    change, the functions whose counts differ.
    """
    profile = cProfile.Profile()
    with _collector_paused():
        profile.runcall(run)
    own = {("~", 0, "<method 'disable' of '_lsprof.Profiler' objects>")}
    code = getattr(run, "__code__", None)  # a function's own entry (a builtin or partial has none)
    if code is not None:
        own.add((code.co_filename, code.co_firstlineno, code.co_name))
    return {_function_name(*key): calls / copy_steps
            for key, (_, calls, *_rest) in pstats.Stats(profile).stats.items() if key not in own}


def calls_by_phase(run: Callable[[], None], copy_steps: int,
                   phases: dict[str, Callable[..., Any]] = PHASES) -> dict[str, float]:
    """Python calls per copy-step that one ``run`` makes under each of ``phases``, and the rest.

    A call counts for the innermost of the functions ``phases`` names that it runs under (its own
    frame or a caller's), else for :data:`REST`; the call of ``run`` itself does not count. Which
    phases of a copy's round a round path over rows of copies would take over, and how many calls
    each holds. Counted by a profile hook (``sys.setprofile``), not cProfile: the sum can differ by
    a few percent from :func:`call_counts`'.
    """
    codes = {fn.__code__: name for name, fn in phases.items()}
    counts = dict.fromkeys([*phases, REST], 0)
    here = sys._getframe()

    def count(frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "c_call") or frame is here or (event == "call" and frame.f_back is here):
            return  # the call of run, and the profiler's own removal
        while frame is not None and frame.f_code not in codes:
            frame = frame.f_back
        counts[REST if frame is None else codes[frame.f_code]] += 1

    with _collector_paused():
        sys.setprofile(count)
        try:
            run()
        finally:
            sys.setprofile(None)
    return {name: calls / copy_steps for name, calls in counts.items()}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The garbage collector run now and kept off for the block.

    Where it would strike during a profiled run, calling finalisers, depends on what ran before.
    """
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _function_name(filename: str, line: int, name: str) -> str:
    """``path:line(name)``, the path from its package's folder on (a builtin: its name alone)."""
    if filename == "~":
        return name
    for root in ("site-packages/", f"{REPO_ROOT}/"):
        if root in filename:
            filename = filename.split(root, 1)[1]
            break
    return f"{filename}:{line}({name})"


def engine_share(run: Callable[[], None], vec: VecEnv, shares: list[dict[str, float]],
                 device: str = "cpu") -> Callable[[], None]:
    """``run``, appending to ``shares`` each call's shares of wall time in ``vec``'s merged engine calls.

    A dict per call: ``""`` the share of every engine call, and each request kind's (the batcher's
    ``engine_kinds``). ``run`` itself where ``vec`` merges nothing (no batcher: a timing backend,
    or worker processes). On a GPU the batcher waits for each call's kernels, so that the shares
    count them, not only their launches.
    """
    batcher = getattr(vec, "batcher", None)
    if batcher is None:
        return run
    if torch.device(device).type == "cuda":
        batcher.synchronize = torch.cuda.synchronize

    def timed() -> None:
        engine, kinds, start = batcher.engine_seconds, dict(batcher.engine_kinds), time.perf_counter()
        run()
        wall = time.perf_counter() - start
        shares.append({"": (batcher.engine_seconds - engine) / wall,
                       **{kind: (seconds - kinds.get(kind, 0.0)) / wall
                          for kind, seconds in batcher.engine_kinds.items()}})

    return timed


def median_shares(shares: list[dict[str, float]]) -> tuple[float, tuple[tuple[str, float], ...]]:
    """The median engine share of runs (:func:`engine_share`), and each kind's, most first (NaN: no run)."""
    if not shares:
        return math.nan, ()
    names = {kind for s in shares for kind in s if kind}
    kinds = sorted(((kind, statistics.median(s.get(kind, 0.0) for s in shares)) for kind in names),
                   key=lambda item: (-item[1], item[0]))  # ties by name: the same order in every process
    return statistics.median(s[""] for s in shares), tuple(kinds)


class _EnvClock(VecEnvWrapper):
    """Seconds the wrapped vector env spent in ``step_wait`` (what PPO waits for), summed."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.seconds = 0.0

    def reset(self) -> VecEnvObs:
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        start = time.perf_counter()
        out = self.venv.step_wait()
        self.seconds += time.perf_counter() - start
        return out


@dataclass(frozen=True)
class PPOResult:
    """Wall seconds of one PPO run (env construction included) and the seconds it waited on the env."""

    wall: float
    env: float


def ppo_benchmark(env_id: str = PPO_ENV, steps: int = 100_000, n_envs: int = 16,
                  kinds: tuple[str, ...] = ("batched", "subproc", "dummy"),
                  progress: Callable[[str], None] = print) -> dict[str, PPOResult]:
    """SB3 PPO (the env's ``ppo.yml`` block) for ``steps`` steps with each vector env.

    Env construction included; one torch thread per process (as ``vec_benchmark``);
    ``SubprocVecEnv`` only up to 16 copies (one process per copy).
    """
    out = {}
    with torch_threads(1):
        for kind in (k for k in kinds if k != "subproc" or n_envs <= SUBPROC_MAX):
            progress(f"PPO on {env_id}, {n_envs} copies, {steps:,} steps, {kind}...")
            start = time.perf_counter()
            vec = _EnvClock(make_env(env_id, n_envs, seed=0, vec_env=kind, env_kwargs={"num_threads": 1}))
            build_agent(vec, load_hyperparams(env_id), seed=0).learn(steps)
            vec.close()
            out[kind] = PPOResult(time.perf_counter() - start, vec.seconds)
    return out


def ppo_table(env_id: str, steps: int, n_envs: int, results: dict[str, PPOResult]) -> str:
    """Markdown: PPO wall time per vector env, its ratio to the fastest, the share spent stepping the env."""
    best = min(r.wall for r in results.values())
    rows = [f"| PPO on {env_id}, {n_envs} copies, {steps:,} steps | wall time (min) | x fastest | "
            "waiting on env steps |", "|---|---|---|---|"]
    rows += [f"| {kind} | {r.wall / 60:.1f} | {r.wall / best:.2f} | {r.env / r.wall:.0%} |"
             for kind, r in results.items()]
    return "\n".join(rows)


def engine_kinds_table(results: list[VecResult]) -> str:
    """Markdown: each one-process run's engine share by kind, and its engine calls per vector step.

    Where the engine time goes, and whether the copies' requests merge: where every request
    merges, a step makes as many engine calls at any copy count up to a turn.
    """
    rows = ["| env id | copies | engine share, 1 process | engine calls per step | by kind |",
            "|---|---|---|---|---|"]
    for r in results:
        if r.engine_kinds:
            kinds = ", ".join(f"{kind} {share:.0%}" for kind, share in r.engine_kinds)
            rows.append(f"| {r.env_id} | {r.n_envs} | {r.engine_share:.0%} | {r.engine_calls:.1f} | "
                        f"{kinds} |")
    return "\n".join(rows)


def busiest_table(results: list[VecResult]) -> str:
    """Markdown: each result's most-called functions, with their Python calls per copy-step."""
    rows = ["| env id | copies | function | calls per copy-step |", "|---|---|---|---|"]
    for r in results:
        rows += [f"| {r.env_id} | {r.n_envs} | `{name}` | {calls:,.1f} |" for name, calls in r.busiest]
    return "\n".join(rows)


def phases_table(results: list[VecResult]) -> str:
    """Markdown: each result's Python calls per copy-step by where they are made (:func:`calls_by_phase`)."""
    names = [*PHASES, REST]
    rows = ["| env id | copies | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in results:
        if r.phases:
            calls = dict(r.phases)
            cells = [r.env_id, str(r.n_envs), *(f"{calls[name]:,.1f}" for name in names)]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def vec_table(results: list[VecResult]) -> str:
    """Markdown: steps/s per kind, batched (workers) / dummy and / subproc, engine share and bound, calls."""
    rows = ["| env id | copies | dummy (steps/s) | subproc | batched, 1 process | batched (workers) | "
            "batched / dummy | batched / subproc | engine share, 1 process | engine alone / dummy | "
            "Python calls per copy-step |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r.steps_per_s
        rows.append(f"| {r.env_id} | {r.n_envs} | {s['dummy']:,.1f} | {s['subproc']:,.1f} | "
                    f"{s['batched-1']:,.1f} | {s['batched']:,.1f} ({r.workers}) | "
                    f"{s['batched'] / s['dummy']:.2f} | {s['batched'] / s['subproc']:.2f} | "
                    f"{r.engine_share:.0%} | {r.engine_bound:.2f} | {r.calls:,.0f} |")
    return "\n".join(rows).replace("nan%", "-").replace("nan", "-")


@dataclass(frozen=True)
class TurnResult:
    """Steps/s of one process's batched env with its copies merged in turns of each size.

    ``default`` is the turn the batcher picks on the run's device (``MERGED_COPIES``, or
    ``MERGED_COPIES_GPU`` on a GPU without CUDA graphs).
    """

    env_id: str
    n_envs: int
    steps_per_s: dict[int, float]
    default: int


def turn_benchmark(counts: tuple[int, ...], env_ids: Sequence[str], turns: tuple[int, ...], steps: int = 6,
                   repeats: int = 5, device: str = "cpu",
                   progress: Callable[[str], None] = print) -> list[TurnResult]:
    """Each id that trains at each copy count in one process, merged in turns of each size, interleaved.

    Whether merging more copies into one engine call pays on ``device``: on a CPU a merged call
    costs about what its clients do, on a GPU about what its kernel launches do.
    """
    results = []
    with torch_threads(1):
        for env_id in env_ids:
            if not _trains(env_id):
                progress(f"{env_id} trains nothing: its copies merge no engine calls, in turns or not")
                continue
            for n in (n for n in counts if n > min(turns)):  # fewer copies: one turn at every size
                progress(f"{env_id}, {n} copies on {device}: turns of {', '.join(map(str, turns))}...")
                runs, vecs = zip(*[stepper(env_id, "batched-1", n, steps, device=device) for _ in turns],
                                 strict=True)
                default = vecs[0].batcher.turn
                for vec, turn in zip(vecs, turns, strict=True):
                    vec.batcher.turn = turn
                seconds = interleaved_medians(list(runs), [repeats] * len(runs), torch.device(device))
                for vec in vecs:
                    vec.close()
                results.append(TurnResult(env_id, n, {t: n * steps / s for t, s in zip(turns, seconds,
                                                                                      strict=True)}, default))
    return results


def turn_table(results: list[TurnResult]) -> str:
    """Markdown: steps/s at each turn size, and against the first size, the device's default marked."""
    rows = ["| env id | copies | turns of | steps/s | against the first |", "|---|---|---|---|---|"]
    for r in results:
        first = next(iter(r.steps_per_s.values()))
        rows += [f"| {r.env_id} | {r.n_envs} | {turn}{' (default)' if turn == r.default else ''} | "
                 f"{rate:,.1f} | {rate / first:.2f} |" for turn, rate in r.steps_per_s.items()]
    return "\n".join(rows)


MEMORY_KINDS = ("batched", "dummy")


@dataclass(frozen=True)
class MemoryResult:
    """Resident memory (MiB) a vector env adds to a process that imported the package and its data loader.

    ``peak`` is the high-water mark while it was built, reset and stepped; ``resident`` what it
    holds after the steps; ``in_use`` the same after glibc returned its free pages
    (``malloc_trim``; NaN elsewhere); ``models`` what the copies hold of models after the steps
    (:func:`float_tensor_bytes`: global models, the pending round's trained local models or probe
    gradients, per-client statistics; not the free buffers their pool keeps for the next round),
    which the memory target adds to twice one copy's.
    """

    env_id: str
    n_envs: int
    kind: str
    peak: float
    resident: float
    in_use: float
    models: float


def _memory_status() -> dict[str, float]:
    """VmRSS and VmHWM of this process in MiB (Linux)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def float_tensor_bytes(objects: Iterable[object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the floating-point torch storages ``objects`` hold, each once, ``exclude``'s not counted.

    Given every object the garbage collector tracks, this is what a process holds of models,
    gradients and statistics; the data set (shared by the copies) is excluded.
    """
    seen = {t.untyped_storage().data_ptr() for t in exclude}
    total = 0
    for obj in objects:
        # type(), not isinstance: isinstance reads __class__, which some tracked proxies warn on
        if issubclass(type(obj), torch.Tensor) and obj.is_floating_point():
            storage = obj.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def _measure_memory(env_id: str, n: int, kind: str, steps: int, env_kwargs: dict[str, Any]) -> MemoryResult:
    """Build, reset and step one vector env in this (fresh) process and read its memory."""
    import ctypes
    import gc

    import sklearn.datasets  # noqa: F401 - the digits loader's import, part of the package, not of a copy

    torch.set_num_threads(1)
    before = _memory_status()
    vec = make_env(env_id, n, seed=0, vec_env=kind, env_kwargs={"num_threads": 1, **env_kwargs}, workers=1)
    vec.action_space.seed(0)
    actions = np.stack([vec.action_space.sample() for _ in range(n)])
    vec.reset()
    for _ in range(steps):
        vec.step(actions)
    after = _memory_status()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        in_use = _memory_status()["VmRSS"] - before["VmRSS"]
    except (OSError, AttributeError):
        in_use = float("nan")
    feds = vec.get_attr("federation")
    # kept for reuse, not models (one pool if shared)
    spare = {id(t): t for fed in feds for t in fed.buffers.free()}
    models = float_tensor_bytes(gc.get_objects(), (feds[0].x_train, feds[0].x_test, *spare.values())) / 2**20
    vec.close()
    return MemoryResult(env_id, n, kind, after["VmHWM"] - before["VmRSS"], after["VmRSS"] - before["VmRSS"],
                        in_use, models)


def training_ids() -> list[str]:
    """The default ids of the families whose federations train (the memory section's default)."""
    return [env_id for env_id in default_ids() if _trains(env_id)]


def memory_benchmark(env_ids: Sequence[str], counts: tuple[int, ...] = (1, 64), steps: int = 3,
                     env_kwargs: dict[str, Any] | None = None,
                     progress: Callable[[str], None] = print) -> list[MemoryResult]:
    """:class:`MemoryResult` of each id and kind at each copy count, each in a fresh process.

    ``env_kwargs``: constructor arguments of every env (a preset, say). Linux only (it reads
    ``/proc/self/status``).
    """
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the memory benchmark reads /proc/self/status, which {sys.platform} lacks: Linux "
                           "only")
    results = []
    for env_id in env_ids:
        for n in counts:
            for kind in MEMORY_KINDS if n > 1 else ("batched",):
                progress(f"memory of {env_id}, {n} copies, {kind}...")
                with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as fresh:
                    results.append(fresh.submit(_measure_memory, env_id, n, kind, steps,
                                                env_kwargs or {}).result())
    return results


def memory_table(results: list[MemoryResult]) -> str:
    """Markdown: peak, resident and in-use memory per vector env, and each against one copy of its id.

    ``(peak - models) / one copy's`` is the memory target's ratio: at most 2 means the copies
    peak within twice one copy's peak plus the models they hold.
    """
    one = {r.env_id: r for r in results if r.n_envs == 1}
    rows = ["| env id | copies | vector env | peak (MiB) | resident after the steps | in use (free pages "
            "returned) | models held | peak / one copy's | (peak - models) / one copy's | in use / one "
            "copy's |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    rows += [f"| {r.env_id} | {r.n_envs} | {r.kind} | {r.peak:.1f} | {r.resident:.1f} | {r.in_use:.1f} | "
             f"{r.models:.2f} | {r.peak / one[r.env_id].peak:.2f} | "
             f"{(r.peak - r.models) / one[r.env_id].peak:.2f} | {r.in_use / one[r.env_id].in_use:.2f} |"
             for r in results]
    return "\n".join(rows).replace("nan", "-")
