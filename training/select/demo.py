"""The selection section of the main job: PPO on ``FLSelect-v0`` briefly, against FedEntropy and FedAvg.

1. ``fl-gym train FLSelect-v0`` for ``steps // 4`` steps (every step is a real FL round);
2. ``fl-gym compare`` with FedEntropy, its no-pools ablation, FedAvg and random dropping on
   evaluation seeds apart from training's: test accuracy, uploads, uplink bytes.

Everything goes under ``out``; rerunning reuses a finished (or resumes an interrupted) agent run.
"""

from __future__ import annotations

from pathlib import Path

from fl_gym.training import runs
from fl_gym.training.compare import compare, markdown_table

FIXED = ["fedentropy", "fedentropy-nopools", "fedavg", "random-drop"]


def run_demo(out: Path, steps: int = 40000, episodes: int = 5, accuracy_rounds: int = 15) -> None:
    """Train, compare, print the table; ``accuracy_rounds`` is unused (every round here trains for real)."""
    agent = out / "FLSelect-v0" / "ppo"
    budget = max(steps // 4, 240)
    if not (agent / "config.yml").is_file():
        cfg = runs.resolve("FLSelect-v0", "ppo", total_timesteps=budget, save_freq=max(budget // 4, 240))
        agent = runs.new_run_dir(cfg, out, "ppo")
    print(f"1/2 training PPO on FLSelect-v0 (tiny preset: digits, 20 clients, 5 candidates, 30 rounds) for {budget} "
          f"steps in {agent}")
    runs.train(agent)
    seeds = tuple(range(10000, 10000 + episodes))
    print(f"\n2/2 comparing on FLSelect-v0, {len(seeds)} episodes of 30 rounds each")
    table = compare("FLSelect-v0", FIXED + [f"ppo:{agent}"], seeds, out_dir=out / "compare")
    print(markdown_table(table))
    print(f"tables (md, csv, json) and plots (png) in {out / 'compare'}")
