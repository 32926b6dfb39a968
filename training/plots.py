"""PNG plots of per-round metrics (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fl_gym.training.atomic import write_via  # noqa: E402


def plot_series(series: dict[str, list[float]], ylabel: str, title: str, path: str | Path) -> Path:
    """One line per label over rounds 1..n; written atomically."""
    lines = {label: (list(range(1, len(v) + 1)), v) for label, v in series.items()}
    return plot_xy(lines, "round", ylabel, title, path)


def plot_xy(lines: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str, title: str,
            path: str | Path, logx: bool = False) -> Path:
    """One line per label through its ``(x, y)`` points; written atomically."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, (x, y) in lines.items():
        ax.plot(x, y, marker=".", label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


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


def _save(fig, path: str | Path) -> Path:
    written = write_via(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)
    return written
