"""The Inspect page's service: which training step a version's weights come from, and its
refusals (each one line, before any model is loaded)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pandas as pd
import pytest

from workbench.errors import WorkbenchError
from workbench.evaluation import inspection
from workbench.models.registry import VersionInfo
from workbench.training import metric_rows

VERSION = VersionInfo(
    id=1, name="v", notes="", run_id=1, corpus_id=1, corpus_name="c", src_lang="zh",
    tgt_lang="en", param_count=1, device="cpu", train_pair_count=1, train_seconds=1.0,
    parent_version_id=None, train_tokens=0, cumulative_tokens=0, cumulative_seconds=0.0,
    metrics={"steps": 300, "best_epoch": 2, "selected": "last"}, sha256="", artifact_path="",
    created_at=datetime(2026, 1, 1),
)  # fmt: skip


def _rows() -> pd.DataFrame:
    rows = [
        {"kind": "step", "step": 50, "epoch": 1, "train_loss": 3.0},
        {"kind": "epoch", "step": 100, "epoch": 1, "valid_loss": 2.5},
        {"kind": "epoch", "step": 200, "epoch": 2, "valid_loss": 2.0},
        {"kind": "epoch", "step": 300, "epoch": 3, "valid_loss": 2.2},
    ]
    return pd.DataFrame(rows).reindex(columns=metric_rows.METRIC_COLUMNS)


@pytest.mark.parametrize(
    ("selected", "step", "note"),
    [
        ("last", 300, "the run's last weights"),
        ("best", 200, "the weights of the best epoch (2)"),
        ("average_last_5", 300, "the average of 5 snapshots"),
    ],
)
def test_the_step_a_version_comes_from(selected: str, step: int, note: str) -> None:
    info = replace(VERSION, metrics={**VERSION.metrics, "selected": selected})
    found, said = inspection.version_step(info, _rows())
    assert found == step and said.startswith(note)


def test_a_version_without_selection_record_is_its_last_step() -> None:
    info = replace(VERSION, metrics={"steps": 40})
    assert inspection.version_step(info, _rows().iloc[:0]) == (40, "the run's last weights")


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("", {}, "Type a sentence to inspect (the text is empty)."),
        (" \n ", {}, "Type a sentence to inspect (the text is empty)."),
        ("你好", {"beam": 0}, "Beam size must be between 1 and 16."),
        ("你好", {"padding": 17}, "Padding must be between 0 and 16 positions."),
    ],
)
def test_bad_requests_are_one_line(text: str, options: dict, message: str) -> None:
    with pytest.raises(WorkbenchError) as err:
        inspection.inspect(12345, text, **options)  # refused before the version is looked up
    assert str(err.value) == message
