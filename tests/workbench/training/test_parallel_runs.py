"""A run spread over several processes by the worker itself (data-parallel ranks): it reports,
registers one version and says its layout; a rank that dies fails the run in words; a killed
worker takes its ranks along; the run resumes from its checkpoint and cancels within seconds."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from core_model.training.parallel import cpu_cores
from tests.helpers import (
    cli_in_process,
    cli_that_starts_a_worker,
    make_toy_corpus,
    start_worker,
    stop,
    wait_for,
)
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.models import registry
from workbench.training import metric_rows, run_info, runs

RANK_MODULE = "core_model.distributed"


def rank_children(parent: int) -> list[int]:
    """PIDs of the rank processes whose parent is `parent` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and RANK_MODULE in cmdline:
            found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """The process has ended (a zombie left for its parent to reap counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_train_with_two_processes_registers_one_version_and_says_its_layout(
    wb_home: Path,
) -> None:
    corpus_id = make_toy_corpus()
    done = cli_that_starts_a_worker("train", "--corpus", str(corpus_id), "--new",
                                    "--processes", "2", "--epochs", "2", "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "succeeded"
    assert (result["processes"], result["threads_per_process"]) == (2, 1)
    assert result["tokens_trained"] > 0 and result["tokens_per_s"] > 0
    [version] = registry.list_versions()
    assert version.id == result["version_id"]
    assert (version.metrics["world_size"], version.metrics["processes"]) == (2, 2)
    assert version.metrics["layout_reason"] == "2 process(es) asked for"
    # the run says how it spread over the machine (the Train page's run card shows it)
    assert run_info.get_run(result["run_id"]).layout == (
        "2 × 1 (training processes × threads each)"
    )
    rows = metric_rows.run_metrics(result["run_id"])
    assert set(rows["kind"]) >= {"start", "epoch", "done"}  # rank 0 reported as one run does
    assert rows["step"].is_monotonic_increasing


def test_bad_process_counts_are_refused_before_anything_is_queued(wb_home: Path) -> None:
    corpus_id = make_toy_corpus()
    for bad in (0, -1, 10_000, 1.5, True):
        with pytest.raises(WorkbenchError, match="Processes must"):
            runs.enqueue_training(corpus_id, processes=bad)
    assert run_info.list_runs() == []
    refused = cli_in_process("train", "--corpus", str(corpus_id), "--processes", "0")
    assert refused.returncode == 2 and refused.stderr.strip().startswith("error:")


def test_more_processes_than_cores_on_a_cpu_are_refused_in_one_line(wb_home: Path) -> None:
    """Tester's walk: 8 processes on a 2-core machine trained 13 times slower than one, with
    no word. On this machine's CPU, one process per core at most (page, CLI: one rule)."""
    corpus_id = make_toy_corpus()
    cores = cpu_cores()
    for device in ("cpu", "auto"):
        if device == "auto" and torch.cuda.is_available():
            continue  # 'auto' trains on the GPUs there
        with pytest.raises(WorkbenchError, match=rf"^{cores + 1} training processes .*\({cores}\)"):
            runs.enqueue_training(corpus_id, device=device, processes=cores + 1)
    assert run_info.list_runs() == []
    refused = cli_in_process(
        "train", "--corpus", str(corpus_id), "--device", "cpu", "--processes", str(cores + 1)
    )
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: {cores + 1} training processes are more than this machine's CPU cores "
        f"({cores}): on a CPU, at most one process per core."
    )
    assert run_info.list_runs() == []
    run_id = runs.enqueue_training(corpus_id, device="cpu", processes=cores)
    assert run_info.get_run(run_id).config["processes"] == cores


def test_a_killed_rank_fails_the_run_in_words_and_a_killed_worker_takes_its_ranks_along(
    wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_HEARTBEAT_TIMEOUT", "4")
    run_id = runs.enqueue_training(
        make_toy_corpus(), epochs=200, min_epoch_steps=20, processes=2, progress_every_s=0.2
    )
    checkpoint = settings.run_dir(run_id) / "checkpoint"

    # 1. A rank killed mid-run: the run fails with the reason, the worker lives on.
    worker = start_worker("--once", log=tmp_path / "worker1.log")
    try:
        wait_for(checkpoint.is_dir, 180, "the first epoch checkpoint")
        [rank] = rank_children(worker.pid)
        os.kill(rank, signal.SIGKILL)
        wait_for(lambda: run_info.get_run(run_id).status == "failed", 60, "the failed run")
        assert worker.wait(timeout=60) == 0  # --once: the worker itself ended normally
    finally:
        stop(worker)
    error = run_info.get_run(run_id).error
    assert error == (
        "Training process 2 of 2 was killed by signal 9 (SIGKILL), "
        "perhaps by the system for lack of memory."
    )

    # 2. Resumed from its checkpoint, then the worker is killed: its rank dies with it.
    resumed_at = runs.resume_run(run_id)
    failed_at = run_info.get_run(run_id).progress_step  # where the failed attempt ended

    def resumed_progress() -> bool:
        step = run_info.get_run(run_id).progress_step
        return step != failed_at and step > resumed_at

    worker = start_worker("--once", log=tmp_path / "worker2.log")
    try:
        wait_for(lambda: len(rank_children(worker.pid)) == 1, 120, "the resumed run's rank")
        wait_for(resumed_progress, 180, "progress of the resumed run")
        [rank] = rank_children(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        wait_for(lambda: gone(rank), 10, "the rank to die with its worker")
        wait_for(lambda: runs.reap_stale_runs() == 1, 30, "stale-heartbeat detection")
        assert run_info.get_run(run_id).status == "queued"
    finally:
        stop(worker)

    # 3. A new worker takes the run back from the checkpoint; a cancel ends every rank fast.
    monkeypatch.setenv("WORKBENCH_HEARTBEAT_TIMEOUT", "90")
    worker = start_worker("--once", log=tmp_path / "worker3.log")
    try:
        wait_for(lambda: len(rank_children(worker.pid)) == 1, 120, "the resumed run's rank")
        [rank] = rank_children(worker.pid)
        assert runs.cancel_run(run_id) == "running"
        asked = time.monotonic()
        wait_for(lambda: run_info.get_run(run_id).status == "cancelled", 30, "the cancel")
        assert time.monotonic() - asked < 15
        assert worker.wait(timeout=30) == 0
        wait_for(lambda: gone(rank), 10, "the rank to end with its run")
    finally:
        stop(worker)
    assert registry.list_versions() == []
