"""The lock on ``<WORKBENCH_HOME>/database.lock`` that says who has the data folder's database
open, so that a restore never replaces a database under a process that goes on writing to it.

Every process that opens the database through ``storage.engine()`` (the app, each command,
the workers, the HTTP server and its processes) takes a shared ``flock`` on the file the
first time and holds it until it exits (``hold_shared``); a restore takes it exclusively
(``exclusive``) and so refuses while any of them runs, naming them; and a process that starts
while a restore holds it is refused until the restore is done. The OS drops a lock when its
process dies: a killed process never leaves the data folder locked.

What it covers: the processes on this machine that use this data folder. A PostgreSQL
database may also be used from other machines, which no file lock here sees; a restore there
also refuses while any other client is connected to the database (``workbench.backup.restore``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

_guard = threading.Lock()  # (the app's sessions run on several threads)
_held: IO[bytes] | None = None  # this process' shared lock, on the file of _held_path
_held_path: Path | None = None
_SHOWN_COMMAND_CHARS = 80


def hold_shared() -> None:
    """Hold the shared lock of the configured data folder from now until the process exits
    (a process that moves to another data folder lets the old one go). Raises
    ``WorkbenchError`` while a restore replaces the database."""
    global _held, _held_path
    path = settings.database_lock_path()
    if _held_path == path:
        return
    with _guard:
        if _held_path == path:
            return
        lock = open(path, "a+b")  # noqa: SIM115 — held for the process lifetime
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise WorkbenchError(
                N_(
                    "a restore is replacing the database of this data folder: try again when "
                    "it is done"
                )
            ) from None
        _release()
        _held, _held_path = lock, path


def release() -> None:
    """Let this process' shared lock go (a restore in this process does, first)."""
    with _guard:
        _release()


def _release() -> None:
    global _held, _held_path
    if _held is not None:
        _held.close()
    _held, _held_path = None, None


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the lock alone for the block: refused (``WorkbenchError`` naming the processes
    that hold it) while any other process has the database open. This process' own shared
    lock is let go first: the caller must not use the database through ``storage`` inside
    the block."""
    release()
    path = settings.database_lock_path()
    with open(path, "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkbenchError(
                N_(
                    "the database of this data folder is in use by {processes}: stop the app, "
                    "the workers and the HTTP server first"
                ),
                processes=", ".join(holders(path)) or Message(N_("another process")),
            ) from None
        yield


def holders(path: Path) -> list[str]:
    """The processes that hold a lock on ``path``, each as 'pid N (its command line)', read
    from Linux's /proc/locks (empty where there is none)."""
    try:
        info = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    pids: list[int] = []
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  READ  4242 fd:01:1234 0 EOF" ("->" marks a waiter, not a holder)
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            pid = int(fields[4]) if fields[4].isdigit() else 0
            if pid > 0 and pid != os.getpid() and pid not in pids:
                pids.append(pid)
    return [f"pid {pid} ({_command_line(pid)})" for pid in sorted(pids)]


def _command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w for w in raw.decode(errors="replace").split("\0") if w]
    text = " ".join([Path(words[0]).name, *words[1:]]) if words else "?"
    return text if len(text) <= _SHOWN_COMMAND_CHARS else text[: _SHOWN_COMMAND_CHARS - 1] + "…"
