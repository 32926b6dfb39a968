"""Ray: the vector env's shards as actors equal the process shards; RLlib sees every id. Local Ray, 2 CPUs."""

from __future__ import annotations

import re
import time

import gymnasium as gym
import numpy as np
import pytest

import fl_gym
from fl_gym.agents.ppo import build_agent, make_env
from fl_gym.envs.sharded import ShardedVecEnv, WorkerLost

ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install "fl-gym[ray]"')
from fl_gym.integrations.ray import RayVecEnv, register_rllib  # noqa: E402  (after the skip)

RLLIB = 'RLlib (ray.tune, ray.rllib) is an optional extra: pip install "fl-gym[rllib]"'


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - a sandbox without the shared memory Ray needs
        pytest.skip(f"Ray could not start a local instance here: {exc}")
    yield
    ray.shutdown()


def _fns(env_id: str, n: int, **kwargs):
    return [lambda: gym.make(env_id, **kwargs) for _ in range(n)]


def _play(vec, steps: int) -> list:
    vec.seed(3)
    out = [vec.reset()]
    rng = np.random.default_rng(0)
    for _ in range(steps):
        vec.action_space.seed(int(rng.integers(2**31)))
        out.append(vec.step(np.stack([vec.action_space.sample() for _ in range(vec.num_envs)])))
    vec.close()
    return out


def test_actor_shards_play_the_process_shards_episodes_bit_for_bit():
    kwargs = dict(rounds_per_episode=3)
    by_ray = _play(RayVecEnv(_fns("FLHetero-v0", 4, **kwargs), workers=2), 7)
    by_process = _play(ShardedVecEnv(_fns("FLHetero-v0", 4, **kwargs), workers=2), 7)
    np.testing.assert_array_equal(by_ray[0], by_process[0])
    for (o, r, d, i), (o2, r2, d2, i2) in zip(by_ray[1:], by_process[1:], strict=True):
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(r, r2)
        np.testing.assert_array_equal(d, d2)
        assert [x["round"] for x in i] == [x["round"] for x in i2]
    assert any(d.any() for _, _, d, _ in by_ray[1:])  # the copies auto-reset in their actors


def test_a_dead_actor_is_named_and_close_still_releases_the_others():
    vec = RayVecEnv(_fns("FLHetero-v0", 2), workers=2)
    vec.reset()
    ray.kill(vec.workers[1].actor)
    _wait_until_dead(vec.workers[1].actor)  # the kill is asynchronous: a step sent at once could still win
    with pytest.raises(WorkerLost, match="a Ray actor of this vector env has died"):
        vec.step(np.stack([vec.action_space.sample()] * 2))
    vec.close()
    assert vec.closed


def _wait_until_dead(actor, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=seconds)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    pytest.fail(f"the actor still answers {seconds} s after ray.kill")


def test_a_copy_an_actor_cannot_build_raises_its_own_error_in_the_caller():
    """The actor's constructor raised, and the caller got WorkerLost for an actor that never lived."""
    with pytest.raises(ValueError, match=r"^lr=-1 is out of range"):
        RayVecEnv(_fns("FLAggregate-v0", 2, lr=-1), workers=2)


def test_the_vec_env_contract_and_worker_errors_cross_the_actors():
    vec = RayVecEnv(_fns("FLHeteroAlloc-v0", 3), workers=2)
    vec.reset()
    assert vec.get_attr("k") == [6, 6, 6] and len(vec.env_method("action_masks", indices=[2])[0]) == 12
    vec.set_attr("marker", 5, indices=[0])
    assert vec.get_attr("marker", indices=[0]) == [5]
    with pytest.raises(ValueError, match="action"):
        vec.step(np.full((3, 7), 9))
    vec.close()


def test_ppo_trains_on_ray_actors_through_make_env():
    venv = make_env("FLHetero-v0", 2, seed=0, vec_env="ray", workers=2)
    model = build_agent(venv, {"n_steps": 16, "batch_size": 16, "n_epochs": 1}, seed=0)
    model.learn(32)
    assert model.num_timesteps == 32
    venv.close()


@pytest.mark.parametrize("kwargs,name", [(dict(num_cpus_per_worker=0), "num_cpus_per_worker"),
                                         (dict(num_gpus_per_worker=-1), "num_gpus_per_worker"),
                                         (dict(workers=5), "workers")])
def test_bad_ray_arguments_name_the_parameter(kwargs, name, monkeypatch):
    """Before Ray starts (seconds): ``workers`` was checked only once it had."""
    import fl_gym.integrations.ray as module

    monkeypatch.setattr(module, "ensure_ray", lambda *a, **k: pytest.fail("Ray started"))
    with pytest.raises(ValueError, match=name):
        RayVecEnv(_fns("FLHetero-v0", 2), **kwargs)


@pytest.mark.parametrize("ids,said", [
    ("FLHetero-v0", "ids='FLHetero-v0' is out of range; allowed: None or a list"),
    ([5], "ids=[5] is out of range"), (["CartPole-v1"], "ids='CartPole-v1' is out of range")])
def test_rllib_ids_are_named_with_or_without_rllib(ids, said):
    """A string was read as its letters (``ids='F'``); an unknown id was named only once RLlib was there."""
    with pytest.raises(ValueError, match=re.escape(said)):
        register_rllib(ids)


def test_every_id_is_registered_for_rllib_and_built_from_env_config_alone():
    pytest.importorskip("ray.tune", reason=RLLIB, exc_type=ImportError)
    from ray.tune.registry import ENV_CREATOR, _global_registry

    ids = register_rllib()
    assert ids == fl_gym.envs.registry.env_ids()
    env = _global_registry.get(ENV_CREATOR, "FLHetero-v0")({"preset": "scale20"})
    assert env.observation_space.shape == (12,)
    with pytest.raises(ValueError, match="ids"):
        register_rllib(["CartPole-v1"])


def test_rllib_ppo_runs_two_iterations_on_a_registered_id():
    pytest.importorskip("ray.rllib", reason=RLLIB, exc_type=ImportError)
    from ray.rllib.algorithms.ppo import PPOConfig

    register_rllib(["FLHetero-v0"])
    config = (PPOConfig().environment("FLHetero-v0", env_config={"rounds_per_episode": 10})
              .env_runners(num_env_runners=1, rollout_fragment_length=64)
              .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1))
    algo = config.build_algo()
    try:
        sampled = [algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] for _ in range(2)]
    finally:
        algo.stop()
    assert sampled == [128, 256]


def test_a_sharded_round_equals_the_single_process_round():
    """Full-batch local training (one batch per epoch): the shards' sum is FedAvg's average exactly."""
    from fl_gym import Federation
    from fl_gym.config import FederationConfig
    from fl_gym.data.partition import partition_scheme
    from fl_gym.integrations.ray_federation import RayFederation
    from fl_gym.records import RoundPlan

    cfg = FederationConfig(dataset="digits", num_clients=6,
                           partition=partition_scheme("dirichlet", alpha=0.5), batch_size=2000)
    alone = Federation(cfg, scenario_seed=1)
    sharded = RayFederation(cfg, scenario_seed=1, workers=2)
    alone.reset(5)
    sharded.reset(5)
    start = sharded.global_model.numpy().copy()
    np.testing.assert_array_equal(alone.global_models[0].numpy(), start)
    for selected in ([1, 1, 0, 1, 0, 1], [0, 0, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]):
        mask = np.array(selected, bool)
        alone.run_round(RoundPlan.make(6, lr=0.5, selected=mask, epochs=2))
        report = sharded.run_round(mask, lr=0.5, epochs=2)
        np.testing.assert_allclose(sharded.global_model.numpy(), alone.global_models[0].numpy(), atol=2e-6)
    assert np.abs(sharded.global_model.numpy() - start).max() > 1e-2  # the rounds trained something
    assert report["shards"] == [0] and report["accuracy"] == pytest.approx(alone.evaluate()[0][0], abs=1e-3)
    with pytest.raises(ValueError, match=r"selected has shape \(6,\) .* bool or 0/1 \(not client ids\)"):
        sharded.run_round(np.array([0, 2, 3, 1, 4, 5]), lr=0.5)  # ids were read as a mask
    # named here, not by a shard in Ray's traceback (plan.lr=[-1.0]), and "no" no longer evaluates
    for kwargs, said in ((dict(lr=-1), "lr=-1 is out of range; allowed: a number > 0"),
                         (dict(lr=0.5, epochs="x"), "epochs='x' is out of range; allowed: a number >= 0"),
                         (dict(lr=0.5, evaluate="no"), "evaluate='no' is out of range; allowed: True or")):
        with pytest.raises(ValueError, match=re.escape(said)):
            sharded.run_round(mask, **kwargs)
    sharded.close()


@pytest.mark.parametrize("change,name", [(dict(algorithm="scaffold"), "config.algorithm"),
                                         (dict(models=("mlp-small", "mlp-small")), "config.models"),
                                         (dict(train=False), "config.train")])
def test_a_sharded_federation_refuses_what_it_cannot_split(change, name):
    from fl_gym.config import FederationConfig
    from fl_gym.integrations.ray_federation import RayFederation

    with pytest.raises(ValueError, match=name):
        RayFederation(FederationConfig(dataset="digits", num_clients=4, **change), workers=2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(config="digits"), "config='digits' is out of range; allowed: a FederationConfig"),  # AttributeError
    (dict(scenario_seed=-1), "scenario_seed=-1 is out of range"),  # after Ray had started
    (dict(num_cpus_per_worker=0), "num_cpus_per_worker=0 is out of range"),  # Ray's own message
])
def test_a_sharded_federations_arguments_are_named_before_ray_starts(kwargs, message, monkeypatch):
    import fl_gym.integrations.ray_federation as module
    from fl_gym.config import FederationConfig

    monkeypatch.setattr(module, "ensure_ray", lambda *a, **k: pytest.fail("Ray started"))
    with pytest.raises(ValueError, match=message):
        module.RayFederation(**{"config": FederationConfig(dataset="digits", num_clients=4), **kwargs})
