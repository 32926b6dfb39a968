from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import fl_gym
from fl_gym.baselines.hetero import (
    BalancedOraclePolicy,
    ClairvoyantOraclePolicy,
    GreedyBySpeedPolicy,
    HAPFLPolicy,
    HistoryOraclePolicy,
    InverseTimePolicy,
    RandomPolicy,
    UniformPolicy,
    balanced_sizes,
)
from fl_gym.envs.hetero.actions import HeteroSpec
from fl_gym.envs.hetero.config import HeteroConfig
from fl_gym.envs.registry import family_of

STILL = dict(sigma_dyn=0.0, sigma_drift=0.0, sigma_meas=0.0)
TORCH_SMALL = dict(backend="torch", local_epochs=1, rounds_per_episode=3)


def _rollout(env, policy, steps, seed=0):
    obs, _ = env.reset(seed=seed)
    infos, rewards = [], []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(policy.predict(obs)[0])
        infos.append(info)
        rewards.append(reward)
        assert not terminated
    return infos, rewards


def test_budget_and_state_normalisation():
    env = gym.make("FLHetero-v0")
    infos, _ = _rollout(env, RandomPolicy(env, seed=1), 50)
    for info in infos:
        assert info["hetero/epochs"].sum() == 120 and info["hetero/epochs"].min() >= 1
        assert np.all(info["hetero/epochs"] == np.round(info["hetero/epochs"]))
        np.testing.assert_allclose(info["hetero/cost_ratio"]
                                   / info["hetero/time_ratio"][info["hetero/sizes"]],
                                   info["hetero/probe_time"] / info["hetero/probe_time"].min())
    obs, _ = env.reset(seed=3)
    assert obs.max() == 1.0 and obs.min() > 0  # speed relative to the round's fastest


def test_doubling_speed_halves_the_assessment_time():
    env = gym.make("FLHetero-v0", **STILL).unwrapped
    env.reset(seed=0)
    load = env._pending.opened.load
    before = env.federation.clock.epoch_time(env.federation.sizes, 1.0, load)
    env.federation.profiles.speed[3] *= 2
    after = env.federation.clock.epoch_time(env.federation.sizes, 1.0, load)
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
        assert a["hetero/r1"] == pytest.approx(10.0 - a["hetero/cost_ratio"].max()
                                               / a["hetero/cost_ratio"].min(), rel=1e-9)
        assert a["hetero/r1"] == pytest.approx(b["hetero/r1"], rel=1e-9)
        assert not np.array_equal(a["hetero/epochs"], b["hetero/epochs"])


def test_r2_sign_and_optimum():
    env = gym.make("FLHetero-v0", alpha=100.0, **STILL, fractional_epochs=True)
    infos, _ = _rollout(env, InverseTimePolicy(env), 30)
    for info in infos:
        assert info["hetero/r2_seconds"] <= 0
        assert abs(info["hetero/r2_seconds"]) < 1e-6 * info["hetero/train_time"].max()
    env = gym.make("FLHetero-v0", alpha=100.0, **STILL)
    infos, _ = _rollout(env, InverseTimePolicy(env), 30)
    for info in infos:
        assert info["hetero/r2_seconds"] <= 0
        if np.all(info["hetero/epoch_share"] * 120 >= 1):
            assert abs(info["hetero/r2_seconds"]) < 2 * info["hetero/train_time_per_epoch"].max()


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
            slowest = int(np.argmin(obs))  # obs = 1 / S^1
            if name == "slowest_small":
                sizes[slowest] = 0
            obs_next, _, _, _, info = env.step(h.encode_action(sizes, np.full(6, 1 / 6)))
            runs[name].append((slowest, 1 / float(obs[slowest]), info))
            obs = obs_next
    for (slowest, s1, big), (_, _, small) in zip(runs["all_large"], runs["slowest_small"], strict=True):
        assert small["hetero/train_time"][slowest] == pytest.approx(ratio * big["hetero/train_time"][slowest],
                                                                     rel=1e-12)
        if s1 >= 1 / ratio:
            assert small["hetero/straggling_local"] < big["hetero/straggling_local"]


def _means(policy_name, rounds=100, **kwargs):
    env = gym.make("FLHetero-v0", **kwargs)
    policy = {"uniform": UniformPolicy, "greedy": GreedyBySpeedPolicy, "inverse": InverseTimePolicy,
              "oracle": BalancedOraclePolicy}[policy_name](env)
    infos, _ = _rollout(env, policy, rounds, seed=2024)
    return (np.mean([i["straggling_latency"] for i in infos]), infos[-1]["sim_time"],
            np.mean([i["hetero/r1"] for i in infos]))


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
            s1 = 1 / obs.astype(float)
            v = m[balanced_sizes(s1, m)] * s1
            out.append(10 - v.max() / v.min())
        obs, *_ = env.step(env.action_space.sample())
    assert all(a >= b - 1e-12 for a, b in zip(r3, r2, strict=True))
    assert np.mean(r3) > np.mean(r2)


def test_views_use_their_injected_policies():
    alloc = gym.make("FLHeteroAlloc-v0", intensity_policy="inverse")
    obs, _ = alloc.reset(seed=0)
    _, r, _, _, info = alloc.step(np.ones(6, np.int64))
    assert r == info["hetero/r1"]
    assert len(set(info["hetero/epochs"].tolist())) > 1  # inverse-time split, not the uniform 20 each
    intensity = gym.make("FLHeteroIntensity-v0", allocation_policy="large")
    obs, _ = intensity.reset(seed=0)
    _, r, _, _, info = intensity.step(np.zeros(6, np.float32))
    assert np.all(info["hetero/sizes"] == 1) and np.all(info["hetero/epochs"] == 20)
    assert r == pytest.approx(info["hetero/r2_seconds"] / intensity.unwrapped.t_scale)
    np.testing.assert_allclose(1 / obs, info["hetero/cost_ratio"], rtol=1e-6)


@pytest.mark.parametrize("kwargs,name", [({"allocation_policy": 3}, "allocation_policy"),
                                         ({"intensity_policy": "nope"}, "intensity_policy")])
def test_an_injected_policy_is_a_predictor_or_a_fixed_name_checked_at_make(kwargs, name):
    """An int was taken for a predictor; the first step failed: 'int' object has no attribute 'predict'."""
    env_id = "FLHeteroIntensity-v0" if name == "allocation_policy" else "FLHeteroAlloc-v0"
    with pytest.raises(ValueError, match=rf"^{name}={kwargs[name]!r} is out of range; allowed: a predictor"):
        gym.make(env_id, **kwargs)


def test_extended_observation():
    env = gym.make("FLHetero-v0", obs_mode="extended")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (24,) and env.observation_space.shape == (24,)
    assert np.all(obs[18:] == 0)  # no previous size yet
    obs, *_ = env.step(env.unwrapped.encode_action(np.ones(6, np.int64), np.full(6, 1 / 6)))
    assert np.all((obs[6:18] >= 0) & (obs[6:18] <= 1))
    again, _ = env.reset(seed=0)  # a new episode starts without previous sizes: same seed, same observation
    assert np.array_equal(again, env.reset(seed=0)[0]) and np.all(again[18:] == 0)


@pytest.mark.parametrize("vectorised", [False, True])
def test_the_extended_observation_shows_the_partition_each_reset_redrew(vectorised):
    """Sizes over the largest and label entropies of this episode's data, not of the first partition."""
    kwargs = dict(obs_mode="extended", redraw_partition=True)
    env = fl_gym.make_vec("FLHetero-v0", 2, seed=0, **kwargs) if vectorised else \
        gym.make("FLHetero-v0", **kwargs)
    copy = env.envs[0].unwrapped if vectorised else env.unwrapped
    for seed in range(3):
        obs = env.reset()[0] if vectorised else env.reset(seed=seed)[0]
        fed, slots = copy.federation, copy.pending.slots
        np.testing.assert_allclose(obs[6:12], fed.sizes[slots] / fed.sizes.max(), rtol=1e-6)
        np.testing.assert_allclose(obs[12:18], fed.label_entropy[slots] / np.log2(fed.num_classes), rtol=1e-6)


DRIFTING = dict(obs_mode="history", load_persistence=0.9, sigma_drift=0.5)


def test_the_history_observation_shows_each_clients_last_slowdown_and_its_age():
    env = gym.make("FLHetero-v0", **DRIFTING)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (18,) and np.all(obs[6:] == [0.5] * 6 + [1.0] * 6)  # nobody measured yet
    fed, slowdown, last = env.unwrapped.federation, {}, {}
    for t in range(1, 5):
        played = env.unwrapped._pending
        obs, _, _, _, info = env.step(env.action_space.sample())
        for c in played.slots:
            slowdown[c], last[c] = played.opened.load.drift[c], t
        slots = env.unwrapped._pending.slots
        expected = [1 / (1 + slowdown[c]) if c in last else 0.5 for c in slots]
        ages = [(1 + t - last[c]) / 11 if c in last else 1.0 for c in slots]
        np.testing.assert_allclose(obs[6:12], expected, rtol=1e-6)
        np.testing.assert_allclose(obs[12:], ages, rtol=1e-6)
    # the measured slowdown is what the server can compute: per-epoch training time over the probe's forecast
    c = played.slots[0]
    costs = fed.model_costs[info["hetero/sizes"][0]] + fed.companion_cost
    probe_per_cost = info["hetero/probe_time"][0] / fed.probe_cost
    measured = info["hetero/train_time_per_epoch"][0] / (probe_per_cost * costs)
    assert measured == pytest.approx(slowdown[c])


def test_the_history_oracle_plays_the_oracle_on_forecast_speeds_by_hand():
    spec = gym.make("FLHetero-v0", **DRIFTING, preset="scale20").unwrapped.hetero
    rng = np.random.default_rng(1)
    s1 = np.exp(rng.uniform(0, 2, 12))
    drift, age = np.exp(rng.normal(0, 0.5, 12)), rng.integers(0, 14, 12)
    obs = np.concatenate([1 / s1, 1 / (1 + drift), (1 + np.minimum(age, 10)) / 11]).astype(np.float32)
    forecast = np.where(age < 10, drift ** (0.7 ** (age + 1.0)), 1.0)
    by_hand = np.concatenate([(1 / s1) / forecast, obs[12:]]).astype(np.float32)
    np.testing.assert_allclose(HistoryOraclePolicy(spec, rho=0.7).predict(obs)[0],
                               BalancedOraclePolicy(spec).predict(by_hand)[0], atol=1e-6)
    oracle_sizes = BalancedOraclePolicy(spec).predict(obs)[0][:12]
    np.testing.assert_array_equal(HistoryOraclePolicy(spec, rho=0.0).predict(obs)[0][:12], oracle_sizes)
    with pytest.raises(ValueError, match="observation width=12"):
        HistoryOraclePolicy(spec).predict(obs[:12])
    with pytest.raises(ValueError, match="rho=1.5"):
        HistoryOraclePolicy(spec, rho=1.5)
    np.testing.assert_allclose(HistoryOraclePolicy(spec, rho=0.7, fit="smallest").predict(obs)[0],
                               BalancedOraclePolicy(spec, fit="smallest").predict(by_hand)[0], atol=1e-6)
    with pytest.raises(ValueError, match="fit='tightest' is out of range; allowed: one of largest, smallest"):
        HistoryOraclePolicy(spec, fit="tightest")


def test_the_clairvoyant_oracle_balances_the_true_per_epoch_times():
    """Seeing this round's drift, it picks the balanced sizes of the true per-epoch times and (with
    fractional epochs) equal training times; the probe-only oracle's training times straggle."""
    env = gym.make("FLHetero-v0", **DRIFTING, fractional_epochs=True)
    clairvoyant, oracle = ClairvoyantOraclePolicy(env), BalancedOraclePolicy(env)
    infos, _ = _rollout(env, clairvoyant, 5)
    for info in infos:
        ratio = env.unwrapped.time_ratio
        per_epoch_base = info["hetero/train_time_per_epoch"] / ratio[info["hetero/sizes"]]  # ∝ S^1 x drift
        np.testing.assert_array_equal(balanced_sizes(per_epoch_base, ratio), info["hetero/sizes"])
        times = info["hetero/train_time"]
        np.testing.assert_allclose(times, times.mean(), rtol=1e-6)  # equal, up to the float32 action
    straggle = [np.ptp(i["hetero/train_time"]) for i in _rollout(env, oracle, 5)[0]]
    assert min(straggle) > 0.01 * np.mean([i["hetero/train_time"].mean() for i in infos])


@pytest.mark.parametrize("env_id,action,match", [
    ("FLHeteroAlloc-v0", np.full(6, 2), "action="),
    ("FLHeteroAlloc-v0", np.ones(5, np.int64), "action has shape"),
    ("FLHetero-v0", np.full(12, np.nan, np.float32), "is not finite"),
    ("FLHetero-v0", np.array(["a"] * 12), "has dtype <U1"),
    ("FLHeteroAlloc-v0", np.full(6, 0.5), "integers of"),
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
    (dict(model_costs={"lite": 1.0}), "model_costs"), (dict(algorithm="feddyn"), "algorithm"),
    (dict(scenario_seed=-1), "scenario_seed"), (dict(scenario_seed="a"), "scenario_seed"),
    (dict(device="nope"), "device"), (dict(num_clients=1), "num_clients"), (dict(lr=-1.0), "lr"),
    (dict(local_epochs=1001, backend="torch"), "local_epochs"),  # would train for hours a round
])
def test_bad_config_fails_at_make(kwargs, param):
    with pytest.raises(ValueError, match=f"{param}="):
        gym.make("FLHetero-v0", **kwargs)


@pytest.mark.parametrize("env_id,mode", [("FLHeteroAlloc-v0", "r2"), ("FLHeteroIntensity-v0", "joint")])
def test_a_view_rejects_a_reward_it_does_not_have(env_id, mode):
    with pytest.raises(ValueError, match=f"reward_mode='{mode}' is out of range"):
        gym.make(env_id, reward_mode=mode)


def test_scenario_fields_are_shared_and_family_fields_stay_apart():
    cfg = HeteroConfig.from_kwargs(preset="scale20", clients_per_round=10, lr=1e-3, dataset="synthetic")
    assert (cfg.scenario.num_clients, cfg.scenario.heterogeneity, cfg.scenario.lr) == (20, 20.0, 1e-3)
    assert cfg.replace(alpha=2.0).scenario.alpha == 2.0 and cfg.replace(alpha=2.0).clients_per_round == 10
    assert HeteroConfig().scenario.optimizer == "adam"  # HAPFL's default beside the generic SGD


def test_presets():
    assert HeteroConfig(preset="scale100").clients_per_round == 60
    cfg = HeteroConfig(preset="scale20", clients_per_round=10)
    assert (cfg.scenario.num_clients, cfg.clients_per_round, cfg.num_sizes, cfg.total_epochs) == (
        20, 10, 3, 200)
    np.testing.assert_allclose(HeteroConfig().time_ratio, [4.5, 14.0])


def test_env_equals_a_standalone_loop_over_the_federation():
    """The env only decodes and encodes: a hand-written loop over the federation's phases with the
    same seeds ends with bit-identical global models."""
    from gymnasium.utils.seeding import np_random

    from fl_gym import Federation, RoundPlan
    from fl_gym.envs.hetero.actions import integerize

    env = gym.make("FLHetero-v0", **TORCH_SMALL)
    policy = BalancedOraclePolicy(env)
    _rollout(env, policy, 3, seed=7)
    cfg = HeteroConfig.from_kwargs(**TORCH_SMALL)
    fed = Federation(cfg.federation_config(), scenario_seed=0)
    rng, _ = np_random(7)
    fed.reset(seed=int(rng.integers(2**63 - 1)), sampler=rng)
    spec, m = env.unwrapped.hetero, cfg.time_ratio
    for _ in range(3):
        opened = fed.open_round(6)
        selected = np.flatnonzero(opened.candidates)
        t_d = opened.probe_time[selected]
        s1 = 1 / (1.0 / (t_d / t_d.min())).astype(np.float32).astype(np.float64)  # what the policy reads back
        sizes = balanced_sizes(s1, m)
        inv = 1 / (m[sizes] * s1)
        sizes, sigma = spec.decode(spec.encode(sizes, inv / inv.sum()))
        model, epochs = np.zeros(10, np.int64), np.zeros(10)
        model[selected], epochs[selected] = sizes, integerize(sigma, cfg.total_epochs)
        plan = RoundPlan.make(10, lr=cfg.scenario.lr, selected=opened.candidates, model=model, epochs=epochs)
        fed.finish_round(fed.train_round(opened, plan))
    ours = env.unwrapped.federation
    for a, b in zip(ours.global_models + [ours.companion_model], fed.global_models + [fed.companion_model],
                    strict=True):
        assert np.array_equal(a.numpy(), b.numpy())


def test_torch_backend_learns_on_digits():
    """digits has 40x fewer samples than MNIST, so a round has fewer steps: lr 3e-3 instead of 3e-4."""
    env = gym.make("FLHetero-v0", backend="torch", local_epochs=3, lr=3e-3, rounds_per_episode=8)
    infos, _ = _rollout(env, BalancedOraclePolicy(env), 8, seed=0)
    assert infos[-1]["hetero/lite_accuracy"] > infos[0]["hetero/lite_accuracy"] + 0.1
    assert infos[-1]["hetero/mean_local_accuracy"] > 0.5
    assert infos[-1]["accuracy"] == infos[-1]["hetero/global_accuracy"]["large"]
    weights = infos[-1]["hetero/lite_weights"]
    assert weights.sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_torch_smoke_on_real_mnist():
    """Real MNIST: 10 clients, k=6, 3 rounds, tau_total 12: the LiteModel improves and
    personalised local models exceed 90 % by round 3 (needs `fl-gym data prepare`)."""
    from fl_gym.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset("mnist", download=False)
    except DatasetNotFoundError:
        pytest.skip("MNIST files not found; run fl-gym data prepare ROOT and set FL_GYM_DATA=ROOT")
    env = gym.make("FLHetero-v0", dataset="mnist", backend="torch", local_epochs=2, rounds_per_episode=3)
    infos, _ = _rollout(env, BalancedOraclePolicy(env), 3, seed=0)
    assert infos[2]["hetero/lite_accuracy"] > infos[0]["hetero/lite_accuracy"]
    assert infos[2]["hetero/mean_local_accuracy"] > 0.9


def test_a_terminated_episode_needs_a_reset():
    env = gym.make("FLHetero-v0", backend="torch", local_epochs=1, lr=3e-3, target_accuracy=0.01,
                   rounds_per_episode=5).unwrapped
    obs, _ = env.reset(seed=0)
    *_, terminated, truncated, info = env.step(BalancedOraclePolicy(env).predict(obs)[0])
    assert terminated and not truncated and info["accuracy"] >= 0.01
    with pytest.raises(gym.error.ResetNeeded, match="after the episode ended"):
        env.step(obs)


@pytest.mark.parametrize("env_id,base", [("FLHetero-v0", "oracle"), ("FLHeteroIntensity-v0", "inverse")])
def test_a_residual_action_corrects_its_base_policy(env_id, base):
    """A zero correction plays the base policy's episode exactly; a correction changes it."""
    residual = gym.make(env_id, residual_policy=base, rounds_per_episode=4)
    plain = gym.make(env_id, rounds_per_episode=4)
    policy = family_of(env_id).fixed_policies(env_id)[base].build(plain)
    obs, _ = plain.reset(seed=3)
    residual.reset(seed=3)
    zero = np.zeros(residual.action_space.shape, np.float32)
    for _ in range(4):
        obs, reward, *_, info = plain.step(policy.predict(obs)[0])
        _, r, *_, i = residual.step(zero)
        assert r == reward and i["hetero/epochs"].tolist() == info["hetero/epochs"].tolist()
    residual.reset(seed=3)
    first = residual.step(zero)[4]["hetero/epoch_share"]
    residual.reset(seed=3)
    tilt = np.linspace(-0.5, 0.5, residual.action_space.shape[0]).astype(np.float32)
    assert not np.allclose(residual.step(tilt)[4]["hetero/epoch_share"], first)


@pytest.mark.parametrize("kwargs", [dict(residual_policy="nope"), dict(residual_policy=3)])
def test_a_bad_residual_policy_is_named(kwargs):
    with pytest.raises(ValueError, match="residual_policy"):
        gym.make("FLHetero-v0", **kwargs)


def test_the_categorical_view_has_no_residual_action():
    with pytest.raises(ValueError, match="residual_policy"):
        gym.make("FLHeteroAlloc-v0", residual_policy="oracle")


@pytest.mark.parametrize("preset,catalogue", [("paper10", [4.5 / 14, 1.0, 1.0]),
                                              ("scale20", [4.5 / 14, 8.5 / 14, 1.0])])
def test_the_catalogue_observation_adds_what_each_ordinal_size_costs(preset, catalogue):
    """M(s) = (c(s) + c(lite)) / c(lite): small 4.5, medium 8.5, large 14, over the large's."""
    paper = gym.make("FLHetero-v0", preset=preset)
    env = gym.make("FLHetero-v0", preset=preset, obs_mode="catalogue")
    obs, k = env.reset(seed=2)[0], env.unwrapped.k
    np.testing.assert_array_equal(obs[:k], paper.reset(seed=2)[0])
    np.testing.assert_allclose(obs[k:], catalogue, rtol=1e-6)
    assert env.observation_space.shape == (k + 3,) and env.observation_space.contains(obs)
    assert env.unwrapped.client_rows.globals == 3


def test_hapfl_stage_models_of_another_client_count_are_refused():
    """A recipe trained on 6 clients a round, played on scale20's 12: SB3's traceback at the first predict."""
    from stable_baselines3 import PPO

    ppo1 = PPO("MlpPolicy", gym.make("FLHeteroAlloc-v0"), n_steps=16, batch_size=16)
    ppo2 = PPO("MlpPolicy", gym.make("FLHeteroIntensity-v0"), n_steps=16, batch_size=16)
    HAPFLPolicy(gym.make("FLHetero-v0"), ppo1, ppo2)
    with pytest.raises(ValueError, match=r"^HAPFLPolicy: ppo1 was trained on observations of shape \(6,\); "
                                         r"allowed: a model of this env, whose observations have shape "
                                         r"\(12,\)$"):
        HAPFLPolicy(gym.make("FLHetero-v0", preset="scale20"), ppo1, ppo2)
    with pytest.raises(ValueError, match=r"^allocation_policy was trained on observations of shape \(6,\)"):
        gym.make("FLHeteroIntensity-v0", allocation_policy=ppo1, preset="scale20")


def test_greedy_by_speed_gives_the_fastest_equal_count_group_the_largest_size_by_hand():
    """k = 7 slots, 3 sizes: ranks 0-2 (the fastest, np.array_split's larger first group) the largest,
    3-4 the middle, 5-6 the smallest; a tie ranks the lower slot first; each row of a batch alone."""
    policy = GreedyBySpeedPolicy(HeteroSpec("alloc", 7, 3, np.array([1.0, 2.0, 4.0])))
    ratio = np.array([5.0, 1.0, 3.0, 7.0, 2.0, 6.0, 4.0])
    np.testing.assert_array_equal(policy.sizes(ratio), [1, 2, 2, 0, 2, 0, 1])
    tied = np.array([2.0, 1.0, 2.0, 2.0, 1.0, 3.0, 2.0])  # fastest: slots 1, 4, then 0; 2, 3; 6, 5
    rows = policy.sizes(np.stack([ratio, tied])[None])
    assert rows.shape == (1, 2, 7)
    np.testing.assert_array_equal(rows[0], [[1, 2, 2, 0, 2, 0, 1], [2, 2, 1, 1, 2, 0, 0]])
