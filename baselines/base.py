"""The shape every fixed policy shares: SB3's ``predict`` over one observation or a batch."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces

from fl_gym.validation import UserError, as_array, require_seed

E = TypeVar("E")


def env_of(env: Any, kind: type[E] | tuple[type[E], ...], policy: object) -> E:
    """``env`` unwrapped, or a ``ValueError`` unless it is an env of ``kind`` (a class, or a tuple of them).

    A policy reads its own env's rows and attributes: on another family's env (or another view of
    its family) it failed deep inside with an ``AttributeError``, or misread the rows.
    """
    unwrapped = getattr(env, "unwrapped", env)
    if not isinstance(unwrapped, kind):
        spec = getattr(unwrapped, "spec", None)
        given = spec.id if spec is not None else type(unwrapped).__name__
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise UserError(f"{type(policy).__name__}: env={given} is out of range; allowed: an env of class "
                        f"{' or '.join(k.__name__ for k in kinds)}")
    return unwrapped


class RowPolicy:
    """A fixed policy that decides each observation on its own (:meth:`act`).

    ``predict`` has SB3's signature and accepts one observation ``(d,)`` or a batch ``(n, d)``,
    so one evaluation loop runs fixed and learned policies alike. Observations reach
    :meth:`act` as float64. A policy that reads its env's exact statistics (:attr:`reads_env`)
    decides for that one env and refuses a batch of several observations.

    A policy built with its env's observation space (or a layout's) refuses observations of
    another shape, which it would otherwise misread without a word (rows of another client count,
    another env's observation).

    A :attr:`batchable` policy gives every row of a batch the action it gives that row alone and
    consumes nothing doing so (no random stream, no memory), so a vector env may ask one such
    policy, injected into all its copies, once for every copy's observation
    (``envs/hetero/vector.py``); its :meth:`act_rows` may decide the rows as arrays.
    """

    reads_env = False
    batchable = False
    rng: np.random.Generator | None = None
    _own_seed: int | None = None

    def __init__(self, observation_space: spaces.Space | None = None) -> None:
        self.observation_shape = None if observation_space is None else observation_space.shape

    def _seed_rng(self, seed: int | None) -> None:
        """Give a policy that draws its own generator (never the env's), from ``seed`` (None: fresh)."""
        if seed is not None:
            require_seed("seed", seed)
        self._own_seed, self.rng = seed, np.random.default_rng(seed)

    def reseed(self, episode_seed: int) -> None:
        """Draw from ``(own seed, episode_seed)`` from now on (nothing for a policy that draws nothing).

        Evaluation calls it with each episode's seed, so a seeded policy plays a different pattern on
        every evaluation seed, and the same one whenever that seed is played again.
        """
        if self.rng is not None:
            own = [] if self._own_seed is None else [self._own_seed]
            self.rng = np.random.default_rng([*own, episode_seed])

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Action(s) for one observation or a batch."""
        obs = self._checked(observation)
        rows = obs if obs.ndim == 2 else obs[None]
        if self.reads_env and len(rows) > 1:
            raise UserError(f"{type(self).__name__}.predict: observation has {len(rows)} rows; allowed: one "
                             "observation of the env the policy was built with (it reads that env's "
                             "statistics)")
        actions = self.act_rows(rows)
        return (actions if obs.ndim == 2 else actions[0]), state

    def _checked(self, observation: object) -> np.ndarray:
        """``observation`` as float64 ``(d,)`` or ``(n, d)``, ``n >= 1``, or an error naming it.

        An env's observations are finite real numbers: a NaN made some policies' actions NaN
        (outside the action space), a complex number lost its imaginary part, text or an empty
        batch failed inside :meth:`act` with numpy's words.
        """
        one = self.observation_shape  # (d,): every env's observation is a vector
        d = "d" if one is None else one[0]
        allowed = (f"({d},) or (n, {d}) finite real numbers, the observations of the env the policy was "
                   "built with")
        name = f"{type(self).__name__}.predict: observation"
        obs = as_array(name, observation, allowed)
        if not (obs.ndim in (1, 2) and (one is None or obs.shape[-1:] == one) and obs.size):
            raise UserError(f"{name} has shape {obs.shape}; allowed: {allowed}")
        if obs.dtype.kind not in "biuf":
            raise UserError(f"{name} holds {obs.dtype} values; allowed: {allowed}")
        finite = np.isfinite(obs)
        if not finite.all():
            raise UserError(f"{name} holds {obs[~finite].flat[0].item()!r}; allowed: {allowed}")
        return obs.astype(np.float64)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation."""
        raise NotImplementedError

    def act_rows(self, rows: np.ndarray) -> np.ndarray:
        """The actions for ``(n, d)`` observations, one row each (in row order)."""
        return np.stack([np.asarray(self.act(row)) for row in rows])
