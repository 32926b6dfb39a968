import numpy as np
import pytest

from fl_gym.training.benchmark import scores


def test_normalized_score_by_hand():
    assert scores.normalized_score(0.80, 0.70, 0.75) == pytest.approx(2.0)
    assert scores.normalized_score(0.70, 0.70, 0.75) == 0.0
    assert scores.normalized_score(0.75, 0.70, 0.75) == pytest.approx(1.0)
    # lower is better (a time): ref_max below ref_min, the same formula
    assert scores.normalized_score(8.0, 10.0, 9.0) == pytest.approx(2.0)


@pytest.mark.parametrize("refs", [(0.5, 0.5), (float("nan"), 1.0), (0.0, float("inf"))])
def test_normalized_score_refuses_degenerate_references(refs):
    with pytest.raises(ValueError, match="ref_min="):
        scores.normalized_score(1.0, *refs)


def test_iqm_by_hand():
    # 8 entries: 2 cut from each end, the mean of the middle four
    assert scores.iqm(np.array([[10, 1, 2, 3], [4, 5, 6, -20]])) == pytest.approx((2 + 3 + 4 + 5) / 4)
    # 5 entries: floor(5/4) = 1 cut from each end, as scipy.stats.trim_mean(x, 0.25)
    assert scores.iqm(np.array([0, 1, 2, 3, 100])) == pytest.approx(2.0)
    assert scores.iqm(np.array([7.0])) == 7.0


def test_median_is_over_task_means():
    assert scores.median(np.array([[0.0, 1.0, 5.0], [2.0, 3.0, 5.0]])) == pytest.approx(2.0)


def test_stratified_resample_stays_within_each_task():
    matrix = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    rep = scores.stratified_resample(matrix, np.random.default_rng(3))
    assert rep.shape == matrix.shape
    assert set(rep[:, 0]) <= {0.0, 1.0, 2.0} and set(rep[:, 1]) <= {10.0, 11.0, 12.0}


def test_bootstrap_ci_brackets_the_point_and_collapses_without_spread():
    point, low, high = scores.bootstrap_ci(np.full((5, 3), 0.7), reps=200)
    assert point == low == high == pytest.approx(0.7)
    rng = np.random.default_rng(0)
    matrix = rng.normal(1.0, 0.2, size=(5, 4))
    point, low, high = scores.bootstrap_ci(matrix, reps=500)
    assert low < point < high
    assert scores.bootstrap_ci(matrix, reps=500) == (point, low, high)  # seeded: reproducible


def test_performance_profile_by_hand():
    matrix = np.array([[0.0, 0.5], [1.0, 2.0]])
    np.testing.assert_allclose(scores.performance_profile(matrix, [-1, 0, 0.5, 1, 3]),
                               [1, 0.75, 0.5, 0.25, 0])


def test_probability_of_improvement_by_hand():
    x = np.array([[1.0, 0.0], [3.0, 0.0]])
    y = np.array([[2.0, 0.0], [2.0, 1.0]])
    # task 0: pairs (1>2 no, 1>2 no, 3>2, 3>2) = 0.5; task 1: (0 vs 0 tie 0.5, 0 vs 1 no) x2 = 0.25
    assert scores.probability_of_improvement(x, y) == pytest.approx((0.5 + 0.25) / 2)
    assert scores.probability_of_improvement(x, x) == pytest.approx(0.5)
    p, low, high = scores.improvement_ci(x, y, reps=300)
    assert low <= p <= high


def test_matrices_are_checked():
    with pytest.raises(ValueError, match="expected a \\(runs, tasks\\) matrix"):
        scores.bootstrap_ci(np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        scores.performance_profile(np.array([[np.nan]]), [0])
    with pytest.raises(ValueError, match="same tasks"):
        scores.probability_of_improvement(np.zeros((2, 2)), np.zeros((2, 3)))


def test_tasks_with_fewer_runs_count_only_the_runs_they_have():
    nan = np.nan
    matrix = np.array([[1.0, 0.0], [3.0, nan], [5.0, nan]])  # task 1 has one run
    assert scores.mean(matrix) == pytest.approx((1 + 3 + 5 + 0) / 4)
    assert scores.iqm(matrix) == pytest.approx((1 + 3) / 2)  # 4 scores: one cut from each end
    assert scores.median(matrix) == pytest.approx((3.0 + 0.0) / 2)  # task means 3 and 0
    np.testing.assert_allclose(scores.performance_profile(matrix, [0.5]), [0.75])
    rep = scores.stratified_resample(matrix, np.random.default_rng(0))
    assert rep[0, 1] == 0.0 and np.isnan(rep[1:, 1]).all() and set(rep[:, 0]) <= {1.0, 3.0, 5.0}
    y = np.array([[2.0, 1.0], [nan, -1.0]])
    # task 0: 1, 3, 5 against 2: one pair in three lost, two won; task 1: 0 against 1 and -1: one of two won
    assert scores.probability_of_improvement(matrix, y) == pytest.approx((2 / 3 + 1 / 2) / 2)
    point, low, high = scores.bootstrap_ci(matrix, reps=200)
    assert low <= point <= high
