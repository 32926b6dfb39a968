from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import fl_gym  # noqa: F401
from fl_gym.agents import (
    build_agent,
    compose,
    find_recipe,
    load_hyperparams,
    load_recipe,
    save_recipe,
    train_recipe,
)
from fl_gym.agents.features import NegLogFeatures
from fl_gym.agents.ppo import make_env
from fl_gym.baselines.hetero import BalancedOraclePolicy, RandomPolicy


def test_an_agent_without_tensorboard_leaves_nothing_in_the_temp_dir(tmp_path, monkeypatch):
    """SB3 makes an empty ``SB3-<time>`` folder in the temp dir for every learn() without a logger."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    model = build_agent(gym.make("FLHeteroAlloc-v0"), {"n_steps": 8, "batch_size": 8, "n_epochs": 1})
    model.learn(8)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("SB3-")] == []


def test_hapfl_hyperparams_are_the_papers_ppo_settings():
    """Chen et al. (HAPFL: Heterogeneity-aware Personalized Federated Learning via Adaptive Dual-Agent
    Reinforcement Learning) update each agent every B = 5 transitions, at learning rate 0.02 for PPO1
    (the sizes) and 3e-4 for PPO2 (the epoch split), with the advantage G - V (their Eq. 31, SB3's
    ``gae_lambda=1``). The paper gives no discount or widths: gamma 0.9 and 64-unit layers are ours."""
    h1, h2 = load_hyperparams("FLHeteroAlloc-v0"), load_hyperparams("FLHeteroIntensity-v0")
    ppo1 = (h1["n_steps"], h1["batch_size"], h1["learning_rate"], h1["gamma"], h1["gae_lambda"])
    assert ppo1 == (5, 5, 0.02, 0.9, 1.0)
    assert h1["policy_kwargs"]["net_arch"] == {"pi": [64, 64], "vf": [64, 64]}
    assert (h2["learning_rate"], h2["policy_kwargs"]["log_std_init"]) == (0.0003, -0.5)
    assert h2["policy_kwargs"]["net_arch"] == {"pi": [64, 64, 64], "vf": [64, 64, 64]}
    stable = load_hyperparams("FLHeteroAlloc-v0", "stable")
    assert stable["learning_rate"] == 0.0003 and stable["n_steps"] == 5  # inherits the rest
    assert load_hyperparams("FLHeteroAlloc-v0", "fast")["n_envs"] == 8
    assert load_hyperparams("NoSuchEnv-v0") == {}


def test_bad_preset_and_hyperparameter_name_the_problem():
    with pytest.raises(ValueError, match="preset='turbo'.*fast"):
        load_hyperparams("FLHeteroAlloc-v0", "turbo")
    env = gym.make("FLHeteroAlloc-v0")
    with pytest.raises(ValueError, match="hyperparameter 'learning_rat' is not accepted by PPO"):
        build_agent(env, {"learning_rat": 0.1})
    with pytest.raises(ValueError, match="algo='dqn'"):
        build_agent(env, {}, algo="dqn")
    with pytest.raises(ValueError, match="features_extractor='sqrt'"):
        build_agent(env, {"policy_kwargs": {"features_extractor": "sqrt"}})


@pytest.mark.parametrize("kwargs,message", [
    (dict(hyperparams=None), "hyperparams=None is out of range; allowed: a mapping"),  # a TypeError
    (dict(hyperparams="n_steps"), "hyperparams='n_steps' is out of range"),  # read letter by letter
    (dict(seed=-1), "seed=-1 is out of range; allowed: None or an integer in [0, 2**32 - 1]"),  # NumPy's
    (dict(seed="0"), "seed='0' is out of range"),  # NumPy's cast error
    (dict(device="gpu"), "device='gpu' is out of range; allowed: a torch device"),  # torch's 30-name list
    (dict(verbose="1"), "verbose='1' is out of range; allowed: an integer in [0, 2]"),  # a TypeError
])
def test_build_agents_other_arguments_are_checked_by_name(kwargs, message):
    env = gym.make("FLHeteroAlloc-v0")
    with pytest.raises(ValueError, match=re.escape(message)):
        build_agent(env, **{"hyperparams": {}, **kwargs})
    if not torch.cuda.is_available():  # SB3 would quietly train on the CPU
        with pytest.raises(ValueError, match="device='cuda' is out of range; allowed: a device this machine"):
            build_agent(env, {}, device="cuda")


@pytest.mark.parametrize("policy_kwargs,message", [
    (3, r"hyperparameter policy_kwargs=3 is out of range; allowed: a mapping"),  # was an AttributeError
    ({"net_arch": "x"}, r"net_arch='x' is out of range; allowed: layer widths"),  # was torch's empty()
    ({"net_arch": [64, 0]}, r"net_arch=\[64, 0\] is out of range"),
    ({"net_arch": {"pi": [8], "q": [8]}}, r"net_arch=\{'pi': \[8\], 'q': \[8\]\} is out of range"),
    ({"activation_fn": "nope"}, r"activation_fn='nope' is out of range; allowed: tanh, relu"),
])
def test_policy_kwargs_are_checked_by_name(policy_kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_agent(gym.make("FLAggregate-v0"), {"policy_kwargs": policy_kwargs})


def test_an_activation_by_name_is_its_torch_class():
    """A YAML block or the CLI cannot hold a class: "relu" was SB3's "'str' object is not callable"."""
    import torch

    model = build_agent(gym.make("FLAggregate-v0"),
                        {"policy_kwargs": {"activation_fn": "relu", "net_arch": {"pi": [8], "vf": [4]}}})
    assert model.policy.activation_fn is torch.nn.ReLU
    actor = model.policy.mlp_extractor.policy_net
    assert [type(m) for m in actor] == [torch.nn.Linear, torch.nn.ReLU] and actor[0].out_features == 8


def test_neglog_features():
    import torch

    space = gym.spaces.Box(0, 1, (3,), np.float32)
    out = NegLogFeatures(space)(torch.tensor([[1.0, float(np.exp(-2.0)), 0.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 2.0, float(-np.log(1e-6))]]))


@pytest.mark.parametrize("key,value",
                         [("learning_rate", "abc"), ("n_steps", -5), ("batch_size", 0), ("gamma", 1.5)])
def test_hyperparameter_values_are_checked_by_name(key, value):
    with pytest.raises(ValueError, match=f"hyperparameter {key}={value!r} is out of range"):
        build_agent(gym.make("FLHeteroAlloc-v0"), {key: value})


def test_gamma_zero_is_allowed():  # each step on its own: a contextual bandit
    assert build_agent(gym.make("FLHeteroAlloc-v0"), {"gamma": 0.0}).gamma == 0.0


def test_dual_agent_end_to_end_and_round_trip(tmp_path):
    """A tiny run of the recipe: PPO1, frozen PPO1 inside PPO2's env, composition, save/load."""
    recipe = find_recipe("FLHetero-v0", "hapfl")
    models = train_recipe(recipe, seed=0, preset="fast", steps={"ppo1": 256, "ppo2": 256})
    assert models["ppo1"].num_timesteps >= 256 and models["ppo2"].num_timesteps >= 256
    env = gym.make("FLHetero-v0")
    policy = compose(recipe, env, models)
    obs, _ = env.reset(seed=0)
    action, _ = policy.predict(obs)
    assert env.action_space.contains(action)
    batch, _ = policy.predict(np.stack([obs, obs]))
    assert batch.shape == (2, 12) and np.array_equal(batch[0], action)
    save_recipe(tmp_path / "hapfl", recipe, models, {"env_kwargs": {}})
    loaded_recipe, loaded_models = load_recipe(tmp_path / "hapfl")
    loaded = compose(loaded_recipe, env, loaded_models)
    assert np.array_equal(loaded.predict(obs)[0], action)
    with pytest.raises(FileNotFoundError, match="no finished training recipe"):
        load_recipe(tmp_path)
    (tmp_path / "hapfl" / "ppo2" / "model.zip").write_bytes(b"")  # SB3's own error named no stage
    with pytest.raises(ValueError, match=r"ppo2/model.zip is damaged; allowed: the stage's model"):
        load_recipe(tmp_path / "hapfl")
    (tmp_path / "hapfl" / "ppo2" / "model.zip").unlink()
    with pytest.raises(ValueError, match=r"ppo2/model.zip is missing"):
        load_recipe(tmp_path / "hapfl")
    (tmp_path / "hapfl" / "recipe.json").write_text('{"recipe": "hapfl"}')  # a KeyError
    with pytest.raises(ValueError, match=r"recipe.json is damaged \(no 'target'\)"):
        load_recipe(tmp_path / "hapfl")
    with pytest.raises(ValueError, match="recipe 'hapfl' is out of range for FLHeteroAlloc-v0"):
        find_recipe("FLHeteroAlloc-v0", "hapfl")


def test_make_env_seeds_and_monitors(tmp_path):
    venv = make_env("FLHeteroAlloc-v0", n_envs=2, seed=5, monitor_dir=tmp_path)
    first = venv.reset()
    again = make_env("FLHeteroAlloc-v0", n_envs=2, seed=5).reset()
    assert np.array_equal(first, again) and not np.array_equal(first[0], first[1])
    with pytest.raises(ValueError, match="vec_env='threads'"):
        make_env("FLHeteroAlloc-v0", vec_env="threads")


def _mean_r(env_id, policy_for, seeds=(101, 102, 103), **env_kwargs):
    out = []
    for seed in seeds:
        env = gym.make(env_id, **env_kwargs)
        policy = policy_for(env)
        obs, _ = env.reset(seed=seed)
        for _ in range(100):
            obs, reward, _, _, info = env.step(policy.predict(obs, deterministic=True)[0])
            out.append(reward)
    return float(np.mean(out))


@pytest.mark.slow
def test_each_ppo_closes_half_the_gap_to_its_analytic_reference():
    """PPO1 closes >= 50 % of the Random -> Oracle gap on R^1; PPO2 closes >= 50 % of the
    uniform-split -> inverse-time gap on R^2 (the fast preset; evaluation seeds unseen in training)."""
    from fl_gym.baselines.hetero import InverseTimePolicy, UniformPolicy

    models = train_recipe(find_recipe("FLHetero-v0", "hapfl"), seed=0, preset="fast")
    ppo1, ppo2 = models["ppo1"], models["ppo2"]
    r_ppo1 = _mean_r("FLHeteroAlloc-v0", lambda env: ppo1)
    r_random = _mean_r("FLHeteroAlloc-v0", lambda env: RandomPolicy(env, seed=0))
    r_oracle = _mean_r("FLHeteroAlloc-v0", BalancedOraclePolicy)
    assert r_ppo1 - r_random >= 0.5 * (r_oracle - r_random)
    scores = {name: _mean_r("FLHeteroIntensity-v0", policy_for, allocation_policy=ppo1)
              for name, policy_for in (("ppo2", lambda env: ppo2), ("uniform", UniformPolicy),
                                       ("inverse", InverseTimePolicy))}
    assert scores["ppo2"] > scores["uniform"]
    assert scores["ppo2"] - scores["uniform"] >= 0.5 * (scores["inverse"] - scores["uniform"])


@pytest.mark.slow
def test_trained_hapfl_meets_the_papers_reductions_and_beats_its_ablations():
    """The paper's claims for the trained policy: vs Uniform(large) with FedAvg timing, at least the paper's
    lower bounds (-19 % straggling latency, -20.9 % total time); it beats GreedyBySpeed and Uniform."""
    from fl_gym.baselines.hetero import GreedyBySpeedPolicy, UniformPolicy
    from fl_gym.training.evaluation import aggregate, evaluate

    recipe = find_recipe("FLHetero-v0", "hapfl")
    models = train_recipe(recipe, seed=0, preset="fast")
    seeds = (201, 202, 203)

    def stats(policy_for, **kwargs):
        return aggregate(evaluate(lambda: gym.make("FLHetero-v0", **kwargs), policy_for, seeds))

    hapfl = stats(lambda env: compose(recipe, env, models))
    fedavg = stats(UniformPolicy, algorithm="fedavg")
    greedy, uniform = stats(GreedyBySpeedPolicy), stats(UniformPolicy)
    assert hapfl["straggling_latency"][0] <= (1 - 0.19) * fedavg["straggling_latency"][0]
    assert hapfl["sim_time"][0] <= (1 - 0.209) * fedavg["sim_time"][0]
    for other in (greedy, uniform):
        assert hapfl["straggling_latency"][0] < other["straggling_latency"][0]
