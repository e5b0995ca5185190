"""``backup`` and ``restore``: the database and the model folders in one checksummed archive
(the work is the ``workbench.backup`` package)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.cli.common import EXIT_OK, Command, print_json, print_text


def _args_backup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        type=Path,
        help="the archive to write (a tar, gzip-compressed if FILE ends in .gz or .tgz; "
        "replaced if there)",
    )


def _cmd_backup(args: argparse.Namespace) -> int:
    from workbench.backup.backup import backup

    summary = backup(args.file)
    if summary.missing_model_folders:
        ids = ", ".join(map(str, summary.missing_model_folders))
        print_text(f"warning: the folders of model versions {ids} are missing", file=sys.stderr)
    print_json(summary.as_dict())
    return EXIT_OK


def _args_restore(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="an archive written by `backup`")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the database and model folders even if they hold data",
    )


def _cmd_restore(args: argparse.Namespace) -> int:
    from workbench.backup.restore import restore

    print_json(restore(args.file, force=args.force).as_dict())
    return EXIT_OK


COMMANDS = [
    Command(
        "backup",
        "write the database and the model folders into one checksummed archive",
        _args_backup,
        _cmd_backup,
    ),
    Command(
        "restore",
        "restore a backup into an empty data folder and database",
        _args_restore,
        _cmd_restore,
    ),
]
