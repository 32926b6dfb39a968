"""Gymnasium environments over the federated simulator; ``import fl_gym`` registers them.

One :func:`~fl_gym.envs.registry.register_family` call per method family (its env ids, fixed
policies, training recipes, metrics and results entry), as Gymnasium's ``envs/__init__.py``
lists its ``register`` calls.
"""

from fl_gym.envs.registry import Family, Metric, Recipe, Stage, register_family

HAPFL = Family(
    name="hetero",
    paper="HAPFL (Chen et al.): model size and local epochs per client",
    envs={"FLHetero-v0": "fl_gym.envs.hetero.env:FLHeteroEnv",
          "FLHeteroAlloc-v0": "fl_gym.envs.hetero.env:FLHeteroAllocEnv",
          "FLHeteroIntensity-v0": "fl_gym.envs.hetero.env:FLHeteroIntensityEnv"},
    policies="fl_gym.baselines.hetero:POLICIES",
    recipes=(Recipe("hapfl", "FLHetero-v0",
                    (Stage("ppo1", "FLHeteroAlloc-v0"),
                     Stage("ppo2", "FLHeteroIntensity-v0", {"allocation_policy": "ppo1"})),
                    compose="fl_gym.baselines.hetero:HAPFLPolicy",
                    doc="HAPFL's dual agent: PPO1 sizes, then PPO2 epochs with PPO1 frozen"),),
    metrics=(Metric("hetero/r1", "R^1"), Metric("hetero/r2_seconds", "R^2 (s)"),
             Metric("hetero/lite_accuracy", "LiteModel acc.", final=True),
             Metric("hetero/global_accuracy/small", "small model acc.", final=True),
             Metric("hetero/mean_local_accuracy", "local acc.", final=True)),
    accuracy_label="large model acc.",
    bench=(("FLHetero-v0", {"backend": "torch"},
            "paper10 on digits: 6 clients x E_loc=20 epochs of small/large "
            "+ LiteModel per round"),),
    reproduce="fl_gym.training.hetero.results:reproduce",
    demo="fl_gym.training.hetero.demo:run_demo",
    vector_clock="fl_gym.envs.hetero.vector:HeteroClock",
    agent_kwargs=("obs_mode", "residual_policy"),
    docs="docs/envs/flhetero.md",
    tasks="fl_gym.training.hetero.tasks:TASKS",
)

SELECTION = ("FLSelect-v0", "FLSelectPick-v0")  # the ids that select clients (not the queue's devices)
SELECT = Family(
    name="select",
    paper="FedEntropy (Ling et al.) and DDFL (Herath et al.): who trains and which trained clients are "
          "aggregated",
    envs={"FLSelect-v0": "fl_gym.envs.select.env:FLSelectEnv",
          "FLSelectPick-v0": "fl_gym.envs.select.env:FLSelectPickEnv",
          "FLSelectQueue-v0": "fl_gym.envs.select.queue_env:FLSelectQueueEnv"},
    policies="fl_gym.baselines.select:POLICIES",
    metrics=(Metric("select/val_accuracy", "validation acc.", final=True),
             Metric("select/kept_share", "kept share"), Metric("select/entropy_kept", "kept entropy"),
             Metric("select/cum_uplink_bytes", "uplink bytes", final=True),
             Metric("select/cum_lost", "lost updates", final=True, env_ids=SELECTION),
             Metric("select/fairness", "selection fairness (Jain)", final=True, env_ids=SELECTION)),
    accuracy_label="global model acc.",
    demo="fl_gym.training.select.demo:run_demo",
    reproduce="fl_gym.training.select.results:reproduce",
    docs="docs/envs/flselect.md",
    agent_kwargs=("pick_action",),
    tasks="fl_gym.training.select.tasks:TASKS",
)

AGGREGATE = Family(
    name="aggregate",
    paper="FedAdp (Wu and Wang): per-client aggregation weights from the update angles",
    envs={"FLAggregate-v0": "fl_gym.envs.aggregate.env:FLAggregateEnv"},
    policies="fl_gym.baselines.aggregate:POLICIES",
    metrics=(Metric("aggregate/val_accuracy", "validation acc.", final=True),),
    accuracy_label="global model acc.",
    demo="fl_gym.training.learning.demo:run_weights_demo",
    reproduce="fl_gym.training.learning.results:reproduce_weights",
    docs="docs/envs/flaggregate.md",
    tasks="fl_gym.training.learning.tasks:AGGREGATE_TASKS",
)


RATES = Family(
    name="rates",
    paper="FedEnt (Zheng et al.): per-client learning rates from a mean-field entropy objective",
    envs={"FLLearningRate-v0": "fl_gym.envs.rates.env:FLLearningRateEnv"},
    policies="fl_gym.baselines.rates:POLICIES",
    metrics=(Metric("rates/val_accuracy", "validation acc.", final=True),
             Metric("rates/share_entropy", "share entropy")),
    accuracy_label="global model acc.",
    demo="fl_gym.training.learning.demo:run_rates_demo",
    reproduce="fl_gym.training.learning.results:reproduce_rates",
    docs="docs/envs/fllearningrate.md",
    tasks="fl_gym.training.learning.tasks:RATE_TASKS",
)


def register_envs() -> None:
    """Register every fl-gym family and env id (idempotent)."""
    register_family(HAPFL)
    register_family(SELECT)
    register_family(AGGREGATE)
    register_family(RATES)
