"""Benchmark task of the HAPFL family (``fl-gym benchmark``).

HAPFL's paper env is a contextual bandit: each round's load is drawn afresh, the probe shows it,
and the balanced oracle solves the round in closed form from the observation. The task makes
history matter. Each device's availability and drift persist from round to round
(``load_persistence=0.9``, an AR(1) in log space) and the drift between the probe and training is
large (``sigma_drift=0.5``), so the probe alone misjudges a device that stays slow for several
rounds, while the slowdown measured the last time it trained, shown in the observation
(``obs_mode="history"``), predicts it. ``history-oracle`` forecasts from it, tuned over the
forecast's persistence and over which size fills the balance window (the largest, as the paper's
oracle, or the smallest, which trains in less time where the balance is the same); the
privileged ``clairvoyant`` oracle sees this round's drift and, its better fit per federation, is
the upper reference. The score is the env's own return (HAPFL's joint timing reward).
"""

from __future__ import annotations

from fl_gym.training.benchmark.tasks import Task

TASKS = (
    Task(name="hetero-drift", env_id="FLHetero-v0",
         doc="Model size and epoch share for 12 of 20 clients a round (scale20: 3 sizes, speeds 20x apart), "
             "with a device load that persists from round to round: the last measured slowdown forecasts "
             "this round's.",
         env_kwargs={"preset": "scale20", "obs_mode": "history", "load_persistence": 0.9, "sigma_drift": 0.5},
         budget=300_000, score="return",
         reference="large", heuristics=("large", "small", "greedy", "inverse", "oracle", "history-oracle"),
         tuned={"history-oracle": tuple(f"history-oracle[rho={r},fit={fit}]"
                                        for r in (0.5, 0.7, 0.9, 1.0) for fit in ("largest", "smallest"))},
         upper=("clairvoyant", "clairvoyant[fit=smallest]"), extrapolation={"heterogeneity": 50.0},
         hyperparams="FLHetero-v0/bench-imitate"),
    Task(name="smoke-hetero", env_id="FLHetero-v0", suites=("smoke",),
         doc="A three-round hetero-drift for checking the benchmark's pipeline in seconds (not a benchmark).",
         env_kwargs={"obs_mode": "history", "load_persistence": 0.9, "sigma_drift": 0.5,
                     "rounds_per_episode": 3},
         budget=32, score="return", reference="large", heuristics=("large", "oracle"),
         tuned={"history-oracle-rho": ("history-oracle[rho=0.5]", "history-oracle[rho=0.9]")},
         upper=("clairvoyant", "oracle"), extrapolation={"heterogeneity": 50.0},
         hyperparams="FLHetero-v0/smoke", test_scenarios=(1, 2), eval_seeds=(1_000_000_000, 1_000_000_001)),
)
