"""The validation rewards: their terms sum to the loss's drop, or to the area over the start."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import fl_gym  # noqa: F401
from fl_gym import Federation, FederationConfig, RoundPlan


@pytest.mark.parametrize("env_id, kwargs", [
    ("FLAggregate-v0", {"reward": "loss_drop"}),
    ("FLLearningRate-v0", {"reward": "loss_drop"}),
    ("FLSelect-v0", {"reward_signal": "loss", "lambda_comm": 0.0, "lambda_repair": 0.0}),
])
def test_loss_rewards_sum_to_the_drop_of_validation_loss(env_id, kwargs):
    env = gym.make(env_id, rounds_per_episode=4, **kwargs)
    env.reset(seed=5)
    fed = env.unwrapped.federation
    start_accuracy, start = fed.validation()
    total, done = 0.0, False
    env.action_space.seed(0)
    while not done:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["reward_terms"]["loss_drop"] == pytest.approx(reward, abs=1e-9)
        total += reward
        done = terminated or truncated
    end_accuracy, end = fed.validation()
    assert np.isfinite(start) and total == pytest.approx(start - end, abs=1e-6)
    assert 0 <= end_accuracy <= 1 and end < start  # four rounds of training lower the loss


def test_reward_signal_is_validated():
    with pytest.raises(ValueError, match="reward_signal='gain'"):
        gym.make("FLSelect-v0", reward_signal="gain")


@pytest.mark.parametrize("env_id, kwargs, term", [
    ("FLAggregate-v0", {"reward": "loss_area"}, "loss_area"),
    ("FLLearningRate-v0", {"reward": "loss_area"}, "loss_area"),
    ("FLSelect-v0", {"reward_signal": "loss_area", "lambda_comm": 0.0, "lambda_repair": 0.0}, "loss_area"),
    ("FLSelectQueue-v0", {"reward_signal": "loss_area", "lambda_comm": 0.0}, "loss_area"),
    ("FLAggregate-v0", {"reward": "acc_area"}, "acc_area"),
    ("FLLearningRate-v0", {"reward": "acc_area"}, "acc_area"),
])
def test_area_rewards_sum_to_the_mean_gain_over_the_start(env_id, kwargs, term):
    """The return is the mean over the rounds of the loss below (accuracy above) its start."""
    env = gym.make(env_id, rounds_per_episode=4, **kwargs)
    env.reset(seed=5)
    fed = env.unwrapped.federation
    start_accuracy, start_loss = fed.validation()
    total, gains, done = 0.0, [], False
    env.action_space.seed(0)
    while not done:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["reward_terms"][term] == pytest.approx(reward, abs=1e-9)
        total += reward
        accuracy, loss = fed.validation()
        gains.append(start_loss - loss if term == "loss_area" else accuracy - start_accuracy)
        done = terminated or truncated
    assert len(gains) == 4 and total == pytest.approx(np.mean(gains), abs=1e-6)
    assert total != pytest.approx(gains[-1], abs=1e-4)  # not the plain gain's sum: the path counts


@pytest.mark.parametrize("env_id, kwargs", [
    ("FLSelect-v0", {"reward_signal": "loss_vs_all", "lambda_comm": 0.0, "lambda_repair": 0.0}),
    ("FLSelectQueue-v0", {"reward_signal": "loss_vs_all", "lambda_comm": 0.0}),
])
def test_loss_vs_all_is_the_loss_that_keeping_everyone_would_have_left(env_id, kwargs):
    """Each round against a twin that replays the actions so far and then keeps every trained update."""
    env, twin = (gym.make(env_id, rounds_per_episode=4, **kwargs) for _ in range(2))
    env.reset(seed=5)
    env.action_space.seed(0)
    played = []
    for t in range(4):
        action = env.action_space.sample()
        if t == 0:
            action[:] = 1  # keeping all saves nothing, exactly
        fed = env.unwrapped.federation  # averaging nobody leaves the global model
        nobody = np.zeros((1, fed.num_clients), bool)
        assert np.array_equal(fed.validate_averages(env.unwrapped.pending.trained, nobody)[0],
                              fed.validation())
        _, reward, _, _, info = env.step(action)
        twin.reset(seed=5)
        for a in played:
            twin.step(a)
        twin.step(np.ones_like(action))
        saved = twin.unwrapped.federation.validation()[1] - env.unwrapped.federation.validation()[1]
        assert info["reward_terms"]["loss_vs_all"] == pytest.approx(saved, abs=1e-6) == pytest.approx(reward)
        assert t > 0 or info["reward_terms"]["loss_vs_all"] == 0.0
        played.append(action)


def test_loss_vs_all_is_refused_where_every_picked_client_is_aggregated():
    with pytest.raises(ValueError,
                       match="reward_signal='loss_vs_all' is out of range; allowed: one of accuracy, "
                             "loss, loss_area \\(every picked client"):
        gym.make("FLSelectPick-v0", reward_signal="loss_vs_all")
    env = gym.make("FLSelect-v0")  # another signal: the term is not measured
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert "loss_vs_all" not in info["reward_terms"] and np.isfinite(reward)


def test_a_validation_loss_is_charged_at_most_ten_ln_c_and_a_diverged_ones_at_that():
    """Below the cap a loss is read as it is; above it, and NaN (a diverged model), at ``10 ln C``;
    without a validation split the gain stays NaN, not charged as a divergence."""
    from fl_gym.envs.base import ValidationGain, charged_loss

    cap = 10 * math.log(10)  # as the env computes it (numpy's log may differ in the last bit)
    np.testing.assert_array_equal(charged_loss(np.array([0.5, 2.3, cap, 40.0, np.nan, np.inf]), 10),
                                  [0.5, 2.3, cap, cap, cap, cap])
    assert charged_loss(0.7, 10) == 0.7 and charged_loss(float("nan"), 2) == 10 * math.log(2)
    fed = Federation(FederationConfig(num_clients=4))
    fed.reset(seed=0)
    assert fed.val_indices is None
    gain = ValidationGain(fed, rounds=3)
    assert np.isnan(gain.update(fed.run_round(RoundPlan.make(4, lr=0.05))).loss_drop)
