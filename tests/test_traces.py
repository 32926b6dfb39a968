"""FedScale-format device traces: the loaders on synthetic files, online intervals by hand, a federation
whose clients play the traces' devices, and clear errors for malformed files."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

import fl_gym  # noqa: F401  (registers the ids)
from fl_gym.behaviour import BehaviourConfig
from fl_gym.clock import ClockConfig
from fl_gym.config import FederationConfig
from fl_gym.federation import Federation
from fl_gym.records import RoundPlan
from fl_gym.traces import PlayedDevices, load_availability, load_capacity

CAPACITY = {101: {"computation": 20.0, "communication": 800.0},
            102: {"computation": 40.0, "communication": 8000.0},
            103: {"computation": 80.0, "communication": 1600.0}}
# device 201 always online, 202 in the first half of every 100 s, 203 in the second half
AVAILABILITY = {201: {"active": [0], "inactive": [100], "finish_time": 100, "duration": 100, "model": "x"},
                202: {"active": [0], "inactive": [50], "finish_time": 100, "duration": 100, "model": "x"},
                203: {"active": [50], "inactive": [100], "finish_time": 100, "duration": 100, "model": "x"}}


def _write(tmp_path, name: str, table: object) -> str:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(table))
    return str(path)


def test_the_capacity_loader_converts_fedscale_units(tmp_path):
    trace = load_capacity(_write(tmp_path, "capacity.pkl", CAPACITY))
    np.testing.assert_array_equal(trace.ids, [101, 102, 103])
    # three forward passes of 20 ms per trained sample; 800 kbit/s = 100,000 bytes/s
    np.testing.assert_allclose(trace.seconds_per_sample, [0.06, 0.12, 0.24])
    np.testing.assert_allclose(trace.bandwidth, [1e5, 1e6, 2e5])


def test_online_intervals_by_hand(tmp_path):
    table = {1: {"active": [10, 50], "inactive": [20, 70], "finish_time": 100},
             2: {"active": [0], "inactive": [1000], "finish_time": 1000}}  # always online
    trace = load_availability(_write(tmp_path, "availability.pkl", table))
    devices = np.array([0, 1])
    for time, on in [(15, True), (25, False), (60, True), (75, False), (115, True), (10, True), (20, False)]:
        np.testing.assert_array_equal(trace.online(devices, time)[0], [on, True], err_msg=str(time))
        np.testing.assert_array_equal(_reference_online(trace, devices, time), [on, True])


def test_intervals_past_the_period_are_named_as_never_reached(tmp_path):
    """The time is read modulo finish_time: an interval that starts after it is dead, and was silent."""
    table = {1: {"active": [10], "inactive": [20], "finish_time": 100},
             2: {"active": [10, 150], "inactive": [20, 160], "finish_time": 100}}
    with pytest.warns(UserWarning, match=r"1 of 2 clients \(first 2\) have intervals that start at or after"):
        trace = load_availability(_write(tmp_path, "availability.pkl", table))
    assert [trace.online(np.array([1]), t)[0][0] for t in (15, 50, 155)] == [True, False, False]


def test_when_no_device_is_online_the_one_back_soonest_is(tmp_path):
    table = {1: {"active": [80], "inactive": [90], "finish_time": 100},
             2: {"active": [30], "inactive": [40], "finish_time": 100}}
    trace = load_availability(_write(tmp_path, "availability.pkl", table))
    played = PlayedDevices(trace, np.array([0, 1]))
    np.testing.assert_array_equal(played.online(50.0), [True, False])  # back in 30 s, not 80 s
    np.testing.assert_array_equal(played.online(95.0), [False, True])  # wraps: 35 s against 85 s
    np.testing.assert_array_equal(PlayedDevices(trace, np.array([1, 1])).online(50.0), [True, False])  # ties


def _reference_online(trace, devices: np.ndarray, time: float) -> np.ndarray:
    """Each device's intervals checked one by one, the one back soonest (lowest id) when none is online."""
    on, back = [], []
    for d in devices:
        block = slice(trace.first[d], trace.first[d] + trace.count[d])
        starts, ends, now = trace.starts[block], trace.ends[block], time % trace.period[d]
        on.append(bool(((starts <= now) & (now < ends)).any()))
        later = starts[starts > now]
        back.append(later[0] - now if len(later) else starts[0] + trace.period[d] - now)
    on = np.array(on)
    if not on.any():
        on[int(np.argmin(back))] = True
    return on


def test_played_devices_reuse_an_answer_only_while_no_device_changes(tmp_path):
    rng = np.random.default_rng(0)
    table = {}
    for d in range(30):
        starts = np.sort(rng.choice(np.arange(0, 1000, 10), 5, replace=False)).astype(float)
        table[d] = {"active": starts, "inactive": starts + rng.uniform(1, 10, 5), "finish_time": 1000.0}
    trace = load_availability(_write(tmp_path, "availability.pkl", table))
    devices = rng.integers(0, 30, 50)
    played = PlayedDevices(trace, devices)
    times = np.concatenate([np.cumsum(rng.exponential(2.0, 400)), rng.uniform(0, 3000, 50)])  # then jumps
    for t in times:
        np.testing.assert_array_equal(played.online(t), _reference_online(trace, devices, t), err_msg=str(t))


def _federation(tmp_path, clock: dict | None = None, behaviour: dict | None = None) -> Federation:
    cfg = FederationConfig(num_clients=3, clock=ClockConfig(**(clock or {})),
                           behaviour=BehaviourConfig(**(behaviour or {})), train=False)
    return Federation(cfg, scenario_seed=0)


def test_clients_play_the_capacity_traces_devices_relative_to_the_fastest(tmp_path):
    path = _write(tmp_path, "capacity.pkl", CAPACITY)
    fed = _federation(tmp_path, clock={"capacity_trace": path, "bandwidth": 1e6})
    # three clients, three devices: each played once; speeds 60, 120, 240 ms -> 1, 1/2, 1/4
    np.testing.assert_allclose(np.sort(fed.profiles.speed), [0.25, 0.5, 1.0])
    np.testing.assert_allclose(np.sort(fed.profiles.bandwidth), [1e5, 2e5, 1e6])
    # a client's speed and link belong to one device
    profiles = fed.profiles
    pairs = {(round(1 / s), round(b)) for s, b in zip(profiles.speed, profiles.bandwidth, strict=True)}
    assert pairs == {(1, 100_000), (2, 1_000_000), (4, 200_000)}


def test_clients_are_reachable_while_their_devices_are_online(tmp_path):
    path = _write(tmp_path, "availability.pkl", AVAILABILITY)
    fed = _federation(tmp_path, clock={"seconds_per_unit": 1.0}, behaviour={"availability_trace": path})
    always = None
    for _ in range(30):
        opened = fed.open_round()
        assert opened.candidates.sum() == 2  # the always-online device, and one of the halves
        always = opened.candidates if always is None else always & opened.candidates
        fed.finish_round(fed.train_round(opened, RoundPlan.make(3, lr=0.05, selected=opened.candidates)))
    assert always.sum() == 1


def test_a_pick_env_with_an_availability_trace_masks_the_offline(tmp_path):
    path = _write(tmp_path, "availability.pkl", {i: AVAILABILITY[201 + i % 3] for i in range(40)})
    env = gym.make("FLSelectPick-v0", availability_trace=path, seconds_per_unit=1.0, rounds_per_episode=3)
    env.reset(seed=0)
    for _ in range(3):
        masks = env.unwrapped.action_masks().reshape(-1, 2)[:, 1]
        assert 0 < masks.sum() < len(masks)
        info = env.step(np.ones(len(masks), np.int8))[4]
        assert masks[info["clients"]].all()


@pytest.mark.parametrize("table,match", [
    ([1, 2], "holds a list"),
    ({}, "holds a dict"),
    ({1: {"computation": 20.0}}, "client 1 has"),
    ({1: {"computation": -1.0, "communication": 5.0}}, "client 1 has"),
    ({1: "fast"}, "client 1 has"),
    ({1: {"computation": 20.0, "communication": True}}, "client 1 has"),  # a bool is no speed
    ({"0": {"computation": 20.0, "communication": 5.0}, (1,): {"computation": 20.0, "communication": 5.0}},
     r"has client id \(1,\); allowed: .*each id an integer or a string"),  # was numpy's inhomogeneous shape
])
def test_a_malformed_capacity_trace_is_refused_by_name(tmp_path, table, match):
    path = _write(tmp_path, "capacity.pkl", table)
    with pytest.raises(ValueError, match=f"capacity_trace='{path}'.*{match}"):
        ClockConfig(capacity_trace=path)


@pytest.mark.parametrize("table,match", [
    ({1: {"active": [5], "inactive": [1], "finish_time": 10}}, "malformed"),
    ({1: {"active": [1, 2], "inactive": [3], "finish_time": 10}}, "malformed"),
    ({1: {"active": [1], "inactive": [3], "finish_time": 0}}, "malformed"),
    ({1: {"active": [1], "inactive": [3]}}, "client 1 has"),
    ({1: None}, "client 1 has"),
    ({None: {"active": [1], "inactive": [3], "finish_time": 10}}, "has client id None"),
])
def test_a_malformed_availability_trace_is_refused_by_name(tmp_path, table, match):
    path = _write(tmp_path, "availability.pkl", table)
    with pytest.raises(ValueError, match=f"availability_trace='{path}'.*{match}"):
        BehaviourConfig(availability_trace=path)


def test_files_that_are_missing_or_not_pickles_are_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a file"):
        ClockConfig(capacity_trace=str(tmp_path / "none.pkl"))
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="does not unpickle"):
        BehaviourConfig(availability_trace=str(garbage))


def test_an_availability_trace_replaces_the_chain(tmp_path):
    path = _write(tmp_path, "availability.pkl", AVAILABILITY)
    with pytest.raises(ValueError, match="availability=0.5 is out of range"):
        BehaviourConfig(availability=0.5, availability_trace=path)
    with pytest.raises(ValueError, match="availability_trace="):
        gym.make("FLHetero-v0", availability_trace=path)


def test_the_timing_backends_vector_clock_plays_a_capacity_trace_as_the_standalone_envs(tmp_path):
    """Every env takes a capacity trace: HAPFL's clock over copies reads the traced devices bit for bit."""
    rng = np.random.default_rng(0)
    table = {i: {"computation": float(rng.uniform(10, 200)), "communication": float(rng.uniform(500, 5e4))}
             for i in range(50)}
    kwargs = {"capacity_trace": _write(tmp_path, "capacity.pkl", table), "rounds_per_episode": 3}
    vec = fl_gym.make_vec("FLHetero-v0", 2, seed=5, monitor=False, **kwargs)
    solo = [gym.make("FLHetero-v0", **kwargs) for _ in range(2)]
    obs = vec.reset()
    for i, env in enumerate(solo):
        np.testing.assert_array_equal(obs[i], env.reset(seed=5 + i)[0])
    assert sorted(solo[0].unwrapped.federation.profiles.speed)[-1] == 1.0  # the fastest device played
    vec.action_space.seed(0)
    for _ in range(4):  # through an auto-reset
        actions = np.stack([vec.action_space.sample() for _ in range(2)])
        obs, rewards, dones, _ = vec.step(actions)
        for i, env in enumerate(solo):
            o, r, *_ = env.step(actions[i])
            o = env.reset()[0] if dones[i] else o
            np.testing.assert_array_equal(obs[i], o)
            assert rewards[i] == np.float32(r)
    vec.close()
