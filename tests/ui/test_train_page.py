"""The Train page under AppTest: starting runs, budgets, continuing, the live panel and history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core_model.training.parallel import cpu_cores
from core_model.training.trainer import MAX_RESERVE_SHARE
from tests.helpers import cli_in_process, train_version
from tests.ui.pages import Trained, assert_clean, open_page, texts
from ui import formatting, train_page
from workbench import settings
from workbench.corpus import corpora, demo, pairs
from workbench.models import model_import, registry
from workbench.training import run_info, runs, train_options, worker_process


def test_train_start_and_cancel_a_run(populated: Trained, no_worker: None) -> None:
    at = open_page("train")
    history = at.dataframe[-1].value
    assert set(history["status"]) == {"succeeded"}

    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert run.status == "queued" and run.config["preset"] == train_options.DEFAULT_PRESET
    assert run.config["epochs"] is None, "epochs default to the automatic budget"
    assert run.config["time_budget_s"] is None
    assert f"Run #{run.id} queued" in texts(at.success)
    assert f"Run #{run.id}" in texts(at.markdown)

    at.button(key=f"cancel_{run.id}").click().run()
    assert_clean(at)
    assert run_info.get_run(run.id).status == "cancelled"


def test_train_defaults_to_continuing_the_newest_version(
    populated: Trained, no_worker: None
) -> None:
    """The newest version of the corpus covers it: the default is to continue it, and a new
    model is one click away."""
    at = open_page("train")
    start = at.radio(key=f"train_start_{populated.corpus_id}")
    newest = populated.version_ids[0]
    assert start.value == newest
    assert start.options[:2] == [f"Continue from #{newest}", "Start a new model"]
    assert at.button(key="train_button").label == f"Continue from #{newest}"
    assert f"Version #{newest} was trained on this corpus" in texts(at.caption)
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert run.init_version_id == newest
    runs.cancel_run(run.id)


def test_train_starts_a_new_model_when_the_tokenizer_no_longer_fits(
    populated: Trained, no_worker: None
) -> None:
    """A corpus whose newest version's tokenizer cannot write most of its characters (here a
    copy of a demo version linked to a corpus in another script): 'Start a new model' is
    the default and the page says why."""
    greek = corpora.create_corpus("greek letters", "zh", "en")
    added = [{"source": f"αβγδεζηθ {i}", "target": f"letters {i}"} for i in range(25)]
    pairs.apply_edits(greek.id, added=added)
    copy = model_import.import_version(
        registry.artifact_dir(populated.version_ids[0]), corpus="greek letters"
    )
    try:
        at = open_page("train")
        at.selectbox(key="train_corpus").select(greek.id).run()
        start = at.radio(key=f"train_start_{greek.id}")
        assert start.value == train_page.NEW_MODEL and start.options[0] == "Start a new model"
        assert at.button(key="train_button").label == "Train"
        assert f"The tokenizer of version #{copy} knows only" in texts(at.caption)
        assert "(continuing needs 99.0 %)" in texts(at.caption)
        at.button(key="train_button").click().run()
        run = run_info.list_runs()[0]
        assert run.init_version_id is None
        runs.cancel_run(run.id)
        runs.delete_run(run.id)
    finally:
        registry.delete_version(copy)
        corpora.delete_corpus(greek.id)


def test_the_start_follows_a_version_that_appears_while_the_page_is_open(
    populated: Trained, no_worker: None
) -> None:
    """Issue 30 item 9: the page was open on a corpus without a version ("Start a new
    model"); once a run of it registers a version (the live panel reruns the page), the start
    is "Continue from #N", the button says so, and so does the caption under it."""
    tea = corpora.create_corpus("tea again", "zh", "en")
    rows = [line.split("\t") for line in demo.DEMO_FILE.read_text(encoding="utf-8").splitlines()]
    learned = [{"source": r[0], "target": r[1]} for r in rows if r[-1] == "train"]
    pairs.apply_edits(tea.id, added=learned[:20])  # what the demo versions learned
    at = open_page("train")
    at.selectbox(key="train_corpus").select(tea.id).run()
    key = f"train_start_{tea.id}"
    assert at.radio(key=key).value == train_page.NEW_MODEL
    assert at.button(key="train_button").label == "Train"
    version = model_import.import_version(
        registry.artifact_dir(populated.version_ids[0]), corpus="tea again"
    )
    try:
        at.run()  # what the live panel does when the run ends
        assert_clean(at)
        assert at.radio(key=key).value == version
        assert at.button(key="train_button").label == f"Continue from #{version}"
        assert f"Version #{version} was trained on this corpus" in texts(at.caption)
        # a start the user picked stays picked
        at.radio(key=key).set_value(train_page.NEW_MODEL).run()
        at.run()
        assert at.radio(key=key).value == train_page.NEW_MODEL
        assert at.button(key="train_button").label == "Train"
        assert "the run builds on what it learned" not in texts(at.caption)
    finally:
        registry.delete_version(version)
        corpora.delete_corpus(tea.id)


def test_train_with_options(populated: Trained, no_worker: None) -> None:
    at = open_page("train")
    assert not [n for n in at.number_input if n.key in ("train_epochs", "train_minutes")]
    at.button_group(key="train_for").set_value("epochs").run()
    at.number_input(key="train_epochs").set_value(3)
    older = populated.version_ids[1]
    at.radio(key=f"train_start_{populated.corpus_id}").set_value(older)
    at.number_input(key="train_max_steps").set_value(10)
    at.run()
    assert at.button(key="train_button").label == f"Continue from #{older}"
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["epochs"], run.config["max_steps"]) == (3, 10)
    assert run.init_version_id == older
    runs.cancel_run(run.id)

    at.radio(key=f"train_start_{populated.corpus_id}").set_value(train_page.NEW_MODEL).run()
    assert at.button(key="train_button").label == "Train"
    at.button(key="train_button").click().run()
    assert run_info.list_runs()[0].init_version_id is None
    runs.cancel_run(run_info.list_runs()[0].id)

    at.button_group(key="train_for").set_value("minutes").run()
    at.number_input(key="train_minutes").set_value(5.0)
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["time_budget_s"], run.config["epochs"]) == (300, None)
    runs.cancel_run(run.id)


def test_train_offers_a_token_budget_and_every_precision(
    populated: Trained, no_worker: None
) -> None:
    """Issue 20: "Train for: N million tokens" under Advanced, and core_model's precisions;
    a second budget beside it is one error line and queues nothing."""
    from core_model.training import config

    at = open_page("train")
    tokens = at.number_input(key="train_million_tokens")
    assert (tokens.label, tokens.value) == ("Train for: N million tokens", None)
    precision = at.selectbox(key="train_precision")
    assert (precision.options, precision.value) == (list(config.PRECISIONS), "auto")
    tokens.set_value(1.1)
    precision.select("fp32")
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["token_budget"], run.config["precision"]) == (1_100_000, "fp32")
    assert (run.config["epochs"], run.config["time_budget_s"], run.budget) == (
        None,
        None,
        "1.1M tokens",
    )
    assert f"Run #{run.id}" in texts(at.markdown) and "budget: 1.1M tokens" in texts(at.markdown)
    runs.cancel_run(run.id)

    at.button_group(key="train_for").set_value("minutes").run()
    at.button(key="train_button").click().run()
    assert_clean(at)
    assert "epochs, of minutes or of tokens: only one" in texts(at.error)
    assert run_info.list_runs()[0].id == run.id


def test_live_panel_shows_threads_only_once_known(populated: Trained, no_worker: None) -> None:
    """An untimed one-process run chooses its threads at its start: until its pace reports
    them the panel shows the process count alone, never a dash for the threads."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)
    layout = {"processes": 1, "threads_per_process": None, "layout_timings": []}
    try:
        with session_scope() as s:
            s.get(TrainingRun, run_id).progress_detail = {"fraction": 0.3, "layout": layout}
        at = open_page("train")
        assert "1 (training processes)" in texts(at.caption)
        assert "—" not in run_info.get_run(run_id).layout
        with session_scope() as s:
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.3,
                "layout": layout,
                "pace": {"threads": 2},
            }
        at = open_page("train")
        assert "1 × 2 (training processes × threads each)" in texts(at.caption)
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_live_panel_follows_the_tokens_of_a_token_budget(
    populated: Trained, no_worker: None
) -> None:
    """Under a token budget the bar and its text follow the tokens trained, not steps."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id, tokens=1_100_000)
    try:
        with session_scope() as s:
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.5,
                "limit": "tokens",
                "elapsed_s": 60.0,
            }
        at = open_page("train")
        assert at.progress[0].value == 50
        assert at.progress[0].text == "550k of 1.1M tokens · step 50 of about 200 · 50 %"
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_a_minutes_run_on_the_demo_corpus_says_the_clock_ended_it(
    wb_home: Path, no_worker: None
) -> None:
    """Issue 19 item 4: "Train for 2 minutes" on the demo corpus ended long before its time
    with "finished its planned epochs". A real worker trains a minutes run (a small automatic
    step count that used to end it); the clock ends it, and every page says so."""

    info = demo.ensure_demo_corpus()
    assert info is not None
    run_id, version_id = train_version(
        info.id, preset="tiny", minutes=0.1, min_steps=20, adaptive_passes=1
    )
    run = run_info.get_run(run_id)
    assert (run.stop_reason, run.stopped_because) == ("time_budget", "time budget reached")
    # the clock, not the steps, ended it: the 6 s budget less at most the share it keeps
    # for the final validation and averaging (which count in the budget too)
    assert registry.get_version(version_id).metrics["train_time_s"] >= 6.0 * (1 - MAX_RESERVE_SHARE)

    at = open_page("train")
    said = texts(at.success) + texts(at.caption)
    assert f"stopped at step {run.progress_step:,}: time budget reached." in said
    assert "epoch" not in said
    assert at.dataframe[-1].value.set_index("run").loc[run_id, "stopped because"] == (
        "time budget reached"
    )
    at = open_page("models")
    assert "**stopped because** time budget reached" in texts(at.markdown)


def test_the_page_offers_every_preset_of_core_model(
    populated: Trained, no_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import add_preset

    add_preset(monkeypatch, "micro")
    at = open_page("train")
    assert "micro" in at.button_group(key="train_preset").options[-1]


def _fake_running_run(corpus_id: int, **enqueue: Any) -> int:
    """A run as a worker leaves it mid-training: progress on the row, metric rows streamed."""
    from db.tables import RunMetric, TrainingRun, utcnow
    from workbench.storage import session_scope

    run_id = runs.enqueue_training(corpus_id, preset="tiny", **enqueue)
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        run.status, run.heartbeat_at, run.attempts = "running", utcnow(), 1
        run.progress_step, run.progress_total, run.eta_s = 50, 200, 75.0
        run.progress_detail = {
            "fraction": 0.3,
            "limit": "steps",
            "watch": {"rule": "memorise", "reproduced": 0.75, "pairs": 41},
        }
        for kind, step, loss, valid in (  # as a worker writes them (issue 30 item 10)
            ("loss", 10, 5.0, None),
            ("step", 20, None, None),  # the clock's progress row: no loss
            ("loss", 30, 4.0, None),
            ("epoch", 50, 3.2, 4.5),
        ):
            s.add(
                RunMetric(
                    run_id=run_id, kind=kind, step=step, epoch=1, train_loss=loss,
                    valid_loss=valid, lr=1e-3, tokens_per_s=1500.0,
                )
            )  # fmt: skip
    return run_id


def test_live_panel_shows_progress_against_what_will_end_the_run(
    populated: Trained, no_worker: None
) -> None:
    """A run that may stop early (here: once it reproduces its training pairs) shows its step
    budget as an upper bound, the rule and how close it is; under a time budget the bar
    follows the clock."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)  # the automatic budget
    try:
        at = open_page("train")
        assert at.progress[0].value == 30  # the share of the budget, not 50 / 200
        assert at.progress[0].text == "step 50 of at most 200 · 30 %"
        captions = texts(at.caption)
        assert "Stops early once it reproduces every training pair: 75% of 41 now." in captions
        assert "44 pairs in the snapshot (training + validation)" in captions
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["ETA"] == "≤ 1 min 15 s"
        assert metrics["Tokens / s"] == "1,500"
        assert metrics["Training loss"] == "4.000"  # the latest point, not the epoch's mean
        assert metrics["Validation loss"] == "4.500"

        with session_scope() as s:  # its clock binds: 90 s are 30 % of its 5-minute ceiling
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.3,
                "limit": "time",
                "elapsed_s": 90.0,
            }
        at = open_page("train")
        assert at.progress[0].text == "1 min 30 s of 5 min 00 s · step 50 of about 200 · 30 %"
        assert {m.label: m.value for m in at.metric}["ETA"] == "1 min 15 s"

        with session_scope() as s:  # it trains slower than calibrated, a core is taken
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.3,
                "limit": "time",
                "elapsed_s": 90.0,
                "pace": {
                    "planned_tokens_per_s": 5_000.0,
                    "replans": [{"elapsed_s": 60.0, "real_tokens_per_s": 3_000.0}],
                    "thread_changes": [{"threads": 1, "why": "slowed down"}],
                },
            }
        captions = texts(open_page("train").caption)
        assert (
            "At 60 s this machine had trained 40 % slower than measured at the start (3,000 "
            "instead of 5,000 tokens/s): the plan was adjusted." in captions
        )
        assert "Steps slowed down (another program is using a core): training goes on" in captions
        at.button(key=f"cancel_{run_id}").click().run()
        assert run_info.get_run(run_id).cancel_requested
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_the_panel_shows_one_steady_speed_beside_the_re_plan(
    populated: Trained, no_worker: None
) -> None:
    """A 'Tokens / s' tile of the latest window's speed (370 → 15,501 within a minute) beside
    a re-plan that named 4,754: the tile shows the run's average (the trainer's pace, the same
    for every refresh between reports), and the re-plan says when its speed was measured."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)  # its rows' latest window: 1,500 tokens/s
    try:
        with session_scope() as s:
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.6,
                "limit": "time",
                "elapsed_s": 72.0,
                "pace": {
                    "planned_tokens_per_s": 12_887.3,
                    "real_tokens_per_s": 7_966.0,
                    "replans": [{"elapsed_s": 60.0, "real_tokens_per_s": 4_753.8}],
                },
            }
        at = open_page("train")
        tile = next(m for m in at.metric if m.label == "Tokens / s")
        assert tile.value == "7,966"
        assert "average since this attempt started" in tile.help
        assert (
            "At 60 s this machine had trained 63 % slower than measured at the start (4,754 "
            "instead of 12,887 tokens/s): the plan was adjusted." in texts(at.caption)
        )
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_the_layout_line_names_the_precision_trained_and_who_chose_it(
    populated: Trained, no_worker: None
) -> None:
    """Attempt 2 timed bf16 fastest (5,982 tokens/s) but trained fp32, kept from attempt 1:
    the panel names the precision that trains and says an earlier attempt chose it."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)
    timings = [
        {"processes": 1, "threads": 2, "precision": "bf16", "tokens_per_s": 5_982.4},
        {"processes": 1, "threads": 2, "precision": "fp32", "tokens_per_s": 4_940.2},
        {"processes": 1, "threads": 2, "precision": "bf16", "tokens_per_s": 6_001.0},
    ]  # the layouts of a second round are named once, with each round's speed
    layout = {"processes": 1, "threads_per_process": 2, "layout_timings": timings}
    try:
        for kept, words in (
            (False, "Trains in fp32."),
            (True, "Trains in fp32, as the first attempt chose it: a resumed run keeps its plan"),
        ):
            with session_scope() as s:
                s.get(TrainingRun, run_id).progress_detail = {
                    "fraction": 0.3,
                    "layout": layout,
                    "pace": {"precision": "fp32", "calibration_kept": kept},
                }
            captions = texts(open_page("train").caption)
            timed = "timed at the start: 1×2 bf16 5,982 / 6,001 · 1×2 fp32 4,940 tokens/s"
            assert timed in captions
            assert words in captions
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_a_silent_worker_is_said_long_before_the_heartbeat_timeout(
    populated: Trained, no_worker: None
) -> None:
    """A killed worker's card kept "running · ETA 46 s · Tokens / s 1,043" for ~90 s: once
    no update came for SILENT_AFTER_S the card says so, and where the run would resume."""
    from datetime import timedelta

    from db.tables import TrainingRun, utcnow
    from ui import live_runs
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)
    try:
        assert not texts(open_page("train").warning)  # a fresh heartbeat: nothing to say
        with session_scope() as s:
            s.get(TrainingRun, run_id).heartbeat_at = utcnow() - timedelta(
                seconds=live_runs.SILENT_AFTER_S + 20
            )
        warning = texts(open_page("train").warning)
        assert "No update from the worker for 3" in warning  # 30 s (and a little more)
        # its epoch row at step 50 says where its checkpoint is, wherever the worker's disk
        # is (none on this machine: a worker elsewhere keeps them on its own)
        assert "resumes from step 50, its last checkpoint" in warning
        assert run_info.get_run(run_id).status == "running"  # not yet taken for dead
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_live_tiles_of_a_run_of_short_epochs(populated: Trained, no_worker: None) -> None:
    """Epochs shorter than the progress interval leave no 'step' row: the tiles show the latest
    loss and the speed its epoch ends measured (issue 30 item 10), not "—"."""
    from sqlalchemy import delete

    from db.tables import RunMetric, TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)
    try:
        with session_scope() as s:
            s.execute(delete(RunMetric).where(RunMetric.run_id == run_id, RunMetric.kind == "step"))
        at = open_page("train")
        metrics = {m.label: m.value for m in at.metric}
        assert (metrics["Tokens / s"], metrics["Training loss"]) == ("1,500", "4.000")
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_history_says_why_runs_stopped_with_one_type_per_column(
    populated: Trained, no_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow takes the History table as it is: no server-log traceback and no 'None' for a
    run without a version, whatever mix of budgets the runs had."""
    from streamlit import dataframe_util

    fixed = []
    fix = dataframe_util.fix_arrow_incompatible_column_types
    monkeypatch.setattr(
        dataframe_util,
        "fix_arrow_incompatible_column_types",
        lambda df, *a, **k: fixed.append(list(df.columns)) or fix(df, *a, **k),
    )
    cancelled = runs.enqueue_training(populated.corpus_id, epochs=3)  # beside 'automatic' ones
    runs.cancel_run(cancelled)
    # a succeeded run whose version was deleted since: said, not left blank like a cancelled one
    gone, version = train_version(populated.corpus_id, preset="tiny", max_steps=2)
    registry.delete_version(version)
    try:
        at = open_page("train")
        assert not fixed, f"History needed Arrow fixes (mixed types): {fixed}"
        table = at.dataframe[-1].value.set_index("run")
        assert (table.loc[cancelled, "version"], table.loc[cancelled, "budget"]) == (
            "",
            "3 epochs",
        )
        assert table.loc[gone, "version"] == "deleted"
        for run_id in populated.run_ids:
            run = run_info.get_run(run_id)
            row = table.loc[run_id]
            assert row["version"] == f"#{run.version_id}"
            assert row["steps"] == run.progress_step  # the real end, not a planned total
            assert row["stopped because"] == run.stopped_because != ""
            # what it trained, as Models and `versions --json` say, not the budget asked for
            seconds = registry.get_version(run.version_id).train_seconds
            assert row["trained for"] == formatting.fmt_duration(seconds) != "—"
        last = run_info.get_run(populated.run_ids[-1])  # 30 steps: too few to learn the pairs
        at.selectbox(key="history_run").select(last.id).run()
        assert f"Stopped at step {last.progress_step:,}: reached its step limit." in texts(
            at.caption
        )
    finally:
        runs.delete_run(cancelled)
        runs.delete_run(gone)


def test_resume_and_delete_a_run_from_the_page(populated: Trained, no_worker: None) -> None:

    run_id = runs.enqueue_training(populated.corpus_id)
    runs.cancel_run(run_id)
    at = open_page("train")
    at.selectbox(key="history_run").select(run_id).run()
    assert "resume_run" not in [b.key for b in at.button]  # no checkpoint: nothing to resume
    state = settings.run_dir(run_id) / "checkpoint" / "state.json"  # what an epoch end leaves
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"step": 40}))

    at = open_page("train")
    assert f"Run #{run_id} was cancelled" in texts(at.info)
    assert at.button(key="resume_last").label == "Resume from step 40"
    at.selectbox(key="history_run").select(run_id).run()
    at.button(key="resume_run").click().run()
    assert_clean(at)
    assert run_info.get_run(run_id).status == "queued"
    assert f"Run #{run_id} resumes from step 40" in texts(at.success)

    runs.cancel_run(run_id)  # queued: cancelled at once
    at = open_page("train")
    at.selectbox(key="history_run").select(run_id).run()
    at.button(key="delete_run").click().run()
    assert run_info.get_run(run_id), "deleting must ask first"
    at.button(key="delete_run_confirm").click().run()
    assert_clean(at)
    assert f"Deleted run #{run_id}." in texts(at.success)
    assert run_id not in [r.id for r in run_info.list_runs()]
    assert not settings.run_dir(run_id).exists()


def test_curves_take_epoch_ends_from_the_row_kind() -> None:
    """Validation points are the epoch rows, even when validation repeats its loss; an epoch
    row's whole-epoch training mean and the final 'done' row stay off the training curve,
    which is the loop's 'loss' rows (a run recorded before them: its periodic 'step' rows)."""
    from ui import charts

    metrics = pd.DataFrame(
        {
            "kind": ["start", "loss", "step", "loss", "epoch", "loss", "epoch", "done"],
            "step": [0, 10, 15, 20, 20, 30, 40, 40],
            "train_loss": [None, 5.0, None, 4.0, 4.6, 3.0, 3.3, 3.3],
            "valid_loss": [None, None, None, None, 4.0, 4.0, 4.0, 3.8],
        }
    )
    long = charts._long_losses(metrics, None)
    training, validation = (long[long["curve"] == c] for c in ("training", "validation"))
    assert training["step"].tolist() == [10, 20, 30]
    older = metrics.replace({"kind": {"loss": "step"}})
    assert charts.training_losses(older)["step"].tolist() == [10, 20, 30]
    assert validation[["step", "loss"]].values.tolist() == [[20, 4.0], [40, 4.0]]


def test_a_dead_workers_run_waits_for_a_worker_to_resume_it(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from db.tables import RunMetric, TrainingRun, utcnow
    from workbench.storage import session_scope

    started = []
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: started.append(1))
    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny")
    assert runs.claim_next_run("a worker that then died") == run_id
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        run.created_at = run.heartbeat_at = utcnow() - timedelta(minutes=5)
        run.progress_step = 71  # it reached step 71; its last checkpoint is step 42's
        s.add(RunMetric(run_id=run_id, kind="epoch", step=42, epoch=1, train_loss=3.0))
    try:
        at = open_page("train")  # listing the runs re-queues the stale one
        assert "No worker is running" in texts(at.warning)
        assert runs.RESUME_NOTE in texts(at.caption)
        assert "It resumes from step 42, its last checkpoint." in texts(at.caption)
        at.button(key="start_worker").click().run()
        assert started == [1]
    finally:
        runs.cancel_run(run_id)


def test_a_preparing_run_says_what_it_prepares_and_for_how_long(
    populated: Trained, no_worker: None
) -> None:
    """Issue 37: 15-20 s of "Preparing: tokenizers and model…" above four empty tiles. The
    worker names each step before the first (``RunSync.preparing``, written as the worker
    writes it); the page shows it with the time spent so far and a spinner, and no tiles."""
    from db.tables import TrainingRun
    from workbench.storage import session_scope
    from workbench.training import worker

    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny", max_steps=5)
    try:
        assert runs.claim_next_run("test-worker", cuda=False) == run_id
        sync = worker.RunSync(run_id, "test-worker", {})
        sync.preparing("training the tokenizers and building the model")
        assert sync.write()
        at = open_page("train")
        [status] = at.status
        assert status.state == "running"
        assert status.label.startswith(
            "Preparing: training the tokenizers and building the model… ("
        ) and status.label.endswith(" so far)")
        assert not at.metric, "no empty tiles before the first step"
        at = open_page("train", lang="zh_Hans")
        assert at.status[0].label.startswith("准备中：训练分词器并构建模型…")
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_a_number_out_of_range_is_refused_not_replaced(populated: Trained, no_worker: None) -> None:
    """Tester's walk: Epochs 0, N million tokens -1 and a step limit of 0 queued a run with
    the fields' previous values (Streamlit's bounds had refused them in the browser), and 8
    processes on 2 cores were accepted. What was typed reaches the one check: one error line,
    nothing queued; then a good value starts."""
    at = open_page("train")
    at.selectbox(key="train_device").select("cpu")
    newest = run_info.list_runs()[0].id
    for key, typed, error in (
        ("train_max_steps", 0, "The step limit must be a whole number from 1"),
        ("train_million_tokens", -1.0, "Tokens must be more than 0"),
        ("train_processes", 0, "Processes must be at least 1"),
        ("train_processes", cpu_cores() + 1, f"more than this machine's CPU cores ({cpu_cores()})"),
        ("train_epochs", 0, "Epochs must be at least 1"),
        ("train_epochs", train_options.MAX_EPOCHS + 1, "Epochs must be at most 10,000"),
        ("train_minutes", 0.0, "Minutes must be more than 0"),
    ):
        if key in ("train_epochs", "train_minutes"):
            at.button_group(key="train_for").set_value(key.removeprefix("train_")).run()
        at.number_input(key=key).set_value(typed)
        at.button(key="train_button").click().run()
        assert_clean(at)
        assert at.number_input(key=key).value == typed
        assert [error in e for e in texts(at.error).splitlines()] == [True], key
        assert run_info.list_runs()[0].id == newest, f"{key}={typed} queued a run"
        at.number_input(key=key).set_value(2 if key == "train_epochs" else None)
    at.number_input(key="train_minutes").set_value(0.5)
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert run.id > newest and run.config["time_budget_s"] == 30
    runs.cancel_run(run.id)


def test_a_continued_run_shows_the_size_it_trains_not_its_preset(
    populated: Trained, no_worker: None
) -> None:
    """Tester's walk: runs continuing a (tiny or small) version said "automatic" in the run
    card, History and `workbench runs`; continuing keeps the version's size, so that is what
    all three say, whatever preset the form had."""
    at = open_page("train")
    newest = populated.version_ids[0]  # a tiny version
    assert at.radio(key=f"train_start_{populated.corpus_id}").value == newest
    at.button_group(key="train_preset").set_value("small")
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.init_version_id, run.config["preset"], run.model_size) == (newest, "small", "tiny")
    corpus = corpora.get_corpus(populated.corpus_id).name
    assert f"Run #{run.id}** · {corpus} · tiny · " in texts(at.markdown)
    listed = json.loads(cli_in_process("runs", "--json").stdout)
    record = next(r for r in listed if r["id"] == run.id)
    assert (record["preset"], record["model_size"]) == ("small", "tiny")  # asked / trained
    runs.cancel_run(run.id)
    at.run()
    history = at.dataframe[-1].value
    assert history.loc[history["run"] == run.id, "preset"].tolist() == ["tiny"]
    # a new model trains its preset, "auto" (the recipe's pick) in words
    at.radio(key=f"train_start_{populated.corpus_id}").set_value(train_page.NEW_MODEL)
    at.button_group(key="train_preset").set_value("auto")
    at.button(key="train_button").click().run()
    fresh = run_info.list_runs()[0]
    assert fresh.model_size == "auto" and f"Run #{fresh.id}** · {corpus} · automatic · " in (
        texts(at.markdown)
    )
    runs.cancel_run(fresh.id)


def _panel_page() -> None:
    """The live panel alone, counting the runs of the page (a page rerun is what clears the
    messages it showed once)."""
    import streamlit as st

    from ui import live_runs

    st.session_state["page_runs"] = st.session_state.get("page_runs", 0) + 1
    live_runs.live_panel()


def test_the_page_is_refreshed_once_a_queued_run_starts(
    populated: Trained, no_worker: None
) -> None:
    """Tester's walk: "Run #N queued …: a worker is picking it up." stayed above the card that
    already said running (only the panel refreshes itself). The panel reruns the page when a
    run it saw waiting starts, which drops that message."""
    from streamlit.testing.v1 import AppTest

    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny")
    at = AppTest.from_function(_panel_page, default_timeout=60).run()
    assert_clean(at)
    assert f"Run #{run_id}" in texts(at.markdown) and "_queued_" in texts(at.markdown)
    at.run()  # nothing changed: one page run
    before = at.session_state["page_runs"]
    assert runs.claim_next_run("walk-worker") == run_id
    at.run()
    assert "_running_" in texts(at.markdown)
    assert at.session_state["page_runs"] == before + 2, "the start reran the page"
    at.run()
    assert at.session_state["page_runs"] == before + 3, "once"
    runs.cancel_run(run_id)
