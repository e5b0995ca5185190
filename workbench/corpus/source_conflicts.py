"""Sources an import shares with the corpus, or with an earlier row of its own file, but
translates differently: found in one pass over the corpus and an index of the import's rows
kept as it goes, reported (a warning, or filtered when the user skips them) with the other
translation's place for the first few, so the memory's exact match never picks one of the two
unseen."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

import numpy as np

from workbench.corpus.import_checks import (
    Conflict,
    ParsedImport,
    ParsedPair,
    Severity,
    ValidationIssue,
)
from workbench.messages import N_, Message

CONFLICT_EXAMPLES = 3  # conflicts shown with the other translation's place (a lookup each)


class SourceConflicts:
    """Finds the rows of an import whose source the corpus, or an earlier row the import
    accepted (of the same file: same chunk or an earlier one), translates differently.

    Built once per import from the corpus's (pair id, source) rows, read in one pass: no
    index on the source text exists to ask the database row by row, and a million sources
    kept as text would cost some 150 MB. So each is kept as its 64-bit ``hash`` (of this
    process) beside its pair id, in two sorted arrays (16 bytes a pair). A collision could
    count a row as a conflict wrongly (odds about 1 in 10^7 for a million by a million); the
    corpus examples are read back by pair id, so the ones shown are always true. The rows
    the import accepts are indexed the same way as it goes (hash → line, a dict: a row
    repeated with the same target is a duplicate, gone before this check, so a second source
    is a conflict). ``skip``: leave such rows out (reported as filtered) instead of adding
    them with a warning.
    """

    def __init__(self, rows: Iterable[tuple[int, str]], skip: bool) -> None:
        ids, digests = array("q"), array("q")
        for pair_id, source in rows:
            ids.append(pair_id)
            digests.append(hash(source))
        order = np.argsort(np.frombuffer(digests, dtype=np.int64), kind="stable")
        self._digests = np.frombuffer(digests, dtype=np.int64)[order]
        self._ids = np.frombuffer(ids, dtype=np.int64)[order]
        self._lines: dict[int, int] = {}  # hash of an accepted row's source -> its line
        self.skip = skip

    def sift(
        self,
        pairs: list[ParsedPair],
        parsed: ParsedImport,
        pair_of: Callable[[int], tuple[str, str] | None],
    ) -> list[ParsedPair]:
        """``pairs`` (none of them in the corpus as they are) minus the conflicts when
        skipping; each conflict reported, the first few with the other translation's place
        (``pair_of``: a corpus pair's (source, target) by id)."""
        if not pairs:
            return pairs
        wanted = [hash(p.source) for p in pairs]
        in_corpus = self._in_corpus(pairs, wanted, parsed, pair_of)
        kept = []
        for i, (p, digest) in enumerate(zip(pairs, wanted, strict=True)):
            earlier = self._lines.get(digest)
            if i in in_corpus:
                conflict = True
            elif earlier is not None:
                self._report_in_file(p, earlier, parsed)
                conflict = True
            else:
                self._lines[digest] = p.line  # an accepted row: later ones are checked against it
                conflict = False
            if not (conflict and self.skip):
                kept.append(p)
        return kept

    def _in_corpus(
        self,
        pairs: list[ParsedPair],
        wanted: list[int],
        parsed: ParsedImport,
        pair_of: Callable[[int], tuple[str, str] | None],
    ) -> set[int]:
        """The indexes of ``pairs`` whose source the corpus translates differently
        (reported)."""
        if not len(self._digests):
            return set()
        digests = np.array(wanted, dtype=np.int64)
        at = np.searchsorted(self._digests, digests).clip(max=len(self._digests) - 1)
        hits = np.flatnonzero(self._digests[at] == digests)
        return {int(i) for i in hits if self._report(pairs[i], int(at[i]), parsed, pair_of)}

    def _report(
        self,
        p: ParsedPair,
        at: int,
        parsed: ParsedImport,
        pair_of: Callable[[int], tuple[str, str] | None],
    ) -> bool:
        if len(parsed.conflicts) < CONFLICT_EXAMPLES:
            pair_id = int(self._ids[at])
            found = pair_of(pair_id)
            if found is None or found[0] != p.source:  # a hash collision, not a conflict
                return False
            parsed.conflicts.append(Conflict(p.line, p.source, p.target, found[1], pair_id))
        message = Message(N_("the corpus already translates this source differently"))
        parsed.add(ValidationIssue(p.line, "conflict", message, self._severity))
        return True

    def _report_in_file(self, p: ParsedPair, earlier: int, parsed: ParsedImport) -> None:
        if len(parsed.conflicts) < CONFLICT_EXAMPLES:
            parsed.conflicts.append(Conflict(p.line, p.source, p.target, "", 0, earlier))
        message = Message(
            N_("line {line} of the file translates this source differently"), line=earlier
        )
        parsed.add(ValidationIssue(p.line, "conflict", message, self._severity))

    @property
    def _severity(self) -> Severity:
        return "filtered" if self.skip else "warning"
