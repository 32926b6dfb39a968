"""Multi-stage training recipes: stage ``k`` trains with stages ``< k`` frozen inside its env.

A family declares its recipes in the registry (:class:`~fl_gym.envs.registry.Recipe`), e.g. a
dual agent: a first agent on one view of the family's env, then a second on another view with
the frozen first agent injected as an env argument, composed into one policy on the full env.
:func:`run_recipe` is the one loop over stages; :func:`train_recipe` runs it in memory, and
``fl-gym train --algo NAME`` runs it with checkpoints and resume (:mod:`fl_gym.training.runs`).

A finished recipe is a folder: one ``<stage>/model.zip`` per stage, then ``recipe.json`` (written
last: it marks the folder complete).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from fl_gym.agents.ppo import build_agent, is_whole_model, load_hyperparams, make_env, presets
from fl_gym.atomic import read_json, save_atomic, write_json
from fl_gym.envs.registry import Recipe, Stage, family_of, resolve
from fl_gym.validation import UserError

RECIPE_FILE = "recipe.json"
StageTrainer = Callable[[Stage, dict[str, Any], int], BaseAlgorithm]


class Frozen:
    """A trained predictor handed to an env as an argument: shared, never copied.

    Gymnasium deep-copies an env's constructor arguments into its ``EnvSpec``; a trained SB3 policy
    does not support that, and a frozen one does not need it.
    """

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped predictor's ``predict``."""
        return self.predictor.predict(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> Frozen:
        return self


def find_recipe(env_id: str, name: str) -> Recipe:
    """The recipe ``name`` whose composed policy acts on ``env_id``.

    Raises:
        ValueError: no such recipe for ``env_id``.
    """
    recipe = family_of(env_id).recipe(name)
    if recipe is None or recipe.target != env_id:
        names = [r.name for r in family_of(env_id).recipes if r.target == env_id]
        raise UserError(f"recipe {name!r} is out of range for {env_id}; allowed: "
                        f"{', '.join(names) or 'none'}")
    return recipe


def run_recipe(recipe: Recipe, env_kwargs: dict[str, Any], seed: int, train_stage: StageTrainer
               ) -> dict[str, BaseAlgorithm]:
    """Train the stages in order, each with the earlier stages frozen inside its env.

    Stage ``i`` is seeded ``seed + i``; its env gets the frozen policies of the stages its
    :attr:`~fl_gym.envs.registry.Stage.inject` names.
    """
    trained: dict[str, BaseAlgorithm] = {}
    for i, stage in enumerate(recipe.stages):
        frozen = {kwarg: Frozen(trained[name].policy) for kwarg, name in stage.inject.items()}
        trained[stage.name] = train_stage(stage, {**env_kwargs, **frozen}, seed + i)
    return trained


def stage_hyperparams(recipe: Recipe, preset: str | None = None) -> dict[str, dict[str, Any]]:
    """Each stage's YAML block (its env id's, or ``ENV_ID/preset``)."""
    return {s.name: load_hyperparams(s.env_id, preset) for s in recipe.stages}


def train_recipe(recipe: Recipe, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0,
                 preset: str | None = None, steps: dict[str, int] | None = None,
                 hyperparams: dict[str, dict] | None = None, tensorboard_log: str | None = None,
                 progress: Callable[[str], None] | None = None) -> dict[str, BaseAlgorithm]:
    """Train every stage in memory (no checkpoints); returns stage name -> model.

    Args:
        recipe: the recipe (:func:`find_recipe`).
        env_kwargs: keyword arguments of every stage's env (backend, preset, dataset...).
        seed: seeds stage ``i`` and its envs with ``seed + i``.
        preset: hyperparameter preset of every stage's block (e.g. ``"fast"``).
        steps: stage name -> training steps; default: ``n_timesteps`` of each block.
        hyperparams: stage name -> explicit block instead of the YAML's.
        tensorboard_log: SB3 TensorBoard folder.
        progress: called with a line before each stage.
    """
    blocks = hyperparams or stage_hyperparams(recipe, preset)
    say = progress or (lambda _: None)

    def train_stage(stage: Stage, kwargs: dict[str, Any], stage_seed: int) -> BaseAlgorithm:
        block = blocks[stage.name]
        n = (steps or {}).get(stage.name) or int(block.get("n_timesteps", 20000))
        say(f"{stage.name} on {stage.env_id} for {n} steps")
        env = make_env(stage.env_id, int(block.get("n_envs", 1)), stage_seed, env_kwargs=kwargs)
        model = build_agent(env, block, seed=stage_seed, tensorboard_log=tensorboard_log)
        model.learn(n, tb_log_name=stage.name)
        return model

    return run_recipe(recipe, dict(env_kwargs or {}), seed, train_stage)


def compose(recipe: Recipe, env: Any, models: dict[str, Any]) -> Any:
    """The recipe's composed policy on ``env`` (its target)."""
    return resolve(recipe.compose)(env, *(models[s.name] for s in recipe.stages))


def save_recipe(folder: str | Path, recipe: Recipe, models: dict[str, BaseAlgorithm], meta: dict | None = None
                ) -> Path:
    """Write ``<stage>/model.zip`` per stage, then ``recipe.json``."""
    folder = Path(folder)
    for stage in recipe.stages:
        save_atomic(models[stage.name], folder / stage.name / "model.zip")
    write_recipe_marker(folder, recipe, meta)
    return folder


def write_recipe_marker(folder: Path, recipe: Recipe, meta: dict | None = None) -> None:
    """``recipe.json``: which recipe the folder holds (written once every stage is saved)."""
    write_json(folder / RECIPE_FILE, {"recipe": recipe.name, "target": recipe.target, **(meta or {})})


def is_recipe(path: str | Path) -> bool:
    """Whether ``path`` is a finished recipe folder."""
    return (Path(path) / RECIPE_FILE).is_file()


def load_recipe(folder: str | Path) -> tuple[Recipe, dict[str, BaseAlgorithm]]:
    """Read back a recipe folder: the recipe and its stage models."""
    folder = Path(folder)
    if not is_recipe(folder):
        raise FileNotFoundError(f"{folder} holds no finished training recipe ({RECIPE_FILE} and "
                                "<stage>/model.zip)")
    marker = read_json(folder / RECIPE_FILE, ("recipe", "target"))
    recipe = find_recipe(marker["target"], marker["recipe"])
    return recipe, {s.name: _stage_model(folder / s.name / "model.zip") for s in recipe.stages}


def _stage_model(path: Path) -> BaseAlgorithm:
    """A stage's model, or an error naming the file that is missing or damaged (SB3's would not)."""
    if not is_whole_model(path):  # False for a missing file too
        state = "damaged" if path.exists() else "missing"
        raise UserError(f"{path} is {state}; allowed: the stage's model as fl-gym train writes it (train the "
                        "recipe again)")
    return PPO.load(path, device="cpu")


def recipe_presets(recipe: Recipe) -> list[str]:
    """The presets a recipe trains under: ``"paper"``, and each that every stage's env has a block of."""
    return ["paper", *sorted(set.intersection(*(set(presets(s.env_id)) for s in recipe.stages)))]


def yaml_preset(preset: str) -> str | None:
    """The ``ppo.yml`` preset of a recipe preset name: ``"paper"`` is the base blocks (the paper's recipe)."""
    return None if preset == "paper" else preset
