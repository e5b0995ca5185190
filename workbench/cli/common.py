"""What every command shares: the ``Command`` record, exit statuses, output for people and
for scripts, and argument types.

Output meant for people passes through ``print_text``, which escapes control characters
(``text_rules.escape_controls``): a corpus or version name, a file name or a line of an
imported file can never act on the terminal. JSON output escapes them the JSON way.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from db.engine import MAX_ID
from workbench.corpus.text_rules import escape_controls
from workbench.errors import WorkbenchError
from workbench.messages import N_

if TYPE_CHECKING:
    import pandas as pd

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
MISSING_CELL = "–"  # what a text table shows where a value is missing


@dataclass(frozen=True)
class Command:
    """One ``python -m workbench <name>`` command: its options and its work."""

    name: str
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # returns the exit status


def print_text(text: str, file: TextIO | None = None) -> None:
    """Print for people: control characters shown as escapes (see the module docstring)."""
    print(escape_controls(text), file=file or sys.stdout)


def print_done(text: str) -> int:
    """A command's last line for people (as ``print_text``), and its exit status: done."""
    print_text(text)
    return EXIT_OK


def counted(n: int, word: str, words: str | None = None) -> str:
    """'1 pair', '2 pairs', '1,000 pairs': the command line speaks English (a page's counts
    are ``ui.i18n.n_``'s)."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def print_json(data: Any) -> None:
    """One JSON line; besides JSON's own escapes, every character that could act on a
    terminal (C1 controls, bidi overrides, line separators) is written as a \\u escape."""
    print(escape_controls(json.dumps(data, ensure_ascii=False), json=True))


def json_option(help: str) -> Callable[[argparse.ArgumentParser], None]:
    """The ``add_args`` of a listing whose one option is ``--json`` (what it prints then)."""

    def add_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help=help)

    return add_args


def print_list(as_json: bool, records: list[Any], lines: Iterable[str], empty: str) -> int:
    """A listing's output: one JSON array of ``records`` for scripts; for people one line per
    item, or, when there is none, ``empty``: a hint that names the command that makes one."""
    if as_json:
        print_json(records)
        return EXIT_OK
    if not records:
        print(empty)
    for line in lines:
        print_text(line)
    return EXIT_OK


def print_table(table: pd.DataFrame) -> None:
    """A listing as a text table for people: a missing value (None, NaN, <NA>, NaT) is shown
    as ``MISSING_CELL`` whatever its column's type, and every text cell is escaped (see the
    module docstring)."""
    import pandas as pd

    def cell(value: Any) -> Any:
        if pd.api.types.is_scalar(value) and pd.isna(value):
            return MISSING_CELL
        return escape_controls(value) if isinstance(value, str) else value

    print(table.astype(object).map(cell).to_string(index=False))


def print_error(message: str) -> None:
    """The one-line ``error: …`` every failure ends with (on stderr)."""
    print(f"error: {escape_controls(' '.join(message.split()))}", file=sys.stderr)


def row_id(text: str) -> int:
    """An id argument: a positive integer that a database row can have."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an id: {text!r}") from None
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"ids are 1 to {MAX_ID}, got {value}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def undecodable(text: str) -> bool:
    """Whether ``text`` came from bytes that are not UTF-8: Python hands such bytes (in
    arguments, and on standard input in the C locale or UTF-8 mode) over as lone surrogates,
    which no database or terminal accepts."""
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def stdin_lines() -> list[str]:
    """The lines of standard input (without their newlines), refused unless UTF-8 text."""
    try:
        lines: list[str] | None = [line.rstrip("\n") for line in sys.stdin]
    except UnicodeDecodeError:  # a standard input decoded strictly
        lines = None
    if lines is None or any(undecodable(line) for line in lines):
        raise WorkbenchError(N_("standard input is not UTF-8 text"))
    return lines


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file; ``WorkbenchError`` when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise WorkbenchError(N_("file not found: {path}"), path=path) from None
    except UnicodeDecodeError:
        raise WorkbenchError(N_("{path} is not UTF-8 text"), path=path) from None
