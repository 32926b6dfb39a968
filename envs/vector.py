"""A native vector env: ``N`` copies of an fl-gym env whose FL rounds run as one engine call.

:class:`BatchedVecEnv` is an SB3 ``VecEnv``. It steps its copies in ``N`` threads that share one
:class:`~fl_gym.engine.batcher.CohortBatcher`: every copy's local training and evaluation wait
until all copies have reached theirs, then run as one stacked batch (``N x k`` clients in one
cohort, ``N`` global models in one evaluation). Each copy keeps its own scenario, partition,
models, server state, clock and random streams; the data set is loaded once (it is cached per
process). Copy ``i`` seeded ``s + i`` plays the episode a stand-alone env seeded ``s + i`` plays,
up to float rounding of the larger batched matrix products (and dropout masks, which merged
training draws from one generator).

``fl_gym.make_vec(env_id, n_envs, seed=...)`` builds one. For Gymnasium's own API,
``gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point")`` builds a
:class:`GymBatchedVectorEnv` on the same machinery, with Gymnasium 1.x's ``SAME_STEP`` autoreset:
a finished copy resets within the step that ended it, its last observation and info in
``infos["final_obs"]`` and ``infos["final_info"]`` (``NEXT_STEP``, Gymnasium's default for its
own vector envs, would spend an extra step, and with it a real FL round, on every reset).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from fl_gym.engine.batcher import CohortBatcher
from fl_gym.validation import is_int_at_least, require

T = TypeVar("T")
SWITCH_INTERVAL = 0.1  # seconds; Python's default is 0.005


class BatchedVecEnv(VecEnv):
    """SB3 ``VecEnv`` over fl-gym envs whose rounds are batched across copies (module docstring).

    Auto-reset as SB3's ``DummyVecEnv``: a finished copy's last observation is in
    ``info["terminal_observation"]``, ``info["TimeLimit.truncated"]`` says whether the episode was
    cut by the time limit, and the returned observation is the new episode's first.

    Args:
        env_fns: one constructor per copy; every env must be an fl-gym env of one id.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        require(len(env_fns) >= 1, "n_envs", len(env_fns), "an integer >= 1")
        self.envs = [fn() for fn in env_fns]
        ids = {e.spec.id if e.spec else type(e.unwrapped).__name__ for e in self.envs}
        require(len(ids) == 1, "env_fns", sorted(ids), "constructors of a single env id")
        self.batcher = CohortBatcher()
        feds = [env.unwrapped.federation for env in self.envs]
        # one copy, or copies that train nothing (a timing backend), have nothing to merge: step in turn
        merging = len(feds) > 1 and any(fed.config.train for fed in feds)
        self._pool = ThreadPoolExecutor(max_workers=len(feds), thread_name_prefix="fl-gym-copy") if merging else None
        for fed in feds if merging else ():
            fed.batcher = self.batcher
        first = self.envs[0]
        super().__init__(len(self.envs), first.observation_space, first.action_space)
        self._actions: np.ndarray | None = None

    def _parallel(self, fn: Callable[[int], T]) -> list[T]:
        """``fn(i)`` for every copy, each in its thread, their engine calls merged."""
        if self._pool is None:
            return [fn(i) for i in range(self.num_envs)]
        self.batcher.open(self.num_envs)

        def run(i: int) -> T:
            self.batcher.enter(i)
            try:
                return fn(i)
            finally:
                self.batcher.leave()

        # Each copy's Python runs between two engine calls and then blocks; a long GIL switch
        # interval lets it reach the block instead of being preempted among N runnable threads.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            return list(self._pool.map(run, range(self.num_envs)))
        finally:
            sys.setswitchinterval(interval)

    def reset(self) -> VecEnvObs:
        """Reset every copy (seeds and options from :meth:`seed` / :meth:`set_options`, then cleared)."""
        results = self._parallel(lambda i: self.envs[i].reset(seed=self._seeds[i], **(
            {"options": self._options[i]} if self._options[i] else {})))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [info for _, info in results]
        return np.stack([obs for obs, _ in results])

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions for :meth:`step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every copy; a finished copy resets in the same call."""
        results = self._parallel(self._step_one)
        obs, rewards, dones, infos = zip(*results, strict=True)
        return np.stack(obs), np.asarray(rewards, np.float32), np.asarray(dones, bool), list(infos)

    def _step_one(self, i: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.envs[i].step(self._actions[i])
        done = terminated or truncated
        info["TimeLimit.truncated"] = truncated and not terminated
        if done:
            info["terminal_observation"] = obs
            obs, self.reset_infos[i] = self.envs[i].reset()
        return obs, float(reward), done, info

    def close(self) -> None:
        """Close every copy and the threads."""
        for env in self.envs:
            env.close()
        if self._pool is not None:
            self._pool.shutdown()

    def _targets(self, indices: VecEnvIndices) -> list[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of each (unwrapped-through) copy."""
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute on each copy's unwrapped env."""
        for env in self._targets(indices):
            setattr(env.unwrapped, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call a method of each copy (e.g. ``action_masks`` for MaskablePPO)."""
        return [env.get_wrapper_attr(method_name)(*method_args, **method_kwargs) for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Whether each copy is wrapped in ``wrapper_class``."""
        out = []
        for env in self._targets(indices):
            while isinstance(env, gym.Wrapper) and not isinstance(env, wrapper_class):
                env = env.env
            out.append(isinstance(env, wrapper_class))
        return out


def make_vec(env_id: str, n_envs: int, seed: int | None = None, monitor: bool = True,
             env_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> BatchedVecEnv:
    """``n_envs`` copies of ``env_id`` as a :class:`BatchedVecEnv`.

    Args:
        env_id: a registered fl-gym id.
        n_envs: copies (>= 1).
        seed: copy ``i`` is seeded ``seed + i`` at the first reset (SB3's convention); None = random.
        monitor: wrap each copy in SB3's ``Monitor`` (episode returns and lengths in ``info``).
        env_kwargs: constructor arguments of every copy.
        kwargs: more constructor arguments (merged over ``env_kwargs``).
    """
    require(is_int_at_least(n_envs, 1), "n_envs", n_envs, "an integer >= 1")
    require(isinstance(env_id, str) and env_id in gym.registry, "env_id", env_id, "a registered env id")
    arguments = {**(env_kwargs or {}), **kwargs}

    def build() -> gym.Env:
        env = gym.make(env_id, **arguments)
        return Monitor(env) if monitor else env

    vec = BatchedVecEnv([build] * n_envs)
    if seed is not None:
        vec.seed(seed)
    return vec



class GymBatchedVectorEnv(VectorEnv):
    """Gymnasium ``VectorEnv`` face of :class:`BatchedVecEnv` (``SAME_STEP`` autoreset, module docstring).

    Args:
        env_id: a registered fl-gym id.
        num_envs: copies.
        kwargs: constructor arguments of every copy.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, **kwargs: Any) -> None:
        kwargs.pop("max_episode_steps", None)  # episodes end by the env's own rounds_per_episode
        self._vec = make_vec(env_id, num_envs, monitor=False, **kwargs)
        self.num_envs = num_envs
        self.single_observation_space = self._vec.observation_space
        self.single_action_space = self._vec.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every copy; an int ``seed`` seeds copy ``i`` with ``seed + i``."""
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else (seed or [None] * self.num_envs)
        envs = self._vec.envs
        results = self._vec._parallel(lambda i: envs[i].reset(seed=seeds[i], options=options))
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        return np.stack([obs for obs, _ in results]), infos

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy; finished copies reset in the same step."""
        envs = self._vec.envs

        def one(i: int) -> tuple:
            obs, reward, terminated, truncated, info = envs[i].step(actions[i])
            if terminated or truncated:
                info = {**info, "final_obs": obs, "final_info": dict(info)}
                obs, reset_info = envs[i].reset()
                info.update(reset_info)
            return obs, reward, terminated, truncated, info

        results = self._vec._parallel(one)
        infos: dict[str, Any] = {}
        for i, result in enumerate(results):
            infos = self._add_info(infos, result[4], i)
        obs, rewards, terminated, truncated, _ = zip(*results, strict=True)
        return (np.stack(obs), np.asarray(rewards, np.float64), np.asarray(terminated, bool),
                np.asarray(truncated, bool), infos)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the copies."""
        self._vec.close()

