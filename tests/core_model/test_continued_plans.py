"""Issue 37 item 3: the plan of a continued run is measured on the model it trains, and early
stopping cannot end a run in its first quarter nor while its validation loss still falls.

Real training of tiny models; nothing here depends on the machine's speed: the assertions
are relationships (the calibrated parameters are the parent's, passes = tokens / corpus
tokens, tokens = 0.9 x seconds x the measured tokens/s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.marian_checkpoint import save_random_marian, toy_pairs
from core_model.artifact import load_model
from core_model.marian import convert_marian
from core_model.training import TrainConfig, train
from core_model.training.calibration import Calibration
from core_model.training.layout import choose_layout
from core_model.training.recipe import RUN_SHARE_OF_CALIBRATION, CorpusFacts
from core_model.training.selection import (
    EARLY_STOP_MIN_SHARE,
    LOSS_FALLING_CHECKS,
    Selector,
    loss_falling,
)
from core_model.training.state import TrainerState

PAIRS = toy_pairs(80, 3)
VALID = toy_pairs(20, 4)


def _workbench_version(folder: Path) -> Path:
    """A tiny model of ours, trained for a few steps (its own tokenizer and size)."""
    cfg = TrainConfig(preset="tiny", max_steps=5, epochs=1, precision="fp32", device="cpu")
    train(PAIRS, None, cfg, out_dir=folder)
    return folder


def _marian_version(folder: Path) -> Path:
    """A tiny random Marian checkpoint opened as a model folder of ours."""
    checkpoint = save_random_marian(folder.parent / "hf" / "opus-mt-zh-en", d_model=48)
    convert_marian(checkpoint, folder)
    return folder


@pytest.mark.parametrize("make_parent", [_workbench_version, _marian_version])
def test_a_continued_runs_plan_is_measured_on_the_parents_model(
    make_parent, tmp_path: Path
) -> None:
    parent = make_parent(tmp_path / "parent")
    parameters = load_model(parent).model.num_parameters()
    # the preset asked for ("small") is not what a continued run trains: its parent's model is
    cfg = TrainConfig(preset="small", time_budget_s=3, precision="fp32", device="cpu")
    result = train(PAIRS, VALID, cfg, init_from=parent)
    m = result.metrics
    calibration = m["calibration"]
    assert calibration["parameters"] == parameters == m["parameters"]
    assert calibration["tokens_per_s"] > 0
    projected = Calibration(**calibration).tokens_in(3) * RUN_SHARE_OF_CALIBRATION
    assert m["pace"]["budget_tokens_at_start"] == int(projected)  # before any re-plan
    corpus_tokens = CorpusFacts.of(PAIRS, VALID).tokens
    assert m["budget_passes"] == pytest.approx(m["budget_tokens"] / corpus_tokens, abs=0.01)
    assert m["budget_passes"] > 0
    # the worker's layout choice times the same model (one process asked for: timed once)
    asked = TrainConfig(time_budget_s=120, processes=1, precision="fp32", device="cpu")
    choice = choose_layout(asked, PAIRS, VALID, init_from=parent, cores=2)
    assert choice.speed is not None and choice.speed.parameters == parameters


def _state(losses: list[float], bad_epochs: int) -> TrainerState:
    state = TrainerState()
    state.history = [{"epoch": i + 1, "valid_loss": v, "bleu": 0.0} for i, v in enumerate(losses)]
    state.epoch, state.bad_epochs = len(losses), bad_epochs
    return state


def test_early_stopping_waits_for_a_quarter_of_the_budget_and_a_flat_loss() -> None:
    """BLEU unmoved for `patience` checks (bad_epochs 5): a falling validation loss early in
    the budget goes on; so does a falling one late, and a flat one early; a flat or rising
    loss late stops."""
    selector = Selector("bleu", use_validation=True, keep_last=0)
    falling = [3.0, 2.9, 2.8, 2.7, 2.6, 2.5]
    flat = [3.0, 2.5, 2.5, 2.5, 2.5, 2.5]
    rising = [3.0, 2.5, 2.6, 2.7, 2.8, 2.9]
    early, late = EARLY_STOP_MIN_SHARE / 2, 0.6
    assert not selector.should_stop(_state(falling, 5), 5, early)  # the reported run
    assert not selector.should_stop(_state(falling, 5), 5, late)
    assert not selector.should_stop(_state(flat, 5), 5, early)
    assert selector.should_stop(_state(flat, 5), 5, late)
    assert selector.should_stop(_state(rising, 5), 5, EARLY_STOP_MIN_SHARE)
    # the score's patience still comes first, and none, or no validation, never stops
    assert not selector.should_stop(_state(flat, 4), 5, late)
    assert not selector.should_stop(_state(flat, 5), None, late)
    assert not Selector("bleu", False, 0).should_stop(_state(flat, 5), 5, late)


def test_a_new_low_within_the_last_checks_is_a_falling_loss() -> None:
    records = [{"valid_loss": v} for v in (3.0, 2.0, 2.1, 2.2)]
    assert loss_falling(records, 3)  # 2.0 was a new low two checks ago
    assert not loss_falling(records, 2)
    assert not loss_falling(records[:1], LOSS_FALLING_CHECKS)  # one check: nothing to fall from
    assert not loss_falling([], LOSS_FALLING_CHECKS)
    assert loss_falling([{"valid_loss": 3.0}, {"valid_loss": float("nan")}, {"valid_loss": 2.0}])
