"""FedAdp's angle signal (Wu and Wang, IEEE TCCN 2021) and the aggregation-weight env."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from standalone import standalone  # tests/ is on sys.path

import fl_gym  # noqa: F401
from fl_gym import RoundPlan
from fl_gym.baselines.aggregate import FedAdpPolicy, FedAvgWeightsPolicy, FedCosPolicy, UniformWeightsPolicy
from fl_gym.envs.aggregate import AggregateConfig, AngleTracker, fedadp_weights, gompertz


def test_gompertz_reference_values():
    theta = [0, 0.5, 0.8, 1.0, 1.2, math.pi / 2, 2.0, math.pi]
    np.testing.assert_allclose(gompertz(theta, 5), [5.0, 5.0, 4.6701, 3.1606, 1.5390, 0.2799, 0.0336, 0.0001],
                               atol=1e-4)
    np.testing.assert_allclose(gompertz(theta, 1),
                               [0.9340, 0.8077, 0.7052, 0.6321, 0.5590, 0.4317, 0.3078, 0.1108], atol=1e-4)
    assert gompertz(1.0, 5) == pytest.approx(5 * (1 - 1 / math.e))


def test_fedadp_weight_examples():
    np.testing.assert_allclose(fedadp_weights([0.5, 0.5, math.pi / 2], np.ones(3)), [0.4978, 0.4978, 0.0044],
                               atol=1e-4)
    w = fedadp_weights([0.9] * 5 + [1.45] * 5, np.ones(10))
    np.testing.assert_allclose(w, [0.1944] * 5 + [0.0056] * 5, atol=1e-4)
    np.testing.assert_allclose(fedadp_weights([1.0, 1.0], [1, 3]), [0.25, 0.75])  # equal angles: FedAvg


def test_smoothed_angle_is_the_running_mean_over_own_participations():
    tracker = AngleTracker(3)
    assert np.all(tracker.smoothed == np.pi / 2)  # never seen
    tracker.update(np.array([0, 1]), np.array([0.4, 1.0]))
    tracker.update(np.array([0]), np.array([0.8]))
    tracker.update(np.array([0, 2]), np.array([0.9, 2.0]))
    np.testing.assert_allclose(tracker.smoothed, [(0.4 + 0.8 + 0.9) / 3, 1.0, 2.0])
    assert tracker.count.tolist() == [3, 1, 1]


def test_zero_action_is_a_standalone_fedavg_loop_bit_for_bit():
    """The FedAvg policy on the env is FedAvg over the federation's phases."""
    env = gym.make("FLAggregate-v0", rounds_per_episode=4)
    obs, _ = env.reset(seed=3)
    policy = FedAvgWeightsPolicy(env)
    for _ in range(4):
        obs, *_ = env.step(policy.predict(obs)[0])
    cfg = AggregateConfig.from_kwargs(rounds_per_episode=4)
    fed, _ = standalone(cfg, 3)
    for t in range(4):
        fed.run_round(RoundPlan.make(10, lr=cfg.scenario.lr * cfg.lr_decay ** t, epochs=cfg.local_epochs))
    assert np.array_equal(env.unwrapped.federation.global_models[0].numpy(), fed.global_models[0].numpy())


def test_fedadp_policy_applies_the_gompertz_weights_of_the_smoothed_angles():
    env = gym.make("FLAggregate-v0", rounds_per_episode=3)
    obs, _ = env.reset(seed=0)
    policy = FedAdpPolicy(env)
    for _ in range(3):
        smoothed = env.unwrapped.tracker.smoothed.copy()
        obs, _, _, _, info = env.step(policy.predict(obs)[0])
        np.testing.assert_allclose(info["aggregate/weights"],
                                   fedadp_weights(smoothed, env.unwrapped.federation.sizes), rtol=1e-5)


def test_uniform_policy_weights_everyone_equally():
    env = gym.make("FLAggregate-v0", rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    *_, info = env.step(UniformWeightsPolicy(env).predict(obs)[0])
    np.testing.assert_allclose(info["aggregate/weights"], np.full(10, 0.1), rtol=1e-5)


def test_fedadp_policy_on_the_env_is_a_standalone_fedadp_loop_bit_for_bit():
    """FedAdp's policy on the env is FedAdp over the federation's phases: train, track the angles,
    weight by Gompertz, aggregate."""
    env = gym.make("FLAggregate-v0", rounds_per_episode=3)
    obs, _ = env.reset(seed=5)
    policy = FedAdpPolicy(env)
    for _ in range(3):
        obs, *_ = env.step(policy.predict(obs)[0])
    cfg = AggregateConfig.from_kwargs(rounds_per_episode=3)
    fed, _ = standalone(cfg, 5)
    tracker = AngleTracker(10)
    for t in range(3):
        plan = RoundPlan.make(10, lr=cfg.scenario.lr * cfg.lr_decay ** t, epochs=cfg.local_epochs)
        trained = fed.train_round(fed.open_round(), plan)
        tracker.update(np.arange(10), trained.stats.update_angle)
        fed.finish_round(trained, weight=fedadp_weights(tracker.smoothed, fed.sizes))
    np.testing.assert_allclose(env.unwrapped.federation.global_models[0].numpy(),
                               fed.global_models[0].numpy(), rtol=0, atol=1e-6)


def test_fedcos_policy_weights_by_the_cosine_of_local_and_global_models():
    env = gym.make("FLAggregate-v0", rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    cos = env.unwrapped.round_stats.model_cosine.copy()
    *_, info = env.step(FedCosPolicy(env).predict(obs)[0])
    assert np.all((cos > 0.5) & (cos <= 1))
    np.testing.assert_allclose(info["aggregate/weights"], cos / cos.sum(), rtol=1e-5)


def test_rounds_reward_stops_at_the_target_and_reports_rounds_to_target():
    env = gym.make("FLAggregate-v0", reward="rounds", target_accuracy=0.5, stop_at_target=True)
    obs, _ = env.reset(seed=0)
    rewards, terminated, info = [], False, {}
    while not terminated:
        obs, r, terminated, truncated, info = env.step(np.zeros(10, np.float32))
        rewards.append(r)
        assert not truncated
    assert set(rewards) == {-1.0} and info["aggregate/val_accuracy"] >= 0.5
    assert info["reward_terms"]["favor"] == pytest.approx(64 ** (info["aggregate/val_accuracy"] - 0.5) - 1)
    reached = info["aggregate/rounds_to_target"]
    assert reached is None or 1 <= reached <= info["round"]


def test_redrawn_partition_differs_per_episode_and_repeats_per_seed():
    env = gym.make("FLAggregate-v0", redraw_partition=True, partition="mixed", num_iid=3,
                   classes_per_client=1, samples_per_client=50)
    fed = env.unwrapped.federation

    def parts(seed):
        env.reset(seed=seed)
        return [p.numpy().copy() for p in fed.train_parts]

    a, b, a_again = parts(0), parts(1), parts(0)
    assert all(np.array_equal(x, y) for x, y in zip(a, a_again, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    iid = [np.flatnonzero(fed.histogram[i] > 0).size == 10 for i in range(10)]
    assert sum(iid) == 3 and fed.sizes.tolist() == [50] * 10


def test_paper_presets_set_the_papers_setup():
    cfg = AggregateConfig.from_kwargs(preset="paper_mnist_cnn")
    s = cfg.scenario
    assert (s.dataset, s.partition, s.num_iid, s.classes_per_client, s.samples_per_client) == (
        "mnist", "mixed", 5, 1, 600)
    assert (cfg.model, s.batch_size, s.lr, s.rounds_per_episode, cfg.target_accuracy) == (
        "fedadp-cnn", 32, 0.01, 300, 0.95)
    shorter = AggregateConfig.from_kwargs(preset="paper_mnist_cnn", rounds_per_episode=20)
    assert shorter.scenario.rounds_per_episode == 20
    with pytest.raises(ValueError, match="preset="):
        AggregateConfig.from_kwargs(preset="paper")
