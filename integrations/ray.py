"""Ray: the native vector env's shards as Ray actors, and every fl-gym id for RLlib.

Optional: ``pip install "fl-gym[ray]"`` (``"fl-gym[rllib]"`` for RLlib). Nothing here is
imported by the core package.

:class:`RayVecEnv` is :class:`~fl_gym.envs.sharded.ShardedVecEnv` with Ray actors instead of
worker processes: ``N`` copies in ``workers`` contiguous shards, each shard a
:class:`~fl_gym.envs.vector.BatchedVecEnv` in one actor (one machine's merged batch is the unit
of work), so the shards can sit on other machines of a Ray cluster. Copy ``i`` is seeded as in
every SB3 vector env (``seed + i``), on whichever actor holds it, and plays the episode it plays
in a ``ShardedVecEnv`` with the same shards. Each actor declares ``num_cpus_per_worker`` CPUs
(its torch threads) and ``num_gpus_per_worker`` GPUs to Ray's scheduler.

Ray is started (``ray.init(address=...)``) by the vector env on the driver when no Ray is
running, never inside an env: ``address=None`` starts a local Ray or joins the one
``RAY_ADDRESS`` names, ``"local"`` always starts a local one, ``"auto"`` joins a cluster started
with ``ray start --head``.

:func:`register_rllib` registers every fl-gym id with ``ray.tune.register_env``, so an RLlib
config names the id and passes the env's keyword arguments as ``env_config``: a remote worker
builds the env from those alone.
"""

from __future__ import annotations

import importlib
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from fl_gym.envs.registry import env_ids
from fl_gym.envs.sharded import ShardedVecEnv, ShardServer, WorkerLost, require_workers
from fl_gym.validation import MissingExtraError, UserError, is_int_at_least, is_non_negative, require

INSTALL = 'pip install "fl-gym[ray]"'


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`~fl_gym.validation.MissingExtraError` that says how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise MissingExtraError(f"Ray is not installed; {INSTALL}") from exc


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> Any:
    """The ``ray`` module, started (``ray.init(address, **init_kwargs)``) on the driver unless running."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **init_kwargs)
    return ray


def check_address(address: str | None, name: str = "address", timeout: float = 3.0) -> None:
    """A UserError naming ``name`` unless ``address`` is None, ``local``, ``auto`` or a reachable host:port.

    ``ray.init`` retries an address where nothing listens for minutes; this answers within
    ``timeout`` seconds (a TCP connection to the head's port; ``ray://host:port`` alike).
    """
    if address in (None, "local", "auto"):
        return
    host, sep, port = str(address).split("://", 1)[-1].rpartition(":")
    require(bool(sep and host and port.isdigit()), name, address, "local, auto, or host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"{name}={address!r} cannot be reached ({err.strerror or err}); allowed: local, "
                        "auto, or the host:port of a running Ray head (`ray start --head` prints it)"
                        ) from err


def require_cpus(num_cpus_per_worker: object) -> None:
    """Raise ``ValueError`` unless each actor declares one or more whole CPUs (its torch threads)."""
    require(is_int_at_least(num_cpus_per_worker, 1), "num_cpus_per_worker", num_cpus_per_worker,
            "an integer >= 1")


class RayWorker:
    """The transport to one shard in a Ray actor: calls are queued as futures and read in order."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.pending: deque = deque()

    def send(self, call: tuple[str, tuple, dict[str, Any]]) -> None:
        """Start one call on the actor."""
        self.pending.append(self.actor.handle.remote(*call))

    def receive(self) -> tuple[bool, Any]:
        """The oldest call's reply."""
        ray = import_ray()
        try:
            return ray.get(self.pending.popleft())
        except ray.exceptions.RayActorError as err:
            raise WorkerLost(f"a Ray actor of this vector env has died ({type(err).__name__}), and its "
                             "copies with it; close() the env and build a new one") from err

    def join(self) -> None:
        """Release the actor (after ``close``)."""
        import_ray().kill(self.actor)


class RayVecEnv(ShardedVecEnv):
    """SB3 ``VecEnv``: ``N`` copies in ``workers`` Ray actors, each a batched group (module docstring).

    Args:
        env_fns: one constructor per copy (Ray pickles them to the actors).
        workers: actors, at most one per copy; None = one per ``num_cpus_per_worker`` CPUs Ray
            has, at most one per copy.
        address: where Ray runs if it is not running yet (module docstring).
        num_cpus_per_worker: CPUs each actor declares (and its torch threads).
        num_gpus_per_worker: GPUs each actor declares (0 = CPU only).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], workers: int | None = None,
                 address: str | None = None, num_cpus_per_worker: int = 1,
                 num_gpus_per_worker: float = 0) -> None:
        require_cpus(num_cpus_per_worker)
        require(is_non_negative(num_gpus_per_worker), "num_gpus_per_worker", num_gpus_per_worker,
                "a number >= 0")
        if workers is not None:  # before Ray starts (seconds)
            require_workers(workers, len(env_fns))
        ray = ensure_ray(address)
        self.num_cpus, self.num_gpus = num_cpus_per_worker, num_gpus_per_worker
        if workers is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            workers = max(1, min(len(env_fns), cpus // num_cpus_per_worker))
        super().__init__(env_fns, workers)

    def _start_workers(self, groups: list[list[Callable[[], gym.Env]]],
                       start_method: str | None) -> list[RayWorker]:
        actor = import_ray().remote(ShardServer).options(num_cpus=self.num_cpus, num_gpus=self.num_gpus)
        return [RayWorker(actor.remote(fns, self.num_cpus)) for fns in groups]


def register_rllib(ids: Sequence[str] | None = None) -> list[str]:
    """Register fl-gym ids (default: every one) with ``ray.tune.register_env``; returns the ids.

    Needs ``fl-gym[rllib]``.

    The creator builds ``gym.make(id, **env_config)`` on whichever worker asks, importing fl-gym
    there first, so ``config.environment("FLHetero-v0", env_config={"preset": "scale20"})`` works
    on a remote worker without any set-up of its own.
    """
    # a string was read as its letters ("ids='F'")
    require(ids is None or (isinstance(ids, (list, tuple)) and all(isinstance(i, str) for i in ids)), "ids",
            ids, "None or a list of registered fl-gym ids")
    chosen = list(ids or env_ids())
    known = set(env_ids())
    for env_id in chosen:
        require(env_id in known, "ids", env_id, "registered fl-gym ids")
    try:
        tune = importlib.import_module("ray.tune")
    except ImportError as exc:
        raise MissingExtraError('RLlib is not installed; pip install "fl-gym[rllib]"') from exc
    for env_id in chosen:
        tune.register_env(env_id, _creator(env_id))
    return chosen


def _creator(env_id: str) -> Callable[[Any], gym.Env]:
    def create(env_config: Any) -> gym.Env:
        import fl_gym  # noqa: F401  (registers the ids on a remote worker)

        return gym.make(env_id, **dict(env_config or {}))

    return create
