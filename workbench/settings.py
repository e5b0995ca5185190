"""The workbench's environment and every path under ``WORKBENCH_HOME``.

This is the only module that reads the workbench's environment variables or builds a path
under the data folder; the rest of the application asks it.

Environment:

* ``WORKBENCH_HOME`` (default ``./workbench_data``): the data folder, created when missing.
* ``WORKBENCH_DB_URL`` (any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db``):
  the database; default the SQLite file ``<WORKBENCH_HOME>/workbench.db``.
* ``WORKBENCH_SQLITE_BUSY_TIMEOUT_MS``: how long a SQLite writer waits for the lock
  (default ``db.engine.SQLITE_BUSY_TIMEOUT_MS``; tests shrink it).
* ``WORKBENCH_HEARTBEAT_TIMEOUT``: seconds without a heartbeat after which a running run's
  worker is taken for dead (default 90).
* ``WORKBENCH_PG_BINDIR``: the folder of ``pg_dump`` / ``pg_restore`` for backups, when the
  ones found on the machine are older than the PostgreSQL server (``workbench.backup.pg_tools``).
* ``WORKBENCH_ADMINS``: comma-separated e-mails that are always admins when sign-in is on
  (the first admin of a team; ``workbench.team.access``).
* ``WORKBENCH_PROVIDER_VERIFIES_EMAILS``: ``1`` when the sign-in provider verifies every
  e-mail it sends without saying so (no ``email_verified`` claim, e.g. Microsoft Entra ID with
  only the organisation's own domains); otherwise such a sign-in is refused
  (``workbench.team.access.unverified_email``).
* ``WORKBENCH_LOCAL_ADMIN``: the name the command line (and the UI without sign-in) acts
  under, recorded as who started a run (default ``<OS user>@localhost``).
* ``WORKBENCH_DEBUG``: when set, the CLI prints the traceback of an internal error.
* ``WORKBENCH_SERVE_CONFIG``: set by ``workbench serve`` for its worker processes (the
  server's ``ServeConfig`` as JSON); not meant to be set by hand.
* ``WORKBENCH_SERVE_PORT``: the port of the HTTP server the Models page starts on 127.0.0.1
  (default 5000; ``workbench.serving.launcher``).

The data folder::

    <WORKBENCH_HOME>/
      workbench.db              the SQLite database (unless WORKBENCH_DB_URL says otherwise)
      models/<version id>/      a model version's files (see workbench.models.registry)
        ctranslate2-<weights>/  the version exported to CTranslate2, made when first used
      runs/<run id>/            where a run trains: its checkpoint, then its model
      runs/import-<hex>/        a model folder being copied in by `register` (its lock held
                                while it lives: workbench.models.staging)
      logs/worker.log           what a worker started on demand prints
      logs/server.log           what the HTTP server the Models page started prints
      .restore-<hex>/           a backup being checked before a restore (workbench.backup.restore)
      restore.journal           what a restore puts in place (backup.restore_journal)
      worker.lock, spawn.lock   a live worker's lock; the lock that serialises starting one
                                (or the page's server)
      server.lock, server.json  the lock of the HTTP server the page started; its PID and port
      database.lock             held by every process that has the database open, and by a
                                restore alone (workbench.database_lock)
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from db.engine import SQLITE_BUSY_TIMEOUT_MS

ENV_HOME = "WORKBENCH_HOME"
ENV_DB_URL = "WORKBENCH_DB_URL"
ENV_SQLITE_BUSY_TIMEOUT = "WORKBENCH_SQLITE_BUSY_TIMEOUT_MS"
ENV_HEARTBEAT_TIMEOUT = "WORKBENCH_HEARTBEAT_TIMEOUT"
ENV_DEBUG = "WORKBENCH_DEBUG"
ENV_PG_BINDIR = "WORKBENCH_PG_BINDIR"
ENV_SERVE_CONFIG = "WORKBENCH_SERVE_CONFIG"
ENV_SERVE_PORT = "WORKBENCH_SERVE_PORT"
ENV_ADMINS = "WORKBENCH_ADMINS"
ENV_LOCAL_ADMIN = "WORKBENCH_LOCAL_ADMIN"
ENV_PROVIDER_VERIFIES_EMAILS = "WORKBENCH_PROVIDER_VERIFIES_EMAILS"
DEFAULT_HOME = "./workbench_data"
# Longer than SQLite's busy timeout: a heartbeat may wait that long behind a big import.
HEARTBEAT_TIMEOUT_S = 90.0
IMPORT_STAGING_PREFIX = "import-"  # folders under runs/ that a `register` copies into
RESTORE_STAGING_PREFIX = ".restore-"  # folders in the data folder that a restore unpacks into


# ------------------------------------------------------------------------- environment


def home() -> Path:
    """The data folder (created if missing)."""
    folder = Path(os.environ.get(ENV_HOME) or DEFAULT_HOME).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def database_url() -> str:
    """``WORKBENCH_DB_URL`` if set, else the SQLite file ``<WORKBENCH_HOME>/workbench.db``."""
    url = os.environ.get(ENV_DB_URL, "").strip()
    if url:
        return url
    return f"sqlite:///{home() / 'workbench.db'}"


def database_is_local() -> bool:
    """SQLite means one machine: no GPU worker elsewhere can pick up a CUDA run."""
    return database_url().startswith("sqlite")


def sqlite_busy_timeout_ms() -> int:
    """How long a SQLite writer waits for the lock before 'database is locked'."""
    return int(os.environ.get(ENV_SQLITE_BUSY_TIMEOUT) or SQLITE_BUSY_TIMEOUT_MS)


def heartbeat_timeout_s() -> float:
    """Seconds without a heartbeat after which a running run's worker is taken for dead."""
    return float(os.environ.get(ENV_HEARTBEAT_TIMEOUT) or HEARTBEAT_TIMEOUT_S)


def debug() -> bool:
    """Whether internal errors should show their traceback (``WORKBENCH_DEBUG``)."""
    return bool(os.environ.get(ENV_DEBUG))


def pg_bindir() -> Path | None:
    """Where to look first for ``pg_dump`` / ``pg_restore`` (``WORKBENCH_PG_BINDIR``)."""
    folder = os.environ.get(ENV_PG_BINDIR, "").strip()
    return Path(folder).expanduser() if folder else None


def configured_admins() -> frozenset[str]:
    """The e-mails that ``WORKBENCH_ADMINS`` makes admins (lower case)."""
    raw = os.environ.get(ENV_ADMINS, "")
    return frozenset(e.strip().lower() for e in raw.split(",") if e.strip())


def provider_verifies_emails() -> bool:
    """Whether ``WORKBENCH_PROVIDER_VERIFIES_EMAILS`` says the sign-in provider verifies
    every e-mail it sends, even without an ``email_verified`` claim."""
    return os.environ.get(ENV_PROVIDER_VERIFIES_EMAILS, "").strip().lower() in ("1", "true", "yes")


def local_admin_name() -> str:
    """Who the command line acts as: ``WORKBENCH_LOCAL_ADMIN``, else ``<OS user>@localhost``."""
    name = os.environ.get(ENV_LOCAL_ADMIN, "").strip()
    if name:
        return name
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "local"
    return f"{user}@localhost"


def serve_config() -> str | None:
    """The JSON of the HTTP server's config, handed to its worker processes."""
    return os.environ.get(ENV_SERVE_CONFIG) or None


def serve_port_as_set() -> str | None:
    """The port of the HTTP server the Models page starts (``WORKBENCH_SERVE_PORT``, as set:
    ``serving.launcher`` checks it)."""
    return os.environ.get(ENV_SERVE_PORT, "").strip() or None


# ------------------------------------------------------------------------------- paths


def model_folder(version_id: int) -> str:
    """Where a version's files go, relative to the data folder (stored so in its row, so a
    data folder can be moved whole)."""
    return f"models/{version_id}"


def models_dir() -> Path:
    """The folder holding every version's folder (``model_folder``)."""
    return home() / "models"


def restore_staging_dir(token: str) -> Path:
    """Where a restore unpacks and checks a backup: inside the data folder, so its model
    folders move into place by rename."""
    return home() / f"{RESTORE_STAGING_PREFIX}{token}"


def restore_staging_dirs() -> list[Path]:
    """Every such folder now in the data folder (a killed restore's are swept at the next
    start: ``workbench.backup.restore_journal``)."""
    return list(home().glob(f"{RESTORE_STAGING_PREFIX}*"))


def restore_journal_path() -> Path:
    """What a restore is putting in place, written before its first rename, so that a killed
    one is finished or rolled back at the next start (``workbench.backup.restore_journal``)."""
    return home() / "restore.journal"


def resolve(stored_path: str) -> Path:
    """A path stored in the database: relative ones are under the data folder."""
    path = Path(stored_path)
    return path if path.is_absolute() else home() / path


def version_folder(stored_path: str) -> Path | None:
    """The folder a version row's stored path names, when it is a folder directly inside
    ``models/`` (links followed); None for any other place, which the workbench neither
    restores a version into nor deletes."""
    folder = resolve(stored_path).resolve()
    return folder if folder.parent == models_dir().resolve() else None


def ctranslate2_folder(stored_path: str, quantization: str) -> Path:
    """Where the CTranslate2 engine keeps a version's export (inside the version's folder:
    deleting the version deletes it; the version's digest never covers it)."""
    return resolve(stored_path) / f"ctranslate2-{quantization}"


def runs_dir() -> Path:
    return home() / "runs"


def memory_dir() -> Path:
    """The corpus memories' (kNN-MT) stores, one file per version and corpus."""
    return home() / "memory"


def run_dir(run_id: int) -> Path:
    """Where a run's worker trains: its epoch checkpoint, then the model before registration."""
    return runs_dir() / str(run_id)


def new_import_staging_dir(token: str) -> Path:
    """A fresh folder under runs/ that a model folder is copied into before it is checked
    (``workbench.models.staging`` makes it, and sweeps one that a killed import left)."""
    return runs_dir() / f"{IMPORT_STAGING_PREFIX}{token}"


def import_staging_dirs() -> list[Path]:
    """Every such folder now under runs/."""
    return list(runs_dir().glob(f"{IMPORT_STAGING_PREFIX}*"))


def worker_log_path() -> Path:
    """What a worker started on demand prints (its folder is created)."""
    return _logs_dir() / "worker.log"


def server_log_path() -> Path:
    """What the HTTP server the Models page started prints (its folder is created)."""
    return _logs_dir() / "server.log"


def _logs_dir() -> Path:
    logs = home() / "logs"
    logs.mkdir(exist_ok=True)
    return logs


def worker_lock_path() -> Path:
    """A live worker holds a shared lock on this file for as long as it runs."""
    return home() / "worker.lock"


def database_lock_path() -> Path:
    """Every process with the database open holds a shared lock on it; a restore holds it
    alone."""
    return home() / "database.lock"


def spawn_lock_path() -> Path:
    """Serialises starting a worker (or the page's HTTP server), so two quick clicks never
    start two."""
    return home() / "spawn.lock"


def server_lock_path() -> Path:
    """The HTTP server the Models page started holds a shared lock on this file while it runs."""
    return home() / "server.lock"


def server_record_path() -> Path:
    """The PID and port of the HTTP server the Models page started (JSON)."""
    return home() / "server.json"


def is_workbench_file(path: Path) -> bool:
    """Whether ``path`` (absolute, links resolved) is the workbench's own: the SQLite
    database or a file beside it that SQLite, an import or a migration keeps
    (``workbench.db-wal``, ``-shm``, ``-journal``, ``.*.lock``; ``workbench.db.bak.tar.gz`` is a
    user's), anything under the data folder's ``models/``, ``runs/``, ``memory/`` or ``logs/``
    or a restore's folder, or one of its lock and record files. No command writes a user's
    output file there (``workbench.output_files``)."""
    database = _sqlite_database()
    if database is not None and path.parent == database.parent:
        name, other = database.name, path.name
        journal = other in (f"{name}-wal", f"{name}-shm", f"{name}-journal")
        lock = other.startswith(f"{name}.") and other.endswith(".lock")  # import, migration
        if other == name or journal or lock:
            return True
    data = home()
    if not path.is_relative_to(data) or path == data:
        return False
    first = path.relative_to(data).parts[0]
    owned = {
        models_dir(),
        runs_dir(),
        memory_dir(),
        data / "logs",
        restore_journal_path(),
        worker_lock_path(),
        database_lock_path(),
        spawn_lock_path(),
        server_lock_path(),
        server_record_path(),
    }
    return data / first in owned or first.startswith(RESTORE_STAGING_PREFIX)


def sqlite_path(url: URL) -> Path | None:
    """The file a SQLite URL names (absolute); None for a database in memory or a `file:`
    URI. (The caller knows the URL is SQLite's.)"""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser().absolute()


def _sqlite_database() -> Path | None:
    """The SQLite file of the configured database, if it is one, links resolved (an
    unreadable URL is refused when the database is opened, not here)."""
    try:
        url = make_url(database_url())
    except ArgumentError:
        return None
    path = sqlite_path(url) if url.get_backend_name() == "sqlite" else None
    return path.resolve() if path is not None else None


def sqlite_import_lock_path(sqlite_file: str, token: str) -> Path:
    """The lock a live staged import holds: next to the SQLite file (not under the data
    folder), so every process that writes to that file sees it."""
    return Path(f"{sqlite_file}.import-{token}.lock")
