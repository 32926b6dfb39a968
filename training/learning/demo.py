"""The learning-rate and weight sections of the main job: brief PPO runs against the fixed policies.

* ``FLLearningRate-v0``: PPO sets each sampled client's rate, against FedAvg, FedEnt, its
  decay-only ablation and FedAdam;
* ``FLAggregate-v0``: PPO sets the aggregation weights, against FedAvg, FedAdp and FedCos.

Each is :func:`~fl_gym.training.agent_demo.train_and_compare` on the env's small default preset.
"""

from __future__ import annotations

from pathlib import Path

from fl_gym.training.agent_demo import train_and_compare


def run_rates_demo(out: Path, steps: int = 40000, episodes: int = 5, accuracy_rounds: int = 15) -> None:
    """``steps // 10`` PPO steps on ``FLLearningRate-v0``; ``accuracy_rounds`` is unused."""
    train_and_compare(out, "FLLearningRate-v0", ["fedavg", "fedent", "decay", "fedadam"],
                      max(steps // 10, 240),
                      episodes,
                      "small preset: digits, 20 clients with 2 label shards, 5 per round, 20 rounds")


def run_weights_demo(out: Path, steps: int = 40000, episodes: int = 5, accuracy_rounds: int = 15) -> None:
    """``steps // 10`` PPO steps on ``FLAggregate-v0``; ``accuracy_rounds`` is unused."""
    train_and_compare(out, "FLAggregate-v0", ["fedavg", "fedadp", "fedcos"], max(steps // 10, 240), episodes,
                      "small preset: digits, 10 Dirichlet(0.3) clients, all train each round, 30 rounds")
