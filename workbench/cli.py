"""``python -m workbench <command>``: the command line of DESIGN.md.

Adding a command: write ``_args_<name>(parser)`` (its options) and ``_cmd_<name>(args) -> int``
(its work; return the exit status), then add one ``Command`` line to ``COMMANDS``.

Every command fails the same way: bad input raises ``WorkbenchError`` and the user sees one
line ``error: <message>`` with exit status 2 (a malformed ``WORKBENCH_DB_URL`` and arguments
that are not valid UTF-8 too); argparse usage errors also print one line and exit 2; a
failure of the environment (disk full, database unreachable or unwritable) prints one
``error: …`` line and exits 1; an unexpected exception prints one
``error: internal error: …`` line and exits 1 (set ``WORKBENCH_DEBUG=1`` for the traceback).

Output meant for people passes through ``_print``, which escapes control characters
(``text_rules.escape_controls``): a corpus or version name, a file name or a line of an
imported file can never act on the terminal. JSON output escapes them the JSON way.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from db.engine import MAX_ID, DatabaseConfigError
from workbench.corpus import CORPUS_REF_HELP
from workbench.errors import WorkbenchError
from workbench.text_rules import escape_controls

if TYPE_CHECKING:
    from workbench.jobs import RunInfo

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2


def _print(text: str, file: TextIO | None = None) -> None:
    """Print for people: control characters shown as escapes (see the module docstring)."""
    print(escape_controls(text), file=file or sys.stdout)


def _print_json(data: Any) -> None:
    """One JSON line; besides JSON's own escapes, every character that could act on a
    terminal (C1 controls, bidi overrides, line separators) is written as a \\u escape."""
    print(escape_controls(json.dumps(data, ensure_ascii=False), json=True))


def _row_id(text: str) -> int:
    """An id argument: a positive integer that a database row can have."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an id: {text!r}") from None
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"ids are 1 to {MAX_ID}, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one ``error: …`` line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _error(f"{message} (see: {self.prog} --help)")  # may quote an argument
        raise SystemExit(EXIT_USAGE)


# ------------------------------------------------------------------------------ import


def _args_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="pairs file (for --format aligned: the source side)")
    p.add_argument(
        "--corpus", required=True, help=f"{CORPUS_REF_HELP}; a new name creates the corpus"
    )
    p.add_argument("--src-lang", required=True, help="source language code, e.g. zh")
    p.add_argument("--tgt-lang", required=True, help="target language code, e.g. en")
    p.add_argument(
        "--format",
        choices=("tsv", "csv", "jsonl", "tatoeba", "aligned"),
        help="file format (default: from the file extension; aligned when --tgt-file)",
    )
    p.add_argument("--tgt-file", type=Path, help="target-side file for --format aligned")
    p.add_argument("--strict", action="store_true", help="abort on any invalid row")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")


def _cmd_import(args: argparse.Namespace) -> int:
    from workbench.corpus import get_corpus
    from workbench.importing import import_file

    if not args.file.is_file():
        raise WorkbenchError(f"file not found: {args.file}")
    if args.tgt_file is not None and args.format not in (None, "aligned"):
        raise WorkbenchError("--tgt-file is only used with --format aligned")
    # A new corpus is created together with its pairs: a bad file, or an import killed
    # half-way, leaves no empty corpus behind.
    result = import_file(
        args.corpus,
        args.file,
        args.format,
        args.tgt_file,
        strict=args.strict,
        create_langs=(args.src_lang, args.tgt_lang),
    )
    name = get_corpus(result.corpus_id).name
    if args.json:
        _print_json({"corpus": name, **result.as_dict()})
        return EXIT_OK
    for issue in result.report[:10]:
        _print(f"  line {issue.line}: {issue.severity}: {issue.message}", file=sys.stderr)
    if len(result.report) > 10:
        _print(f"  … {sum(result.issue_counts.values()) - 10} more issues", file=sys.stderr)
    _print(
        f"imported {result.added} pairs into {name!r} "
        f"({result.duplicates} duplicates, {result.skipped} invalid rows skipped)"
    )
    return EXIT_OK


# ------------------------------------------------------------------------------ export


def _args_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="output file (.tsv, .jsonl or .csv)")
    p.add_argument("--corpus", required=True, help=CORPUS_REF_HELP)
    p.add_argument("--format", choices=("tsv", "jsonl", "csv"), help="default: from extension")


def _cmd_export(args: argparse.Namespace) -> int:
    from workbench.importing import export_pairs

    n = export_pairs(args.corpus, args.file, args.format)
    _print(f"exported {n} pairs to {args.file}")
    return EXIT_OK


# ------------------------------------------------------------------------------- train


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _args_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, help="corpus name or id")
    # No `choices`: the presets live in core_model (importing it costs every command a torch
    # import); an unknown name is refused with the list of known ones.
    p.add_argument(
        "--preset",
        help="model size preset (default: auto, the recipe's pick); a wrong name lists them all",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=_positive_int, help="train for N epochs")
    budget.add_argument(
        "--minutes", type=_positive_float, help="train for M minutes of wall-clock time"
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--from-version", type=int, help="fine-tune this version (same tokenizer)")
    p.add_argument("--max-steps", type=_positive_int, help="cap on optimizer steps")
    p.add_argument("--wait", action="store_true", help="block until the run ends")


def _cmd_train(args: argparse.Namespace) -> int:
    from workbench import jobs

    extra = {"max_steps": args.max_steps} if args.max_steps else {}
    run_id = jobs.enqueue_training(
        args.corpus,
        preset=args.preset or jobs.DEFAULT_PRESET,
        epochs=args.epochs,
        minutes=args.minutes,
        device=args.device,
        init_version_id=args.from_version,
        **extra,
    )
    return _follow(run_id, args.wait)


def _follow(run_id: int, wait: bool) -> int:
    """Make sure a worker will take the queued run; with `wait`, report its progress on stderr
    until it ends, then print the outcome as one JSON line (exit 1 unless it succeeded)."""
    import time

    from workbench import jobs

    pid = jobs.ensure_worker()
    if pid is not None:
        print(f"started a worker (pid {pid})", file=sys.stderr)
    if not wait:
        print(json.dumps({"run_id": run_id, "status": "queued", "version_id": None}))
        return EXIT_OK
    last_step, polls = -1, 0
    while (run := jobs.get_run(run_id)).active:
        polls += 1
        if run.status == "queued" and polls % 5 == 0:
            jobs.ensure_worker()  # the worker may have exited idle just before the enqueue
        if run.progress_step != last_step and run.progress_total:
            last_step = run.progress_step
            print(f"run {run_id}: {_progress_line(run)}", file=sys.stderr)
        time.sleep(1.0)
    if run.stopped_because:
        why = f"stopped at step {run.progress_step}: {run.stopped_because}"
        print(f"run {run_id}: {why}", file=sys.stderr)
    print(
        json.dumps(
            {
                "run_id": run.id,
                "status": run.status,
                "version_id": run.version_id,
                "device": run.device,
                "steps": run.progress_step,
                "stop_reason": run.stop_reason,
                "error": run.error,
            },
            ensure_ascii=False,
        )
    )
    return EXIT_OK if run.status == "succeeded" else EXIT_INTERNAL


def _progress_line(run: RunInfo) -> str:
    """'step 130 of at most 1000, 13%, at most 474s left; stops early once …'"""
    bound = "at most " if run.early_stop_rule else ""
    line = f"step {run.progress_step} of {bound}{run.progress_total}"
    line += f", {100 * run.fraction_done:.0f}% of its {'time' if run.time_limited else 'steps'}"
    if run.eta_s:
        line += f", {bound}{run.eta_s:.0f}s left"
    return line + (f"; {run.early_stop_rule}" if run.early_stop_rule else "")


def _args_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=int, help="id of a failed or cancelled run (see `runs`)")
    p.add_argument("--wait", action="store_true", help="block until the run ends")


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench import jobs

    step = jobs.resume_run(args.run)
    print(f"run {args.run}: resumes from its checkpoint at step {step}", file=sys.stderr)
    return _follow(args.run, args.wait)


def _args_runs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON array of runs")


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench import jobs

    runs = jobs.list_runs()
    if args.json:
        print(json.dumps([_run_record(r) for r in runs], ensure_ascii=False))
    elif not runs:
        print("no training runs yet: start one with `python -m workbench train`")
    else:
        table = jobs.runs_table()
        table["error"] = table["error"].str.slice(0, 60)
        print(table.to_string(index=False))
    return EXIT_OK


def _run_record(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "corpus": run.corpus_name,
        "status": run.status,
        "preset": run.config.get("preset"),
        "trained_for": run.budget,
        "device": run.device,
        "pairs": run.snapshot_size,
        "steps": run.progress_step,
        "stop_reason": run.stop_reason,
        "stopped_because": run.stopped_because,
        "version_id": run.version_id,
        "error": run.error,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def _args_delete_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=int, help="run id; its model version, if any, is kept")


def _cmd_delete_run(args: argparse.Namespace) -> int:
    from workbench import jobs

    jobs.delete_run(args.run)
    print(f"deleted run {args.run}")
    return EXIT_OK


# ------------------------------------------------------------------------------ worker


def _args_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="process one queued run, then exit")
    p.add_argument("--idle-exit", type=float, help="exit after this many idle seconds")


def _cmd_worker(args: argparse.Namespace) -> int:
    from workbench.worker import run_worker

    run_worker(once=args.once, idle_exit_s=args.idle_exit)
    return EXIT_OK


# ---------------------------------------------------------------------------- versions


def _args_versions(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON array of versions")


def _cmd_versions(args: argparse.Namespace) -> int:
    from workbench.registry import versions_table

    table = versions_table()
    if args.json:
        print(
            escape_controls(
                table.to_json(orient="records", date_format="iso", force_ascii=False), json=True
            )
        )
    elif table.empty:
        print("no model versions yet: train one with `python -m workbench train`")
    else:
        shown = table.drop(columns=["notes"])
        for column in ("name", "corpus", "device"):  # stored text, escaped cell by cell
            shown[column] = shown[column].map(lambda v: v if v is None else escape_controls(v))
        print(shown.to_string(index=False))
    return EXIT_OK


def _args_register(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=Path, help="model folder, e.g. from core_model.distributed")
    p.add_argument(
        "--corpus",
        help=f"link the version to this corpus (and take its languages): {CORPUS_REF_HELP}",
    )
    p.add_argument("--src-lang", help="source language code, e.g. de")
    p.add_argument("--tgt-lang", help="target language code, e.g. en")
    p.add_argument("--name", help="version name (default: '<corpus> v<id>')")


def _cmd_register(args: argparse.Namespace) -> int:
    from workbench.registry import import_version

    version_id = import_version(
        args.folder, args.corpus, src_lang=args.src_lang, tgt_lang=args.tgt_lang, name=args.name
    )
    print(json.dumps({"version_id": version_id}))
    return EXIT_OK


# --------------------------------------------------------------------------- translate


def _args_translate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", type=_row_id, required=True, help="model version id")
    p.add_argument("--beam", type=_positive_int, default=1, help="beam size (1 = greedy)")
    p.add_argument("text", nargs="*", help="sentences (default: one per line on stdin)")


def _cmd_translate(args: argparse.Namespace) -> int:
    from workbench.translation import translate

    try:
        texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    except UnicodeDecodeError:
        raise WorkbenchError("standard input is not UTF-8 text") from None
    for result in translate(args.version, texts, beam=args.beam):
        _print(result.text)
    return EXIT_OK


# ---------------------------------------------------------------------------- evaluate


def _args_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", type=_row_id, required=True, help="model version id")
    p.add_argument("--src", type=Path, required=True, help="source sentences, one per line")
    p.add_argument("--ref", type=Path, required=True, help="reference translations")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise WorkbenchError(f"file not found: {path}") from None
    except UnicodeDecodeError:
        raise WorkbenchError(f"{path} is not UTF-8 text") from None


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from workbench.evaluation import evaluate

    sources, references = _read_lines(args.src), _read_lines(args.ref)
    if len(sources) != len(references):
        raise WorkbenchError(
            f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}"
        )
    scores = evaluate(args.version, list(zip(sources, references, strict=True)), beam=args.beam)
    print(json.dumps(scores))
    return EXIT_OK


# ---------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: list[Command] = [
    Command("import", "import sentence pairs into a corpus", _args_import, _cmd_import),
    Command("export", "export a corpus as TSV/JSONL/CSV", _args_export, _cmd_export),
    Command("train", "queue a training run (and start a worker)", _args_train, _cmd_train),
    Command("resume", "resume a failed or cancelled run", _args_resume, _cmd_resume),
    Command("runs", "list the training runs", _args_runs, _cmd_runs),
    Command("delete-run", "delete a run and its checkpoint", _args_delete_run, _cmd_delete_run),
    Command("worker", "train queued runs in this process", _args_worker, _cmd_worker),
    Command("versions", "list the model versions", _args_versions, _cmd_versions),
    Command("register", "add a model folder trained elsewhere", _args_register, _cmd_register),
    Command("translate", "translate sentences with a version", _args_translate, _cmd_translate),
    Command("evaluate", "BLEU/chrF of a version on a test set", _args_evaluate, _cmd_evaluate),
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m workbench", description="Translation workbench")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_args(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (``__main__`` passes it to SystemExit)."""
    args = build_parser().parse_args(argv)
    try:
        _check_text_arguments(args)
        return int(args._run(args) or EXIT_OK)
    except (WorkbenchError, DatabaseConfigError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("WORKBENCH_DEBUG"):
            traceback.print_exc()
        environment = _environment_failure(exc)
        if environment:
            _error(environment)
            return EXIT_INTERNAL
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _error(f"internal error: {type(exc).__name__}: {first}")
        return EXIT_INTERNAL


def _error(message: str) -> None:
    print(f"error: {escape_controls(' '.join(message.split()))}", file=sys.stderr)


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse text arguments that are not valid UTF-8 (Python hands such bytes over as lone
    surrogates, which no database or terminal accepts). File names may be any bytes."""
    for key, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and any("\ud800" <= ch <= "\udfff" for ch in item):
                what = "an argument" if key == "text" else f"--{key.replace('_', '-')}"
                raise WorkbenchError(f"{what} is not valid UTF-8 text")


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
