"""The row checks of an import and their report: what a file would add, and why not.

Pure: no database. Every row goes through ``Validator.check``, which applies the text rule of
``workbench.corpus.text_rules`` (so imported pairs are stored exactly as edited ones) and sorts each
problem into the report:

* **errors** (a malformed record — wrong column count, invalid JSON, broken CSV quoting —,
  empty side, over-long side, invalid split): the row is skipped;
* **duplicates** (within the file, or already in the corpus — the import finds those): the
  row is skipped and counted;
* **warnings** (extreme length ratio, source identical to target, control or invisible
  characters removed, Chinese script converted): the row is imported;
* **filtered** (only with clean-up options, ``workbench.corpus.cleaning``: another language, a
  length ratio above the chosen one, a copy): the row is skipped and counted;
* **conflicts** (a source the corpus, or an earlier row of the file, already translates
  differently — the import finds those with ``source_conflicts.SourceConflicts``): a warning,
  the row is imported, unless the user chose to skip such rows (then filtered). Either way
  they are named: the memory's exact match would otherwise pick one of the two translations
  without a word.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from workbench.corpus.cleaning import DROP_REASONS, REASONS, Cleaner
from workbench.corpus.formats import Malformed, Record
from workbench.corpus.text_rules import (
    MAX_CHARS,
    clean_and_count,
    hash_encoded,
    removed_characters,
    rough_token_count,
    validate_split,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

if TYPE_CHECKING:
    import pandas as pd

MAX_RATIO = 9.0  # token-length ratio above which a pair is flagged (warning)
MAX_REPORT = 5_000  # issues kept verbatim; ParsedImport.issue_counts counts all of them

Severity = Literal["error", "warning", "duplicate", "filtered"]


@dataclass(frozen=True)
class ValidationIssue:
    line: int  # 1-based line (record) number in the file
    kind: str  # malformed | empty | too_long | bad_split | ratio | identical | duplicate_in_file …
    message: str  # a Message: English, a page shows it translated (ui.i18n.localized)
    severity: Severity = "warning"


class ParsedPair(NamedTuple):
    """A validated row, ready to insert (a tuple: a million of them must be cheap)."""

    line: int
    source: str  # normalised
    target: str  # normalised
    split: str | None
    note: str
    content_hash: str


class Conflict(NamedTuple):
    """A row whose source the corpus, or an earlier row of the file, already translates
    differently (an example of them)."""

    line: int
    source: str
    target: str  # the file's translation
    corpus_target: str  # one the corpus holds ("" when an earlier row of the file does)
    pair_id: int  # the corpus pair that holds it (0: none)
    file_line: int = 0  # else the earlier line of the file that translates it differently


@dataclass
class ParsedImport:
    """What a file would import: the ``accepted`` count of pairs to add (``pairs`` holds the
    first few, ``importing.preview_import``'s sample) plus the row-issue
    ``report`` (at most ``MAX_REPORT`` entries; ``issue_counts`` counts every issue)."""

    pairs: list[ParsedPair]
    report: list[ValidationIssue]
    issue_counts: Counter = field(default_factory=Counter)  # kind -> count (never truncated)
    rows: int = 0  # data rows read (blank lines and header excluded)
    accepted: int = 0  # pairs that would be added
    conflicts: list[Conflict] = field(default_factory=list)  # the first few (source_conflicts)

    @property
    def conflict_count(self) -> int:
        """Rows whose source the corpus translates differently (added, or skipped)."""
        return self.issue_counts["conflict"]

    @property
    def errors(self) -> list[ValidationIssue]:
        """Rows that will be skipped because they are invalid."""
        return [i for i in self.report if i.severity == "error"]

    @property
    def warnings(self) -> list[ValidationIssue]:
        return [i for i in self.report if i.severity == "warning"]

    @property
    def duplicates(self) -> int:
        return self.issue_counts["duplicate_in_file"] + self.issue_counts["duplicate_in_corpus"]

    @property
    def skipped(self) -> int:
        """Rows skipped for errors (duplicates are counted separately)."""
        return sum(n for k, n in self.issue_counts.items() if k in _ERROR_KINDS)

    @property
    def filtered(self) -> int:
        """Rows the clean-up options dropped."""
        return sum(self.issue_counts[k] for k in DROP_REASONS)

    def report_frame(self) -> pd.DataFrame:
        """The report as a table for previews: line, severity, kind, message."""
        import pandas as pd

        return pd.DataFrame(
            [(i.line, i.severity, i.kind, i.message) for i in self.report],
            columns=["line", "severity", "kind", "message"],
        )

    def add(self, issue: ValidationIssue) -> None:
        """Count an issue; keep it verbatim while the report has room."""
        self.issue_counts[issue.kind] += 1
        if len(self.report) < MAX_REPORT:
            self.report.append(issue)


_ERROR_KINDS = {"malformed", "empty", "too_long", "bad_split"}
# Each kind of issue in words (a page's report; the CLI's JSON keeps the codes): the checks'
# own, then the clean-up rules' (``cleaning.REASONS``).
KIND_LABELS = {
    "malformed": N_("malformed record"),
    "empty": N_("empty side"),
    "too_long": N_("too long"),
    "bad_split": N_("invalid split"),
    "duplicate_in_file": N_("repeated in the file"),
    "duplicate_in_corpus": N_("already in the corpus"),
    "identical": N_("same text on both sides"),
    "control_chars": N_("invisible characters removed"),
    "conflict": N_("translated differently in the corpus"),
    **REASONS,  # "ratio" among them: the length ratio, whether it drops the row or warns
}


@dataclass(frozen=True)
class ImportResult:
    added: int
    duplicates: int
    skipped: int
    report: list[ValidationIssue]
    corpus_id: int = 0
    rows: int = 0
    issue_counts: dict[str, int] = field(default_factory=dict)
    # pairs moved to another split so that no valid/test sentence is in train (splits)
    regrouped: int = 0
    conflicts: list[Conflict] = field(default_factory=list)  # examples (ParsedImport's)
    conflicts_skipped: bool = False  # the conflicting rows were left out (else added)

    @property
    def conflict_count(self) -> int:
        return self.issue_counts.get("conflict", 0)

    @property
    def filtered(self) -> int:
        """Rows the clean-up options dropped."""
        return sum(self.issue_counts.get(k, 0) for k in DROP_REASONS)

    def as_dict(self) -> dict[str, Any]:
        return {
            "corpus_id": self.corpus_id,
            "rows": self.rows,
            "added": self.added,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "filtered": self.filtered,
            "issues": dict(self.issue_counts),
            "regrouped": self.regrouped,
            "conflicts": self.conflict_count,
            "conflicts_skipped": self.conflicts_skipped,
            "conflict_examples": [c._asdict() for c in self.conflicts],
        }


class NothingToImport(WorkbenchError):
    """An import that would add no pair (``refuse_empty_import``). ``nothing_new``: its valid
    rows are all in the corpus already (a file imported again) or left out by the user's own
    choice (skipped conflicts), which is no error: the import service answers it as an import
    of 0 pairs, with nothing written."""

    def __init__(self, message: str, /, corpus_id: int, nothing_new: bool, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.corpus_id, self.nothing_new = corpus_id, nothing_new


def refuse_empty_import(added: int, parsed: ParsedImport, corpus_id: int) -> None:
    """Refuse an import that adds no pair, from inside its transaction (which then rolls
    back): it leaves no empty corpus and no change record behind, as the page's Import button,
    disabled when the preview accepts nothing, never makes one either. (No pair added means
    no conflict was added either: every conflict counted was skipped.)"""
    if added:
        return
    raise NothingToImport(
        N_(
            "nothing to import: {rows} rows read, no new valid pair among them ({skipped} "
            "invalid, {duplicates} duplicates, {filtered} filtered out, {conflicts} skipped "
            "as conflicts)"
        ),
        rows=parsed.rows,
        skipped=parsed.skipped,
        duplicates=parsed.duplicates,
        filtered=parsed.filtered,
        conflicts=parsed.conflict_count,
        corpus_id=corpus_id,
        # duplicates as before; skipped conflicts when no row was invalid: every new row
        # was then left out by the user's own choice
        nothing_new=parsed.duplicates > 0 or (parsed.conflict_count > 0 and not parsed.skipped),
    )


class Validator:
    """Row checks shared by previews and imports; accumulates the report as it goes.
    With a ``cleaner`` (the clean-up options of ``workbench.corpus.cleaning``) its rules drop or
    convert rows too."""

    def __init__(self, cleaner: Cleaner | None = None) -> None:
        self.parsed = ParsedImport(pairs=[], report=[])
        # content hash (its 16 bytes: half the memory of its hex text) -> first line
        self._first_lines: dict[bytes, int] = {}
        self.cleaner = cleaner

    def first_line(self, content_hash: str) -> int:
        """The line of the file's pair with this content hash (0: none)."""
        return self._first_lines.get(bytes.fromhex(content_hash), 0)

    def check(self, raw: Record) -> ParsedPair | None:
        """The validated pair, or None (and a report entry) for a skipped row.

        The hot path of million-row imports: text goes through the one text rule
        (``text_rules.clean_and_count``), so imported pairs are stored exactly as edited ones.
        """
        parsed = self.parsed
        parsed.rows += 1
        if type(raw) is Malformed:  # a record that does not fit the format
            parsed.add(ValidationIssue(raw.line, "malformed", raw.reason, "error"))
            return None
        n, source, target, split, note = raw
        src, removed_src = clean_and_count(source)
        tgt, removed_tgt = clean_and_count(target)
        if not src or not tgt:
            removed = removed_src if not src else removed_tgt
            parsed.add(ValidationIssue(n, "empty", _empty(not src, removed), "error"))
            return None
        if len(src) > MAX_CHARS or len(tgt) > MAX_CHARS:
            msg = too_long(len(src) > MAX_CHARS)
            parsed.add(ValidationIssue(n, "too_long", msg, "error"))
            return None
        if self.cleaner is not None:
            verdict = self.cleaner.check(src, tgt)
            if verdict.dropped:
                msg = _dropped(verdict.reason or "", verdict.detail)
                parsed.add(ValidationIssue(n, verdict.reason or "", msg, "filtered"))
                return None
            if verdict.reason == "converted":
                before, after = (src, verdict.source)
                if verdict.target != tgt:
                    before, after = (tgt, verdict.target)
                msg = Message(
                    N_("Chinese script converted: {before} → {after}"),
                    before=_short(before),
                    after=_short(after),
                )
                parsed.add(ValidationIssue(n, "converted", msg))
                src, tgt = verdict.source, verdict.target
        if split:
            try:
                split = validate_split(split)
            except WorkbenchError as exc:
                parsed.add(ValidationIssue(n, "bad_split", message_of(exc), "error"))
                return None
        else:
            split = None
        sb, tb = src.encode(), tgt.encode()
        h = hash_encoded(sb, tb)
        key = bytes.fromhex(h)
        first = self._first_lines.get(key)
        if first is not None:
            msg = Message(N_("duplicate of line {line}"), line=first)
            parsed.add(ValidationIssue(n, "duplicate_in_file", msg, "duplicate"))
            return None
        self._first_lines[key] = n
        if len(src) == len(tgt) and src.casefold() == tgt.casefold():
            msg = Message(N_("source and target are identical"))
            parsed.add(ValidationIssue(n, "identical", msg))
        else:
            # Cheap byte-length pre-filter: a token ratio above MAX_RATIO implies a byte
            # ratio above 3 (CJK ≈ 3 bytes per token, Latin ≈ 5-6 bytes per word).
            big, small = (len(sb), len(tb)) if len(sb) >= len(tb) else (len(tb), len(sb))
            if big >= 20 and big > 3 * max(small, 1):
                a, b = rough_token_count(src), rough_token_count(tgt)
                if max(a, b) >= 10 and max(a, b) > MAX_RATIO * max(1, min(a, b)):
                    msg = Message(
                        N_("extreme length ratio ({a} vs {b} tokens): misaligned?"), a=a, b=b
                    )
                    parsed.add(ValidationIssue(n, "ratio", msg))
        note_text, removed_note = (
            clean_and_count(note) if note and isinstance(note, str) else ("", 0)
        )
        removed = removed_src + removed_tgt + removed_note
        if removed:
            names = removed_characters(f"{source}{target}{note if removed_note else ''}")
            shown = ", ".join(dict.fromkeys(names[:8]))
            msg = Message(
                N_("removed {n} control or invisible character(s): {names}"),
                n=removed,
                names=shown,
            )
            parsed.add(ValidationIssue(n, "control_chars", msg))
        return ParsedPair(n, src, tgt, split, note_text, h)


def _empty(source: bool, removed: int) -> Message:
    """Why a row with an empty side is skipped."""
    if removed:
        return (
            Message(N_("source is empty (after removing {n} invisible characters)"), n=removed)
            if source
            else Message(N_("target is empty (after removing {n} invisible characters)"), n=removed)
        )
    return Message(N_("source is empty") if source else N_("target is empty"))


def too_long(source: bool) -> Message:
    """Why a row with an over-long side is refused (``source``: that side, else the target)."""
    if source:
        return Message(N_("source is longer than {max} characters"), max=MAX_CHARS)
    return Message(N_("target is longer than {max} characters"), max=MAX_CHARS)


def _dropped(reason: str, detail: str) -> Message:
    """Why the clean-up options drop a row: the reason (``cleaning.REASONS``) and its detail
    (``Verdict.detail``, a Message whose parameters say it again here)."""
    params = getattr(detail, "params", {})
    if reason == "lang_source" and params:
        return Message(N_("source in another language: looks like {lang} ({confidence})"), **params)
    if reason == "lang_target" and params:
        return Message(N_("target in another language: looks like {lang} ({confidence})"), **params)
    if reason == "ratio" and params:
        return Message(N_("length ratio too large: {a} vs {b} tokens"), **params)
    return Message(REASONS[reason])


def message_of(exc: WorkbenchError) -> str:
    """A refusal as a text of its own (a row's message, a parameter of another message): a
    ``Message`` with its message id and parameters, so that a page translates it."""
    return Message(exc.msgid, **exc.params) if exc.msgid else str(exc)


def _short(text: str, n: int = 30) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def in_corpus(line: int, pair_id: int | None) -> ValidationIssue:
    """The report entry of a row whose pair the corpus already holds."""
    message = (
        Message(N_("already in the corpus (pair {id})"), id=pair_id)
        if pair_id is not None
        else Message(N_("already in the corpus"))
    )
    return ValidationIssue(line, "duplicate_in_corpus", message, "duplicate")
