"""Background training: a real worker process claims, trains, cancels, dies and recovers."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select, update

from core_model.training import checkpoint as ckpt
from db.tables import RunMetric, RunStatus, TrainingRun, utcnow
from tests.helpers import (
    ROOT,
    add_preset,
    make_toy_corpus,
    start_worker,
    stop,
    subprocess_env,
    wait_for,
)
from workbench import settings, worker_lock
from workbench.corpus import corpora
from workbench.errors import WorkbenchError
from workbench.models import registry
from workbench.settings import ENV_SQLITE_BUSY_TIMEOUT
from workbench.storage import session_scope
from workbench.training import (
    metric_rows,
    run_folders,
    run_info,
    runs,
    stop_words,
    train_options,
    worker,
    worker_process,
)

QUICK = dict(max_steps=30)  # enough to produce a version; learning is tested elsewhere
LONG = dict(epochs=200, min_epoch_steps=20)  # runs until cancelled


def test_enqueue_rejects_bad_requests(db_url: str) -> None:
    with pytest.raises(WorkbenchError, match="corpus 999"):
        runs.enqueue_training(999)
    empty = corpora.create_corpus("empty", "zh", "en")
    with pytest.raises(WorkbenchError, match="no training pairs"):
        runs.enqueue_training(empty.id)
    corpus_id = make_toy_corpus()
    with pytest.raises(WorkbenchError, match="Unknown preset"):
        runs.enqueue_training(corpus_id, preset="huge")
    with pytest.raises(WorkbenchError, match="at least 1"):
        runs.enqueue_training(corpus_id, epochs=0)
    with pytest.raises(WorkbenchError, match="version 5 does not exist"):
        runs.enqueue_training(corpus_id, init_version_id=5)
    with pytest.raises(WorkbenchError, match="Invalid training option"):
        runs.enqueue_training(corpus_id, no_such_option=1)
    with pytest.raises(WorkbenchError, match="epochs, of minutes or of tokens: only one"):
        runs.enqueue_training(corpus_id, epochs=3, minutes=5)
    for minutes in (0, -1, float("nan"), train_options.MAX_TRAIN_MINUTES + 1):
        with pytest.raises(WorkbenchError, match="Minutes must be more than 0"):
            runs.enqueue_training(corpus_id, minutes=minutes)
    assert run_info.list_runs() == []  # nothing was queued by the bad requests

    run_id = runs.enqueue_training(corpus_id, preset="tiny", epochs=3)
    run = run_info.get_run(run_id)
    assert (run.status, run.snapshot_size, run.config["epochs"]) == ("queued", 12, 3)
    assert run.budget == "3 epochs"
    assert len(run.snapshot_hash) == 64
    assert runs.cancel_run(run_id) == "cancelled"  # a queued run is cancelled at once
    timed = run_info.get_run(runs.enqueue_training(corpus_id, minutes=2.5))
    assert (timed.config["time_budget_s"], timed.config["epochs"]) == (150.0, None)
    assert timed.budget == "2.5 min"


def test_presets_have_one_source(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preset added to core_model's presets can be chosen without touching the front ends."""
    assert train_options.DEFAULT_PRESET in train_options.presets()
    add_preset(monkeypatch, "micro")
    assert train_options.presets()["micro"] == ""  # no description yet: still listed
    corpus_id = make_toy_corpus()
    with pytest.raises(WorkbenchError, match=r"Unknown preset 'nano'; choose one of .*, micro\.$"):
        runs.enqueue_training(corpus_id, preset="nano")  # the refusal lists it too
    run_id = runs.enqueue_training(corpus_id, preset="micro")
    assert run_info.get_run(run_id).config["preset"] == "micro"


def test_a_finished_run_says_why_it_stopped_and_where(db_url: str) -> None:
    """The worker stores each row's kind, the latest progress detail, the final step as the
    total and the stop reason: the memorisation rule ends the automatic budget of a tiny
    corpus long before its step budget, and a time budget ends a run that has epochs left."""
    corpus_id = make_toy_corpus()
    learned = runs.enqueue_training(corpus_id, progress_every_s=0.1)
    assert worker.run_worker(once=True) == 1
    run = run_info.get_run(learned)
    assert run.status == "succeeded", run.error
    assert (run.stop_reason, run.stopped_because) == ("memorised", "learned every training pair")
    assert run.progress_total == run.progress_step > 0  # History shows the real end
    assert run.fraction_done == 1.0
    assert run.progress_detail["watch"]["rule"] == "memorise"
    metrics = metric_rows.run_metrics(learned)
    kinds = metrics["kind"].tolist()
    assert kinds[0] == "start" and kinds[-1] == "done" and "epoch" in kinds
    assert set(kinds) <= {"start", "step", "loss", "epoch", "done"}
    assert metrics["step"].iloc[-1] == run.progress_step
    # the loss curve: every step's loss (a short run), whatever the clock (issue 30 item 10)
    losses = metrics[metrics["kind"].eq("loss")]
    assert losses["step"].tolist() == list(range(1, run.progress_step + 1))
    assert losses["train_loss"].notna().all()
    row = run_info.runs_table().iloc[0]
    assert (row["steps"], row["stopped because"]) == (run.progress_step, run.stopped_because)

    # 3 s for a budget of 20,000 steps, without the memorisation rule: the clock ends it
    timed = runs.enqueue_training(corpus_id, minutes=0.05, min_steps=20000, memorise_max_pairs=0)
    assert worker.run_worker(once=True) == 1
    run = run_info.get_run(timed)
    assert (run.status, run.stop_reason) == ("succeeded", "time_budget"), run.error
    assert run.stopped_because == "time budget reached"
    assert run.progress_detail["limit"] == "time"
    assert run.progress_total == run.progress_step < 20000
    # the run against its plan (issue 38): planned and real speed, and, in words, a re-plan
    pace = run.progress_detail["pace"]
    assert pace["planned_tokens_per_s"] > 0 and pace["real_tokens_per_s"] > 0
    assert run.tokens_per_s == pace["real_tokens_per_s"]  # the one speed a page shows
    assert run.precision == f"Trains in {pace['precision']}." and not pace["calibration_kept"]
    replanned = dataclasses.replace(
        run,
        status=RunStatus.RUNNING,
        progress_detail={
            "pace": {
                "planned_tokens_per_s": 5_000.0,
                "batch_tokens_at_start": 625,
                "replans": [
                    {"elapsed_s": 60.2, "real_tokens_per_s": 4_000.0, "batch_tokens": 625},
                    {"elapsed_s": 121.0, "real_tokens_per_s": 2_500.0, "batch_tokens": 400},
                    {"elapsed_s": 250.4, "real_tokens_per_s": 3_000.0, "batch_tokens": 400},
                ],
                "thread_changes": [{"threads": 1, "why": "slowed down"}],
                "share_changes": [{"shares": [0.5, 0.5]}, {"shares": [0.64, 0.36]}],
            }
        },
    )
    assert replanned.pace == [
        "At 250 s this machine had trained 40 % slower than measured at the start (3,000 "
        "instead of 5,000 tokens/s): the plan was adjusted.",
        "From 121 s it trains batches of 400 tokens (planned: 625): the size that suits the "
        "tokens it will now see.",
        "Steps slowed down (another program is using a core): training goes on with one "
        "thread until the core is free again.",
        "A training process is slower than the others (another program is using its core): "
        "it takes 36 % of each update, the others more, until the core is free again.",
    ]
    # parts back to equal, or a run that has ended: nothing said of them
    equal = {"share_changes": [{"shares": [0.64, 0.36]}, {"shares": [0.49, 0.51]}]}
    assert dataclasses.replace(replanned, progress_detail={"pace": equal}).pace == []
    ended = dataclasses.replace(replanned, status=RunStatus.SUCCEEDED)
    assert len(ended.pace) == 2  # the re-plan and its batch stay told


def test_two_workers_claim_one_run_exactly_once(db_url: str, tmp_path: Path) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    workers = [start_worker("--once", log=log) for log in logs]
    try:
        for w in workers:
            assert w.wait(timeout=240) == 0
    finally:
        for w in workers:
            stop(w)
    claims = [log.read_text().count(f"run {run_id} claimed") for log in logs]
    assert sorted(claims) == [0, 1], claims
    run = run_info.get_run(run_id)
    assert run.status == "succeeded", run.error
    version = registry.get_version(run.version_id)
    assert version.run_id == run_id and version.param_count > 0
    assert (registry.artifact_dir(version.id) / "model.safetensors").is_file()
    metrics = metric_rows.run_metrics(run_id)
    assert metrics["train_loss"].notna().any()  # a "start" row may precede the first loss


def test_cancel_stops_a_running_run_within_seconds(wb_home: Path, tmp_path: Path) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **LONG)
    proc = start_worker("--once", log=tmp_path / "worker.log")
    try:
        wait_for(lambda: run_info.get_run(run_id).progress_step > 0, 120, "training progress")
        assert runs.cancel_run(run_id) == "running"
        asked = time.monotonic()
        wait_for(lambda: run_info.get_run(run_id).status == "cancelled", 30, "cancellation")
        assert time.monotonic() - asked < 15
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    run = run_info.get_run(run_id)
    assert run.version_id is None
    assert registry.list_versions() == []
    # what was done, not the whole budget (a run cancelled half-way recorded 1.0)
    assert 0 < run.progress_detail["fraction"] == run.fraction_done < 0.5


def test_killed_worker_is_resumed_from_its_checkpoint_and_edits_never_hit_a_locked_database(
    wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_HEARTBEAT_TIMEOUT", "4")
    corpus_id = make_toy_corpus()
    # Long epochs: the kill lands well after one checkpoint and well before the next.
    run_id = runs.enqueue_training(corpus_id, epochs=200, min_epoch_steps=300, progress_every_s=0.2)
    checkpoint = settings.run_dir(run_id) / "checkpoint"
    proc = start_worker("--once", log=tmp_path / "worker.log")
    try:
        wait_for(lambda: run_info.get_run(run_id).progress_step > 0, 120, "training progress")
        # Another process edits pairs while the worker writes metrics and heartbeats.
        editor = subprocess.run(
            [sys.executable, "-c", EDITOR_SCRIPT, str(corpus_id)],
            cwd=ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert editor.returncode == 0, editor.stderr[-2000:]
        assert "locked" not in editor.stderr
        assert run_info.get_run(run_id).status == "running"
        wait_for(checkpoint.is_dir, 120, "the first epoch checkpoint")
        saved = ckpt.read_state(checkpoint)["step"]
        wait_for(lambda: run_info.get_run(run_id).progress_step >= saved + 30, 60, "steps past it")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # Reading a run never reaps it: the explicit reap (a worker's poll, a page) does.
        wait_for(lambda: runs.reap_stale_runs() == 1, 30, "stale-heartbeat detection")
        assert run_info.get_run(run_id).status == "queued"
    finally:
        stop(proc)
    assert "locked" not in (tmp_path / "worker.log").read_text()
    requeued = run_info.get_run(run_id)
    assert requeued.note == runs.RESUME_NOTE
    saved = ckpt.read_state(checkpoint)["step"]
    # its card names where it goes on: its last checkpoint, not the step its worker reached
    resume_at = requeued.progress_detail["checkpoint_step"]
    assert 0 < resume_at <= saved < requeued.progress_step
    assert requeued.resumes_from == f"It resumes from step {resume_at:,}, its last checkpoint."
    dead_attempt = _metric_rows(run_id)
    assert max(step for _, step in dead_attempt) > saved  # it got past its checkpoint
    last_dead_id = max(row_id for row_id, _ in dead_attempt)

    def resumed_steps() -> list[int]:
        return [step for row_id, step in _metric_rows(run_id) if row_id > last_dead_id]

    # The resumed attempt must not be taken for dead on a busy 2-core machine.
    monkeypatch.setenv("WORKBENCH_HEARTBEAT_TIMEOUT", "90")
    second = start_worker("--once", log=tmp_path / "worker2.log")
    try:
        wait_for(lambda: max(resumed_steps(), default=0) > saved, 120, "the resumed attempt")
        steps = [step for _, step in _metric_rows(run_id)]
        assert steps == sorted(steps)  # the curve goes on from the checkpoint, never back
        assert resumed_steps()[0] == saved  # the new attempt started at the checkpoint, not 0
        assert runs.cancel_run(run_id) == "running"
        wait_for(lambda: run_info.get_run(run_id).status == "cancelled", 60, "the cancel")
        second.wait(timeout=60)
    finally:
        stop(second)
    with session_scope() as s:
        assert s.get(TrainingRun, run_id).attempts == 2
    assert run_folders.checkpoint_step(run_id) is not None  # cancelled: kept, to be resumed


def _metric_rows(run_id: int) -> list[tuple[int, int]]:
    """(row id, step) of the run's metric rows, in the order the workers wrote them."""
    with session_scope() as s:
        query = select(RunMetric.id, RunMetric.step).where(RunMetric.run_id == run_id)
        return [(row_id, step) for row_id, step in s.execute(query.order_by(RunMetric.id))]


EDITOR_SCRIPT = """
import sys
from workbench.corpus import pairs
from workbench.team import access
access.use_actor_source(access.local_admin)  # as the command line does
corpus_id = int(sys.argv[1])
for i in range(40):
    r = pairs.apply_edits(corpus_id, added=[{"source": f"句子{i}", "target": f"sentence {i}"}])
    pairs.apply_edits(corpus_id, edited={r.added_ids[0]: {"note": "edited"}})
print("ok")
"""


def test_ensure_worker_starts_one_detached_worker(wb_home: Path) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    pid = worker_process.ensure_worker(idle_exit_s=2)
    assert pid is not None
    try:
        wait_for(worker_lock.worker_alive, 30, "the worker to take its lock")
        assert worker_process.ensure_worker() is None  # one is alive: no second worker
        wait_for(lambda: run_info.get_run(run_id).status == "succeeded", 240, "the run to finish")
        wait_for(lambda: not worker_lock.worker_alive(), 60, "the idle worker to exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert (wb_home / "logs" / "worker.log").is_file()


def test_racing_claims_take_a_run_exactly_once(db_url: str) -> None:
    """Eight workers hit one queued run at the same instant (threads behind a barrier)."""
    corpus_id = make_toy_corpus()
    run_ids = [runs.enqueue_training(corpus_id, **QUICK) for _ in range(3)]
    barrier = threading.Barrier(8)
    claimed: list[int | None] = []

    def claim(n: int) -> None:
        barrier.wait()
        claimed.append(runs.claim_next_run(f"racer-{n}"))

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    taken = [r for r in claimed if r is not None]
    assert sorted(taken) == run_ids  # every run once, none twice
    assert claimed.count(None) == 5
    owners = {run_info.get_run(r).status for r in run_ids}
    assert owners == {"running"}


def test_cancel_and_reap_never_undo_a_workers_claim(db_url: str) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    assert runs.claim_next_run("me") == run_id
    assert runs.cancel_run(run_id) == "running"  # a claimed run is asked, not overwritten
    assert run_info.get_run(run_id).cancel_requested
    assert runs.reap_stale_runs() == 0  # its heartbeat is fresh
    # A run reaped as stale is not brought back by its old worker's late writes.
    _go_stale(run_id)
    assert runs.reap_stale_runs() == 1
    assert runs.finish_run(run_id, "me", RunStatus.SUCCEEDED) is False
    assert run_info.get_run(run_id).status == "cancelled"  # its cancel was pending: not re-queued


def test_reading_a_run_never_reaps_it(db_url: str) -> None:
    """Reads have no side effects: a run whose worker died stays as it is, marked lost, until
    someone reaps explicitly (a worker's poll, a page that sees it, `ensure_worker`)."""
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    assert runs.claim_next_run("gone") == run_id
    assert not run_info.get_run(run_id).worker_lost
    _go_stale(run_id)
    for _ in range(2):
        run = run_info.get_run(run_id)
        assert (run.status, run.worker_lost) == ("running", True)
        assert [r.status for r in run_info.list_runs()] == ["running"]
    assert runs.reap_stale_runs() == 1
    run = run_info.get_run(run_id)
    assert (run.status, run.worker_lost, run.note) == ("queued", False, runs.RESUME_NOTE)


def test_a_dead_workers_run_fails_only_after_attempts_without_progress(db_url: str) -> None:
    """Attempts whose worker died after saving a new checkpoint (an epoch row) do not count:
    a long run on a flaky machine goes on; one that dies before its next checkpoint every
    time (out of memory, say) is failed after MAX_STALLED_ATTEMPTS, keeping its checkpoint."""
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    attempt = 0

    def die(progress: bool) -> run_info.RunInfo:
        nonlocal attempt
        attempt += 1
        assert runs.claim_next_run(f"worker-{attempt}") == run_id
        with session_scope() as s:
            run_row = s.get(TrainingRun, run_id)
            assert run_row.attempts == attempt and run_row.note is None
            run_row.device = "cuda:0"  # what a GPU worker resolved "auto" to
            if progress:  # an epoch ended: its checkpoint was saved, then its row written
                s.add(RunMetric(run_id=run_id, kind="epoch", step=10 * attempt, epoch=attempt))
        _go_stale(run_id)
        assert runs.reap_stale_runs() == 1
        return run_info.get_run(run_id)

    for _ in range(runs.MAX_STALLED_ATTEMPTS + 2):  # more deaths than the limit, all progressing
        run = die(progress=True)
        assert run.status == "queued" and run.note == runs.RESUME_NOTE
        assert run.device == "auto"  # any worker may resume it, not only a GPU one
    for stalled in range(1, runs.MAX_STALLED_ATTEMPTS + 1):
        run = die(progress=False)
        assert run.status == ("failed" if stalled == runs.MAX_STALLED_ATTEMPTS else "queued")
    assert f"stopped {runs.MAX_STALLED_ATTEMPTS} times in a row" in run.error
    assert runs.claim_next_run("late") is None

    # A worker starting sweeps runs/: the failed run keeps its checkpoint (to be resumed),
    # queued ones too; a succeeded run's leftovers and a deleted run's folder go.
    waiting = runs.enqueue_training(make_toy_corpus("other"), **QUICK)
    done = runs.enqueue_training(make_toy_corpus("third"), **QUICK)
    with session_scope() as s:
        s.get(TrainingRun, done).status = "succeeded"
    for kept_or_not in (run_id, waiting, done, 999):
        (settings.run_dir(kept_or_not) / "checkpoint").mkdir(parents=True)
    # So does the staging copy of a `register` killed two days ago; today's is still in use.
    runs_dir = settings.run_dir(run_id).parent
    stale_import, fresh_import = runs_dir / "import-killed", runs_dir / "import-running"
    for staging in (stale_import, fresh_import):
        staging.mkdir()
    two_days_ago = time.time() - 2 * 86400
    os.utime(stale_import, (two_days_ago, two_days_ago))
    assert run_folders.sweep_run_folders() == 3
    assert settings.run_dir(run_id).is_dir() and settings.run_dir(waiting).is_dir()
    assert not settings.run_dir(done).exists() and not settings.run_dir(999).exists()
    assert not stale_import.exists() and fresh_import.is_dir()


def test_resume_a_cancelled_run_from_its_checkpoint_then_delete_it(
    wb_home: Path, tmp_path: Path
) -> None:
    corpus_id = make_toy_corpus()
    run_id = runs.enqueue_training(corpus_id, epochs=200, min_epoch_steps=40)
    with pytest.raises(WorkbenchError, match="only a failed or cancelled run"):
        runs.resume_run(run_id)
    with pytest.raises(WorkbenchError, match="cancel it before deleting"):
        runs.delete_run(run_id)
    proc = start_worker("--once", log=tmp_path / "worker.log")
    try:
        wait_for(
            lambda: run_folders.checkpoint_step(run_id) is not None, 120, "the first checkpoint"
        )
        runs.cancel_run(run_id)
        wait_for(lambda: run_info.get_run(run_id).status == "cancelled", 30, "the cancel")
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    run = run_info.get_run(run_id)
    assert run.stop_reason == "cancelled" and run.progress_step > 0
    saved = run_folders.checkpoint_step(run_id)  # a cancelled run keeps its checkpoint
    assert saved is not None and saved <= run.progress_step

    assert runs.resume_run(run_id) == saved
    run = run_info.get_run(run_id)
    assert (run.status, run.stop_reason, run.cancel_requested) == ("queued", None, False)
    assert f"step {saved}" in run.note
    with pytest.raises(WorkbenchError, match="only a failed or cancelled run"):
        runs.resume_run(run_id)  # a second click
    last_row = int(metric_rows.run_metrics(run_id)["id"].max())
    proc = start_worker("--once", log=tmp_path / "worker2.log")
    try:
        wait_for(lambda: run_info.get_run(run_id).progress_step > saved + 40, 120, "resumed steps")
        runs.cancel_run(run_id)
        wait_for(lambda: run_info.get_run(run_id).status == "cancelled", 30, "the second cancel")
    finally:
        stop(proc)
    metrics = metric_rows.run_metrics(run_id)
    resumed = metrics[metrics["id"] > last_row]
    assert resumed["step"].iloc[0] == saved  # it went on from the checkpoint, not from 0
    # the cancelled attempt's rows after the checkpoint were dropped: no step twice
    assert metrics.sort_values("id")["step"].is_monotonic_increasing

    runs.delete_run(run_id)
    with pytest.raises(WorkbenchError, match="does not exist"):
        run_info.get_run(run_id)
    assert metric_rows.run_metrics(run_id).empty
    assert not settings.run_dir(run_id).exists()
    with pytest.raises(WorkbenchError, match="does not exist"):
        runs.delete_run(run_id)


def test_deleting_a_run_keeps_its_version_and_a_run_without_checkpoint_cannot_resume(
    db_url: str,
) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)
    assert worker.run_worker(once=True) == 1
    version_id = run_info.get_run(run_id).version_id
    with pytest.raises(WorkbenchError, match="only a failed or cancelled run"):
        runs.resume_run(run_id)
    runs.delete_run(run_id)
    assert registry.get_version(version_id).run_id is None  # the model stays usable
    assert run_info.list_runs() == []

    never_ran = runs.enqueue_training(make_toy_corpus("other"), **QUICK)
    runs.cancel_run(never_ran)
    with pytest.raises(WorkbenchError, match="no checkpoint to resume from"):
        runs.resume_run(never_ran)


def test_the_live_view_reads_only_new_metric_rows(db_url: str) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), **QUICK)

    def add(*steps: int) -> None:
        with session_scope() as s:
            s.add_all(RunMetric(run_id=run_id, step=step, train_loss=1.0) for step in steps)

    add(10, 20)
    known = metric_rows.follow_metrics(run_id)
    assert known["step"].tolist() == [10, 20]
    assert metric_rows.follow_metrics(run_id, known) is known  # nothing new: nothing read
    add(30)
    grown = metric_rows.follow_metrics(run_id, known)
    assert grown["step"].tolist() == [10, 20, 30]
    # A resumed attempt drops the rows written after its checkpoint: the view starts over.
    with session_scope() as s:
        s.execute(delete(RunMetric).where(RunMetric.run_id == run_id, RunMetric.step > 10))
    add(15)
    assert metric_rows.follow_metrics(run_id, grown)["step"].tolist() == [10, 15]


def test_a_database_locked_past_the_busy_timeout_never_fails_a_run(
    wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long import holds SQLite's write lock longer than the worker's busy timeout: the
    worker trains on, keeps its progress rows and writes them once the lock is free. (The run
    has steps to spare for the lock to fall mid-run; once the rows are written it is
    cancelled, which only a run that did not fail can be.)"""
    monkeypatch.setenv(ENV_SQLITE_BUSY_TIMEOUT, "300")  # the worker gives up a write after 0.3 s
    run_id = runs.enqueue_training(
        make_toy_corpus(), epochs=200, min_epoch_steps=20, max_steps=1500, progress_every_s=0.1
    )
    proc = start_worker("--once", log=tmp_path / "worker.log")
    hold_s = 4.0
    try:
        wait_for(lambda: run_info.get_run(run_id).progress_step > 0, 120, "training progress")
        with contextlib.closing(sqlite3.connect(wb_home / "workbench.db", timeout=30)) as lock:
            lock.execute("BEGIN IMMEDIATE")  # what an import's transaction holds
            before = run_info.get_run(run_id).progress_step
            time.sleep(hold_s)
            assert run_info.get_run(run_id).progress_step == before  # nothing could be written
            lock.rollback()
        wait_for(lambda: run_info.get_run(run_id).progress_step > before, 30, "the buffered rows")
        after = run_info.get_run(run_id).progress_step
        assert runs.cancel_run(run_id) == "running"  # it trained on through the lock
        wait_for(lambda: not run_info.get_run(run_id).active, 60, "the end of the run")
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    log = (tmp_path / "worker.log").read_text()
    assert "locked" in log  # the lock did get in the worker's way
    run = run_info.get_run(run_id)
    assert (run.status, run.error) == ("cancelled", None)
    steps = metric_rows.run_metrics(run_id).sort_values("id")["step"]
    assert steps.is_monotonic_increasing  # written in order, none lost or doubled back
    # The rows of the locked seconds were kept and written in one go after it.
    assert ((steps > before) & (steps <= after)).sum() >= hold_s / 0.1 / 4


def _go_stale(run_id: int) -> None:
    """Age the run's heartbeat past the timeout, as if its worker had died an hour ago."""
    with session_scope() as s:
        s.execute(
            update(TrainingRun)
            .where(TrainingRun.id == run_id)
            .values(heartbeat_at=utcnow() - timedelta(hours=1))
        )


def test_enqueue_rejects_bad_token_budgets_and_precisions(db_url: str) -> None:
    """Issue 20: tokens and precision are checked like every other choice: one sentence,
    nothing queued."""
    from core_model.training import config

    corpus_id = make_toy_corpus()
    for tokens in (0, -5, 1.5, True, train_options.MAX_TRAIN_TOKENS + 1):
        with pytest.raises(WorkbenchError, match="Tokens must"):
            runs.enqueue_training(corpus_id, tokens=tokens)
    with pytest.raises(WorkbenchError, match="epochs, of minutes or of tokens: only one"):
        runs.enqueue_training(corpus_id, minutes=2, tokens=1_000)
    with pytest.raises(WorkbenchError, match="Unknown precision 'fp16'; choose one of auto, fp32"):
        runs.enqueue_training(corpus_id, precision="fp16")
    assert run_info.list_runs() == []
    # Each precision core_model offers is described for the page and `--help`, in its order.
    assert list(train_options.PRECISION_DESCRIPTIONS) == list(config.PRECISIONS)

    run = run_info.get_run(runs.enqueue_training(corpus_id, tokens=1_100_000, precision="fp32"))
    assert (run.config["token_budget"], run.config["precision"]) == (1_100_000, "fp32")
    assert (run.config["epochs"], run.config["time_budget_s"], run.budget) == (
        None,
        None,
        "1.1M tokens",
    )


def test_a_token_budget_ends_the_run_in_the_chosen_precision(db_url: str) -> None:
    """A real worker trains a tokens run to its budget (one step past it at most), in fp32 as
    asked, and the run says so: reason, budget and the limit its progress followed."""
    corpus_id = make_toy_corpus()
    run_id = runs.enqueue_training(
        corpus_id, preset="tiny", tokens=4_000, precision="fp32", progress_every_s=0.1
    )
    assert worker.run_worker(once=True) == 1
    run = run_info.get_run(run_id)
    assert run.status == "succeeded", run.error
    assert (run.stop_reason, run.stopped_because) == ("token_budget", "token budget reached")
    assert (run.budget, run.limit) == ("4k tokens", "tokens")
    metrics = registry.get_version(run.version_id).metrics
    per_step = metrics["tokens_trained"] / metrics["steps"]
    assert 4_000 <= metrics["tokens_trained"] < 4_000 + 2 * per_step
    assert (metrics["precision"], metrics["steps"]) == ("fp32", run.progress_step)


def test_stored_reasons_are_told_truthfully(db_url: str) -> None:
    """Issue 19 item 4: never 'planned epochs' for a run that had none. Rows written before
    the automatic budget had its own reason said 'epochs' (or 'max_steps') for it."""
    auto = "finished the automatic budget's passes over the corpus"
    assert stop_words.describe_stop("epochs", {"epochs": None}) == auto
    assert stop_words.describe_stop("max_steps", {"max_steps": None}) == auto
    assert (
        stop_words.describe_stop("epochs", {"epochs": 3}) == "finished the epochs it was asked for"
    )
    assert stop_words.describe_stop("max_steps", {"max_steps": 30}) == "reached its step limit"
    assert stop_words.describe_stop("auto_steps", {}) == auto
    assert stop_words.describe_stop("token_budget") == "token budget reached"
    assert stop_words.describe_stop("early_stopping", {"patience": 4}) == (
        "validation stopped improving for 4 epochs"
    )
    assert stop_words.describe_stop(None) is None


def test_the_worker_and_cli_keep_openmps_own_wait_policy() -> None:
    """`python -m workbench` sets no OMP_WAIT_POLICY: libgomp's default (spin a moment, then
    sleep) trained 5,616-6,278 tokens/s with 1 x 2 threads on an idle machine where PASSIVE
    trained 4,058-4,447 (docs/TRAINING.md "A busy core"); a taken core is
    `pace.ThreadWatch`'s to notice. A policy the user set is kept."""
    code = (
        "import os, runpy; runpy.run_module('workbench', run_name='imported'); "
        "import torch; print(os.environ.get('OMP_WAIT_POLICY', 'unset'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "unset", out.stderr[-2000:]
    kept = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "OMP_WAIT_POLICY": "PASSIVE"},
        capture_output=True,
        text=True,
    )
    assert kept.stdout.strip() == "PASSIVE"
