"""Writing a file that the user named (an export, a backup, a translated XLIFF file): whole or
not at all, and never over something that is not the user's output.

A command line takes any path, so the target is checked before anything is written:

* a path inside the workbench's own data (``settings.is_workbench_file``: the database and
  its journals, the model and run folders, the locks) is refused: an export over
  ``workbench.db`` would destroy the database;
* an existing target that is not a regular file (a folder, a device such as ``/dev/full``, a
  fifo) is refused: renaming a file onto it would replace the device or fail half-way;
* a symbolic link is written through: the file it points to gets the new content and the
  link stays a link (what a shell's ``>`` does); the checks above apply to that file.

The data is written into a temporary file beside the target, then renamed onto it. The new
file gets the target's permission bits when it replaces one, else the mode any program's
output gets (0666 less the umask; the temporary file is created with that mode, so the
process-wide umask is never changed, which a threaded server could not afford).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_

NEW_FILE_MODE = 0o666  # less the umask, like any program's output


def checked_target(path: str | Path) -> Path:
    """The file that writing ``path`` will replace (links followed), once it is known to be
    one a user may write; ``WorkbenchError`` otherwise. Nothing is written."""
    try:
        target = Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as exc:  # a symbolic link loop
        raise WorkbenchError(
            N_("{path} cannot be resolved: {reason}"), path=str(path), reason=exc
        ) from None
    if settings.is_workbench_file(target):
        raise WorkbenchError(
            N_("{path} is one of the workbench's own files; write to another file"),
            path=str(path),
        )
    if not target.parent.is_dir():
        raise WorkbenchError(N_("folder does not exist: {path}"), path=str(target.parent))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    if stat.S_ISDIR(mode):
        raise WorkbenchError(N_("{path} is a directory"), path=str(path))
    if not stat.S_ISREG(mode):
        raise WorkbenchError(N_("{path} is not a regular file"), path=str(path))
    return target


@contextmanager
def replacing(path: str | Path, binary: bool = True) -> Iterator[IO]:
    """A file to write the new content of ``path`` into (text: UTF-8, no newline
    translation); on a clean exit it is flushed to disk and renamed onto ``path``, on an
    exception removed (``path`` untouched)."""
    target = checked_target(path)
    fd, temporary = _new_temporary(target)
    try:
        with os.fdopen(fd, "wb") if binary else _text(fd) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            if target.exists():  # the replaced file's permission bits, not mkstemp's 0600
                os.fchmod(fh.fileno(), stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_folder(target.parent)


def write_file(path: str | Path, data: bytes) -> None:
    """``data`` as the file ``path``, by the rules of ``replacing``."""
    with replacing(path) as fh:
        fh.write(data)


def _new_temporary(target: Path) -> tuple[int, Path]:
    """A new hidden file beside ``target``, created with the umask's mode (see the module
    docstring), and its open descriptor."""
    while True:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.partial")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(temporary, flags, NEW_FILE_MODE), temporary
        except FileExistsError:
            continue


def _text(fd: int) -> IO[str]:
    return os.fdopen(fd, "w", encoding="utf-8", newline="")


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
