"""``python -m workbench <command>``: the command line of DESIGN.md.

Adding a command: in the module of its group (``corpus_commands``, ``training_commands``,
``model_commands``, ``serving_commands``, or a new one) write ``_args_<name>(parser)`` (its
options) and ``_cmd_<name>(args) -> int`` (its work; return the exit status), then add one
``Command`` line to that module's ``COMMANDS`` (a new module is added to ``GROUPS`` below).
Choices come from their one source (e.g. ``formats.FORMATS``, ``train_options.presets``),
never a list of their own. A command imports the services it calls inside ``_cmd_<name>``,
so that every other command starts without them.

Every command fails the same way: bad input raises ``WorkbenchError`` and the user sees one
line ``error: <message>`` with exit status 2 (a malformed ``WORKBENCH_DB_URL`` and arguments
that are not valid UTF-8 too); argparse usage errors also print one line and exit 2; a
failure of the environment (disk full, database unreachable or unwritable) prints one
``error: …`` line and exits 1; an unexpected exception prints one
``error: internal error: …`` line and exits 1 (set ``WORKBENCH_DEBUG=1`` for the traceback).

The command line acts as the local admin (``workbench.team.access.local_admin``, named by
``WORKBENCH_LOCAL_ADMIN``): roles limit the UI's users and API keys, not whoever can run
commands against the data folder.
"""

from __future__ import annotations

import argparse
import errno
import traceback
from collections.abc import Sequence

from db.engine import DatabaseConfigError
from workbench import settings
from workbench.cli import (
    backup_commands,
    corpus_commands,
    history_commands,
    model_commands,
    serving_commands,
    team_commands,
    training_commands,
)
from workbench.cli.common import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    print_error,
    undecodable,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_

GROUPS = (
    corpus_commands,
    history_commands,
    training_commands,
    model_commands,
    serving_commands,
    backup_commands,
    team_commands,
)
COMMANDS: list[Command] = [cmd for group in GROUPS for cmd in group.COMMANDS]


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one ``error: …`` line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print_error(f"{message} (see: {self.prog} --help)")  # may quote an argument
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m workbench", description="Translation workbench")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for cmd in COMMANDS:
        # argparse %-formats a command's help ("%(default)s"), so a literal "95%" in it must
        # reach argparse as "%%"; a description is printed as written.
        p = sub.add_parser(cmd.name, help=cmd.help.replace("%", "%%"), description=cmd.help)
        cmd.add_args(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (``__main__`` passes it to SystemExit)."""
    args = build_parser().parse_args(argv)
    # Whoever runs the command line owns the data folder: it acts as the local admin.
    from workbench.team import access

    access.use_actor_source(access.local_admin)
    try:
        _check_text_arguments(args)
        return int(args._run(args) or EXIT_OK)
    except (WorkbenchError, DatabaseConfigError) as exc:
        print_error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if settings.debug():
            traceback.print_exc()
        environment = _environment_failure(exc)
        if environment:
            print_error(environment)
            return EXIT_INTERNAL
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print_error(f"internal error: {type(exc).__name__}: {first}")
        return EXIT_INTERNAL


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse text arguments that are not valid UTF-8 (``undecodable``). File names may be
    any bytes."""
    for key, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and undecodable(item):
                if key == "text":
                    raise WorkbenchError(N_("an argument is not valid UTF-8 text"))
                raise WorkbenchError(
                    N_("{option} is not valid UTF-8 text"), option=f"--{key.replace('_', '-')}"
                )


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _environment_failure(exc: BaseException) -> str | None:
    """A one-line explanation when ``exc`` is the environment failing, not the program."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, OSError):
        if exc.errno in _DISK_FULL:
            return f"disk full: cannot write {exc.filename or 'a file'} ({exc.strerror})"
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}{where}"
    if isinstance(exc, DBAPIError):
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else ""
        if "full" in reason:  # SQLite: "database or disk is full"
            return f"disk full: the database cannot be written ({reason})"
        return f"database error: {reason or type(exc.orig).__name__}"
    return None
