"""The benchmark protocol: score a policy on a task's federations, pin the references, train and test agents.

* :func:`score_policy`: one policy string (``fl-gym compare`` syntax: a fixed policy's name, or
  ``ALGO:RUN_DIR``) on every test federation and evaluation seed of a task, as a
  ``(seeds, federations)`` matrix of episode scores (:func:`play` gives the episodes). All the
  episodes run side by side as the copies of one batched vector env.
* :func:`task_references`: the pinned procedure behind a task's reference scores. Tuned
  baselines choose their setting on the tuning federations (inside the training range); then
  every fixed policy, the chosen ones and the upper reference are scored on the test and
  extrapolation splits. ``ref_min`` is the reference policy's (FedAvg's) mean, ``ref_max`` the
  best fixed policy's, per split.
* :func:`run_agent`: train one agent on a task's training federations (an ``fl-gym train`` run
  folder, resumable) and score it like the fixed policies; its ``scores.json`` is written last,
  so a finished run is never redone and an interrupted one continues from its checkpoint.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.atomic import damaged, read_json, require_keys, write_json
from fl_gym.training import provenance, runs
from fl_gym.training.benchmark.tasks import SPLITS, TUNING_SCENARIOS, TUNING_SEEDS, Task
from fl_gym.training.compare import PolicySpec, policy_spec
from fl_gym.training.evaluation import Episode, evaluate
from fl_gym.validation import UserError, is_finite, is_int_at_least, one_line, require, require_seeds

Say = Callable[[str], None]


def play(task: Task, policy: str | Callable[[gym.Env], Any], split: str = "test",
         scenarios: tuple[int, ...] | None = None,
         seeds: tuple[int, ...] | None = None) -> list[list[Episode]]:
    """A policy's episodes on the task's federations: ``[seed][federation]``.

    Args:
        task: the task.
        policy: a policy string (``fl-gym compare`` syntax), or ``make_policy(env)`` returning anything
            with SB3's ``predict`` (a new method, evaluated exactly as the fixed policies are).
        split: ``test`` or ``extrapolation``.
        scenarios: the federations (default: the task's test federations).
        seeds: the episodes on each (default: the task's evaluation seeds).
    """
    require(isinstance(task, Task), "task", task, "a Task (all_tasks()[name])")
    scenarios = task.test_scenarios if scenarios is None else scenarios
    seeds = task.eval_seeds if seeds is None else seeds
    require_seeds("scenarios", scenarios)
    require_seeds("seeds", seeds)
    require(isinstance(policy, str) or callable(policy), "policy", policy,
            "a policy string or a function make_policy(env)")
    if isinstance(policy, str):
        chosen = policy_spec(policy, task.env_id, tuple(seeds))
    else:
        chosen = PolicySpec("custom", policy)
    makers = [functools.partial(gym.make, task.env_id, **{**task.test_kwargs(s, split), **chosen.env_kwargs})
              for s in scenarios for _ in seeds]
    episodes = evaluate(makers, chosen.factory, [seed for _ in scenarios for seed in seeds])
    return [[episodes[f * len(seeds) + k] for f in range(len(scenarios))] for k in range(len(seeds))]


def score_policy(task: Task, policy: str | Callable[[gym.Env], Any], split: str = "test",
                 scenarios: tuple[int, ...] | None = None,
                 seeds: tuple[int, ...] | None = None) -> np.ndarray:
    """``(seeds, federations)`` episode scores of a policy (arguments as :func:`play`)."""
    return _scores(task, play(task, policy, split, scenarios, seeds))


def _scores(task: Task, episodes: list[list[Episode]]) -> np.ndarray:
    return np.array([[task.score_of(e) for e in row] for row in episodes])


def _returns(episodes: list[list[Episode]]) -> np.ndarray:
    return np.array([[float(np.sum(e.rewards)) for e in row] for row in episodes])


def tune(task: Task, say: Say = print) -> dict[str, dict[str, Any]]:
    """Each tuned baseline's candidates on the tuning federations: ``name -> {"chosen", "means"}``."""
    out = {}
    for name, candidates in task.tuned.items():
        means = {}
        for candidate in candidates:
            scores = score_policy(task, candidate, "test", TUNING_SCENARIOS, TUNING_SEEDS)
            means[candidate] = float(scores.mean())
            say(f"  {task.name}: tuning {name}: {candidate} {means[candidate]:.4f}")
        out[name] = {"chosen": max(means, key=means.get), "means": means}
    return out


def task_references(task: Task, say: Say = print) -> dict[str, Any]:
    """The task's pinned reference record (module docstring); scores kept per seed and federation."""
    start = time.perf_counter()
    tuned = tune(task, say)
    fixed = list(dict.fromkeys([*task.heuristics, *(t["chosen"] for t in tuned.values())]))
    policies: dict[str, dict[str, list[list[float]]]] = {}
    returns: dict[str, dict[str, list[list[float]]]] = {}
    for policy in fixed + list(task.uppers):
        policies[policy], returns[policy] = {}, {}
        for split in SPLITS:
            episodes = play(task, policy, split)
            scores = _scores(task, episodes)
            policies[policy][split], returns[policy][split] = scores.tolist(), _returns(episodes).tolist()
            say(f"  {task.name}: {policy} on {split}: {scores.mean():.4f}")
    if len(task.uppers) > 1:
        name = task.upper_name
        policies[name], returns[name] = {}, {}
        for split in SPLITS:
            policies[name][split], returns[name][split] = per_federation_best(
                [policies[c][split] for c in task.uppers], [returns[c][split] for c in task.uppers])
        say(f"  {task.name}: {name}: {np.mean(policies[name]['test']):.4f} on test")
    refs = {}
    for split in SPLITS:
        means = {policy: float(np.mean(policies[policy][split])) for policy in fixed}
        best = max(means, key=means.get)
        if means[best] == means[task.reference]:
            raise UserError(f"task={task.name!r}: on its {split} split no fixed policy beats the reference "
                            f"{task.reference!r}, so its scores cannot be normalised; allowed: a split where "
                            "one does (change the split's arguments or add a policy)")
        refs[split] = {"ref_min": means[task.reference], "ref_max": means[best], "best": best}
    return {"task": task.name, "env_id": task.env_id, "score": task.score, "reference": task.reference,
            "upper": task.upper_name, "uppers": list(task.uppers), "fixed": fixed, "tuned": tuned,
            "refs": refs, "policies": policies, "returns": returns,
            "test_scenarios": list(task.test_scenarios), "eval_seeds": list(task.eval_seeds),
            "wall_s": time.perf_counter() - start, **provenance.origin()}


def per_federation_best(scores: list[list[list[float]]], returns: list[list[list[float]]]
                        ) -> tuple[list[list[float]], list[list[float]]]:
    """Per federation (column), the candidate of best mean score: its ``(seeds, federations)`` scores."""
    scores_, returns_ = np.array(scores), np.array(returns)  # (candidates, seeds, federations)
    best = scores_.mean(axis=1).argmax(axis=0)
    columns = np.arange(scores_.shape[2])
    return scores_[best, :, columns].T.tolist(), returns_[best, :, columns].T.tolist()


RECORD_KEYS = ("algo", "seed", "scores")  # what a report reads of a scores.json record
REFERENCE_KEYS = ("refs", "policies", "reference", "upper", "fixed", "tuned")  # ... of a task's references


def check_algo(tasks: list[Task], algo: str) -> None:
    """Refuse ``algo`` unless every task's hyperparameter block trains it, before any task trains.

    A block written for PPO (an imitation start, the set policy) does not build another algorithm's
    agent; found task by task, a suite run would stop at the first such task after hours of others.
    """
    misfits = {}
    for task in tasks:
        try:  # one copy: the checks of a run's config without its worker processes
            with warnings.catch_warnings():  # the run says them (SB3's batch size warning: for one copy)
                warnings.simplefilter("ignore")
                runs.resolve(task.env_id, algo, _preset(task, algo), env_kwargs=task.train_kwargs(), n_envs=1,
                             total_timesteps=task.budget)
        except UserError as err:
            misfits[task.name] = one_line(err)
    if misfits:
        fits = [t.name for t in tasks if t.name not in misfits]
        first = next(iter(misfits))
        raise UserError(f"--algo={algo!r} is out of range for tasks {', '.join(misfits)} ({first}: "
                        f"{misfits[first]}); allowed: --algo ppo, or --tasks among those with a block for "
                        f"{algo}: {', '.join(fits) or 'none'}")


def run_agent(task: Task, algo: str, seed: int, out_dir: Path, progress: bool = True, say: Say = print
              ) -> dict[str, Any]:
    """Train (or resume) ``algo`` with ``seed`` on ``task`` in ``out_dir / task / ALGO-seedN``; score it.

    Returns the run's ``scores.json`` record: the scores per split as ``(seeds, federations)``.
    """
    folder = Path(out_dir) / task.name / f"{algo}-seed{seed}"
    done = folder / "scores.json"
    if done.is_file():
        return provenance.warn_if_other_code(read_record(done), done)
    if not (folder / "config.yml").is_file():
        cfg = runs.resolve(task.env_id, algo, _preset(task, algo), env_kwargs=task.train_kwargs(), seed=seed,
                           total_timesteps=task.budget)
        runs.claim_run_dir(cfg, folder)  # unless another process just did: train's lock then names it
    start = time.perf_counter()
    runs.train(folder, progress=progress, say=say)
    record = {"task": task.name, "algo": algo, "seed": seed, "budget": task.budget, **provenance.origin(),
              "train_wall_s_last_session": time.perf_counter() - start, **_tested(task, f"{algo}:{folder}")}
    if (folder / "imitated.zip").is_file():  # where training started (training/imitation.py), scored alike
        record["start"] = _tested(task, f"{algo}:{folder / 'imitated.zip'}")
    write_json(done, record)
    return record


def read_record(path: Path) -> dict[str, Any]:
    """A ``scores.json`` record as :func:`run_agent` writes it, or an error naming the file as damaged.

    A report reads each split's scores as numbers, ``(seeds, federations)``; a record edited by hand
    or cut down by another tool is named here rather than failing inside the statistics.
    """
    record = read_json(path, RECORD_KEYS)
    if not isinstance(record["algo"], str) or not is_int_at_least(record["seed"], 0):
        damaged(path, f"algo={record['algo']!r}, seed={record['seed']!r}; not a name and a seed")
    parts = [("", record)] + ([(": start", record["start"])] if "start" in record else [])
    for where, part in parts:
        require_keys(f"{path}{where}", part, ("scores",))
        scores = part["scores"]
        for split in SPLITS:
            rows = scores.get(split) if isinstance(scores, dict) else None
            if not _is_matrix(rows):
                damaged(f"{path}{where}",
                        f"scores of split {split!r} are not a list of rows of finite numbers")
    return record


def require_reference(where: str | Path, record: Any) -> None:
    """A task's references as :func:`task_references` writes them, or an error naming ``where`` as damaged.

    A report reads each split's reference range and the scores (and returns) of the policies the
    record names: the reference, each split's best fixed policy, the upper reference.
    """
    require_keys(where, record, REFERENCE_KEYS)
    policies, refs = record["policies"], record["refs"]
    if not _is_by_policy(policies):
        damaged(where, "policies are not each policy's rows of scores per split")
    for split in SPLITS:
        ref = refs.get(split) if isinstance(refs, dict) else None
        if not (is_reference_range(ref) and _names_one_of(ref.get("best"), policies)):
            damaged(where, f"refs of split {split!r} are not ref_min, ref_max and a best among the policies")
    for key in ("reference", "upper"):
        if (record[key] or key == "reference") and not _names_one_of(record[key], policies):
            damaged(where, f"{key}={record[key]!r} is not among the policies")
    tuned = record["tuned"]
    if not (isinstance(record["fixed"], list) and isinstance(tuned, dict)
            and all(isinstance(t, dict) and "chosen" in t for t in tuned.values())):
        damaged(where, "fixed is not a list of policies, or tuned not each tuning's chosen policy")
    returns, compared = record.get("returns"), [record["reference"], *(refs[s]["best"] for s in SPLITS)]
    if returns and not (_is_by_policy(returns) and all(_names_one_of(n, returns) for n in compared)):
        damaged(where, "returns are not the reference's and the best's rows of returns per split")


def is_reference_range(ref: object) -> bool:
    """Whether ``ref`` is a split's reference range: a mapping with finite ``ref_min`` and ``ref_max``."""
    return isinstance(ref, dict) and is_finite(ref.get("ref_min")) and is_finite(ref.get("ref_max"))


def _is_by_policy(value: object) -> bool:
    """Whether ``value`` maps policy names to each split's rows of numbers (:func:`_is_matrix`)."""
    return isinstance(value, dict) and all(isinstance(v, dict) and all(_is_matrix(v.get(s)) for s in SPLITS)
                                           for v in value.values())


def _names_one_of(name: object, policies: dict) -> bool:
    return isinstance(name, str) and name in policies


def _is_matrix(rows: object) -> bool:
    """Whether ``rows`` is a non-empty list of equally long, non-empty lists of finite numbers.

    Finite: the statistics read NaN as a run a task lacks (:mod:`.scores`), so a NaN here would
    drop a run without a word.
    """
    return (isinstance(rows, list) and bool(rows) and all(isinstance(r, list) and r for r in rows)
            and len({len(r) for r in rows}) == 1 and all(is_finite(v) for r in rows for v in r))


def _tested(task: Task, policy: str) -> dict[str, dict[str, list[list[float]]]]:
    """A policy's scores and returns on every split, each ``(seeds, federations)``."""
    episodes = {split: play(task, policy, split) for split in SPLITS}
    return {"scores": {split: _scores(task, e).tolist() for split, e in episodes.items()},
            "returns": {split: _returns(e).tolist() for split, e in episodes.items()}}


def _preset(task: Task, algo: str) -> str | None:
    """The ``PRESET`` of the task's ``ENV_ID/PRESET`` hyperparameter block (None: the env's own block)."""
    block = task.hyperparams_for(algo)
    return block.split("/", 1)[1] if block else None
