"""The scenario every family shares, and the base of every family's config.

A family's config (a frozen dataclass deriving from :class:`EnvConfig`) holds its own fields
plus one :class:`ScenarioConfig`: the data set, partition, clients, device clock, local
optimiser, episode length, device and threads. ``gym.make(ID, **kwargs)`` takes the fields of
both flat; :meth:`EnvConfig.from_kwargs` routes each to its place and rejects unknown names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from fl_gym.behaviour import BehaviourConfig
from fl_gym.clock import ClockConfig
from fl_gym.config import FederationConfig
from fl_gym.data.catalog import DATASETS
from fl_gym.data.noise import LABEL_NOISE
from fl_gym.data.partition import KINDS, SCHEME_FIELDS, PartitionScheme, partition_scheme, scheme_fields
from fl_gym.engine.optim import OptimizerConfig
from fl_gym.validation import (
    UserError,
    is_int_at_least,
    plain_fields,
    require,
    require_choice,
    require_device,
    require_rate,
    require_rounds,
    require_share,
    require_threads,
    require_types,
)

SelfConfig = TypeVar("SelfConfig", bound="EnvConfig")
CLOCK_FIELDS = tuple(f.name for f in dataclasses.fields(ClockConfig))
BEHAVIOUR_FIELDS = tuple(f.name for f in dataclasses.fields(BehaviourConfig))


@dataclass(frozen=True)
class ScenarioConfig:
    """The federation an env runs on (family-neutral).

    Attributes:
        dataset: data set (``digits`` and ``synthetic`` embedded; ``mnist``, ``cifar10`` ... by name).
        data_root: folder of torchvision files (default ``$FL_GYM_DATA`` or ``~/.cache/fl_gym``).
        num_clients: ``K``.
        partition: how training data is split, a scheme of :data:`fl_gym.data.partition.SCHEMES`.
            The schemes' knobs follow, each None = the scheme's default; a knob that the chosen
            scheme does not take is an error, and choosing another scheme drops the knobs that a
            preset set for its own.
        alpha: Dirichlet concentration (``dirichlet``: 0.5; smaller = more label skew).
        balance: cap a client at ``N/K`` samples while drawing (``dirichlet``: False).
        min_size: smallest client, in training samples (``dirichlet``, ``power_law``: 10).
        max_attempts: draws before giving up on ``min_size`` (``dirichlet``: 100).
        classes_per_client: classes per client (``classes``, ``mixed``: 2; 1 = one class each).
        samples_per_client: samples per client (``classes``, ``mixed``: an equal share).
        shards_per_client: label-sorted shards per client (``shards``: 2).
        num_iid: IID clients listed first (``mixed``: 0; the rest hold ``classes_per_client``
            classes each).
        exponent: Pareto shape of the client sizes (``power_law``: 1.5; smaller is more skewed).
        redraw_partition: draw a new partition of the same kind at every ``reset`` from the
            episode seed (clients and devices stay), so a policy cannot learn which client id
            holds what; costs one partition per reset.
        randomize_scenario: draw a whole new static scenario (device profiles, validation split and
            partition; with ``num_clients_range`` also the client count) at every ``reset`` from
            the episode seed, so an agent trains across a distribution of federations instead of
            one. The env's first scenario still comes from ``scenario_seed``; evaluate on fixed
            held-out ``scenario_seed``s with this off. Costs one federation build per reset (the
            data set is shared, not reloaded).
        num_clients_range: ``(low, high)``, inclusive: with ``randomize_scenario``, each episode's
            ``K`` is drawn uniformly from it (families whose spaces do not depend on ``K`` only).
            The env splits the data for both ends when it is built, so a range the partition
            cannot serve fails then, not at a later reset; ``one_class`` and ``natural`` take none.
        scenario_seed_range: ``(low, high)``, high exclusive: with ``randomize_scenario``, each
            episode's federation is the one ``scenario_seed=s`` builds, ``s`` drawn uniformly from
            the range (a benchmark's training federations, kept apart from its test seeds); None
            draws from all 63-bit seeds.
        noisy_clients: share of the clients whose training labels are all replaced (drawn with
            the scenario; ``federation.noisy`` tells which): corrupted devices that a selection or
            weighting policy can learn to detect from their updates.
        label_noise: ``random`` (uniform labels) or ``flip`` (class ``c - 1 - y``); see
            :class:`~fl_gym.config.FederationConfig`.
        heterogeneity: ``H``, fastest/slowest static device speed.
        sigma_dyn: log-std of per-round availability.
        sigma_drift: log-std of drift between a round's probe and its training.
        sigma_meas: log-std of timing noise.
        load_persistence: round-to-round autocorrelation in ``[0, 1)`` of each device's log
            availability and drift (0 = independent rounds; 0.9 = a busy device stays busy for
            about ten rounds, so its history predicts it).
        seconds_per_unit: seconds per sample per unit of model cost on the fastest device.
        bandwidth: upload bytes/s of the best link (``inf`` = communication is free).
        bandwidth_heterogeneity: ratio of the best to the worst link (log-uniform between).
        download_ratio: download bandwidth as a multiple of upload bandwidth.
        aggregation_time: server seconds per round.
        capacity_trace: None, or the path of a FedScale capacity trace whose devices the clients
            play (their relative speeds and links; :mod:`fl_gym.traces`).
        availability: long-run share of rounds a client is reachable, in ``(0, 1]`` (1 = always;
            :mod:`fl_gym.behaviour`, for families whose ``device_behaviour`` is set).
        availability_persistence: round-to-round autocorrelation of a client's availability.
        dropout: chance that a selected client drops out before it uploads, however short its round.
        dropout_rate: growth of that chance per simulated second of the client's round.
        deadline: the server's timeout per round in simulated seconds (``inf`` = none).
        late: a client past the deadline: ``drop`` (lost) or ``partial`` (uploads the steps it finished).
        fednova: the server normalises each aggregated update by the local steps it ran (FedNova).
        link_sigma: log-std of each client's per-round bandwidth factor (0 = static links).
        link_persistence: round-to-round autocorrelation in ``[0, 1)`` of that factor's log.
        availability_trace: None, or the path of a FedScale availability trace: a client is
            reachable while its device is online (instead of ``availability``'s chain).
        lr: local learning rate.
        batch_size: local minibatch size.
        optimizer: local optimiser, ``sgd`` or ``adam``.
        momentum: SGD momentum.
        rounds_per_episode: rounds until ``truncated``.
        eval_every: evaluate the global models every this many rounds (real training).
        device: torch device of data and training.
        num_threads: torch threads set when the env is built (None = leave as is).
    """

    dataset: str = "digits"
    data_root: str | None = None
    num_clients: int = 10
    partition: str = "dirichlet"
    alpha: float | None = None
    balance: bool | None = None
    min_size: int | None = None
    max_attempts: int | None = None
    classes_per_client: int | None = None
    samples_per_client: int | None = None
    shards_per_client: int | None = None
    num_iid: int | None = None
    exponent: float | None = None
    redraw_partition: bool = False
    randomize_scenario: bool = False
    num_clients_range: tuple[int, int] | None = None
    scenario_seed_range: tuple[int, int] | None = None
    noisy_clients: float = 0.0
    label_noise: str = "random"
    heterogeneity: float = 10.0
    sigma_dyn: float = 0.2
    sigma_drift: float = 0.1
    sigma_meas: float = 0.0
    load_persistence: float = 0.0
    seconds_per_unit: float = 1e-3
    bandwidth: float = float("inf")
    bandwidth_heterogeneity: float = 1.0
    download_ratio: float = 1.0
    aggregation_time: float = 0.0
    capacity_trace: str | None = None
    availability: float = 1.0
    availability_persistence: float = 0.0
    dropout: float = 0.0
    dropout_rate: float = 0.0
    deadline: float = float("inf")
    late: str = "drop"
    fednova: bool = False
    link_sigma: float = 0.0
    link_persistence: float = 0.0
    availability_trace: str | None = None
    lr: float = 0.05
    batch_size: int = 10
    optimizer: str = "sgd"
    momentum: float = 0.0
    rounds_per_episode: int = 100
    eval_every: int = 1
    device: str = "cpu"
    num_threads: int | None = None

    def __post_init__(self) -> None:
        plain_fields(self)  # a numpy scalar sizes no gymnasium space and writes no JSON
        require_choice("dataset", self.dataset, DATASETS)
        require(is_int_at_least(self.num_clients, 2), "num_clients", self.num_clients, "an integer >= 2")
        require_choice("partition", self.partition, KINDS)
        self.partition_config()
        self._check_clients_range()
        self._check_seed_range()
        require_share("noisy_clients", self.noisy_clients)
        require_choice("label_noise", self.label_noise, LABEL_NOISE)
        fewest = self.client_counts()[0]
        require((self.num_iid or 0) <= fewest, "num_iid", self.num_iid,
                f"at most the fewest clients, {fewest}")
        require(isinstance(self.redraw_partition, bool), "redraw_partition", self.redraw_partition,
                "True or False")
        require(isinstance(self.randomize_scenario, bool), "randomize_scenario", self.randomize_scenario,
                "True or False")
        self.clock_config()
        self.behaviour_config()
        require_rate("lr", self.lr)
        require(is_int_at_least(self.batch_size, 1), "batch_size", self.batch_size, "an integer >= 1")
        OptimizerConfig(self.optimizer, self.momentum)
        require_rounds("rounds_per_episode", self.rounds_per_episode)
        require(is_int_at_least(self.eval_every, 1), "eval_every", self.eval_every, "an integer >= 1")
        require_device("device", self.device)
        require_threads("num_threads", self.num_threads)

    def _check_clients_range(self) -> None:
        span = self.num_clients_range
        if span is None:
            return
        require(isinstance(span, (tuple, list)) and len(span) == 2
                and all(is_int_at_least(n, 2) for n in span)
                and span[0] <= span[1], "num_clients_range", span,
                "None or (low, high) with 2 <= low <= high")
        require(self.randomize_scenario, "num_clients_range", span, "None unless randomize_scenario=True")
        fixed = self.partition_config().fixed_count
        require(not fixed or span[0] == span[1], "num_clients_range", span,
                f"None or a single count for partition {self.partition!r}, whose client count is {fixed}")
        object.__setattr__(self, "num_clients_range", (int(span[0]), int(span[1])))

    def _check_seed_range(self) -> None:
        span = self.scenario_seed_range
        if span is None:
            return
        require(isinstance(span, (tuple, list)) and len(span) == 2
                and all(is_int_at_least(n, 0) for n in span)
                and span[0] < span[1], "scenario_seed_range", span,
                "None or (low, high) with 0 <= low < high")
        require(self.randomize_scenario, "scenario_seed_range", span, "None unless randomize_scenario=True")
        object.__setattr__(self, "scenario_seed_range", (int(span[0]), int(span[1])))

    def client_counts(self) -> tuple[int, int]:
        """The smallest and largest ``K`` an episode can have."""
        return self.num_clients_range or (self.num_clients, self.num_clients)

    def partition_config(self) -> PartitionScheme:
        """The partition scheme, with the knobs set here (a knob it does not take is an error)."""
        knobs = {name: getattr(self, name) for name in SCHEME_FIELDS if getattr(self, name) is not None}
        return partition_scheme(self.partition, **knobs)

    def clock_config(self) -> ClockConfig:
        """The device cost model: every field of :class:`~fl_gym.clock.ClockConfig`, by its own name."""
        return ClockConfig(**{name: getattr(self, name) for name in CLOCK_FIELDS})

    def behaviour_config(self) -> BehaviourConfig:
        """The devices' behaviour: every field of :class:`~fl_gym.behaviour.BehaviourConfig` by its name."""
        return BehaviourConfig(**{name: getattr(self, name) for name in BEHAVIOUR_FIELDS})

    def federation_config(self, **family: Any) -> FederationConfig:
        """The simulator's config: this scenario plus the family's fields (models, algorithm, ...)."""
        return FederationConfig(
            dataset=self.dataset, data_root=self.data_root, num_clients=self.num_clients,
            partition=self.partition_config(), clock=self.clock_config(), behaviour=self.behaviour_config(),
            batch_size=self.batch_size,
            optimizer=OptimizerConfig(self.optimizer, self.momentum), eval_every=self.eval_every,
            device=self.device,
            num_threads=self.num_threads, noisy_clients=self.noisy_clients, label_noise=self.label_noise,
            **family)


SCENARIO_FIELDS = tuple(f.name for f in dataclasses.fields(ScenarioConfig))


def over_scenario(defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario fields ``given`` over ``defaults``, less the default knobs of schemes other than ``given``'s.

    A preset's ``alpha`` does not follow a user who picks ``partition="shards"``.
    """
    merged = {**defaults, **given}
    if "partition" in given:
        own = scheme_fields(given["partition"])
        for name in SCHEME_FIELDS:
            if name not in given and name not in own:
                merged.pop(name, None)
    return merged


@dataclass(frozen=True)
class EnvConfig:
    """Base of a family's config: its own fields (declared by the subclass) and the scenario.

    Subclasses set :attr:`scenario_defaults` (their defaults for shared fields) or override
    :meth:`default_scenario` when the defaults depend on their own fields (a preset). A
    subclass's ``__post_init__`` calls ``super().__post_init__()`` before checks that read the
    scenario.

    Attributes:
        scenario: the shared scenario; None = :meth:`default_scenario`.
        training_kwargs: the arguments under which a family that may run its clock alone trains
            models (empty: it always trains), for an error to name when training is needed.
    """

    scenario: ScenarioConfig | None = None
    scenario_defaults: ClassVar[Mapping[str, Any]] = {}
    training_kwargs: ClassVar[Mapping[str, Any]] = {}

    def __post_init__(self) -> None:
        plain_fields(self)  # as the scenario's
        if self.scenario is None:
            own = {name: getattr(self, name) for name in self.own_fields()}
            object.__setattr__(self, "scenario", ScenarioConfig(**self.default_scenario(own)))

    @classmethod
    def default_scenario(cls, own: Mapping[str, Any]) -> dict[str, Any]:
        """Shared-field defaults of this family, given its own field values ``own`` (e.g. a preset)."""
        return dict(cls.scenario_defaults)

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The family's own field names."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "scenario")

    @classmethod
    def from_kwargs(cls: type[SelfConfig], base: SelfConfig | None = None, **kwargs: Any) -> SelfConfig:
        """A validated config from flat keyword arguments (family and scenario fields alike).

        Args:
            base: a config to start from (its values are the defaults).
            kwargs: field values; ``scenario=ScenarioConfig(...)`` replaces the whole scenario.

        Raises:
            ValueError: an unknown argument (naming the allowed ones) or a value out of range.
        """
        own, shared = set(cls.own_fields()), set(SCENARIO_FIELDS)
        unknown = sorted(set(kwargs) - own - shared - {"scenario"})
        if unknown:
            allowed = ", ".join((*cls.own_fields(), *SCENARIO_FIELDS, "scenario"))
            raise UserError(f"{cls.__name__}: argument {unknown[0]!r} is not accepted; allowed: {allowed}")
        mine = {k: v for k, v in kwargs.items() if k in own}
        scenario_kwargs = {k: v for k, v in kwargs.items() if k in shared}
        require_types(cls, mine)
        require_types(ScenarioConfig, scenario_kwargs)
        if base is not None:
            mine = {**{k: getattr(base, k) for k in own}, **mine}
        start = kwargs.get("scenario") or (base.scenario if base is not None else None)
        if start is None:
            start = ScenarioConfig(**over_scenario(cls.default_scenario(mine), scenario_kwargs))
        elif scenario_kwargs:
            start = ScenarioConfig(**over_scenario(dataclasses.asdict(start), scenario_kwargs))
        return cls(scenario=start, **mine)

    def federation_config(self) -> FederationConfig:
        """The simulator the env runs on (families add their models, algorithm, ...)."""
        return self.scenario.federation_config()

    def replace(self: SelfConfig, **changes: Any) -> SelfConfig:
        """A validated copy with some (family or scenario) fields changed."""
        return type(self).from_kwargs(self, **changes)
