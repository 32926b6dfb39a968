"""The Flower bridge: a policy's episode on Flower's simulation runtime equals the env's episode.

With full-batch local training (``batch_size`` above every client's data) a client's minibatch
order cannot matter, so the only differences left between the Flower run and the env are where
the arithmetic runs (a ClientApp's process training one client, against one stacked cohort) and
the float round-trip through Flower's arrays (exact for float32). Accuracies must then agree to
the last test sample (tolerance 1e-6 on a fraction of ~400 samples, i.e. no sample may differ),
and the actions to float32 rounding. HAPFL's many epochs accumulate rounding from the stacked
batch's other kernel shapes, so there one test sample may differ (the slow case).
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason='the Flower extra is not installed (pip install "fl-gym[flower]")')

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402

from fl_gym.integrations import flower  # noqa: E402
from fl_gym.integrations.flower import EnvSpec, PolicyStrategy, client_seed  # noqa: E402
from fl_gym.training.cli import main  # noqa: E402
from fl_gym.training.flower_app import comparison, env_episode, run_local, strategy_for  # noqa: E402

FULL_BATCH = {"batch_size": 1000}


class Lines(logging.Handler):
    """Flower's log lines (its logger does not propagate to pytest's capture)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def flower_log():
    handler, logger = Lines(), logging.getLogger("flwr")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def _assert_same_episode(flower_rows, env_rows, accuracy_tol=1e-6):
    assert len(flower_rows) == len(env_rows) > 0
    for row in comparison(flower_rows, env_rows):
        assert row["flower_accuracy"] == pytest.approx(row["env_accuracy"], abs=accuracy_tol), row
        assert row["action_gap"] < 1e-5, row
    for f, e in zip(flower_rows, env_rows, strict=True):
        assert f["sim_time"] == pytest.approx(e["sim_time"], rel=1e-9)  # the server's clock, the same draws


def test_rates_on_flower_equal_the_env_and_the_rates_are_logged(flower_log):
    """FedEnt reads probe gradients (a query to the clients) and sets each client's rate in its config."""
    strategy = run_local(strategy_for(EnvSpec("FLLearningRate-v0", FULL_BATCH), "fedent", seed=3),
                         num_rounds=2)
    _assert_same_episode(strategy.history, env_episode(strategy, 2))
    trained = [line for line in flower_log if "train clients" in line]
    assert [line.split(":")[0] for line in trained] == ["round 1", "round 2"]
    rates = [r for r in strategy.history[0]["action"]]
    assert len(set(np.round(rates, 6))) > 1  # FedEnt's per-client rates differ, and the log shows them
    assert "lr [" in trained[0] and any("aggregated" in line for line in flower_log)


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "policy", "kwargs", "tol"), [
    ("FLSelect-v0", "fedentropy", FULL_BATCH, 1e-6),
    ("FLAggregate-v0", "fedadp", FULL_BATCH, 1e-6),
    ("FLHetero-v0", "oracle", {"backend": "torch", **FULL_BATCH}, 0.01),
])
def test_every_decision_kind_on_flower_equals_the_env(env_id, policy, kwargs, tol):
    strategy = run_local(strategy_for(EnvSpec(env_id, kwargs), policy, seed=3), num_rounds=3)
    _assert_same_episode(strategy.history, env_episode(strategy, 3), tol)


def test_a_federation_that_only_runs_its_clock_is_refused_naming_the_argument_that_trains():
    with pytest.raises(ValueError, match=r"env_kwargs=.*trains models \(backend='torch'; without"):
        EnvSpec("FLHetero-v0").make()


def test_a_stateful_local_algorithm_is_refused():
    with pytest.raises(ValueError, match="algorithm='pfedme'.*no client state"):
        EnvSpec("FLHetero-v0", {"backend": "torch", "algorithm": "pfedme"}).make()


@pytest.mark.parametrize("name", ["randomize_scenario", "redraw_partition"])
def test_a_scenario_drawn_per_episode_is_refused(name):
    with pytest.raises(ValueError, match=f"{name}=True is out of range; allowed: False"):
        EnvSpec("FLLearningRate-v0", {name: True}).make()


@pytest.mark.parametrize(("kwargs", "name"), [({"seed": -1}, "seed"), ({"node_timeout": 0}, "node_timeout"),
                                             ({"policy": 3}, "policy"),  # 'int' object is not callable, late
                                             ({"seed": 2**40}, "seed"),  # the env's reset refused it, late
                                             ({"deterministic": "no"}, "deterministic"),  # read as True
                                             ({"label": 5}, "label")])
def test_bad_strategy_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"{name}="):
        PolicyStrategy(EnvSpec("FLLearningRate-v0"), **{"policy": lambda env: None, **kwargs})


def test_a_policy_function_that_builds_no_predictor_is_named():
    with pytest.raises(ValueError, match="policy=.* is out of range; allowed: a predictor or a function that "
                                         r"returns one \(this one returned None\)"):
        _ = PolicyStrategy(EnvSpec("FLLearningRate-v0"), lambda env: None).predictor


@pytest.mark.parametrize(("spec", "message"), [
    (lambda: EnvSpec("CartPole-v1"), "env_id='CartPole-v1' is not registered"),  # failed in a client app
    (lambda: EnvSpec("FLLearningRate-v0", "preset=small"), "env_kwargs='preset=small' is out of range"),
    (lambda: EnvSpec("FLLearningRate-v0", {"x": object()}), "allowed: JSON values (they are sent to the"),
    (lambda: EnvSpec("FLLearningRate-v0", scenario_seed=-1), "scenario_seed=-1 is out of range"),
])
def test_an_env_spec_is_checked_where_it_is_made(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        spec()


class EmptyGrid:
    def get_node_ids(self):
        return []


def test_the_strategy_waits_for_one_node_per_client_then_says_how_many_came():
    strategy = PolicyStrategy(EnvSpec("FLLearningRate-v0"), lambda env: None, node_timeout=0.2)
    with pytest.raises(TimeoutError, match="0 of num_clients=20 nodes registered"):
        strategy.start(EmptyGrid(), num_rounds=1)
    with pytest.raises(ValueError, match="initial_arrays=.*allowed: None"):
        strategy.start(EmptyGrid(), initial_arrays=ArrayRecord(), num_rounds=1)


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"timeout": -1}, "timeout=-1 is out of range; allowed: seconds > 0"),
    ({"timeout": "x"}, "timeout='x' is out of range"),  # float('x')'s ValueError
    ({"evaluate_fn": 5}, "evaluate_fn=5 is out of range"),  # 'int' object is not callable, after round 1
    ({"train_config": 5}, "train_config=5 is out of range; allowed: None or a mapping"),  # a TypeError
    ({"train_config": {"a": None}}, "allowed: Flower config values (Not all values are of valid type"),
    ({"train_config": {"lr": 0.5}}, "allowed: keys other than spec, server-round, client, model, lr"),
])
def test_start_names_a_bad_argument_before_it_waits_for_nodes(kwargs, said):
    """Each failed late (at the first round's messages or after it) or was dropped without a word."""
    strategy = PolicyStrategy(EnvSpec("FLLearningRate-v0"), lambda env: None, node_timeout=0.01)
    with pytest.raises(ValueError, match=re.escape(said)):
        strategy.start(EmptyGrid(), num_rounds=1, **kwargs)


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"num_cpus_per_client": 0}, "num_cpus_per_client=0 is out of range; allowed: a number in (0, "),
    ({"num_cpus_per_client": 10**6}, "num_cpus_per_client=1000000 is out of range"),  # "ActorPool is empty"
    ({"strategy": 5}, "strategy=5 is out of range; allowed: a PolicyStrategy"),  # an AttributeError
])
def test_run_local_names_a_bad_argument_before_flower_starts(kwargs, said, monkeypatch):
    """Flower's simulation crashed on the first two ("Simulation Runtime crashed"), after starting Ray."""
    import flwr.simulation

    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **_: pytest.fail("Flower started"))
    strategy = strategy_for(EnvSpec("FLLearningRate-v0", FULL_BATCH), "fedavg")
    with pytest.raises(ValueError, match=re.escape(said)):
        run_local(**{"strategy": strategy, "num_rounds": 1, **kwargs})


def test_a_policy_that_is_no_string_is_named():
    with pytest.raises(ValueError, match=r"policy=5 is out of range; allowed: a policy string"):
        strategy_for(EnvSpec("FLLearningRate-v0"), 5)  # 'int' object has no attribute 'partition'


def test_client_seeds_differ_per_client_and_round_and_fit_flower_records():
    seeds = {client_seed(key, client) for key in (1, 2) for client in range(50)}
    assert len(seeds) == 100 and max(seeds) < 2**63


@pytest.fixture
def app_process(monkeypatch):
    """The task identity Flower's runtime gives an app's process, which a ``Message`` built there reads.

    Without it a message built here fails, or passes only after a test that ran a simulation.
    """
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:  # an older flwr's messages read no identity
        return
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _context(partition_id: int) -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": partition_id}, state=RecordDict(),
                   run_config={})


def test_the_client_app_refuses_a_message_for_another_client(app_process):
    spec = EnvSpec("FLLearningRate-v0", FULL_BATCH).to_json()
    config = ConfigRecord({"spec": spec, "client": 1, "model": 0, "lr": 0.05, "epochs": 1.0, "steps": 1,
                           "seed": 0})
    message = Message(RecordDict({"config": config, "arrays": ArrayRecord()}), dst_node_id=7,
                      message_type=MessageType.TRAIN)
    with pytest.raises(ValueError, match="client=1 is out of range; allowed: this node's partition-id 2"):
        flower.train(message, _context(2))


def test_the_client_app_trains_its_own_partition_like_the_federation(app_process):
    """One train message: the reply's model is what the client's own federation trains from the same start."""
    spec = EnvSpec("FLLearningRate-v0", FULL_BATCH)
    fed = spec.make().federation
    start = fed.global_models[0].clone()
    config = ConfigRecord({"spec": spec.to_json(), "client": 4, "model": 0, "lr": 0.05, "epochs": 2.0,
                           "steps": 2, "seed": 11})
    arrays = ArrayRecord({"model": flwr.app.Array(start.numpy())})
    reply = flower.train(Message(RecordDict({"config": config, "arrays": arrays}), dst_node_id=7,
                                 message_type=MessageType.TRAIN), _context(4))
    selected = np.arange(fed.num_clients) == 4
    from fl_gym.records import RoundPlan

    plan = RoundPlan.make(fed.num_clients, lr=0.05, selected=selected, epochs=2.0)
    stats, cohort = fed.train_clients(plan, np.where(selected, 2, 0), 11)
    np.testing.assert_array_equal(reply.content["arrays"]["model"].numpy(),
                                  cohort.members[0].stack.rows()[0].numpy())
    assert reply.content["metrics"]["loss"] == pytest.approx(stats.loss[4])
    assert reply.content["metrics"]["num-examples"] == fed.sizes[4]


@pytest.mark.parametrize("flag,value,allowed", [("--rounds", "0", "an integer >= 1"),
                                                 ("--rounds", "21", "at most the episode's 20 rounds"),
                                                 ("--seed", "-1", "an integer in [0, "),  # was seed=-1
                                                 ("--scenario-seed", "-1", "an integer in [0, ")])
def test_cli_flower_refuses_bad_flags_with_exit_2_before_it_starts(flag, value, allowed, tmp_path, capsys):
    """Zero rounds, more than the env's episode (which would cut the run short), or a seed out of range
    (named as its flag): one line, no output."""
    code = main(["flower", "FLLearningRate-v0", "--policy", "fedavg", "--rounds", "1", flag, value,
                 "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"{flag}={value} is out of range" in err[0] and allowed in err[0]
    assert list(tmp_path.iterdir()) == []


def test_cli_flower_refuses_a_model_of_another_env_before_flower_starts(tmp_path, capsys, monkeypatch):
    """The policy was first built on the env inside Flower's run: Ray and the nodes started first."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    PPO("MlpPolicy", gym.make("FLHetero-v0"), n_steps=16, batch_size=16).save(tmp_path / "hetero.zip")
    started = []
    monkeypatch.setattr("flwr.simulation.run_simulation", lambda **kwargs: started.append(kwargs))
    code = main(["flower", "FLLearningRate-v0", "--policy", f"ppo:{tmp_path / 'hetero.zip'}", "--rounds", "1",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "was trained on observations of shape (6,)" in err[0]
    assert started == [] and not (tmp_path / "out").exists()
