"""The one text rule of the workbench: what stored text and names may contain, how a pair is
identified and which split it goes to, and how text shown on a terminal is made safe.

Every write path (import, data editor, API, saved corrections, corpus and version names)
calls ``normalize_text`` (or ``clean_and_count``, which also counts what cleaning removed), and
the import's hot path calls the same function, so a pair is stored identically whichever way it
arrives.

* **Cleaning** — removed, and counted so that reports can say so: control characters
  (C0 except the whitespace ones, DEL, C1 except NEL), NUL included; the bidirectional
  embedding/override/isolate controls (U+202A–U+202E, U+2066–U+2069, the "Trojan source"
  characters); lone surrogates (``\\ud800``–``\\udfff``, which no database can store as UTF-8);
  and byte-order marks (U+FEFF) anywhere in the text. Text that is nothing but zero-width
  characters (ZWSP, ZWNJ, ZWJ, word joiner) and spaces counts as empty.
* **Normalisation** — then Unicode NFC, and every run of whitespace (tabs, newlines, the
  ideographic space U+3000, the C0 separators that Python counts as whitespace) becomes one
  space; the ends are stripped. ``normalize_text(normalize_text(x)) == normalize_text(x)``.
* **Identity** — ``pair_hash``: BLAKE2b-128 of the normalised ``source \\x1f target``; it is
  unique per corpus, so the same pair can never be stored twice. ``loose_key`` is the looser
  identity under which de-duplication merges near-duplicates (NFKC + case folding).
* **Length** — at most ``MAX_CHARS`` characters per side; ``rough_token_count`` counts the
  tokens of length statistics and ratio warnings.
* **Split rule** — a pair written without an explicit split goes to ``train`` while the corpus
  (counting the pairs in the same write) has fewer than ``TINY_CORPUS`` (20) pairs, so a tiny
  corpus is learned whole. From then on the split is derived from the hash of its normalised
  *source* (``sentence_split``): buckets 0-89 of 100 → ``train``, 90-94 → ``valid``, 95-99 →
  ``test`` (≈ 90/5/5), so every translation of one sentence lands in the same split, in every
  corpus and on every machine. Pairs that share a target form one group with them too
  (``split_groups``, a union-find over sources and targets), and ``workbench.corpus.splits`` keeps
  each group in one split: no source or target sentence of valid/test is ever in training.
* **Names** (corpora, model versions) — ``validate_name``: normalised, 1 to ``MAX_NAME``
  characters, and *refused* (not cleaned) when they contain anything cleaning would remove:
  a name is typed on purpose, so a hidden character in it is a mistake worth reporting.
  A name may not read as an id reference (``12``, ``#12``, ``id:12``): those address corpora
  by id on the command line.
* **Terminal output** — ``escape_controls`` turns every control, bidi, separator and
  surrogate character into a visible ``\\x1b`` / ``\\u202e`` escape, so printing a stored
  value can never move the cursor, recolour or reorder a terminal.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Hashable, Sequence
from hashlib import blake2b
from typing import Any

from db.tables import SPLITS
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

MAX_NAME = 200
MAX_CHARS = 2000  # per side; longer "sentences" are almost always paste accidents
TINY_CORPUS = 20
SPLIT_BUCKETS = (("train", 90), ("valid", 95), ("test", 100))  # cumulative, of 100

# What cleaning removes (the whitespace controls \t \n \v \f \r \x1c-\x1f \x85 are left to
# the whitespace rule, which turns them into spaces).
_REMOVED = re.compile(
    "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_ZERO_WIDTH_OR_SPACE = "\u200b\u200c\u200d\u2060 "
_UNSAFE_ON_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_ID_REF = re.compile(r"^\s*(#|id:)?\s*([0-9]+)\s*$", re.IGNORECASE)
# Scripts written without spaces between words, and Hangul: one character, one token. (Wider
# than core_model.metrics' test for sacreBLEU's 'zh' tokenizer, which must leave Korean out.)
_CJK_RE = re.compile(
    r"[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)


def clean_and_count(text: str) -> tuple[str, int]:
    """(the stored form of ``text``, how many characters cleaning removed)."""
    text, removed = _REMOVED.subn("", text)
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    text = " ".join(text.split())
    if text and not text.isascii() and not text.strip(_ZERO_WIDTH_OR_SPACE):
        return "", removed + len(text.replace(" ", ""))
    return text, removed


def normalize_text(text: str) -> str:
    """The stored form of ``text`` (see the module docstring)."""
    return clean_and_count(text)[0]


def strip_invisible(text: str) -> tuple[str, int]:
    """Cleaning without the whitespace rule, for multi-line text (version notes): NFC, with
    the removed characters gone and line breaks kept."""
    text, removed = _REMOVED.subn("", text)
    return unicodedata.normalize("NFC", text).strip(), removed


def removed_characters(text: str) -> list[str]:
    """The characters cleaning would remove from ``text``, as readable names (for reports)."""
    return [_char_name(ch) for ch in _REMOVED.findall(text)]


def hash_encoded(source: bytes, target: bytes) -> str:
    """``pair_hash`` of already UTF-8-encoded normalised text (the import's hot path)."""
    return blake2b(source + b"\x1f" + target, digest_size=16).hexdigest()


def pair_hash(source: str, target: str) -> str:
    """The 32-hex-digit identity of an already *normalised* pair."""
    return hash_encoded(source.encode(), target.encode())


def loose_key(source: str, target: str) -> bytes:
    """Key under which de-duplication treats pairs as the same: NFKC (full-width → half-width
    forms) + case folding + normalised whitespace."""

    def fold(t: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", t).casefold().split())

    return blake2b(f"{fold(source)}\x1f{fold(target)}".encode(), digest_size=12).digest()


def rough_token_count(text: str) -> int:
    """Tokens for length statistics: each CJK character counts as one token, other text is
    counted in whitespace-separated words (so unsegmented Chinese is not "one word")."""
    cjk = len(_CJK_RE.findall(text))
    rest = _CJK_RE.sub(" ", text)
    return cjk + len(rest.split())


# ------------------------------------------------------------------------- split rule


def sentence_split(sentence: str) -> str:
    """The deterministic ≈90/5/5 split of a sentence group, from the hash of its (normalised)
    source sentence."""
    digest = blake2b(sentence.encode(), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % 100
    for name, upper in SPLIT_BUCKETS:
        if bucket < upper:
            return name
    return "train"  # unreachable


def default_split(source: str, corpus_size_after_write: int) -> str:
    """The split of a pair written without one (see the module docstring); ``source`` is
    normalised."""
    if corpus_size_after_write < TINY_CORPUS:
        return "train"
    return sentence_split(source)


def split_groups(pairs: Sequence[tuple[Hashable, Hashable]]) -> list[int]:
    """The sentence group of each normalised (source, target), or of each pair of keys that
    stand for them: pairs sharing a source, or a target, with another pair of the group
    (transitively) are one group. Returns, per pair, the index of its group's first pair. A
    union-find: linear in the pairs."""
    parent = list(range(len(pairs)))  # parent[i] < i, or i for a root

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = parent[i]
        return i

    by_source: dict[Hashable, int] = {}
    by_target: dict[Hashable, int] = {}
    for i, (source, target) in enumerate(pairs):
        for seen, key in ((by_source, source), (by_target, target)):
            j = seen.setdefault(key, i)
            if j != i:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the root is the group's first pair
    for i, p in enumerate(parent):  # a parent comes first, so its root is already known
        if p != i:
            parent[i] = parent[p]
    return parent


def is_blank(value: Any) -> bool:
    """None, NaN, pd.NA or NaT (what st.data_editor hands back for an untouched cell)."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


def validate_split(split: Any) -> str | None:
    """A canonical split name, or None for "not given" (None, NaN, empty)."""
    if split is None or (isinstance(split, str) and split.strip() == ""):
        return None
    if is_blank(split):
        return None
    value = str(split).strip().lower()
    if value not in SPLITS:
        raise WorkbenchError(
            N_("invalid split {split!r}: use one of {splits}"),
            split=split,
            splits=", ".join(SPLITS),
        )
    return value


# ------------------------------------------------------------------------------ names


# What ``validate_name`` calls the name it checks (message ids: the page translates them).
NAME_KINDS = {
    "corpus name": N_("corpus name"),
    "version name": N_("version name"),
    "key name": N_("key name"),
}


def validate_name(name: object, what: str = "corpus name") -> str:
    """The stored form of a corpus or version name; ``WorkbenchError`` naming the problem.
    ``what`` is a key of ``NAME_KINDS``."""
    kind = Message(NAME_KINDS[what]) if what in NAME_KINDS else what
    if not isinstance(name, str):
        raise WorkbenchError(N_("{what} must be text"), what=kind)
    hidden = removed_characters(name)
    if hidden:
        raise WorkbenchError(
            N_("{what} must not contain control or invisible characters (found {char})"),
            what=kind,
            char=hidden[0],
        )
    clean = normalize_text(name)
    if not clean:
        raise WorkbenchError(N_("{what} must not be empty"), what=kind)
    if len(clean) > MAX_NAME:
        raise WorkbenchError(N_("{what} is longer than {max} characters"), what=kind, max=MAX_NAME)
    if looks_like_id(clean):
        raise WorkbenchError(
            N_("{what} {name!r} would read as an id: add a word (e.g. 'corpus {name}')"),
            what=kind,
            name=clean,
        )
    return clean


def looks_like_id(text: str) -> bool:
    """``12``, ``#12`` or ``id:12``: how the command line refers to a corpus by id."""
    return _ID_REF.match(text) is not None


def explicit_id(text: str) -> int | None:
    """The id of an unambiguous id reference (``#12``, ``id:12``), else None."""
    m = _ID_REF.match(text)
    return int(m.group(2)) if m and m.group(1) else None


def escape_controls(text: str, json: bool = False) -> str:
    """``text`` with every character that could act on a terminal shown as an escape:
    ``\\x1b`` / ``\\u202e``, or with ``json=True`` always ``\\u001b`` (valid inside the
    strings of a JSON document, which is the only place such characters can be in one)."""
    return _UNSAFE_ON_TERMINAL.sub(lambda m: _escape(m.group(), json), text)


def _escape(ch: str, json: bool) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 and not json else f"\\u{code:04x}"


def _char_name(ch: str) -> str:
    names = {"\x00": "NUL", "\x07": "BEL", "\x1b": "ESC", "\x7f": "DEL", "\ufeff": "BOM"}
    return names.get(ch) or f"U+{ord(ch):04X}"
