"""SetPolicy: permutation equivariance, any client count, SB3 training, saving, bad arguments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO

import fl_gym  # noqa: F401  (registers the ids)
from fl_gym.agents.ppo import build_agent, check_hyperparams, load_hyperparams, make_env
from fl_gym.agents.sets import SetPolicy
from fl_gym.envs.base import ClientRows
from fl_gym.envs.registry import env_ids

K = 5
LAYOUTS = {  # name: (rows, action space for K clients)
    "hapfl-joint": (ClientRows(1, feature_major=True), spaces.Box(-1, 1, (2 * K,), np.float32)),
    "hapfl-extended": (ClientRows(4, feature_major=True), spaces.Box(-1, 1, (2 * K,), np.float32)),
    "sizes": (ClientRows(1, feature_major=True), spaces.MultiDiscrete([3] * K)),
    "select": (ClientRows(6, 3), spaces.MultiBinary(K)),
    "rates": (ClientRows(8, 7), spaces.Box(-1, 1, (K,), np.float32)),
}


def _policy(rows: ClientRows, action_space: spaces.Space, k: int = K, **kwargs) -> SetPolicy:
    obs_space = spaces.Box(0.0, 1.0, (rows.width * k + rows.globals,), np.float32)
    torch.manual_seed(0)
    return SetPolicy(obs_space, action_space, lambda _: 3e-4, client_rows=rows, **kwargs)


def _permute(obs: np.ndarray, rows: ClientRows, order: np.ndarray) -> np.ndarray:
    """The same observation with the clients listed in ``order``."""
    n = (obs.shape[1] - rows.globals) // rows.width
    table, glob = obs[:, : n * rows.width], obs[:, n * rows.width:]
    if rows.feature_major:
        table = table.reshape(-1, rows.width, n)[:, :, order].reshape(len(obs), -1)
    else:
        table = table.reshape(-1, n, rows.width)[:, order].reshape(len(obs), -1)
    return np.concatenate([table, glob], axis=1)


def _client_params(policy: SetPolicy, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        t = torch.as_tensor(obs)
        return policy.mlp_extractor.forward_actor(t).numpy(), policy.predict_values(t).numpy()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_set_policy_fits_its_layout_at_any_client_count_and_nothing_else(layout):
    rows, action_space = LAYOUTS[layout]
    policy = _policy(rows, action_space)
    obs = spaces.Box(0.0, 1.0, (rows.width * 8 + rows.globals,), np.float32)  # 8 clients
    actions = {"sizes": spaces.MultiDiscrete([3] * 8), "select": spaces.MultiBinary(8),
               "rates": spaces.Box(-1, 1, (8,), np.float32)}.get(layout, spaces.Box(-1, 1, (16,), np.float32))
    assert policy.fits(rows, obs, actions)
    assert not policy.fits(ClientRows(rows.width + 1, rows.globals), obs, actions)
    assert not policy.fits(rows, spaces.Box(0.0, 1.0, (obs.shape[0] + 1,), np.float32), actions)
    assert not policy.fits(rows, obs, spaces.Box(-1, 1, (7,), np.float32))  # not 8 clients' actions


def test_a_set_policy_of_a_categorical_action_picks_among_the_first_choices_of_more():
    rows = LAYOUTS["sizes"][0]
    three = _policy(rows, spaces.MultiDiscrete([3] * K))
    obs = spaces.Box(0.0, 1.0, (8,), np.float32)
    assert three.fits(rows, obs, spaces.MultiDiscrete([4] * 8))
    assert not three.fits(rows, obs, spaces.MultiDiscrete([2] * 8))  # it would pick a third size


@pytest.mark.parametrize("pool", ["mean", "attention"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_permuting_the_clients_permutes_the_action_and_keeps_the_value(layout, pool):
    rows, action_space = LAYOUTS[layout]
    policy = _policy(rows, action_space, pool=pool, transform="neglog")
    obs = np.random.default_rng(1).uniform(0.05, 1, (3, policy.observation_space.shape[0])).astype(np.float32)
    order = np.array([3, 0, 4, 1, 2])
    actor, value = _client_params(policy, obs)
    actor_p, value_p = _client_params(policy, _permute(obs, rows, order))
    np.testing.assert_allclose(actor_p, actor[:, order], atol=1e-5)
    np.testing.assert_allclose(value_p, value, atol=1e-5)
    assert not np.allclose(actor[:, 0], actor[:, 1], atol=1e-3)  # the clients are told apart
    if isinstance(action_space, spaces.Box):  # the deterministic action moves with its client
        a = policy.predict(obs, deterministic=True)[0]
        a_p = policy.predict(_permute(obs, rows, order), deterministic=True)[0]
        np.testing.assert_allclose(a_p.reshape(3, -1, K), a.reshape(3, -1, K)[:, :, order], atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_one_policy_acts_on_client_counts_it_was_not_built_for(layout):
    rows, action_space = LAYOUTS[layout]
    policy = _policy(rows, action_space)
    for k in (2, 9, 40):
        obs = np.random.default_rng(k).uniform(0.05, 1, rows.width * k + rows.globals).astype(np.float32)
        action, _ = policy.predict(obs, deterministic=True)
        assert action.shape == (action_space.shape[0] // K * k,)
        batch, _ = policy.predict(np.stack([obs, obs]), deterministic=True)
        np.testing.assert_allclose(batch[1], action, atol=1e-6)  # batched matmuls round differently
    with pytest.raises(ValueError, match="observation"):
        policy.predict(np.zeros(rows.globals + rows.width - 1, np.float32))  # no whole row


def test_a_round_level_action_reads_the_pooled_context():
    rows = ClientRows(8, 7, per_client_action=False)
    policy = _policy(rows, spaces.Box(-1, 1, (1,), np.float32))
    for k in (3, 5, 11):
        assert policy.predict(np.full(8 * k + 7, 0.5, np.float32), deterministic=True)[0].shape == (1,)


@pytest.mark.parametrize("kwargs,name", [
    (dict(client_rows=None), "client_rows"),
    (dict(pool="max"), "pool"),
    (dict(hidden=6), "hidden"),
    (dict(transform="log"), "transform"),
    (dict(use_sde=True), "use_sde"),
    (dict(action_bias=float("nan")), "action_bias"),
])
def test_bad_policy_arguments_name_the_parameter(kwargs, name):
    rows, action_space = LAYOUTS["rates"]
    obs_space = spaces.Box(0.0, 1.0, (8 * K + 7,), np.float32)
    args = {"client_rows": rows, **kwargs}
    with pytest.raises(ValueError, match=name):
        SetPolicy(obs_space, action_space, lambda _: 3e-4, **args)


def test_action_bias_starts_keep_bits_near_keep_all_and_survives_saving(tmp_path):
    env = make_env("FLSelect-v0", 1, env_kwargs={"rounds_per_episode": 2})
    model = build_agent(env, {**load_hyperparams("FLSelect-v0"), "policy": "SetPolicy",
                              "policy_kwargs": {"hidden": 16, "action_bias": 2.0}}, "ppo")
    obs = torch.as_tensor(env.reset(), dtype=torch.float32)
    probs = model.policy.get_distribution(obs).distribution.probs
    assert torch.allclose(probs, torch.full_like(probs, 1 / (1 + np.exp(-2.0))), atol=0.02)
    model.save(tmp_path / "m.zip")
    assert PPO.load(tmp_path / "m.zip", device="cpu").policy.action_bias == 2.0


def test_set_policy_is_for_ppo_only_and_a_policy_by_name_is_one_for_flat_observations():
    """SB3 failed on CnnPolicy with a message of ten lines, and on a number with "'int' is not callable"."""
    with pytest.raises(ValueError, match="policy='SetPolicy' is out of range for algo='maskable-ppo'; "
                                         r"allowed: MlpPolicy \(or a policy class, from Python\)$"):
        check_hyperparams({"policy": "SetPolicy"}, "maskable-ppo")
    for policy in ("CnnPolicy", 3):
        with pytest.raises(ValueError, match=f"policy={policy!r} is out of range for algo='ppo'; allowed: "
                                             "MlpPolicy, SetPolicy"):
            check_hyperparams({"policy": policy}, "ppo")
    check_hyperparams({"policy": SetPolicy}, "ppo")  # a class, from Python


def test_every_registered_env_lists_client_rows_that_parse_its_observation():
    for env_id in env_ids():
        env = gym.make(env_id)
        rows = env.unwrapped.client_rows
        n, rest = divmod(env.observation_space.shape[0] - rows.globals, rows.width)
        assert rest == 0 and n >= 2, env_id


def test_ppo_trains_a_set_policy_from_the_yaml_saves_it_and_it_acts_zero_shot_on_scale20(tmp_path):
    hp = load_hyperparams("FLHetero-v0", "set")
    assert hp["policy"] == "SetPolicy"
    hp.update(n_steps=16, batch_size=32, n_epochs=2)
    venv = make_env("FLHetero-v0", 2, seed=0, vec_env="batched", env_kwargs={"randomize_scenario": True})
    model = build_agent(venv, hp, seed=0)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(64)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    model.save(tmp_path / "set.zip")
    loaded = PPO.load(tmp_path / "set.zip", device="cpu")
    big = gym.make("FLHetero-v0", preset="scale20")
    obs, _ = big.reset(seed=0)
    action, _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(action, model.predict(obs, deterministic=True)[0])
    assert big.action_space.contains(action)
    big.step(action)


@pytest.mark.parametrize("env_id", env_ids())
def test_every_registered_id_takes_a_set_policy_by_name(env_id):
    venv = make_env(env_id, 1, seed=0)
    model = build_agent(venv, {"policy": "SetPolicy", "n_steps": 8, "batch_size": 8}, seed=0)
    obs = venv.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (1, *venv.action_space.shape) and venv.action_space.contains(action[0])
    venv.close()
