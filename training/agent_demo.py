"""One demo section: PPO trained briefly on one env id, then compared with the family's fixed policies.

1. ``fl-gym train ENV_ID`` for ``budget`` steps (every step is a real FL round);
2. ``fl-gym compare`` with the fixed policies on evaluation seeds apart from training's; the
   table is printed, tables and plots are written under ``out/compare``.

Rerunning reuses a finished (or resumes an interrupted) agent run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fl_gym.training import runs
from fl_gym.training.compare import compare, markdown_table


def train_and_compare(out: Path, env_id: str, fixed: list[str], budget: int, episodes: int, describe: str,
                      algo: str = "ppo", env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run both steps; ``describe`` says what the env's default preset is."""
    agent = out / env_id / algo
    if not (agent / "config.yml").is_file():  # a demo started alongside may claim it first
        runs.claim_run_dir(runs.resolve(env_id, algo, env_kwargs=env_kwargs, total_timesteps=budget,
                                        save_freq=max(budget // 4, 240)), agent)
    print(f"1/2 training PPO on {env_id} ({describe}) for {budget} steps in {agent}")
    runs.train(agent)
    seeds = tuple(range(10000, 10000 + episodes))
    print(f"\n2/2 comparing on {env_id}, {len(seeds)} episodes")
    table = compare(env_id, fixed + [f"{algo}:{agent}"], seeds, env_kwargs, out_dir=out / "compare")
    print(markdown_table(table))
    print(f"tables (md, csv, json) and plots (png) in {out / 'compare'}")
    return table
