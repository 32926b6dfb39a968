"""Benchmark statistics: normalised scores and the aggregate measures of Agarwal et al. (NeurIPS 2021).

A score matrix is ``(runs, tasks)``: one normalised score per independent run (a training seed of
an agent, an evaluation seed group of a fixed policy) and task; a task with fewer runs than the
others has NaN in its missing rows (every statistic reads the runs a task has, and the bootstrap
resamples each task's own runs). The suite is summarised, as
Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (the rliable
library) recommend, by the interquartile mean (IQM) with a 95 % stratified bootstrap confidence
interval (runs resampled with replacement within each task), by performance profiles (the share
of run-task scores above each threshold) and by the probability of improvement ``P(X > Y)``
(the Mann-Whitney statistic per task, averaged over tasks). Written from the paper's definitions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from fl_gym.validation import UserError

Statistic = Callable[[np.ndarray], float]


def normalized_score(value: float, ref_min: float, ref_max: float) -> float:
    """``(value - ref_min) / (ref_max - ref_min)``: 0 at the no-decision default, 1 at the best heuristic.

    Holds for metrics where lower is better too (then ``ref_max < ref_min``).

    Raises:
        ValueError: equal references (the task has no spread to normalise by) or a non-finite one.
    """
    if not (math.isfinite(ref_min) and math.isfinite(ref_max)) or ref_max == ref_min:
        raise UserError(f"normalized_score: expected finite, distinct references, got ref_min={ref_min!r}, "
                         f"ref_max={ref_max!r}")
    return (value - ref_min) / (ref_max - ref_min)


def _present(scores: np.ndarray) -> np.ndarray:
    """Every run-task score (the NaN padding of tasks with fewer runs left out)."""
    flat = np.asarray(scores, np.float64).ravel()
    return flat[~np.isnan(flat)]


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all entries: the mean of the middle half, ``floor(n / 4)`` cut from each end."""
    flat = np.sort(_present(scores))
    if flat.size == 0:
        raise UserError("iqm: expected at least one score, got none")
    cut = flat.size // 4
    return float(flat[cut: flat.size - cut].mean())


def mean(scores: np.ndarray) -> float:
    """Mean of all entries."""
    return float(np.mean(_present(scores)))


def median(scores: np.ndarray) -> float:
    """Median of the per-task means (rliable's median is over tasks of the run-averaged scores)."""
    return float(np.median(np.nanmean(np.asarray(scores, np.float64), axis=0)))


def _check_matrix(scores: np.ndarray, name: str) -> np.ndarray:
    matrix = np.asarray(scores, np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 1 or matrix.shape[1] < 1:
        raise UserError(f"{name}: expected a (runs, tasks) matrix, got shape {matrix.shape}")
    if np.isinf(matrix).any() or np.isnan(matrix).all(axis=0).any():
        raise UserError(f"{name}: expected finite scores (NaN only where a task has fewer runs), got "
                        f"{matrix[~np.isfinite(matrix)][:3].tolist()}")
    return matrix


def stratified_resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One bootstrap replicate: each task's runs drawn with replacement from that task's runs."""
    runs, tasks = scores.shape
    counts = (~np.isnan(scores)).sum(axis=0)
    if (counts == runs).all():
        return np.take_along_axis(scores, rng.integers(runs, size=(runs, tasks)), axis=0)
    out = np.full(scores.shape, np.nan)
    for t, n in enumerate(counts):
        column = scores[~np.isnan(scores[:, t]), t]
        out[:n, t] = column[rng.integers(n, size=n)]
    return out


def bootstrap_ci(scores: np.ndarray, statistic: Statistic = iqm, reps: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """``(point, low, high)``: the statistic and its percentile stratified-bootstrap interval.

    Args:
        scores: ``(runs, tasks)`` normalised scores.
        statistic: of a ``(runs, tasks)`` matrix (:func:`iqm`, :func:`mean`, :func:`median`).
        reps: bootstrap replicates.
        level: the interval's coverage.
        seed: the resampling generator's seed (the interval is reproducible).
    """
    matrix = _check_matrix(scores, "bootstrap_ci")
    if not 0 < level < 1:
        raise UserError(f"bootstrap_ci: expected level in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    values = np.array([statistic(stratified_resample(matrix, rng)) for _ in range(reps)])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return statistic(matrix), float(low), float(high)


def performance_profile(scores: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """``(len(thresholds),)``: the share of run-task scores strictly above each threshold."""
    flat = _present(_check_matrix(scores, "performance_profile"))
    return np.array([(flat > tau).mean() for tau in thresholds])


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``P(X > Y)``: per task the share of run pairs where ``x`` beats ``y`` (ties count half), averaged.

    Args:
        x: ``(runs_x, tasks)`` scores of one method.
        y: ``(runs_y, tasks)`` scores of another, on the same tasks in the same order.
    """
    x, y = _check_matrix(x, "probability_of_improvement"), _check_matrix(y, "probability_of_improvement")
    if x.shape[1] != y.shape[1]:
        raise UserError(f"probability_of_improvement: expected the same tasks, got {x.shape[1]} and "
                        f"{y.shape[1]}")
    beats = (x[:, None, :] > y[None, :, :]) + 0.5 * (x[:, None, :] == y[None, :, :])
    pairs = ~np.isnan(x)[:, None, :] & ~np.isnan(y)[None, :, :]  # the runs each task has
    return float(((beats * pairs).sum(axis=(0, 1)) / pairs.sum(axis=(0, 1))).mean())


def improvement_ci(x: np.ndarray, y: np.ndarray, reps: int = 2000, level: float = 0.95,
                   seed: int = 0) -> tuple[float, float, float]:
    """:func:`probability_of_improvement` with its stratified-bootstrap interval (both methods resampled)."""
    x, y = _check_matrix(x, "improvement_ci"), _check_matrix(y, "improvement_ci")
    rng = np.random.default_rng(seed)
    values = np.array([probability_of_improvement(stratified_resample(x, rng), stratified_resample(y, rng))
                       for _ in range(reps)])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return probability_of_improvement(x, y), float(low), float(high)
