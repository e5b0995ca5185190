"""Helpers shared by the tests (import them: ``from tests.helpers import …``): the toy corpus,
the CLI and real worker processes, waiting for a condition, trained data folders.

The toy corpus is ``fixtures/toy_zh_en.tsv``, a dozen unsegmented Chinese → English pairs:
``toy_pairs()`` reads it and ``make_toy_corpus()`` stores it as a corpus: the one definition
every test uses.

``trained_home()`` gives a test module a data folder of its own with real tiny versions in it,
each distinct one trained once per test run (see its docstring).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bench.processes import free_port  # noqa: F401 (the tests' free port, one home)

if TYPE_CHECKING:
    from workbench.corpus import import_checks

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "fixtures" / "toy_zh_en.tsv"


def toy_pairs() -> list[tuple[str, str]]:
    """The toy corpus as (source, target) pairs, in file order."""
    rows = [line.rstrip("\n").split("\t") for line in TOY.read_text(encoding="utf-8").splitlines()]
    return [(r[0], r[1]) for r in rows if len(r) >= 2]


def make_toy_corpus(name: str = "toy", reverse: bool = False) -> int:
    """The toy pairs as a new corpus ``name`` (in the test's database), zh→en or with
    ``reverse`` en→zh (a target written without spaces); returns its id."""
    from workbench.corpus import corpora, pairs

    rows = [(t, s) if reverse else (s, t) for s, t in toy_pairs()]
    info = corpora.create_corpus(name, *(("en", "zh") if reverse else ("zh", "en")))
    pairs.apply_edits(info.id, added=[{"source": s, "target": t} for s, t in rows])
    return info.id


def parse_pairs(
    data: Any, fmt: str | None = None, tgt_data: Any = None, *, src_lang=None, tgt_lang=None
) -> import_checks.ParsedImport:
    """Every pair a file holds and its report, without a database: the rows an import reads
    (``formats.read_rows``; ``src_lang``/``tgt_lang`` orient Tatoeba files) through its row
    checks, all accepted pairs kept (a preview keeps only a sample)."""
    from workbench.corpus import formats, import_checks

    validator = import_checks.Validator()
    pairs = validator.parsed.pairs
    for raw in formats.read_rows(data, fmt, tgt_data, src_lang, tgt_lang):
        pair = validator.check(raw)
        if pair is not None:
            pairs.append(pair)
    validator.parsed.accepted = len(pairs)
    return validator.parsed


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


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m workbench ARGS`` in a real process with the test's environment (plus
    `env`)."""
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=ROOT,
        env={**subprocess_env(), **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# `cli(..., env=IMPORT_LOG)`: Python writes every module it imports to stderr (`imports_of`)
IMPORT_LOG = {"PYTHONPROFILEIMPORTTIME": "1"}


def imports_of(done: subprocess.CompletedProcess) -> tuple[subprocess.CompletedProcess, set[str]]:
    """A process run with IMPORT_LOG: itself with its stderr less the log, and the names of
    the modules it imported."""
    log, rest = [], []
    for line in done.stderr.splitlines():
        (log if line.startswith("import time:") else rest).append(line)
    imported = {line.rsplit("|", 1)[-1].strip() for line in log}
    stderr = "".join(f"{line}\n" for line in rest)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr), imported


def cli_in_process(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``cli(*args)`` in this process: the same ``workbench.cli.main`` (``python -m
    workbench``'s), with stdin, stdout and stderr as strings and the exit status argparse or
    the command gives. For tests of what a command says and changes, not of the process
    itself (``cli`` keeps those): each fresh Python that imports torch costs the suite 2-4 s."""
    from workbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["workbench", *args], code, out.getvalue(), err.getvalue())


_DYING_IMPORT = """
import os, signal, sys
import workbench.corpus.importing as I
import workbench.corpus.pair_writer as W
from workbench.team import access
access.use_actor_source(access.local_admin)  # as the command line does
I.IMPORT_CHUNK = 50
insert = W.SqliteWriter.insert
calls = []
def dying_insert(self, *args):
    calls.append(1)
    if len(calls) == 3:  # two chunks are committed, the third is half-written
        os.kill(os.getpid(), signal.SIGKILL)
    return insert(self, *args)
W.SqliteWriter.insert = dying_insert
"""


def killed_import(home: Path, start: str, *args: str) -> None:
    """Run an import in a process of its own (on ``home``'s SQLite file) that is SIGKILLed while
    it writes its third chunk of 50 pairs. ``start`` is the Python line that starts the import;
    ``sys.argv[1:]`` are ``args``."""
    env = {**os.environ, "WORKBENCH_HOME": str(home)}
    env.pop("WORKBENCH_DB_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", _DYING_IMPORT + start, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def cli_that_starts_a_worker(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`cli(*args)` for a command that starts a detached worker (`train --wait`, say): the
    worker it started, if any, is stopped by its PID afterwards, whatever the outcome."""
    done = None
    try:
        done = cli(*args, timeout=timeout, env=env)
        return done
    finally:
        started = re.search(r"started a worker \(pid (\d+)\)", done.stderr if done else "")
        if started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(started.group(1)), signal.SIGTERM)


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


@contextlib.contextmanager
def module_home(home: Path) -> Iterator[Path]:
    """``WORKBENCH_HOME=home`` with its own SQLite file, for a module-scoped fixture (which
    the function-scoped ``wb_home`` cannot serve)."""
    from db import dispose_engines
    from workbench.settings import ENV_DB_URL, ENV_HOME

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_HOME, str(home))
        mp.delenv(ENV_DB_URL, raising=False)
        dispose_engines()
        try:
            yield home
        finally:
            dispose_engines()


def train_version(corpus_id: int, **options: Any) -> tuple[int, int]:
    """Queue a run and train it in this process (a worker's ``--once``); returns (run id,
    version id) and fails the test unless it registered a version."""
    from workbench.training import run_info, runs, worker

    run_id = runs.enqueue_training(corpus_id, **options)
    assert worker.run_worker(once=True) == 1
    run = run_info.get_run(run_id)
    assert run.version_id is not None, run.error
    return run_id, run.version_id


# --------------------------------------------------------------- trained homes, once a run


@dataclass(frozen=True)
class Training:
    """One training of a trained home: ``train_version``'s options; ``init``: it continues
    the version of an earlier training of the same home (that training's index)."""

    options: tuple[tuple[str, Any], ...]
    init: int | None = None


def training(init: int | None = None, **options: Any) -> Training:
    return Training(tuple(sorted(options.items())), init)


@dataclass(frozen=True)
class TrainedHome:
    """A data folder of one module's own: a corpus and the versions trained on it (in the
    order of the trainings), with their runs."""

    home: Path
    corpus_id: int
    version_ids: list[int]
    run_ids: list[int]


def _demo_corpus() -> int:
    from workbench.corpus import demo

    info = demo.ensure_demo_corpus()
    assert info is not None
    return info.id


CORPORA: dict[str, Callable[[], int]] = {
    "toy": make_toy_corpus,
    "toy_en_zh": lambda: make_toy_corpus("toy_en_zh", reverse=True),
    "demo": _demo_corpus,
}


def trained_home(
    tmp_path_factory: pytest.TempPathFactory, corpus: str, *trainings: Training
) -> TrainedHome:
    """A copy, for one test module, of a data folder holding the corpus ``corpus`` (a key
    of ``CORPORA``) and one version per training, trained by the real worker code
    (``train_version``), in order.

    Why a cache: many modules need the same tiny versions, and training them is most of the
    suite's time. Each distinct state is built once per test run, under the run's temporary
    folder (which pytest-xdist's workers share; a file lock makes the others wait for the one
    that builds it), keyed by a hash of its corpus and trainings; a state starts from a copy
    of the state of its first trainings, so modules that begin alike share that training too.
    The module's copy holds the SQLite file and the model folders (the database stores their
    paths relative to the data folder), so no module sees another's changes. Use it in a
    ``module_home(th.home)``."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    cache = root / "trained-homes"
    cache.mkdir(exist_ok=True)
    folder, state = _cached_state(cache, corpus, trainings)
    home = tmp_path_factory.mktemp(f"{corpus}_home")
    shutil.copytree(folder, home, dirs_exist_ok=True)
    return TrainedHome(home, state["corpus_id"], state["version_ids"], state["run_ids"])


def _cached_state(cache: Path, corpus: str, trainings: tuple[Training, ...]) -> tuple[Path, dict]:
    """The folder of a state (built if it is not cached yet) and its ids."""
    key = hashlib.sha256(repr((corpus, trainings)).encode()).hexdigest()[:16]
    folder, ids = cache / key, cache / f"{key}.json"
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if ids.exists():
            return folder, json.loads(ids.read_text())
        staging = cache / f"{key}.building"  # a build that failed half-way is started over
        shutil.rmtree(staging, ignore_errors=True)
        if trainings:
            start, state = _cached_state(cache, corpus, trainings[:-1])
            shutil.copytree(start, staging)
        else:
            staging.mkdir()
        with module_home(staging):
            if not trainings:
                state = {"corpus_id": CORPORA[corpus](), "version_ids": [], "run_ids": []}
            else:
                last = trainings[-1]
                options = dict(last.options)
                if last.init is not None:
                    options["init_version_id"] = state["version_ids"][last.init]
                run_id, version_id = train_version(state["corpus_id"], **options)
                state = {
                    **state,
                    "version_ids": [*state["version_ids"], version_id],
                    "run_ids": [*state["run_ids"], run_id],
                }
        staging.rename(folder)  # complete before its ids say it exists
        ids.write_text(json.dumps(state))
        return folder, state
