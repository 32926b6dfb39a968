from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_gym.baselines.hetero import balanced_sizes
from fl_gym.envs.hetero.actions import HeteroSpec, integerize, sigma_logits, size_bins, size_centres, softmax

simplex = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12).filter(lambda v: sum(v) > 1e-3).map(
    lambda v: np.asarray(v) / np.sum(v))


@settings(max_examples=300, deadline=None)
@given(sigma=simplex, per_client=st.integers(1, 30))
def test_integerize_keeps_the_budget(sigma, per_client):
    total = per_client * len(sigma)
    tau = integerize(sigma, total)
    assert tau.dtype.kind == "i"
    assert tau.sum() == total and tau.min() >= 1
    x = sigma * total
    if np.all(x >= 1):
        assert np.all(np.abs(tau - x) < 1 + 1e-9)


def test_integerize_extremes_and_ties():
    assert integerize(np.array([1.0, 0, 0, 0, 0, 0]), 120).tolist() == [115, 1, 1, 1, 1, 1]
    assert integerize(np.full(6, 1 / 6), 120).tolist() == [20] * 6
    assert integerize(np.full(4, 0.25), 6).tolist() == [2, 2, 1, 1]  # ties go to the lower slot
    with pytest.raises(ValueError, match="total_epochs=3"):
        integerize(np.full(4, 0.25), 3)


def _integerize_one(sigma, total):
    """The rule one row at a time, as written: floor at 1, the shortfall to the largest remainders, an
    overshoot taken back one epoch at a time from the slot of the least slack."""
    x = sigma * total
    tau = np.maximum(1, np.floor(x)).astype(np.int64)
    short = total - int(tau.sum())
    if short > 0:
        tau[np.argsort(-(x - tau), kind="stable")[:short]] += 1
    for _ in range(-short):
        tau[int(np.argmin(np.where(tau > 1, x - tau, np.inf)))] -= 1
    return tau


def test_integerize_of_rows_is_each_row_alone():
    rng = np.random.default_rng(1)
    logits = np.concatenate([rng.uniform(-1, 1, (50, 6)), np.tile([1, -1, -1, -1, -1, -1], (2, 1))])
    peaked = softmax(np.array([[1.0, -1, -1, -1, -1, -1]]), scale=30.0)  # overshoots by 5
    sigma = np.concatenate([softmax(logits), peaked])
    for total in (6, 12, 120):
        tau = integerize(sigma, total)
        assert tau.shape == sigma.shape and (tau.sum(axis=1) == total).all()
        for row, s in zip(tau, sigma, strict=True):
            np.testing.assert_array_equal(row, _integerize_one(s, total))
            np.testing.assert_array_equal(row, integerize(s, total))
        np.testing.assert_array_equal(integerize(sigma[:51].reshape(3, 17, 6), total),
                                      tau[:51].reshape(3, 17, 6))
    overshoot = np.maximum(1, np.floor(sigma * 12)).sum(axis=1) - 12
    assert (overshoot > 0).sum() > 1 and overshoot.max() == 5  # the floor of 1 overshoots in several rows


@settings(max_examples=100, deadline=None)
@given(a=st.lists(st.floats(-1, 1), min_size=2, max_size=10), shift=st.floats(-0.5, 0.5))
def test_softmax_decode_is_a_simplex_and_shift_invariant(a, shift):
    a = np.asarray(a)
    s = softmax(a)
    assert s.sum() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(softmax(a + shift), s, atol=1e-12)


def test_round_trip_of_the_joint_action():
    rng = np.random.default_rng(0)
    for delta in (2, 3):
        spec = HeteroSpec("joint", 6, delta, np.arange(1, delta + 1, dtype=float))
        for _ in range(50):
            sizes = rng.integers(0, delta, 6)
            sigma = rng.dirichlet(np.full(6, 5.0))  # centred log-ratios well inside +-3
            got_sizes, got_sigma = spec.decode(spec.encode(sizes, sigma))
            assert np.array_equal(got_sizes, sizes)
            np.testing.assert_allclose(got_sigma, sigma, atol=1e-6)
    assert np.array_equal(size_bins(size_centres(np.arange(3), 3), 3), np.arange(3))
    assert size_bins(np.array([-1.0, 1.0]), 2).tolist() == [0, 1]
    assert np.all(np.abs(sigma_logits(np.array([1.0, 0.0]))) <= 1.0)


@pytest.mark.parametrize("view,sizes,sigma,said", [
    ("joint", np.zeros(6, int), None, r"sigma=None is out of range; allowed: 6 epoch shares >= 0, not all 0, "
                                      r"per row \(the joint view acts the epoch split\)"),  # an AxisError
    ("joint", np.full(6, 2), np.ones(6), r"sizes=.* allowed: 6 size indices in 0..1 per row"),
    ("joint", np.zeros(3, int), np.ones(6), "sizes="),
    ("joint", np.zeros(6, int), -np.ones(6), "sigma="),
    ("joint", np.zeros(6, int), np.zeros(6), "sigma="),  # NaN logits
    ("alloc", None, np.ones(6), r"sizes=None is out of range; .*the alloc view acts sizes"),  # a TypeError
    ("alloc", np.full(6, 0.5), None, "sizes="),  # truncated to 0
    ("alloc", {}, None, "sizes="),
    ("intensity", np.zeros(6, int), None, r"sigma=None .*the intensity view acts the epoch split"),
    ("intensity", None, np.ones(3), "sigma="),
])
def test_encoding_names_a_choice_the_view_cannot_carry(view, sizes, sigma, said):
    spec = HeteroSpec(view, 6, 2, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=said):
        spec.require_choices(sizes, sigma)
    spec.require_choices(np.ones((4, 6)), np.full((4, 6), 2.0))  # rows; integral floats; shares of any sum


def _brute_force_ratio(s1, m):
    best = np.inf
    for sizes in itertools.product(range(len(m)), repeat=len(s1)):
        v = m[list(sizes)] * s1
        best = min(best, v.max() / v.min())
    return best


@pytest.mark.parametrize("delta", [2, 3])
def test_balanced_oracle_matches_brute_force(delta):
    m = np.array([4.5, 8.5, 14.0])[-delta:] if delta == 2 else np.array([4.5, 8.5, 14.0])
    rng = np.random.default_rng(delta)
    for _ in range(40):
        s1 = np.exp(rng.uniform(0, np.log(30), 6))
        s1 /= s1.min()
        best = _brute_force_ratio(s1, m)
        largest, smallest = balanced_sizes(s1, m), balanced_sizes(s1, m, fit="smallest")
        for sizes in (largest, smallest):
            v = m[sizes] * s1
            assert v.max() / v.min() == pytest.approx(best, rel=1e-12)
        assert np.all(smallest <= largest)
        v = m[smallest] * s1
        for i in np.flatnonzero(smallest > 0):  # one size smaller falls below the window: a worse balance
            w = v.copy()
            w[i] = m[smallest[i] - 1] * s1[i]
            assert w.max() / w.min() > best * (1 + 1e-9)
