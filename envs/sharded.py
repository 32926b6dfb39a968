"""The native vector env over several cores: copies split into shards, each a batched group in a process.

:class:`~fl_gym.envs.vector.BatchedVecEnv` merges its copies' engine calls, but their Python
runs on one core, one copy after the other. :class:`ShardedVecEnv` splits ``N`` copies into
``workers`` contiguous shards, each a ``BatchedVecEnv`` in a worker process of its own (one per
core is the point), and steps the shards side by side. Unlike SB3's ``SubprocVecEnv`` (a
process per copy), the data set is loaded once per worker, not once per copy, and each worker
still merges its shard's rounds into one engine call. Copy ``i`` plays the episode it plays in
an unsharded ``BatchedVecEnv`` (shards differ only in which copies share a merged batch, which
moves float rounding in the last bit). A copy that a worker cannot build (a bad argument) raises
its own error from the constructor, every worker closed. A worker that ends under it (killed, out
of memory) raises :class:`WorkerLost` at the next call, and ``close()`` still closes the others.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import (
    CloudpickleWrapper,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from fl_gym.envs.vector import (
    BatchedVecEnv,
    CopySeeds,
    StepCalls,
    Unrendered,
    check_same_spaces,
    copy_indices,
)
from fl_gym.validation import is_int_at_least, require


class ShardServer:
    """A shard's :class:`BatchedVecEnv`, answering ``(method, args, kwargs)`` calls with ``(ok, value)``.

    It runs in a worker process here, or in another transport's worker (a Ray actor,
    :mod:`fl_gym.integrations.ray`); a call that raises answers ``(False, exception)``. Copies that
    cannot be built (a bad argument) make every call but ``close`` answer with that error, so the
    caller raises it, rather than a worker that dies printing it.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], threads: int) -> None:
        torch.set_num_threads(threads)
        self.error: Exception | None = None
        try:
            self.vec = BatchedVecEnv(env_fns)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller
            self.error = exc

    def handle(self, method: str, args: tuple, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """The reply to one call."""
        if self.error is not None:
            return (True, None) if method == "close" else (False, self.error)
        try:
            return True, self._call(method, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller
            return False, exc

    def _call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        vec = self.vec
        if method == "spaces":
            return vec.observation_space, vec.action_space
        if method == "reset":
            seeds, options = args  # the caller's seeds and options of this shard's copies
            vec.seed_copies(seeds)
            vec.set_options(options)
            return vec.reset(), vec.reset_infos
        if method == "step":
            return (*vec.step(*args), vec.reset_infos)
        return getattr(vec, method)(*args, **kwargs)


def _serve(remote: Connection, parent: Connection, env_fns: CloudpickleWrapper, threads: int) -> None:
    """A worker process: a :class:`ShardServer` answering calls from the pipe until ``close``.

    Ctrl-C reaches every process of the terminal's group; the parent owns it (it closes its
    workers, reading a step in flight first), so a worker ignores it rather than die printing a
    traceback mid-call.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent.close()
    server = ShardServer(env_fns.var, threads)
    while True:
        try:
            method, args, kwargs = remote.recv()
        except EOFError:
            break
        remote.send(server.handle(method, args, kwargs))
        if method == "close":
            break


class WorkerLost(RuntimeError):
    """A shard's worker has ended (killed, out of memory), and its copies' state with it."""


class ProcessWorker:
    """The transport to one shard in a worker process: send a call, receive its reply, join."""

    def __init__(self, ctx: Any, env_fns: list[Callable[[], gym.Env]], threads: int) -> None:
        self.remote, work = ctx.Pipe()
        self.process = ctx.Process(target=_serve,
                                   args=(work, self.remote, CloudpickleWrapper(env_fns), threads),
                                   daemon=True)
        self.process.start()
        work.close()
        self.answered = False  # a reply has come: the worker got past importing the caller's script

    def send(self, call: tuple[str, tuple, dict[str, Any]]) -> None:
        """Start one call."""
        try:
            self.remote.send(call)
        except (BrokenPipeError, ConnectionResetError) as err:
            raise self._lost() from err

    def receive(self) -> tuple[bool, Any]:
        """The oldest call's reply."""
        try:
            reply = self.remote.recv()
        except (EOFError, ConnectionResetError) as err:
            raise self._lost() from err
        self.answered = True
        return reply

    def _lost(self) -> WorkerLost:
        process = self.process
        process.join(timeout=1)
        ended = f"worker process {process.pid} of this vector env has ended (exit code {process.exitcode})"
        if not self.answered:  # forkserver runs the caller's script in the worker first (as SubprocVecEnv)
            return WorkerLost(f"{ended} before it answered: a script that starts workers needs its code "
                              "under `if __name__ == \"__main__\":`; else its traceback above says why")
        return WorkerLost(f"{ended}, and its copies with it (close() the env; a new one starts afresh)")

    def join(self) -> None:
        """Wait for the worker to end (after ``close``)."""
        self.process.join()


def require_workers(workers: object, n: int) -> None:
    """Raise ``ValueError`` unless ``workers`` shards can split ``n`` copies (one or more each)."""
    require(is_int_at_least(workers, 1) and workers <= n, "workers", workers,
            f"an integer in [1, n_envs={n}]")


class ShardedVecEnv(StepCalls, CopySeeds, Unrendered, VecEnv):
    """SB3 ``VecEnv``: ``N`` copies in ``workers`` processes, each a batched group (module docstring).

    Args:
        env_fns: one constructor per copy (picklable with cloudpickle).
        workers: shards (here processes), at most one per copy; each process gets ``cpu_count // workers``
            torch threads.
        start_method: multiprocessing start method (default ``forkserver`` where available, as SB3).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], workers: int,
                 start_method: str | None = None) -> None:
        n = len(env_fns)
        require_workers(workers, n)
        self.shards = [list(s) for s in np.array_split(np.arange(n), workers)]
        self.workers = self._start_workers([[env_fns[i] for i in shard] for shard in self.shards],
                                           start_method)
        try:  # every shard's reply: its copies built (of one space each), or the error that stopped them
            replies = self._everyone("spaces", lambda _: ())
            firsts = [copies[0] for copies in self.shards]
            check_same_spaces([(i, *spaces) for i, spaces in zip(firsts, replies, strict=True)])
        except Exception:
            self.close()
            raise
        observation_space, action_space = replies[0]
        super().__init__(n, observation_space, action_space)

    def _start_workers(self, groups: list[list[Callable[[], gym.Env]]],
                       start_method: str | None) -> list[Any]:
        """One worker per group of constructors (here a process with ``cpu_count // workers`` threads)."""
        threads = max(1, (os.cpu_count() or 1) // len(groups))
        method = start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        ctx = mp.get_context(method)
        return [ProcessWorker(ctx, fns, threads) for fns in groups]

    def _send(self, shard: int, method: str, *args: Any, **kwargs: Any) -> None:
        self.workers[shard].send((method, args, kwargs))

    def _receive(self, shards: Iterable[int]) -> list[Any]:
        """The replies of ``shards``, in order (all read before a worker's error is raised: none stale)."""
        replies = [self.workers[s].receive() for s in shards]
        for ok, value in replies:
            if not ok:
                raise value
        return [value for _, value in replies]

    def _ask(self, shard: int, method: str, *args: Any) -> Any:
        self._send(shard, method, *args)
        return self._receive([shard])[0]

    def _everyone(self, method: str, args: Callable[[list[int]], tuple]) -> list[Any]:
        """``method`` on every shard side by side, ``args(shard's copies)`` each; replies in shard order."""
        self._check_idle(method)
        for s, shard in enumerate(self.shards):
            self._send(s, method, *args(shard))
        return self._receive(range(len(self.shards)))

    def reset(self) -> VecEnvObs:
        """Reset every copy (seeds and options from :meth:`seed` / :meth:`set_options`, then cleared)."""
        replies = self._everyone("reset",
                                 lambda c: ([self._seeds[i] for i in c], [self._options[i] for i in c]))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [info for _, infos in replies for info in infos]
        return np.concatenate([obs for obs, _ in replies])

    def step_async(self, actions: np.ndarray) -> None:
        """Send every shard its copies' actions; they step while the caller waits in :meth:`step_wait`."""
        actions = self._start_step(actions)
        for s, shard in enumerate(self.shards):
            self._send(s, "step", actions[shard])

    def step_wait(self) -> VecEnvStepReturn:
        """Collect the shards' steps (a finished copy has reset within its shard)."""
        self._check_step_sent()
        try:
            replies = self._receive(range(len(self.shards)))
        except Exception:  # every shard replied (an error too): the step is over
            self._stepping = False
            raise
        # over once every reply is read; cut short (Ctrl-C), the step stays in flight for the next step_wait()
        self._stepping = False
        self.reset_infos = [info for *_, infos in replies for info in infos]
        return (np.concatenate([r[0] for r in replies]), np.concatenate([r[1] for r in replies]),
                np.concatenate([r[2] for r in replies]), [info for r in replies for info in r[3]])

    def _by_shard(self, method: str, indices: VecEnvIndices, *args: Any, **kwargs: Any) -> list[Any]:
        """``method(*args, indices=local, **kwargs)`` on the shards holding ``indices``; results in order."""
        self._check_idle(method)
        wanted = copy_indices(indices, self.num_envs)
        owner = {i: (s, j) for s, shard in enumerate(self.shards) for j, i in enumerate(shard)}
        local: dict[int, list[int]] = {}
        for i in wanted:
            local.setdefault(owner[i][0], []).append(owner[i][1])
        for s, copies in local.items():
            self._send(s, method, *args, indices=copies, **kwargs)
        values = self._receive(local)
        replies = {s: iter(v or [None] * len(copies))
                   for (s, copies), v in zip(local.items(), values, strict=True)}
        return [next(replies[owner[i][0]]) for i in wanted]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of each (unwrapped-through) copy."""
        return self._by_shard("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute on each copy's unwrapped env."""
        self._by_shard("set_attr", indices, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call a method of each copy (e.g. ``action_masks`` for MaskablePPO)."""
        return self._by_shard("env_method", indices, method_name, *method_args, **method_kwargs)

    def call(self, name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        """Gymnasium's ``call``: each copy's method ``name`` called (an attribute: its value)."""
        return self._by_shard("call", indices, name, *args, **kwargs)

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Whether each copy is wrapped in ``wrapper_class``."""
        return self._by_shard("env_is_wrapped", indices, wrapper_class)

    def close(self) -> None:
        """Close every shard and join its process (a shard whose worker has ended is only joined)."""
        if self.closed:
            return
        for s, worker in enumerate(self.workers):
            with contextlib.suppress(WorkerLost):  # an ended worker has nothing left to close
                if self._stepping:  # a step's reply comes first: read it, so that close gets its own
                    worker.receive()
                self._ask(s, "close")
        for worker in self.workers:
            worker.join()
        self._stepping, self.closed = False, True
