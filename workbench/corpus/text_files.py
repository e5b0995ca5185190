"""Text files read as numbered lines, within limits: what every import reads (pairs, a pool's
sentences, a glossary) before a format makes records of it (``formats``).

A file is UTF-8 (an optional BOM is dropped), optionally gzip-compressed, and read as a
stream, in blocks: memory does not grow with the file. It may decompress to at most
``MAX_INPUT_BYTES``, checked before the first line is read (a gzip file is decompressed once
just to count its bytes), and no line may be longer than ``MAX_LINE_BYTES``: a gzip "bomb" or
a binary file is refused early, by name, instead of exhausting memory or spending minutes on
rows. A file that cannot be read as text (not UTF-8, a NUL byte, not gzip although named
``.gz``, over the limits) raises ``WorkbenchError`` naming the line, when that line is
reached.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

MAX_INPUT_BYTES = 1 << 30  # decompressed size of one file (a million pairs is ~150 MB)
MAX_LINE_BYTES = 1 << 20  # one line; a pair's sides are at most MAX_CHARS characters each
# What the messages call a file they read, by the ``what`` of ``numbered_lines`` (message ids).
FILE_ROLES = {
    "file": N_("file"),
    "source file": N_("source file"),
    "target file": N_("target file"),
    "glossary file": N_("glossary file"),
}
_BLOCK = 1 << 20  # bytes read at a time
_NONBLANK = re.compile(r"[^\n]+")

SNIFF_BYTES = 65536  # of a file's start, to tell a format from its content

Data = bytes | str | Path | IO[bytes]  # content, a path, or an open binary file (an upload)


def head_text(head: bytes) -> str:
    """The readable start of a (possibly gzip-compressed) file, for sniffing only."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES)
        except zlib.error as exc:
            raise WorkbenchError(N_("not a valid gzip file ({error})"), error=str(exc)) from None
    return head.decode("utf-8", "replace")


@contextlib.contextmanager
def opened(data: Data, what: str) -> Iterator[tuple[IO[bytes], str | None]]:
    """(binary stream at its start, file name or None). ``str`` means a path."""
    if isinstance(data, bytes | bytearray | memoryview):
        yield io.BytesIO(data), None
        return
    if not isinstance(data, str | Path):  # an open file, e.g. Streamlit's UploadedFile
        data.seek(0)
        name = getattr(data, "name", None)
        yield data, name if isinstance(name, str) else None
        return
    path, role = Path(data), file_role(what)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise WorkbenchError(N_("{what} not found: {path}"), what=role, path=str(path)) from None
    except IsADirectoryError:
        raise WorkbenchError(
            N_("{what} is a directory: {path}"), what=role, path=str(path)
        ) from None
    except OSError as exc:
        raise WorkbenchError(
            N_("cannot read {path}: {error}"), path=str(path), error=exc.strerror
        ) from None
    with fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise WorkbenchError(
                N_("{what} is not a regular file: {path}"), what=role, path=str(path)
            )
        yield fh, path.name


def file_role(what: str) -> str:
    """A file's role as a message (``FILE_ROLES``), so that a page translates it."""
    return Message(FILE_ROLES[what]) if what in FILE_ROLES else what


def _blocks(stream: IO[bytes], name: str | None, what: str) -> Iterator[bytes]:
    """The decompressed bytes of ``stream`` in blocks, at most ``MAX_INPUT_BYTES`` in all.

    The size is known before the first block: a plain file's from its end, a gzip file's by
    decompressing it once without parsing anything (a few seconds for the largest allowed),
    so that a file over the cap never costs the minutes that parsing and checking its rows
    would (a 4.7 MB "bomb" decompressing to 1.5 GiB took 566 s of CPU before it was refused).
    """
    role = file_role(what)
    magic = stream.read(2)
    compressed = magic == b"\x1f\x8b"
    if not compressed and name and name.lower().endswith(".gz"):
        raise WorkbenchError(
            N_("{what} {name!r} is not a gzip file, although its name ends in .gz"),
            what=role,
            name=name,
        )
    if compressed:
        stream.seek(0)
        for _ in _capped(gzip.GzipFile(fileobj=stream, mode="rb"), role, compressed):
            pass
    elif stream.seek(0, os.SEEK_END) > MAX_INPUT_BYTES:
        raise _too_large(role, compressed)
    stream.seek(0)
    source: IO[bytes] = gzip.GzipFile(fileobj=stream, mode="rb") if compressed else stream
    yield from _capped(source, role, compressed)  # (a file may grow while it is read)


def _capped(source: IO[bytes], role: str, compressed: bool) -> Iterator[bytes]:
    """The blocks of ``source``; ``WorkbenchError`` past ``MAX_INPUT_BYTES`` or for a read
    that fails (gzip's errors among them)."""
    total = 0
    size = min(_BLOCK, MAX_LINE_BYTES)  # so a line inside a block is never over the limit
    while True:
        try:
            block = source.read(size)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise WorkbenchError(
                N_("{what} is not a valid gzip file ({error})"), what=role, error=str(exc)
            ) from None
        except OSError as exc:
            raise WorkbenchError(
                N_("cannot read {what}: {error}"), what=role, error=exc.strerror or str(exc)
            ) from None
        if not block:
            return
        total += len(block)
        if total > MAX_INPUT_BYTES:
            raise _too_large(role, compressed)
        yield block


def _too_large(role: str, compressed: bool) -> WorkbenchError:
    return WorkbenchError(
        N_("{what} is larger than {size} uncompressed: split it into smaller files")
        if compressed
        else N_("{what} is larger than {size}: split it into smaller files"),
        what=role,
        size=_size(MAX_INPUT_BYTES),
    )


def _size(n: int) -> Message:
    if n >= 1 << 20:
        return Message(N_("{n} MiB"), n=n >> 20)
    return Message(N_("{n} bytes"), n=f"{n:,}")


def read_bytes(data: Data, what: str = "file") -> bytes:
    """The whole (decompressed) content of a file, within ``MAX_INPUT_BYTES``: what a format
    parsed as one document (TMX, XLIFF) reads, by the same rules as the line formats."""
    with opened(data, what) as (stream, name):
        return b"".join(_blocks(stream, name, what))


def numbered_lines(
    data: Data, what: str = "file", skip_blank: bool = True
) -> Iterator[tuple[int, str]]:
    """(line number, line without its ``\\n`` / ``\\r\\n``) of a UTF-8 file, read as a stream
    (a monolingual file, e.g. a pool of sentences to translate, is read with it as it is).

    Lines are split on ``\\n`` only (other Unicode line breaks may be part of a sentence).
    ``skip_blank`` leaves out empty lines at C speed (a file of a billion newlines is read
    in seconds, not minutes). Raises ``WorkbenchError`` naming the line for invalid UTF-8,
    a NUL byte (a binary file) or a line over ``MAX_LINE_BYTES``.
    """
    with opened(data, what) as (stream, name):
        pending = b""  # the unfinished last line of the bytes read so far
        done = 0  # lines yielded or skipped so far
        first = True
        for block in _blocks(stream, name, what):
            buf = pending + block if pending else block
            cut = buf.rfind(b"\n")
            head_end = buf.find(b"\n") if cut >= 0 else len(buf)
            if head_end > MAX_LINE_BYTES:
                raise WorkbenchError(
                    N_("{what} line {line}: longer than {size} (is this a text file?)"),
                    what=file_role(what),
                    line=done + 1,
                    size=_size(MAX_LINE_BYTES),
                )
            if cut < 0:
                pending = buf
                continue
            pending = buf[cut + 1 :]
            chunk = _decode(buf[: cut + 1], done, what, first)
            first = False
            yield from _split(chunk, done, skip_blank)
            done += chunk.count("\n")
        if pending:
            chunk = _decode(pending, done, what, first)
            yield from _split(chunk + "\n", done, skip_blank)


def _decode(data: bytes, lines_before: int, what: str, first: bool) -> str:
    try:
        text = data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before + data.count(b"\n", 0, exc.start) + 1
        raise WorkbenchError(
            N_("{what} line {line}: not valid UTF-8 (byte 0x{byte}); save the file as UTF-8"),
            what=file_role(what),
            line=line,
            byte=f"{data[exc.start]:02x}",
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = lines_before + text.count("\n", 0, nul) + 1
        raise WorkbenchError(
            N_("{what} line {line}: contains a NUL byte (is this a text file?)"),
            what=file_role(what),
            line=line,
        )
    return text


def _split(text: str, lines_before: int, skip_blank: bool) -> Iterator[tuple[int, str]]:
    """The lines of ``text`` (which ends with ``\\n``) numbered from ``lines_before + 1``."""
    if skip_blank:
        n, pos = lines_before + 1, 0  # n: the number of the line at pos
        for m in _NONBLANK.finditer(text):
            n += text.count("\n", pos, m.start())
            pos = m.start()
            line = m.group()
            yield n, line[:-1] if line.endswith("\r") else line
        return
    for n, line in enumerate(text.split("\n")[:-1], start=lines_before + 1):
        yield n, line[:-1] if line.endswith("\r") else line
