"""fl-gym's benchmark: task suites with train/test federations, pinned references, agents' runs, reports.

``fl-gym benchmark run --suite core-v1 --algo fixed`` pins the references (every fixed policy on
the test federations, tuned baselines chosen on the tuning federations); ``--algo ppo --seeds 0-4``
trains and tests agents; ``fl-gym benchmark report`` writes the tables, intervals and profiles.
A suite's references, as the pinned command measured them, ship with the package
(``references/SUITE.json``), so :func:`normalized_score` works without rerunning them.
See ``docs/benchmark.md``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import gymnasium as gym

from fl_gym.agents.ppo import ALGOS
from fl_gym.atomic import read_json, require_writable, write_json
from fl_gym.training.benchmark import report as reporting
from fl_gym.training.benchmark.protocol import (
    check_algo,
    is_reference_range,
    read_record,
    require_reference,
    run_agent,
    task_references,
)
from fl_gym.training.benchmark.scores import normalized_score as _normalized
from fl_gym.training.benchmark.tasks import Task, all_tasks, suite, suite_names
from fl_gym.validation import as_array, require, require_int_in, require_mapping, require_seeds

__all__ = ["Task", "all_tasks", "suite", "suite_names", "suite_tasks", "references", "run", "report",
           "normalized_score", "stored_references"]


def suite_tasks(suite_name: str, only: Sequence[str] | None = None) -> list[Task]:
    """The suite's tasks, or those named in ``only``; a ``ValueError`` names an unknown suite or task."""
    tasks = suite(suite_name)
    require(only is None or (isinstance(only, (list, tuple)) and all(isinstance(n, str) for n in only)),
            "--tasks", only, "None or a list of task names")  # not one name: its letters
    if only:
        names = [t.name for t in tasks]
        unknown = [n for n in only if n not in names]
        require(not unknown, "--tasks", unknown, f"tasks of {suite_name}: {', '.join(names)}")
        tasks = [t for t in tasks if t.name in only]
    return tasks


def references(suite_name: str, out: str | Path, only: Sequence[str] | None = None,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """Pin the suite's references (resumable per task): ``out/references/TASK.json``, ``out/references.json``.

    ``references.json`` gathers every task of the suite pinned under ``out`` so far, so processes
    that pin different ``only`` tasks into one folder share it. It is gathered again after each
    write until no task was pinned meanwhile: the last write then holds every task.
    """
    out = Path(out)
    for task in suite_tasks(suite_name, only):
        path = out / "references" / f"{task.name}.json"
        if not path.is_file():
            say(f"{task.name}: references")
            write_json(path, task_references(task, say))
    paths = {t.name: out / "references" / f"{t.name}.json" for t in suite(suite_name)}
    records: dict[str, Any] = {}
    while (done := {name for name, p in paths.items() if p.is_file()}) != records.keys():
        records = {name: read_json(paths[name]) for name in paths if name in done}  # also another process's
        for name, record in records.items():
            require_reference(paths[name], record)
        write_json(out / "references.json", records)
    return records


def run(suite_name: str, algo: str, seeds: Sequence[int], out: str | Path, only: Sequence[str] | None = None,
        progress: bool = True, say: Callable[[str], None] = print) -> dict[str, dict[str, list[dict]]]:
    """Train and score ``algo`` on every task and seed (resumable); ``algo="fixed"`` pins the references."""
    require(algo in (*ALGOS, "fixed"), "--algo", algo, f"{', '.join(ALGOS)}, or fixed (the references)")
    tasks = suite_tasks(suite_name, only)  # the suite, tasks, seeds and folder are checked before any run
    if algo != "fixed":
        require_seeds("seeds", seeds)
    require_writable(out, "out")
    if algo == "fixed":
        references(suite_name, out, only, say)
        return {}
    check_algo(tasks, algo)
    results: dict[str, list[dict]] = {}
    for task in tasks:
        for seed in seeds:
            say(f"{task.name}: {algo} seed {seed} ({task.budget} steps)")
            results.setdefault(task.name, []).append(run_agent(task, algo, seed, Path(out), progress, say))
    return {algo: results}


def stored_references(suite_name: str) -> dict[str, Any]:
    """The references of ``suite_name`` that ship with the package (as its pinned command measured them).

    Raises:
        FileNotFoundError: the suite has none stored.
    """
    path = _stored(suite_name)
    if not path.is_file():
        raise FileNotFoundError(f"no stored references for suite {suite_name!r}; pin them with "
                                f"fl-gym benchmark run --suite {suite_name} --algo fixed")
    return read_json(path)


def _stored(suite_name: str) -> Any:
    return resources.files("fl_gym.training.benchmark").joinpath("references", f"{suite_name}.json")


def pinned(suite_name: str, runs_dir: str | Path) -> bool:
    """Whether a report of ``runs_dir`` has references: pinned there, or stored with the package."""
    return (Path(runs_dir) / "references.json").is_file() or _stored(suite_name).is_file()


def normalized_score(task: str | Task, value: Any, split: str = "test", refs: dict[str, Any] | None = None
                     ) -> Any:
    """``value`` (a score or an array of them) on ``task``, normalised: 0 = FedAvg, 1 = the best fixed policy.

    ``refs``: the references to read (default: those stored with the package).
    """
    found = task if isinstance(task, Task) else all_tasks().get(task) if isinstance(task, str) else None
    require(found is not None, "task", task, ", ".join(all_tasks()))
    require_mapping("refs", refs, of="task names to their references")
    records = refs if refs is not None else stored_references(found.suites[0])
    require(found.name in records, "task", found.name, f"a task with references ({', '.join(records)})")
    record = records[found.name]
    splits = record.get("refs") if isinstance(record, dict) else None
    require(isinstance(splits, dict), f"refs[{found.name!r}]", record,
            "a record with its splits' ranges under 'refs'")
    require(isinstance(split, str) and split in splits, "split", split, ", ".join(splits))
    ref = splits[split]
    require(is_reference_range(ref), f"refs[{found.name!r}]['refs'][{split!r}]", ref,
            "a mapping with finite ref_min and ref_max")
    values = as_array("value", value, "a score or an array of scores")
    require(values.dtype.kind in "iuf", "value", value, "a score or an array of scores (real numbers)")
    return _normalized(values if values.ndim else float(values), ref["ref_min"], ref["ref_max"])


def _agent_runs(runs_dir: Path, tasks: Sequence[Task]) -> dict[str, dict[str, list[dict]]]:
    """``algo -> task -> scores.json records`` found under ``runs_dir/TASK/ALGO-seedN/``, by seed.

    A run that started by imitation also counts its start as a method of its own, ``ALGO start``,
    so that what training added is read off the tables.
    """
    agents: dict[str, dict[str, list[dict]]] = {}
    for task in tasks:
        found = (runs_dir / task.name).glob("*-seed*/scores.json")
        records = sorted((read_record(p) for p in found), key=lambda r: r["seed"])
        for record in records:
            agents.setdefault(record["algo"], {}).setdefault(task.name, []).append(record)
            if "start" in record:
                start = {**record["start"], "seed": record["seed"]}
                starts = agents.setdefault(record["algo"] + reporting.START, {})
                starts.setdefault(task.name, []).append(start)
    return agents


def report(suite_name: str, runs_dir: str | Path, out: str | Path | None = None, reps: int = 2000
           ) -> dict[str, Any]:
    """Tables of the suite's references and every agent run under ``runs_dir``, written to ``out``.

    The references come from ``runs_dir/references.json`` if the run pinned them, else the stored
    ones. Returns :func:`~fl_gym.training.benchmark.report.build`'s content and its ``markdown``.
    """
    require_int_in("reps", reps, 1, 10**6)  # bootstrap resamples of the intervals
    runs_dir = Path(runs_dir)
    tasks = suite(suite_name)
    if not pinned(suite_name, runs_dir):
        raise FileNotFoundError(f"no references for suite {suite_name!r} in {runs_dir} or stored with the "
                                f"package; pin them with fl-gym benchmark run --suite {suite_name} "
                                f"--algo fixed --out {runs_dir}")
    local = runs_dir / "references.json"
    source = local if local.is_file() else _stored(suite_name)  # one of them is: pinned() above
    refs = read_json(source)
    found = sorted(refs) if isinstance(refs, dict) else []  # null or a list: written by another tool
    missing = [t.name for t in tasks if t.name not in found]
    require(not missing, f"{source}: tasks", found,
            f"a record for every task of {suite_name} (missing {missing})")
    for task in tasks:  # a task's record edited or written by another tool
        require_reference(f"{source}: {task.name}", refs[task.name])
    refs = {t.name: refs[t.name] for t in tasks}
    agents = _agent_runs(runs_dir, tasks)
    content = reporting.build(refs, agents, reps)
    if len(content["codes"]) > 1:
        warnings.warn(f"{runs_dir}: its agent runs were scored by {len(content['codes'])} codes (report.md "
                      f"counts them), which the report compares as one; fl-gym benchmark run scores again, "
                      f"with the code it runs, every run whose scores.json is deleted", stacklevel=2)
    specs = {t.name: env_spec_json(t) for t in tasks}
    reporting.write_report(content, refs, suite_name, specs, Path(out or runs_dir))
    return {**content, "markdown": reporting.markdown(content, refs, suite_name)}


def env_spec_json(task: Task) -> str:
    """The task's ``EnvSpec.to_json()``, with its arguments."""
    spec = gym.spec(task.env_id)
    return dataclasses.replace(spec, kwargs={**spec.kwargs, **task.env_kwargs}).to_json()
