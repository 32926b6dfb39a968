"""``fl-gym compare``: fixed and learned policies on the same evaluation seeds, tables and plots.

Policy specs:

* a fixed policy's name for the env family (``fl-gym envs`` lists them), e.g. ``uniform``, ``oracle``;
* ``ppo:PATH`` (also ``recurrent-ppo:`` and ``maskable-ppo:``): a saved model ``.zip``, or a run
  folder of ``fl-gym train`` (its ``model.zip``; a HAPFL dual-agent run becomes ``HAPFLPolicy``).

The default evaluation seeds (10000 on) are apart from the training seeds ``fl-gym train`` uses
(0 on); a warning names any overlap with a loaded run's seeds.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml
from tqdm import tqdm

from fl_gym.agents.hapfl import hapfl_policy, is_dual_agent, load_dual_agent
from fl_gym.agents.ppo import ALGOS
from fl_gym.baselines import fixed_policies
from fl_gym.training.atomic import write_json, write_text
from fl_gym.training.evaluation import Episode, aggregate, evaluate
from fl_gym.training.plots import plot_series

DEFAULT_SEEDS = tuple(range(10000, 10005))
TABLE = (("return", "return"), ("round_time", "round time (s)"), ("straggling_latency", "straggling latency (s)"),
         ("sim_time", "total time (s)"), ("accuracy", "accuracy"), ("global_acc_lite", "LiteModel acc."),
         ("acc_local", "local acc."))


def policy_factory(spec: str, env_id: str, eval_seeds: tuple[int, ...] = DEFAULT_SEEDS) -> Callable[[gym.Env], Any]:
    """Turn a policy spec into a factory that takes the env (warning if ``eval_seeds`` trained it).

    Raises:
        ValueError: an unknown name or algorithm.
        FileNotFoundError: a model path that does not exist.
    """
    algo, sep, path = spec.partition(":")
    if not sep:
        fixed = fixed_policies(env_id)
        if spec not in fixed:
            raise ValueError(f"policy {spec!r} is not known for {env_id}; allowed: {', '.join(fixed) or 'none'}, "
                             "or ALGO:PATH with ALGO in " + ", ".join(ALGOS))
        return fixed[spec]
    if algo not in ALGOS:
        raise ValueError(f"policy {spec!r}: algorithm {algo!r} is out of range; allowed: {', '.join(ALGOS)}")
    target = Path(path)
    if is_dual_agent(target):
        ppo1, ppo2 = load_dual_agent(target)
        return lambda env: hapfl_policy(env, ppo1, ppo2)
    model_path = target / "model.zip" if target.is_dir() else target
    if not model_path.is_file():
        raise FileNotFoundError(f"policy {spec!r}: no model at {model_path}")
    _warn_seed_overlap(model_path.parent, eval_seeds)
    model = ALGOS[algo].load(model_path, device="cpu")
    return lambda env: model


def _warn_seed_overlap(run_dir: Path, eval_seeds: tuple[int, ...]) -> None:
    config = run_dir / "config.yml"
    if config.is_file():
        cfg = yaml.safe_load(config.read_text())
        used = set(range(cfg["seed"], cfg["seed"] + cfg["n_envs"] + 1)) & set(eval_seeds)
        if used:
            warnings.warn(f"evaluation seeds {sorted(used)} were used to train {run_dir}", stacklevel=3)


def compare(env_id: str, specs: list[str], seeds: tuple[int, ...] = DEFAULT_SEEDS, env_kwargs: dict | None = None,
            rounds: int | None = None, out_dir: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate every policy on the same seeds; write tables and plots to ``out_dir``; return the results."""
    factories = {spec: policy_factory(spec, env_id, tuple(seeds)) for spec in specs}  # bad specs fail before work
    make_env = lambda: gym.make(env_id, **(env_kwargs or {}))  # noqa: E731
    make_env().close()
    episodes: dict[str, list[Episode]] = {}
    bar = tqdm(total=len(specs) * len(seeds), desc=f"compare {env_id}", unit="episode",
               disable=None if progress else True)  # None: off when not writing to a terminal
    for spec, factory in factories.items():
        episodes[spec] = []
        for seed in seeds:
            episodes[spec] += evaluate(make_env, factory, [seed], rounds)
            bar.update(1)
    bar.close()
    results = {"env_id": env_id, "env_kwargs": env_kwargs or {}, "seeds": list(seeds),
               "summary": {s: aggregate(e) for s, e in episodes.items()},
               "series": {s: {m: _mean_series(e, m) for m in ("accuracy", "round_time", "straggling_latency")}
                          for s, e in episodes.items()}}
    if out_dir is not None:
        write_outputs(results, Path(out_dir))
    return results


def _mean_series(episodes: list[Episode], metric: str) -> list[float]:
    length = min(len(e.rounds) for e in episodes)
    stacked = np.array([e.series(metric)[:length] for e in episodes], dtype=float)
    return [] if np.isnan(stacked).all() else np.nanmean(stacked, axis=0).tolist()


def markdown_table(results: dict[str, Any]) -> str:
    """Mean ± std of the main metrics, one row per policy (columns no policy reports are left out)."""
    summary = results["summary"]
    columns = [(k, name) for k, name in TABLE if any(k in s for s in summary.values())]
    lines = ["| policy | " + " | ".join(name for _, name in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for spec, stats in summary.items():
        cells = [f"{stats[k][0]:.4g} ± {stats[k][1]:.2g}" if k in stats else "n/a" for k, _ in columns]
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """``results.json``, ``results.csv``, ``results.md`` and the PNG plots, each written atomically."""
    written = [write_json(out_dir / "results.json", results),
               write_text(out_dir / "results.md", f"# {results['env_id']}, seeds {results['seeds']}\n\n"
                          + markdown_table(results))]
    metrics = sorted({m for stats in results["summary"].values() for m in stats})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["policy"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std")])
    for spec, stats in results["summary"].items():
        writer.writerow([spec] + [v for m in metrics for v in stats.get(m, ("", ""))])
    written.append(write_text(out_dir / "results.csv", buffer.getvalue()))
    for metric, label in (("accuracy", "test accuracy"), ("round_time", "simulated round time (s)")):
        series = {s: v[metric] for s, v in results["series"].items() if v[metric]}
        if series:
            written.append(plot_series(series, label, f"{results['env_id']}: {label}", out_dir / f"{metric}.png"))
    return written
