"""The base class of every fl-gym env: one federated round per step, families override hooks.

``step`` is written once, here (as HighwayEnv's ``AbstractEnv.step``): check the action, play the
pending round with it, score it, prepare the next round, observe. A family overrides hooks only:

* :meth:`FLEnv._setup` builds its spaces and constants (after the federation exists);
* :meth:`FLEnv._prepare` opens the next round and runs it up to the phase where the family
  decides (open for decisions before training, trained for decisions about trained updates),
  returning a pending record;
* :meth:`FLEnv._observe` encodes the pending round as the observation;
* :meth:`FLEnv._play` finishes the pending round under the (checked) action -> the report and
  the family's outcome, a typed record of what the decision did (what was kept, the rates played);
* :meth:`FLEnv._reward_terms` names the reward components, given the report and the outcome; the
  reward is their weighted sum with :meth:`FLEnv._reward_weights`;
* :meth:`FLEnv._family_info` adds the family's ``info`` keys (given the report, the outcome and
  the reward terms), namespaced ``<family>/<key>``.

An env that trains nothing (a timing backend) of a family that registers a vector clock has its
step played by the clock as its one row instead: the hooks' episode, bit for bit (:meth:`FLEnv.step`).

The outcome goes from ``_play`` to the other hooks as an argument (as HighwayEnv passes the action
to ``_reward`` and ``_info``), so no hook reads a step's scratch state from the env.

``reset(seed=...)`` seeds everything the episode draws (candidates, device dynamics, model
initialisation, data order); the static scenario (who holds which data on which device) comes
from ``scenario_seed``, except that ``redraw_partition=True`` draws the partition per episode and
``randomize_scenario=True`` the whole scenario (and, within ``num_clients_range``, the client
count where :attr:`FLEnv.any_client_count`).

Generic ``info`` keys, the same meaning in every family:

| key | meaning |
|---|---|
| ``round`` | rounds played this episode |
| ``sim_time`` | simulated seconds since the episode began |
| ``round_time`` | this round: slowest client's time plus server aggregation (s) |
| ``straggling_latency`` | this round: ``max - min`` of client time (download + compute + upload) (s) |
| ``upload_bytes`` | bytes uploaded this round |
| ``uploads`` | models uploaded and aggregated since the episode began |
| ``clients`` | ids of the clients that trained this round |
| ``accuracy`` | test accuracy of the family's headline global model (if trained; NaN between evaluations) |
| ``reward_terms`` | the named reward components before weighting |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fl_gym.behaviour import BehaviourConfig
from fl_gym.envs.registry import FAMILIES, resolve
from fl_gym.envs.scenario import BEHAVIOUR_FIELDS, EnvConfig
from fl_gym.federation import Federation
from fl_gym.records import RoundReport, TrainedRound
from fl_gym.validation import UserError, as_array, is_int_at_least, one_line, plain, require


class Predictor(Protocol):
    """Anything with SB3's ``predict`` (a PPO model or a fixed policy)."""

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Return ``(action, state)``."""


class VectorClock(Protocol):
    """A family's step of copies that train nothing, as arrays (``Family.vector_clock``).

    Built from the copies' unwrapped envs; an env alone is a clock's one copy.
    """

    def step(self, actions: np.ndarray, *, checked: bool = False
             ) -> list[tuple[np.ndarray, float, bool, bool, dict[str, Any]]]:
        """Every copy's step from its row of ``actions`` (``checked``: by ``FLEnv.check_actions``)."""

    def refresh(self, i: int) -> None:
        """Read copy ``i`` back after a reset or a step of its own."""


def require_fitting(name: str, predictor: Any, observation_space: spaces.Space,
                    action_space: spaces.Space | None = None, rows: ClientRows | None = None) -> None:
    """Refuse a trained model that does not act on these spaces (SB3 fails in ``predict``, or acts wrong).

    A predictor without spaces (a fixed policy) is taken as it is. A set policy (one whose policy
    ``fits``) reads any client count of its own row layout: it is checked against ``rows`` and
    ``action_space`` where they are given. A flat one must have the observation's shape, and the
    action space where it is given (not for a stage model that acts in a view of the env).
    """
    space = getattr(predictor, "observation_space", None)
    if space is None:
        return
    policy, act = getattr(predictor, "policy", None), getattr(predictor, "action_space", None)
    if hasattr(policy, "fits"):
        if rows is None or action_space is None or policy.fits(rows, observation_space, action_space):
            return
        raise UserError(f"{name} is a set policy of client rows {policy.client_rows}, trained with actions "
                        f"{act}; allowed: a model of this env, whose rows are {rows} and actions are "
                        f"{action_space}")
    if space.shape == observation_space.shape and action_space in (None, act):
        return
    trained, allowed = (("", "") if action_space is None else
                        (f" and actions {act}", f" and actions are {action_space}"))
    raise UserError(f"{name} was trained on observations of shape {space.shape}{trained}; allowed: a model "
                    f"of this env, whose observations have shape {observation_space.shape}{allowed}")


@dataclass(frozen=True)
class ClientRows:
    """How an observation lists one row of features per client, for policies over sets of clients.

    The observation is ``rows * width`` client features, then ``globals`` features of the round;
    the number of rows follows from the observation's length, so one policy reads any client
    count. Box actions that are per client are laid out value by value (every client's first
    value, then every client's second: e.g. all sizes, then all epoch shares); categorical
    actions client by client (as SB3 splits a ``MultiDiscrete``).

    Attributes:
        width: features per client row.
        globals: features of the whole round, after the rows.
        feature_major: the rows are listed feature by feature (every client's first feature,
            then every client's second), not client by client.
        per_client_action: the action has one part per row (else one action for the round).
    """

    width: int
    globals: int = 0
    feature_major: bool = False
    per_client_action: bool = True


class FLEnv(gym.Env[np.ndarray, np.ndarray]):
    """A Gymnasium env whose step runs one round of a :class:`~fl_gym.federation.Federation`.

    Args:
        config: the family's config (:attr:`config_class`); keyword arguments change it.
        scenario_seed: seeds the static scenario (partition, devices).
        render_mode: None only: an FL round is not drawn (:meth:`render` returns None).
        kwargs: fields of :attr:`config_class` and of the shared
            :class:`~fl_gym.envs.scenario.ScenarioConfig`, flat.

    Attributes:
        config_class: the family's config dataclass.
        family: the family's name, the namespace of its ``info`` keys.
        any_client_count: the spaces do not depend on ``num_clients``, so an episode may draw it
            (``num_clients_range``).
        device_behaviour: the family plays rounds whose clients may be unavailable, drop out or
            miss a deadline (:mod:`fl_gym.behaviour`); elsewhere those settings are refused.
        client_rows: how the observation lists per-client rows (set by ``_setup``; None where
            it does not), read by :class:`fl_gym.agents.sets.SetPolicy`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    config_class: ClassVar[type[EnvConfig]] = EnvConfig
    family: ClassVar[str] = ""
    any_client_count: ClassVar[bool] = False
    device_behaviour: ClassVar[bool] = False
    client_rows: ClientRows | None = None

    def __init__(self, config: EnvConfig | None = None, *, scenario_seed: int = 0,
                 render_mode: str | None = None, **kwargs: Any) -> None:
        require(render_mode is None, "render_mode", render_mode,
                "None (a round's metrics are in each step's info, and fl-gym compare plots them)")
        require(is_int_at_least(scenario_seed, 0), "scenario_seed", scenario_seed, "an integer >= 0")
        self.config = self._build_config(config, kwargs)
        span = self.config.scenario.num_clients_range
        require(span is None or self.any_client_count, "num_clients_range", span,
                f"None ({type(self).__name__}'s spaces depend on num_clients)")
        self._check_behaviour()
        self.scenario_seed = int(scenario_seed)
        self.federation = Federation(self.config.federation_config(), self.scenario_seed)
        self._check_client_counts()
        self._round, self._uploads, self._ended = 0, 0, False
        self._pending_record: Any = None  # see _pending
        self._pending_builder: Callable[[], Any] | None = None
        self._played_ahead: tuple | None = None  # a step a vector env played as arrays (envs/vector.py)
        self._own_clock: VectorClock | None = None  # the family's vector clock over this env alone (see step)
        self._setup()

    def _check_client_counts(self) -> None:
        """Refuse a ``num_clients_range`` whose ends the partition cannot split (a reset draws any count).

        A split's limits grow with the count, so the counts between are served too (unless a random
        draw misses a minimum size); the schemes whose count is fixed (``one_class``, ``natural``)
        take no range.
        """
        span = self.config.scenario.num_clients_range
        for count in dict.fromkeys(span or ()):
            try:
                self.federation.check_client_count(count)
            except UserError as err:
                raise UserError(f"num_clients_range={span} is out of range; allowed: client counts that "
                                f"partition {self.config.scenario.partition!r} can split the data into "
                                f"({one_line(err)})") from err

    def _check_behaviour(self) -> None:
        """Refuse device behaviour where the family does not play it (the first setting changed, named)."""
        scenario, default = self.config.scenario, BehaviourConfig()
        for name in BEHAVIOUR_FIELDS if not self.device_behaviour else ():
            value = getattr(scenario, name)
            require(value == getattr(default, name), name, value,
                    f"{getattr(default, name)!r} ({type(self).__name__} does not play device behaviour, "
                    "fl_gym.behaviour)")

    def _build_config(self, config: EnvConfig | None, kwargs: dict[str, Any]) -> EnvConfig:
        if config is not None and not isinstance(config, self.config_class):
            raise UserError(f"config={type(config).__name__} is out of range; allowed: a "
                             f"{self.config_class.__name__}")
        return self.config_class.from_kwargs(config, **kwargs)

    @property
    def _pending(self) -> Any:
        """The round waiting for the agent's decision (None before the first reset).

        A vector clock that played this copy's step as arrays (``envs/vector.py``) leaves a
        builder instead, and the first read builds the record from the clock's rows: while the
        vector env drives the copies nothing reads their records, and building them every step
        would be a large share of the clock's work.
        """
        if self._pending_builder is not None:
            self._pending_record, self._pending_builder = self._pending_builder(), None
        return self._pending_record

    @_pending.setter
    def _pending(self, record: Any) -> None:
        self._pending_record, self._pending_builder = record, None

    # ---- the vector protocol: how a vector env that plays many copies' steps as arrays talks to each copy

    def defer_pending(self, builder: Callable[[], Any]) -> None:
        """Hold ``builder`` instead of the pending round's record; the first read builds it (``_pending``)."""
        self._pending_builder = builder

    def pending_deferred_to(self, builder: Callable[[], Any]) -> bool:
        """Whether the pending round is still ``builder``'s (no reset or step of this env's own since)."""
        return self._pending_builder is builder

    def play_ahead(self, result: tuple) -> None:
        """The result of this env's next step, played already with the other copies; ``step`` returns it."""
        self._played_ahead = result

    @property
    def rounds_played(self) -> int:
        """Rounds played this episode."""
        return self._round

    @property
    def uploads(self) -> int:
        """Models uploaded this episode."""
        return self._uploads

    @property
    def ended(self) -> bool:
        """Whether the episode has ended (the next step needs a reset)."""
        return self._ended

    @property
    def pending(self) -> Any:
        """The family's record of the round waiting for the agent's decision (None before the first reset)."""
        return self._pending

    def count_round(self, uploads: int) -> bool:
        """Count a round played (by ``step``, or by a vector env); whether it ended the episode."""
        self._round += 1
        self._uploads += uploads
        self._ended = self._round >= self.rounds_per_episode
        return self._ended

    @property
    def rounds_per_episode(self) -> int:
        """Rounds until ``truncated``."""
        return self.config.scenario.rounds_per_episode

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Play the pending round under ``action``; return the next round's observation.

        Where the family has a vector clock and this env trains nothing (a timing backend), the
        clock plays the step as its one row: the path a vector env's copies take, the same
        episode as :meth:`play` bit for bit, at a fraction of its Python calls.
        """
        if self._played_ahead is not None:  # played already, with the other copies of a vector env
            result, self._played_ahead = self._played_ahead, None
            return result
        self._require_playable()
        clock = self._clock()
        if clock is not None:
            return clock.step(self.check_action(action)[None], checked=True)[0]
        reward, terminated, truncated, info = self.play(action)
        return self.observation(), reward, terminated, truncated, info

    def _clock(self) -> VectorClock | None:
        """The family's vector clock over this env alone; None where a step trains or none is registered."""
        family, fed = FAMILIES.get(self.family), self.federation
        if family is None or family.vector_clock is None or fed.config.train or fed.remote is not None:
            return None
        if self._own_clock is None:
            self._own_clock = resolve(family.vector_clock)([self])
        return self._own_clock

    def render(self) -> None:
        """Nothing, as Gymnasium asks of ``render_mode=None`` (the base class raised a bare error)."""

    def observation(self) -> np.ndarray:
        """The pending round's observation (:meth:`_observe`), kept in the space (:func:`within_space`)."""
        return within_space(self._observe(self._pending), self.observation_space)

    def play(self, action: np.ndarray, *, checked: bool = False) -> tuple[float, bool, bool, dict[str, Any]]:
        """:meth:`step` but the observation: ``(reward, terminated, truncated, info)``.

        A vector env plays its copies' rounds so, each copy's row of actions ``checked`` already
        (:meth:`check_actions`, before any copy plays), and observes them together
        (:meth:`observe_copies`); the env is left as its own ``step`` leaves it.
        """
        self._require_playable()
        report, outcome = self._play(self._pending, action if checked else self.check_action(action))
        last = self.count_round(int(report.aggregated.sum()))
        terms = self._reward_terms(report, outcome)
        reward = self.reward_of(terms)
        terminated = self._is_terminated(report)
        truncated = last and not terminated
        info = self._info(report, outcome, terms)
        self._ended = terminated or truncated
        self._pending = None  # the played round (its trained models, say) is freed before the next one trains
        self._pending = self._prepare()
        return float(reward), terminated, truncated, info

    def _require_playable(self) -> None:
        """Refuse a step before the first reset or after the episode ended (``ResetNeeded``)."""
        if self._pending_builder is None and self._pending_record is None:
            raise gym.error.ResetNeeded("step() before reset(); call reset() first")
        if self._ended:
            raise gym.error.ResetNeeded("step() after the episode ended; call reset()")

    @classmethod
    def observe_copies(cls, envs: Sequence[FLEnv]) -> np.ndarray:
        """``(copies, *obs_shape)``: the observation of each env's pending round (envs of one config).

        By default each env's own; a family whose observation is written over rows of copies
        overrides it, and its one env is the one-row case.
        """
        return np.array([env._observe(env._pending) for env in envs])

    @classmethod
    def observations(cls, envs: Sequence[FLEnv]) -> np.ndarray:
        """Every env's :meth:`observation`: :meth:`observe_copies` in the observation space."""
        return within_space(cls.observe_copies(envs), envs[0].observation_space)

    def observation_inputs(self) -> tuple:
        """What this env's observation reads: one copy's row of each field, for :meth:`observed_columns`.

        A family that writes its observation over rows of copies gathers here; others need not.
        """
        raise NotImplementedError(f"{type(self).__name__} observes each copy alone: no observation_inputs")

    @staticmethod
    def observed_columns(envs: Sequence[FLEnv]) -> Iterator[np.ndarray]:
        """Each field of the envs' :meth:`observation_inputs`, stacked over the copies (a leading axis).

        The inputs of an :meth:`observe_copies` written over rows.
        """
        return (np.array(column) for column in zip(*(env.observation_inputs() for env in envs), strict=True))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: fresh models and dynamics, same scenario (unless randomised); observe round 1."""
        require(not options, "options", options,
                "None or {} (no reset options: the scenario is set by the env's "
                "arguments, e.g. scenario_seed or randomize_scenario)")
        require(seed is None or is_int_at_least(seed, 0), "seed", seed, "None or an integer >= 0")
        super().reset(seed=plain(seed))  # gymnasium's takes no numpy integer, which our checks allow
        if self.config.scenario.randomize_scenario:
            self._draw_scenario(int(self.np_random.integers(2**63 - 1)))
        self.federation.reset(seed=int(self.np_random.integers(2**63 - 1)), sampler=self.np_random)
        if self.config.scenario.redraw_partition:
            self.federation.redraw_partition(int(self.np_random.integers(2**63 - 1)))
        self._round, self._uploads, self._ended = 0, 0, False
        self._played_ahead = None  # a vector step cut short may have left one: the new episode's is not it
        self._reset_state()
        self._pending = None  # the last episode's unplayed round is freed before the first one trains
        self._pending = self._prepare()
        return self.observation(), {"round": 0}

    def _draw_scenario(self, seed: int) -> None:
        """A new static scenario (and client count) from ``seed``; the data set and spaces stay.

        Within ``scenario_seed_range`` the federation is the one that scenario seed builds.
        """
        span = self.config.scenario.scenario_seed_range
        if span is not None:
            seed = span[0] + seed % (span[1] - span[0])
        rng = np.random.default_rng(seed)
        low, high = self.config.scenario.client_counts()
        num_clients = int(rng.integers(low, high + 1))
        config = self.config if num_clients == self.config.scenario.num_clients else \
            self.config.replace(num_clients=num_clients, num_clients_range=None, scenario_seed_range=None,
                                randomize_scenario=False)
        old = self.federation
        scenario_seed = seed if span is not None else int(rng.integers(2**63 - 1))
        self.federation = Federation(config.federation_config(), scenario_seed, dataset=old.dataset)
        # a batched vector env's copy stays merged, its lasting state in the copies' shared pool
        self.federation.batcher, self.federation.buffers = old.batcher, old.buffers
        spaces_before = self.observation_space, self.action_space
        self._setup()  # the family's constants for the new federation
        require(spaces_before[0] == self.observation_space and spaces_before[1] == self.action_space,
                "num_clients_range", self.config.scenario.num_clients_range,
                f"client counts that keep {type(self).__name__}'s spaces")
        self.observation_space, self.action_space = spaces_before  # keep the objects (a seeded action space)

    # ---- actions -----------------------------------------------------------------------------

    def check_action(self, action: Any) -> np.ndarray:
        """The action as an array of the action space's shape, or a ``ValueError`` naming both."""
        a = as_array("action", action, lambda: f"numbers of {self.action_space}")
        return self.check_actions(a[None]).reshape(a.shape)

    def check_actions(self, actions: Any) -> np.ndarray:
        """Rows ``(n, *shape)`` of actions, one per copy of this env, each as :meth:`check_action` takes it.

        One pass over the rows (a vector env's copies); a bad row raises the ``ValueError`` that
        :meth:`check_action` raises for it, the first such row's.
        """
        a = as_array("actions", actions, lambda: f"rows of actions of {self.action_space}")
        space, kind = self.action_space, a.dtype.kind
        if a.ndim == 0:
            raise UserError(f"actions={_short(a)} is one value; allowed: rows of actions of {space}")
        if kind not in "biuf":
            raise UserError(f"action={_short(a[0])} has dtype {a.dtype}; allowed: numbers of {space}")
        if a.shape[1:] != space.shape:
            raise UserError(f"action has shape {a.shape[1:]}; allowed: {space}")
        flat = a.reshape(len(a), -1)
        if kind == "f":
            _first_bad(a, np.isfinite(flat), "is not finite; allowed: {}", space)
        if not isinstance(space, (spaces.MultiDiscrete, spaces.Discrete, spaces.MultiBinary)):
            return a
        # SB3 samples MultiBinary actions as floats 0.0/1.0: integer values of any dtype are fine
        whole = a.astype(space.dtype)
        ints = whole.reshape(len(a), -1)
        if isinstance(space, spaces.MultiBinary):
            fits = (ints == 0) | (ints == 1)
        else:
            start = np.reshape(space.start, -1)
            fits = (start <= ints) & (ints - start < np.reshape(space.nvec if isinstance(
                space, spaces.MultiDiscrete) else space.n, -1))
        fits &= ints == flat  # the cast changed no value (no fraction, no overflow)
        _first_bad(a, fits, "is out of range; allowed: integers of {}", space)
        return whole

    # ---- hooks -------------------------------------------------------------------------------

    def _setup(self) -> None:
        raise NotImplementedError

    def _reset_state(self) -> None:
        """Clear per-episode state of the family (before the first round is prepared)."""

    def _prepare(self) -> Any:
        raise NotImplementedError

    def _observe(self, pending: Any) -> np.ndarray:
        raise NotImplementedError

    def _play(self, pending: Any, action: np.ndarray) -> tuple[RoundReport, Any]:
        """Finish ``pending`` under ``action``: the report and the family's outcome (module docstring)."""
        raise NotImplementedError

    def _reward_terms(self, report: RoundReport, outcome: Any) -> dict[str, float]:
        raise NotImplementedError

    def _reward_weights(self) -> Mapping[str, float]:
        raise NotImplementedError

    def reward_of(self, terms: Mapping[str, Any]) -> Any:
        """The terms' weighted sum (a term of weight 0 need not be measured; rows of terms give rows)."""
        return sum(weight * terms[name] for name, weight in self._reward_weights().items() if weight)

    def _accuracy(self, report: RoundReport) -> float:
        """The headline accuracy (default: the first global model's)."""
        return report.accuracy

    def _is_terminated(self, report: RoundReport) -> bool:
        return False

    def _family_info(self, report: RoundReport, outcome: Any, terms: Mapping[str, float]) -> dict[str, Any]:
        return {}

    def _info(self, report: RoundReport, outcome: Any, terms: dict[str, float]) -> dict[str, Any]:
        info: dict[str, Any] = RoundInfo(self._round, report.clock, report.round_time,
                                         report.straggling_latency,
                                         report.upload_bytes, self._uploads, report.selected.nonzero()[0],
                                         terms)._asdict()
        if self.federation.config.train:  # learning metrics exist only when something learns
            info["accuracy"] = self._accuracy(report)
        # keys "<family>/..." (checked by tests/test_envs.py)
        info.update(self._family_info(report, outcome, terms))
        return info


class RoundInfo(NamedTuple):
    """The ``info`` every env's step starts with, in this order (the family's keys follow).

    Attributes:
        round: rounds played this episode.
        sim_time: simulated seconds since reset.
        round_time: this round's simulated seconds.
        straggling_latency: the slowest minus the fastest selected client's seconds.
        upload_bytes: bytes uploaded this round.
        uploads: models uploaded this episode.
        clients: the ids of the clients selected this round.
        reward_terms: the reward's terms by name.
    """

    round: int
    sim_time: float
    round_time: float
    straggling_latency: float
    upload_bytes: float
    uploads: int
    clients: np.ndarray
    reward_terms: dict[str, float]


class ValidationTerms(NamedTuple):
    """One round's validation reward terms.

    Attributes:
        acc_gain: validation accuracy after the round minus before it.
        loss_drop: validation cross-entropy before the round minus after it; over an episode they
            sum to the initial minus the final loss, whatever the path.
        loss_area: ``loss_drop`` weighted by the share of the episode it lasts, ``(T - t + 1) / T`` in
            round ``t`` of ``T``: they sum to the mean over the rounds of the loss's fall below its
            start, the loss analogue of an accuracy curve's area, so reaching a low loss early counts.
        acc_area: ``acc_gain`` weighted alike: they sum to the mean over the rounds of the validation
            accuracy above its start, the area under the accuracy curve that benchmark tasks score.
    """

    acc_gain: float
    loss_drop: float
    loss_area: float
    acc_area: float


def loss_vs_all(federation: Federation, trained: TrainedRound, aggregate: np.ndarray,
                weight: np.ndarray | None = None) -> float:
    """The validation cross-entropy of averaging every trained client minus that of averaging ``aggregate``.

    A difference reward (the "wonderful life utility" of Wolpert and Tumer, 2002): the loss a
    choice of uploads saved this round against keeping them all, measured on the same round's
    models, so the round's luck (who was drawn, how far the model still has to go) cancels. Both
    averages are :meth:`~fl_gym.federation.Federation.validate_averages`' what-ifs; call it
    before the round is finished.
    """
    everyone = trained.steps > 0
    losses = federation.validate_averages(trained, np.stack([everyone, np.asarray(aggregate, bool)]),
                                          weight)[:, 1]
    losses = charged_loss(losses, federation.num_classes)
    return float(losses[0] - losses[1])


LOSS_CAP = 10.0  # in units of ln C: the most validation cross-entropy a reward charges


def charged_loss(loss: float | np.ndarray, num_classes: int) -> float | np.ndarray:
    """A validation cross-entropy as the rewards read it: at most ``LOSS_CAP x ln C``.

    A diverged model's (NaN parameters, NaN loss) is charged the cap, as much as the worst finite
    one, so the loss rewards stay finite and divergence is never cheaper than a bad model; a
    model whose true class gets a geometric mean probability of at least ``C^-LOSS_CAP`` is read
    as it is.
    """
    cap = LOSS_CAP * math.log(num_classes)
    return np.where(np.asarray(loss) <= cap, loss, cap)[()]  # NaN compares False: the cap


class ValidationGain:
    """The validation accuracy and loss a gain reward is measured from.

    For a federation with a validation split: read at the episode's start, moved on by every report.

    Attributes:
        last: the last validation accuracy.
        last_loss: the last validation cross-entropy, as the rewards charge it (:func:`charged_loss`).
        rounds: the episode's rounds ``T`` (the weight of ``loss_area``).
        played: the rounds reported so far.
        classes: the class count ``C`` of the loss's cap (None without a validation split).
    """

    def __init__(self, federation: Federation, rounds: int) -> None:
        self.classes = None if federation.val_indices is None else federation.num_classes
        self.last, loss = federation.validation()
        self.last_loss = self._charged(loss)
        self.rounds, self.played = rounds, 0

    def _charged(self, loss: float) -> float:
        """The loss as the rewards read it (:func:`charged_loss`; NaN without a validation split)."""
        return loss if self.classes is None else float(charged_loss(loss, self.classes))

    def update(self, report: RoundReport) -> ValidationTerms:
        """This round's terms; the report's values become the reference."""
        loss = self._charged(report.val_loss)
        gain, drop = report.val_accuracy - self.last, self.last_loss - loss
        self.last, self.last_loss = report.val_accuracy, loss
        share = max(self.rounds - self.played, 0) / self.rounds
        self.played += 1
        return ValidationTerms(gain, drop, drop * share, gain * share)

    @property
    def observed(self) -> float:
        """The last accuracy as an observation feature (0 if there is none)."""
        return 0.0 if math.isnan(self.last) else self.last


def favor(accuracy: float, target: float) -> float:
    """FAVOR's reward shape (Wang et al., INFOCOM 2020): ``64^(accuracy - target) - 1``."""
    return 64.0 ** (accuracy - target) - 1.0


def within_space(observation: np.ndarray, space: spaces.Box) -> np.ndarray:
    """``observation`` (one or rows of them) with its undefined features at 0 and infinite ones at the bounds.

    A local step at too high a rate can turn a model's parameters to NaN, and every loss, norm and
    cosine computed from them with it; the episode goes on (the model stays diverged, its accuracy
    at chance, so the rewards, from accuracies, stay finite and low), and its observations stay
    inside the space an agent's network reads.
    """
    if np.isfinite(observation).all():
        return observation
    return np.clip(np.nan_to_num(observation, nan=0.0), space.low, space.high).astype(space.dtype)


def _short(a: object) -> str:
    """An action's values, or its shape past 16 of them (a row of an object array is any object: ``None``)."""
    a = np.asarray(a)
    return repr(a.tolist()) if a.size <= 16 else f"array of shape {a.shape}"


def _first_bad(rows: np.ndarray, good: np.ndarray, problem: str, space: spaces.Space) -> None:
    """Raise ``action=<the first row with a value not good> <problem with the space>``, if there is one.

    ``good`` is ``(rows, values)``. The message is built only then: a space's repr costs more than
    the whole check.
    """
    if not good.all():
        raise UserError(f"action={_short(rows[np.argmin(good.all(axis=1))])} {problem.format(space)}")
