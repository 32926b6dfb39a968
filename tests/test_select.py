"""FedEntropy's judgement, pools and the selection env (spec fedentropy.md section 9)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fl_gym  # noqa: F401
from fl_gym import Federation, RoundPlan
from fl_gym.baselines.select import MaxEntropyJudgePolicy, SelectAllPolicy
from fl_gym.envs.select import Pools, SelectConfig, entropy, judge, leave_one_out_gain, mixture
from fl_gym.envs.select.entropy import exhaustive_max_entropy

EQ = lambda n: np.ones(n)  # noqa: E731


def test_entropy_values():
    assert entropy(np.full(10, 0.1)) == pytest.approx(math.log(10))
    assert entropy(np.eye(10)[3]) == 0.0


def test_tie_break_removes_the_first_best():
    p = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    assert entropy(mixture(p, EQ(4))) == pytest.approx(1.039721, abs=1e-6)
    assert judge(p, EQ(4)) == ([1, 2, 3], [0])


def test_clear_winner_and_leave_one_out():
    p = np.array([[.8, .1, .1], [.7, .2, .1], [.1, .8, .1], [.1, .1, .8]])
    whole = entropy(mixture(p, EQ(4)))
    np.testing.assert_allclose(leave_one_out_gain(p, EQ(4)) + whole, [1.095273, 1.098612, 0.970116, 0.933394],
                               atol=1e-6)
    kept, removed = judge(p, EQ(4))
    assert removed == [1] and entropy(mixture(p, EQ(4), kept)) == pytest.approx(math.log(3))


def test_size_weighting_changes_the_verdict():
    p = np.array([[.9, .1], [.2, .8], [.6, .4]])
    assert judge(p, np.array([100, 100, 100]))[1] == [2]
    assert judge(p, np.array([400, 100, 100])) == ([1, 2], [0])


def test_ideal_one_class_labels():
    p = np.eye(10)[[0, 0, 0, 1, 1, 2, 3, 4, 5, 6]]
    assert entropy(mixture(p, EQ(10))) == pytest.approx(1.834372, abs=1e-6)
    kept, removed = judge(p, EQ(10))
    assert removed == [0, 1, 3] and entropy(mixture(p, EQ(10), kept)) == pytest.approx(math.log(7))
    assert judge(np.eye(3)[[0, 0, 1, 1, 2]], EQ(5))[1] == []  # a local optimum: no single removal helps


def test_greedy_is_not_exhaustive():
    p = np.array([[0, .8, .2], [.1, 0, .9], [0, .2, .8], [.1, .4, .5]])
    whole = entropy(mixture(p, EQ(4)))
    np.testing.assert_allclose(leave_one_out_gain(p, EQ(4)) + whole, [0.729871, 0.815612, 0.882311, 0.768858],
                               atol=1e-6)
    kept, removed = judge(p, EQ(4))
    assert (kept, removed) == ([0, 1, 3], [2])
    assert entropy(mixture(p, EQ(4), kept)) == pytest.approx(0.882311, abs=1e-6)
    assert exhaustive_max_entropy(p, EQ(4)) == [3]
    assert entropy(mixture(p, EQ(4), [3])) == pytest.approx(0.943348, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 8), c=st.integers(2, 6), seed=st.integers(0, 10**6))
def test_judge_properties(m, c, seed):
    rng = np.random.default_rng(seed)
    p, sizes = rng.dirichlet(np.full(c, 0.5), m), rng.integers(1, 100, m)
    kept, removed = judge(p, sizes)
    assert sorted(kept + removed) == list(range(m)) and len(kept) >= 1
    assert entropy(mixture(p, sizes, kept)) >= entropy(mixture(p, sizes)) - 1e-12
    if len(kept) > 1:
        gains = leave_one_out_gain(p[kept], sizes[kept])
        assert gains.max() <= 1e-12
    assert judge(np.tile(p[:1], (m, 1)), sizes)[1] == []  # identical soft labels: nobody removed


def test_pools_partition_and_branch_frequency():
    pools, rng = Pools(20, 0.8), np.random.default_rng(0)
    branches = []
    for _ in range(10_000):
        draw = pools.draw(5, rng)
        assert draw.candidates.sum() == 5
        branches.append(draw.positive_branch)
        ids = np.flatnonzero(draw.candidates)
        verdict = rng.random(5) < 0.7
        pools.update(ids[verdict], ids[~verdict])
        assert np.all(pools.negative[ids] == ~verdict)  # a client's pool is its last verdict
    assert abs(np.mean(branches) - 0.8) < 0.01


def test_an_undersized_primary_pool_is_topped_up():
    pools = Pools(6, p_positive=0.0)  # always the negative pool first
    pools.update(np.arange(4), np.array([4, 5]))
    draw = pools.draw(4, np.random.default_rng(1))
    assert draw.candidates[[4, 5]].all() and draw.candidates.sum() == 4 and not draw.positive_branch


def test_ideal_case1_upload_rate_matches_the_spec_monte_carlo():
    """Spec 9.11: N=100 one-class clients (10 per class), m=10: mean |A| ~ 7.84."""
    rng = np.random.default_rng(0)
    classes = np.repeat(np.arange(10), 10)
    kept = [len(judge(np.eye(10)[classes[rng.choice(100, 10, replace=False)]], EQ(10))[0]) for _ in range(1500)]
    assert np.mean(kept) == pytest.approx(7.84, abs=0.1)


def test_config_presets_and_errors():
    cfg = SelectConfig()
    assert (cfg.clients_per_round, cfg.scenario.num_clients, cfg.scenario.rounds_per_episode) == (5, 20, 30)
    paper = SelectConfig(preset="paper")
    assert (paper.scenario.dataset, paper.scenario.partition, paper.model) == ("cifar10", "classes", "fedentropy-lenet")
    with pytest.raises(ValueError, match="action_encoding='discrete'"):
        gym.make("FLSelect-v0", clients_per_round=13, action_encoding="discrete")
    with pytest.raises(ValueError, match="sampler='value'"):
        gym.make("FLSelect-v0", sampler="value")


def test_observation_rows_carry_what_the_judgement_needs():
    env = gym.make("FLSelect-v0")
    obs, _ = env.reset(seed=0)
    layout = env.unwrapped.layout
    soft, sizes = layout.rows(obs)
    np.testing.assert_allclose(soft.sum(1), 1.0, atol=1e-5)
    pending = env.unwrapped._pending
    true_sizes = env.unwrapped.federation.sizes[pending.slots]
    np.testing.assert_allclose(sizes / sizes.min(), true_sizes / true_sizes.min())  # ratios exact
    policy = MaxEntropyJudgePolicy(env)
    expected = np.zeros(5, bool)
    expected[judge(pending.soft_labels, true_sizes)[0]] = True
    assert np.array_equal(policy.predict(obs)[0].astype(bool), expected)


def test_repair_keeps_the_largest_candidate_and_is_penalised():
    env = gym.make("FLSelect-v0", rounds_per_episode=2)
    env.reset(seed=1)
    slots = env.unwrapped._pending.slots
    largest = slots[np.argmax(env.unwrapped.federation.sizes[slots])]
    _, reward, _, _, info = env.step(np.zeros(5, np.int8))
    assert info["select/repaired"] and info["select/kept"].tolist() == [largest]
    assert info["reward_terms"]["repaired"] == 1.0
    terms = info["reward_terms"]
    assert reward == pytest.approx(terms["acc_gain"] - 0.05 / 2 * terms["uplink"] - 0.01)


def test_discrete_encoding_round_trips():
    env = gym.make("FLSelect-v0", action_encoding="discrete")
    layout = env.unwrapped.layout
    for mask in (np.array([1, 0, 0, 0, 0], bool), np.ones(5, bool), np.array([0, 1, 0, 1, 1], bool)):
        action = layout.encode(mask)
        assert env.action_space.contains(action) and np.array_equal(layout.decode(action), mask)


def test_communication_accounting():
    env = gym.make("FLSelect-v0", rounds_per_episode=3)
    env.reset(seed=2)
    bytes_per_model = env.unwrapped.federation.model_bytes[0]
    total = 0.0
    for action in (np.ones(5, np.int8), np.array([1, 0, 1, 0, 0], np.int8)):
        *_, info = env.step(action)
        assert info["select/uplink_models"] == action.sum()
        assert info["select/uplink_bytes"] == action.sum() * bytes_per_model
        assert info["select/soft_label_bytes"] == 5 * (4 * 10 + 4)
        total += info["select/uplink_bytes"] + info["select/soft_label_bytes"]
        assert info["select/cum_uplink_bytes"] == pytest.approx(total)
    assert info["uploads"] == 7


def test_select_all_reproduces_a_standalone_fedavg_loop():
    """Spec 9.10: on the uniform sampler, SelectAll is FedAvg over the federation's phases, bit for bit."""
    from gymnasium.utils.seeding import np_random

    env = gym.make("FLSelect-v0", sampler="uniform", rounds_per_episode=3)
    obs, _ = env.reset(seed=5)
    policy = SelectAllPolicy(env)
    accs = []
    for _ in range(3):
        obs, _, _, _, info = env.step(policy.predict(obs)[0])
        accs.append(info["accuracy"])
    cfg = SelectConfig.from_kwargs(sampler="uniform", rounds_per_episode=3)
    fed = Federation(cfg.federation_config(), scenario_seed=0)
    rng, _ = np_random(5)
    fed.reset(seed=int(rng.integers(2**63 - 1)), sampler=rng)
    ours = []
    for _ in range(3):
        mask = np.zeros(20, bool)
        mask[rng.choice(20, 5, replace=False)] = True
        plan = RoundPlan.make(20, lr=cfg.scenario.lr, selected=mask, epochs=cfg.local_epochs)
        ours.append(fed.finish_round(fed.train_round(fed.open_round(mask), plan)).accuracy)
    assert accs == ours


def test_fedentropy_uploads_less_than_fedavg():
    def run(policy_cls, sampler):
        env = gym.make("FLSelect-v0", sampler=sampler, rounds_per_episode=10)
        obs, _ = env.reset(seed=3)
        policy = policy_cls(env)
        for _ in range(10):
            obs, _, _, _, info = env.step(policy.predict(obs)[0])
        return info
    fedavg, fedentropy = run(SelectAllPolicy, "uniform"), run(MaxEntropyJudgePolicy, "pools")
    assert fedentropy["uploads"] < fedavg["uploads"] == 50
    assert fedentropy["accuracy"] > 0.5 and fedavg["accuracy"] > 0.5


def test_scaffold_variant_counts_two_uploads_per_kept_client():
    env = gym.make("FLSelect-v0", local_algorithm="scaffold", rounds_per_episode=2)
    env.reset(seed=0)
    *_, info = env.step(np.array([1, 1, 0, 0, 1], np.int8))
    assert info["select/uplink_models"] == 6
    assert info["select/uplink_bytes"] == 6 * env.unwrapped.federation.model_bytes[0]


def test_pick_env_fallback_trim_and_memory():
    env = gym.make("FLSelectPick-v0", rounds_per_episode=4)
    obs, _ = env.reset(seed=0)
    layout = env.unwrapped.layout
    assert np.all(layout.column(obs, "seen") == 0) and np.all(layout.column(obs, "staleness") == 1)
    obs, _, _, _, info = env.step(np.zeros(20, np.int8))  # nobody picked: FedEntropy's pool draw
    assert info["select/fallback"] and len(info["clients"]) == 5 and not info["select/trimmed"]
    trained = info["clients"]
    assert np.all(layout.column(obs, "seen")[trained] == 1)
    np.testing.assert_allclose(layout.rows(obs)[trained, :10].sum(1), 1.0, atol=1e-5)  # their soft labels
    assert np.all(layout.column(obs, "staleness")[trained] == pytest.approx(1 / 4))
    _, reward, _, _, info = env.step(np.ones(20, np.int8))  # everyone picked: m of them, penalised
    assert info["select/trimmed"] and len(info["clients"]) == 5 and info["reward_terms"]["repaired"] == 1.0
    assert env.unwrapped.action_masks().shape == (40,)


def test_stalest_policy_visits_every_client_in_n_over_m_rounds():
    env = gym.make("FLSelectPick-v0", rounds_per_episode=4, post_filter="all")
    from fl_gym.baselines.select import StalestPickPolicy

    obs, _ = env.reset(seed=1)
    policy, seen = StalestPickPolicy(env), set()
    for _ in range(4):
        obs, _, _, _, info = env.step(policy.predict(obs)[0])
        seen |= set(info["clients"].tolist())
        assert info["select/kept"].tolist() == info["clients"].tolist()  # post_filter="all"
    assert seen == set(range(20))


def test_favor_reward():
    env = gym.make("FLSelectPick-v0", reward="favor", target_accuracy=0.8, rounds_per_episode=2)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(20, np.int8))
    assert reward == pytest.approx(64.0 ** (info["select/val_accuracy"] - 0.8) - 1.0)
    with pytest.raises(ValueError, match="reward='speed'"):
        gym.make("FLSelectPick-v0", reward="speed")
    with pytest.raises(ValueError, match="argument 'post_filter' is not accepted"):
        gym.make("FLSelect-v0", post_filter="all")  # a pick-env argument on the other env: rejected
