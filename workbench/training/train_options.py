"""The choices a training run offers, for every front end: model presets, what the run trains
for (epochs, minutes, tokens or core_model's automatic budget), the number precision, the
devices and the number of data-parallel processes.

core_model is the one source of the presets and precisions: one added there appears on the
Train page and in the CLI. Their one-line descriptions for people choosing are here, as
message ids (``workbench.messages``: the Train page shows them translated). A new option of a
run is added here once (a keyword of ``training_config``) and then offered by the page and the
CLI.
"""

from __future__ import annotations

from typing import Any

from core_model.training import TrainConfig, TrainingError
from core_model.training import config as core_config
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_

DEFAULT_PRESET: str = TrainConfig.preset  # what a run trains when no preset is given
MAX_TRAIN_MINUTES = 7 * 24 * 60  # a week: longer is a typo, not a plan
# Epochs and optimizer steps beyond these are typos too (the automatic budget, not a huge
# number of epochs, is how a small corpus gets repeated until learned).
MAX_EPOCHS = 10_000
MAX_STEPS = 10**8
# A token budget beyond this is a typo (10^12 tokens is years of CPU training).
MAX_TRAIN_TOKENS = 10**12
# Data-parallel processes a user may ask for (default: timed on the worker's machine,
# core_model.training.layout); more than a big server's cores is a typo.
MAX_PROCESSES = 256
# What a run trains for: core_model's automatic budget, a number of epochs, of minutes, or of
# training tokens (source + target: the same point of learning on any machine).
BUDGETS = {
    "auto": N_("automatic"),
    "epochs": N_("N epochs"),
    "minutes": N_("N minutes"),
    "tokens": N_("N million tokens"),
}
# Budgets for comparing runs across machines rather than for everyday use: a page offers
# them among its advanced options.
ADVANCED_BUDGETS = ("tokens",)
DEFAULT_PRECISION: str = TrainConfig.precision
# One line per precision choice, for people choosing one (the page and `--help` show them).
PRECISION_DESCRIPTIONS = {
    "auto": N_(
        "bf16 where the hardware multiplies bf16 natively and the model is big enough, else fp32"
    ),
    "fp32": N_("full precision: what a CPU without bf16 (AVX2 only) trains in"),
    "bf16": N_("bf16 autocast (emulated, so slower, where the hardware lacks it)"),
}
# One line per preset choice (core_model's PRESET_CHOICES), for people choosing one.
PRESET_DESCRIPTIONS = {
    "auto": N_(
        "picks the size for the corpus and the device: tiny for a demo corpus of a couple of "
        "hundred pairs, small for more (with fewer layers when a CPU's minutes buy it few "
        "tokens), base only on a GPU with a large corpus"
    ),
    "tiny": N_("2+2 layers, d=64: learns a few dozen pairs on a laptop CPU in seconds"),
    "small": N_("3+3 layers, d=256: a small domain on a CPU, or anything on a GPU"),
    "base": N_("6+6 layers, d=512: the paper's base model; wants a GPU and many pairs"),
}


def presets() -> dict[str, str]:
    """The model sizes a run can use, each with its one-line description."""
    return {name: PRESET_DESCRIPTIONS.get(name, "") for name in core_config.PRESET_CHOICES}


def precisions() -> dict[str, str]:
    """The number precisions a run can train in (core_model's list), each with a line."""
    return {name: PRECISION_DESCRIPTIONS.get(name, "") for name in core_config.PRECISIONS}


def available_devices() -> list[str]:
    """The devices this machine can train on, best first."""
    import torch  # here: listing runs needs no torch (`core_model.first_use`)

    return (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]


def _trains_here_on_cpu(device: str) -> bool:
    """A run of `device` trains on this machine's CPU: a worker elsewhere (a shared database)
    may have other cores, and 'auto' takes a GPU where there is one."""
    return settings.database_is_local() and (
        device == "cpu" or (device == "auto" and "cuda" not in available_devices())
    )


def training_config(
    preset: str = DEFAULT_PRESET,
    epochs: int | None = None,
    device: str = "auto",
    *,
    minutes: float | None = None,
    tokens: int | None = None,
    precision: str = DEFAULT_PRECISION,
    processes: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The frozen config of a run (``TrainConfig.to_dict``), every choice checked first.

    Train for ``epochs``, for ``minutes`` of wall-clock time, for ``tokens`` training tokens
    (source + target), or (none of them) core_model's automatic budget (a small corpus is
    repeated until learned). ``precision`` is one of core_model's PRECISIONS. Extra keyword
    arguments are TrainConfig fields. ``processes``: data-parallel processes (None: the
    fastest layout, timed on the worker's machine when the run starts). Anything wrong is one
    ``WorkbenchError`` sentence.
    """
    if preset not in presets():
        raise WorkbenchError(
            N_("Unknown preset {preset!r}; choose one of {choices}."),
            preset=preset,
            choices=", ".join(presets()),
        )
    if precision not in precisions():
        raise WorkbenchError(
            N_("Unknown precision {precision!r}; choose one of {choices}."),
            precision=precision,
            choices=", ".join(precisions()),
        )
    if sum(b is not None for b in (epochs, minutes, tokens)) > 1:
        raise WorkbenchError(N_("Train for a number of epochs, of minutes or of tokens: only one."))
    if epochs is not None and epochs < 1:
        raise WorkbenchError(N_("Epochs must be at least 1 (or empty for the automatic budget)."))
    if epochs is not None and epochs > MAX_EPOCHS:
        raise WorkbenchError(N_("Epochs must be at most {most}."), most=f"{MAX_EPOCHS:,}")
    max_steps = overrides.get("max_steps")
    if max_steps is not None and not (
        isinstance(max_steps, int)
        and not isinstance(max_steps, bool)
        and 1 <= max_steps <= MAX_STEPS
    ):
        raise WorkbenchError(
            N_("The step limit must be a whole number from 1 to {most}."), most=f"{MAX_STEPS:,}"
        )
    if minutes is not None:
        if not 0 < minutes <= MAX_TRAIN_MINUTES:  # also rejects NaN
            raise WorkbenchError(
                N_("Minutes must be more than 0 and at most {most} (a week)."),
                most=f"{MAX_TRAIN_MINUTES:,}",
            )
        overrides["time_budget_s"] = float(minutes) * 60
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise WorkbenchError(
                N_("Tokens must be a whole number, got {tokens!r}."), tokens=tokens
            )
        if not 0 < tokens <= MAX_TRAIN_TOKENS:
            raise WorkbenchError(
                N_("Tokens must be more than 0 and at most {most}."), most=f"{MAX_TRAIN_TOKENS:,}"
            )
        overrides["token_budget"] = tokens
    if processes is not None:
        if isinstance(processes, bool) or not isinstance(processes, int):
            raise WorkbenchError(
                N_("Processes must be a whole number, got {processes!r}."), processes=processes
            )
        if not 1 <= processes <= MAX_PROCESSES:
            raise WorkbenchError(
                N_("Processes must be at least 1 and at most {most}."), most=MAX_PROCESSES
            )
        overrides["processes"] = processes
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise WorkbenchError(N_("Unknown device {device!r}; use auto, cpu or cuda."), device=device)
    if (
        device.startswith("cuda")
        and "cuda" not in available_devices()
        and settings.database_is_local()
    ):
        raise WorkbenchError(N_("No CUDA GPU on this machine: train on cpu (or auto)."))
    if processes is not None and _trains_here_on_cpu(device):
        # (imports torch, only when processes are asked for: see available_devices)
        from core_model.training.parallel import cpu_cores

        if processes > (cores := cpu_cores()):
            # each rank wants a core of its own: more share them and wait for each other at
            # every step (8 on 2 cores trained 13 times slower than 1)
            raise WorkbenchError(
                N_(
                    "{processes} training processes are more than this machine's CPU cores "
                    "({cores}): on a CPU, at most one process per core."
                ),
                processes=processes,
                cores=cores,
            )
    try:
        return TrainConfig(
            preset=preset, epochs=epochs, device=device, precision=precision, **overrides
        ).to_dict()
    except (TypeError, TrainingError) as exc:
        raise WorkbenchError(N_("Invalid training option: {error}"), error=str(exc)) from None
