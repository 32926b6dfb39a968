"""Benchmark tasks and suites: what a method is trained on, what it is tested on, and how it is scored.

A :class:`Task` is an env id plus arguments, a training budget in env steps, a training
distribution of federations (``randomize_scenario`` over :data:`TRAIN_SCENARIOS`), fixed held-out
test federations (:data:`TEST_SCENARIOS`, outside the training range), an extrapolation split
(arguments outside the training range, on the same test federations), and the policies its
reference scores come from. Families declare their tasks (``Family.tasks``); a suite is every
task that names it. The seed rules, in one place:

| seeds | what | where |
|---|---|---|
| ``0, 1, ...`` | training runs (``fl-gym benchmark run --seeds``) | a run's env copies are seeded from it |
| :data:`TRAIN_SCENARIOS` | the federations training episodes draw | ``scenario_seed_range`` |
| :data:`TUNING_SCENARIOS`, :data:`TUNING_SEEDS` | where tuned baselines choose | inside the training range |
| :data:`TEST_SCENARIOS` | the held-out federations every score is measured on | never drawn in training |
| :data:`EVAL_SEEDS` | the episodes played on each test federation | above any seed a run uses |

Nothing is tuned on the test federations: tuned baselines choose on the tuning federations, and
the agents' hyperparameters are fixed in ``ppo.yml`` before the test split is evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_gym.envs.registry import FAMILIES, family_of, resolve
from fl_gym.training.evaluation import Episode
from fl_gym.validation import require, require_fields

TRAIN_SCENARIOS = (1_000, 1_000_000_000)
TUNING_SCENARIOS = (1_000, 1_001, 1_002, 1_003)
TUNING_SEEDS = (2_000_000_000, 2_000_000_001)
TEST_SCENARIOS = (1, 2, 3, 4, 5, 6)
EVAL_SEEDS = (1_000_000_000, 1_000_000_001, 1_000_000_002, 1_000_000_003)


def accuracy_auc(episode: Episode) -> float:
    """Mean test accuracy over the episode's evaluated rounds: the area under the accuracy curve.

    It rewards reaching an accuracy early as well as reaching it at all, and averages out the
    round-to-round noise of a final accuracy.
    """
    values = [v for v in episode.series("accuracy") if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def final_accuracy(episode: Episode) -> float:
    """The last evaluated round's test accuracy."""
    values = [v for v in episode.series("accuracy") if not math.isnan(v)]
    return values[-1] if values else math.nan


def episode_return(episode: Episode) -> float:
    """The sum of the episode's rewards."""
    return float(np.sum(episode.rewards))


SCORES = {"accuracy_auc": accuracy_auc, "final_accuracy": final_accuracy, "return": episode_return}


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    Attributes:
        name: the task's name (unique in a suite).
        env_id: the env the task is played on.
        doc: what the agent decides and what makes the task hard, in a sentence or two.
        env_kwargs: the env's arguments, for training and test alike.
        budget: training env steps of an agent.
        reference: the policy string of the score's zero (``ref_min``): the no-decision default.
        heuristics: fixed policy strings (``fl-gym compare`` syntax): the papers' heuristics and
            simple baselines.
        tuned: name -> candidate strings: a baseline whose setting is chosen on the tuning
            federations (the best candidate there), then tested like the others.
        upper: a privileged policy string (it sees what the server cannot), above the fixed
            policies: the headroom shown beside the scores; or a tuple of policy strings, whose best on
            each test federation is the upper reference (a per-federation search, chosen on the
            episodes it is scored on, so slightly optimistic); None if the task has none.
        extrapolation: env arguments outside the training range, played on the test federations.
        score: how an episode is scored (a key of :data:`SCORES`, higher is better).
        hyperparams: the ``ppo.yml`` block the agents train with (``ENV_ID/PRESET``).
        agent_kwargs: env arguments of the agents' env alone, in training and test (the family's
            ``agent_kwargs``, e.g. a residual base policy); the fixed policies play without them.
        algo_hyperparams: per algorithm, a block replacing :attr:`hyperparams`.
        suites: the suites the task belongs to.
        test_scenarios: the held-out federations (outside :data:`TRAIN_SCENARIOS`).
        eval_seeds: the episodes played on each test federation.
    """

    name: str
    env_id: str
    doc: str
    env_kwargs: Mapping[str, Any]
    budget: int
    reference: str
    heuristics: tuple[str, ...]
    tuned: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    upper: str | tuple[str, ...] | None = None
    extrapolation: Mapping[str, Any] = field(default_factory=dict)
    score: str = "accuracy_auc"
    hyperparams: str | None = None
    agent_kwargs: Mapping[str, Any] = field(default_factory=dict)
    algo_hyperparams: Mapping[str, str] = field(default_factory=dict)
    suites: tuple[str, ...] = ("core-v1",)
    test_scenarios: tuple[int, ...] = TEST_SCENARIOS
    eval_seeds: tuple[int, ...] = EVAL_SEEDS

    def __post_init__(self) -> None:
        # each field of its declared type first: budget="x" failed in the comparison below with a TypeError
        require_fields(self, f"task {self.name!r}")
        require(self.score in SCORES, f"task {self.name!r}: score", self.score, ", ".join(SCORES))
        require(self.reference in self.heuristics, f"task {self.name!r}: reference", self.reference,
                f"one of its heuristics {list(self.heuristics)}")
        require(self.budget >= 1, f"task {self.name!r}: budget", self.budget, "an integer >= 1")
        bound = family_of(self.env_id).agent_kwargs
        require(set(self.agent_kwargs) <= set(bound), f"task {self.name!r}: agent_kwargs",
                sorted(self.agent_kwargs), f"keys of the family's agent_kwargs {list(bound)}")
        low, high = TRAIN_SCENARIOS
        inside = [s for s in self.test_scenarios if low <= s < high]
        require(not inside, f"task {self.name!r}: test_scenarios", inside,
                f"seeds outside the training range "
                f"[{low}, {high})")

    @property
    def uppers(self) -> tuple[str, ...]:
        """The upper reference's candidate strings (one, or the searched ones)."""
        return (self.upper,) if isinstance(self.upper, str) else tuple(self.upper or ())

    @property
    def upper_name(self) -> str | None:
        """The upper reference's name in the reference record."""
        if isinstance(self.upper, str) or self.upper is None:
            return self.upper
        return f"best per federation of {{{', '.join(self.upper)}}}"

    def train_kwargs(self) -> dict[str, Any]:
        """The env arguments of an agent's training: the task's and its own, over the training federations."""
        return {**self.env_kwargs, **self.agent_kwargs, "randomize_scenario": True,
                "scenario_seed_range": TRAIN_SCENARIOS}

    def test_kwargs(self, scenario_seed: int, split: str = "test") -> dict[str, Any]:
        """The env arguments of one test federation (``split``: ``test`` or ``extrapolation``)."""
        require(split in SPLITS, "split", split, ", ".join(SPLITS))
        extra = self.extrapolation if split == "extrapolation" else {}
        return {**self.env_kwargs, **extra, "scenario_seed": scenario_seed}

    def score_of(self, episode: Episode) -> float:
        """The episode's score."""
        return SCORES[self.score](episode)

    def hyperparams_for(self, algo: str) -> str | None:
        """The ``ppo.yml`` block an ``algo`` agent trains with."""
        return self.algo_hyperparams.get(algo, self.hyperparams)


SPLITS = ("test", "extrapolation")


def all_tasks() -> dict[str, Task]:
    """Every task the registered families declare, by name."""
    tasks: dict[str, Task] = {}
    for family in FAMILIES.values():
        declared = resolve(family.tasks) if family.tasks else ()
        require(isinstance(declared, (tuple, list)) and all(isinstance(t, Task) for t in declared),
                f"family {family.name!r}: tasks", family.tasks, "the entry point of a tuple of Task")
        for task in declared:
            require(task.name not in tasks, "task name", task.name, "unique across families")
            tasks[task.name] = task
    return tasks


def suite_names() -> list[str]:
    """The suites some task names."""
    return sorted({s for task in all_tasks().values() for s in task.suites})


def suite(name: str) -> list[Task]:
    """The tasks of suite ``name``, in registration order.

    Raises:
        ValueError: no task names the suite.
    """
    tasks = [t for t in all_tasks().values() if name in t.suites]
    require(bool(tasks), "suite", name, ", ".join(suite_names()) or "none registered")
    return tasks
