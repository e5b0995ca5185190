"""Sources an import shares with the corpus but translates differently: found in one pass over
the corpus, reported (a warning, or filtered when the user skips them) with the corpus's own
translation for the first few, so the memory's exact match never picks one of the two
unseen."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

from workbench.corpus.import_checks import Conflict, ParsedImport, ParsedPair, ValidationIssue
from workbench.messages import N_, Message

CONFLICT_EXAMPLES = 3  # conflicts shown with the corpus's translation (a lookup each)


class SourceConflicts:
    """Finds the rows of an import whose source the corpus already translates differently.

    Built once per import from the corpus's (pair id, source) rows, read in one pass: no
    index on the source text exists to ask the database row by row, and a million sources
    kept as text would cost some 150 MB. So each is kept as its 64-bit ``hash`` (of this
    process) beside its pair id, in two sorted arrays (16 bytes a pair). A collision could
    count a row as a conflict wrongly (odds about 1 in 10^7 for a million by a million); the
    examples are read back by pair id, so the ones shown are always true. ``skip``: leave
    such rows out (reported as filtered) instead of adding them with a warning.
    """

    def __init__(self, rows: Iterable[tuple[int, str]], skip: bool) -> None:
        import numpy as np

        ids, digests = array("q"), array("q")
        for pair_id, source in rows:
            ids.append(pair_id)
            digests.append(hash(source))
        order = np.argsort(np.frombuffer(digests, dtype=np.int64), kind="stable")
        self._digests = np.frombuffer(digests, dtype=np.int64)[order]
        self._ids = np.frombuffer(ids, dtype=np.int64)[order]
        self.skip = skip

    def __bool__(self) -> bool:
        """Whether there is any source to conflict with."""
        return bool(len(self._digests))

    def sift(
        self,
        pairs: list[ParsedPair],
        parsed: ParsedImport,
        pair_of: Callable[[int], tuple[str, str] | None],
    ) -> list[ParsedPair]:
        """``pairs`` (none of them in the corpus as they are) minus the conflicts when
        skipping; each conflict reported, the first few with the corpus's translation
        (``pair_of``: a corpus pair's (source, target) by id)."""
        import numpy as np

        if not pairs or not self:
            return pairs
        wanted = np.fromiter((hash(p.source) for p in pairs), dtype=np.int64, count=len(pairs))
        at = np.searchsorted(self._digests, wanted).clip(max=len(self._digests) - 1)
        hits = np.flatnonzero(self._digests[at] == wanted)
        if not len(hits):
            return pairs
        conflicting = {int(i) for i in hits if self._report(pairs[i], int(at[i]), parsed, pair_of)}
        if not self.skip:
            return pairs
        return [p for i, p in enumerate(pairs) if i not in conflicting]

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
        parsed.add(
            ValidationIssue(p.line, "conflict", message, "filtered" if self.skip else "warning")
        )
        return True
