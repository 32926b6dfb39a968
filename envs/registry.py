"""The family registry: what each method family declares once, and what generic code reads.

A family is one module per layer (env, fixed policies, optionally agents and results) plus one
:func:`register_family` call. The command line, evaluation, TensorBoard callbacks, benchmarks and
the generic tests read :data:`FAMILIES`; no generic module names a family. Everything a family
points to outside ``fl_gym.envs`` (policies, recipes' composers, results) is an entry-point
string ``"module:attribute"`` resolved on first use, as Gymnasium's ``entry_point`` is, so
imports keep flowing one way (``fl_gym`` <- ``envs`` <- ``baselines``, ``agents`` <- ``training``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from fl_gym.validation import UserError, refuse, require, require_fields, require_types


def resolve(entry_point: str | Any) -> Any:
    """The object an entry-point string ``"module:attribute"`` names (other values as they are).

    A string that names none is refused by name; an import error inside the module it names (a
    missing optional extra) is that module's own and passes through.
    """
    if not isinstance(entry_point, str):
        return entry_point
    module, _, attribute = entry_point.partition(":")
    require(bool(module and attribute), "entry point", entry_point, "'module:attribute'")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or not (module == err.name or module.startswith(f"{err.name}.")):
            raise  # a module it imports is missing
        refuse("entry point", entry_point,
               f"'module:attribute' of an importable module (no module {err.name!r})")
    require(hasattr(found, attribute), "entry point", entry_point,
            f"'module:attribute' of an attribute the module has ({module} has no {attribute!r})")
    return getattr(found, attribute)


@dataclass(frozen=True)
class PolicyEntry:
    """A fixed policy of a family.

    Attributes:
        factory: ``factory(env, **kwargs) -> predictor`` (or its entry point).
        doc: one line for ``fl-gym envs`` and the docs: what it does, its paper, its kwargs.
        env_kwargs: the env variant it runs on (a baseline that is an algorithm variant, e.g.
            FedProx's local solver); ``compare`` and the benchmark apply it over the user's
            ``--env-kwargs`` and the task's arguments (the variant is what the policy is).
        env_ids: the ids it acts on (empty = every id of the family).
    """

    factory: Callable[..., Any] | str
    doc: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_ids: tuple[str, ...] = ()

    def build(self, env: gym.Env, **kwargs: Any) -> Any:
        """The policy for ``env``."""
        return resolve(self.factory)(env, **kwargs)

    def parameters(self) -> list[str] | None:
        """The keywords the factory takes after the env (None: any, a ``**kwargs`` factory)."""
        params = list(inspect.signature(resolve(self.factory)).parameters.values())[1:]
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        return [p.name for p in params if p.kind is not p.VAR_POSITIONAL]

    def check(self, label: str, kwargs: Mapping[str, Any]) -> None:
        """Refuse a keyword the factory does not take, or a value its annotation does not allow.

        Else an unknown keyword is a ``TypeError`` when built, and ``alpha=true`` weighs as 1.0.
        """
        allowed = self.parameters()
        unknown = [] if allowed is None else [k for k in kwargs if k not in allowed]
        if unknown:
            raise UserError(f"policy {label!r}: {unknown[0]!r} is not one of its parameters; allowed: "
                            f"{', '.join(allowed) or 'none'}")
        factory = resolve(self.factory)
        require_types(factory.__init__ if isinstance(factory, type) else factory, kwargs, f"policy {label!r}")


@dataclass(frozen=True)
class Stage:
    """One stage of a multi-stage recipe: an agent trained with the earlier stages frozen in its env.

    Attributes:
        name: the stage's name (its folder and model file).
        env_id: the env it trains on; its hyperparameters are the YAML block of this id.
        inject: env kwarg -> earlier stage whose frozen policy the env gets under that kwarg.
    """

    name: str
    env_id: str
    inject: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """A training recipe that composes several agents into one policy for ``target``.

    Attributes:
        name: ``fl-gym train TARGET --algo NAME``.
        target: the env id the composed policy acts on.
        stages: trained in order, stage ``k`` with stages ``< k`` frozen inside its env.
        compose: ``compose(env, *stage_models) -> predictor`` on ``target`` (or its entry point).
        doc: one line.
    """

    name: str
    target: str
    stages: tuple[Stage, ...]
    compose: Callable[..., Any] | str
    doc: str = ""


@dataclass(frozen=True)
class Metric:
    """An ``info`` key a family's tables, plots and TensorBoard show.

    Attributes:
        key: the ``info`` key (scalar).
        label: column label.
        final: an episode is summarised by its last value (cumulative or accuracy metrics)
            rather than its mean over rounds.
        env_ids: the ids that report it (empty = every id of the family).
    """

    key: str
    label: str
    final: bool = False
    env_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """Everything generic code needs to know about a method family.

    Attributes:
        name: short name (``fl-gym reproduce NAME``, the ``info`` namespace ``NAME/...``).
        paper: the method and its paper.
        envs: env id -> entry point of its class.
        policies: fixed policy name -> :class:`PolicyEntry` (or the entry point of that mapping).
        recipes: multi-stage training recipes.
        metrics: the family's ``info`` keys for tables and TensorBoard, beside the generic ones.
        accuracy_label: what the generic ``accuracy`` key measures in this family (column label).
        bench: extra ``fl-gym bench`` env cases ``(env_id, kwargs, note)`` beside every id at its
            defaults (e.g. real training where the default is timing only).
        reproduce: entry point of ``reproduce(args: list[str]) -> int`` for ``fl-gym reproduce NAME``.
        demo: entry point of the family's section of ``fl-gym demo``:
            ``demo(out: Path, steps: int, episodes: int, accuracy_rounds: int) -> None``.
        docs: the family's env documentation page.
        vector_clock: entry point of a class that plays one step of many copies that train
            nothing (a timing backend) as arrays, a :class:`~fl_gym.envs.base.VectorClock`:
            ``cls(unwrapped_envs)`` with ``step(actions, checked=False)`` returning each copy's
            step and ``refresh(i)`` after copy ``i`` resets
            (:class:`~fl_gym.envs.vector.BatchedVecEnv` uses it, and such an env alone steps as
            its one row).
        agent_kwargs: env arguments a trained agent is bound to (without them its observation or
            action means something else); ``fl-gym compare`` evaluates a loaded run with its values.
        tasks: entry point of the family's benchmark tasks, a tuple of
            :class:`fl_gym.training.benchmark.Task` (``fl-gym benchmark``).
    """

    name: str
    paper: str
    envs: Mapping[str, str]
    policies: Mapping[str, PolicyEntry] | str = field(default_factory=dict)
    recipes: tuple[Recipe, ...] = ()
    metrics: tuple[Metric, ...] = ()
    accuracy_label: str = "accuracy"
    bench: tuple[tuple[str, Mapping[str, Any], str], ...] = ()
    reproduce: str | None = None
    demo: str | None = None
    docs: str = ""
    vector_clock: str | None = None
    agent_kwargs: tuple[str, ...] = ()
    tasks: str | None = None

    def fixed_policies(self, env_id: str) -> dict[str, PolicyEntry]:
        """The fixed policies that act on ``env_id``."""
        table = resolve(self.policies)  # an entry point is resolved on first use, so checked here
        require(isinstance(table, Mapping) and all(isinstance(p, PolicyEntry) for p in table.values()),
                f"family {self.name!r}: policies", self.policies,
                "a mapping of policy names to PolicyEntry, or the entry point of one")
        return {n: p for n, p in table.items() if not p.env_ids or env_id in p.env_ids}

    def recipe(self, name: str) -> Recipe | None:
        """The recipe called ``name``, if any."""
        return next((r for r in self.recipes if r.name == name), None)


GENERIC_METRICS = (Metric("return", "return"), Metric("round_time", "round time (s)"),
                   Metric("straggling_latency", "straggling latency (s)"),
                   Metric("sim_time", "total time (s)", final=True), Metric("uploads", "uploads", final=True),
                   Metric("accuracy", "accuracy", final=True))
FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> None:
    """Add ``family`` to the registry and register its env ids with Gymnasium.

    Registering the same family again changes nothing. Another family under a taken name, or an id
    another family or Gymnasium holds, is refused: the first family's ids left the registry without
    a word, or Gymnasium went on making the first holder's env.
    """
    require(isinstance(family, Family), "family", family, "a Family")
    require_fields(family, "family")
    _require_parts(family)
    taken = FAMILIES.get(family.name)
    require(family.name != "" and taken in (None, family), "family.name", family.name,
            f"a non-empty name no other family has (taken: {', '.join(FAMILIES)})")
    for env_id, entry_point in family.envs.items():
        holder = next((f.name for f in FAMILIES.values() if f.name != family.name and env_id in f.envs), None)
        spec = gym.registry.get(env_id)
        if holder is not None or (spec is not None and spec.entry_point != entry_point):
            held = f"family {holder!r} has it" if holder else f"Gymnasium makes {spec.entry_point} under it"
            refuse("family.envs", env_id, f"an id no other family or Gymnasium env holds ({held})")
    FAMILIES[family.name] = family
    for env_id, entry_point in family.envs.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point,
                         vector_entry_point=f"fl_gym.envs.vector_entry:{env_id}")


def _require_parts(family: Family) -> None:
    """The family's recipes, metrics and policies name its ids; a recipe's stage injects earlier stages only.

    Else a recipe failed when trained (``KeyError``), and a metric or policy for an id the family
    lacks was never shown.
    """
    ids = f"one of the family's ids ({', '.join(family.envs)})"
    for recipe in family.recipes:
        require_fields(recipe, f"recipe {recipe.name!r}")
        require(recipe.target in family.envs, f"recipe {recipe.name!r}: target", recipe.target, ids)
        earlier: list[str] = []
        for stage in recipe.stages:
            where = f"recipe {recipe.name!r}: stage {stage.name!r}"
            require_fields(stage, where)
            require(stage.env_id in family.envs, f"{where}: env_id", stage.env_id, ids)
            require(stage.name not in earlier, f"recipe {recipe.name!r}: stage", stage.name,
                    "a name no other stage of the recipe has")
            for kwarg, source in stage.inject.items():
                require(source in earlier, f"{where}: inject[{kwarg!r}]", source,
                        f"an earlier stage ({', '.join(earlier) or 'none'})")
            earlier.append(stage.name)
    policies = family.policies if isinstance(family.policies, Mapping) else {}  # an entry point: when read
    parts = [*((f"metric {m.key!r}", m) for m in family.metrics),
             *((f"policy {name!r}", entry) for name, entry in policies.items())]
    for label, part in parts:
        require_fields(part, label)
        require(set(part.env_ids) <= set(family.envs), f"{label}: env_ids", part.env_ids,
                f"ids of the family ({', '.join(family.envs)})")


def vector_env(num_envs: int, env_id: str, **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.make_vec(env_id, n, vectorization_mode="vector_entry_point")``: the batched vector env."""
    from fl_gym.envs.vectorize import GymBatchedVectorEnv

    return GymBatchedVectorEnv(env_id, num_envs, **kwargs)


def env_ids() -> list[str]:
    """Every registered fl-gym env id, family by family."""
    return [env_id for family in FAMILIES.values() for env_id in family.envs]


def family_of(env_id: str) -> Family:
    """The family that registered ``env_id``.

    Raises:
        ValueError: ``env_id`` is no fl-gym id.
    """
    for family in FAMILIES.values():
        if env_id in family.envs:
            return family
    raise UserError(f"env_id={env_id!r} is not registered; allowed: {', '.join(env_ids())}")


def recipes_for(env_id: str) -> dict[str, Recipe]:
    """Recipes whose composed policy acts on ``env_id``."""
    return {r.name: r for r in family_of(env_id).recipes if r.target == env_id}


def metrics_for(env_id: str) -> tuple[Metric, ...]:
    """The generic metrics (``accuracy`` labelled as the family says), then the family's."""
    family = family_of(env_id)
    generic = tuple(Metric(m.key, family.accuracy_label, m.final) if m.key == "accuracy" else m
                    for m in GENERIC_METRICS)
    return generic + tuple(m for m in family.metrics if not m.env_ids or env_id in m.env_ids)
