"""FedCS, power-of-choice and Oort on hand-made pick observations, and their refusal without system rows."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import fl_gym  # noqa: F401  (registers the ids)
from fl_gym.baselines.system_aware import FedCSPickPolicy, OortPickPolicy, PowerOfChoicePickPolicy
from fl_gym.envs.select.spaces import GLOBAL

HORIZON = 10


def _env(**kwargs) -> gym.Env:
    """Four clients, two per round, ten rounds, rows with the system columns."""
    env = gym.make("FLSelectPick-v0", num_clients=4, clients_per_round=2, system_rows=True, post_filter="all",
                   rounds_per_episode=HORIZON, **kwargs)
    env.reset(seed=0)
    return env


def _observation(env: gym.Env, round_: int = 1, **columns: list[float]) -> np.ndarray:
    """An observation of round ``round_`` (1-based) whose rows hold ``columns`` (zeros elsewhere)."""
    layout = env.unwrapped.layout
    rows = np.zeros((layout.num_clients, layout.row_width))
    columns.setdefault("available", [1.0] * layout.num_clients)
    for name, values in columns.items():
        rows[:, layout.num_classes + layout.extras.index(name)] = values
    globals_ = np.zeros(len(GLOBAL))
    globals_[GLOBAL.index("progress")] = (round_ - 1) / HORIZON
    return np.concatenate([rows.ravel(), globals_]).astype(np.float32)


def _picked(policy, obs: np.ndarray) -> list[int]:
    return np.flatnonzero(policy.predict(obs)[0]).tolist()


def _x(t_over_T: list[float]) -> list[float]:
    """The duration column of reported times ``t / T``."""
    return [r / (r + 1.0) for r in t_over_T]


def test_fedcs_picks_the_fastest_reachable_clients_that_fit_the_deadline():
    env = _env(deadline=1.0)
    policy = FedCSPickPolicy(env)
    # times 0.5, 0.2, 1.5 and 0.1 deadlines; client 3 is unreachable; client 2 does not fit
    obs = _observation(env, duration=_x([0.5, 0.2, 1.5, 0.1]), available=[1, 1, 1, 0])
    assert _picked(policy, obs) == [0, 1]
    one_fits = _observation(env, duration=_x([1.5, 0.2, 1.5, 0.1]), available=[1, 1, 1, 0])
    assert _picked(policy, one_fits) == [1]
    none_fits = _observation(env, duration=_x([1.5, 1.2, 3.0, 0.1]), available=[1, 1, 1, 0])
    assert _picked(policy, none_fits) == [1]  # the fastest one all the same


def test_fedcs_without_a_deadline_picks_the_m_fastest():
    env = _env()
    obs = _observation(env, duration=_x([0.5, 3.0, 1.5, 0.1]))
    assert _picked(FedCSPickPolicy(env), obs) == [0, 3]


def test_power_of_choice_picks_the_highest_last_loss_among_its_candidates_unseen_first():
    env = _env()
    policy = PowerOfChoicePickPolicy(env, d=4)  # d = every client: the draw decides nothing
    obs = _observation(env, loss=[0.3, 0.9, 0.5, 0.0], seen=[1, 1, 1, 0], size=[0.5] * 4)
    assert _picked(policy, obs) == [1, 3]
    seen = _observation(env, loss=[0.3, 0.9, 0.5, 0.1], seen=[1, 1, 1, 1], size=[0.5] * 4,
                        available=[1, 0, 1, 1])
    assert _picked(policy, seen) == [0, 2]


def test_power_of_choice_draws_candidates_in_proportion_to_size():
    env = _env()
    policy = PowerOfChoicePickPolicy(env, d=2)
    obs = _observation(env, loss=[0.9, 0.1, 0.1, 0.1], seen=[1] * 4, size=[0.7, 0.1, 0.1, 0.1])
    # client 0 (highest loss) is picked whenever it is a candidate; two successive size-weighted draws
    # miss it with probability sum_i p_i (1 - p_0 - p_i) / (1 - p_i) = 3 * 0.1 * 0.2 / 0.9
    share = np.mean([0 in _picked(policy, obs) for _ in range(2000)])
    assert share == pytest.approx(1 - 3 * 0.1 * 0.2 / 0.9, abs=0.02)


def test_oort_utility_by_hand():
    env = _env(deadline=1.0)
    policy = OortPickPolicy(env)
    # round 5: client 0 last trained 2 rounds ago, client 1 one round ago, past the deadline (t = 2T)
    obs = _observation(env, round_=5, size=[0.5, 0.25, 0.0, 0.0], loss=[0.6, 0.8, 0.0, 0.0],
                       staleness=[0.2, 0.1, 1.0, 1.0], duration=_x([0.5, 2.0, 0.5, 0.5]))
    utility = policy.utility(obs)
    bonus = lambda last: math.sqrt(0.1 * math.log(5) / last)  # noqa: E731
    assert utility[0] == pytest.approx(0.5 * 0.6 + bonus(3), rel=1e-5)
    assert utility[1] == pytest.approx((0.25 * 0.8 + bonus(4)) * (1 / 2.0) ** 2, rel=1e-5)


def test_oort_exploits_the_best_utilities_and_explores_unseen_clients():
    env = _env(deadline=1.0)
    exploit = OortPickPolicy(env, epsilon=0.2, min_epsilon=0.2, cutoff=1.0)
    # round 9: epsilon 0.2 of two slots rounds to none; all seen; losses 0.4 > 0.3 > 0.2 > 0.1, equal bonus
    obs = _observation(env, round_=9, size=[1.0] * 4, loss=[0.1, 0.4, 0.2, 0.3], seen=[1] * 4,
                       staleness=[0.1] * 4, duration=_x([0.5] * 4))
    assert _picked(exploit, obs) == [1, 3]
    # round 1: nobody is seen yet: both slots explore the reachable clients
    fresh = _observation(env, round_=1, duration=_x([0.5] * 4), available=[1, 0, 1, 1])
    picks = _picked(OortPickPolicy(env), fresh)
    assert len(picks) == 2 and 1 not in picks


def test_oort_explores_faster_unseen_clients_more_often():
    env = _env()
    policy = OortPickPolicy(env)
    obs = _observation(env, round_=1, duration=_x([0.1, 10.0, 10.0, 10.0]))
    share = np.mean([0 in _picked(policy, obs) for _ in range(500)])
    assert share > 0.95  # speed 10 against 0.1: client 0 is nearly always one of the two


@pytest.mark.parametrize("policy", [FedCSPickPolicy, PowerOfChoicePickPolicy, OortPickPolicy])
def test_system_aware_policies_refuse_an_env_without_system_rows(policy):
    with pytest.raises(ValueError, match="system_rows=False is out of range"):
        policy(gym.make("FLSelectPick-v0"))
