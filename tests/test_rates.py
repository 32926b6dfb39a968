"""FedEnt's closed form (Zheng et al., IEEE TMC 2024) and the learning-rate env."""

from __future__ import annotations

import math
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from standalone import standalone  # tests/ is on sys.path

import fl_gym  # noqa: F401
from fl_gym import RoundPlan
from fl_gym.baselines.fedent import FedEntSettings, joint_solve, mean_field_offline, solve_eta
from fl_gym.baselines.rates import ConstantLRPolicy, DecayOnlyPolicy, FedEntPolicy, stats_from_observation
from fl_gym.envs.rates import RateConfig, rate_of, unit_of


def test_the_squared_step_norm_reduces_to_three_scalars_s_a_b():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(500, generator=g, dtype=torch.float64)
    grad = torch.randn(500, generator=g, dtype=torch.float64)
    s, a, b = float(w @ w), float(w @ grad), float(grad @ grad)
    for eta in (0.0, 0.1, 1.0):
        assert float((w - eta * grad).square().sum()) == pytest.approx(s - 2 * eta * a + eta * eta * b,
                                                                       rel=1e-12)


def test_eq22_with_the_share_frozen_at_one_half_by_hand():
    """With p frozen at 0.5 (theta = 0.5, Phi = 1 and s chosen so that n(eta) = 1 at the root)."""
    k = 0.5 * 0.5 * (1 + math.log(0.5)) / 0.5
    assert k == pytest.approx(0.1534264, abs=1e-7)
    assert k * 2 / (1 + k * 4) == pytest.approx(0.1901541, abs=1e-7)
    assert 2 / (1 / k + 2) == pytest.approx(0.2348029, abs=1e-7)  # the printed Eq. (22)


def test_joint_solve_of_two_clients_satisfies_eq21_and_clamps_at_zero():
    sol = joint_solve([0.5, 0.5], 2.0, [1, 1], [1, 0.5], FedEntSettings(beta=0.5))
    np.testing.assert_allclose(sol.eta, [0.0770909, 0.0792267], atol=1e-7)
    assert sol.phi2 == pytest.approx(1.8482232, abs=1e-7)
    w, g = np.array([1.0, 1.0]), np.array([[1.0, 0.0], [0.5, 0.5]])
    assert 0.5 * sum(np.sum((w - e * gi) ** 2)
                     for e, gi in zip(sol.eta, g, strict=True)) == pytest.approx(sol.phi2)
    for e, theta, a, b in zip(sol.eta, [0.5, 0.5], [1, 1], [1, 0.5], strict=True):  # Eq. (21) residual
        p = theta * (2 - 2 * e * a + e * e * b) / sol.phi2
        k = 0.5 * theta * (1 + math.log(p)) / (0.5 * sol.phi2)
        assert abs(e - k * (a - e * b)) < 1e-9  # the Picard iteration stops at |d eta| < 1e-10
    clamped = joint_solve([0.75, 0.25], 2.0, [1, 1], [1, 0.5], FedEntSettings(beta=0.5))
    np.testing.assert_allclose(clamped.eta, [0.2232142, 0.0], atol=1e-7)
    assert clamped.phi2 == pytest.approx(1.7025472, abs=1e-7)


def test_joint_solve_of_a_single_client_by_hand():
    sol = joint_solve([1.0], 2.0, [1.0], [1.0], FedEntSettings(beta=0.5))
    assert sol.eta[0] == pytest.approx(0.4301597, abs=1e-7) and sol.phi2 == pytest.approx(1.3247180, abs=1e-7)


def test_deep_net_regime_flags_the_first_order_root_that_is_not_a_minimum():
    args = ([0.25] * 4, 200.0, [1, -1, -3, 0.5], [2, 2, 8, 30])
    foc = joint_solve(*args, FedEntSettings())
    np.testing.assert_allclose(foc.eta, [0, 0.052993, 0.225222, 0.054643], atol=1e-6)
    assert foc.phi2 == pytest.approx(200.475918, abs=1e-6)
    assert foc.foc_not_min.tolist() == [False, False, False, True]
    argmin = joint_solve(*args, FedEntSettings(solver="argmin"))
    np.testing.assert_allclose(argmin.eta, [0, 0.056155, 0.245035, 1.0], atol=1e-5)
    assert argmin.phi2 == pytest.approx(207.767291, abs=1e-3)


def _quadratic_toy():
    centres = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    return (lambda clients, w, t: w - centres[clients]), [np.arange(3)] * 20, [np.array([0.5, 0.3, 0.2])] * 20


@pytest.mark.parametrize("gauss_seidel,sweeps", [(True, 13), (False, 31)])
def test_algorithm1_on_the_quadratic_toy(gauss_seidel, sweeps):
    grad, schedule, thetas = _quadratic_toy()
    w0 = torch.tensor([2.0, 2.0], dtype=torch.float64)
    mf = mean_field_offline(grad, w0, schedule, thetas, FedEntSettings(beta=0.5), gauss_seidel=gauss_seidel)
    assert mf.converged and mf.sweeps == sweeps
    assert mf.phi2[1] == pytest.approx(7.4923, abs=5e-3) and mf.phi2[20] == pytest.approx(2.894, abs=5e-3)
    torch.testing.assert_close(mf.phi1[20], torch.tensor([1.447, 0.894], dtype=torch.float64),
                               atol=5e-3, rtol=0)


def test_online_mode_on_the_offline_trajectory_reproduces_algorithm1():
    grad, schedule, thetas = _quadratic_toy()
    cfg = FedEntSettings(beta=0.5)
    mf = mean_field_offline(grad, torch.tensor([2.0, 2.0], dtype=torch.float64), schedule, thetas, cfg)
    for t in range(20):
        base, g = mf.phi1[t], grad(schedule[t], mf.phi1[t], t)
        sol = joint_solve(thetas[t], float(base @ base), (g @ base).tolist(), (g * g).sum(1).tolist(), cfg)
        assert sol.phi2 == pytest.approx(mf.phi2[t + 1], abs=1e-3)
        step = base - torch.as_tensor(thetas[t] * sol.eta) @ g
        torch.testing.assert_close(step, mf.phi1[t + 1], atol=1e-3, rtol=0)


def test_solver_falls_back_to_argmin_and_stays_in_range():
    cfg = FedEntSettings()
    for a, b in [(-5.0, 1e6), (3.0, 1e-9), (-1e3, 1.0)]:
        eta = solve_eta(0.2, 100.0, a, b, 100.0, cfg)
        assert 0.0 <= eta <= cfg.eta_max and math.isfinite(eta)


def test_action_map_is_log_uniform_and_inverts():
    assert rate_of(-1, 1e-4, 1.0) == pytest.approx(1e-4) and rate_of(1, 1e-4, 1.0) == pytest.approx(1.0)
    assert rate_of(0, 1e-4, 1.0) == pytest.approx(1e-2)
    np.testing.assert_allclose(rate_of(unit_of([0.003, 0.05, 0.9], 1e-4, 1.0), 1e-4, 1.0), [0.003, 0.05, 0.9])
    assert unit_of(10.0, 1e-4, 1.0) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decay[gamma=0]'s zero rates printed numpy's "divide by zero"
        assert unit_of(0.0, 1e-4, 1.0) == -1.0
        assert np.isnan(unit_of(-1.0, 1e-4, 1.0))  # not a rate: NaN, which the env refuses as an action


def _run(env, policy, seed=0, rounds=None):
    obs, _ = env.reset(seed=seed)
    infos = []
    for _ in range(rounds or env.unwrapped.rounds_per_episode):
        obs, _, _, _, info = env.step(policy.predict(obs)[0])
        infos.append(info)
    return infos


def test_decay_only_is_gamma_to_the_participations():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=8)
    infos = _run(env, DecayOnlyPolicy(env, gamma=0.9))
    u = env.unwrapped
    eta0 = u.config.scenario.lr
    np.testing.assert_allclose(u.last_lr, eta0 * 0.9 ** u.participations, rtol=1e-5)
    for info in infos:
        assert np.all(info["rates/lrs"] <= eta0 * 0.9 * (1 + 1e-5))


def test_the_cosine_schedule_anneals_the_rate_over_the_episode_by_hand():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=4, lr_min=0.01, lr_max=1.0)
    infos = _run(env, ConstantLRPolicy(env, lr=0.4, schedule="cosine"))
    expected = [0.4, 0.4 * (1 + math.cos(math.pi / 4)) / 2, 0.2, 0.4 * (1 + math.cos(3 * math.pi / 4)) / 2]
    np.testing.assert_allclose([info["rates/lrs"][0] for info in infos], expected, rtol=1e-5)
    with pytest.raises(ValueError, match="schedule='linear'"):
        ConstantLRPolicy(env, schedule="linear")


def test_the_step_schedule_multiplies_the_rate_by_gamma_every_step_size_rounds_by_hand():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=5, lr_min=0.01, lr_max=1.0)
    infos = _run(env, ConstantLRPolicy(env, lr=0.4, schedule="step", gamma=0.1, step_size=2))
    expected = [0.4, 0.4, 0.04, 0.04, 0.01]  # 0.004 in round 4, held at lr_min
    np.testing.assert_allclose([info["rates/lrs"][0] for info in infos], expected, rtol=1e-5)
    with pytest.raises(ValueError, match="gamma, step_size=\\(0.5, None\\)"):
        ConstantLRPolicy(env, schedule="cosine", gamma=0.5)
    with pytest.raises(ValueError, match="step_size=0"):
        ConstantLRPolicy(env, schedule="step", step_size=0)
    with pytest.raises(ValueError, match="gamma='abc'"):
        ConstantLRPolicy(env, schedule="step", gamma="abc")
    # 2.0 is above lr_max: it would have played lr_max under the name lr=2.0
    for bad in (-1.0, 0.0, float("nan"), "abc", 2.0, 0.001):
        with pytest.raises(ValueError, match=re.escape(f"lr={bad!r} is out of range; allowed: a float in "
                                                       "[lr_min, lr_max] = [0.01, 1] (the env's rates)")):
            ConstantLRPolicy(env, lr=bad)


def test_fedent_with_gamma_one_is_constant_lr_bit_for_bit():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=4)
    _run(env, FedEntPolicy(env, gamma=1.0))
    fedent = env.unwrapped.federation.global_models[0].clone()
    _run(env, ConstantLRPolicy(env))
    assert torch.equal(fedent, env.unwrapped.federation.global_models[0])


def test_constant_lr_is_a_standalone_fedavg_loop_and_probes_do_not_move_training():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=3)
    _run(env, ConstantLRPolicy(env), seed=7)
    cfg = RateConfig.from_kwargs(rounds_per_episode=3)
    fed, rng = standalone(cfg, 7)
    schedule = [np.sort(rng.permutation(20)[:5]) for _ in range(3)]
    for clients in schedule:  # no probe at all in this loop
        mask = np.isin(np.arange(20), clients)
        fed.run_round(RoundPlan.make(20, lr=cfg.scenario.lr, selected=mask, epochs=cfg.local_epochs))
    np.testing.assert_allclose(env.unwrapped.federation.global_models[0].numpy(),
                               fed.global_models[0].numpy(), rtol=0, atol=1e-6)


def test_the_observation_holds_what_fedent_reads():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=5)
    obs, _ = env.reset(seed=1)
    policy = FedEntPolicy(env)
    for _ in range(3):
        st = env.unwrapped.round_stats
        seen = stats_from_observation(obs, 5)
        np.testing.assert_allclose(seen["theta"], st.theta, rtol=1e-6)
        assert seen["s"] == pytest.approx(st.s, rel=1e-5)
        np.testing.assert_allclose(seen["a"], st.a, rtol=1e-4, atol=1e-6 * np.abs(st.a).max())
        np.testing.assert_allclose(seen["b"], st.b, rtol=1e-4)
        np.testing.assert_allclose(rate_of(seen["last_unit"], 1e-4, 1.0), st.last_lr, rtol=1e-5)
        exact = joint_solve(st.theta, st.s, st.a, st.b, policy.settings).eta
        recovered = joint_solve(seen["theta"], seen["s"], seen["a"], seen["b"], policy.settings).eta
        np.testing.assert_allclose(recovered, exact, atol=1e-4)
        obs, *_ = env.step(policy.predict(obs)[0])


def test_fedent_rates_are_finite_smoothed_and_logged():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=6)
    policy = FedEntPolicy(env)
    obs, _ = env.reset(seed=2)
    for _ in range(6):
        st = env.unwrapped.round_stats
        action, _ = policy.predict(obs)
        raw = policy.last.eta
        expected = 0.99 * st.last_lr + 0.01 * raw
        np.testing.assert_allclose(rate_of(action, 1e-4, 1.0), expected, rtol=1e-5)
        assert np.all((raw >= 0) & (raw <= 1)) and policy.last.iterations >= 1
        obs, _, _, _, info = env.step(action)
        assert np.all(np.isfinite(info["rates/lrs"])) and 0 <= info["rates/share_entropy"] <= 1 + 1e-9


def test_shared_mode_gives_every_client_one_rate():
    env = gym.make("FLLearningRate-v0", action_mode="shared", rounds_per_episode=2)
    assert env.action_space.shape == (1,)
    infos = _run(env, FedEntPolicy(env))
    assert len(set(np.round(infos[-1]["rates/lrs"], 12))) == 1


def test_offline_mode_runs_algorithm1_once_per_episode():
    env = gym.make("FLLearningRate-v0", rounds_per_episode=4)
    policy = FedEntPolicy(env, mode="offline")
    _run(env, policy)
    first = policy.mean_field
    assert first.phi1.shape == (5, env.unwrapped.federation.archs[0].num_params)
    assert np.all(np.isfinite(first.phi2))
    _run(env, policy, seed=1)
    assert policy.mean_field is not first


def test_bad_arguments_name_the_parameter():
    for kwargs, name in [(dict(clients_per_round=21), "clients_per_round"),
                         (dict(action_mode="global"), "action_mode"),
                         (dict(lr_max=1e-5), "lr_max"), (dict(server="fedyogi"), "server"),
                         (dict(reward="loss"), "reward"),
                         (dict(local_algorithm="scaffold"), "local_algorithm")]:
        with pytest.raises(ValueError, match=f"{name}="):
            gym.make("FLLearningRate-v0", **kwargs)
    with pytest.raises(ValueError, match="mode="):
        FedEntPolicy(gym.make("FLLearningRate-v0"), mode="lagged")


@pytest.mark.parametrize("args,said", [
    (lambda w: (np.array([0, 1]), w.numpy(), 0), "w=(.*) is out of range; allowed: a tensor of the model's"),
    (lambda w: (np.array([0, 1]), w[:3], 0), r"w=torch.Size\(\[3\]\) is out of range"),
    (lambda w: (np.array([0, 1]), w, 0.5), r"t=0.5 is out of range; allowed: a round index >= 0"),
    (lambda w: (np.array([0, 1]), w, None), "t=None"),
    (lambda w: (3, w, 0), r"clients=3 is out of range; allowed: a non-empty 1-D array"),  # no len()
    (lambda w: ({}, w, 0), "clients="),
])
def test_fedents_gradient_hook_names_a_bad_argument(args, said):
    """``client_gradients`` (FedEnt's Algorithm 1 hook) failed with a TypeError or AttributeError."""
    env = gym.make("FLLearningRate-v0").unwrapped
    env.reset(seed=0)
    w = env.federation.global_models[0]
    assert env.client_gradients(np.array([0, 1]), w, 0).shape == (2, len(w))
    with pytest.raises(ValueError, match=said):
        env.client_gradients(*args(w))


def test_policies_reading_the_env_refuse_a_batch_of_observations():
    env = gym.make("FLLearningRate-v0")
    obs, _ = env.reset(seed=0)
    policy = FedEntPolicy(env)
    assert policy.predict(obs[None])[0].shape == (1, 5)
    with pytest.raises(ValueError, match="observation has 2 rows"):
        policy.predict(np.stack([obs, obs]))


def test_fedent_warns_once_when_it_plays_a_root_that_is_not_a_minimiser(monkeypatch):
    from fl_gym.baselines import rates
    from fl_gym.baselines.fedent import Solution

    env = gym.make("FLLearningRate-v0", rounds_per_episode=3)
    obs, _ = env.reset(seed=0)
    policy = FedEntPolicy(env)
    m = len(env.unwrapped.round_stats.clients)
    monkeypatch.setattr(rates, "joint_solve", lambda *a, **k: Solution(np.full(m, 0.01), 1.0, 1,
                                                                          np.arange(m) == 0))
    with pytest.warns(RuntimeWarning, match="a root of Eq. 21 is not a minimiser of the one-round cost"):
        obs, *_ = env.step(policy.predict(obs)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second round says nothing more
        env.step(policy.predict(obs)[0])


def test_fedents_warning_is_printed_once_however_many_policies_play_such_a_root(monkeypatch):
    """An evaluation builds a policy per episode: under Python's default filter only the first warns."""
    from fl_gym.baselines import rates
    from fl_gym.baselines.fedent import Solution

    env = gym.make("FLLearningRate-v0", rounds_per_episode=3)
    env.reset(seed=0)
    m = len(env.unwrapped.round_stats.clients)
    counts = iter([1, 3, 2])  # a different count of clients that are not minimisers each time
    monkeypatch.setattr(rates, "joint_solve",
                        lambda *a, **k: Solution(np.full(m, 0.01), 1.0, 1, np.arange(m) < next(counts)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for seed in (1, 2, 3):
            obs, _ = env.reset(seed=seed)
            env.step(FedEntPolicy(env).predict(obs)[0])
    assert [str(w.message)[:40] for w in caught] == ["FedEnt (solver='foc'): a root of Eq. 21 "]
