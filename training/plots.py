"""PNG plots of per-round metrics (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fl_gym.atomic import write_via  # noqa: E402


def plot_xy(lines: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str, title: str,
            path: str | Path, logx: bool = False) -> Path:
    """One line per label through its ``(x, y)`` points; written atomically."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (x, y) in lines.items():
        ax.plot(x, y, marker=".", label=label)
    return _finish(fig, ax, xlabel, ylabel, title, path, logx)


def plot_bands(lines: dict[str, tuple[list[float] | None, dict[str, list[float]]]], xlabel: str, ylabel: str,
               title: str, path: str | Path, logx: bool = False) -> Path:
    """One mean line per label with a ±1 std band; ``x`` None = rounds 1..n; written atomically."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (x, stats) in lines.items():
        mean, std = np.asarray(stats["mean"], float), np.asarray(stats["std"], float)
        xs = np.arange(1, len(mean) + 1) if x is None else np.asarray(x[: len(mean)], float)
        keep = ~np.isnan(mean)
        (line,) = ax.plot(xs[keep], mean[keep], marker="." if keep.sum() < 40 else None, label=label)
        ax.fill_between(xs[keep], (mean - std)[keep], (mean + std)[keep], color=line.get_color(), alpha=0.2)
    return _finish(fig, ax, xlabel, ylabel, title, path, logx)


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


def _finish(fig, ax, xlabel: str, ylabel: str, title: str, path: str | Path, logx: bool) -> Path:
    """Label, grid and legend a line plot, then save it."""
    if logx:
        ax.set_xscale("log")
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
