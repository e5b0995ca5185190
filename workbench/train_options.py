"""The choices a training run offers, for every front end: model presets, what the run trains
for (epochs, minutes or core_model's automatic budget), and the devices.

core_model is the one source of the presets: one added there appears on the Train page and
in the CLI. A new option of a run is added here once (a keyword of ``training_config``) and
then offered by the page and the CLI.
"""

from __future__ import annotations

from typing import Any

import torch

from core_model.training import TrainConfig, TrainingError
from core_model.training import config as core_config
from workbench import settings
from workbench.errors import WorkbenchError

DEFAULT_PRESET: str = TrainConfig.preset  # what a run trains when no preset is given
MAX_TRAIN_MINUTES = 7 * 24 * 60  # a week: longer is a typo, not a plan
# What a run trains for: core_model's automatic budget, a number of epochs, or of minutes.
BUDGETS = {"auto": "automatic", "epochs": "N epochs", "minutes": "N minutes"}


def presets() -> dict[str, str]:
    """The model sizes a run can use, each with its one-line description."""
    descriptions = core_config.PRESET_DESCRIPTIONS
    return {name: descriptions.get(name, "") for name in core_config.PRESET_CHOICES}


def available_devices() -> list[str]:
    """The devices this machine can train on, best first."""
    return (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]


def training_config(
    preset: str = DEFAULT_PRESET,
    epochs: int | None = None,
    device: str = "auto",
    *,
    minutes: float | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The frozen config of a run (``TrainConfig.to_dict``), every choice checked first.

    Train for ``epochs``, or for ``minutes`` of wall-clock time, or (neither) core_model's
    automatic budget (a small corpus is repeated until learned). Extra keyword arguments are
    TrainConfig fields. Anything wrong is one ``WorkbenchError`` sentence.
    """
    if preset not in presets():
        raise WorkbenchError(f"Unknown preset {preset!r}; choose one of {', '.join(presets())}.")
    if epochs is not None and minutes is not None:
        raise WorkbenchError("Train for a number of epochs or of minutes, not both.")
    if epochs is not None and epochs < 1:
        raise WorkbenchError("Epochs must be at least 1 (or empty for the automatic budget).")
    if minutes is not None:
        if not 0 < minutes <= MAX_TRAIN_MINUTES:  # also rejects NaN
            raise WorkbenchError(
                f"Minutes must be more than 0 and at most {MAX_TRAIN_MINUTES:,} (a week)."
            )
        overrides["time_budget_s"] = float(minutes) * 60
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise WorkbenchError(f"Unknown device {device!r}; use auto, cpu or cuda.")
    if (
        device.startswith("cuda")
        and "cuda" not in available_devices()
        and settings.database_is_local()
    ):
        raise WorkbenchError("No CUDA GPU on this machine: train on cpu (or auto).")
    try:
        return TrainConfig(preset=preset, epochs=epochs, device=device, **overrides).to_dict()
    except (TypeError, TrainingError) as exc:
        raise WorkbenchError(f"Invalid training option: {exc}") from None
