"""``fl-gym train``: one folder per run, checkpoints, resume.

A run lives in ``runs/<env-id>/<run-id>/``:

* ``config.yml``: everything resolved (env id, algorithm, hyperparameters, env kwargs, seed, ...),
  so ``--resume RUN_DIR`` needs nothing else;
* ``checkpoints/``: ``model_<steps>_steps.zip`` every ``save_freq`` steps (at rollout starts);
* ``monitor/``: SB3 ``Monitor`` CSVs, one folder per session (``s<i>-from<steps>``), with the
  code that session trained with (``code.json``: :func:`trained_by` reads it, and a run trained
  by other code warns when it is resumed or reused);
* ``tb/``: TensorBoard logs (SB3's and the FL metrics under ``fl/``);
* ``model.zip`` and ``summary.json`` when the run completes.

``--algo NAME`` with a multi-stage recipe of the env's family (``fl-gym envs`` lists them)
trains each stage in its own sub-folder, each with its own checkpoints, and writes
``recipe.json`` last (:mod:`fl_gym.agents.recipes`). An interrupted run loses at
most the steps since its last checkpoint; every result file is written atomically.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import math
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import CallbackList

from fl_gym.agents.ppo import (
    ALGOS,
    VEC_ENVS,
    build_agent,
    check_hyperparams,
    is_whole_model,
    load_hyperparams,
    make_env,
)
from fl_gym.agents.recipes import find_recipe, run_recipe, stage_hyperparams, write_recipe_marker
from fl_gym.atomic import read_json, save_atomic, write_json, write_text
from fl_gym.envs.registry import Stage, family_of, recipes_for
from fl_gym.training.callbacks import FLMetricsCallback, ProgressBar, RolloutCheckpoint, latest_checkpoint
from fl_gym.training.imitation import DEFAULTS, demonstrations, fixed_policy, imitate
from fl_gym.training.provenance import code_versions, warn_if_trained_by_other_code
from fl_gym.validation import (
    MAX_COPIES,
    MAX_SEED,
    UserError,
    is_int_at_least,
    one_line,
    require,
    require_choice,
    require_copies,
    require_seed,
    require_timesteps,
    require_types,
)


@dataclasses.dataclass
class RunConfig:
    """A run, fully resolved (what ``config.yml`` holds)."""

    env_id: str
    algo: str = "ppo"
    preset: str | None = None
    hyperparams: dict[str, Any] = dataclasses.field(default_factory=dict)
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    n_envs: int = 1
    vec_env: str = "batched"
    ray_address: str | None = None
    total_timesteps: int = 10000
    save_freq: int = 10000
    tensorboard_log: str | None = None


def resolve(env_id: str, algo: str = "ppo", preset: str | None = None,
            overrides: dict[str, Any] | None = None,
            env_kwargs: dict[str, Any] | None = None, seed: int = 0, n_envs: int | None = None,
            vec_env: str = "batched", total_timesteps: int | None = None, save_freq: int = 10000,
            tensorboard_log: str | None = None, ray_address: str | None = None) -> RunConfig:
    """Merge the YAML block(s), ``overrides`` and the arguments into a checked :class:`RunConfig`.

    Every agent is built once on a probe env here, so a bad hyperparameter value fails before a
    run folder exists.

    Raises:
        ValueError: unknown env id or algorithm, a preset the YAML lacks, a bad hyperparameter,
            bad env kwargs, a count below 1.
    """
    family_of(env_id)  # an fl-gym id, or a ValueError listing them
    recipes = recipes_for(env_id)
    if algo not in (*ALGOS, *recipes):
        raise UserError(f"--algo={algo!r} is out of range for {env_id}; allowed: "
                        f"{', '.join((*ALGOS, *recipes))}")
    for name, value in (("--n-timesteps", total_timesteps), ("--save-freq", save_freq)):
        require(value is None or is_int_at_least(value, 1), name, value, "an integer >= 1")
    require_seed("--seed", seed)
    if vec_env == "ray":
        from fl_gym.integrations.ray import check_address

        check_address(ray_address, "--ray-address")  # before any run folder exists
    else:
        require(ray_address is None, "--ray-address", ray_address,
                f"nothing with --vec-env {vec_env} (it is for ray)")
    overrides = dict(overrides or {})
    if algo in recipes:
        recipe = recipes[algo]
        hyperparams: dict[str, Any] = _recipe_blocks(stage_hyperparams(recipe, preset), overrides,
                                                     total_timesteps)
        steps = sum(int(b["n_timesteps"]) for b in hyperparams.values())
        envs = n_envs if n_envs is not None else int(next(iter(hyperparams.values())).get("n_envs", 1))
        agents = [(s.env_id, hyperparams[s.name], "ppo") for s in recipe.stages]
    else:
        hyperparams = {**load_hyperparams(env_id, preset), **overrides}
        steps = total_timesteps if total_timesteps is not None else int(hyperparams.get("n_timesteps", 20000))
        envs = n_envs if n_envs is not None else int(hyperparams.get("n_envs", 1))
        agents = [(env_id, hyperparams, algo)]
    require_copies("--n-envs", envs)  # given, or the YAML block's
    require_timesteps("--n-timesteps", steps)
    for target, block, name in agents:
        _probe_agent(target, block, name, env_kwargs or {}, envs)
    return RunConfig(env_id, algo, preset, hyperparams, dict(env_kwargs or {}), seed, envs, vec_env,
                     ray_address, steps, save_freq, tensorboard_log)


def _recipe_blocks(blocks: dict[str, dict], overrides: dict[str, Any], total: int | None) -> dict[str, dict]:
    """Apply ``STAGE.key=value`` (one stage) or ``key=value`` (every stage) overrides; split ``total``."""
    for key, value in overrides.items():
        stage, _, name = key.rpartition(".")
        for target in ([stage] if stage else list(blocks)):
            if target not in blocks:
                raise UserError(f"--hyperparams {key}: prefix {target!r} is out of range; allowed: "
                                 f"{', '.join(s + '.' for s in blocks)} or none (every stage)")
            blocks[target][name] = value
    names = list(blocks)
    for i, name in enumerate(names):
        if total is not None:  # split a given total evenly between the stages
            blocks[name]["n_timesteps"] = total // len(names) + (1 if i < total % len(names) else 0)
        blocks[name].setdefault("n_timesteps", 20000)
    return blocks


def _probe_agent(env_id: str, block: dict[str, Any], algo: str, env_kwargs: dict[str, Any],
                 n_envs: int) -> None:
    """Build the agent once on its envs (not trained): bad env kwargs and hyperparameters fail here."""
    check_hyperparams(block, algo)
    if "imitate" in block:
        fixed_policy(block["imitate"], env_id, env_kwargs)
    env = make_env(env_id, n_envs, env_kwargs=env_kwargs)
    try:
        if algo == "maskable-ppo" and not env.has_attr("action_masks"):
            raise UserError(f"--algo maskable-ppo needs an env with action_masks(); {env_id} has none")
        _require_buffer_fits(build_agent(env, block, algo), env_id)
    except UserError:
        raise
    except (AssertionError, TypeError, AttributeError, ValueError,  # SB3's own checks of a value
            MemoryError, RuntimeError) as err:  # and layers or buffers beyond memory (numpy's, torch's)
        raise UserError(f"--hyperparams for {env_id} are not accepted by {algo}: {one_line(err)}") from err
    finally:
        env.close()


def _require_buffer_fits(agent: BaseAlgorithm, env_id: str) -> None:
    """Refuse a rollout buffer larger than this machine's memory.

    Its arrays are allocated, not yet written, when the agent is built: they fill through the first
    rollout, which would run out of memory (or swap) hours into the run rather than here.
    """
    buffer = getattr(agent, "rollout_buffer", None)
    held = _array_bytes(vars(buffer).values()) if buffer is not None else 0
    memory = physical_memory()
    if held > memory:
        n_steps, n_envs = agent.n_steps, agent.n_envs
        most = int(memory // (held / (n_steps * n_envs)))
        raise UserError(f"--hyperparams for {env_id}: n_steps={n_steps} with {n_envs} copies needs a "
                        f"rollout buffer of {held / 2**30:.1f} GiB, more than this machine's "
                        f"{memory / 2**30:.1f} GiB; allowed: n_steps * n_envs at most {most:,}")


def _array_bytes(values: Iterable[Any]) -> int:
    """The bytes of the numpy arrays among ``values`` (and in their dicts: a dict space's observations)."""
    return sum(v.nbytes if isinstance(v, np.ndarray) else _array_bytes(v.values()) if isinstance(v, dict)
               else 0 for v in values)


def physical_memory() -> float:
    """This machine's memory in bytes (infinite where the system does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return math.inf


def new_run_dir(cfg: RunConfig, runs_dir: str | Path = "runs", run_id: str | None = None) -> Path:
    """Create ``runs/<env-id>/<run-id>/`` and write its ``config.yml``.

    Without ``run_id``, ``ALGO-seedSEED-TIMESTAMP``, or that with ``-2``, ``-3``... where runs
    started in the same second took it (a sweep launched at once); a ``run_id`` given is refused
    where it holds a run.
    """
    parent = Path(runs_dir) / cfg.env_id
    if run_id is not None:
        require(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run_id) is not None, "--run-id", run_id,
                "a folder name of letters, digits, '.', '_' and '-' (it stays inside the runs folder)")
        return create_run_dir(cfg, parent / run_id)
    stamp = f"{cfg.algo}-seed{cfg.seed}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    folder, n = parent / stamp, 1
    while not claim_run_dir(cfg, folder):
        n += 1
        folder = parent / f"{stamp}-{n}"
    return folder


def create_run_dir(cfg: RunConfig, folder: Path) -> Path:
    """Create the run folder ``folder`` and write its ``config.yml`` (refused if it holds a run)."""
    if not claim_run_dir(cfg, folder):
        raise UserError(f"run folder {folder} exists; pick another --run-id or continue it with --resume "
                        f"{folder}")
    return folder


def claim_run_dir(cfg: RunConfig, folder: Path) -> bool:
    """Write ``folder/config.yml`` unless it exists (False): of two processes, one claims the folder.

    A caller that trains the folder either way needs no more: :func:`train` locks it, and a second
    process that trains it at the same time is refused there, naming the first.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:  # a file where a folder should be
        raise UserError(f"run folder {folder} cannot be made ({err.strerror}: {err.filename}); allowed: a "
                        "path whose every part is a folder or not there yet") from err
    try:
        write_text(folder / "config.yml", yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False), new=True)
    except FileExistsError:
        return False
    return True


def load_run(folder: str | Path) -> RunConfig:
    """The :class:`RunConfig` of an existing run folder.

    Raises:
        FileNotFoundError: no ``config.yml``.
        ValueError: a ``config.yml`` that does not parse or holds unknown keys.
    """
    path = Path(folder) / "config.yml"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a run folder (no config.yml)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:  # a YAML error has a problem, a decode error a reason
        raise UserError(f"{path} does not parse as YAML: {getattr(err, 'problem', None) or err}") from err
    fields = [f.name for f in dataclasses.fields(RunConfig)]
    if not isinstance(data, dict):
        raise UserError(f"{path} is damaged; expected a mapping with keys {', '.join(fields)}")
    unknown = sorted(set(data) - set(fields))
    require(not unknown, f"{path}: key", unknown[0] if unknown else None, ", ".join(fields))
    require("env_id" in data, f"{path}: env_id", None, "a registered env id")
    require_types(RunConfig, data, str(path))
    cfg = RunConfig(**data)
    try:
        _require_run(cfg)
    except UserError as err:
        raise UserError(f"{path}: {err}") from None
    return cfg


def _require_run(cfg: RunConfig) -> None:
    """What :func:`resolve` made sure of, checked again where a ``config.yml`` was edited by hand."""
    family_of(cfg.env_id)
    recipes = recipes_for(cfg.env_id)
    require_choice("algo", cfg.algo, (*ALGOS, *recipes))
    require_seed("seed", cfg.seed)
    require_copies("n_envs", cfg.n_envs)
    require_choice("vec_env", cfg.vec_env, VEC_ENVS)
    require_timesteps("total_timesteps", cfg.total_timesteps)
    require(is_int_at_least(cfg.save_freq, 1), "save_freq", cfg.save_freq, "an integer >= 1")
    if cfg.algo in ALGOS:
        check_hyperparams(cfg.hyperparams, cfg.algo)
        return
    stages = [s.name for s in recipes[cfg.algo].stages]
    require(sorted(cfg.hyperparams) == sorted(stages), "hyperparams", cfg.hyperparams,
            f"a block for each stage of recipe {cfg.algo!r} ({', '.join(stages)})")
    for name, block in cfg.hyperparams.items():
        require(isinstance(block, dict) and "n_timesteps" in block, f"hyperparams.{name}", block,
                "a block of PPO hyperparameters with n_timesteps")
        check_hyperparams(block, "ppo")


def session_seed(seed: int, done: int) -> int:
    """The reset seed of the first copy of a session that starts after ``done`` steps (copy ``i``: ``+ i``).

    A session from step 0 plays ``seed``, so a run restarted without a checkpoint replays an
    uninterrupted one. A resumed session draws fresh episodes, from a seed derived from both and
    spread over ``[0, MAX_SEED - MAX_COPIES]``: ``seed + done`` landed on the seeds evaluations
    use (``compare``'s 10000 on) whenever a run resumed from its 10,000-step checkpoint.
    """
    if done == 0:
        return seed
    state = np.random.SeedSequence([seed, done]).generate_state(1, np.uint64)[0]
    return int(state % np.uint64(MAX_SEED - MAX_COPIES + 1))


def seeds_trained_on(cfg: RunConfig, folder: str | Path | None = None) -> set[int]:
    """The reset seeds of ``cfg``'s training episodes, so that an evaluation can keep clear of them.

    Stage ``i`` of a recipe is seeded ``seed + i`` (``run_recipe``; one stage otherwise); a session
    that starts after ``done`` steps seeds its copies from :func:`session_seed` on. The sessions are read off
    ``folder``'s monitor logs, with the one that will resume an unfinished stage from its latest
    checkpoint; without a folder, the first session's. An imitation start plays its
    demonstrations from ``seed + n_envs`` on.
    """
    blocks = [("", cfg.hyperparams)] if cfg.algo in ALGOS else list(cfg.hyperparams.items())
    seeds: set[int] = set()
    for i, (name, block) in enumerate(blocks):
        seed = cfg.seed + i
        n = cfg.n_envs if cfg.algo in ALGOS else int(block.get("n_envs", cfg.n_envs))
        starts = {0} if folder is None else _session_starts(Path(folder, name))
        for first in (session_seed(seed, done) for done in starts):
            seeds.update(range(first, first + n))
        if "imitate" in block:
            seeds.update(range(seed + n, seed + n + int({**DEFAULTS, **block}["imitate_episodes"])))
    return seeds


def _session_starts(folder: Path) -> set[int]:
    """The steps after which a stage's sessions started, and the next one's if it is unfinished."""
    starts = {0, *(start for _, start, _ in _sessions(folder))}
    checkpoint = None if (folder / "model.zip").is_file() else latest_checkpoint(folder / "checkpoints")
    return starts | ({checkpoint[1]} if checkpoint else set())


def require_unseen(flag: str, seeds: Sequence[int], agents: Iterable[tuple[RunConfig, str | Path | None]]
                   ) -> None:
    """Refuse evaluation ``seeds`` (the value of ``flag``) that reset an episode the agents trained on.

    ``agents``: each run's config and folder (None: a run not started, :func:`seeds_trained_on`).
    """
    trained = set().union(*(seeds_trained_on(cfg, folder) for cfg, folder in agents))
    require(not trained & set(seeds), flag, ",".join(map(str, seeds)),
            f"seeds the agents never trained on (seeds {_spans(trained)} reset their training episodes)")


def _spans(seeds: set[int]) -> str:
    """``{0, 1, 2, 7}`` -> ``"0-2, 7"``: the seed list syntax of the flags."""
    spans: list[list[int]] = []
    for seed in sorted(seeds):
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def train(folder: str | Path, progress: bool = True, say=print) -> dict[str, Any]:
    """Train (or continue) the run in ``folder`` to its ``total_timesteps``; returns its summary.

    The folder is locked while it trains, so a second process cannot write into it too.
    """
    folder = Path(folder)
    cfg = load_run(folder)
    warn_if_trained_by_other_code(folder, trained_by(folder))
    if (folder / "summary.json").is_file():
        _check_models(folder, cfg)
        say(f"{folder}: already complete")
        return read_json(folder / "summary.json")
    with run_lock(folder):
        return _train(folder, cfg, progress, say)


@contextlib.contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` (this process's id) while the body runs; a live holder's lock is refused.

    A lock whose process is gone (killed, the machine restarted) is taken over.
    """
    lock = folder / ".lock"
    for _ in range(2):
        try:
            write_text(lock, str(os.getpid()), new=True)  # whole when it appears: never read empty, as stale
            break
        except FileExistsError:
            holder = _lock_holder(lock)
            if holder is not None and _alive(holder):
                raise UserError(f"run folder {folder} is being trained by process {holder}; wait for it, or "
                                f"stop it and run --resume {folder} again") from None
            _remove_stale(lock, holder)
    else:
        raise UserError(f"run folder {folder}: cannot take its lock {lock}; if no process trains it, remove "
                        f"{lock} and {lock}.takeover")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _remove_stale(lock: Path, holder: int | None) -> None:
    """Remove ``lock`` if it still names ``holder``, a process that has ended; one process at a time.

    Processes that find one stale lock would otherwise each remove it, the later ones the lock that
    an earlier one had made since.
    """
    guard = lock.with_name(lock.name + ".takeover")
    try:
        write_text(guard, str(os.getpid()), new=True)
    except FileExistsError:
        return  # another process takes it over: its lock, once made, is refused like any live one
    try:
        if _lock_holder(lock) == holder:
            lock.unlink(missing_ok=True)
    finally:
        guard.unlink(missing_ok=True)


def _lock_holder(lock: Path) -> int | None:
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_models(folder: Path, cfg: RunConfig) -> None:
    """A run marked complete must have its model(s) whole: a missing or damaged one is named."""
    names = [folder / "model.zip"] if cfg.algo in ALGOS else [folder / name / "model.zip"
                                                              for name in cfg.hyperparams]
    for path in names:
        if not is_whole_model(path):
            raise UserError(f"run folder {folder} is marked complete (summary.json) but {path} is "
                            f"{'missing' if not path.is_file() else 'damaged'}; remove summary.json and the "
                            f"model to train again from the latest checkpoint")


def _train(folder: Path, cfg: RunConfig, progress: bool, say) -> dict[str, Any]:
    """:func:`train`'s work, under the folder's lock."""
    start = time.perf_counter()
    if cfg.algo in ALGOS:
        model = _train_stage(folder, cfg, Stage("model", cfg.env_id), cfg.hyperparams, cfg.env_kwargs,
                             cfg.total_timesteps, cfg.seed, progress, say)
        steps = model.num_timesteps
    else:
        recipe = find_recipe(cfg.env_id, cfg.algo)

        def stage(s: Stage, kwargs: dict[str, Any], seed: int) -> BaseAlgorithm:
            block = cfg.hyperparams[s.name]
            return _train_stage(folder / s.name, cfg, s, block, kwargs, int(block["n_timesteps"]),
                                seed, progress, say)

        models = run_recipe(recipe, cfg.env_kwargs, cfg.seed, stage)
        write_recipe_marker(folder, recipe,
                            {"env_kwargs": cfg.env_kwargs, "seed": cfg.seed, "preset": cfg.preset})
        steps = sum(m.num_timesteps for m in models.values())
    summary = {"env_id": cfg.env_id, "algo": cfg.algo, "timesteps": steps, "wall_s_last_session":
               time.perf_counter() - start, **_monitor_summary(folder)}
    write_json(folder / "summary.json", summary)
    return summary


def _train_stage(folder: Path, cfg: RunConfig, stage: Stage, hyperparams: dict, env_kwargs: dict, total: int,
                 seed: int, progress: bool, say) -> BaseAlgorithm:
    """Train one model in ``folder`` to ``total`` steps from its latest checkpoint; writes ``model.zip``."""
    final = folder / "model.zip"
    algo = cfg.algo if cfg.algo in ALGOS else "ppo"  # a recipe's stages are PPO
    cls = ALGOS[algo]
    if final.is_file():
        require(is_whole_model(final), "model", str(final),
                "a whole SB3 model file (this one is damaged: "
                "remove it to train on from the latest checkpoint)")
        return cls.load(final, device="cpu")
    n_envs = cfg.n_envs if cfg.algo in ALGOS else int(hyperparams.get("n_envs", cfg.n_envs))
    checkpoint = latest_checkpoint(folder / "checkpoints")
    done = checkpoint[1] if checkpoint else 0
    session = len(list((folder / "monitor").glob("s*")))
    monitor = folder / "monitor" / f"s{session}-from{done}"
    write_json(monitor / "code.json", code_versions())  # what trains this session's steps (trained_by)
    env = make_env(stage.env_id, n_envs, session_seed(seed, done), cfg.vec_env, env_kwargs, monitor,
                   ray_address=cfg.ray_address)
    tb = cfg.tensorboard_log or str(folder / "tb")
    if checkpoint:
        say(f"{stage.env_id}: resuming from {checkpoint[0].name}")
        model = cls.load(checkpoint[0], env=env, device="cpu", tensorboard_log=tb)
        model.set_random_seed(seed + done)
    else:
        model = build_agent(env, hyperparams, algo, seed=seed, tensorboard_log=tb)
        if "imitate" in hyperparams:
            _warm_start(folder, model, stage.env_id, hyperparams, env_kwargs, seed, n_envs, say)
    callbacks = [FLMetricsCallback(stage.env_id), RolloutCheckpoint(folder / "checkpoints", cfg.save_freq)]
    if progress:
        callbacks.append(ProgressBar(total, stage.env_id))
    if total > done:
        model.learn(total - done, callback=CallbackList(callbacks), reset_num_timesteps=not checkpoint,
                    tb_log_name=_log_name(cfg, folder, stage.env_id))
    save_atomic(model, final)
    env.close()
    return model


def _log_name(cfg: RunConfig, folder: Path, env_id: str) -> str:
    """The TensorBoard log's name (SB3 adds ``_1``): the env id, and the run's where runs share a log folder.

    In a shared ``--tensorboard-log`` the env id alone would name runs ``ENV_ID_1``, ``ENV_ID_2``...
    in the order they started (runs started at once could even pick one number and mix their
    curves); with the run folder's name each log says whose it is.
    """
    run = folder if cfg.algo in ALGOS else folder.parent  # a recipe's stages train in subfolders of the run
    return env_id if cfg.tensorboard_log is None else f"{env_id}-{run.name}"


def _warm_start(folder: Path, model: BaseAlgorithm, env_id: str, hyperparams: dict, env_kwargs: dict,
                seed: int, n_envs: int, say) -> None:
    """Imitate the block's fixed policy (:mod:`fl_gym.training.imitation`); keep the start (``imitated.zip``).

    The demonstrations are episodes of the training envs seeded after the training copies' first
    seeds (``seed + n_envs + i``).
    """
    settings = {**DEFAULTS, **hyperparams}
    policy, episodes = settings["imitate"], int(settings["imitate_episodes"])
    epochs, lr = int(settings["imitate_epochs"]), float(settings["imitate_lr"])
    say(f"{env_id}: imitating {policy} ({episodes} episodes, {epochs} epochs)")
    seeds = [seed + n_envs + i for i in range(episodes)]
    demos = demonstrations(env_id, env_kwargs, policy, seeds, model.gamma)
    before, after = imitate(model, demos, epochs, lr)
    say(f"{env_id}: log-likelihood of {policy}'s actions per step {before:.3f} -> {after:.3f}")
    save_atomic(model, folder / "imitated.zip")
    write_json(folder / "imitation.json", {"policy": policy, "episodes": episodes, "epochs": epochs, "lr": lr,
                                           "steps": len(demos.returns), "log_likelihood": [before, after]})


def _monitor_summary(folder: Path) -> dict[str, Any]:
    """Episodes and returns from the run's Monitor CSVs.

    A session resumed from a checkpoint at step ``a`` replays the steps after ``a``, so the
    episodes an interrupted session finished after the next session's start are dropped (with
    ``n`` envs an episode's end is placed at ``start + n * its env-local end step``).
    """
    returns = []
    for path, start, end in _sessions(folder):
        csvs = sorted(path.glob("*.monitor.csv"))
        for csv_path in csvs:
            returns += _episodes(csv_path, start, end, len(csvs))
    if not returns:
        return {"episodes": 0}
    return {"episodes": len(returns), "last_episode_return": returns[-1],
            "mean_return_last_10": float(sum(returns[-10:]) / len(returns[-10:]))}


SESSION = re.compile(r"s(\d+)-from(\d+)")  # a session's monitor folder: its number, the step it started from


def _sessions(folder: Path) -> list[tuple[Path, int, int | None]]:
    """Every training session of a run (each stage's), in order, with its first step and the next one's.

    ``(monitor folder, first step, the next session's first step or None for a stage's last)``.
    """
    out = []
    for monitor in sorted(p for p in folder.rglob("monitor") if p.is_dir()):
        found = sorted((int(m[1]), int(m[2]), p) for p in monitor.iterdir()
                       if (m := SESSION.fullmatch(p.name)))
        starts = [start for _, start, _ in found]
        out += zip([path for *_, path in found], starts, [*starts[1:], None], strict=True)
    return out


def trained_by(folder: str | Path) -> list[dict[str, str] | None]:
    """The code (:func:`~fl_gym.training.provenance.code_versions`) of each session whose steps a run holds.

    A session that left no checkpoint past its first step (the next one restarted where it did)
    counts not. None: a session of a run from before sessions recorded their code.
    """
    codes = []
    for path, start, end in _sessions(Path(folder)):
        if end is None:  # a stage's last session: its model, or the checkpoints it wrote
            stage = path.parents[1]
            with warnings.catch_warnings():  # a damaged checkpoint is said where training passes it over
                warnings.simplefilter("ignore")
                checkpoint = latest_checkpoint(stage / "checkpoints")
            end = math.inf if (stage / "model.zip").is_file() else checkpoint[1] if checkpoint else 0
        if end > start:
            codes.append(read_json(path / "code.json") if (path / "code.json").is_file() else None)
    return codes


def _episodes(path: Path, start: int, end: int | None, n_envs: int) -> list[float]:
    """Returns of one Monitor CSV's episodes that ended before ``end`` (global steps)."""
    out, local = [], 0
    with open(path) as f:
        next(f)  # the JSON header line
        for row in csv.DictReader(f):
            local += int(row["l"])
            if end is None or start + n_envs * local <= end:
                out.append(float(row["r"]))
    return out
