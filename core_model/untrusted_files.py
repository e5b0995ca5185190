"""Reading one file of a model made elsewhere (a public checkpoint, a folder someone sent, a
zip unpacked): such a folder may hold anything, so every file is read the same way here.

* It must be a regular file: a FIFO would block the reader for as long as nobody writes to
  it, a device never ends, and a symbolic link may point at a file of ours (a README.md
  linked to a secret would end up in a version's notes). The file is opened without
  following a link and without blocking, then checked on the open descriptor (no window
  between the check and the read).
* It is bounded: a file larger than its bound is refused before it is read.
* JSON is parsed so that hostile nesting is a refusal: Python's parser recurses, and a
  200,000-deep array raises ``RecursionError``; a structure deeper than ``MAX_JSON_DEPTH``
  (nothing a model's config or vocabulary needs) is refused too, so that no later step
  (storing, copying, dumping it) recurses that deep either.

Every refusal is one ``UntrustedFileError`` line naming the file (not its folder, which may
be a staging copy the user never saw); a missing file is ``FileNotFoundError``, as ``open``
says it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 64 << 20  # OPUS-MT's vocab.json is ~2 MB, a config a few KB
MAX_TEXT_BYTES = 1 << 20  # a model card or a licence text
MAX_JSON_DEPTH = 64  # a config nests 3 levels, a vocabulary 1


class UntrustedFileError(ValueError):
    """A model file that is not read: not regular, too large, or not parseable. One line."""


def read_bytes(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (not a link, FIFO or device), at most
    `max_bytes` of them; ``FileNotFoundError`` when it is missing."""
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(f"{path.name} is a symbolic link: refused") from None
        raise UntrustedFileError(f"{path.name} cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path.name} is not a regular file (a FIFO or device?)")
        if info.st_size > max_bytes:
            raise UntrustedFileError(_too_large(path, max_bytes))
        data = f.read(max_bytes + 1)  # (it may have grown since fstat)
    if len(data) > max_bytes:
        raise UntrustedFileError(_too_large(path, max_bytes))
    return data


def read_text(path: str | Path, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """`read_bytes` as UTF-8 text (undecodable bytes replaced: a card is only shown)."""
    return read_bytes(path, max_bytes).decode("utf-8", errors="replace")


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of the file `path`, read as `read_bytes` reads it, nested at most
    `MAX_JSON_DEPTH` levels."""
    path = Path(path)
    raw = read_bytes(path, max_bytes)
    try:
        value = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise UntrustedFileError(_too_deep(path)) from None
    except ValueError as exc:  # (UnicodeDecodeError included)
        reason = " ".join(str(exc).split())[:200]
        raise UntrustedFileError(f"{path.name} is not valid JSON ({reason})") from None
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        raise UntrustedFileError(_too_deep(path))
    return value


def _depth_exceeds(value: Any, most: int) -> bool:
    """Whether lists and objects nest deeper than `most` (walked with a stack, not recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > most:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _too_large(path: Path, max_bytes: int) -> str:
    return f"{path.name} is larger than {max_bytes >> 20} MiB: refused"


def _too_deep(path: Path) -> str:
    return f"{path.name} nests more than {MAX_JSON_DEPTH} levels deep: refused"
