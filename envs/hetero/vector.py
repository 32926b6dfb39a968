"""HAPFL's timing backend for many copies at once: the clock as arrays over copies.

A timing-backend step trains nothing: it is the clock (:mod:`fl_gym.clock`), the
decision algebra and the rewards, a few dozen small numpy operations per copy, so a vector env
of ``N`` copies spends its time in Python overhead. :class:`HeteroClock` plays one step of every
copy of a :class:`~fl_gym.envs.vector.BatchedVecEnv` with ``(N, K)`` arrays instead. Each copy's
random draws still come from its own generators, in the order its own step draws them (the
candidates from the env's ``np_random``, the device load from the federation's stream), and
every array operation is the scalar step's, elementwise, so copy ``i`` plays exactly, bit for
bit, the episode a stand-alone env plays. Afterwards each env holds the state its own ``step``
would have left (rounds, clock, previous sizes, the next pending round, whose record is built
from the clock's rows when first read), so anything may read a copy in between, or step or
reset it alone: the clock reads such a copy's own round back before its next step.

The joint view decides as arrays too. The one-lever views ask their injected policy (the
intensity view's allocation policy when the round opens, the allocation view's intensity policy
when it is played) one batched call for every copy where the copies' policies are one
:attr:`~fl_gym.baselines.base.RowPolicy.batchable` policy (the same fixed policy by name, or
one shared object), which decides each row as it decides that row alone; any other policy
(``"random"`` draws from each copy's own stream, a frozen network may round a batch
differently) is asked once per copy, as the copy's own step asks it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from gymnasium import spaces

from fl_gym.clock import RoundLoad, load_factors
from fl_gym.envs.hetero.actions import split_of
from fl_gym.envs.hetero.env import HeteroRound, _HeteroEnv, history_features
from fl_gym.records import OpenedRound


def row_integerize(sigma: np.ndarray, total: int) -> np.ndarray:
    """:func:`~fl_gym.envs.hetero.actions.integerize` of each row, the same steps on every row at once."""
    x = sigma * total
    tau = np.maximum(1, np.floor(x)).astype(np.int64)
    short = total - tau.sum(axis=1)
    rows = np.arange(len(tau))[:, None]
    order = np.argsort(tau - x, axis=1, kind="stable")  # largest remainder first, ties to lower slot
    tau[rows, order] += np.arange(tau.shape[1]) < short[:, None]
    for step in range(-int(short.min())):  # only the floor of 1 can overshoot
        slack = np.where(tau > 1, x - tau, np.inf)
        over = -short > step
        tau[rows[over, 0], slack.argmin(axis=1)[over]] -= 1
    return tau


class HeteroClock:
    """One timing step of ``N`` HAPFL envs (same config) as arrays (module docstring).

    Args:
        envs: the copies' unwrapped envs, each reset (a pending round open).
    """

    def __init__(self, envs: list[_HeteroEnv]) -> None:
        self.envs = envs
        self.feds = [env.federation for env in envs]
        fed, n = self.feds[0], len(envs)
        self.k, self.num_clients = envs[0].k, fed.num_clients
        self.rows = np.arange(n)[:, None]
        self.costs = fed.model_costs + fed.companion_cost
        self.nbytes = fed.model_bytes + fed.companion_bytes
        self.speed = np.stack([f.profiles.speed for f in self.feds])
        self.bandwidth = np.stack([f.profiles.bandwidth for f in self.feds])
        # per-episode arrays (a reset may redraw the partition): filled by refresh()
        self.samples, self.t_scale = np.zeros((n, self.num_clients), fed.sizes.dtype), np.zeros(n)
        self.extras, self.entropy = np.zeros((n, *envs[0]._extras.shape)), np.zeros((n, self.num_clients))
        self.slots, self.probe_ratio = np.zeros((n, self.k), np.int64), np.zeros((n, self.k))
        self.masks, self.load = np.zeros((n, self.num_clients), bool), np.zeros((3, n, self.num_clients))
        self.probe = np.zeros((n, self.num_clients))
        self.prev_size = np.zeros((n, self.num_clients), envs[0]._prev_size.dtype)
        self.seen = np.zeros((n, *envs[0]._seen.shape))
        self.sizes_used = np.zeros((n, envs[0].num_sizes), bool)
        acts_sizes = envs[0].hetero.action.acts_sizes
        self.sizes = None if acts_sizes else np.zeros((n, self.k), np.int64)  # injected, per round
        # per role, whether every copy was given one injected policy (fixed for the copies' lives)
        self.one_choice = {role: all(_same_choice(env._injected[role], envs[0]._injected[role]) for env in envs)
                           for role in envs[0]._injected}
        # what each copy holds while its pending round is the clock's rows (FLEnv._pending)
        self.builders = [partial(self._pending_of, i) for i in range(n)]
        for i in range(n):
            self.refresh(i)

    def refresh(self, i: int) -> None:
        """Read copy ``i``'s scenario and pending round after a reset or a step of its own.

        A reset may draw a new scenario (same ``K``). The clock holds the round from then on.
        """
        env = self.envs[i]
        fed = self.feds[i] = env.federation
        self.speed[i], self.bandwidth[i], self.t_scale[i] = fed.profiles.speed, fed.profiles.bandwidth, env.t_scale
        self.samples[i], self.extras[i], self.entropy[i] = fed.sizes, env._extras, fed.label_entropy
        pending = env._pending
        self.slots[i], self.probe_ratio[i] = pending.slots, pending.probe_ratio
        if self.sizes is not None:
            self.sizes[i] = pending.sizes
        load = pending.opened.load
        self.masks[i], self.probe[i] = pending.opened.candidates, pending.opened.probe_time
        self.load[:, i] = load.availability, load.drift, load.noise
        # the copy's size records become rows of the clock's arrays (views): one write updates every copy's
        self.prev_size[i], self.sizes_used[i], self.seen[i] = env.client_records()
        env.share_client_records(self.prev_size[i], self.sizes_used[i], self.seen[i])
        env.defer_pending(self.builders[i])

    def _pending_of(self, i: int) -> HeteroRound:
        """Copy ``i``'s pending round as its own ``_prepare`` builds it, of row views of the clock's arrays."""
        opened = OpenedRound(self.feds[i].round + 1, self.masks[i], RoundLoad(*self.load[:, i]), self.probe[i])
        return HeteroRound(opened, self.slots[i], self.probe_ratio[i], None if self.sizes is None else self.sizes[i])

    # ---- one step ----------------------------------------------------------------------------

    def step(self, actions: np.ndarray) -> list[tuple[np.ndarray, float, bool, bool, dict[str, Any]]]:
        """Play every copy's pending round; each copy's ``(obs, reward, terminated, truncated, info)``.

        A copy that reset, or stepped alone, since the clock's last step holds a round the clock
        has not read yet: it reads it first.
        """
        for i in [i for i, env in enumerate(self.envs) if not env.pending_deferred_to(self.builders[i])]:
            self.refresh(i)
        first = self.envs[0]
        sizes, sigma, tau = self._decide(np.asarray(actions))
        train, probe, client, uploaded = self._times(sizes, tau)
        slowest, fastest = client.max(axis=1), client.min(axis=1)
        round_time = slowest + self.feds[0].config.clock.aggregation_time
        terms, columns = self._terms_and_columns(sizes, sigma, tau.astype(np.float64), train, probe, round_time)
        reward = sum(weight * terms[name] for name, weight in first._reward_weights().items()).tolist()
        seconds = round_time.tolist()
        self.prev_size[self.rows, self.slots] = sizes  # every copy's env._prev_size[slots] = sizes
        self.sizes_used[self.rows, sizes] = True
        self._commit(seconds)
        if first.config.obs_mode == "history":  # every copy's env._seen[:, slots] = slowdowns, round
            self.seen[self.rows, 0, self.slots] = self.load[1][self.rows, self.slots]
            self.seen[self.rows, 1, self.slots] = self._rounds()
        infos = self._infos(seconds, (slowest - fastest).tolist(), uploaded.tolist(), terms, columns)
        ended = [env._ended for env in self.envs]
        self._prepare()
        obs = self._observe()
        return list(zip(obs, reward, [False] * len(obs), ended, infos, strict=True))

    def _infos(self, seconds: list, latency: list, uploaded: list, terms: dict[str, np.ndarray],
               columns: list) -> list[dict[str, Any]]:
        """Every copy's ``info`` (``FLEnv._info``), built column by column after the copies' commits."""
        terms_rows = zip(*(terms[name].tolist() for name in ("r1", "r2", "neg_round_time")), strict=True)
        base = {"round": [env._round for env in self.envs], "sim_time": [fed.elapsed for fed in self.feds],
                "round_time": seconds, "straggling_latency": latency, "upload_bytes": uploaded,
                "uploads": [env._uploads for env in self.envs], "clients": list(self.slots),
                "reward_terms": [{"r1": r1, "r2": r2, "neg_round_time": t} for r1, r2, t in terms_rows]}
        keys = (*base, *(name for name, _ in columns))  # the scalar step's keys, in its order
        values = zip(*base.values(), *(list(rows) for _, rows in columns), strict=True)
        return [dict(zip(keys, row, strict=True)) for row in values]

    def _terms_and_columns(self, sizes: np.ndarray, sigma: np.ndarray, epochs: np.ndarray, train: np.ndarray,
                           probe: np.ndarray, round_time: np.ndarray) -> tuple[dict[str, np.ndarray], list]:
        """Every copy's reward terms, and ``_HeteroEnv._family_info`` as ``(key, rows)`` pairs (made this step)."""
        first, rows, slots = self.envs[0], self.rows, self.slots
        t_l, t_c = train, probe + train
        per_epoch = t_l / epochs
        r2_seconds = t_l.min(axis=1) - t_l.max(axis=1)
        terms = {"r1": first.config.max_ratio - per_epoch.max(axis=1) / per_epoch.min(axis=1),
                 "r2": r2_seconds / self.t_scale, "neg_round_time": -round_time / self.t_scale}
        columns = [
            ("hetero/sizes", sizes), ("hetero/epoch_share", sigma), ("hetero/epochs", epochs),
            ("hetero/probe_time", self.probe[rows, slots]), ("hetero/train_time", t_l),
            ("hetero/train_time_per_epoch", per_epoch), ("hetero/compute_time", t_c),
            ("hetero/straggling_compute", (t_c.max(axis=1) - t_c.min(axis=1)).tolist()),
            ("hetero/straggling_local", (-r2_seconds).tolist()),
            ("hetero/r1", terms["r1"].tolist()), ("hetero/r2_seconds", r2_seconds.tolist()),
            ("hetero/time_ratio", np.tile(first.time_ratio, (len(self.envs), 1))),
            ("hetero/cost_ratio", first.time_ratio[sizes] * self.probe_ratio),
            ("hetero/label_entropy", self.entropy[rows, slots])]
        return terms, columns

    def _decide(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sizes, epoch shares and epochs of every copy (``_HeteroEnv._decide`` row by row)."""
        first = self.envs[0]
        a = self._checked(actions)
        if a is None or first._residual is not None:
            # per copy: each checks its own action (and raises its own error), a residual asks its base policy
            decisions = [env._decide(self._pending_of(i), env._check_action(a))
                         for i, (env, a) in enumerate(zip(self.envs, actions, strict=True))]
            return (np.stack([d.sizes for d in decisions]), np.stack([d.sigma for d in decisions]),
                    np.stack([d.epochs for d in decisions]))
        sizes, sigma = first.hetero.decode(a)
        sizes = self.sizes if sizes is None else sizes
        if sigma is None:
            shares = self._ask("intensity", self._features(first.time_ratio[sizes] * self.probe_ratio))
            sigma = split_of(shares)
        total = first.total_epochs
        tau = sigma * total if first.config.fractional_epochs else row_integerize(sigma, total)
        return sizes, sigma, tau

    def _checked(self, actions: np.ndarray) -> np.ndarray | None:
        """The copies' actions as their own ``_check_action`` returns them, or None if any would refuse its own."""
        space, a = self.envs[0].action_space, np.asarray(actions)
        kind = a.dtype.kind
        if kind not in "biuf" or a.shape != (len(self.envs), *space.shape):
            return None
        if kind == "f" and not np.isfinite(a).all():
            return None
        if isinstance(space, spaces.MultiDiscrete):
            whole = a.astype(space.dtype)
            fits = ((space.start <= whole) & (whole - space.start < space.nvec)).all()
            return whole if fits and (kind != "f" or np.array_equal(whole, a)) else None
        return a

    def _ask(self, role: str, features: np.ndarray) -> np.ndarray:
        """Every copy's injected ``role`` policy's action on its row of ``features`` (module docstring)."""
        policy = self.envs[0]._policies[role]  # read each time: a scenario redrawn at reset rebuilds it
        if self.one_choice[role] and getattr(policy, "batchable", False):
            return np.asarray(policy.predict(features, deterministic=True)[0])
        rows = zip(self.envs, features, strict=True)
        return np.stack([env._predict(env._policies[role], row) for env, row in rows])

    def _times(self, sizes: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        """Training, probe and client times of the sampled clients, bytes uploaded per copy.

        ``Federation._compute_times`` and ``_communication`` on the ``(copies, k)`` sampled
        clients alone (the rest neither train nor upload).
        """
        fed, sampled = self.feds[0], (self.rows, self.slots)
        availability, drift, noise = self.load[:, self.rows, self.slots]
        cost = fed.clock.cfg.seconds_per_unit * self.costs[sizes]
        train = tau * (cost * self.samples[sampled] / (self.speed[sampled] * availability)) * drift * noise
        probe = self.probe[sampled] if fed.companion_arch else np.zeros(train.shape)
        nbytes = self.nbytes[sizes]
        if fed._free_comm:
            download = upload = np.zeros(train.shape)
        else:
            bandwidth = self.bandwidth[sampled]
            download = nbytes / (bandwidth * fed.config.clock.download_ratio)
            upload = nbytes * fed.algorithm.upload_factor / bandwidth
        return train, probe, download + (probe + train) + upload, (nbytes * fed.algorithm.upload_factor).sum(axis=1)

    def _commit(self, seconds: list[float]) -> None:
        """Leave every copy's env and federation as its own step would (before the next round opens).

        The size records are the clock's rows, written for every copy at once by :meth:`step`; the
        played round and decision a scalar step keeps for its own info are not needed after it.
        """
        for env, fed, round_time in zip(self.envs, self.feds, seconds, strict=True):
            fed.advance(round_time)
            env.count_round(self.k)

    # ---- the next round ----------------------------------------------------------------------

    def _prepare(self) -> None:
        """Open every copy's next round (``Federation.open_round`` + ``_HeteroEnv._prepare``)."""
        n, num_clients, k = len(self.envs), self.num_clients, self.k
        drawn, z = np.tile(np.arange(num_clients), (n, 1)), np.empty((n, 3, num_clients))
        for fed, order, normals in zip(self.feds, drawn, z, strict=True):  # each copy's streams, in its own order
            fed.sampler.shuffle(order)  # = fed.sampler.permutation(num_clients), as Federation.open_round draws it
            fed.rng.standard_normal(out=normals)  # = RoundLoad.draw's (3, K) normals
        z = z.transpose(1, 0, 2)
        self.slots = np.sort(drawn[:, :k], axis=1)
        self.masks = np.zeros((n, num_clients), bool)
        self.masks[self.rows, self.slots] = True
        self.load = load_factors(z, self.feds[0].config.clock, self.load[:2])  # continues each copy's last load
        for i, fed in enumerate(self.feds):
            fed.record_load(RoundLoad(*self.load[:, i]))
        fed = self.feds[0]
        self.probe = (fed.clock.cfg.seconds_per_unit * fed.probe_cost * self.samples / (self.speed * self.load[0])
                      * self.load[2])
        probe = self.probe[self.rows, self.slots]
        self.probe_ratio = probe / probe.min(axis=1, keepdims=True)
        # the intensity view's injected allocation policy sizes each copy's round
        injected = not self.envs[0].hetero.action.acts_sizes
        self.sizes = self._ask("alloc", self._features(self.probe_ratio)) if injected else None
        for env, builder in zip(self.envs, self.builders, strict=True):
            env.defer_pending(builder)  # the round is these rows; a read builds its record

    def _rounds(self) -> np.ndarray:
        """``(copies, 1)``: the rounds each copy's federation has played."""
        return np.array([fed.round for fed in self.feds], np.float64)[:, None]

    def _observe(self) -> np.ndarray:
        """Every copy's observation (``_HeteroEnv._observe``)."""
        ratio = self.probe_ratio
        return self._features(ratio if self.sizes is None else self.envs[0].time_ratio[self.sizes] * ratio)

    def _features(self, ratio: np.ndarray) -> np.ndarray:
        """Every copy's ``_HeteroEnv._features`` for its row of ``(copies, k)`` ``ratio``."""
        first = self.envs[0]
        if first.config.obs_mode == "history":
            seen = self.seen[self.rows[:, :, None], np.arange(2)[None, :, None], self.slots[:, None, :]]
            return history_features(ratio, seen[:, 0], self._rounds() - seen[:, 1])
        if first.config.obs_mode != "extended":
            catalogue = np.tile(first._catalogue[: first.client_rows.globals], (len(self.envs), 1))
            return np.concatenate([1.0 / ratio, catalogue], axis=1).astype(np.float32)
        prev = (self.prev_size[self.rows, self.slots] + 1) / first.num_sizes
        extras = self.extras[self.rows[:, :, None], np.arange(2)[None, :, None], self.slots[:, None, :]]
        return np.concatenate([1.0 / ratio, extras[:, 0], extras[:, 1], prev], axis=1).astype(np.float32)


def _same_choice(a: Any, b: Any) -> bool:
    """Whether two injected policies are one: the same fixed policy's name, or the same object."""
    return a is b or (isinstance(a, str) and a == b)

