"""``import`` and ``export``: sentence pairs in and out of a corpus."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.cli.common import EXIT_OK, Command, counted, print_done, print_json, print_text
from workbench.corpus.cleaning import CHINESE_CONVERSIONS, CleaningOptions
from workbench.corpus.corpora import CORPUS_REF_HELP
from workbench.corpus.exporting import EXPORT_FORMATS
from workbench.corpus.formats import FORMATS, TWO_FILE_FORMATS
from workbench.errors import WorkbenchError
from workbench.messages import N_

if TYPE_CHECKING:
    from workbench.corpus.import_checks import ImportResult


def _args_import(p: argparse.ArgumentParser) -> None:
    two_files = "|".join(TWO_FILE_FORMATS)
    p.add_argument(
        "file", type=Path, help=f"pairs file (for --format {two_files}: the source side)"
    )
    p.add_argument(
        "--corpus", required=True, help=f"{CORPUS_REF_HELP}; a new name creates the corpus"
    )
    p.add_argument("--src-lang", required=True, help="source language code, e.g. zh")
    p.add_argument("--tgt-lang", required=True, help="target language code, e.g. en")
    p.add_argument(
        "--format",
        choices=list(FORMATS),
        help=f"file format (default: from the file extension; {two_files} when --tgt-file): "
        + " ".join(f"{name}: {f.description}." for name, f in FORMATS.items()),
    )
    p.add_argument("--tgt-file", type=Path, help=f"target-side file for --format {two_files}")
    p.add_argument("--strict", action="store_true", help="abort on any invalid row")
    p.add_argument(
        "--skip-conflicts",
        action="store_true",
        help="leave out rows whose source the corpus already translates differently "
        "(default: add them; either way the report names them)",
    )
    clean = p.add_argument_group(
        "clean-up", "rules that leave rows out of the import (counted as filtered) or rewrite them"
    )
    clean.add_argument(
        "--drop-other-languages",
        action="store_true",
        help="leave out pairs whose source or target is confidently another language",
    )
    clean.add_argument(
        "--drop-copies", action="store_true", help="leave out pairs whose target repeats the source"
    )
    clean.add_argument(
        "--max-ratio",
        type=float,
        metavar="R",
        help="leave out pairs whose longer side has more than R times the tokens of the shorter",
    )
    clean.add_argument(
        "--chinese",
        choices=list(CHINESE_CONVERSIONS),
        default="none",
        help="convert the Chinese side(s) to one script: "
        + ", ".join(f"{k}: {v}" for k, v in CHINESE_CONVERSIONS.items()),
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")


def _cleaning(args: argparse.Namespace) -> CleaningOptions:
    """The clean-up flags as the options the import page's checkboxes make."""
    return CleaningOptions(
        language_id=args.drop_other_languages,
        max_ratio=args.max_ratio,
        drop_copies=args.drop_copies,
        chinese=args.chinese,
    )


def _cmd_import(args: argparse.Namespace) -> int:
    from workbench.corpus import splits
    from workbench.corpus.corpora import get_corpus
    from workbench.corpus.importing import import_file

    cleaning = _cleaning(args)  # a bad ratio is refused before the file is read
    if not args.file.is_file():
        raise WorkbenchError(N_("file not found: {path}"), path=args.file)
    # A new corpus is created together with its pairs: a bad file, or an import killed
    # half-way, leaves no empty corpus behind.
    result = import_file(
        args.corpus,
        args.file,
        create_langs=(args.src_lang, args.tgt_lang),
        fmt=args.format,
        tgt=args.tgt_file,
        strict=args.strict,
        cleaning=cleaning,
        skip_conflicts=args.skip_conflicts,
    )
    name = get_corpus(result.corpus_id).name
    if args.json:
        print_json({"corpus": name, **result.as_dict()})
        return EXIT_OK
    for issue in result.report[:10]:
        print_text(f"  line {issue.line}: {issue.severity}: {issue.message}", file=sys.stderr)
    if len(result.report) > 10:
        print_text(f"  … {sum(result.issue_counts.values()) - 10} more issues", file=sys.stderr)
    print_text(
        f"imported {counted(result.added, 'pair')} into {name!r} "
        f"({counted(result.duplicates, 'duplicate')}, "
        f"{counted(result.skipped, 'invalid row')} skipped"
        + (f", {result.filtered} filtered out by the clean-up" if cleaning.active else "")
        + ")"
    )
    if result.regrouped:
        print_text(splits.regrouped_text(result.regrouped))
    _print_conflicts(result)
    return EXIT_OK


def _print_conflicts(result: ImportResult) -> None:
    """The rows whose source the corpus (or an earlier row of the file) translated otherwise:
    the memory's exact match then holds two translations, so the user hears of it with a few
    examples."""
    n = result.conflict_count
    if not n:
        return
    done = (
        "skipped" if result.conflicts_skipped else "added anyway; --skip-conflicts leaves them out"
    )
    rows = "row gives" if n == 1 else "rows give"
    print_text(
        f"{n} {rows} a source the corpus or the file already translates differently ({done}):"
    )
    for c in result.conflicts:
        other = (
            f"line {c.file_line} of the file translates it differently"
            if c.file_line
            else f"the corpus, pair {c.pair_id}: {c.corpus_target}"
        )
        print_text(f"  line {c.line}: {c.source} → {c.target} ({other})")


def _args_export(p: argparse.ArgumentParser) -> None:
    endings = ", ".join(f".{FORMATS[name].extensions[0]}" for name in EXPORT_FORMATS)
    p.add_argument("file", type=Path, help=f"output file ({endings})")
    p.add_argument("--corpus", required=True, help=CORPUS_REF_HELP)
    p.add_argument("--format", choices=EXPORT_FORMATS, help="default: from extension")


def _cmd_export(args: argparse.Namespace) -> int:
    from workbench.corpus.exporting import export_pairs

    n = export_pairs(args.corpus, args.file, args.format)
    return print_done(f"exported {counted(n, 'pair')} to {args.file}")


COMMANDS = [
    Command("import", "import sentence pairs into a corpus", _args_import, _cmd_import),
    Command(
        "export",
        f"export a corpus as {'/'.join(name.upper() for name in EXPORT_FORMATS)}",
        _args_export,
        _cmd_export,
    ),
]
