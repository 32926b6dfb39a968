"""Benchmark tasks of the aggregation-weight and learning-rate families (``fl-gym benchmark``).

Both put label-noisy clients into the federation (``noisy_clients``): a share of the clients
train on random labels, which the server cannot see but their updates give away (FedAdp's
angles, the probe losses and gradient cosines). Which clients are noisy is drawn with each
federation, so an agent must detect them from what it observes, not remember their ids; the
privileged ``clean`` policy, which reads them, is the upper reference. The score is the test
accuracy's area. The aggregation tasks reward the validation cross-entropy's drop weighted by the
rounds it lasts (``reward="loss_area"``), far less noisy in one episode than the accuracy gain on
150 validation images, whose return is the loss's area as the score is the accuracy's: with the
plain drop (``loss_drop``, the initial minus the final loss, whatever the path) PPO's seeds reached
the same return and different scores. ``lr-noisy`` rewards the validation accuracy's area
(``reward="acc_area"``): under either loss reward PPO lowered every client's early rate, and the
validation loss fell while the accuracy's area fell too.
"""

from __future__ import annotations

from fl_gym.training.benchmark.tasks import Task

_AGGREGATE_TASK = dict(
    env_id="FLAggregate-v0", budget=100_000, reference="fedavg",
    heuristics=("fedavg", "fedadp", "uniform", "fedcos"),
    tuned={"fedadp-alpha": ("fedadp[alpha=2]", "fedadp[alpha=5]", "fedadp[alpha=10]", "fedadp[alpha=20]")},
    upper="clean", hyperparams="FLAggregate-v0/bench")
AGGREGATE_TASKS = (
    Task(name="aggregate-noisy",
         doc="Aggregation weights for 10 clients (digits, Dirichlet 0.3), 3 of them training on random "
             "labels: the weights should mute them, from the update angles and statistics the server sees.",
         env_kwargs={"noisy_clients": 0.3, "reward": "loss_area"}, extrapolation={"noisy_clients": 0.5},
         **_AGGREGATE_TASK),
    Task(name="aggregate-flip",
         doc="aggregate-noisy with label-flipping clients: the 3 noisy clients train on the mirror class "
             "c-1-y, so their models stay confident and only their update directions give them away.",
         env_kwargs={"noisy_clients": 0.3, "label_noise": "flip", "reward": "loss_area"},
         extrapolation={"noisy_clients": 0.4}, **_AGGREGATE_TASK),
    Task(name="smoke-aggregate", env_id="FLAggregate-v0", suites=("smoke",),
         doc="A three-round aggregate-noisy for checking the benchmark's pipeline in seconds (not a "
             "benchmark).",
         env_kwargs={"noisy_clients": 0.3, "reward": "loss_drop", "rounds_per_episode": 3}, budget=32,
         reference="fedavg",
         heuristics=("fedavg", "fedadp"), tuned={"fedadp-alpha": ("fedadp[alpha=2]", "fedadp[alpha=10]")},
         upper="clean", extrapolation={"noisy_clients": 0.5}, hyperparams="FLAggregate-v0/smoke",
         test_scenarios=(1, 2), eval_seeds=(1_000_000_000, 1_000_000_001)),
)

_RATES = {"noisy_clients": 0.3, "lr_min": 0.01, "lr_max": 1.0, "reward": "acc_area"}


def _steps(policy: str) -> tuple[str, ...]:
    """``policy`` on step-decay schedules: three rates, times 0.3 or 0.5 every 5 rounds."""
    return tuple(f"{policy}[lr={lr},schedule=step,gamma={gamma},step_size=5]"
                 for lr in (0.2, 0.3, 0.4) for gamma in (0.3, 0.5))


RATE_TASKS = (
    Task(name="lr-noisy", env_id="FLLearningRate-v0",
         doc="Per-client learning rates for 5 of 20 clients a round (digits, 2 label shards each), 6 of the "
             "20 on random labels: the rate's level matters (FedAvg's 0.05 is far from the best constant) "
             "and a noisy client is best given the least rate. Rates are log-uniform over [0.01, 1], so the "
             "zero action is 0.1.",
         env_kwargs=_RATES, budget=100_000, reference="fedavg",
         heuristics=("fedavg", "fedent", "decay", "fedavgm", "fedadam"),
         tuned={"constant": tuple(f"fedavg[lr={lr}]" for lr in (0.02, 0.05, 0.1, 0.2, 0.4, 0.8)),
                "cosine": tuple(f"fedavg[lr={lr},schedule=cosine]" for lr in (0.1, 0.2, 0.4, 0.8)),
                "step": _steps("fedavg"),
                "fedavgm-lr": tuple(f"fedavgm[lr={lr}]" for lr in (0.01, 0.02, 0.05, 0.1))},
         upper=(*(f"clean[lr={lr},schedule={s}]" for lr in (0.1, 0.2, 0.4, 0.8)
                  for s in ("constant", "cosine")), *_steps("clean")),
         extrapolation={"noisy_clients": 0.5}, hyperparams="FLLearningRate-v0/bench-imitate"),
)
