"""Building SB3 agents from the per-env-id hyperparameter file.

``training/hyperparams/ppo.yml`` holds one block per env id (and ``ENV_ID/PRESET`` variants);
:func:`load_hyperparams` reads a block, :func:`build_agent` turns it into an SB3 (or
sb3-contrib) model, checking every key against the algorithm's constructor so that a typo fails
with the key's name instead of deep inside SB3.
"""

from __future__ import annotations

import copy
import importlib.resources
import inspect
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.save_util import json_to_data
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv
from torch import nn

from fl_gym.agents.features import FEATURE_EXTRACTORS
from fl_gym.agents.recurrent import RecurrentPPO
from fl_gym.agents.sets import SetPolicy, client_rows_of
from fl_gym.envs.vectorize import batched_vec_env
from fl_gym.validation import (
    UserError,
    is_int_at_least,
    is_non_negative,
    is_positive,
    require,
    require_device,
    require_int_in,
    require_mapping,
)

ALGOS: dict[str, type[BaseAlgorithm]] = {"ppo": PPO, "recurrent-ppo": RecurrentPPO,
                                         "maskable-ppo": MaskablePPO}
DEFAULT_POLICY = {"ppo": "MlpPolicy", "recurrent-ppo": "MlpLstmPolicy", "maskable-ppo": "MlpPolicy"}
# the policies by name for fl-gym's flat vector observations (SB3's CnnPolicy wants images)
POLICIES = {"ppo": ("MlpPolicy", "SetPolicy"), "recurrent-ppo": ("MlpPolicy", "MlpLstmPolicy"),
            "maskable-ppo": ("MlpPolicy",)}
# policy_kwargs.activation_fn by name (a YAML file or the CLI cannot hold a torch class)
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU,
                                           "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "silu": nn.SiLU}
IMITATION = ("imitate", "imitate_episodes", "imitate_epochs", "imitate_lr")  # training/imitation.py
# constructor arguments build_agent sets itself: a block's would be Python's "multiple values" TypeError
SET_BY_FL_GYM = {"seed": "--seed", "tensorboard_log": "--tensorboard-log", "verbose": "--no-progress",
                 "device": "none (fl-gym trains agents on the CPU)"}
NOT_KWARGS = ("n_timesteps", "n_envs", *IMITATION)
VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n_timesteps": (lambda v: is_int_at_least(v, 1), "an integer >= 1"),
    "n_envs": (lambda v: is_int_at_least(v, 1), "an integer >= 1"),
    # the rollout buffer holds n_steps x n_envs observations; 10**9 was numpy's MemoryError (1 TiB)
    "n_steps": (lambda v: is_int_at_least(v, 1) and v <= 10**6, "an integer in [1, 1,000,000] (per copy)"),
    "batch_size": (lambda v: is_int_at_least(v, 2), "an integer >= 2"),
    "n_epochs": (lambda v: is_int_at_least(v, 1) and v <= 10**4, "an integer in [1, 10,000]"),
    "learning_rate": (is_positive, "a float > 0"),
    "gamma": (lambda v: is_non_negative(v) and v <= 1, "a float in [0, 1] (0: each step on its own)"),
    "gae_lambda": (lambda v: is_non_negative(v) and v <= 1, "a float in [0, 1]"),
    "clip_range": (is_positive, "a float > 0"),
    "ent_coef": (is_non_negative, "a float >= 0"),
    "vf_coef": (is_non_negative, "a float >= 0"),
    "max_grad_norm": (is_positive, "a float > 0"),
    "policy_kwargs": (lambda v: v is None or isinstance(v, dict), "a mapping such as {net_arch: [64, 64]}"),
    "imitate": (lambda v: isinstance(v, str) and bool(v), "a fixed policy of the env, by name"),
    "imitate_episodes": (lambda v: is_int_at_least(v, 1) and v <= 10**4, "an integer in [1, 10,000]"),
    "imitate_epochs": (lambda v: is_int_at_least(v, 1) and v <= 10**4, "an integer in [1, 10,000]"),
    "imitate_lr": (is_positive, "a float > 0"),
}


VEC_ENVS = ("dummy", "subproc", "batched", "ray")


def is_whole_model(path: str | Path) -> bool:
    """Whether ``path`` is an SB3 model file that reads back whole (its ``data`` and checksums).

    ``zipfile.is_zipfile`` is not enough: a model cut short still holds the end record of the torch
    file inside it (``policy.pth``, a zip archive itself), and so passes as a zip archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            return "data" in archive.namelist() and archive.testzip() is None
    except (OSError, zipfile.BadZipFile, EOFError):  # a missing file too
        return False


# each algorithm's policy class, the most derived first (a recurrent policy is an actor-critic one too)
POLICY_BASES = {"recurrent-ppo": RecurrentActorCriticPolicy, "maskable-ppo": MaskableActorCriticPolicy,
                "ppo": ActorCriticPolicy}


def model_algo(path: str | Path) -> str | None:
    """The algorithm of :data:`ALGOS` that wrote the whole model file ``path``, by its policy's class.

    None for another algorithm's. Loading a file with another algorithm's class fails inside SB3
    (a PPO model as RecurrentPPO: an ``AttributeError``) or plays it under the wrong name.
    """
    with zipfile.ZipFile(path) as archive:  # the class record alone, not the weights that load() reads
        policy = json_to_data(archive.read("data").decode()).get("policy_class")
    return next((algo for algo, base in POLICY_BASES.items()
                 if isinstance(policy, type) and issubclass(policy, base)), None)


def make_env(env_id: str, n_envs: int = 1, seed: int | None = None, vec_env: str = "dummy",
             env_kwargs: dict[str, Any] | None = None, monitor_dir: str | Path | None = None,
             workers: int | None = None, ray_address: str | None = None) -> VecEnv:
    """``n_envs`` copies of ``env_id``, each in a ``Monitor``, in a vector env of kind ``vec_env``.

    ``vec_env``: ``dummy`` (SB3's, one after the other), ``subproc`` (SB3's, one process each),
    ``batched`` (:func:`~fl_gym.envs.vectorize.batched_vec_env`: the copies' rounds as one engine
    call, in ``workers`` processes, None = one per core with at least 8 copies each) or ``ray``
    (the same shards as Ray actors, :class:`~fl_gym.integrations.ray.RayVecEnv`, Ray started at
    ``ray_address`` if it is not running; needs ``fl-gym[ray]``).
    Copy ``i`` is seeded ``seed + i`` on its first reset; with ``monitor_dir`` each writes
    ``<monitor_dir>/<i>.monitor.csv``.
    """
    if vec_env not in VEC_ENVS:
        raise UserError(f"vec_env={vec_env!r} is out of range; allowed: {', '.join(map(repr, VEC_ENVS))}")
    kwargs = dict(env_kwargs or {})
    if monitor_dir is not None:
        Path(monitor_dir).mkdir(parents=True, exist_ok=True)

    def factory(rank: int) -> Callable[[], gym.Env]:
        def build() -> gym.Env:
            import fl_gym  # noqa: F401  (registers the ids in a SubprocVecEnv worker)

            path = None if monitor_dir is None else str(Path(monitor_dir) / str(rank))
            return Monitor(gym.make(env_id, **kwargs), filename=path)
        return build

    fns = [factory(i) for i in range(n_envs)]
    if vec_env == "batched":
        venv = batched_vec_env(fns, workers)
    elif vec_env == "ray":
        from fl_gym.integrations.ray import RayVecEnv  # optional: fl-gym[ray]

        venv = RayVecEnv(fns, workers, address=ray_address)
    else:
        venv = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}[vec_env](fns)
    if seed is not None:
        venv.seed(seed)
    return venv


def hyperparams_file() -> Path:
    """The packaged ``ppo.yml``."""
    return Path(str(importlib.resources.files("fl_gym.training") / "hyperparams" / "ppo.yml"))


def _blocks(path: str | Path | None = None) -> dict[str, Any]:
    with open(path or hyperparams_file()) as f:
        return yaml.safe_load(f) or {}


def presets(env_id: str, path: str | Path | None = None) -> list[str]:
    """The ``PRESET`` of each ``ENV_ID/PRESET`` block of ``env_id``, sorted."""
    return _presets_in(_blocks(path), env_id)


def _presets_in(table: dict[str, Any], env_id: str) -> list[str]:
    return sorted(k.split("/", 1)[1] for k in table if k.startswith(env_id + "/"))


def load_hyperparams(env_id: str, preset: str | None = None,
                     path: str | Path | None = None) -> dict[str, Any]:
    """The hyperparameter block of ``env_id`` (or ``env_id/preset``); empty if the file has none.

    Raises:
        ValueError: ``preset`` names a block the file does not have.
    """
    table = _blocks(path)
    key = env_id if preset is None else f"{env_id}/{preset}"
    if key not in table:
        if preset is not None:
            raise UserError(f"preset={preset!r} is out of range; allowed for {env_id}: "
                            f"{_presets_in(table, env_id) or 'none'}")
        return {}
    return copy.deepcopy(table[key])


def build_agent(env: gym.Env, hyperparams: dict[str, Any], algo: str = "ppo", seed: int | None = None,
                tensorboard_log: str | None = None, verbose: int = 0, device: str = "cpu") -> BaseAlgorithm:
    """An untrained agent of ``algo`` on ``env`` with ``hyperparams`` (a :func:`load_hyperparams` block).

    Raises:
        ValueError: unknown ``algo``, unknown features extractor, or a key the algorithm does not take;
            a seed, device or verbosity SB3 would take in its own words (or, for a device this
            machine lacks, not at all: it falls back to the CPU).
    """
    require_mapping("hyperparams", hyperparams, optional=False, of="hyperparameter names to values")
    require(seed is None or (is_int_at_least(seed, 0) and seed < 2**32), "seed", seed,
            "None or an integer in [0, 2**32 - 1] (NumPy's legacy seeding, SB3's)")
    if device != "auto":  # SB3's: the GPU if there is one
        require_device("device", device)
    require_int_in("verbose", verbose, 0, 2)
    check_hyperparams(hyperparams, algo)
    cls = ALGOS[algo]
    kwargs = {k: v for k, v in hyperparams.items() if k not in NOT_KWARGS}
    policy = kwargs.pop("policy", DEFAULT_POLICY[algo])
    if algo == "recurrent-ppo" and policy == "MlpPolicy":
        policy = "MlpLstmPolicy"
    kwargs["policy_kwargs"] = _policy_kwargs(dict(kwargs.get("policy_kwargs") or {}))
    if policy == "SetPolicy":
        policy = SetPolicy
        kwargs["policy_kwargs"].setdefault("client_rows", client_rows_of(env))
    model = cls(policy, env, seed=seed, tensorboard_log=tensorboard_log, verbose=verbose,
                device=device, **kwargs)
    if tensorboard_log is None and verbose == 0:  # SB3 would make an empty folder in the temp dir per learn()
        model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def check_hyperparams(hyperparams: dict[str, Any], algo: str = "ppo") -> None:
    """Raise ``ValueError`` for an unknown algorithm, a key its constructor does not take, a bad value."""
    if algo not in ALGOS:
        raise UserError(f"algo={algo!r} is out of range; allowed: one of {', '.join(ALGOS)}")
    cls = ALGOS[algo]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "env"}
    unknown = sorted(set(hyperparams) - accepted - set(NOT_KWARGS))
    if unknown:
        raise UserError(f"hyperparameter {unknown[0]!r} is not accepted by {cls.__name__}; "
                         f"allowed: {', '.join(sorted(accepted))}")
    taken = [key for key in SET_BY_FL_GYM if key in hyperparams]
    if taken:
        raise UserError(f"hyperparameter {taken[0]!r} is set by fl-gym, not by a block; allowed: "
                        f"{SET_BY_FL_GYM[taken[0]]}")
    for key, (ok, allowed) in VALUE_RULES.items():
        if key in hyperparams and (isinstance(hyperparams[key], bool) or not ok(hyperparams[key])):
            raise UserError(f"hyperparameter {key}={hyperparams[key]!r} is out of range; allowed: {allowed}")
    policy = hyperparams.get("policy")
    if policy is not None and not isinstance(policy, type) and policy not in POLICIES[algo]:
        raise UserError(f"hyperparameter policy={policy!r} is out of range for algo={algo!r}; allowed: "
                        f"{', '.join(POLICIES[algo])} (or a policy class, from Python)")
    imitation = [key for key in IMITATION if key in hyperparams]
    if imitation and algo != "ppo":
        raise UserError(f"hyperparameter {imitation[0]!r} is out of range for algo={algo!r}; allowed: algo "
                        "'ppo'")
    if imitation and "imitate" not in hyperparams:
        raise UserError(f"hyperparameter {imitation[0]!r} does nothing without 'imitate'; allowed: with "
                         "imitate=POLICY (a fixed policy of the env by name)")
    _check_policy_kwargs(hyperparams.get("policy_kwargs") or {})


def _check_policy_kwargs(kwargs: dict[str, Any]) -> None:
    """The values of ``policy_kwargs`` that fl-gym names, and a well-formed ``net_arch``."""
    extractor = kwargs.get("features_extractor")
    if extractor is not None and extractor not in FEATURE_EXTRACTORS:
        raise UserError(f"features_extractor={extractor!r} is out of range; allowed: "
                        f"{', '.join(FEATURE_EXTRACTORS)}")
    activation = kwargs.get("activation_fn")
    if activation is not None and not isinstance(activation, type) and activation not in ACTIVATIONS:
        raise UserError(f"activation_fn={activation!r} is out of range; allowed: {', '.join(ACTIVATIONS)} "
                        "(or a torch.nn class, from Python)")
    arch = kwargs.get("net_arch")
    if arch is not None and not (_widths(arch) or (isinstance(arch, dict) and set(arch) <= {"pi", "vf"}
                                                   and all(_widths(v) for v in arch.values()))):
        raise UserError(f"net_arch={arch!r} is out of range; allowed: layer widths such as [64, 64], or "
                        "{pi: [64, 64], vf: [64, 64]} (actor and critic apart)")


def _widths(value: Any) -> bool:
    """Whether ``value`` is a list of layer widths (integers >= 1)."""
    return isinstance(value, list) and all(is_int_at_least(n, 1) for n in value)


def _policy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    name = kwargs.pop("features_extractor", None)
    if name is not None:
        kwargs["features_extractor_class"] = FEATURE_EXTRACTORS[name]
    if isinstance(kwargs.get("activation_fn"), str):
        kwargs["activation_fn"] = ACTIVATIONS[kwargs["activation_fn"]]
    return kwargs
