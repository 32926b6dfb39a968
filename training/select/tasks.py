"""Benchmark tasks of the selection family (``fl-gym benchmark``).

Label-noisy clients (``noisy_clients``, drawn with each federation) are where selection matters:
a model trained on random labels predicts near-uniformly, which FedEntropy's maximum-entropy
judgement mistakes for a valuable contribution, and which a robust filter or an agent can learn
to avoid. The uplink is free (``lambda_comm=0``) and the reward is the drop of the validation
cross-entropy (``reward_signal="loss"``), which separates good from bad selections in one episode
far more clearly than the accuracy of 150 validation images; ``select-noisy`` weights each
round's drop by the rounds it lasts (``"loss_area"``, the loss's counterpart of the accuracy-area
score): trained on the plain drop, PPO lowered the final loss by dropping clean candidates too,
and scored below FedAvg. The privileged ``clean``,
``clean-pick`` and ``clean-queue`` policies, which read the noisy clients, are the upper references.
On ``FLSelectQueue-v0`` (DDFL) a device's label entropy, which DDFL ranks by, does not show its
noise; the queue tasks add the update statistics a server computes (``update_stats``) and reward
the validation loss the kept devices save against aggregating all of them
(``reward_signal="loss_vs_all"``): on the plain drop PPO's seeds spread from below FedAvg to near
the best fixed policy. ``queue-flip``'s devices flip their labels (``label_noise="flip"``), so
their models look as confident as anyone's.

``pick-devices`` (suite ``devices-v1``) is the selection task of intermittent devices: clients go
offline in spells, drop out, and miss an 8-second deadline, and the reward charges each round's
time (``lambda_time``). On Dirichlet 0.1 data the fast devices FedCS keeps picking hold too few
classes, so being fast and being accurate pull apart: FedCS is quickest and Oort most accurate.
The agent picks by scores (``pick_action``, an agent argument), the fixed policies by sets, so
FedCS may pick fewer than ``m``.
"""

from __future__ import annotations

from fl_gym.baselines.select import SERVER_DATA
from fl_gym.training.benchmark.tasks import Task

# DDFL's setting (the server streams 10 % of the data to the devices), the update statistics a server
# computes, and the loss the kept devices save against aggregating all (a difference reward: the round's luck
# cancels)
_QUEUE = {**SERVER_DATA, "lambda_comm": 0.0, "update_stats": True, "reward_signal": "loss_vs_all"}
_QUEUE_TASK = dict(
    env_id="FLSelectQueue-v0", budget=100_000, reference="queue-all",
    heuristics=("queue-all", "ddfl", "ddfl-0.8", "cos-trim"),
    tuned={"cos-trim-k": tuple(f"cos-trim[k={k},smooth={m}]" for k in (3, 6, 9) for m in (True, False))},
    upper="clean-queue", hyperparams="FLSelectQueue-v0/bench")

# intermittent devices (on 70 % of rounds, in spells), 5 % dropout, an 8-second deadline, a quarter of the
# round's time over the deadline charged; every picked client uploads; the system columns (on anyway with
# behaviour) named, as the system-aware policies an agent may imitate name them
_DEVICES = {"availability": 0.7, "availability_persistence": 0.8, "dropout": 0.05, "deadline": 8.0,
            "seconds_per_unit": 1.0, "lambda_time": 0.25, "alpha": 0.1, "post_filter": "all",
            "system_rows": True}

TASKS = (
    Task(name="select-noisy", env_id="FLSelect-v0",
         doc="Which of 5 uniformly drawn, trained candidates are aggregated (20 clients, digits, Dirichlet "
             "0.3), 6 clients on random labels: keep the informative updates, drop the corrupted ones.",
         env_kwargs={"noisy_clients": 0.3, "sampler": "uniform", "lambda_comm": 0.0,
                     "reward_signal": "loss_area"},
         budget=100_000,
         reference="fedavg",
         heuristics=("fedavg", "fedentropy", "fedentropy-nopools", "random-drop", "entropy-trim"),
         tuned={"entropy-trim-k": ("entropy-trim[k=1]", "entropy-trim[k=2]", "entropy-trim[k=3]"),
                "random-drop-q": ("random-drop[q=0.6]", "random-drop[q=0.8]", "random-drop[q=0.9]"),
                "entropy-cut-h": tuple(f"entropy-cut[h={h}]" for h in (0.9, 0.93, 0.95, 0.97))},
         upper="clean", extrapolation={"noisy_clients": 0.5}, hyperparams="FLSelect-v0/bench-imitate"),
    Task(name="pick-noisy", env_id="FLSelectPick-v0",
         doc="Who of 20 clients trains, 5 a round, before training (digits, Dirichlet 0.3), 6 on random "
             "labels: what a client's last soft label showed must be remembered through the observation to "
             "avoid it later.",
         env_kwargs={"noisy_clients": 0.3, "lambda_comm": 0.0, "post_filter": "all", "reward_signal": "loss",
                     "pick_action": "scores"},
         budget=100_000,
         reference="random-pick", heuristics=("random-pick", "pools", "stalest", "confident-pick"),
         tuned={"confident-pick-w": tuple(f"confident-pick[w={w}]" for w in (0.0, 0.25, 0.5, 1.0, 2.0)),
                "entropy-cut-pick-h": tuple(f"entropy-cut-pick[h={h}]" for h in (0.9, 0.93, 0.95, 0.97))},
         upper="clean-pick", extrapolation={"noisy_clients": 0.5},
         hyperparams="FLSelectPick-v0/bench-imitate",
         algo_hyperparams={"recurrent-ppo": "FLSelectPick-v0/bench-lstm"}),
    Task(name="queue-noisy",
         doc="Which of 20 one-class devices are aggregated each round, with DDFL's server data queue (10 %), "
             "6 of them on random labels: their label entropy looks like anyone's, their updates point "
             "elsewhere.",
         env_kwargs={**_QUEUE, "noisy_clients": 0.3}, extrapolation={"noisy_clients": 0.5}, **_QUEUE_TASK),
    Task(name="queue-flip",
         doc="queue-noisy with label-flipping devices (the mirror class c-1-y): confident models, wrong "
             "directions.",
         env_kwargs={**_QUEUE, "noisy_clients": 0.3, "label_noise": "flip"},
         extrapolation={"noisy_clients": 0.4}, **_QUEUE_TASK),
    Task(name="pick-devices", env_id="FLSelectPick-v0", suites=("devices-v1",),
         doc="Who of 20 intermittent devices trains, 5 a round, against an 8-second deadline and a charge "
             "for time (digits, Dirichlet 0.1): the fast devices miss classes, the slow ones the deadline.",
         env_kwargs=_DEVICES, budget=100_000, score="return",
         reference="random-pick", heuristics=("random-pick", "pools", "fedcs", "pow-d", "oort"),
         tuned={"oort-alpha": tuple(f"oort[alpha={a}]" for a in (0.5, 1, 2, 5)),
                "pow-d-d": tuple(f"pow-d[d={d}]" for d in (5, 10, 20))},
         extrapolation={"availability": 0.5}, hyperparams="FLSelectPick-v0/bench-devices",
         agent_kwargs={"pick_action": "scores"}),
)
