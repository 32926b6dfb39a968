"""Resumable result sections for ``fl-gym reproduce``: one ``compare`` call or one agent run each.

A section's folder holds its tables and plots; a finished one (its ``results.json`` exists) is
read back instead of rerun, so an interrupted reproduction resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fl_gym.atomic import read_json
from fl_gym.training import runs
from fl_gym.training.compare import compare

Say = Callable[[str], None]


def section(out: Path, name: str, env_id: str, policies: list[str], seeds: tuple[int, ...],
            env_kwargs: dict[str, Any], say: Say, target: float | None = None) -> dict[str, Any]:
    """``compare`` into ``out/name``, or its stored results."""
    folder = out / name
    if (folder / "results.json").is_file():
        return read_json(folder / "results.json")
    say(f"{name}: {env_id}, {', '.join(policies)} on seeds {list(seeds)}")
    return compare(env_id, policies, seeds, env_kwargs, out_dir=folder, progress=False, target=target)


def agent(out: Path, env_id: str, steps: int, env_kwargs: dict[str, Any], say: Say,
          algo: str = "ppo") -> Path:
    """Train (or resume, or reuse) an agent under ``out/agents/ENV_ID/ALGO``; its folder."""
    folder = out / "agents" / env_id / algo
    if not (folder / "config.yml").is_file():
        cfg = runs.resolve(env_id, algo, env_kwargs=env_kwargs, total_timesteps=steps,
                           save_freq=max(steps // 4, 240))
        folder = runs.new_run_dir(cfg, out / "agents", algo)
    say(f"training {algo} on {env_id} ({steps} steps)")
    runs.train(folder, progress=False, say=say)
    return folder
