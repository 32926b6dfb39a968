"""HAPFL's dual agent: PPO1 allocates model sizes, PPO2 splits the epochs (spec section 9.1).

The recipe trains them in sequence on the timing backend (both rewards are timing-only):

1. PPO1 on ``FLHeteroAlloc-v0`` (the split meanwhile uniform);
2. PPO1 frozen, PPO2 on ``FLHeteroIntensity-v0(allocation_policy=ppo1)``;
3. :class:`~fl_gym.baselines.hetero.HAPFLPolicy` composes the two on ``FLHetero-v0``, where it is
   compared with the fixed policies (and can drive the torch backend for accuracy).

Because ``R^1`` is per-epoch it does not depend on PPO2's split, so training PPO1 first loses
nothing; PPO2's state depends on PPO1's sizes, so it must come second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from fl_gym.agents.ppo import build_agent, load_hyperparams, make_env
from fl_gym.baselines.hetero import HAPFLPolicy
from fl_gym.training.atomic import save_atomic, write_json

ALLOC_ID, INTENSITY_ID, JOINT_ID = "FLHeteroAlloc-v0", "FLHeteroIntensity-v0", "FLHetero-v0"


class Frozen:
    """A trained predictor handed to an env as an argument: shared, never copied.

    Gymnasium deep-copies an env's constructor arguments into its spec; a trained SB3 policy
    does not support that, and a frozen one does not need it.
    """

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped predictor's ``predict``."""
        return self.predictor.predict(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> Frozen:
        return self


def train_dual_agent(env_kwargs: dict[str, Any] | None = None, *, seed: int = 0, steps: tuple[int, int] | None = None,
                     preset: str | None = None, hyperparams: tuple[dict, dict] | None = None,
                     tensorboard_log: str | None = None, progress: Callable[[str], None] | None = None,
                     callbacks: tuple[Any, Any] = (None, None), progress_bar: bool = False
                     ) -> tuple[BaseAlgorithm, BaseAlgorithm]:
    """Train PPO1 then PPO2 as above; returns ``(ppo1, ppo2)``.

    Args:
        env_kwargs: keyword arguments of the HAPFL envs (backend, preset, dataset...).
        seed: seeds both agents and their envs.
        steps: ``(steps1, steps2)``; default: ``n_timesteps`` of each YAML block.
        preset: hyperparameter preset of both blocks (e.g. ``"stable"``).
        hyperparams: explicit blocks instead of the YAML's.
        tensorboard_log: SB3 TensorBoard folder.
        progress: called with a line before each stage.
        callbacks: SB3 callbacks for the two ``learn`` calls.
        progress_bar: show SB3's progress bar.
    """
    env_kwargs = dict(env_kwargs or {})
    h1, h2 = hyperparams or (load_hyperparams(ALLOC_ID, preset), load_hyperparams(INTENSITY_ID, preset))
    n1, n2 = steps or (int(h1.get("n_timesteps", 20000)), int(h2.get("n_timesteps", 20000)))
    say = progress or (lambda _: None)
    say(f"PPO1 on {ALLOC_ID} for {n1} steps")
    env1 = make_env(ALLOC_ID, int(h1.get("n_envs", 1)), seed, env_kwargs=env_kwargs)
    ppo1 = build_agent(env1, h1, seed=seed, tensorboard_log=tensorboard_log)
    ppo1.learn(n1, callback=callbacks[0], tb_log_name="ppo1", progress_bar=progress_bar)
    say(f"PPO2 on {INTENSITY_ID} (sizes from the frozen PPO1) for {n2} steps")
    env2 = make_env(INTENSITY_ID, int(h2.get("n_envs", 1)), seed + 1,
                    env_kwargs={**env_kwargs, "allocation_policy": Frozen(ppo1.policy)})
    ppo2 = build_agent(env2, h2, seed=seed + 1, tensorboard_log=tensorboard_log)
    ppo2.learn(n2, callback=callbacks[1], tb_log_name="ppo2", progress_bar=progress_bar)
    return ppo1, ppo2


def yaml_preset(preset: str) -> str | None:
    """The ``ppo.yml`` preset of a recipe name: ``"paper"`` is the base blocks (the spec's recipe)."""
    return None if preset == "paper" else preset


def save_dual_agent(folder: str | Path, ppo1: BaseAlgorithm, ppo2: BaseAlgorithm, meta: dict | None = None) -> Path:
    """Write ``ppo1.zip``, ``ppo2.zip`` and ``hapfl.json`` into ``folder``."""
    folder = Path(folder)
    save_atomic(ppo1, folder / "ppo1.zip")
    save_atomic(ppo2, folder / "ppo2.zip")
    write_json(folder / "hapfl.json", {"kind": "hapfl-dual-agent", **(meta or {})})  # last: marks it complete
    return folder


def is_dual_agent(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by :func:`save_dual_agent`."""
    return (Path(path) / "hapfl.json").is_file()


def load_dual_agent(folder: str | Path) -> tuple[BaseAlgorithm, BaseAlgorithm]:
    """Read back ``(ppo1, ppo2)`` from :func:`save_dual_agent`'s folder."""
    folder = Path(folder)
    if not is_dual_agent(folder):
        raise FileNotFoundError(f"{folder} holds no HAPFL dual agent (hapfl.json, ppo1.zip, ppo2.zip)")
    return PPO.load(folder / "ppo1.zip", device="cpu"), PPO.load(folder / "ppo2.zip", device="cpu")


def hapfl_policy(env: gym.Env, ppo1: Any, ppo2: Any) -> HAPFLPolicy:
    """The composed policy on ``FLHetero-v0`` (``env``)."""
    return HAPFLPolicy(env, ppo1, ppo2)
