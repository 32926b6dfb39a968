"""A native vector env: ``N`` copies of an fl-gym env whose FL rounds run as one engine call.

:class:`BatchedVecEnv` is an SB3 ``VecEnv``. It steps its copies in turn through one
:class:`~fl_gym.engine.batcher.CohortBatcher`: every copy's local training and evaluation wait
until all copies have reached theirs, then run as one stacked batch (``N x k`` clients in one
cohort, ``N`` global models in one evaluation; past ``MERGED_COPIES`` copies, or
``MERGED_COPIES_GPU`` on a GPU, the copies step in turns of that many, each turn batched). Each
copy keeps its own scenario, partition, models, server state, clock and random streams; the
data set is loaded once (it is cached per process). Copy ``i`` seeded ``s + i`` plays the
episode a stand-alone env seeded ``s + i`` plays, up to float rounding of the larger batched
matrix products. Their actions are checked as rows before any copy plays, and their family
encodes every copy's observation in one call over the copies (``FLEnv.observe_copies``).

Copies that train nothing (a timing backend) have no engine calls to merge; where their family
registers a ``vector_clock`` (see ``docs/extending.md``), it plays every copy's step as
arrays over copies, bit for bit the copies' own steps, and each copy's ``step`` returns its share
through the copy's wrappers (``Monitor`` and the rest see an ordinary step).

:func:`fl_gym.make_vec` builds one (or, with ``workers > 1``, a
:class:`~fl_gym.envs.sharded.ShardedVecEnv` of them, one per core).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from fl_gym.engine.batcher import CohortBatcher
from fl_gym.engine.pool import BufferPool
from fl_gym.envs.base import VectorClock
from fl_gym.envs.registry import FAMILIES, resolve
from fl_gym.validation import UserError, as_array, refuse, require, require_seed

T = TypeVar("T")


def one_row_per_copy(actions: np.ndarray, copies: int) -> np.ndarray:
    """``actions`` as an array of one row per copy, or a clear error.

    SB3's ``DummyVecEnv`` reads the first rows and drops the rest: a batch of the wrong size, a
    bug in the caller's loop, would play silently.
    """
    actions = as_array("actions", actions, f"{copies} rows, one per copy")
    if actions.ndim == 0 or len(actions) != copies:
        raise UserError(f"actions has shape {actions.shape}; allowed: {copies} rows, one per copy")
    return actions


def copy_indices(indices: VecEnvIndices, copies: int) -> list[int]:
    """SB3's ``indices`` (None: every copy, one index, or several) in ``[0, copies)``, or a clear error.

    A negative index counts from the end, as in a list (and in SB3's ``DummyVecEnv``).
    """
    if indices is None:
        return list(range(copies))
    allowed = f"copy indices in [-{copies}, {copies})"
    if isinstance(indices, numbers.Integral):
        wanted = [indices]
    elif isinstance(indices, Iterable):
        wanted = list(indices)
    else:
        refuse("indices", indices, allowed)
    if not all(isinstance(i, numbers.Integral) and -copies <= i < copies for i in wanted):
        raise UserError(f"indices={wanted} is out of range; allowed: {allowed}")
    return [int(i) % copies for i in wanted]


def check_same_spaces(copies: Sequence[tuple[int, gym.Space, gym.Space]]) -> None:
    """Refuse copies whose spaces differ from the first's (``(copy, observations, actions)`` each).

    A vector env has one space of each. A client count that sets the spaces (a weight or a bit per
    client) differs between copies only by the scenario randomisation, whose spaces cover its
    range (``num_clients_range``).
    """
    _, obs, act = copies[0]
    for i, other_obs, other_act in copies:
        if other_obs != obs or other_act != act:
            raise UserError(f"env_fns[{i}] builds observations of shape {other_obs.shape} and actions "
                            f"{other_act}; allowed: copy 0's, of shape {obs.shape} and {act} (a vector env "
                            "has one space of each; vary the clients per episode with randomize_scenario and "
                            "num_clients_range)")


# wrappers whose ``step`` hands the action on unchanged (observation, reward wrappers change what returns)
ACTION_NEUTRAL = (Monitor, OrderEnforcing, PassiveEnvChecker, TimeLimit, RecordEpisodeStatistics,
                  gym.ObservationWrapper, gym.RewardWrapper)


def actions_pass_through(env: gym.Env) -> bool:
    """Whether every wrapper of ``env`` is one of :data:`ACTION_NEUTRAL`.

    Only then may a vector env play the copy's round ahead of its wrappers' ``step`` (with the
    action it was given): an action wrapper would be skipped.
    """
    while isinstance(env, gym.Wrapper):
        if not isinstance(env, ACTION_NEUTRAL):
            return False
        env = env.env
    return True


class StepCalls:
    """SB3's order of calls, checked: ``step_async`` then ``step_wait``; after ``close``, only ``close``.

    Out of order, a sharded env would wait forever for replies it never asked for, or hand one
    call's replies to the next; both vector envs raise gymnasium's error for the call instead.
    """

    num_envs: int
    closed = False
    _stepping = False

    def _start_step(self, actions: np.ndarray) -> np.ndarray:
        """``actions`` checked (one row per copy), and from now on a step in flight."""
        actions = one_row_per_copy(actions, self.num_envs)
        self._check_idle("step_async")
        self._stepping = True
        return actions

    def _check_step_sent(self) -> None:
        """``step_wait`` needs an open env with a step in flight; the caller ends the step when it is over."""
        self._check_open("step_wait")
        if not self._stepping:
            raise gym.error.NoAsyncCallError("step_wait() before step_async(actions); call step(actions), or "
                                             "step_async(actions) first", "step")

    def _check_idle(self, call: str) -> None:
        """``call`` needs an open env with no step in flight."""
        self._check_open(call)
        if self._stepping:
            raise gym.error.AlreadyPendingCallError(f"{call}() while a step is in flight; call step_wait() "
                                                    "for its results first", "step")

    def _check_open(self, call: str) -> None:
        if self.closed:
            raise gym.error.ClosedEnvironmentError(f"{call}() after close(); build a new vector env")


class Unrendered:
    """SB3's ``DummyVecEnv`` answer for envs without a render mode (fl-gym's have none): no image per copy."""

    num_envs: int

    def get_images(self) -> Sequence[np.ndarray | None]:
        """``[None] * num_envs`` (SB3's base ``VecEnv`` raises a bare ``NotImplementedError``)."""
        return [None] * self.num_envs


class CopySeeds:
    """A seed per copy for an SB3 ``VecEnv``'s next reset (its :meth:`seed` takes one int: ``seed + i``).

    The reset's options too: both are checked when given, not at the reset they are for.
    """

    num_envs: int
    _seeds: list[int | None]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's: copy ``i`` seeded ``seed + i`` at the next reset (None: unseeded); checked now, not then."""
        if seed is not None:
            require_seed("seed", seed)
        return super().seed(seed)  # VecEnv's, after this mixin in the method order

    def seed_copies(self, seeds: Sequence[int | None]) -> None:
        """Seed copy ``i`` with ``seeds[i]`` (None: unseeded) at the next reset."""
        require(len(seeds) == self.num_envs, "seeds", list(seeds), f"{self.num_envs} seeds, one per copy")
        for seed in seeds:
            if seed is not None:
                require_seed("seeds", seed)
        self._seeds = list(seeds)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """SB3's: options for every copy's next reset (a dict for all, or a list of one per copy)."""
        one_each = isinstance(options, list) and len(options) == self.num_envs
        # SB3 stores anything; an int failed at the reset as "'int' object is not subscriptable"
        require(options is None or isinstance(options, dict)
                or (one_each and all(o is None or isinstance(o, dict) for o in options)), "options", options,
                f"None, a dict, or a list of {self.num_envs} dicts, one per copy")
        super().set_options(options)  # VecEnv's


class BatchedVecEnv(StepCalls, CopySeeds, Unrendered, VecEnv):
    """SB3 ``VecEnv`` over fl-gym envs whose rounds are batched across copies (module docstring).

    Auto-reset as SB3's ``DummyVecEnv``: a finished copy's last observation is in
    ``info["terminal_observation"]``, ``info["TimeLimit.truncated"]`` says whether the episode was
    cut by the time limit, and the returned observation is the new episode's first.

    Args:
        env_fns: one constructor per copy; every env must be an fl-gym env of one id.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        require(len(env_fns) >= 1, "n_envs", len(env_fns), "an integer >= 1")
        require(all(callable(fn) for fn in env_fns), "env_fns", [type(fn).__name__ for fn in env_fns],
                "functions that build an env, as SB3's env_fns (e.g. lambda: gym.make(ENV_ID))")
        self.envs = [fn() for fn in env_fns]
        require(all(isinstance(env, gym.Env) for env in self.envs), "env_fns",
                [type(env).__name__ for env in self.envs], "functions that return a gymnasium env")
        ids = {e.spec.id if e.spec else type(e.unwrapped).__name__ for e in self.envs}
        require(len(ids) == 1, "env_fns", sorted(ids), "constructors of a single env id")
        require(all(hasattr(env.unwrapped, "federation") for env in self.envs), "env_fns", sorted(ids),
                "constructors of an fl-gym env")
        check_same_spaces([(i, e.observation_space, e.action_space) for i, e in enumerate(self.envs)])
        feds = [env.unwrapped.federation for env in self.envs]
        trains = any(fed.config.train for fed in feds)
        # one copy, or copies that train nothing (a timing backend), have nothing to merge: step in turn
        merging = len(feds) > 1 and trains
        self.batcher = CohortBatcher(len(feds), feds[0].device) if merging else None
        buffers = BufferPool()  # one pool for the copies' lasting state: it keeps what they hold at once
        for fed in feds if merging else ():
            fed.batcher, fed.buffers = self.batcher, buffers
        self._unwrapped = [env.unwrapped for env in self.envs]
        family = FAMILIES.get(getattr(self._unwrapped[0], "family", ""))
        # a copy plays ahead of its wrappers' step only where they hand it the action unchanged
        ahead = all(actions_pass_through(env) for env in self.envs)
        entry = None if family is None or trains or not ahead else family.vector_clock
        self._clock_class = resolve(entry) if entry else None
        self._clock: VectorClock | None = None  # built at reset: the family's clock as arrays over the copies
        self._observes_together = merging and ahead
        super().__init__(len(self.envs), self.envs[0].observation_space, self.envs[0].action_space)
        self._actions: np.ndarray | None = None
        self._cut_short = False  # a step stopped after some copy had played: reset before the next

    def for_each_copy(self, fn: Callable[[int], T]) -> list[T]:
        """``fn(i)`` for every copy, their engine calls merged."""
        if self.batcher is None:
            return [fn(i) for i in range(self.num_envs)]
        return self.batcher.run(fn)

    def reset(self) -> VecEnvObs:
        """Reset every copy (seeds and options from :meth:`seed` / :meth:`set_options`, then cleared)."""
        self._check_idle("reset")
        results = self.for_each_copy(lambda i: self.envs[i].reset(seed=self._seeds[i], **(
            {"options": self._options[i]} if self._options[i] else {})))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [info for _, info in results]
        if self._clock_class is not None:
            self._clock = self._clock_class(self._unwrapped)
        self._cut_short = False
        return np.stack([obs for obs, _ in results])

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions for :meth:`step_wait` (one row per copy)."""
        self._actions = self._start_step(actions)  # refused while a step is in flight: its actions stay

    def step_wait(self) -> VecEnvStepReturn:
        """Step every copy; a finished copy resets in the same call.

        With a vector clock (copies that train nothing), the clock plays every copy's step as
        arrays first. Copies that train play their rounds merged, and their family observes them
        together (``FLEnv.observe_copies``). Either way each copy's ``step`` then returns its share
        through the env's wrappers. A step that raises after a copy has played its round leaves
        the env refusing to step (``ResetNeeded``) until :meth:`reset`: that round's results are lost.
        """
        self._check_step_sent()
        self._stepping = False  # the copies step in this call: cut short, they stay as far as they got
        if self._cut_short:
            raise gym.error.ResetNeeded("step() after a step that stopped partway (an error or Ctrl-C after "
                                        "some copies had played their round, whose results it never "
                                        "returned); call reset()")
        before = self._progress()
        try:
            return self._step_copies()
        except BaseException:
            self._cut_short = self._progress() != before  # not where it raised before any copy played
            raise

    def _progress(self) -> list[tuple[int, int]]:
        """Each copy's rounds played this episode and its federation's rounds: what a step moves."""
        return [(env.rounds_played, env.federation.round) for env in self._unwrapped]

    def _step_copies(self) -> VecEnvStepReturn:
        if self._clock is not None:
            for env, result in zip(self._clock.envs, self._clock.step(np.asarray(self._actions)),
                                   strict=True):
                env.play_ahead(result)
        elif self._observes_together:
            self._play_ahead()
        if self._observes_together and not any(env.ended for env in self._unwrapped):
            results = [self._step_one(i) for i in range(self.num_envs)]  # played: no engine call, no reset
        else:
            results = self.for_each_copy(self._step_one)
        obs, rewards, dones, infos = zip(*results, strict=True)
        # np.array stacks the equal-shape rows as np.stack would, without its Python work per row
        return np.array(obs), np.asarray(rewards, np.float32), np.asarray(dones, bool), list(infos)

    def _play_ahead(self) -> None:
        """Play every copy's round, merged, and observe the copies together; each ``step`` returns its own."""
        actions = self._unwrapped[0].check_actions(self._actions)  # a bad row raises before any copy plays
        played = self.for_each_copy(lambda i: self._unwrapped[i].play(actions[i], checked=True))
        observations = type(self._unwrapped[0]).observations(self._unwrapped)
        for env, obs, result in zip(self._unwrapped, observations, played, strict=True):
            env.play_ahead((obs, *result))

    def _step_one(self, i: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.envs[i].step(self._actions[i])
        done = terminated or truncated
        info["TimeLimit.truncated"] = truncated and not terminated
        if done:
            info["terminal_observation"] = obs
            obs, self.reset_infos[i] = self.envs[i].reset()
        return obs, float(reward), done, info

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs:
            env.close()
        self.closed = True

    def _targets(self, indices: VecEnvIndices, call: str) -> list[gym.Env]:
        self._check_idle(call)
        return [self.envs[i] for i in copy_indices(indices, self.num_envs)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of each (unwrapped-through) copy."""
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices, "get_attr")]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute on each copy's unwrapped env."""
        for env in self._targets(indices, "set_attr"):
            setattr(env.unwrapped, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call a method of each copy (e.g. ``action_masks`` for MaskablePPO)."""
        return [env.get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for env in self._targets(indices, "env_method")]

    def call(self, name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        """Gymnasium's ``call``: each copy's method ``name`` called (an attribute: its value)."""
        out = []
        for env in self._targets(indices, "call"):
            value = env.get_wrapper_attr(name)
            out.append(value(*args, **kwargs) if callable(value) else value)
        return out

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Whether each copy is wrapped in ``wrapper_class``."""
        out = []
        for env in self._targets(indices, "env_is_wrapped"):
            while isinstance(env, gym.Wrapper) and not isinstance(env, wrapper_class):
                env = env.env
            out.append(isinstance(env, wrapper_class))
        return out
