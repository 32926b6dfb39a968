"""PNG plots of per-round metrics (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fl_gym.atomic import write_via  # noqa: E402


def plot_xy(lines: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str, title: str,
            path: str | Path, logx: bool = False) -> Path:
    """One line per label through its ``(x, y)`` points; written atomically."""
    fig, ax = plt.subplots(figsize=(7, 4))
    shown = legend_labels({label: y for label, (_, y) in lines.items()})
    for label, (x, y) in lines.items():
        ax.plot(x, y, marker=".", label=shown[label])
    return _finish(fig, ax, xlabel, ylabel, title, path, logx, [y for _, y in lines.values()])


def plot_bands(lines: dict[str, tuple[list[float] | None, dict[str, list[float]]]], xlabel: str, ylabel: str,
               title: str, path: str | Path, logx: bool = False) -> Path:
    """One mean line per label with a ±1 std band; ``x`` None = rounds 1..n; written atomically."""
    fig, ax = plt.subplots(figsize=(7, 4))
    shown = legend_labels({label: stats["mean"] for label, (_, stats) in lines.items()})
    for label, (x, stats) in lines.items():
        mean, std = np.asarray(stats["mean"], float), np.asarray(stats["std"], float)
        xs = np.arange(1, len(mean) + 1) if x is None else np.asarray(x[: len(mean)], float)
        keep = ~np.isnan(mean)
        (line,) = ax.plot(xs[keep], mean[keep], marker="." if keep.sum() < 40 else None, label=shown[label])
        ax.fill_between(xs[keep], (mean - std)[keep], (mean + std)[keep], color=line.get_color(), alpha=0.2)
    if all(x is None for x, _ in lines.values()):  # rounds: no tick between two of them
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _finish(fig, ax, xlabel, ylabel, title, path, logx, [s["mean"] for _, s in lines.values()])


def legend_labels(series: dict[str, list[float]]) -> dict[str, str]:
    """Each label, with ``(= other)`` where its values equal an earlier line's, which it hides."""
    shown, seen = {}, []
    for label, values in series.items():
        values = np.asarray(values, float)
        twin = next((other for other, v in seen if v.shape == values.shape
                     and np.array_equal(v, values, equal_nan=True)), None)
        shown[label] = label if twin is None else f"{label} (= {twin})"
        seen.append((label, values))
    return shown


def _log_scale(series: list[list[float]]) -> bool:
    """Whether positive values span more than 100x: one line would flatten the others."""
    values = np.concatenate([np.asarray(v, float).ravel() for v in series]) if series else np.zeros(0)
    values = values[np.isfinite(values)]
    return bool(len(values) and values.min() > 0 and values.max() > 100 * values.min())


def plot_histogram(histogram: np.ndarray, title: str, path: str | Path) -> Path:
    """Stacked bars: samples per class for each client."""
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(histogram)), 4))
    bottom = np.zeros(len(histogram))
    cmap = plt.get_cmap("tab20")
    for c in range(histogram.shape[1]):
        ax.bar(np.arange(len(histogram)), histogram[:, c], bottom=bottom, color=cmap(c % 20), label=str(c))
        bottom += histogram[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("samples")
    ax.set_title(title)
    if histogram.shape[1] <= 20:
        ax.legend(title="class", fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    return _save(fig, path)


def _finish(fig, ax, xlabel: str, ylabel: str, title: str, path: str | Path, logx: bool,
            series: list[list[float]]) -> Path:
    """Label, grid and legend a line plot (a log y axis where values span over 100x), then save it."""
    if logx:
        ax.set_xscale("log")
    if _log_scale(series):
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    written = write_via(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)
    return written
