"""``fl-gym compare``: fixed and learned policies on the same evaluation seeds, tables and plots.

Policy strings:

* a fixed policy's name for the env's family (``fl-gym envs`` lists them), optionally with its
  keyword arguments in brackets (``random-drop[q=0.84,seed=1]``); a baseline that is an env
  variant (a local algorithm such as FedProx) runs on its variant, so one call gives a paper's
  whole table;
* ``ppo:PATH`` (also ``recurrent-ppo:``, ``maskable-ppo:``): a saved model ``.zip`` or a run
  folder of ``fl-gym train``; a folder holding a training recipe (``fl-gym train --algo NAME``)
  becomes the recipe's composed policy, also as ``NAME:PATH``.

Rows are labelled by the policy string, with a run path shortened to its last component. The default
evaluation seeds (10000 on) are apart from the training seeds ``fl-gym train`` uses (0 on); a
warning names any overlap with a loaded run's seeds.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from fl_gym.agents.ppo import ALGOS, is_whole_model, model_algo
from fl_gym.agents.recipes import compose, is_recipe, load_recipe
from fl_gym.atomic import read_json, require_writable, write_json, write_text
from fl_gym.envs.base import require_fitting
from fl_gym.envs.registry import family_of, metrics_for, recipes_for
from fl_gym.training import provenance
from fl_gym.training.callbacks import latest_checkpoint
from fl_gym.training.evaluation import Episode, aggregate, evaluate
from fl_gym.training.plots import plot_bands
from fl_gym.validation import (
    UserError,
    is_int_at_least,
    require,
    require_fraction,
    require_mapping,
    require_seeds,
)

if TYPE_CHECKING:
    from fl_gym.training.runs import RunConfig

DEFAULT_SEEDS = tuple(range(10000, 10005))
SERIES = ("accuracy", "round_time", "straggling_latency", "sim_time", "uploads")


@dataclass(frozen=True)
class PolicySpec:
    """A policy to compare: its row label, a factory taking the env, and its env variant.

    ``files`` is a digest of the files it loads: kept episodes of a model retrained in place are
    not taken for the new model's.
    """

    label: str
    factory: Callable[[gym.Env], Any]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    files: str = ""


def policy_spec(policy: str, env_id: str, eval_seeds: tuple[int, ...] = DEFAULT_SEEDS) -> PolicySpec:
    """Parse a policy string (warning if ``eval_seeds`` trained a loaded run).

    Raises:
        ValueError: an unknown name or algorithm, a file that is no SB3 model, or (when the policy is
            built for an env) a model of another env's spaces.
        FileNotFoundError: a model path that does not exist.
    """
    require(isinstance(policy, str), "policy", policy,
            "a policy string: NAME, NAME[key=value,...] or ALGO:PATH")
    algo, sep, path = policy.partition(":")
    if not sep:
        name, kwargs = _with_kwargs(policy)
        fixed = family_of(env_id).fixed_policies(env_id)
        if name not in fixed:
            raise UserError(f"policy {name!r} is not known for {env_id}; allowed: "
                             f"{', '.join(fixed) or 'none'}, or ALGO:PATH with ALGO in "
                             f"{', '.join((*ALGOS, *recipes_for(env_id)))}")
        entry = fixed[name]
        entry.check(policy, kwargs)
        return PolicySpec(policy, lambda env: entry.build(env, **kwargs), dict(entry.env_kwargs))
    recipes = recipes_for(env_id)
    if algo not in ALGOS and algo not in recipes:
        raise UserError(f"policy {policy!r}: algorithm {algo!r} is out of range; allowed: "
                         f"{', '.join((*ALGOS, *recipes))}")
    require(path.strip() != "", f"policy {policy!r}: PATH", path, "a run folder or a model file")  # not '.'
    target = Path(path)
    if is_recipe(target):
        recipe, models = load_recipe(target)
        _warn_about_run(target, _run_config(target), eval_seeds)
        return PolicySpec(f"{algo}:{target.name}", lambda env: compose(recipe, env, models),
                          files=_digest(sorted(target.glob("*/model.zip")) + [target / "recipe.json"]))
    if algo in recipes:
        raise FileNotFoundError(f"policy {policy!r}: no finished {algo} recipe at {target} (recipe.json)")
    model_path = target / "model.zip" if target.is_dir() else target
    if not model_path.is_file():
        raise FileNotFoundError(f"policy {policy!r}: no model at {model_path}{_unfinished(algo, target)}")
    run_dir = _run_folder(model_path)
    run = _run_config(run_dir)
    _warn_about_run(run_dir, run, eval_seeds)
    if not is_whole_model(model_path):
        raise UserError(f"policy {policy!r}: {model_path} is not an SB3 model; allowed: a model file as "
                        "fl-gym train writes it (model.zip, a zip archive)")
    # a MaskablePPO model given as ``ppo:`` loads, and is labelled, as what it is
    loaded = model_algo(model_path)
    if loaded is None:
        raise UserError(f"policy {policy!r}: {model_path} holds no policy of {', '.join(ALGOS)}; allowed: a "
                        "model file as fl-gym train writes it")
    model = ALGOS[loaded].load(model_path, device="cpu")
    bound = {k: v for k, v in (run.env_kwargs if run is not None else {}).items()
             if k in family_of(env_id).agent_kwargs}
    return PolicySpec(f"{loaded}:{_model_name(model_path, run_dir if run is not None else None)}",
                      lambda env: _fits(model, env, policy), bound, _digest([model_path]))


def _unfinished(algo: str, target: Path) -> str:
    """What to pass for a run folder without a model yet (it trains, or stopped): its latest checkpoint."""
    if not (target / "config.yml").is_file() or (target / "summary.json").is_file():
        return ""  # not a run folder, or a finished run whose model was removed
    latest = latest_checkpoint(target / "checkpoints")
    if latest is None:
        return f" (the run has not finished and has no checkpoint yet; fl-gym train --resume {target})"
    return (f" (the run has not finished: pass its latest checkpoint, {algo}:{latest[0]} (after {latest[1]} "
            f"steps), or finish the run with fl-gym train --resume {target})")


def _model_name(model_path: Path, run_dir: Path | None) -> str:
    """A loaded model's label: its run's name, with the file's where it is not the run's model.zip.

    So two runs' checkpoints of the same step (``model_32_steps``) are told apart.
    """
    if run_dir is None:
        return model_path.parent.name if model_path.name == "model.zip" else model_path.stem
    if model_path == run_dir / "model.zip":
        return run_dir.name
    return f"{run_dir.name}/{model_path.relative_to(run_dir).with_suffix('').as_posix()}"


def _digest(paths: list[Path]) -> str:
    """SHA-256 of the files' bytes, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _fits(model: Any, env: gym.Env, policy: str) -> Any:
    """``model`` if it acts on ``env`` (:func:`~fl_gym.envs.base.require_fitting`)."""
    require_fitting(f"policy {policy!r}", model, env.observation_space, env.action_space,
                    env.get_wrapper_attr("client_rows"))
    return model


def _with_kwargs(policy: str) -> tuple[str, dict[str, Any]]:
    """``"name[a=1,b=x]"`` -> ``("name", {"a": 1, "b": "x"})``."""
    from fl_gym.training.cli import parse_kv, split_list

    name, sep, rest = policy.partition("[")
    if not sep:
        return policy, {}
    if not rest.endswith("]") or not name:
        raise UserError(f"policy {policy!r}: expected NAME[key=value,...]")
    return name, parse_kv(split_list(rest[:-1]), f"policy {policy!r}")


def _run_folder(model_path: Path) -> Path:
    """The run folder of a model file: its own, or the run's of a checkpoint or a recipe stage's model.

    A run's arguments (a residual agent's base policy) reach its checkpoints too: without them a
    checkpoint was played on the plain env, and scored as another policy.
    """
    for folder in model_path.parents[:3]:  # the model in run/, run/checkpoints/ or run/stage/checkpoints/
        if (folder / "config.yml").is_file():
            return folder
    return model_path.parent


def _run_config(run_dir: Path) -> RunConfig | None:
    """A run folder's ``config.yml``, checked as ``train --resume`` checks it (None: a model alone)."""
    # runs trains with imitation, which reads compare's policy strings: imported here, not at the top
    from fl_gym.training.runs import load_run

    return load_run(run_dir) if (run_dir / "config.yml").is_file() else None


def _warn_about_run(run_dir: Path, run: RunConfig | None, eval_seeds: tuple[int, ...]) -> None:
    """Warn when ``eval_seeds`` trained the run, or other code did (a model file alone records neither).

    ``runs.seeds_trained_on`` and ``runs.trained_by`` read what the run folder records.
    """
    from fl_gym.training.runs import seeds_trained_on, trained_by

    if run is None:
        return
    used = seeds_trained_on(run, run_dir) & set(eval_seeds)
    if used:
        warnings.warn(f"evaluation seeds {sorted(used)} were used to train {run_dir}", stacklevel=3)
    provenance.warn_if_trained_by_other_code(run_dir, trained_by(run_dir))


def check_rounds(rounds: int | None, env: gym.Env) -> None:
    """``--rounds`` within ``env``'s episode (None: the whole episode), else a ValueError naming the flag."""
    horizon = env.unwrapped.rounds_per_episode
    require(rounds is None or rounds <= horizon, "--rounds", rounds,
            f"at most the episode's {horizon} rounds (raise rounds_per_episode with --env-kwargs)")


def require_policies(policies: object) -> None:
    """Raise ``ValueError`` unless ``policies`` is a list of policy strings (not one string: its letters)."""
    require(isinstance(policies, (list, tuple)) and len(policies) >= 1
            and all(isinstance(p, str) for p in policies), "--policies", policies,
            "a list of one or more policy strings")


def compare(env_id: str, policies: list[str], seeds: tuple[int, ...] = DEFAULT_SEEDS,
            env_kwargs: dict | None = None,
            rounds: int | None = None, out_dir: str | Path | None = None, progress: bool = True,
            target: float | None = None, episodes_dir: str | Path | None = None) -> dict[str, Any]:
    """Evaluate every policy on the same seeds; write tables and plots to ``out_dir``; return the results.

    ``env_kwargs`` apply to every policy; a baseline's own env variant is applied on top. With a
    ``target`` accuracy the table adds ``rounds_to_target``, the median over episodes of the first
    round whose ``accuracy`` reaches it (misses censored, :func:`_to_target`), ``time_to_target``,
    the median simulated seconds until then, and ``reached``, the share of episodes that did.
    ``series`` keeps each metric per round: its mean, its std and every episode's curve
    (``per_seed``, in seed order), so a new target or statistic needs no rerun; ``code`` the
    code the numbers come from (:func:`~fl_gym.training.provenance.code_versions`). Each policy's
    episodes are kept in ``episodes_dir`` (default: ``out_dir/episodes``) as it finishes, and read
    back by a later call with the same arguments (:func:`_kept`).
    """
    require(rounds is None or is_int_at_least(rounds, 1), "--rounds", rounds, "an integer >= 1")
    require_fraction("--target", target, optional=True)
    require_seeds("--seeds", seeds)
    require_mapping("env_kwargs", env_kwargs)
    require_policies(policies)
    # bad policy strings fail before any work
    parsed = [policy_spec(policy, env_id, tuple(seeds)) for policy in policies]
    labels = [p.label for p in parsed]
    require(len(set(labels)) == len(labels), "--policies", policies, "distinct policies")
    for p in parsed:  # bad env kwargs and rounds fail before any work
        env = gym.make(env_id, **{**(env_kwargs or {}), **p.env_kwargs})
        check_rounds(rounds, env)
        env.close()
    if out_dir is not None:
        require_writable(out_dir, "out_dir")
    episodes: dict[str, list[Episode]] = {}
    bar = tqdm(total=len(parsed) * len(seeds), desc=f"compare {env_id}", unit="episode",
               disable=None if progress else True)  # None: off when not writing to a terminal
    if episodes_dir is None and out_dir is not None:
        episodes_dir = Path(out_dir) / "episodes"
    for p in parsed:
        kwargs = {**(env_kwargs or {}), **p.env_kwargs}
        key = {"env_id": env_id, "env_kwargs": kwargs, "seeds": list(seeds), "rounds": rounds,
               "policy": p.label, "files": p.files, "code": provenance.code_versions()}

        def play(kw: dict[str, Any] = kwargs, p: PolicySpec = p) -> list[Episode]:
            return evaluate(lambda: gym.make(env_id, **kw), p.factory, seeds, rounds)

        episodes[p.label] = _kept(episodes_dir, key, play)
        bar.update(len(seeds))  # the seeds' episodes run side by side in one batched vector env
    bar.close()
    results = {"env_id": env_id, "env_kwargs": env_kwargs or {}, "seeds": list(seeds),
               "variants": {p.label: p.env_kwargs for p in parsed}, "code": provenance.code_versions(),
               "columns": {m.key: m.label for m in metrics_for(env_id)},
               "summary": {s: {**aggregate(e), **_to_target(e, target)} for s, e in episodes.items()},
               "series": {s: {m: _series(e, m) for m in SERIES} for s, e in episodes.items()}}
    if out_dir is not None:
        write_outputs(results, Path(out_dir))
    return results


def _kept(folder: str | Path | None, key: dict[str, Any], play: Callable[[], list[Episode]]) -> list[Episode]:
    """``play()``'s episodes, kept in ``folder`` (None: nowhere) under ``key``, what they depend on.

    So a compare stopped part way resumes with the policies it had finished. A key that is no
    JSON (an object among the env arguments) is its ``repr``: it may miss, never match another's.
    """
    if folder is None:
        return play()
    key = json.loads(json.dumps(key, sort_keys=True, default=repr))
    path = Path(folder) / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"
    # none yet, or not one of ours (damaged, or its episodes edited out of shape): play again
    with contextlib.suppress(FileNotFoundError, UserError, KeyError, TypeError):
        stored = read_json(path, ("key", "episodes"))
        if stored["key"] == key:
            return [Episode.of(e) for e in stored["episodes"]]
    episodes = play()
    write_json(path, {"key": key, "episodes": [e.as_dict() for e in episodes]})
    return episodes


def _to_target(episodes: list[Episode], target: float | None) -> dict[str, tuple[float, float]]:
    """``rounds_to_target``, ``time_to_target`` (median, NaN), ``reached`` (mean, std); {} without a target.

    An episode that never reaches the target is censored at its horizon: its rounds to the target
    are unknown but more than it played, so they count as infinite in the median (the Kaplan-Meier
    median when every episode has the same horizon), and the median is NaN where fewer than half
    of the episodes reached the target. Never as the horizon + 1, which would understate them.
    """
    if target is None:
        return {}
    hits, times = [], []
    for e in episodes:
        acc = np.asarray(e.series("accuracy"), dtype=float)
        reached = np.flatnonzero(acc >= target)
        hits.append(float(reached[0] + 1) if len(reached) else math.inf)
        times.append(float(e.series("sim_time")[reached[0]]) if len(reached) else math.inf)
    share = [0.0 if math.isinf(h) else 1.0 for h in hits]
    return {"rounds_to_target": (_censored_median(hits), math.nan),
            "time_to_target": (_censored_median(times), math.nan),
            "reached": (float(np.mean(share)), float(np.std(share, ddof=1)) if len(hits) > 1 else 0.0)}


def _censored_median(values: list[float]) -> float:
    """The median of values where a miss is infinite; NaN where fewer than half are finite."""
    median = float(np.median(values))
    return median if math.isfinite(median) else math.nan


def _series(episodes: list[Episode], metric: str) -> dict[str, list[float]]:
    """Mean and std over episodes, round by round (empty if no episode reports the metric)."""
    length = min(len(e.rounds) for e in episodes)
    stacked = np.array([e.series(metric)[:length] for e in episodes], dtype=float)
    if np.isnan(stacked).all():
        return {"mean": [], "std": [], "per_seed": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rounds without an evaluation are NaN for every seed
        return {"mean": np.nanmean(stacked, axis=0).tolist(), "std": np.nanstd(stacked, axis=0).tolist(),
                "per_seed": stacked.tolist()}


def markdown_table(results: dict[str, Any]) -> str:
    """Mean ± std of the family's metrics, one row per policy (columns no policy reports are left out)."""
    summary = results["summary"]
    names = {**results["columns"], "rounds_to_target": "rounds to target (median)",
             "time_to_target": "time to target (median, s)", "reached": "reached target"}
    columns = [(k, name) for k, name in names.items() if any(k in s for s in summary.values())]
    lines = ["| policy | " + " | ".join(name for _, name in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for policy, stats in summary.items():
        cells = [_cell(stats[k]) if k in stats else "n/a" for k, _ in columns]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(stat: tuple[float, float]) -> str:
    """``mean ± std``; a median (std NaN) alone, and ``n/a`` where it is NaN."""
    value, spread = stat
    if math.isnan(value):
        return "n/a"
    return f"{value:.4g}" if math.isnan(spread) else f"{value:.4g} ± {spread:.2g}"


def write_outputs(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """``results.json``, ``results.csv``, ``results.md`` and the PNG plots, each written atomically."""
    written = [write_json(out_dir / "results.json", results),
               write_text(out_dir / "results.md", f"# {results['env_id']}, seeds {results['seeds']}\n\n"
                          + markdown_table(results))]
    metrics = sorted({m for stats in results["summary"].values() for m in stats})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["policy"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std")])
    for policy, stats in results["summary"].items():
        writer.writerow([policy] + [v for m in metrics for v in stats.get(m, ("", ""))])
    written.append(write_text(out_dir / "results.csv", buffer.getvalue()))
    return written + _plots(results, out_dir)


def _plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Mean over the seeds with a ±1 std band.

    Accuracy per round, against simulated time and against cumulative uploads; round time and
    cumulative simulated time per round.
    """
    series, env_id, n = results["series"], results["env_id"], len(results["seeds"])
    over = f"mean of {n} seeds" if n > 1 else "one seed"
    acc_label = results["columns"].get("accuracy", "accuracy")
    out = []
    for metric, ylabel in (("accuracy", f"test accuracy ({acc_label})"),
                           ("round_time", "simulated round time (s)"),
                           ("sim_time", "cumulative simulated time (s)")):
        lines = {label: (None, s[metric]) for label, s in series.items() if s[metric]["mean"]}
        if lines:
            out.append(plot_bands(lines, "round", ylabel, f"{env_id}: {ylabel}, {over}",
                                  out_dir / f"{metric}.png"))
    for x, xlabel, name, logx in (("sim_time", "simulated time (s, log scale)", "time", True),
                                  ("uploads", "models uploaded (cumulative)", "uploads", False)):
        lines = {label: (s[x]["mean"], s["accuracy"]) for label, s in series.items()
                 if s["accuracy"]["mean"] and s[x]["mean"]}
        if lines:
            out.append(plot_bands(lines, xlabel, f"test accuracy ({acc_label})",
                                  f"{env_id}: accuracy against {xlabel.split(' (')[0]}, {over}",
                                  out_dir / f"accuracy_vs_{name}.png", logx=logx))
    return out
