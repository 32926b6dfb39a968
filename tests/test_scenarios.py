"""Scenario randomisation: a new static federation per episode, reproducible from the episode seed."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest

import fl_gym
from fl_gym import Federation, FederationConfig
from fl_gym.data import Shards, partition_scheme
from fl_gym.envs.registry import env_ids

HETERO = "FLHetero-v0"


def _scenario(env: gym.Env) -> tuple:
    fed = env.unwrapped.federation
    return fed.num_clients, fed.profiles.speed.tolist(), fed.sizes.tolist()


def test_a_new_scenario_per_reset_reproducible_from_the_seed():
    env = gym.make(HETERO, randomize_scenario=True, num_clients_range=(8, 14))
    twin = gym.make(HETERO, randomize_scenario=True, num_clients_range=(8, 14))
    drawn = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(obs, twin.reset(seed=seed)[0])
        assert _scenario(env) == _scenario(twin)
        assert obs.shape == env.observation_space.shape and 8 <= env.unwrapped.federation.num_clients <= 14
        drawn.append(_scenario(env))
    # profiles, partitions and K vary
    assert len({str(s) for s in drawn}) == 6 and len({s[0] for s in drawn}) > 1
    env.reset(seed=2)
    assert _scenario(env) == drawn[2]


def test_without_randomisation_every_episode_keeps_the_scenario_seeds_federation():
    env = gym.make(HETERO)
    first = None
    for seed in range(3):
        env.reset(seed=seed)
        first = first or _scenario(env)
        assert _scenario(env) == first


def test_a_randomised_episode_steps_through_its_own_clients():
    env = gym.make(HETERO, randomize_scenario=True, num_clients_range=(7, 9), rounds_per_episode=4)
    env.action_space.seed(0)
    for seed in range(3):
        env.reset(seed=seed)
        k_all = env.unwrapped.federation.num_clients
        for _ in range(4):
            *_, info = env.step(env.action_space.sample())
            assert info["clients"].max() < k_all and len(info["clients"]) == 6


@pytest.mark.parametrize("env_id,span", [("FLAggregate-v0", None), ("FLLearningRate-v0", (6, 9)),
                                          ("FLSelect-v0", (14, 22))])
def test_training_families_randomise_their_scenario_and_where_allowed_their_client_count(env_id, span):
    env = gym.make(env_id, randomize_scenario=True, num_clients_range=span, rounds_per_episode=2)
    counts, speeds = set(), []
    for seed in range(4):
        env.reset(seed=seed)
        fed = env.unwrapped.federation
        counts.add(fed.num_clients)
        speeds.append(fed.profiles.speed.tolist())
        obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == env.observation_space.shape
    assert len({str(s) for s in speeds}) == 4
    assert len(counts) > 1 if span else counts == {env.unwrapped.config.scenario.num_clients}


K_DEPENDENT = [i for i in env_ids()
               if not gym.spec(i).entry_point.endswith(("FLHeteroEnv", "FLHeteroAllocEnv",
                                                       "FLHeteroIntensityEnv", "FLSelectEnv",
                                                       "FLLearningRateEnv"))]


@pytest.mark.parametrize("env_id", K_DEPENDENT)
def test_families_whose_spaces_depend_on_k_refuse_a_client_count_range(env_id):
    with pytest.raises(ValueError, match="num_clients_range"):
        gym.make(env_id, randomize_scenario=True, num_clients_range=(10, 12))


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_clients_range=(8, 12)), "num_clients_range"),  # needs randomize_scenario
    (dict(randomize_scenario=True, num_clients_range=(12, 8)), "num_clients_range"),
    (dict(randomize_scenario=True, num_clients_range=(1, 8)), "num_clients_range"),
    (dict(randomize_scenario=True, num_clients_range=(8,)), "num_clients_range"),
    (dict(randomize_scenario="yes"), "randomize_scenario"),
    (dict(randomize_scenario=True, num_clients_range=(4, 12)), "clients_per_round"),  # k = 6 > 4
])
def test_bad_randomisation_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gym.make(HETERO, **kwargs)


@pytest.mark.parametrize("kwargs, says", [
    (dict(partition="one_class", num_clients_range=(8, 14)), "a multiple of the number of classes"),
    (dict(dataset="synthetic", partition="natural", num_clients_range=(10, 12)), "number of devices"),
    (dict(partition="one_class", num_clients_range=(13, 13)),
     r"num_clients=13 .*multiple of the number of classes \(10\)"),
    (dict(partition="shards", shards_per_client=40, num_clients_range=(10, 40)), "shards_per_client=40"),
])
def test_a_client_count_range_the_partition_cannot_split_is_refused_when_the_env_is_built(kwargs, says):
    """Each count would otherwise fail at the reset that draws it, mid-run."""
    with pytest.raises(ValueError, match=rf"num_clients_range=.*{says}"):
        gym.make(HETERO, randomize_scenario=True, **kwargs)


def test_a_client_count_check_splits_without_changing_the_federation():
    config = FederationConfig(dataset="digits", num_clients=10, partition=Shards(shards_per_client=20),
                              server_data_fraction=0.1, train=False)
    fed = Federation(config)
    sizes, server = fed.sizes.copy(), fed.server_indices.copy()
    fed.check_client_count(30)
    with pytest.raises(ValueError, match="shards_per_client=20"):
        fed.check_client_count(100)
    assert fed.sizes.tolist() == sizes.tolist() and fed.server_indices.tolist() == server.tolist()


def test_a_batched_copy_keeps_merging_after_a_new_scenario():
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, randomize_scenario=True, rounds_per_episode=1)
    vec.reset()
    before = [env.unwrapped.federation for env in vec.envs]
    vec.step(np.stack([vec.action_space.sample() for _ in range(2)]))  # both copies end and reset
    after = [env.unwrapped.federation for env in vec.envs]
    assert all(a is not b and a.batcher is vec.batcher for a, b in zip(after, before, strict=True))
    vec.close()


@pytest.mark.parametrize("env_id, kwargs, name", [
    ("FLLearningRate-v0", {"num_threads": 10**9}, "num_threads="),
    ("FLLearningRate-v0", {"lr": 1e9}, "lr="),
    ("FLLearningRate-v0", {"lr_max": 1e9}, "lr_max="),
    ("FLAggregate-v0", {"local_epochs": 1e9}, "local_epochs="),
    ("FLAggregate-v0", {"rounds_per_episode": 10**9}, "rounds_per_episode="),
])
def test_values_that_would_hang_abort_or_make_nan_are_refused_at_make(env_id, kwargs, name):
    with pytest.raises(ValueError, match=name):
        gym.make(env_id, **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    (dict(momentum=None), "momentum=None is out of range; allowed: a real number (not NaN)"),
    (dict(reward_weights=0), "reward_weights=0 is out of range; allowed: a tuple of 2"),
    (dict(model_costs=0), "model_costs=0 is out of range; allowed: a mapping of a string to a real number"),
    (dict(preset=[1, 2]), "preset=[1, 2] is out of range; allowed: a string"),
    (dict(distillation="abc"), "distillation='abc' is out of range; allowed: a MutualDistillation"),
    (dict(fractional_epochs=-1), "fractional_epochs=-1 is out of range; allowed: True or False"),
    (dict(target_accuracy="x"),
     "target_accuracy='x' is out of range; allowed: a real number (not NaN) or None"),
    (dict(sigma_drift=1e9), "sigma_drift=1000000000.0 is out of range; allowed: a float in [0, 5]"),
    (dict(data_root=-1), "data_root=-1 is out of range; allowed: a string or None"),
])
def test_a_value_of_the_wrong_type_is_refused_by_its_fields_annotation(kwargs, message):
    with pytest.raises(ValueError) as err:
        gym.make("FLHetero-v0", **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("env_id,kwargs", [
    ("FLSelectPick-v0", dict(num_clients=np.int64(12))),  # sized gymnasium's MultiBinary, which refused it
    ("FLSelect-v0", dict(clients_per_round=np.int32(4), lr=np.float32(0.05))),
    ("FLHetero-v0", dict(randomize_scenario=np.bool_(True), num_clients_range=(np.int64(8), np.int64(10)))),
])
def test_numpy_scalars_are_taken_as_pythons_own(env_id, kwargs):
    """A value computed with numpy plays, and the config holds Python's types (for spaces and JSON)."""
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    config = env.unwrapped.config
    held = {**dataclasses.asdict(config.scenario), **dataclasses.asdict(config)}
    # json refuses numpy's integers, bools and float32 (not float64, a Python float)
    assert json.loads(json.dumps({k: held[k] for k in kwargs})) == {
        k: list(v) if isinstance(v, tuple) else np.asarray(v).item() for k, v in kwargs.items()}


def test_configs_built_directly_hold_numpy_scalars_as_pythons():
    from fl_gym.envs.scenario import ScenarioConfig

    env = gym.make("FLSelectPick-v0", scenario=ScenarioConfig(num_clients=np.int64(12), lr=np.float32(0.5)))
    env.reset(seed=0)
    env.step(env.action_space.sample())  # MultiBinary(np.int64(12)) was gymnasium's error
    scenario = env.unwrapped.config.scenario
    assert (type(scenario.num_clients), type(scenario.lr)) == (int, float) and scenario.lr == 0.5
    config = FederationConfig(num_clients=np.int64(5), batch_size=np.int32(10))
    assert (type(config.num_clients), type(config.batch_size)) == (int, int)


def test_a_numpy_seed_plays_the_episode_of_the_same_python_seed():
    """Our checks take numpy integers as seeds; gymnasium's own reset refused them with a traceback."""
    env, twin = gym.make(HETERO), gym.make(HETERO)
    np.testing.assert_array_equal(env.reset(seed=np.int64(7))[0], twin.reset(seed=7)[0])
    action = env.action_space.sample()
    np.testing.assert_array_equal(env.step(action)[0], twin.step(action)[0])


@pytest.mark.parametrize("value,accepted", [
    (np.float32(0.5), True), (np.int64(1), True), (0.5, True), (1, True),  # numpy's reals are reals
    (np.float32("nan"), False), (np.float64("inf"), False), (np.bool_(True), False), (True, False),
    ("0.5", False), (None, False), (0, False), (-0.5, False), (1.5, False)])
def test_a_fraction_is_any_finite_real_in_the_unit_interval_but_a_bool(value, accepted):
    from fl_gym.validation import require_fraction

    if accepted:
        require_fraction("target", value)
    else:
        with pytest.raises(ValueError, match="target=.* is out of range; allowed: a float in \\(0, 1\\]"):
            require_fraction("target", value)


def test_a_validation_set_larger_than_the_test_set_is_refused_by_name():
    with pytest.raises(ValueError, match="validation_size=1000000000 is out of range; allowed: an integer in "
                                         r"\[1, 358\] \(the digits test set has 359"):
        gym.make("FLAggregate-v0", validation_size=10**9)


def test_every_clock_and_partition_knob_is_a_make_argument_and_no_family_field_shadows_one():
    from fl_gym.clock import ClockConfig
    from fl_gym.data.partition import SCHEME_FIELDS
    from fl_gym.envs.registry import FAMILIES, resolve
    from fl_gym.envs.scenario import SCENARIO_FIELDS

    clock = [f.name for f in dataclasses.fields(ClockConfig)]
    assert [name for name in (*clock, *SCHEME_FIELDS) if name not in SCENARIO_FIELDS] == []
    for family in FAMILIES.values():
        for entry in family.envs.values():
            own = resolve(entry).config_class.own_fields()
            assert set(own) & set(SCENARIO_FIELDS) == set(), entry


def test_a_clock_field_given_to_make_reaches_the_federation():
    env = gym.make("FLAggregate-v0", aggregation_time=2.5, download_ratio=4.0, bandwidth_heterogeneity=3.0)
    clock = env.unwrapped.federation.config.clock
    assert (clock.aggregation_time, clock.download_ratio, clock.bandwidth_heterogeneity) == (2.5, 4.0, 3.0)


def test_a_partition_knob_applies_to_its_scheme_only_and_a_presets_knob_stays_with_its_scheme():
    # FLSelect-v0's tiny preset splits by Dirichlet(0.3): picking shards drops the preset's alpha
    shards = gym.make("FLSelect-v0", partition="shards", shards_per_client=3).unwrapped
    assert shards.federation.config.partition == partition_scheme("shards", shards_per_client=3)
    default = gym.make("FLSelect-v0").unwrapped.federation.config.partition
    assert default == partition_scheme("dirichlet", alpha=0.3)
    with pytest.raises(ValueError,
                       match="alpha=0.3 does not apply to partition='shards'; allowed: shards_per_client"):
        gym.make("FLSelect-v0", partition="shards", alpha=0.3)
    with pytest.raises(ValueError, match="shards_per_client=3 does not apply to partition='dirichlet'"):
        gym.make("FLSelect-v0", shards_per_client=3)
