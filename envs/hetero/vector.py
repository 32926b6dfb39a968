"""HAPFL's timing backend for many copies at once: the clock as arrays over copies.

A timing-backend step trains nothing: it is the clock (:mod:`fl_gym.clock`), the
decision algebra and the rewards, a few dozen small numpy operations per copy, so a vector env
of ``N`` copies spends its time in Python overhead. :class:`HeteroClock` plays one step of every
copy of a :class:`~fl_gym.envs.vector.BatchedVecEnv` with ``(N, K)`` arrays instead, and a
stand-alone env's step is its one row (``FLEnv.step``); the env's round through the federation's
phases (``FLEnv.play``) is what the tests hold both to. The rules are written once, over rows of
copies, and the phases apply them to one row: the env's ``decide``, ``features``,
``timing_terms`` and ``timing_info``, its :class:`~fl_gym.envs.hetero.env.ClientRecords`, the
federation's :class:`~fl_gym.clock.Clock` and its draws (``Federation.draw_round``, from each
copy's own generators in the order every opening draws them), so copy ``i`` plays exactly,
bit for bit, the episode an env seeded alike plays through the phases.
What stays here is the gathering of the copies' rows and the hand-back. Afterwards each env
holds the state its own ``step`` would have left (rounds, clock, client records, the next pending
round, whose record is built from the clock's rows when first read), so anything may read a copy
in between, or step or reset it alone: the clock reads such a copy's own round back before its
next step.

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

from fl_gym.clock import Clock, DeviceProfiles, RoundLoad, load_factors
from fl_gym.envs.base import RoundInfo
from fl_gym.envs.hetero.env import ClientRecords, HeteroDecision, HeteroRound, _HeteroEnv
from fl_gym.records import OpenedRound


class HeteroClock:
    """One timing step of ``N`` HAPFL envs (same config) as arrays (module docstring).

    Args:
        envs: the copies' unwrapped envs, each reset (a pending round open).
    """

    def __init__(self, envs: list[_HeteroEnv]) -> None:
        self.envs = envs
        self.feds = [env.federation for env in envs]
        fed, n = self.feds[0], len(envs)
        # copies may differ in K (num_clients_range): every per-client array is as wide as the widest, and a
        # copy's row holds its K clients first (the rest padding that no slot reads)
        self.k, self.num_clients = envs[0].k, envs[0].config.scenario.client_counts()[1]
        self.counts = np.array([f.num_clients for f in self.feds])
        self.rows = np.arange(n)[:, None]
        self.speed, self.bandwidth = np.ones((n, self.num_clients)), np.ones((n, self.num_clients))
        # rows: the copies' clocks
        self.clock = Clock(fed.config.clock, DeviceProfiles(self.speed, self.bandwidth))
        # per-episode arrays (a reset may redraw the partition): filled by refresh()
        self.samples, self.t_scale = np.zeros((n, self.num_clients), fed.sizes.dtype), np.zeros(n)
        self.entropy = np.zeros((n, self.num_clients))
        self.slots, self.probe_ratio = np.zeros((n, self.k), np.int64), np.zeros((n, self.k))
        self.masks, self.load = np.zeros((n, self.num_clients), bool), np.zeros((3, n, self.num_clients))
        self.probe = np.zeros((n, self.num_clients))
        self.records = ClientRecords.empty(n, self.num_clients, envs[0].num_sizes)  # each copy's are a row
        acts_sizes = envs[0].hetero.action.acts_sizes
        self.sizes = None if acts_sizes else np.zeros((n, self.k), np.int64)  # injected, per round
        # per role, whether every copy was given one injected policy (fixed for the copies' lives)
        self.one_choice = {role: all(_same_choice(env.injected[role], envs[0].injected[role])
                                     for env in envs)
                           for role in envs[0].injected}
        # what each copy holds while its round is the clock's rows (FLEnv._pending, Federation.last_load)
        self.builders = [partial(self._pending_of, i) for i in range(n)]
        self.loads = [partial(self._load_of, i) for i in range(n)]
        for i in range(n):
            self.refresh(i)

    def refresh(self, i: int) -> None:
        """Read copy ``i``'s scenario and pending round after a reset or a step of its own.

        A reset may draw a new scenario, with another ``K`` under ``num_clients_range``. The clock
        holds the round from then on.
        """
        env = self.envs[i]
        fed = self.feds[i] = env.federation
        k = self.counts[i] = fed.num_clients
        pending, load = env.pending, env.pending.opened.load  # possibly views of these rows: pad only past k
        for rows, values, pad in ((self.speed, fed.profiles.speed, 1.0),
                                  (self.bandwidth, fed.profiles.bandwidth, 1.0),
                                  (self.samples, fed.sizes, 0), (self.entropy, fed.label_entropy, 0.0),
                                  (self.masks, pending.opened.candidates, False),
                                  (self.probe, pending.opened.probe_time, 0.0),
                                  (self.load[0], load.availability, 1.0),
                                  (self.load[1], load.drift, 1.0), (self.load[2], load.noise, 1.0)):
            rows[i, :k], rows[i, k:] = values, pad
        self.t_scale[i] = env.t_scale
        self.slots[i], self.probe_ratio[i] = pending.slots, pending.probe_ratio
        if self.sizes is not None:
            self.sizes[i] = pending.sizes
        # the copy's client records become rows of the clock's (views): one write updates every copy's
        row = self.records.row(i, k)
        for mine, its in zip(row, env.records, strict=True):
            mine[:] = its
        env.share_records(row)
        env.defer_pending(self.builders[i])

    def _pending_of(self, i: int) -> HeteroRound:
        """Copy ``i``'s pending round as its ``_prepare`` builds it, of row views of the clock's arrays."""
        k, fed = self.counts[i], self.feds[i]
        opened = OpenedRound(fed.round + 1, self.masks[i, :k], self._load_of(i), self.probe[i, :k],
                             fed.episode, fed.openings)
        return HeteroRound(opened, self.slots[i], self.probe_ratio[i],
                           None if self.sizes is None else self.sizes[i])

    def _load_of(self, i: int) -> RoundLoad:
        """Copy ``i``'s device load of the round the clock opened last (views of its rows)."""
        return RoundLoad(*self.load[:, i, : self.counts[i]])

    # ---- one step ----------------------------------------------------------------------------

    def step(self, actions: np.ndarray, *, checked: bool = False
             ) -> list[tuple[np.ndarray, float, bool, bool, dict[str, Any]]]:
        """Play every copy's pending round; each copy's ``(obs, reward, terminated, truncated, info)``.

        ``checked``: the rows are checked already (``FLEnv.check_actions``). A copy that reset, or
        stepped alone, since the clock's last step holds a round the clock has not read yet: it
        reads it first.
        """
        for i in [i for i, env in enumerate(self.envs) if not env.pending_deferred_to(self.builders[i])]:
            self.refresh(i)
        first = self.envs[0]
        decision = self._decisions(np.asarray(actions) if checked else first.check_actions(actions))
        sizes, tau = decision.sizes, decision.epochs
        train, probe, client, uploaded = self._times(sizes, tau)
        _, round_time, latency = self.feds[0].round_seconds(client)
        epochs = tau.astype(np.float64)
        terms = first.timing_terms(train, epochs, round_time, self.t_scale)
        columns = first.timing_info(decision, epochs, self.probe[self.rows, self.slots],
                                    train, probe + train, self.probe_ratio,
                                    self.entropy[self.rows, self.slots], terms["r1"])
        reward = first.reward_of(terms).tolist()  # the env's own rule, over the copies' rows of terms
        seconds = round_time.tolist()
        ended = self._commit(seconds)
        history = first.config.obs_mode == "history"  # the only records that need the rounds
        slowdown = self.load[1][self.rows, self.slots] if history else None
        self.records.played(self.slots, sizes, slowdown, self._rounds() if history else None)
        infos = self._infos(seconds, latency.tolist(), uploaded.tolist(), terms, columns)
        self._prepare()
        obs = self._observe()
        return list(zip(obs, reward, [False] * len(obs), ended, infos, strict=True))

    def _infos(self, seconds: list, latency: list, uploaded: list, terms: dict[str, np.ndarray],
               columns: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """Every copy's ``info`` (``FLEnv._info``), built column by column after the copies' commits."""
        terms_rows = zip(*(terms[name].tolist() for name in ("r1", "r2", "neg_round_time")), strict=True)
        base = ([env.rounds_played for env in self.envs], [fed.elapsed for fed in self.feds],
                seconds, latency, uploaded, [env.uploads for env in self.envs], self.slots,
                [{"r1": r1, "r2": r2, "neg_round_time": t} for r1, r2, t in terms_rows])
        keys = (*RoundInfo._fields, *columns)  # the scalar step's keys, in its order
        values = zip(*base, *(rows.tolist() if rows.ndim == 1 else list(rows) for rows in columns.values()),
                     strict=True)
        return [dict(zip(keys, row, strict=True)) for row in values]

    def _decisions(self, a: np.ndarray) -> HeteroDecision:
        """Every copy's decision, as rows of checked actions (``_HeteroEnv.decide``)."""
        first = self.envs[0]
        if first.residual is not None:  # per copy: a residual asks its base policy
            decisions = [env.decide_round(self._pending_of(i), row)
                         for i, (env, row) in enumerate(zip(self.envs, a, strict=True))]
            return HeteroDecision(*(np.stack([getattr(d, name) for d in decisions])
                                    for name in ("sizes", "sigma", "epochs")))
        return first.decide(a, self.sizes, self.probe_ratio,
                            lambda role, ratio: self._ask(role, self._features(ratio)))

    def _ask(self, role: str, features: np.ndarray) -> np.ndarray:
        """Every copy's injected ``role`` policy's action on its row of ``features`` (module docstring)."""
        policy = self.envs[0].policy(role)  # read each time: a scenario redrawn at reset rebuilds it
        if self.one_choice[role] and getattr(policy, "batchable", False):
            return np.asarray(policy.predict(features, deterministic=True)[0])
        rows = zip(self.envs, features, strict=True)
        return np.stack([env.ask(role, row) for env, row in rows])

    def _times(self, sizes: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        """Training, probe and client times of the ``(copies, k)`` sampled clients, bytes uploaded per copy.

        The federation's cost model (``Federation.training_seconds``, ``download_seconds``,
        ``upload_seconds``) on the sampled clients' rows (the rest neither train nor upload), as
        ``Federation.train_round`` and ``finish_round`` time a round; the links are static (HAPFL
        plays no device behaviour).
        """
        fed, sampled = self.feds[0], (self.rows, self.slots)  # the copies share one config: its costs
        clock, load = self.clock.at(sampled), RoundLoad(*self.load[:, self.rows, self.slots])
        probe, train = fed.training_seconds(clock, self.samples[sampled], sizes, tau, load,
                                            self.probe[sampled])
        client = fed.download_seconds(sizes, clock) + (probe + train) + fed.upload_seconds(sizes, clock)
        return train, probe, client, fed.upload_bytes(sizes).sum(axis=1)

    def _commit(self, seconds: list[float]) -> list[bool]:
        """Leave every copy's env and federation as its own step would (before the next round opens).

        Returns whether each copy's episode ended. The size records are the clock's rows, written
        for every copy at once by :meth:`step`; the played round and decision a scalar step keeps
        for its own info are not needed after it.
        """
        ended = []
        for env, fed, round_time in zip(self.envs, self.feds, seconds, strict=True):
            fed.advance(round_time)
            ended.append(env.count_round(self.k))
        return ended

    # ---- the next round ----------------------------------------------------------------------

    def _prepare(self) -> None:
        """Open every copy's next round (``Federation.open_round`` + ``_HeteroEnv._prepare``)."""
        fed = self.feds[0]
        # each copy's draws from its own streams (Federation.draw_round: open_round's own)
        n, width = len(self.envs), self.num_clients
        order = np.tile(np.arange(width), (n, 1))
        z = np.empty((n, 3, width)) if (self.counts == width).all() else np.zeros((n, 3, width))
        for f, ids, normals, k in zip(self.feds, order, z, self.counts.tolist(), strict=True):
            f.begin_round()
            if k == width:
                f.draw_round(ids, normals)
            else:  # a padded row: the copy's K clients first (its draws need whole buffers)
                drawn = np.empty((3, k))
                f.draw_round(ids[:k], drawn)
                normals[:, :k] = drawn
        self.slots = np.sort(order[:, : self.k], axis=1)
        z = z.transpose(1, 0, 2)
        self.masks = np.zeros((n, self.num_clients), bool)
        self.masks[self.rows, self.slots] = True
        # as RoundLoad.of_normals; continues the last
        self.load = load_factors(z, fed.config.clock, self.load[:2])
        self.probe = fed.probe_seconds(self.clock, self.samples, RoundLoad(*self.load))
        probe = self.probe[self.rows, self.slots]
        self.probe_ratio = probe / probe.min(axis=1, keepdims=True)
        # the intensity view's injected allocation policy sizes each copy's round
        injected = not self.envs[0].hetero.action.acts_sizes
        self.sizes = self._ask("alloc", self._features(self.probe_ratio)) if injected else None
        for env, f, builder, load in zip(self.envs, self.feds, self.builders, self.loads, strict=True):
            env.defer_pending(builder)  # the round is these rows; a read builds its record
            f.defer_load(load)

    def _rounds(self) -> np.ndarray:
        """``(copies, 1)``: the rounds each copy's federation has played."""
        return np.array([fed.round for fed in self.feds], np.float64)[:, None]

    def _observe(self) -> np.ndarray:
        """Every copy's observation (``_HeteroEnv._observe``)."""
        ratio = self.probe_ratio
        return self._features(ratio if self.sizes is None else self.envs[0].time_ratio[self.sizes] * ratio)

    def _features(self, ratio: np.ndarray) -> np.ndarray:
        """Every copy's observation for its row of ``(copies, k)`` ``ratio`` (``_HeteroEnv.features``)."""
        first = self.envs[0]
        # read by history features only
        rounds = self._rounds() if first.config.obs_mode == "history" else None
        return first.features(ratio, self.slots, rounds, self.records)


def _same_choice(a: Any, b: Any) -> bool:
    """Whether two injected policies are one: the same fixed policy's name, or the same object."""
    return a is b or (isinstance(a, str) and a == b)

