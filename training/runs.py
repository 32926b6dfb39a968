"""``fl-gym train``: one folder per run, checkpoints, resume.

A run lives in ``runs/<env-id>/<run-id>/``:

* ``config.yml``: everything resolved (env id, algorithm, hyperparameters, env kwargs, seed, ...),
  so ``--resume RUN_DIR`` needs nothing else;
* ``checkpoints/``: ``model_<steps>_steps.zip`` every ``save_freq`` steps (at rollout starts);
* ``monitor/``: SB3 ``Monitor`` CSVs (one per env copy and session);
* ``tb/``: TensorBoard logs (SB3's and the FL metrics under ``fl/``);
* ``model.zip`` and ``summary.json`` when the run completes.

``--algo hapfl`` trains HAPFL's dual agent as two stages, ``ppo1/`` and ``ppo2/`` (each with its
own checkpoints), and writes ``ppo1.zip``, ``ppo2.zip`` and ``hapfl.json``. An interrupted run
loses at most the steps since its last checkpoint; every result file is written atomically.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import CallbackList

from fl_gym.agents.hapfl import ALLOC_ID, INTENSITY_ID, JOINT_ID, Frozen, save_dual_agent
from fl_gym.agents.ppo import ALGOS, build_agent, check_hyperparams, load_hyperparams, make_env
from fl_gym.training.atomic import read_json, save_atomic, write_json, write_text
from fl_gym.training.callbacks import FLMetricsCallback, ProgressBar, RolloutCheckpoint, latest_checkpoint

HAPFL_IDS = (JOINT_ID, ALLOC_ID, INTENSITY_ID)


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
    vec_env: str = "dummy"
    total_timesteps: int = 10000
    save_freq: int = 10000
    tensorboard_log: str | None = None


def resolve(env_id: str, algo: str = "ppo", preset: str | None = None, overrides: dict[str, Any] | None = None,
            env_kwargs: dict[str, Any] | None = None, seed: int = 0, n_envs: int | None = None,
            vec_env: str = "dummy", total_timesteps: int | None = None, save_freq: int = 10000,
            tensorboard_log: str | None = None) -> RunConfig:
    """Merge the YAML block, ``overrides`` and the arguments into a checked :class:`RunConfig`.

    Raises:
        ValueError: unknown env id or algorithm, a preset the YAML lacks, bad env kwargs.
    """
    if env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if k.startswith("FL")))
        raise ValueError(f"env_id={env_id!r} is not registered; allowed: {known}")
    if algo not in (*ALGOS, "hapfl"):
        raise ValueError(f"--algo={algo!r} is out of range; allowed: {', '.join((*ALGOS, 'hapfl'))}")
    if algo == "hapfl" and env_id != JOINT_ID:
        raise ValueError(f"--algo hapfl trains HAPFL's dual agent for {JOINT_ID}, not {env_id}")
    overrides = dict(overrides or {})
    if algo == "hapfl":
        blocks = {"ppo1": load_hyperparams(ALLOC_ID, preset), "ppo2": load_hyperparams(INTENSITY_ID, preset)}
        for key, value in overrides.items():
            stage, _, name = key.rpartition(".")
            for target in ([stage] if stage else ["ppo1", "ppo2"]):
                if target not in blocks:
                    raise ValueError(f"--hyperparams {key}: expected a prefix ppo1. or ppo2., got {target!r}")
                blocks[target][name] = value
        if total_timesteps:  # split a given total evenly between the stages
            blocks["ppo1"]["n_timesteps"] = total_timesteps // 2
            blocks["ppo2"]["n_timesteps"] = total_timesteps - total_timesteps // 2
        hyperparams: dict[str, Any] = blocks
        steps = sum(int(b.setdefault("n_timesteps", 20000)) for b in blocks.values())
        envs = n_envs or int(blocks["ppo1"].get("n_envs", 1))
    else:
        hyperparams = {**load_hyperparams(env_id, preset), **overrides}
        steps = total_timesteps or int(hyperparams.get("n_timesteps", 20000))
        envs = n_envs or int(hyperparams.get("n_envs", 1))
    for block in (hyperparams.values() if algo == "hapfl" else [hyperparams]):
        check_hyperparams(block, "ppo" if algo == "hapfl" else algo)
    if steps < 1 or envs < 1 or save_freq < 1:
        raise ValueError(f"expected positive --n-timesteps, --n-envs and --save-freq, got {steps}, {envs}, {save_freq}")
    probe = gym.make(env_id, **(env_kwargs or {}))  # bad env kwargs fail here, not at step 37
    if algo == "maskable-ppo" and not hasattr(probe.unwrapped, "action_masks"):
        raise ValueError(f"--algo maskable-ppo needs an env with action_masks(); {env_id} has none "
                         "(FLHeteroAlloc-v0 has)")
    probe.close()
    return RunConfig(env_id, algo, preset, hyperparams, dict(env_kwargs or {}), seed, envs, vec_env, steps,
                     save_freq, tensorboard_log)


def new_run_dir(cfg: RunConfig, runs_dir: str | Path = "runs", run_id: str | None = None) -> Path:
    """Create ``runs/<env-id>/<run-id>/`` and write its ``config.yml``."""
    run_id = run_id or f"{cfg.algo}-seed{cfg.seed}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    folder = Path(runs_dir) / cfg.env_id / run_id
    if (folder / "config.yml").exists():
        raise ValueError(f"run folder {folder} exists; pick another --run-id or continue it with --resume {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / "config.yml", yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    return folder


def load_run(folder: str | Path) -> RunConfig:
    """The :class:`RunConfig` of an existing run folder."""
    path = Path(folder) / "config.yml"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a run folder (no config.yml)")
    return RunConfig(**yaml.safe_load(path.read_text()))


def train(folder: str | Path, progress: bool = True, say=print) -> dict[str, Any]:
    """Train (or continue) the run in ``folder`` to its ``total_timesteps``; returns its summary."""
    folder = Path(folder)
    cfg = load_run(folder)
    if (folder / "summary.json").is_file():
        say(f"{folder}: already complete")
        return read_json(folder / "summary.json")
    start = time.perf_counter()
    if cfg.algo == "hapfl":
        steps = _train_dual(folder, cfg, progress, say)
    else:
        model = _train_stage(folder, cfg, cfg.env_id, cfg.hyperparams, cfg.env_kwargs, cfg.total_timesteps,
                             cfg.seed, progress, say)
        save_atomic(model, folder / "model.zip")
        steps = model.num_timesteps
    summary = {"env_id": cfg.env_id, "algo": cfg.algo, "timesteps": steps, "wall_s_last_session":
               time.perf_counter() - start, **_monitor_summary(folder)}
    write_json(folder / "summary.json", summary)
    return summary


def _train_dual(folder: Path, cfg: RunConfig, progress: bool, say) -> int:
    h1, h2 = cfg.hyperparams["ppo1"], cfg.hyperparams["ppo2"]
    n1, n2 = int(h1["n_timesteps"]), int(h2["n_timesteps"])
    ppo1 = _train_stage(folder / "ppo1", cfg, ALLOC_ID, h1, cfg.env_kwargs, n1, cfg.seed, progress, say)
    kwargs2 = {**cfg.env_kwargs, "allocation_policy": Frozen(ppo1.policy)}
    ppo2 = _train_stage(folder / "ppo2", cfg, INTENSITY_ID, h2, kwargs2, n2, cfg.seed + 1, progress, say)
    save_dual_agent(folder, ppo1, ppo2, {"env_kwargs": cfg.env_kwargs, "seed": cfg.seed, "preset": cfg.preset})
    return ppo1.num_timesteps + ppo2.num_timesteps


def _train_stage(folder: Path, cfg: RunConfig, env_id: str, hyperparams: dict, env_kwargs: dict, total: int,
                 seed: int, progress: bool, say) -> BaseAlgorithm:
    """Train one model in ``folder`` to ``total`` steps, resuming from its latest checkpoint."""
    final = folder / "model.zip" if folder.name in ("ppo1", "ppo2") else None
    algo = "ppo" if cfg.algo == "hapfl" else cfg.algo  # the dual agent's stages are PPO
    cls = ALGOS[algo]
    n_envs = int(hyperparams.get("n_envs", cfg.n_envs)) if cfg.algo == "hapfl" else cfg.n_envs
    if final is not None and final.is_file():
        return cls.load(final, device="cpu")
    checkpoint = latest_checkpoint(folder / "checkpoints")
    done = checkpoint[1] if checkpoint else 0
    session = len(list((folder / "monitor").glob("s*")))
    env = make_env(env_id, n_envs, seed + done, cfg.vec_env, env_kwargs, folder / "monitor" / f"s{session}")
    tb = cfg.tensorboard_log or str(folder / "tb")
    if checkpoint:
        say(f"{env_id}: resuming from {checkpoint[0].name}")
        model = cls.load(checkpoint[0], env=env, device="cpu", tensorboard_log=tb)
        model.set_random_seed(seed + done)
    else:
        model = build_agent(env, hyperparams, algo, seed=seed, tensorboard_log=tb)
    callbacks = [FLMetricsCallback(), RolloutCheckpoint(folder / "checkpoints", cfg.save_freq)]
    if progress:
        callbacks.append(ProgressBar(total, env_id))
    if total > done:
        model.learn(total - done, callback=CallbackList(callbacks), reset_num_timesteps=not checkpoint,
                    tb_log_name=env_id)
    if final is not None:
        save_atomic(model, final)
    env.close()
    return model


def _monitor_summary(folder: Path) -> dict[str, Any]:
    """Episodes and returns from the run's Monitor CSVs (sessions in order)."""
    returns = []
    for path in sorted(folder.rglob("*.monitor.csv")):
        with open(path) as f:
            next(f)  # the JSON header line
            returns += [float(row["r"]) for row in csv.DictReader(f)]
    if not returns:
        return {"episodes": 0}
    return {"episodes": len(returns), "last_episode_return": returns[-1],
            "mean_return_last_10": float(sum(returns[-10:]) / len(returns[-10:]))}
