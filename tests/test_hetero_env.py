from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import fl_gym  # noqa: F401  (registers the ids)
from fl_gym.baselines.hetero import (
    BalancedOraclePolicy,
    GreedyBySpeedPolicy,
    InverseTimePolicy,
    RandomPolicy,
    UniformPolicy,
    balanced_sizes,
)
from fl_gym.envs.hetero_config import HeteroConfig

IDS = ["FLHetero-v0", "FLHeteroAlloc-v0", "FLHeteroIntensity-v0"]
STILL = dict(sigma_dyn=0.0, sigma_drift=0.0, sigma_meas=0.0)
TORCH_SMALL = dict(backend="torch", local_epochs=1, rounds_per_episode=3)
ALLOWED = ("maximum value is infinity",)


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("kwargs", [{}, TORCH_SMALL], ids=["timing", "torch"])
def test_gymnasium_and_sb3_check_env(env_id, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id, **kwargs)
        check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)
    unexpected = [str(w.message) for w in caught if not any(a in str(w.message) for a in ALLOWED)]
    assert unexpected == []


def _rollout(env, policy, steps, seed=0):
    obs, _ = env.reset(seed=seed)
    infos, rewards = [], []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(policy.predict(obs)[0])
        infos.append(info)
        rewards.append(reward)
        assert not terminated
    return infos, rewards


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_episode_and_truncation(env_id):
    env_a, env_b = gym.make(env_id, rounds_per_episode=7), gym.make(env_id, rounds_per_episode=7)
    env_a.action_space.seed(3)
    actions = [env_a.action_space.sample() for _ in range(7)]
    for env in (env_a, env_b):
        env.reset(seed=42)
    for t, action in enumerate(actions):
        out_a, out_b = env_a.step(action), env_b.step(action)
        assert data_equivalence(out_a, out_b, exact=True)
        assert out_a[3] == (t == 6) and out_a[2] is False
    with pytest.raises(gym.error.ResetNeeded):
        env_a.unwrapped.step(actions[0])


def test_budget_and_state_normalisation():
    env = gym.make("FLHetero-v0")
    infos, _ = _rollout(env, RandomPolicy(env, seed=1), 50)
    for info in infos:
        assert info["epochs"].sum() == 120 and info["epochs"].min() >= 1
        assert np.all(info["epochs"] == np.round(info["epochs"]))
        assert info["T_d"].min() / info["T_d"].min() == 1.0
    obs, _ = env.reset(seed=3)
    assert obs.min() == 1.0


def test_doubling_speed_halves_the_assessment_time():
    env = gym.make("FLHetero-v0", **STILL).unwrapped
    env.reset(seed=0)
    before = env.federation.clock.epoch_time(env.federation.sizes, 1.0, env._load)
    env.federation.profiles.speed[3] *= 2
    after = env.federation.clock.epoch_time(env.federation.sizes, 1.0, env._load)
    assert after[3] == pytest.approx(before[3] / 2)
    np.testing.assert_array_equal(np.delete(after, 3), np.delete(before, 3))


def test_r1_identity_and_independence_from_the_split():
    """Two envs seeded alike, same sizes, different splits: identical R^1 = MD - max(S^2)/min(S^2)."""
    uniform, skewed = gym.make("FLHetero-v0", **STILL), gym.make("FLHetero-v0", **STILL)
    uniform.reset(seed=5)
    skewed.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(30):
        sizes = rng.integers(0, 2, 6)
        *_, a = uniform.step(uniform.unwrapped.encode_action(sizes, np.full(6, 1 / 6)))
        *_, b = skewed.step(skewed.unwrapped.encode_action(sizes, rng.dirichlet(np.ones(6))))
        assert a["r1"] == pytest.approx(10.0 - a["s2"].max() / a["s2"].min(), rel=1e-9)
        assert a["r1"] == pytest.approx(b["r1"], rel=1e-9)
        assert not np.array_equal(a["epochs"], b["epochs"])


def test_r2_sign_and_optimum():
    env = gym.make("FLHetero-v0", alpha=100.0, **STILL, fractional_epochs=True)
    infos, _ = _rollout(env, InverseTimePolicy(env), 30)
    for info in infos:
        assert info["r2_raw"] <= 0
        assert abs(info["r2_raw"]) < 1e-6 * info["T_l"].max()
    env = gym.make("FLHetero-v0", alpha=100.0, **STILL)
    infos, _ = _rollout(env, InverseTimePolicy(env), 30)
    for info in infos:
        assert info["r2_raw"] <= 0
        if np.all(info["sigma"] * 120 >= 1):
            assert abs(info["r2_raw"]) < 2 * info["T_l_per_epoch"].max()


def test_a_slow_client_on_a_small_model_straggles_less():
    env = gym.make("FLHetero-v0", **STILL)
    h = env.unwrapped
    ratio = h.time_ratio[0] / h.time_ratio[1]
    runs = {}
    for name in ("all_large", "slowest_small"):
        obs, _ = env.reset(seed=9)
        runs[name] = []
        for _ in range(5):
            sizes = np.ones(6, np.int64)
            slowest = int(np.argmax(obs))
            if name == "slowest_small":
                sizes[slowest] = 0
            obs_next, _, _, _, info = env.step(h.encode_action(sizes, np.full(6, 1 / 6)))
            runs[name].append((slowest, float(obs[slowest]), info))
            obs = obs_next
    for (slowest, s1, big), (_, _, small) in zip(runs["all_large"], runs["slowest_small"], strict=True):
        assert small["T_l"][slowest] == pytest.approx(ratio * big["T_l"][slowest], rel=1e-12)
        if s1 >= 1 / ratio:
            assert small["straggling_local"] < big["straggling_local"]


def _means(policy_name, rounds=100, **kwargs):
    env = gym.make("FLHetero-v0", **kwargs)
    policy = {"uniform": UniformPolicy, "greedy": GreedyBySpeedPolicy, "inverse": InverseTimePolicy,
              "oracle": BalancedOraclePolicy}[policy_name](env)
    infos, _ = _rollout(env, policy, rounds, seed=2024)
    return (np.mean([i["straggling_latency"] for i in infos]), infos[-1]["cum_time"],
            np.mean([i["r1"] for i in infos]))


def test_ablation_ordering_and_headline_direction():
    lat = {p: _means(p) for p in ("uniform", "greedy", "inverse", "oracle")}
    assert lat["oracle"][0] <= lat["inverse"][0] <= lat["greedy"][0] <= lat["uniform"][0]
    assert lat["greedy"][2] > lat["uniform"][2]  # sizes alone raise R^1
    fedavg_latency, fedavg_time, _ = _means("uniform", algorithm="fedavg")
    assert lat["oracle"][0] <= (1 - 0.19) * fedavg_latency
    assert lat["oracle"][1] <= (1 - 0.209) * fedavg_time


def test_three_sizes_never_balance_worse_than_two():
    env = gym.make("FLHetero-v0", preset="scale20")
    m3 = env.unwrapped.time_ratio
    m2 = m3[[0, 2]]
    obs, _ = env.reset(seed=0)
    r3, r2 = [], []
    for _ in range(100):
        for m, out in ((m3, r3), (m2, r2)):
            v = m[balanced_sizes(obs.astype(float), m)] * obs
            out.append(10 - v.max() / v.min())
        obs, *_ = env.step(env.action_space.sample())
    assert all(a >= b - 1e-12 for a, b in zip(r3, r2, strict=True))
    assert np.mean(r3) > np.mean(r2)


def test_views_use_their_injected_policies():
    alloc = gym.make("FLHeteroAlloc-v0", intensity_policy="inverse")
    obs, _ = alloc.reset(seed=0)
    _, r, _, _, info = alloc.step(np.ones(6, np.int64))
    assert r == info["r1"]
    assert len(set(info["epochs"].tolist())) > 1  # inverse-time split, not the uniform 20 each
    intensity = gym.make("FLHeteroIntensity-v0", allocation_policy="large")
    obs, _ = intensity.reset(seed=0)
    _, r, _, _, info = intensity.step(np.zeros(6, np.float32))
    assert np.all(info["sizes"] == 1) and np.all(info["epochs"] == 20)
    assert r == pytest.approx(info["r2_raw"] / intensity.unwrapped.t_scale)
    np.testing.assert_allclose(obs, info["s2"], rtol=1e-6)


def test_extended_observation():
    env = gym.make("FLHetero-v0", obs_mode="extended")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (24,) and env.observation_space.shape == (24,)
    assert np.all(obs[18:] == 0)  # no previous size yet
    obs, *_ = env.step(env.unwrapped.encode_action(np.ones(6, np.int64), np.full(6, 1 / 6)))
    assert np.all((obs[6:18] >= 0) & (obs[6:18] <= 1))
    again, _ = env.reset(seed=0)  # a new episode starts without previous sizes: same seed, same observation
    assert np.array_equal(again, env.reset(seed=0)[0]) and np.all(again[18:] == 0)


@pytest.mark.parametrize("env_id,action,match", [
    ("FLHeteroAlloc-v0", np.full(6, 2), "action="), ("FLHeteroAlloc-v0", np.ones(5, np.int64), "action has shape"),
    ("FLHetero-v0", np.full(12, np.nan, np.float32), "action="),
])
def test_bad_actions(env_id, action, match):
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)


@pytest.mark.parametrize("kwargs,param", [
    (dict(preset="paper5"), "preset"), (dict(clients_per_round=11), "clients_per_round"),
    (dict(num_sizes=4), "num_sizes"),
    (dict(backend="jax"), "backend"), (dict(alpha=0), "alpha"), (dict(reward_mode="acc"), "reward_mode"),
    (dict(model_costs={"lite": 1.0}), "model_costs"), (dict(algorithm="scaffold"), "algorithm"),
])
def test_bad_config_fails_at_make(kwargs, param):
    with pytest.raises(ValueError, match=f"{param}="):
        gym.make("FLHetero-v0", **kwargs)


def test_presets():
    assert HeteroConfig(preset="scale100").clients_per_round == 60
    cfg = HeteroConfig(preset="scale20", clients_per_round=10)
    assert (cfg.num_clients, cfg.clients_per_round, cfg.num_sizes, cfg.total_epochs) == (20, 10, 3, 200)
    np.testing.assert_allclose(HeteroConfig().time_ratio, [4.5, 14.0])


def test_env_equals_a_standalone_loop_over_the_federation():
    """The env only samples, decodes and encodes: a hand-written loop over Federation.run_round
    with the same draws ends with bit-identical global models."""
    from gymnasium.utils.seeding import np_random

    from fl_gym import Federation, RoundPlan
    from fl_gym.envs.hetero_actions import integerize

    env = gym.make("FLHetero-v0", **TORCH_SMALL)
    policy = BalancedOraclePolicy(env)
    _rollout(env, policy, 3, seed=7)
    cfg = HeteroConfig(**TORCH_SMALL)
    fed = Federation(cfg.federation_config(), scenario_seed=0)
    rng, _ = np_random(7)
    fed.reset(seed=int(rng.integers(2**63 - 1)))
    spec, m = env.unwrapped.hetero, cfg.time_ratio
    for _ in range(3):
        selected = np.sort(rng.permutation(10)[:6])
        load = fed.draw_load()
        t_d = fed.clock.epoch_time(fed.sizes, 1.0, load)[selected]
        s1 = (t_d / t_d.min()).astype(np.float32).astype(np.float64)
        sizes = balanced_sizes(s1, m)
        inv = 1 / (m[sizes] * s1)
        sizes, sigma = spec.decode(spec.encode(sizes, inv / inv.sum()))
        mask = np.isin(np.arange(10), selected)
        model, epochs = np.zeros(10, np.int64), np.zeros(10)
        model[selected], epochs[selected] = sizes, integerize(sigma, cfg.total_epochs)
        fed.run_round(RoundPlan.make(10, lr=cfg.lr, selected=mask, model=model, epochs=epochs), load)
    ours = env.unwrapped.federation
    for a, b in zip(ours.global_models + [ours.companion_model], fed.global_models + [fed.companion_model],
                    strict=True):
        assert np.array_equal(a.numpy(), b.numpy())


def test_torch_backend_learns_on_digits():
    """digits has 40x fewer samples than MNIST, so a round has fewer steps: lr 3e-3 instead of 3e-4."""
    env = gym.make("FLHetero-v0", backend="torch", local_epochs=3, lr=3e-3, rounds_per_episode=8)
    infos, _ = _rollout(env, BalancedOraclePolicy(env), 8, seed=0)
    assert infos[-1]["global_acc_lite"] > infos[0]["global_acc_lite"] + 0.1
    assert np.mean(infos[-1]["acc_local"]) > 0.5
    weights = infos[-1]["agg_weights_lite"]
    assert weights.sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_torch_smoke_on_real_mnist():
    """Spec 10.15: MNIST, 10 clients, k=6, 3 rounds, tau_total 12: the LiteModel improves and
    personalised local models exceed 90 % by round 3 (needs prepare_offline_data.sh)."""
    from fl_gym.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset("mnist", download=False)
    except DatasetNotFoundError:
        pytest.skip("MNIST files not found; run shared/data/prepare_offline_data.sh and set FL_GYM_DATA")
    env = gym.make("FLHetero-v0", dataset="mnist", backend="torch", local_epochs=2, rounds_per_episode=3)
    infos, _ = _rollout(env, BalancedOraclePolicy(env), 3, seed=0)
    assert infos[2]["global_acc_lite"] > infos[0]["global_acc_lite"]
    assert np.mean(infos[2]["acc_local"]) > 0.9
