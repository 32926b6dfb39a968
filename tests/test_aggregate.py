"""FedAdp's angle signal and the aggregation-weight env (spec fedadp.md section 8)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import fl_gym  # noqa: F401
from fl_gym import Federation, RoundPlan
from fl_gym.baselines.aggregate import FedAdpPolicy, FedAvgWeightsPolicy, UniformWeightsPolicy
from fl_gym.envs.aggregate import AggregateConfig, AngleTracker, fedadp_weights, gompertz


def test_gompertz_reference_values():
    theta = [0, 0.5, 0.8, 1.0, 1.2, math.pi / 2, 2.0, math.pi]
    np.testing.assert_allclose(gompertz(theta, 5), [5.0, 5.0, 4.6701, 3.1606, 1.5390, 0.2799, 0.0336, 0.0001],
                               atol=1e-4)
    np.testing.assert_allclose(gompertz(theta, 1), [0.9340, 0.8077, 0.7052, 0.6321, 0.5590, 0.4317, 0.3078, 0.1108],
                               atol=1e-4)
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
    """Spec 7.2's equivalence: the FedAvg policy on the env is FedAvg over the federation's phases."""
    from gymnasium.utils.seeding import np_random

    env = gym.make("FLAggregate-v0", rounds_per_episode=4)
    obs, _ = env.reset(seed=3)
    policy = FedAvgWeightsPolicy(env)
    for _ in range(4):
        obs, *_ = env.step(policy.predict(obs)[0])
    cfg = AggregateConfig.from_kwargs(rounds_per_episode=4)
    fed = Federation(cfg.federation_config(), scenario_seed=0)
    rng, _ = np_random(3)
    fed.reset(seed=int(rng.integers(2**63 - 1)), sampler=rng)
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
        np.testing.assert_allclose(info["aggregate/weights"], fedadp_weights(smoothed, env.unwrapped.federation.sizes),
                                   rtol=1e-5)


def test_uniform_policy_weights_everyone_equally():
    env = gym.make("FLAggregate-v0", rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    *_, info = env.step(UniformWeightsPolicy(env).predict(obs)[0])
    np.testing.assert_allclose(info["aggregate/weights"], np.full(10, 0.1), rtol=1e-5)
