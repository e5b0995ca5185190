"""Helpers shared by the job/worker/CLI tests: a toy corpus, the CLI and real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "fixtures" / "toy_zh_en.tsv"


def toy_pairs() -> list[tuple[str, str]]:
    rows = [line.rstrip("\n").split("\t") for line in TOY.read_text(encoding="utf-8").splitlines()]
    return [(r[0], r[1]) for r in rows if len(r) >= 2]


def make_toy_corpus(name: str = "toy") -> int:
    from workbench import corpus

    info = corpus.create_corpus(name, "zh", "en")
    corpus.apply_edits(info.id, added=[{"source": s, "target": t} for s, t in toy_pairs()])
    return info.id


def add_preset(monkeypatch, name: str) -> None:
    """A new model preset in core_model (as if added to its source), for this test only."""
    from core_model.training import config as training_config
    from core_model.transformer import config as model_config

    monkeypatch.setitem(model_config.PRESETS, name, dict(model_config.PRESETS["tiny"]))
    monkeypatch.setattr(training_config, "PRESET_CHOICES", (*training_config.PRESET_CHOICES, name))


def subprocess_env() -> dict[str, str]:
    """The test's environment (WORKBENCH_HOME / WORKBENCH_DB_URL) plus the repo on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m workbench ARGS`` in a real process with the test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=ROOT,
        env=subprocess_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_worker(*args: str, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 — closed by the OS
    return subprocess.Popen(
        [sys.executable, "-m", "workbench", "worker", *args],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def stop(proc: subprocess.Popen) -> None:
    """Stop a process this test started (by PID), if it is still running."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
