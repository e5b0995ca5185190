"""Shared fixtures: a temporary WORKBENCH_HOME on SQLite, a throw-away PostgreSQL, and a
fingerprint of the whole database.

The tests mirror the layers: ``core_model/``, ``db/``, ``workbench/`` (services, worker, CLI),
``ui/`` (Streamlit AppTest) and ``e2e/`` (a real browser). Helpers that are not fixtures are
in ``tests/helpers.py`` (the toy corpus among them).

``pg_server`` runs ``initdb`` + ``postgres`` from the PostgreSQL binaries (found via PATH,
``pg_config --bindir`` or /usr/lib/postgresql/*/bin) in a temp dir on a free 127.0.0.1 port.
PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` user
(or ``nobody``) with the temp dir chowned to it. The server is stopped by PID at the end.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.processes import free_port
from db import dispose_engines
from workbench.settings import ENV_DB_URL, ENV_HOME
from workbench.team import access


def _share_the_cores_among_xdist_workers() -> None:
    """Under pytest-xdist (`make test`: a worker per core) each worker gets its share of the
    cores for torch's threads, and so does every process a test starts (the CLI, workers,
    servers, ranks inherit OMP_NUM_THREADS): otherwise each would take every core, and
    OpenMP threads that wait on each other on a shared core slow everything down."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    import torch

    threads = max(1, (os.cpu_count() or 1) // int(workers))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    torch.set_num_threads(threads)


_share_the_cores_among_xdist_workers()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` spreads single tests over pytest-xdist's workers (`--dist loadgroup`),
    except that the tests of a module which share a module-scoped fixture (a trained home, a
    running server, a converted checkpoint) stay together on one worker: each worker would
    otherwise build that fixture again."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


# Tests (and module-scoped fixtures, set up before any function-scoped one) call services as
# the command line does: as the local admin. A test of roles says who acts (``acting_as``);
# whatever a test installs (an AppTest run installs the UI's source) is undone after it.
access.use_actor_source(access.local_admin)


@pytest.fixture(autouse=True)
def local_admin_acts() -> Iterator[None]:
    access.use_actor_source(access.local_admin)
    yield
    access.use_actor_source(access.local_admin)


@pytest.fixture
def wb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh WORKBENCH_HOME using the default SQLite file inside it."""
    home = tmp_path / "wb_home"
    home.mkdir()
    monkeypatch.setenv(ENV_HOME, str(home))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    dispose_engines()
    yield home
    dispose_engines()


def fingerprint_database() -> str:
    """A digest of every row of every table (plus, on SQLite, the FTS index's health and
    its insert trigger): equal digests mean the database did not change."""
    import hashlib

    from sqlalchemy import select

    from db.tables import Base
    from workbench.storage import engine

    digest = hashlib.sha256()
    with engine().connect() as conn:
        for table in Base.metadata.sorted_tables:
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            digest.update(f"{table.name}:{len(rows)}:{rows!r}".encode())
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(
                "INSERT INTO pairs_fts(pairs_fts, rank) VALUES ('integrity-check', 1)"
            )
            trig = conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
            ).all()
            digest.update(f"triggers:{trig!r}".encode())
            conn.rollback()
    return digest.hexdigest()


@pytest.fixture
def db_fingerprint():
    """``db_fingerprint()`` -> digest of the current database (see fingerprint_database)."""
    return fingerprint_database


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class PgServer:
    host: str
    port: int
    user: str
    socket_dir: Path
    pid: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{database}"


def _pg_bindir() -> Path | None:
    candidates: list[str] = []
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "postgres").exists():
            return Path(c)
    return None


def _run_as() -> dict:
    """subprocess kwargs that drop root privileges (postgres will not run as root)."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    pytest.skip("running as root and no unprivileged 'postgres'/'nobody' user for PostgreSQL")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries (initdb, postgres) not found; apt install postgresql")
    as_user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="wb-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if as_user:
        for p in (root, sock):
            os.chown(p, as_user["user"], as_user["group"])
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    init = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
         "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True, env=env, **as_user,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {init.stderr.strip()[-300:]}")  # installed but broken
    port = free_port()
    log = open(root / "postgres.log", "wb")  # noqa: SIM115 (closed at teardown)
    proc = subprocess.Popen(
        [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
         "-c", "max_connections=200"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, **as_user,
    )  # fmt: skip
    server = PgServer("127.0.0.1", port, "postgres", sock, proc.pid)
    try:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(
                    host=server.host, port=port, user="postgres", dbname="postgres"
                ).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "postgres did not start: " + (root / "postgres.log").read_text()[-500:]
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)  # "fast" shutdown
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test (dropped afterwards)."""
    import psycopg

    name = "wb_" + uuid.uuid4().hex[:12]
    admin = dict(host=pg_server.host, port=pg_server.port, user=pg_server.user, dbname="postgres")
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_server.url(name)
    dispose_engines()
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Run a test once on a SQLite file and once on PostgreSQL (WORKBENCH_DB_URL is set)."""
    home = tmp_path / "wb_home"
    home.mkdir()
    monkeypatch.setenv(ENV_HOME, str(home))
    dispose_engines()
    if request.param == "sqlite":
        url = f"sqlite:///{home / 'workbench.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    monkeypatch.setenv(ENV_DB_URL, url)
    yield url
    dispose_engines()
