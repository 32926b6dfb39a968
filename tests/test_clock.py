from __future__ import annotations

import math

import numpy as np
import pytest

from fl_gym.clock import Clock, ClockConfig, DeviceProfiles, RoundLoad


def test_profiles_pin_both_ends_and_stay_in_range():
    p = DeviceProfiles.draw(10, ClockConfig(heterogeneity=10), np.random.default_rng(0))
    assert p.speed.max() == 1.0 and p.speed.min() == pytest.approx(0.1)
    assert np.all((p.speed >= 0.1 - 1e-12) & (p.speed <= 1.0))
    assert np.all(np.isinf(p.bandwidth))
    homogeneous = DeviceProfiles.draw(5, ClockConfig(heterogeneity=1), np.random.default_rng(0))
    assert np.all(homogeneous.speed == 1.0)


def test_times_by_hand():
    cfg = ClockConfig(seconds_per_unit=5e-4, bandwidth=1e6, download_ratio=2.0)
    clock = Clock(cfg, DeviceProfiles(speed=np.array([1.0, 0.5]), bandwidth=np.array([1e6, 2.5e5])))
    load = RoundLoad(availability=np.array([1.0, 0.8]), drift=np.array([1.1, 1.0]),
                     noise=np.array([1.0, 1.0]))
    samples = np.array([100, 200])
    # t = c0 * c * D / (psi * xi)
    np.testing.assert_allclose(clock.epoch_time(samples, 1.0, load), [0.05, 5e-4 * 200 / 0.4])
    np.testing.assert_allclose(clock.train_time(samples, np.array([2, 3]), np.array([3.5, 1.0]), load),
                               [2 * 5e-4 * 3.5 * 100 * 1.1, 3 * 5e-4 * 200 / 0.4])
    np.testing.assert_allclose(clock.upload_time(np.array([4e6, 4e6])), [4.0, 16.0])
    np.testing.assert_allclose(clock.download_time(np.array([4e6, 4e6])), [2.0, 8.0])


def test_doubling_speed_halves_time():
    load = RoundLoad.still(2)
    slow = Clock(ClockConfig(), DeviceProfiles(np.array([0.2, 1.0]), np.full(2, math.inf)))
    fast = Clock(ClockConfig(), DeviceProfiles(np.array([0.4, 1.0]), np.full(2, math.inf)))
    t_slow = slow.epoch_time(np.array([50, 50]), 2.0, load)
    t_fast = fast.epoch_time(np.array([50, 50]), 2.0, load)
    assert t_fast[0] == pytest.approx(t_slow[0] / 2)
    assert t_fast[1] == t_slow[1]


def test_round_load_is_seeded_and_off_when_sigmas_are_zero():
    cfg = ClockConfig(sigma_dyn=0.0, sigma_drift=0.0, sigma_meas=0.0)
    load = RoundLoad.draw(4, cfg, np.random.default_rng(0))
    assert np.all(load.availability == 1) and np.all(load.drift == 1) and np.all(load.noise == 1)
    a = RoundLoad.draw(4, ClockConfig(), np.random.default_rng(1))
    b = RoundLoad.draw(4, ClockConfig(), np.random.default_rng(1))
    assert np.array_equal(a.availability, b.availability)
    assert np.std(np.log(RoundLoad.draw(20000, ClockConfig(sigma_dyn=0.2),
                                        np.random.default_rng(2)).availability)) == \
        pytest.approx(0.2, rel=0.03)


def test_a_persistent_load_continues_the_last_round_by_hand():
    cfg = ClockConfig(sigma_dyn=0.2, sigma_drift=0.5, sigma_meas=0.1, load_persistence=0.6)
    last = RoundLoad(np.array([2.0, 0.5]), np.array([1.5, 1.0]), np.array([9.0, 9.0]))
    z = np.random.default_rng(3).standard_normal((3, 2))
    load = RoundLoad.draw(2, cfg, np.random.default_rng(3), last)
    np.testing.assert_allclose(load.availability, np.exp(0.6 * np.log([2.0, 0.5]) + 0.8 * 0.2 * z[0]))
    np.testing.assert_allclose(load.drift, np.exp(0.6 * np.log([1.5, 1.0]) + 0.8 * 0.5 * z[1]))
    np.testing.assert_allclose(load.noise, np.exp(0.1 * z[2]))  # measurement noise stays independent
    first = RoundLoad.draw(2, cfg, np.random.default_rng(3))  # no last round: the stationary law
    np.testing.assert_allclose(first.drift, np.exp(0.5 * z[1]))


def test_a_persistent_load_keeps_its_spread_and_has_the_autocorrelation_asked_for():
    cfg, rng = ClockConfig(sigma_drift=0.5, load_persistence=0.9), np.random.default_rng(0)
    loads = [RoundLoad.draw(2000, cfg, rng)]
    for _ in range(40):
        loads.append(RoundLoad.draw(2000, cfg, rng, loads[-1]))
    log = np.log(np.stack([load.drift for load in loads]))
    assert log[-1].std() == pytest.approx(0.5, rel=0.05)
    assert np.corrcoef(log[-2], log[-1])[0, 1] == pytest.approx(0.9, abs=0.02)


@pytest.mark.parametrize("kwargs,param", [
    (dict(seconds_per_unit=0), "seconds_per_unit"), (dict(load_persistence=1.0), "load_persistence"),
    (dict(heterogeneity=0.5), "heterogeneity"),
    (dict(sigma_dyn=-0.1), "sigma_dyn"), (dict(bandwidth=0), "bandwidth"),
    (dict(bandwidth_heterogeneity=0.9), "bandwidth_heterogeneity"),
])
def test_bad_clock_config(kwargs, param):
    with pytest.raises(ValueError, match=f"{param}="):
        ClockConfig(**kwargs)
