"""Label-noisy clients (``noisy_clients``) and the training range of scenario seeds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import fl_gym  # noqa: F401
from fl_gym import Federation, FederationConfig, RoundPlan, partition_scheme
from fl_gym.data.noise import noisy_view


def _fed(noisy: float, seed: int = 3, kind: str = "random") -> Federation:
    cfg = FederationConfig(num_clients=10, partition=partition_scheme("dirichlet", alpha=0.5),
                           noisy_clients=noisy, label_noise=kind)
    return Federation(cfg, scenario_seed=seed)


def test_noisy_clients_train_on_random_labels_and_leave_the_scenario_as_it_was():
    clean, noisy = _fed(0.0), _fed(0.3)
    assert clean.noisy.sum() == 0 and noisy.noisy.sum() == 3 and not noisy.noisy.flags.writeable
    # the noise is drawn after every other scenario draw: the same partition and devices
    assert np.array_equal(clean.sizes, noisy.sizes) and np.array_equal(clean.histogram, noisy.histogram)
    assert np.array_equal(clean.profiles.speed, noisy.profiles.speed)
    n = len(noisy.y_train)
    x, y = noisy._train_x, noisy._train_y
    for i in range(10):
        rows, own = noisy._rows[i], noisy.train_parts[i]
        assert torch.equal(rows, own + n if noisy.noisy[i] else own)
        assert torch.equal(x[rows], noisy.x_train[own])  # the same inputs
    bad = np.flatnonzero(noisy.noisy)
    labels = torch.cat([y[noisy._rows[i]] for i in bad])
    truth = torch.cat([noisy.y_train[noisy.train_parts[i]] for i in bad])
    assert (labels == truth).float().mean() < 0.3  # random labels agree with the truth about 1 in 10
    assert len(torch.unique(labels)) == 10


def test_flipped_labels_are_the_mirror_class_of_the_truth_for_noisy_clients_only():
    fed, random = _fed(0.3, kind="flip"), _fed(0.3)
    assert np.array_equal(fed.noisy, random.noisy)  # the same clients, whatever the kind
    for i in range(10):
        truth = fed.y_train[fed.train_parts[i]]
        assert torch.equal(fed._train_y[fed._rows[i]], 9 - truth if fed.noisy[i] else truth)
    assert torch.equal(fed._train_x, random._train_x)
    assert noisy_view(fed.x_train, fed.y_train, 10, "flip")[1] is fed._train_y  # each kind's view is shared
    assert noisy_view(fed.x_train, fed.y_train, 10)[1] is random._train_y
    with pytest.raises(ValueError,
                       match="label_noise='mirror' is out of range; allowed: one of 'random', 'flip'"):
        gym.make("FLSelect-v0", noisy_clients=0.3, label_noise="mirror")


def test_noisy_federations_share_one_view_so_a_vector_env_merges_them():
    a, b = _fed(0.3, seed=1), _fed(0.3, seed=2)
    assert a._train_x is b._train_x and a._train_y is b._train_y
    assert not np.array_equal(a.noisy, b.noisy) or not np.array_equal(a.sizes, b.sizes)
    x2, _ = noisy_view(a.x_train, a.y_train, 10)
    assert x2 is a._train_x


def test_a_redrawn_partition_keeps_the_noisy_clients_noisy():
    fed = _fed(0.3)
    fed.redraw_partition(7)
    n = len(fed.y_train)
    for i in range(10):
        assert torch.equal(fed._rows[i], fed.train_parts[i] + (n if fed.noisy[i] else 0))


def test_noisy_clients_hurt_fedavg():
    def final_accuracy(noisy: float) -> float:
        fed = _fed(noisy)
        for _ in range(8):
            report = fed.run_round(RoundPlan.make(10, lr=0.05, epochs=1))
        return report.accuracy

    assert final_accuracy(0.5) < final_accuracy(0.0) - 0.05


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), "a"])
def test_noisy_clients_is_validated(bad):
    with pytest.raises(ValueError, match="noisy_clients="):
        gym.make("FLAggregate-v0", noisy_clients=bad)


def test_randomized_scenarios_come_from_the_seed_range_and_equal_the_fixed_scenario_of_their_seed():
    env = gym.make("FLAggregate-v0", noisy_clients=0.3, randomize_scenario=True,
                   scenario_seed_range=(500, 600))
    seen = set()
    for k in range(6):
        env.reset(seed=k)
        fed = env.unwrapped.federation
        assert 500 <= fed.scenario_seed < 600
        seen.add(fed.scenario_seed)
        twin = gym.make("FLAggregate-v0", noisy_clients=0.3,
                        scenario_seed=fed.scenario_seed).unwrapped.federation
        assert np.array_equal(twin.sizes, fed.sizes) and np.array_equal(twin.noisy, fed.noisy)
    assert len(seen) > 1


@pytest.mark.parametrize("span, why", [((5, 5), "low < high"), ((-1, 3), "0 <= low"), ("ab", "low < high")])
def test_scenario_seed_range_is_validated(span, why):
    with pytest.raises(ValueError, match="scenario_seed_range="):
        gym.make("FLAggregate-v0", randomize_scenario=True, scenario_seed_range=span)
    with pytest.raises(ValueError, match="None unless randomize_scenario=True"):
        gym.make("FLAggregate-v0", scenario_seed_range=(1, 9))

