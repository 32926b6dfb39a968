"""The selection section of the main job: PPO on ``FLSelect-v0`` briefly, against FedEntropy and FedAvg.

Test accuracy, uploads and uplink bytes against FedEntropy, its no-pools ablation, FedAvg and
random dropping (:func:`~fl_gym.training.agent_demo.train_and_compare`).
"""

from __future__ import annotations

from pathlib import Path

from fl_gym.training.agent_demo import train_and_compare

FIXED = ["fedentropy", "fedentropy-nopools", "fedavg", "random-drop"]


def run_demo(out: Path, steps: int = 40000, episodes: int = 5, accuracy_rounds: int = 15) -> None:
    """Train ``steps // 4`` steps and compare; ``accuracy_rounds`` is unused (every round trains here)."""
    train_and_compare(out, "FLSelect-v0", FIXED, max(steps // 4, 240), episodes,
                      "tiny preset: digits, 20 clients, 5 candidates, 30 rounds")
