"""``fl-gym benchmark report``: per-task tables, suite aggregates with intervals, profiles, as files.

Inputs are a suite's reference record (:func:`~fl_gym.training.benchmark.protocol.task_references`
per task) and any agent runs (:func:`~fl_gym.training.benchmark.protocol.run_agent`). A method's
runs on a task are its independent repetitions: an agent's training seeds, or a fixed policy's
evaluation seeds; a run's value is its mean over the test federations. Scores are normalised per
split with that split's references: 0 = the reference policy (FedAvg), 1 = the best fixed policy.
The suite rows aggregate over tasks (Agarwal et al., NeurIPS 2021): IQM, mean and median with 95 %
stratified bootstrap intervals, and the probability of improving on the best fixed policy.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_gym.atomic import write_json, write_text
from fl_gym.training.benchmark import scores
from fl_gym.training.benchmark.tasks import SPLITS
from fl_gym.training.provenance import hardware

BEST, REFERENCE, UPPER = "best fixed", "reference (FedAvg)", "upper reference"
START = " start"  # ``ALGO start``: where an agent's training began, scored alike (an imitation start)
PROFILE_TAUS = np.linspace(-0.5, 2.5, 61)
# what a report's numbers come from, as counted in it (as JSON; null: a record from before it was kept)
ORIGINS = {"codes": "Agent runs by the code that scored them (runs)",
           "machines": "Agent runs by the machine that scored them (runs)",
           "reference_codes": "References by the code that pinned them (tasks)"}


def run_values(matrix: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """A fixed policy's ``(seeds, federations)`` scores -> one value per seed (its mean over federations)."""
    return np.asarray(matrix, np.float64).mean(axis=1)


def method_runs(refs: Mapping[str, Any], agents: Mapping[str, Mapping[str, list[dict]]], split: str
                ) -> dict[str, dict[str, np.ndarray]]:
    """``method -> task -> (runs,)`` raw values: every fixed policy, the suite rows and each agent."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for task, record in refs.items():
        for spec, by_split in record["policies"].items():
            out.setdefault(spec, {})[task] = run_values(by_split[split])
        out.setdefault(BEST, {})[task] = run_values(record["policies"][record["refs"][split]["best"]][split])
        out.setdefault(REFERENCE, {})[task] = run_values(record["policies"][record["reference"]][split])
        if record["upper"]:
            out.setdefault(UPPER, {})[task] = run_values(record["policies"][record["upper"]][split])
    for algo, tasks in agents.items():
        for task, records in tasks.items():
            if task in refs:
                out.setdefault(algo, {})[task] = np.array([np.mean(r["scores"][split]) for r in records])
    return out


def normalise(values: np.ndarray, record: Mapping[str, Any], split: str) -> np.ndarray:
    """Raw values of a task -> normalised scores with the split's references."""
    ref = record["refs"][split]
    return np.array([scores.normalized_score(v, ref["ref_min"], ref["ref_max"]) for v in values])


def suite_matrix(per_task: Mapping[str, np.ndarray], refs: Mapping[str, Any],
                 split: str) -> np.ndarray | None:
    """``(runs, tasks)`` normalised scores, NaN below a task's last run; None if a task has no runs."""
    if set(per_task) != set(refs):
        return None
    runs = max(len(v) for v in per_task.values())
    columns = [np.pad(normalise(per_task[t], refs[t], split), (0, runs - len(per_task[t])),
                      constant_values=np.nan)
               for t in refs]
    return np.stack(columns, axis=1)


def origins(refs: Mapping[str, Any], agents: Mapping[str, Mapping[str, list[dict]]]
            ) -> dict[str, dict[str, int]]:
    """The ``ORIGINS``: the agent runs counted by code and machine, the references by code."""
    runs = [record for method, per_task in agents.items() if not method.endswith(START)
            for records in per_task.values() for record in records]

    def count(values: Iterable[Any]) -> dict[str, int]:
        return dict(Counter(json.dumps(value, sort_keys=True) for value in values))

    return {"codes": count(r.get("code") for r in runs), "machines": count(r.get("hardware") for r in runs),
            "reference_codes": count(record.get("code") for record in refs.values())}


def build(refs: Mapping[str, Any], agents: Mapping[str, Mapping[str, list[dict]]], reps: int = 2000
          ) -> dict[str, Any]:
    """The report's content: per split, per-task rows and suite aggregates; its :func:`origins`."""
    report: dict[str, Any] = {"tasks": list(refs), "splits": {}, **origins(refs, agents)}
    for split in SPLITS:
        runs = method_runs(refs, agents, split)
        tasks = {t: _task_rows(runs, refs[t], t, split) for t in refs}
        headroom = {t: task_headroom(refs[t], split) for t in refs}
        best = suite_matrix(runs[BEST], refs, split)
        suite = {}
        for method in [BEST, REFERENCE, UPPER, *agents]:
            matrix = suite_matrix(runs.get(method, {}), refs, split)
            if matrix is None:
                continue
            suite[method] = {stat: scores.bootstrap_ci(matrix, fn, reps) for stat, fn in
                             (("iqm", scores.iqm), ("mean", scores.mean), ("median", scores.median))}
            counts = (~np.isnan(matrix)).sum(axis=0)
            spread = counts.min() < counts.max()
            suite[method]["runs"] = f"{counts.min()}-{counts.max()}" if spread else int(counts[0])
            suite[method]["p_improve_on_best"] = scores.improvement_ci(matrix, best, reps)
            suite[method]["profile"] = scores.performance_profile(matrix, PROFILE_TAUS).tolist()
            # best: 1
            suite[method]["at_or_above_best"] = int((np.nanmean(matrix, axis=0) >= 1.0 - 1e-9).sum())
        report["splits"][split] = {"tasks": tasks, "headroom": headroom, "suite": suite}
    return report


def _standard_error(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def task_headroom(record: Mapping[str, Any], split: str) -> dict[str, float]:
    """Whether the task's decisions matter and where the ceiling is, from its reference scores.

    ``spread``: best fixed policy minus the reference (raw); ``spread_in_se``: that spread over
    the larger of the two standard errors (runs = evaluation seeds); ``upper``: the privileged
    policy's normalised score (NaN without one); ``seed_sd``: the reference policy's episode-score
    standard deviation across evaluation seeds on one federation (averaged over federations), the
    noise a single episode carries; ``reward_snr``: the best fixed policy's return minus the
    reference's, episode by episode (same seed and federation), mean over standard deviation: how
    clearly the training reward tells the two apart in one episode (NaN without returns).
    """
    ref = record["refs"][split]
    lowest, best = (np.asarray(record["policies"][s][split]) for s in (record["reference"], ref["best"]))
    se = max(_standard_error(run_values(lowest)), _standard_error(run_values(best)))
    spread = ref["ref_max"] - ref["ref_min"]
    upper = float(np.mean(record["policies"][record["upper"]][split])) if record["upper"] else float("nan")
    returns = record.get("returns", {})
    snr = float("nan")
    if returns:
        paired = np.asarray(returns[ref["best"]][split]) - np.asarray(returns[record["reference"]][split])
        snr = float(paired.mean() / paired.std(ddof=1))
    return {"spread": spread, "spread_in_se": spread / se if se > 0 else float("inf"),
            "upper": (upper - ref["ref_min"]) / spread, "seed_sd": float(lowest.std(axis=0, ddof=1).mean()),
            "reward_snr": snr}


def _task_rows(runs: Mapping[str, Mapping[str, np.ndarray]], record: Mapping[str, Any], task: str, split: str
               ) -> list[dict[str, Any]]:
    """One row per method with values on ``task``: raw mean and standard error, normalised mean.

    An agent's row, and its start's, also lists each run's normalised score (``per_run``, by training seed).
    """
    rows = []
    for method, tasks in runs.items():
        if task not in tasks or method in (BEST, REFERENCE, UPPER):
            continue
        values, role = tasks[task], _role(method, record)
        normalised = normalise(values, record, split)
        rows.append({"method": method, "runs": len(values), "raw": float(values.mean()),
                     "se": _standard_error(values), "normalised": float(normalised.mean()), "role": role,
                     **({"per_run": normalised.tolist()} if role.startswith("agent") else {})})
    return rows


def _role(method: str, record: Mapping[str, Any]) -> str:
    if method == record["upper"]:
        return "upper (privileged)"
    if method in record.get("uppers", ()):
        return "privileged (searched)"
    if method == record["reference"]:
        return "reference"
    if method in record["fixed"]:
        tuned = [n for n, t in record["tuned"].items() if t["chosen"] == method]
        return f"tuned ({tuned[0]})" if tuned else "fixed"
    return "agent's start (imitation)" if method.endswith(START) else "agent"


def markdown(report: Mapping[str, Any], refs: Mapping[str, Any], suite_name: str) -> str:
    """The report as Markdown: suite aggregates, then one table per task, per split."""
    lines = [f"# Benchmark {suite_name}", "", hardware_line(), ""]
    for key, counted in ORIGINS.items():
        if report.get(key):
            origins = "; ".join(f"{origin} ({n})" for origin, n in report[key].items())
            lines += [f"{counted}: {origins}.", ""]
    for split, body in report["splits"].items():
        lines += [f"## {split} split", "", "| method | runs | IQM [95 % CI] | mean [95 % CI] | median | "
                  "P(> best fixed) [95 % CI] | tasks >= 1 |", "|---|---|---|---|---|---|---|"]
        for method, agg in body["suite"].items():
            lines.append(f"| {method} | {agg['runs']} | {_ci(agg['iqm'])} | {_ci(agg['mean'])} | "
                         f"{agg['median'][0]:.2f} | {_ci(agg['p_improve_on_best'])} | "
                         f"{agg['at_or_above_best']}/{len(refs)} |")
        for task, rows in body["tasks"].items():
            ref, room = refs[task]["refs"][split], body["headroom"][task]
            lines += ["", f"### {task} ({split})", "",
                      f"ref_min {ref['ref_min']:.4f} ({refs[task]['reference']}), ref_max "
                      f"{ref['ref_max']:.4f} ({ref['best']}); score: {refs[task]['score']}. Spread "
                      f"{room['spread']:.4f} = {room['spread_in_se']:.1f} s.e.; {_upper(room['upper'])}; "
                      f"one episode's seed-to-seed s.d. {room['seed_sd']:.4f}; reward "
                      f"signal-to-noise (best fixed - reference, per episode) {room['reward_snr']:.2f}.", "",
                      "| method | role | runs | raw ± s.e. | normalised (an agent's runs) |",
                      "|---|---|---|---|---|"]
            for row in sorted(rows, key=lambda r: -r["raw"]):
                each = f" ({', '.join(f'{v:.2f}' for v in row['per_run'])})" if "per_run" in row else ""
                lines.append(f"| {row['method']} | {row['role']} | {row['runs']} | {row['raw']:.4f} ± "
                             f"{row['se']:.4f} | {row['normalised']:.2f}{each} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _upper(normalised: float) -> str:
    """Where a task's upper reference stands, in the task header (NaN: the task has none)."""
    return "no upper reference" if math.isnan(normalised) else f"upper reference at {normalised:.2f}"


def _ci(triple: Sequence[float]) -> str:
    return f"{triple[0]:.2f} [{triple[1]:.2f}, {triple[2]:.2f}]"


def table_csv(report: Mapping[str, Any]) -> str:
    """Every per-task row of every split as CSV."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["split", "task", "method", "role", "runs", "raw", "se", "normalised"])
    for split, body in report["splits"].items():
        for task, rows in body["tasks"].items():
            for r in rows:
                writer.writerow([split, task, r["method"], r["role"], r["runs"], r["raw"], r["se"],
                                 r["normalised"]])
    return buffer.getvalue()


def hardware_line() -> str:
    """One line for the report's header: where it was written (its runs' machines follow it)."""
    h = hardware()
    return f"Reported on {h['machine']}, {h['cpus']} CPUs, Python {h['python']}, torch {h['torch']}."


def plot_profiles(report: Mapping[str, Any], split: str, path: Path) -> Path:
    """Performance profiles: the share of run-task scores above each normalised score."""
    from fl_gym.training.plots import plot_xy

    lines = {m: (PROFILE_TAUS.tolist(), agg["profile"])
             for m, agg in report["splits"][split]["suite"].items()}
    return plot_xy(lines, "normalised score tau (0 = FedAvg, 1 = best fixed policy)",
                   "share of runs x tasks > tau", f"performance profiles, {split} split", path)


def write_report(report: Mapping[str, Any], refs: Mapping[str, Any], suite_name: str,
                 specs: Mapping[str, str], out: Path) -> list[Path]:
    """``report.md``, ``.csv``, ``.json`` (with the hardware and each task's ``EnvSpec``), profile PNGs."""
    data = {**report, "suite": suite_name, "hardware": hardware(), "env_specs": dict(specs)}
    written = [write_text(out / "report.md", markdown(report, refs, suite_name)),
               write_text(out / "report.csv", table_csv(report)), write_json(out / "report.json", data)]
    return written + [plot_profiles(report, split, out / f"profile_{split}.png")
                      for split in report["splits"]]
