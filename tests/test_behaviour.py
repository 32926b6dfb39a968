"""Device behaviour: the availability chain's statistics, dropout and deadline accounting by hand,
determinism, vector equivalence, masks that MaskablePPO obeys, and refusals where it is not played."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import fl_gym
from fl_gym.baselines.select import (
    ConfidentPickPolicy,
    EntropyCutPickPolicy,
    PoolSamplerPolicy,
    RandomPickPolicy,
    StalestPickPolicy,
)
from fl_gym.behaviour import (
    BehaviourConfig,
    dropout_probability,
    finished_share,
    next_availability,
    next_link,
)
from fl_gym.clock import ClockConfig, RoundLoad
from fl_gym.config import FederationConfig
from fl_gym.engine.schedule import local_steps
from fl_gym.envs.select.pools import Pools
from fl_gym.federation import Federation, first_available
from fl_gym.records import RoundPlan

PICK = "FLSelectPick-v0"


@pytest.mark.parametrize("pi,lam", [(0.3, 0.0), (0.7, 0.8), (0.5, 0.95)])
def test_the_availability_chain_has_its_stationary_share_and_autocorrelation(pi, lam):
    """2,000 chains over 400 rounds: the share on and the lag-one autocorrelation of the on/off
    indicator within five standard errors (its effective sample shrinks by (1 + lam) / (1 - lam))."""
    cfg, rng = BehaviourConfig(availability=pi, availability_persistence=lam), np.random.default_rng(0)
    on, rounds = None, []
    for _ in range(400):
        on = next_availability(on, rng.random(2_000), cfg)
        rounds.append(on)
    x = np.array(rounds, np.float64)
    n_eff = x.size * (1 - lam) / (1 + lam)
    assert x.mean() == pytest.approx(pi, abs=5 * math.sqrt(pi * (1 - pi) / n_eff))
    centred = x - x.mean()
    autocorrelation = (centred[1:] * centred[:-1]).mean() / centred.var()
    assert autocorrelation == pytest.approx(lam, abs=5 / math.sqrt(x.size))


@pytest.mark.parametrize("sigma,lam", [(0.5, 0.0), (1.0, 0.9)])
def test_link_factors_have_their_log_std_and_autocorrelation(sigma, lam):
    cfg, rng = BehaviourConfig(link_sigma=sigma, link_persistence=lam), np.random.default_rng(1)
    link, logs = None, []
    for _ in range(300):
        link = next_link(link, rng.standard_normal(2_000), cfg)
        logs.append(np.log(link))
    x = np.array(logs)
    assert x.std() == pytest.approx(sigma, rel=0.05)
    assert x.mean() == pytest.approx(0.0, abs=5 * sigma * math.sqrt((1 + lam) / (1 - lam) / x.size))
    centred = x - x.mean()
    autocorrelation = (centred[1:] * centred[:-1]).mean() / centred.var()
    assert autocorrelation == pytest.approx(lam, abs=5 / math.sqrt(x.size))


def test_a_rounds_link_factors_divide_its_communication_times_by_hand():
    """The first round's factors are exp(sigma z), z the behaviour stream's first normals."""
    from fl_gym.federation import BEHAVIOUR_STREAM

    def federation(**behaviour):
        clock = ClockConfig(bandwidth=1e6, bandwidth_heterogeneity=4.0)
        cfg = FederationConfig(num_clients=4, clock=clock, behaviour=BehaviourConfig(**behaviour))
        return Federation(cfg, 0)

    static, linked = federation(), federation(link_sigma=0.5)
    plan = RoundPlan.make(4, lr=0.05)
    still = RoundLoad.still(4)
    base = static.finish_round(static.train_round(static.open_round(load=still), plan))
    report = linked.finish_round(linked.train_round(linked.open_round(load=still), plan))
    z = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(BEHAVIOUR_STREAM,))).standard_normal(4)
    link = np.exp(0.5 * z)
    np.testing.assert_allclose(report.download_time, base.download_time / link, rtol=1e-12)
    np.testing.assert_allclose(report.upload_time, base.upload_time / link, rtol=1e-12)
    np.testing.assert_array_equal(report.train_time, base.train_time)


def test_every_row_keeps_one_client_on_the_closest_to_staying_on():
    cfg = BehaviourConfig(availability=0.1)
    u = np.array([[0.5, 0.3, 0.9], [0.05, 0.6, 0.7]])  # row 0: all above 0.1, client 1 the closest
    on = next_availability(None, u, cfg)
    np.testing.assert_array_equal(on, [[False, True, False], [True, False, False]])


def test_dropout_probability_and_the_share_finished_by_the_deadline_by_hand():
    cfg = BehaviourConfig(dropout=0.2, dropout_rate=0.1, deadline=10.0)
    np.testing.assert_allclose(dropout_probability(np.array([0.0, 10.0]), cfg), [0.2, 1 - 0.8 * math.exp(-1)])
    # fixed 2 s and training 4 s: fits; 8 s of the 16 s: a half; fixed past the deadline: nothing
    share = finished_share(np.array([2.0, 2.0, 11.0]), np.array([4.0, 16.0, 1.0]), cfg)
    np.testing.assert_allclose(share, [1.0, 0.5, 0.0])


def _three_clients(**behaviour) -> Federation:
    """Three equal-speed clients, no load noise, one model of cost 1: training takes 1 ms per sample-epoch."""
    clock = ClockConfig(heterogeneity=1.0, sigma_dyn=0.0, sigma_drift=0.0)
    cfg = FederationConfig(num_clients=3, clock=clock, model_costs=(1.0,),
                           behaviour=BehaviourConfig(**behaviour))
    return Federation(cfg, scenario_seed=0)


@pytest.mark.parametrize("late", ["drop", "partial"])
def test_a_deadline_loses_or_cuts_the_late_clients_by_hand(late):
    fed = _three_clients(deadline=1.0, late=late)
    order = np.argsort(fed.sizes)
    deadline = 1e-3 * 2 * fed.sizes[order[1]]  # two epochs: the middle client just fits, the largest does not
    fed = _three_clients(deadline=float(deadline), late=late)
    plan = RoundPlan.make(3, lr=0.05, epochs=2.0)
    trained = fed.train_round(fed.open_round(load=RoundLoad.still(3)), plan)
    steps = local_steps(fed.sizes, plan.epochs, fed.config.batch_size)
    big = order[2]
    train = 1e-3 * 2 * fed.sizes
    expected_lost = np.zeros(3, bool)
    expected_steps = steps.copy()
    if late == "drop":
        expected_lost[big], expected_steps[big] = True, 0
    else:
        expected_steps[big] = math.floor(steps[big] * deadline / train[big])
        assert 0 < expected_steps[big] < steps[big]
    np.testing.assert_array_equal(trained.lost, expected_lost)
    np.testing.assert_array_equal(trained.partial, ~expected_lost & (expected_steps < steps))
    np.testing.assert_array_equal(trained.steps, expected_steps)
    before = fed.global_models[0].clone()
    report = fed.finish_round(trained)
    np.testing.assert_array_equal(report.aggregated, ~expected_lost)
    assert report.round_time == pytest.approx(deadline)  # the server waited until the deadline
    assert report.client_time.max() <= deadline
    if late == "partial":  # the clock charged the share of training it finished
        share = expected_steps[big] / steps[big]
        assert report.train_time[big] == pytest.approx(train[big] * share)
        assert report.epochs[big] == pytest.approx(2.0 * share)
    assert not np.array_equal(before.numpy(), fed.global_models[0].numpy())


def test_a_round_whose_every_update_is_lost_leaves_the_model_and_uploads_nothing():
    fed = _three_clients(dropout_rate=1e12)  # any time in the round: certain dropout
    before = fed.global_models[0].clone()
    report = fed.run_round(RoundPlan.make(3, lr=0.05))
    assert report.lost.all() and not report.aggregated.any()
    assert report.upload_bytes == 0.0
    np.testing.assert_array_equal(before.numpy(), fed.global_models[0].numpy())


def test_behaviour_off_draws_nothing_and_loses_nothing():
    fed = Federation(FederationConfig(num_clients=4), scenario_seed=0)
    report = fed.run_round(RoundPlan.make(4, lr=0.05))
    assert not report.lost.any() and not report.partial.any() and report.selected.all()
    assert not FederationConfig().behaviour.active


def test_unavailable_clients_are_never_candidates():
    fed = _three_clients(availability=0.4)
    for _ in range(20):
        opened = fed.open_round(2)
        assert 1 <= opened.candidates.sum() <= 2
        everyone = fed.open_round()
        assert everyone.candidates.any()
    with pytest.raises(ValueError, match="unavailable"):
        for _ in range(50):  # some round leaves client 0 unreachable
            fed.open_round(np.array([True, False, False]))


def test_an_unreachable_client_cannot_be_trained():
    fed = _three_clients(availability=0.3)
    opened = next(o for o in iter(fed.open_round, None) if not o.candidates.all())
    with pytest.raises(ValueError, match="plan.selected"):
        fed.train_round(opened, RoundPlan.make(3, lr=0.05))


def test_pools_draw_among_the_available_and_alike_when_all_are():
    pools, available = Pools(6), np.array([True, False, True, False, True, True])
    for seed in range(10):
        drawn = pools.draw(3, np.random.default_rng(seed), available).candidates
        assert drawn.sum() == 3 and not (drawn & ~available).any()
        alike = pools.draw(3, np.random.default_rng(seed), np.ones(6, bool)).candidates
        np.testing.assert_array_equal(alike, pools.draw(3, np.random.default_rng(seed)).candidates)
    assert pools.draw(5, np.random.default_rng(0), available).candidates.sum() == 4


BEHAVING = dict(availability=0.6, availability_persistence=0.7, dropout=0.1, dropout_rate=50.0,
                deadline=0.01, late="partial", link_sigma=0.5, link_persistence=0.5, bandwidth=5e7,
                rounds_per_episode=4)


def _episode(env: gym.Env, seed: int) -> list:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [obs]
    for _ in range(4):
        obs, reward, *_, info = env.step(env.action_space.sample())
        out.append((obs, reward, info["select/lost"].tolist(), info["select/partial"].tolist(),
                    info["select/unavailable_picks"], info["clients"].tolist()))
    return out


def test_a_behaving_pick_episode_is_reproducible_and_shows_what_was_lost():
    env = gym.make(PICK, **BEHAVING)
    first, second = _episode(env, 3), _episode(env, 3)
    for a, b in zip(first[1:], second[1:], strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:] == b[1:]
    np.testing.assert_array_equal(first[0], second[0])
    steps = first[1:]
    assert any(s[2] for s in steps) and any(s[3] for s in steps) and any(s[4] for s in steps)


def test_the_pick_observation_shows_reachability_and_arrivals_and_masks_follow_it():
    env = gym.make(PICK, **BEHAVING)
    obs, _ = env.reset(seed=0)
    inner = env.unwrapped
    layout = inner.layout
    assert env.observation_space.shape == (layout.num_clients * (layout.num_classes + 9) + 6,)
    picked, arrived = np.zeros(layout.num_clients), np.zeros(layout.num_clients)
    for _ in range(3):
        available = inner.pending.candidates
        np.testing.assert_array_equal(layout.available(obs), available)
        np.testing.assert_array_equal(inner.action_masks().reshape(-1, 2), np.stack(
            [np.ones_like(available), available], axis=1))
        obs, _, _, _, info = env.step(env.action_space.sample())
        picked[info["clients"]] += 1
        arrived[np.setdiff1d(info["clients"], info["select/lost"])] += 1
    reliability = layout.column(obs, "reliability")
    expected = np.divide(arrived, picked, out=np.ones(layout.num_clients), where=picked > 0)
    np.testing.assert_allclose(reliability, expected, rtol=1e-6)
    assert (reliability < 1).any()


def test_scores_pick_the_best_reachable_clients():
    env = gym.make(PICK, pick_action="scores", availability=0.5, rounds_per_episode=4)
    env.reset(seed=1)
    inner = env.unwrapped
    available = inner.pending.candidates
    scores = np.linspace(1, -1, inner.federation.num_clients).astype(np.float32)
    info = env.step(scores)[4]
    expected = np.flatnonzero(available)[: inner.m]
    np.testing.assert_array_equal(info["clients"], expected)
    assert info["select/unavailable_picks"] == 0


@pytest.mark.parametrize("policy", [RandomPickPolicy, PoolSamplerPolicy, StalestPickPolicy,
                                    ConfidentPickPolicy, EntropyCutPickPolicy])
def test_the_pick_policies_pick_only_reachable_clients(policy):
    env = gym.make(PICK, **{**BEHAVING, "availability": 0.3})
    rule = policy(env)
    obs, _ = env.reset(seed=2)
    for _ in range(4):
        available = env.unwrapped.pending.candidates
        action = rule.predict(obs)[0]
        obs, _, _, _, info = env.step(action)
        assert info["select/unavailable_picks"] == 0 and not info["select/fallback"]
        assert available[info["clients"]].all()
        assert len(info["clients"]) == min(env.unwrapped.m, available.sum())


@pytest.mark.parametrize("env_id,lost,fednova", [(PICK, "select/lost", False),
                                                 ("FLSelect-v0", "select/lost", True),
                                                 ("FLAggregate-v0", "aggregate/lost", False),
                                                 ("FLSelectQueue-v0", "select/lost", True)])
def test_copies_with_behaviour_play_their_standalone_episodes(env_id, lost, fednova):
    n, kwargs = 3, {**BEHAVING, "fednova": fednova}
    vec = fl_gym.make_vec(env_id, n, seed=5, monitor=False, **kwargs)
    solo = [gym.make(env_id, **kwargs) for _ in range(n)]
    obs = vec.reset()
    for i, env in enumerate(solo):
        np.testing.assert_allclose(obs[i], env.reset(seed=5 + i)[0], rtol=0, atol=1e-5)
    vec.action_space.seed(0)
    seen_lost = False
    for _ in range(5):
        actions = np.stack([vec.action_space.sample() for _ in range(n)])
        obs, rewards, dones, infos = vec.step(actions)
        for i, env in enumerate(solo):
            o, r, terminated, truncated, info = env.step(actions[i])
            np.testing.assert_array_equal(infos[i][lost], info[lost])
            seen_lost |= len(info[lost]) > 0
            if dones[i]:
                o, _ = env.reset()
            np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-5)
            assert rewards[i] == pytest.approx(r, abs=1e-5)
    assert seen_lost
    vec.close()


def test_select_candidates_are_drawn_among_the_reachable_and_lost_rows_show_no_data():
    env = gym.make("FLSelect-v0", **{**BEHAVING, "availability": 0.15})
    obs, _ = env.reset(seed=1)
    inner = env.unwrapped
    short = lost_rows = False
    for _ in range(4):
        slots, available = inner.candidate_ids, inner.pending.trained.opened.candidates
        assert available[slots].all()
        soft, sizes = inner.layout.rows(obs)
        arrived = sizes > 0  # a lost update's row, and a row past the candidates, show no data
        short |= len(slots) < inner.m
        lost_rows |= not arrived[: len(slots)].all()
        assert not arrived[len(slots):].any() and (soft[~arrived] == 0).all()
        obs, _, _, _, info = env.step(np.ones(inner.m, np.int8))
        np.testing.assert_array_equal(info["clients"], slots)
        np.testing.assert_array_equal(info["select/kept"], slots[arrived[: len(slots)]])  # lost: not kept
        np.testing.assert_array_equal(info["select/lost"], slots[~arrived[: len(slots)]])
    assert short and lost_rows


@pytest.mark.parametrize("env_id", ["FLHetero-v0", "FLLearningRate-v0"])
def test_families_that_do_not_play_behaviour_refuse_it_by_name(env_id):
    with pytest.raises(ValueError, match="deadline=5.0 is out of range; allowed: inf"):
        gym.make(env_id, deadline=5.0)


@pytest.mark.parametrize("kwargs,name", [({"availability": 0.0}, "availability"),
                                         ({"availability_persistence": 1.0}, "availability_persistence"),
                                         ({"dropout": 1.0}, "dropout"),
                                         ({"dropout_rate": -1.0}, "dropout_rate"),
                                         ({"deadline": 0.0}, "deadline"), ({"late": "wait"}, "late")])
def test_bad_behaviour_settings_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}="):
        BehaviourConfig(**kwargs)
    with pytest.raises(ValueError, match=f"{name}="):
        gym.make(PICK, **kwargs)


@pytest.mark.parametrize("kwargs,name", [({"link_sigma": -0.1}, "link_sigma"),
                                         ({"link_sigma": 6.0}, "link_sigma"),
                                         ({"link_persistence": 1.0}, "link_persistence")])
def test_bad_link_settings_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}="):
        BehaviourConfig(**kwargs)


def test_queue_rows_say_which_updates_arrived_and_ddfl_ranks_only_those():
    from fl_gym.baselines.select import TopLambdaEntropyPolicy

    env = gym.make("FLSelectQueue-v0", **BEHAVING)
    obs, _ = env.reset(seed=0)
    layout, lost_seen = env.unwrapped.layout, False
    policy = TopLambdaEntropyPolicy(env, lam=0.5)
    for _ in range(4):
        arrived = layout.arrived(obs)
        np.testing.assert_array_equal(arrived, env.unwrapped.pending.trained.steps > 0)
        action = policy.predict(obs)[0].astype(bool)
        assert not (action & ~arrived).any() and action.sum() == max(1, int(0.5 * arrived.sum()))
        entropy = layout.column(obs, "entropy")
        assert entropy[action].min() >= entropy[arrived & ~action].max(initial=-1.0)
        obs, _, _, _, info = env.step(np.ones(layout.num_clients, np.int8))
        np.testing.assert_array_equal(info["select/kept"], np.flatnonzero(arrived))  # lost: never aggregated
        lost_seen |= len(info["select/lost"]) > 0
    assert lost_seen


def test_jain_fairness_by_hand_and_the_lost_updates_add_up():
    from fl_gym.envs.select.env import jain_index

    assert jain_index(np.array([2.0, 2.0, 2.0])) == 1.0
    assert jain_index(np.array([4.0, 0.0, 0.0, 0.0])) == 0.25  # one client of four: 1 / N
    assert jain_index(np.array([1.0, 3.0])) == pytest.approx(16 / (2 * 10))
    env = gym.make(PICK, **BEHAVING)
    env.reset(seed=4)
    lost, picks = 0, np.zeros(env.unwrapped.federation.num_clients)
    for _ in range(4):
        info = env.step(env.action_space.sample())[4]
        lost += len(info["select/lost"])
        picks[info["clients"]] += 1
        assert info["select/cum_lost"] == lost
        assert info["select/fairness"] == pytest.approx(jain_index(picks))


def test_evaluation_gives_a_maskable_agent_the_envs_masks():
    """An untrained MaskablePPO sets about half its bits: unmasked, it would pick unreachable clients."""
    from sb3_contrib import MaskablePPO

    from fl_gym.training.evaluation import evaluate

    kwargs = dict(availability=0.4, rounds_per_episode=3)
    model = MaskablePPO("MlpPolicy", fl_gym.make_vec(PICK, 1, seed=0, **kwargs), seed=0)
    episodes = evaluate(lambda: gym.make(PICK, **kwargs), lambda env: model, seeds=[7, 8])
    picks = [r["select/unavailable_picks"] for e in episodes for r in e.rounds]
    assert len(picks) == 6 and picks == [0] * 6


def test_the_time_reward_charges_each_round_its_time_over_the_deadline():
    kwargs = {**BEHAVING, "rounds_per_episode": 3}
    free, timed = gym.make(PICK, **kwargs), gym.make(PICK, lambda_time=2.0, **kwargs)
    free.reset(seed=0)
    timed.reset(seed=0)
    for _ in range(3):
        action = np.ones(20, np.int8)
        _, r_free, *_, info = free.step(action)
        _, r_timed, *_, info_timed = timed.step(action)
        assert info_timed["reward_terms"]["time"] == pytest.approx(info["round_time"] / BEHAVING["deadline"])
        assert r_timed == pytest.approx(r_free - 2.0 / 3 * info["round_time"] / BEHAVING["deadline"])
    with pytest.raises(ValueError, match="lambda_time=-1.0 is out of range"):
        gym.make(PICK, lambda_time=-1.0)


@pytest.mark.parametrize("share", [1.0, 0.7, 0.05, 0.0])
def test_first_available_takes_the_first_k_available_in_order_as_a_whole_scan_does(share):
    rng = np.random.default_rng(3)
    for k_all, k in ((10_000, 100), (50, 5), (20, 20), (7, 1)):
        order, available = rng.permutation(k_all), rng.random(k_all) < share
        assert first_available(order, available, k).tolist() == order[available[order]][:k].tolist()


@pytest.mark.parametrize("fednova", [False, True])
def test_fednova_averages_updates_normalised_by_the_steps_a_cut_client_ran_by_hand(fednova):
    fed = _three_clients(deadline=1.0)
    deadline = float(1e-3 * 2 * np.sort(fed.sizes)[1])  # two epochs: the largest client is cut short
    fed = _three_clients(deadline=deadline, late="partial", fednova=fednova)
    trained = fed.train_round(fed.open_round(load=RoundLoad.still(3)), RoundPlan.make(3, lr=0.05, epochs=2.0))
    member = trained.cohort.members[0]
    clients, rows = trained.cohort.clients(member), member.stack.rows().double().clone()
    start = fed.global_models[0].double().clone()
    tau = trained.steps[clients].astype(np.float64)
    assert trained.partial.any() and len(set(tau)) > 1  # uneven steps
    p = fed.sizes[clients] / fed.sizes[clients].sum()
    plain = torch.as_tensor(p) @ rows
    nova = start + float(p @ tau) * (torch.as_tensor(p / tau) @ (rows - start))  # FedNova, by hand
    fed.finish_round(trained)
    expected, other = (nova, plain) if fednova else (plain, nova)
    torch.testing.assert_close(fed.global_models[0].double(), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(fed.global_models[0].double(), other, rtol=1e-5, atol=1e-6)


def test_fednova_with_even_steps_is_the_plain_average():
    fed = _three_clients(fednova=True)
    batches = np.ceil(fed.sizes / fed.config.batch_size)
    plan = RoundPlan.make(3, lr=0.05, epochs=12 / batches)  # 12 local steps each
    trained = fed.train_round(fed.open_round(load=RoundLoad.still(3)), plan)
    member = trained.cohort.members[0]
    clients, rows = trained.cohort.clients(member), member.stack.rows().double().clone()
    assert trained.steps.tolist() == [12, 12, 12]
    p = fed.sizes[clients] / fed.sizes[clients].sum()
    fed.finish_round(trained)
    torch.testing.assert_close(fed.global_models[0].double(), torch.as_tensor(p) @ rows, rtol=1e-5, atol=1e-6)
