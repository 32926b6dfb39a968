"""A warm start by imitation: demonstrations, the fit, the run's record of its start, the errors."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import fl_gym  # noqa: F401  (registers the envs)
from fl_gym.agents.ppo import build_agent, check_hyperparams, make_env
from fl_gym.baselines.select import EntropyCutPolicy
from fl_gym.training import runs
from fl_gym.training.compare import policy_spec
from fl_gym.training.imitation import _discounted, demonstrations, fixed_policy, imitate

SELECT = {"rounds_per_episode": 6, "sampler": "uniform"}  # the sampler FedAvg plays
BLOCK = {"policy": "SetPolicy", "n_steps": 12, "batch_size": 12, "n_epochs": 1,
         "policy_kwargs": {"hidden": 16, "action_bias": -2.0}}


def test_discounted_returns_by_hand():
    assert _discounted([1.0, 2.0, 3.0], 0.5) == [1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0]
    assert _discounted([1.0, 2.0], 0.0) == [1.0, 2.0]


def test_demonstrations_are_the_policys_actions_on_its_own_episodes():
    demos = demonstrations("FLSelect-v0", SELECT, "entropy-cut[h=0.9]", [3, 4], gamma=1.0)
    assert demos.observations.shape == (12, 76) and demos.actions.shape == (12, 5)
    rule = EntropyCutPolicy(gym.make("FLSelect-v0", **SELECT), h=0.9)
    expected = np.stack([rule.predict(obs, deterministic=True)[0] for obs in demos.observations])
    assert np.array_equal(demos.actions, expected)
    assert demos.actions.min() == 0  # the rule dropped someone, so imitating it is not keeping all
    episode_returns = demos.returns.reshape(2, 6)[:, 0]  # gamma 1: each episode's first step holds its return
    played = [sum(e.rewards) for e in _episodes("entropy-cut[h=0.9]", [3, 4])]
    np.testing.assert_allclose(episode_returns, played, rtol=1e-6)


def _episodes(spec, seeds):
    from fl_gym.training.evaluation import evaluate

    rule = policy_spec(spec, "FLSelect-v0").factory
    return evaluate(lambda: gym.make("FLSelect-v0", **SELECT), rule, seeds)


def test_imitation_moves_a_dropping_start_to_the_keep_all_rule():
    demos = demonstrations("FLSelect-v0", SELECT, "fedavg", [0], gamma=0.99)
    env = make_env("FLSelect-v0", 1, env_kwargs=SELECT)
    model = build_agent(env, BLOCK, seed=0)
    assert model.predict(demos.observations, deterministic=True)[0].sum() == 0  # action_bias -2: drops all
    before, after = imitate(model, demos, epochs=40, lr=3e-3)
    assert after > before
    kept = model.predict(demos.observations, deterministic=True)[0]
    assert kept.min() == 1  # keeps every candidate, as FedAvg does
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4)  # PPO's own rate restored


def test_a_run_keeps_its_imitated_start(tmp_path):
    block = {**BLOCK, "imitate": "fedavg", "imitate_episodes": 2, "imitate_epochs": 2}
    cfg = runs.resolve("FLSelect-v0", overrides=block, env_kwargs=SELECT, total_timesteps=12, n_envs=1)
    folder = runs.create_run_dir(cfg, tmp_path / "run")
    runs.train(folder, progress=False, say=lambda *_: None)
    record = json.loads((folder / "imitation.json").read_text())
    assert record["policy"] == "fedavg" and record["steps"] == 12 and record["epochs"] == 2
    start = policy_spec(f"ppo:{folder / 'imitated.zip'}", "FLSelect-v0").factory(
        gym.make("FLSelect-v0", **SELECT))
    assert start.num_timesteps == 0 and (folder / "model.zip").is_file()


@pytest.mark.parametrize("block, algo, message", [
    ({"imitate": "fedavg"}, "recurrent-ppo", "'imitate' is out of range for algo='recurrent-ppo'"),
    ({"imitate_epochs": 3}, "ppo", "'imitate_epochs' does nothing without 'imitate'"),
    ({"imitate": "fedavg", "imitate_lr": 0}, "ppo", "imitate_lr=0 is out of range"),
    ({"imitate": "fedavg", "imitate_episodes": 1.5}, "ppo", "imitate_episodes=1.5 is out of range"),
])
def test_bad_imitation_settings_name_the_key(block, algo, message):
    with pytest.raises(ValueError, match=message):
        check_hyperparams(block, algo)


@pytest.mark.parametrize("spec, message", [
    ("nope", "policy 'nope' is not known for FLSelect-v0"),
    ("ppo:runs/x", "imitate='ppo:runs/x' is out of range; allowed: a fixed policy of FLSelect-v0 by name"),
])
def test_only_a_fixed_policy_of_the_env_is_imitated(spec, message):
    with pytest.raises(ValueError, match=message):
        fixed_policy(spec, "FLSelect-v0", SELECT)
    with pytest.raises(ValueError, match=message):
        runs.resolve("FLSelect-v0", overrides={"imitate": spec}, env_kwargs=SELECT)


def test_a_policy_of_another_variant_is_refused():
    message = "a fixed policy that plays the agent's env \\(this one plays it with {'sampler': 'uniform'}\\)"
    with pytest.raises(ValueError, match="imitate='fedavg' is out of range; allowed: " + message):
        fixed_policy("fedavg", "FLSelect-v0", {"sampler": "pools"})


def test_imitation_fits_a_gaussians_mean_and_leaves_its_exploration_noise():
    kwargs = {"rounds_per_episode": 6, "pick_action": "scores", "post_filter": "all"}  # as the rule plays it
    demos = demonstrations("FLSelectPick-v0", kwargs, "confident-pick", [0], gamma=0.99)
    model = build_agent(make_env("FLSelectPick-v0", 1, env_kwargs=kwargs),
                        {**BLOCK, "policy_kwargs": {"hidden": 16, "log_std_init": -1.0}}, seed=0)
    before, after = imitate(model, demos, epochs=20, lr=3e-3)
    assert after > before
    assert model.policy.log_std.detach().tolist() == [-1.0]  # one noise level per client row, as built
