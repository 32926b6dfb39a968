"""SB3 callbacks of ``fl-gym train``: FL metrics to the logger, checkpoints, a progress bar."""

from __future__ import annotations

import warnings
from pathlib import Path

from stable_baselines3.common.callbacks import BaseCallback
from tqdm import tqdm

from fl_gym.agents.ppo import is_whole_model
from fl_gym.atomic import save_atomic
from fl_gym.envs.registry import metrics_for
from fl_gym.training.evaluation import flatten_info


class FLMetricsCallback(BaseCallback):
    """Record the FL metrics of each step's ``info`` under ``fl/<key>`` (mean over the logging window).

    The keys are the env family's table metrics (:func:`fl_gym.envs.registry.metrics_for`) plus
    ``upload_bytes``; a key a step does not report is skipped.
    """

    def __init__(self, env_id: str) -> None:
        super().__init__()
        self.keys = [m.key for m in metrics_for(env_id) if m.key != "return"] + ["upload_bytes"]

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            flat = flatten_info(info)
            for key in self.keys:
                if key in flat:
                    self.logger.record_mean(f"fl/{key}", flat[key])
        return True


class RolloutCheckpoint(BaseCallback):
    """Save the model every ``every`` steps, at the start of a rollout.

    A rollout's start is the one moment when the model has trained on every transition counted
    in ``num_timesteps``, so a run resumed from the checkpoint continues with the same step count
    an uninterrupted run would have. Files are written to a temporary name, then renamed.
    """

    def __init__(self, folder: str | Path, every: int, prefix: str = "model") -> None:
        super().__init__()
        self.folder, self.every, self.prefix = Path(folder), every, prefix
        self._last = 0

    def _init_callback(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._last = self.model.num_timesteps

    def _on_rollout_start(self) -> None:
        steps = self.model.num_timesteps
        if steps - self._last >= self.every:
            save_atomic(self.model, self.folder / f"{self.prefix}_{steps}_steps.zip")
            self._last = steps

    def _on_step(self) -> bool:
        return True


def latest_checkpoint(folder: str | Path, prefix: str = "model") -> tuple[Path, int] | None:
    """The whole checkpoint with the most steps in ``folder`` (a damaged one is passed over), its steps."""
    found = []
    for path in Path(folder).glob(f"{prefix}_*_steps.zip"):
        try:
            steps = int(path.stem.split("_")[-2])
        except ValueError:
            continue
        if is_whole_model(path):
            found.append((steps, path))
        else:
            warnings.warn(f"{path} is damaged (not a whole model file); passed over", stacklevel=2)
    if not found:
        return None
    steps, path = max(found)
    return path, steps


class ProgressBar(BaseCallback):
    """A tqdm bar over the run's total steps (SB3's own bar needs ``rich``)."""

    def __init__(self, total: int, description: str = "") -> None:
        super().__init__()
        self.total, self.description = total, description
        self._bar: tqdm | None = None

    def _on_training_start(self) -> None:
        self._bar = tqdm(total=self.total, initial=self.num_timesteps, desc=self.description, unit="step",
                         dynamic_ncols=True, disable=None)  # None: off when not writing to a terminal

    def _on_step(self) -> bool:
        self._bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()
