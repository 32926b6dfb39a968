"""The main job: HAPFL's dual agent trained briefly on ``FLHetero-v0``, compared with the fixed policies.

1. ``fl-gym train FLHetero-v0 --algo hapfl --preset fast`` with ``steps`` per agent (timing backend);
2. ``fl-gym compare`` on the timing backend (straggling latency, round time, total time), with
   the paper's baselines (FedAvg, FedProx, pFedMe: env variants the registry knows);
3. ``fl-gym compare`` on the torch backend for a few rounds (real training: accuracy).

Everything goes under ``out``; rerunning reuses a finished (or resumes an interrupted) agent run.
"""

from __future__ import annotations

from pathlib import Path

from fl_gym.training import runs
from fl_gym.training.compare import compare, markdown_table

FIXED = ["uniform", "random", "greedy", "inverse", "oracle", "fedavg", "fedprox", "pfedme"]


def run_demo(out: Path, steps: int = 40000, episodes: int = 5, accuracy_rounds: int = 15) -> None:
    """Run the three stages above, printing each table."""
    agent = out / "FLHetero-v0" / "hapfl"
    if not (agent / "config.yml").is_file():  # a demo started alongside may claim it first
        runs.claim_run_dir(runs.resolve("FLHetero-v0", "hapfl", "fast", total_timesteps=2 * steps,
                                        save_freq=max(steps // 4, 256)), agent)
    print(f"1/3 training HAPFL's dual agent (PPO1 then PPO2, {steps} steps each, timing backend) in {agent}")
    runs.train(agent)
    policies = FIXED + [f"hapfl:{agent}"]
    seeds = tuple(range(10000, 10000 + episodes))
    print(f"\n2/3 comparing on FLHetero-v0, timing backend, {len(seeds)} episodes of 100 rounds each")
    timing = compare("FLHetero-v0", policies, seeds, out_dir=out / "compare-timing")
    print(markdown_table(timing))
    torch_kwargs = {"backend": "torch", "local_epochs": 2, "lr": 3e-3, "rounds_per_episode": accuracy_rounds}
    print(f"3/3 comparing with real training (torch backend, digits, {accuracy_rounds} rounds of E_loc=2, lr "
          "3e-3, 2 episodes)")
    accuracy = compare("FLHetero-v0", ["fedavg", "greedy", "oracle", f"hapfl:{agent}"], seeds[:2],
                       torch_kwargs, out_dir=out / "compare-accuracy")
    print(markdown_table(accuracy))
    print(f"tables (md, csv, json) and plots (png) in {out / 'compare-timing'} and "
          f"{out / 'compare-accuracy'}")
