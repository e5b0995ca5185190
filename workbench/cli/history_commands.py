"""``history``, ``undo``, ``trash`` and ``restore-corpus``: the change history and the trash
(``workbench.team``) from the command line."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from workbench.cli.common import (
    EXIT_OK,
    Command,
    counted,
    json_option,
    print_done,
    print_json,
    print_text,
    row_id,
)
from workbench.corpus.corpora import CORPUS_REF_HELP
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.team.trash import TRASH_DAYS


def _moment(text: str) -> datetime:
    """An ISO date or date-time; without an offset it is UTC. Converted here, so a moment that
    UTC cannot hold (year 1 at +14:00) is an argument error, not a failed query."""
    try:
        value = datetime.fromisoformat(text)
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not an ISO date or time: {text!r}") from None


def _args_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, help=CORPUS_REF_HELP)
    p.add_argument("--user", help="only this user's changes")
    p.add_argument("--since", type=_moment, help="only changes at or after this ISO time (UTC)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _cmd_history(args: argparse.Namespace) -> int:
    from workbench.corpus.corpora import get_corpus
    from workbench.team import history

    corpus = get_corpus(args.corpus)
    for c in history.list_changes(corpus.id, actor=args.user, since=args.since):
        if args.json:
            print_json({**c.__dict__, "at": c.at.isoformat()})
            continue
        state = f" (undone by #{c.undone_by})" if c.undone_by else ""
        print_text(f"#{c.id}  {c.at:%Y-%m-%d %H:%M:%S}  {c.actor}  {c.summary}{state}")
    return EXIT_OK


def _args_undo(p: argparse.ArgumentParser) -> None:
    p.add_argument("change", nargs="?", type=row_id, help="the change to undo (its #id)")
    p.add_argument("--corpus", help=f"with --since: {CORPUS_REF_HELP}")
    p.add_argument("--since", type=_moment, help="undo every change to --corpus since then")


def _cmd_undo(args: argparse.Namespace) -> int:
    from workbench.corpus.corpora import get_corpus
    from workbench.team import undo

    if (args.change is None) == (args.since is None) or (args.since and not args.corpus):
        raise WorkbenchError(N_("give a change id, or --corpus and --since"))
    if args.change is not None:
        return print_done(f"undid #{args.change} as change #{undo.undo_change(args.change)}")
    done = undo.undo_since(get_corpus(args.corpus).id, args.since)
    return print_done(f"undid {len(done)} changes")


def _cmd_trash(args: argparse.Namespace) -> int:
    from workbench.team import trash

    deleted = trash.list_trash()
    if not deleted and not args.json:
        print(f"the trash is empty: a deleted corpus stays there {TRASH_DAYS} days")
    for t in deleted:
        if args.json:
            times = {"deleted_at": t.deleted_at.isoformat()}
            print_json({**t.__dict__, **times, "removed_after": t.removed_after.isoformat()})
        else:
            print_text(
                f"#{t.id}  {t.name}  {counted(t.pair_count, 'pair')}  "
                f"deleted {t.deleted_at:%Y-%m-%d}  "
                f"removed after {t.removed_after:%Y-%m-%d}"
            )
    return EXIT_OK


def _args_restore_corpus(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", type=row_id, help="the corpus id that `trash` lists")


def _cmd_restore_corpus(args: argparse.Namespace) -> int:
    from workbench.team import trash

    return print_done(f"restored corpus {trash.restore_corpus(args.id)!r}")


COMMANDS = [
    Command("history", "list the changes to a corpus", _args_history, _cmd_history),
    Command("undo", "undo a change, or every change since a time", _args_undo, _cmd_undo),
    Command(
        "trash",
        f"list deleted corpora (kept {TRASH_DAYS} days)",
        json_option("one JSON object per line"),
        _cmd_trash,
    ),
    Command(
        "restore-corpus", "restore a deleted corpus", _args_restore_corpus, _cmd_restore_corpus
    ),
]
