"""Random combinations of the envs' arguments: refused by our checks when built, or played in the spaces.

Each registered id takes dozens of arguments, and the bugs that hand-written cases miss live in
their combinations (a partition redrawn at every reset outgrowing a feature's scale; a range of
client counts that the partition cannot split, found only at the reset that draws one). Hypothesis
draws a few arguments per env; the default suite replays a fixed set of draws (``derandomize``),
so CI sees the same cases each run, and ``-m slow`` searches many more.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import fl_gym
from fl_gym.envs.registry import env_ids
from fl_gym.validation import UserError

SCENARIO: dict[str, list] = {
    "num_clients": [3, 10, 12, 20], "alpha": [0.05, 0.5],
    "partition": ["iid", "shards", "classes", "one_class", "mixed", "power_law"],
    "redraw_partition": [True], "noisy_clients": [0.3], "load_persistence": [0.8], "sigma_meas": [0.3],
    "bandwidth": [1e5], "bandwidth_heterogeneity": [10.0], "aggregation_time": [2.0],
    "availability": [0.5, 0.1], "availability_persistence": [0.7], "dropout": [0.3], "dropout_rate": [0.01],
    "deadline": [5.0, 0.05], "late": ["partial"], "fednova": [True], "link_sigma": [0.5], "eval_every": [2],
    "batch_size": [1, 64], "optimizer": ["adam"], "momentum": [0.9], "lr": [0.5], "label_noise": ["flip"],
    "heterogeneity": [1.0, 100.0], "randomize_scenario": [True], "num_clients_range": [(8, 14), (3, 5)],
    "scenario_seed_range": [(0, 5)],
}
FAMILY: dict[str, dict[str, list]] = {
    "FLHetero-v0": {"obs_mode": ["extended", "catalogue", "history"], "aggregation": ["uniform"],
                    "fractional_epochs": [True], "reward_mode": ["r1", "r2"], "clients_per_round": [3, 8],
                    "num_sizes": [3, 4], "preset": ["scale20"]},
    "FLHeteroAlloc-v0": {"obs_mode": ["history"], "clients_per_round": [3]},
    "FLHeteroIntensity-v0": {"obs_mode": ["catalogue"], "fractional_epochs": [True]},
    "FLSelect-v0": {"reward_signal": ["loss", "loss_vs_all"], "local_algorithm": ["scaffold", "moon"],
                    "sampler": ["uniform"], "action_encoding": ["discrete"], "clients_per_round": [2, 8],
                    "model": ["cnn-small"], "validation_size": [0]},
    "FLSelectPick-v0": {"post_filter": ["all"], "reward": ["favor"], "pick_action": ["scores"],
                        "system_rows": [True], "lambda_time": [0.1]},
    "FLSelectQueue-v0": {"queue_mode": ["replace"], "aggregation_weights": ["data_size"],
                         "empty_action": ["all"], "update_stats": [True], "server_data_fraction": [0.05],
                         "allow_server_data": [True], "segment_size": [3], "queue_start_round": [1]},
    "FLAggregate-v0": {"local_algorithm": ["feddyn"], "server": ["fedadam"], "server_lr": [0.5],
                       "reward": ["acc_area", "rounds", "favor"], "stop_at_target": [True],
                       "target_accuracy": [0.3], "local_epochs": [0.3]},
    "FLLearningRate-v0": {"action_mode": ["shared"], "lr_min": [0.01], "server": ["fedavgm"],
                          "reward": ["rounds"], "stop_at_target": [True], "target_accuracy": [0.2],
                          "clients_per_round": [2, 10]},
}


def test_every_id_of_the_package_has_arguments_to_draw():
    assert sorted(FAMILY) == sorted(i for i in env_ids() if gym.spec(i).entry_point.startswith("fl_gym."))


@st.composite
def arguments(draw: st.DrawFn) -> tuple[str, dict]:
    """An id and a few of its arguments, each with one of a few values."""
    env_id = draw(st.sampled_from(sorted(FAMILY)))
    choices = {**SCENARIO, **FAMILY[env_id]}
    names = draw(st.sets(st.sampled_from(sorted(choices)), max_size=4))
    return env_id, {name: draw(st.sampled_from(choices[name])) for name in sorted(names)}


def _episodes(env: gym.Env, seeds: range) -> list:
    """Each seed's episode, observations and rewards, asserted in the spaces as they come."""
    env.action_space.seed(0)
    played = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        played.append(obs.tobytes())
        ended = False
        while not ended:
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and np.isfinite(reward)
            played.append((obs.tobytes(), float(reward)))
            ended = terminated or truncated
    return played


def _plays_within_the_spaces(env_id: str, kwargs: dict) -> None:
    """Either our checks refuse the arguments when the env is built, or its episodes stay in the spaces.

    A single env, whose episodes a second env built alike plays again bit for bit, and a batched
    vector env of two copies (which pads copies whose client counts differ); two episodes of two
    rounds each, so that a reset redraws what the arguments redraw.
    """
    kwargs = {**kwargs, "rounds_per_episode": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some arguments warn by design (a server holding raw data)
        try:
            env = gym.make(env_id, **kwargs)
        except UserError:
            event("refused when built")
            return  # by name, before anything ran
        event(f"played {env_id}")
        assert _episodes(env, range(2)) == _episodes(gym.make(env_id, **kwargs), range(2))
        vec = fl_gym.make_vec(env_id, 2, seed=0, **kwargs)
        vec.action_space.seed(0)
        vec.reset()
        for _ in range(4):  # through an auto-reset
            obs, rewards, *_ = vec.step(np.stack([vec.action_space.sample() for _ in range(2)]))
            assert all(vec.observation_space.contains(row) for row in obs) and np.isfinite(rewards).all()
        vec.close()


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(arguments())
def test_random_arguments_are_refused_when_built_or_played_within_the_spaces(case):
    _plays_within_the_spaces(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments())
def test_many_random_arguments_are_refused_when_built_or_played_within_the_spaces(case):
    _plays_within_the_spaces(*case)
