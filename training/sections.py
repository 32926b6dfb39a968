"""Resumable result sections for ``fl-gym reproduce``: one ``compare`` call or one agent run each.

A section's folder holds its tables and plots; a finished one (its ``results.json`` exists) is
read back instead of rerun, so an interrupted reproduction resumes where it stopped; with a
warning where other code computed it (an upgrade since), whose numbers may differ from this code's.
The output folder records the settings its results depend on (:func:`claim`), so a run under
other settings never reads them back as its own.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fl_gym.atomic import read_json, write_json
from fl_gym.training import runs
from fl_gym.training.compare import compare
from fl_gym.training.provenance import warn_if_other_code
from fl_gym.validation import UserError

Say = Callable[[str], None]
SETTINGS = "settings.json"


def claim(out: Path, settings: dict[str, Any]) -> None:
    """Record in ``out/settings.json`` the flags a resumable command's results depend on, or refuse ``out``.

    A rerun reads back the sections, caches and agents its folder holds. Under other settings it
    would report them as its own: a table of one seed under a title of three, a 500-step agent as
    a 40,000-step one. ``settings`` maps each such flag to its checked value; flags that only pick
    what runs (sections, threads) stay out. A folder written before this record is claimed as it
    is, with a warning.
    """
    asked = json.loads(json.dumps(settings, sort_keys=True, default=repr))  # as the file reads back
    path = out / SETTINGS
    try:
        write_json(path, asked, new=True)
    except FileExistsError:  # recorded before, or by a run started at this instant: the flags must match
        held = read_json(path)
        held = held if isinstance(held, dict) else {}  # not ours: every flag differs
        differ = [f"{flag}={held.get(flag)!r} there, {asked.get(flag)!r} here"
                  for flag in sorted(asked.keys() | held.keys()) if held.get(flag) != asked.get(flag)]
        if differ:
            raise UserError(f"--out={str(out)!r} holds results of other settings ({'; '.join(differ)}); "
                            "allowed: the settings recorded in its settings.json (to resume it), or another "
                            "--out") from None
        return
    if any(p.name != SETTINGS and not p.name.startswith(".") for p in out.iterdir()):
        warnings.warn(f"{out} holds results from before fl-gym recorded their settings: they are read "
                      "back as this run's; remove them if other flags made them", stacklevel=2)


def section(out: Path, name: str, env_id: str, policies: list[str], seeds: tuple[int, ...],
            env_kwargs: dict[str, Any], say: Say, target: float | None = None) -> dict[str, Any]:
    """``compare`` into ``out/name``, or its stored results."""
    folder = out / name
    if (folder / "results.json").is_file():
        return warn_if_other_code(read_json(folder / "results.json", ("summary", "series")), folder)
    say(f"{name}: {env_id}, {', '.join(policies)} on seeds {list(seeds)}")
    return compare(env_id, policies, seeds, env_kwargs, out_dir=folder, progress=False, target=target)


def agent_run(out: Path, env_id: str, steps: int, env_kwargs: dict[str, Any], algo: str = "ppo"
              ) -> tuple[runs.RunConfig, Path]:
    """An agent's config, the stored one or one to write, and its run folder ``out/agents/ENV_ID/ALGO``."""
    folder = out / "agents" / env_id / algo
    if (folder / "config.yml").is_file():
        return runs.load_run(folder), folder
    return runs.resolve(env_id, algo, env_kwargs=env_kwargs, total_timesteps=steps,
                        save_freq=max(steps // 4, 240)), folder


def agent(run: tuple[runs.RunConfig, Path], say: Say) -> Path:
    """Train (or resume, or reuse) the agent of :func:`agent_run`; its folder."""
    cfg, folder = run
    runs.claim_run_dir(cfg, folder)  # unless it holds a run: trained on where it stopped
    say(f"training {cfg.algo} on {cfg.env_id} ({cfg.total_timesteps} steps)")
    runs.train(folder, progress=False, say=say)
    return folder
