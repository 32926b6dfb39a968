"""``fl-gym generalise``: policies on scenarios no agent trained on, against a reference policy.

An agent trained with ``randomize_scenario=True`` draws each episode's federation from a 63-bit
seed its episode seed gives; the default held-out scenario seeds (:data:`HELD_OUT`) are small
integers it does not draw (and not ``0``, the training envs' unused first scenario). Each
policy plays the same evaluation seeds on every held-out scenario, as ``fl-gym compare`` plays
them, and on each zero-shot variant (other env arguments, e.g. a larger preset) of the same
scenarios. The table gives each metric's mean over scenarios and its ratio to the reference
policy: the mean and the worst of the per-scenario ratios, so one bad federation is not hidden
by good ones. A policy that cannot act on a variant (a flat network on another client count) is
listed as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.atomic import require_writable, write_json, write_text
from fl_gym.envs.registry import family_of
from fl_gym.training import provenance
from fl_gym.training.compare import DEFAULT_SEEDS, compare, policy_spec, require_policies
from fl_gym.validation import UserError, require, require_mapping, require_seeds

HELD_OUT = (4242, 123, 777, 2024, 31337)
METRICS = ("straggling_latency", "sim_time", "return")


def generalisation(env_id: str, policies: Sequence[str], scenario_seeds: Sequence[int] = HELD_OUT,
                   variants: Mapping[str, Mapping[str, Any]] | None = None,
                   seeds: Sequence[int] = DEFAULT_SEEDS,
                   env_kwargs: Mapping[str, Any] | None = None, reference: str | None = None,
                   metrics: Sequence[str] = METRICS, out_dir: str | Path | None = None,
                   progress: bool = True) -> dict[str, Any]:
    """Every policy on every (variant, held-out scenario); per-scenario means and the summary.

    Args:
        env_id: the env every policy plays.
        policies: policy strings, as ``fl-gym compare`` takes them.
        scenario_seeds: the held-out scenarios.
        variants: name -> env arguments on top of ``env_kwargs``; default one, ``held-out``, with none.
        seeds: evaluation seeds, played on every scenario.
        env_kwargs: env arguments of every episode.
        reference: the policy string whose metrics the ratios divide by (one of ``policies``; None:
            the first).
        metrics: summary keys of ``fl-gym compare`` to tabulate.
        out_dir: where ``results.json`` and ``results.md`` go, and the episodes as they finish
            (``episodes/``: a run stopped part way resumes with them; None: nowhere).
        progress: print each scenario as it starts.
    """
    family_of(env_id)  # an fl-gym id, before gymnasium's make names it in its own words
    require_policies(policies)
    require_seeds("scenario_seeds", scenario_seeds)
    require_seeds("seeds", seeds)
    require_mapping("env_kwargs", env_kwargs)
    require_mapping("variants", variants, of="variant names to env arguments")
    variants = variants or {"held-out": {}}
    for name, extra in variants.items():  # every variant's arguments checked before any episode is played
        require_mapping(f"variants[{name!r}]", extra, optional=False)
        try:
            gym.make(env_id, **{**(env_kwargs or {}), **extra, "scenario_seed": scenario_seeds[0]}).close()
        except ValueError as exc:
            raise UserError(f"variant {name!r}: {exc}") from exc
    reference = policies[0] if reference is None and policies else reference
    require(reference in policies, "reference", reference, f"one of the policies {list(policies)}")
    if out_dir is not None:
        require_writable(out_dir, "out_dir")
    kept = None if out_dir is None else Path(out_dir) / "episodes"  # so that a stopped run resumes
    rows: list[dict[str, Any]] = []
    unable: dict[str, dict[str, str]] = {}  # variant -> policy -> why it cannot act there
    # loads each model once here
    labels = {name: policy_spec(name, env_id, tuple(seeds)).label for name in policies}
    require(len(set(labels.values())) == len(policies), "policies", list(policies), "distinct policies")
    for name, extra in variants.items():
        for policy, label in labels.items():
            for scenario in scenario_seeds:
                if progress:
                    print(f"{name}, {label}, scenario_seed={scenario}", flush=True)
                kwargs = {**(env_kwargs or {}), **extra, "scenario_seed": scenario}
                try:
                    stats = compare(env_id, [policy], tuple(seeds), kwargs, progress=False,
                                    episodes_dir=kept)["summary"][label]
                except UserError as exc:  # a policy that cannot act here, e.g. a flat agent on another
                    # client count; any other error is a bug, and is raised
                    require(policy != reference, "reference", reference,
                            f"a policy that acts on {name} ({exc})")
                    unable.setdefault(name, {})[label] = str(exc).splitlines()[0]
                    break
                missing = [m for m in metrics if m not in stats]
                require(not missing, "metrics", list(metrics), f"keys the env reports (not {missing})")
                rows.append({"variant": name, "scenario_seed": scenario, "policy": label,
                             **{m: stats[m][0] for m in metrics}})
    results = {"env_id": env_id, "env_kwargs": dict(env_kwargs or {}), "variants": {k: dict(v) for k, v in
               variants.items()}, "scenario_seeds": list(scenario_seeds), "seeds": list(seeds),
               "reference": reference, "metrics": list(metrics), "rows": rows,
               "summary": summarise(rows, reference, metrics), "unable": unable,
               "code": provenance.code_versions()}
    if out_dir is not None:
        out = Path(out_dir)
        write_json(out / "results.json", results)
        write_text(out / "results.md", f"# {env_id}: policies on held-out scenarios\n\n" + markdown(results))
    return results


def summarise(rows: list[dict[str, Any]], reference: str,
              metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per variant and policy: each metric's mean over scenarios and its mean/min/max ratio to ``reference``.

    A ratio exists where every policy's value is >= 0 and the reference's > 0 (times, latencies).
    """
    out: dict[str, dict[str, Any]] = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        ref = {r["scenario_seed"]: r for r in mine if r["policy"] == reference}
        table = out.setdefault(variant, {})
        for policy in dict.fromkeys(r["policy"] for r in mine):
            theirs = [r for r in mine if r["policy"] == policy]
            entry = table.setdefault(policy, {})
            for m in metrics:
                values = np.array([r[m] for r in theirs])
                base = np.array([ref[r["scenario_seed"]][m] for r in theirs])
                ratio = values / base if (base > 0).all() and all(r[m] >= 0 for r in mine) else None
                entry[m] = {"mean": float(values.mean()), "ratio": None, "min_ratio": None, "max_ratio": None}
                if ratio is not None:
                    entry[m].update(ratio=float(ratio.mean()), min_ratio=float(ratio.min()),
                                    max_ratio=float(ratio.max()))
    return out


def markdown(results: dict[str, Any]) -> str:
    """One table per variant: each metric's mean over scenarios, x reference (mean, min-max)."""
    metrics, ref = results["metrics"], results["reference"]
    head = " | ".join(f"{m} | x {ref} (mean, min-max)" for m in metrics)
    parts = []
    for variant, table in results["summary"].items():
        kwargs = results["variants"][variant]
        named = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        title = f"## {variant}" + (f" ({named})" if named and named != variant else "")
        lines = [title, "", f"| policy | {head} |", "|---" * (1 + 2 * len(metrics)) + "|"]
        for policy, entry in table.items():
            cells = []
            for m in metrics:
                e = entry[m]
                ratio = ("-" if e["ratio"] is None
                         else f"{e['ratio']:.3f}, {e['min_ratio']:.3f}-{e['max_ratio']:.3f}")
                cells += [f"{e['mean']:.4g}", ratio]
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        lines += [f"| {policy} | cannot act: {why} |"
                  for policy, why in results["unable"].get(variant, {}).items()]
        parts.append("\n".join(lines))
    footer = (f"\nScenario seeds {results['scenario_seeds']}, evaluation seeds {results['seeds']}; means "
              "over scenarios of each scenario's mean over seeds.\n")
    return "\n\n".join(parts) + "\n" + footer
