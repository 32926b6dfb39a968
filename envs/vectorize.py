"""Building the native vector env: :func:`make_vec` for SB3, and its face for Gymnasium's ``make_vec``.

``fl_gym.make_vec(env_id, n_envs, seed=...)`` returns an SB3 ``VecEnv``: a
:class:`~fl_gym.envs.vector.BatchedVecEnv` (``workers=1``) or a
:class:`~fl_gym.envs.sharded.ShardedVecEnv` of batched groups, one process per worker.
``gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point")`` builds a
:class:`GymBatchedVectorEnv` over the same, with Gymnasium 1.x's ``SAME_STEP`` autoreset: a
finished copy resets within the step that ended it, its last observation and info in
``infos["final_obs"]`` and ``infos["final_info"]`` (``NEXT_STEP``, Gymnasium's default for its own
vector envs, would spend an extra step, and with it a real FL round, on every reset). Infos batch
as Gymnasium's do, one array per key, except a key whose arrays differ in shape between copies
(the ids a selection kept; copies of different client counts): an object array of each copy's.
``call``, ``get_attr``, ``set_attr`` and ``render`` answer as ``SyncVectorEnv``'s do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv

from fl_gym.envs.registry import env_ids
from fl_gym.envs.sharded import ShardedVecEnv
from fl_gym.envs.vector import BatchedVecEnv
from fl_gym.validation import is_int_at_least, require, require_copies, require_mapping, require_seed

SB3_KEYS = ("terminal_observation", "TimeLimit.truncated")
COPIES_PER_WORKER = 8  # below this a worker's pipe round trip costs more than its core gains (performance.md)


def auto_workers(n_envs: int, trains: bool = True) -> int:
    """Worker processes for ``n_envs`` copies: one per core, each with at least 8 copies, at least one.

    Copies that train nothing (a timing backend) stay in one process: their step is microseconds,
    less than sending a worker's observations and infos back through a pipe.
    """
    return max(1, min(os.cpu_count() or 1, n_envs // COPIES_PER_WORKER)) if trains else 1


def batched_vec_env(env_fns: Sequence[Callable[[], gym.Env]], workers: int | None = 1) -> VecEnv:
    """The copies as one :class:`BatchedVecEnv` (``workers=1``) or a :class:`ShardedVecEnv` (None = auto)."""
    if workers is None:
        workers = auto_workers(len(env_fns))
        if workers > 1:  # one throw-away copy tells whether the copies train
            probe = env_fns[0]()
            workers = auto_workers(len(env_fns), probe.unwrapped.federation.config.train)
            probe.close()
    require(is_int_at_least(workers, 1) and workers <= max(1, len(env_fns)), "workers", workers,
            f"an integer in [1, n_envs={len(env_fns)}]")
    return BatchedVecEnv(env_fns) if workers == 1 else ShardedVecEnv(env_fns, workers)


def make_vec(env_id: str, n_envs: int, seed: int | None = None, monitor: bool = True, workers: int | None = 1,
             env_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> VecEnv:
    """``n_envs`` copies of ``env_id`` whose FL rounds run batched.

    Args:
        env_id: a registered fl-gym id.
        n_envs: copies (>= 1).
        seed: copy ``i`` is seeded ``seed + i`` at the first reset (SB3's convention); None = random.
        monitor: wrap each copy in SB3's ``Monitor`` (episode returns and lengths in ``info``).
        workers: processes; 1 = a :class:`BatchedVecEnv` in this process, more = a
            :class:`ShardedVecEnv` (faster from about 8 copies per core; see docs/performance.md),
            None = :func:`auto_workers`. Worker processes start by ``forkserver``, so a script
            that uses them needs the ``if __name__ == "__main__":`` guard (as SB3's ``SubprocVecEnv``).
        env_kwargs: constructor arguments of every copy.
        kwargs: more constructor arguments (merged over ``env_kwargs``).
    """
    require_copies("n_envs", n_envs)
    require(isinstance(monitor, bool), "monitor", monitor, "True or False")
    require(isinstance(env_id, str) and env_id in env_ids(), "env_id", env_id,
            "a registered fl-gym id (fl-gym envs lists them)")
    if seed is not None:
        require_seed("seed", seed)
    require_mapping("env_kwargs", env_kwargs)
    arguments = {**(env_kwargs or {}), **kwargs}

    def build() -> gym.Env:
        import fl_gym  # noqa: F401  (registers the ids in a worker process)

        env = gym.make(env_id, **arguments)
        return Monitor(env) if monitor else env

    vec = batched_vec_env([build] * n_envs, workers)
    if seed is not None:
        vec.seed(seed)
    return vec


class GymBatchedVectorEnv(VectorEnv):
    """Gymnasium ``VectorEnv`` face of :func:`make_vec` (``SAME_STEP`` autoreset, module docstring).

    Args:
        env_id: a registered fl-gym id.
        num_envs: copies.
        workers: processes (:func:`make_vec`).
        kwargs: constructor arguments of every copy.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, workers: int | None = 1, **kwargs: Any) -> None:
        kwargs.pop("max_episode_steps", None)  # episodes end by the env's own rounds_per_episode
        require_copies("num_envs", num_envs)  # Gymnasium's name for make_vec's n_envs
        self._vec: VecEnv = make_vec(env_id, num_envs, monitor=False, workers=workers, **kwargs)
        self.num_envs = num_envs
        self.single_observation_space = self._vec.observation_space
        self.single_action_space = self._vec.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every copy; an int ``seed`` seeds copy ``i`` with ``seed + i``, a list one seed per copy."""
        self._vec.seed_copies(self._seeds(seed))
        self._vec.set_options(options)
        obs = self._vec.reset()
        return obs, self._batch_infos(self._vec.reset_infos)

    def _seeds(self, seed: int | list[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, list | tuple | np.ndarray):
            return list(seed)  # each checked by seed_copies
        require_seed("seed", seed)
        return [int(seed) + i for i in range(self.num_envs)]

    def step(self, actions: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy; finished copies reset in the same step (SB3's auto-reset, renamed)."""
        obs, rewards, dones, sb3_infos = self._vec.step(actions)
        cut = np.array([info.get("TimeLimit.truncated", False) for info in sb3_infos], bool)
        infos = []
        for i, info in enumerate(sb3_infos):
            info = {k: v for k, v in info.items() if k not in SB3_KEYS}
            if dones[i]:
                info = {**info, "final_obs": sb3_infos[i]["terminal_observation"], "final_info": dict(info),
                        **self._vec.reset_infos[i]}
            infos.append(info)
        return obs, rewards.astype(np.float64), dones & ~cut, dones & cut, self._batch_infos(infos)

    def _batch_infos(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        batched: dict[str, Any] = {}
        for i, info in enumerate(infos):
            batched = self._add_info(batched, info, i)
        return batched

    def _add_info(self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
                  ) -> dict[str, Any]:
        """Gymnasium's batching, and arrays whose shape differs between copies as an object array.

        Gymnasium's assumes one shape per key and fails on the ids a selection kept, or on copies
        of different client counts; such a key comes as each copy's array (``info[key][i]`` is
        copy ``i``'s either way).
        """
        for key, value in env_info.items():
            held = vector_infos.get(key)
            if (isinstance(value, np.ndarray) and isinstance(held, np.ndarray) and held.dtype != object
                    and held.shape[1:] != value.shape):
                rows = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(vector_infos[f"_{key}"]):
                    rows[i] = held[i]
                vector_infos[key] = rows
        return super()._add_info(vector_infos, env_info, env_num)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each copy's method ``name`` called (an attribute: its value), as ``SyncVectorEnv`` does."""
        return tuple(self._vec.call(name, *args, **kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each copy's attribute ``name`` (``SyncVectorEnv``'s: :meth:`call` with no arguments)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name``: ``values[i]`` on copy ``i`` (a list or tuple), else one value on all."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        require(len(values) == self.num_envs, "values", values, f"{self.num_envs} values, one per copy")
        for i, value in enumerate(values):
            self._vec.set_attr(name, value, indices=[i])

    def render(self) -> tuple[None, ...]:
        """Each copy's ``render()``: None, as the envs have no render mode."""
        return self.call("render")

    def close_extras(self, **kwargs: Any) -> None:
        """Close the copies."""
        self._vec.close()
