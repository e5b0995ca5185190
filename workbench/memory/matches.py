"""Memory matches: the corpus' pairs whose source is closest to a sentence, scored as CAT tools
score them, from an index that follows every write to the pairs.

* **Score**: rapidfuzz's ``fuzz.ratio`` (100 × (1 − edit distance / total length), edits
  being insertions and deletions of characters) of the two sources with their whitespace
  collapsed, case kept: "Hello world" against "Hello, world" is 96 %. A match is **exact**
  when the two are the same text after whitespace normalisation: its target is the curated
  translation (``recall`` gives it instead of the model's, unless switched off).
* **Index**: per corpus and process, each pair's character trigrams (lower case, as int64
  codes) → the slots of the pairs that hold them: built in one go with numpy (one sort of
  packed (trigram, slot) numbers, cut by trigram), pairs added later kept apart in
  per-trigram ``array('i')``s.
  A query counts its trigrams shared with every pair in one ``bincount`` (trigrams
  held by more than a twentieth of the pairs left out while three rarer ones remain), keeps
  the ``CANDIDATES`` pairs of best Dice overlap and scores only those with rapidfuzz; exact
  matches come from a dict. A few milliseconds at 100k pairs (``bench/tm_matches.py``).
* **Following the corpus**: before each lookup the index reads the changes after the one
  it was built at (``following``: one indexed query when there are none) and applies them —
  an edited pair's slot is dropped and a new one added — so a pair saved, edited or deleted
  in any process is in (or out of) the next match. Dropped slots are compacted away by a
  rebuild once they are a quarter of the index.
* **Differing words**: ``Match.spans`` cuts the match's source into runs of words that the
  sentence has too and runs that differ (a word diff; Chinese, Japanese and Korean count
  character by character), for a page to highlight.
"""

from __future__ import annotations

import difflib
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz
from sqlalchemy import select

from db.tables import Pair
from workbench import settings
from workbench.corpus.corpora import CorpusRef, find
from workbench.errors import WorkbenchError
from workbench.memory.following import changes_since, last_change
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team.access import Permission, require

MIN_SCORE = 50.0  # below this a match helps nobody (CAT tools default to 50-75 %)
MAX_MATCHES = 10  # per sentence
CANDIDATES = 64  # pairs scored with rapidfuzz per sentence, of best trigram overlap
CACHED_CORPORA = 8  # indexes a process keeps (least recently used dropped)
_PACKED_BITS = 63  # (trigram, text) numbers of at most this many bits are sorted as one
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]|\w+|[^\w\s]")


def normalized(text: str) -> str:
    """The text as matches compare it: whitespace runs as one space, trimmed."""
    return _SPACE.sub(" ", text).strip()


def _trigrams(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's distinct character trigrams (lower case, padded: "  text "), as
    (trigram code, text number) pairs sorted by code, then by text: the postings of an
    index in one sort. A code packs three code points (21 bits each) into an int64."""
    padded = [f"  {text.lower()} " for text in texts]
    lengths = np.fromiter(map(len, padded), np.int64, len(padded))
    chars = np.frombuffer("".join(padded).encode("utf-32-le", "surrogatepass"), np.uint32)
    text_of = np.repeat(np.arange(len(padded), dtype=np.int64), lengths)[: max(0, len(chars) - 2)]
    ends = np.cumsum(lengths)  # a trigram (by its first character) ends by its text's end
    inside = np.arange(3, len(chars) + 1) <= ends[text_of]
    text_of = text_of[inside]
    used = np.flatnonzero(np.bincount(chars)) if len(chars) else np.zeros(0, np.int64)
    bits, text_bits = len(used).bit_length(), max(1, len(padded).bit_length())
    if 3 * bits + text_bits <= _PACKED_BITS:  # (trigram, text) as one number: one plain sort
        rank = np.zeros(int(used[-1]) + 1 if len(used) else 0, np.int64)
        rank[used] = np.arange(len(used))
        r = rank[chars]
        keys = ((r[:-2] << 2 * bits | r[1:-1] << bits | r[2:])[inside] << text_bits) | text_of
        keys = np.sort(keys)
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys
        text_of, packed = keys & ((1 << text_bits) - 1), keys >> text_bits
        mask = (1 << bits) - 1
        codes = used[packed >> 2 * bits] << 42 | used[packed >> bits & mask] << 21
        return codes | used[packed & mask], text_of.astype(np.int32)
    c = chars.astype(np.int64)  # too many distinct characters to pack: sort the codes
    codes = ((c[:-2] << 42) | (c[1:-1] << 21) | c[2:])[inside]
    order = np.argsort(codes, kind="stable")  # the texts stay in order within a code
    codes, text_of = codes[order], text_of[order]
    first = np.ones(len(codes), dtype=bool)
    first[1:] = (codes[1:] != codes[:-1]) | (text_of[1:] != text_of[:-1])
    return codes[first], text_of[first].astype(np.int32)


@dataclass(frozen=True)
class Match:
    """A pair of the memory close to a sentence: its score in % and its differing words."""

    pair_id: int
    source: str
    target: str
    score: float  # 0-100, rapidfuzz fuzz.ratio of the normalised sources
    exact: bool  # the same source after whitespace normalisation
    spans: tuple[tuple[str, bool], ...]  # the source as runs of (text, differs from sentence)


def diff_spans(sentence: str, source: str) -> tuple[tuple[str, bool], ...]:
    """``source`` cut into runs of (text, differs): the words that are not in ``sentence`` at
    their place (a word diff, CJK by character) differ."""
    tokens = list(_WORD.finditer(source))
    wanted = [m.group() for m in _WORD.finditer(sentence)]
    differs = [True] * len(tokens)
    matcher = difflib.SequenceMatcher(None, wanted, [t.group() for t in tokens], autojunk=False)
    for block in matcher.get_matching_blocks():
        for j in range(block.b, block.b + block.size):
            differs[j] = False
    runs: list[list[object]] = []
    end = 0
    for token, flag in zip(tokens, differs, strict=True):
        gap = source[end : token.start()]
        text = gap + token.group()
        if runs and runs[-1][1] == flag:
            runs[-1][0] = str(runs[-1][0]) + text
        elif runs and gap and not flag:  # the space before a kept word stays with the run before
            runs[-1][0] = str(runs[-1][0]) + gap
            runs.append([token.group(), flag])
        else:
            runs.append([text, flag])
        end = token.end()
    if end < len(source):
        if runs:
            runs[-1][0] = str(runs[-1][0]) + source[end:]
        else:
            runs.append([source[end:], False])
    return tuple((str(text), bool(flag)) for text, flag in runs)


def find_matches(
    corpus: CorpusRef,
    sentences: Sequence[str],
    *,
    limit: int = 3,
    min_score: float = MIN_SCORE,
) -> list[list[Match]]:
    """Each sentence's closest pairs of the corpus, best first (ties: the newest pair), at
    most ``limit`` (1 to ``MAX_MATCHES``) scoring at least ``min_score`` %."""
    if not 1 <= limit <= MAX_MATCHES:
        raise WorkbenchError(
            N_("Memory matches: ask for 1 to {max} per sentence, not {n}."),
            max=MAX_MATCHES,
            n=limit,
        )
    index = _current(corpus)
    with index.lock:
        return [index.search(sentence, limit, min_score) for sentence in sentences]


class _Index:
    """One corpus' pairs, indexed by trigram (module docstring); guarded by its lock."""

    def __init__(self, at: int, rows: Sequence[tuple[int, str, str]] = ()) -> None:
        """The index of ``rows`` (pair id, source, target), at change ``at``, built in one go:
        its postings are one sorted array (``_trigrams``) cut by trigram."""
        self.at = at  # the newest change taken in
        self.lock = threading.Lock()
        self.ids: list[int] = [pid for pid, _, _ in rows]
        self.sources: list[str] = [normalized(source) for _, source, _ in rows]
        self.targets: list[str] = [target for _, _, target in rows]
        codes, slots = _trigrams(self.sources)
        cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        self.codes = codes[np.concatenate(([0], cuts))] if len(codes) else codes  # sorted
        self.starts = np.concatenate(([0], cuts, [len(codes)]))  # code i: slots[starts[i]:…]
        self.slots = slots
        self.sizes = array(
            "i", np.bincount(slots, minlength=len(self.ids)).astype(np.int32).tobytes()
        )
        self.alive = array("b", b"\x01" * len(self.ids))  # 0: edited or deleted since
        self.added: dict[int, array] = {}  # trigram code -> slots of the pairs added since
        self.slot_of: dict[int, int] = dict(zip(self.ids, range(len(self.ids)), strict=True))
        self.exact: dict[str, list[int]] = {}  # normalised source -> live slots
        for slot, text in enumerate(self.sources):
            self.exact.setdefault(text, []).append(slot)
        self.dead = 0

    def add(self, pair_id: int, source: str, target: str) -> None:
        self.remove(pair_id)
        slot = len(self.ids)
        text = normalized(source)
        codes, _ = _trigrams([text])
        self.ids.append(pair_id)
        self.sources.append(text)
        self.targets.append(target)
        self.sizes.append(len(codes))
        self.alive.append(1)
        for code in codes.tolist():
            posting = self.added.get(code)
            if posting is None:
                self.added[code] = array("i", (slot,))
            else:
                posting.append(slot)
        self.slot_of[pair_id] = slot
        self.exact.setdefault(text, []).append(slot)

    def _postings(self, codes: np.ndarray) -> list[np.ndarray]:
        """The slots holding each of these trigrams (those of the build, then those added)."""
        at = np.searchsorted(self.codes, codes)
        built = np.zeros(len(codes), dtype=bool)
        if len(self.codes):
            built = self.codes[np.minimum(at, len(self.codes) - 1)] == codes
        found = []
        for i, code, known in zip(at.tolist(), codes.tolist(), built.tolist(), strict=True):
            posting = self.slots[self.starts[i] : self.starts[i + 1]] if known else None
            extra = self.added.get(code)
            if extra is not None:
                more = np.frombuffer(extra, dtype=np.int32).copy()  # the array grows later
                posting = more if posting is None else np.concatenate((posting, more))
            if posting is not None:
                found.append(posting)
        return found

    def remove(self, pair_id: int) -> None:
        slot = self.slot_of.pop(pair_id, None)
        if slot is None:
            return
        self.alive[slot] = 0
        self.dead += 1
        same = self.exact[self.sources[slot]]
        same.remove(slot)
        if not same:
            del self.exact[self.sources[slot]]

    def stale(self) -> bool:
        return self.dead > 1000 and self.dead * 4 > len(self.ids)

    def _best_overlap(self, shared: np.ndarray, grams: int) -> list[int]:
        """The ``CANDIDATES`` slots of best Dice overlap, ``shared`` / (``grams`` + the slot's
        trigrams), of the slots sharing any. A slot sharing s trigrams holds at least s, so
        it scores at most s / (grams + s): the overlap is computed first for the slots that
        share the most, then only for those whose bound reaches the worst of their best."""
        at_least = np.cumsum(np.bincount(shared)[::-1])[::-1]  # slots sharing ≥ s trigrams
        at_least[0] = 0
        enough = np.flatnonzero(at_least >= CANDIDATES)
        fewest = max(1, int(enough[-1])) if len(enough) else 1
        sizes = np.frombuffer(self.sizes, dtype=np.int32)
        while True:
            seen = np.flatnonzero(shared >= fewest)
            overlap = shared[seen] / (grams + sizes[seen])
            if fewest == 1 and len(seen) <= CANDIDATES:  # (else len(seen) ≥ CANDIDATES)
                return seen.tolist()
            worst = float(np.partition(overlap, len(seen) - CANDIDATES)[len(seen) - CANDIDATES])
            reach = max(1, int(worst * grams / (1 - worst)))  # s / (grams + s) ≥ worst
            if reach >= fewest:
                best = np.argpartition(-overlap, CANDIDATES - 1)[:CANDIDATES]
                return seen[best].tolist()
            fewest = reach

    def search(self, sentence: str, limit: int, min_score: float) -> list[Match]:
        text = normalized(sentence)
        if not text or not self.ids:
            return []
        codes, _ = _trigrams([text])
        postings = sorted(self._postings(codes), key=len)
        # Trigrams in most pairs tell little and cost most: counted only when few others remain.
        common = max(1000, len(self.ids) // 20)
        rare = [p for p in postings if len(p) <= common]
        chosen = rare if len(rare) >= 3 else postings
        slots: set[int] = set(self.exact.get(text, ()))
        if chosen:
            shared = np.bincount(np.concatenate(chosen), minlength=len(self.ids))
            shared *= np.frombuffer(self.alive, dtype=np.int8)
            slots.update(self._best_overlap(shared, len(codes)))
        found = []
        for slot in slots:
            score = 100.0 if self.sources[slot] == text else fuzz.ratio(text, self.sources[slot])
            if score >= min_score:
                found.append((score, self.ids[slot], slot))
        found.sort(reverse=True)
        return [
            Match(
                self.ids[slot],
                self.sources[slot],
                self.targets[slot],
                round(score, 1),
                self.sources[slot] == text,
                diff_spans(text, self.sources[slot]),
            )
            for score, _, slot in found[:limit]
        ]


_indexes: OrderedDict[tuple[str, int], _Index] = OrderedDict()
_indexes_lock = threading.Lock()


def _build(corpus_id: int) -> _Index:
    with session_scope() as s:
        at = last_change(s, corpus_id)
        rows = s.execute(
            select(Pair.id, Pair.source, Pair.target)
            .where(Pair.corpus_id == corpus_id)
            .order_by(Pair.id)
            .execution_options(yield_per=10_000)
        )
        return _Index(at, [tuple(row) for row in rows])


def _current(corpus: CorpusRef) -> _Index:
    """The index of a corpus named or numbered (``WorkbenchError`` for none), for a reader,
    with every change since it was built taken in: one session, two small queries, when
    the index is cached and nothing changed."""
    require(Permission.READ)
    with session_scope() as s:
        corpus_id = find(s, corpus).id
        key = (settings.database_url(), corpus_id)
        with _indexes_lock:
            index = _indexes.get(key)
            if index is not None:
                _indexes.move_to_end(key)
        if index is not None:
            with index.lock:
                delta = changes_since(s, corpus_id, index.at)
                if delta is not None:
                    for pid in delta.deleted:
                        index.remove(pid)
                    for pid, (source, target) in delta.upserted.items():
                        index.add(pid, source, target)
                    index.at = delta.last
            if delta is not None and not index.stale():
                return index
    index = _build(corpus_id)
    with _indexes_lock:
        _indexes[key] = index
        while len(_indexes) > CACHED_CORPORA:
            _indexes.popitem(last=False)
    return index
