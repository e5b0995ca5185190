"""A corpus' glossary: source term → the target term a translation must use, and how the
translation is made to obey it.

The terms are edited in the Corpus page's Glossary tab or imported from a TSV/CSV file
(``set_terms``, ``import_terms``). At translation time (``enforce``), a sentence in which no
source term occurs is translated as it always is. One in which terms occur is translated
as usual first; if the output already contains every required target term it is kept,
otherwise the sentence is decoded again by **constrained beam search**
(``core_model.constrained_decoding``): the required terms' target pieces must appear in the
output, and the model chooses where and how to fit the rest of the sentence around them.
(The other common method, replacing the term by a placeholder that the model copies and
substituting it afterwards, needs a model trained on placeholders; constrained decoding
works with any version.) ``term_hits`` counts how many required terms an output contains:
the hit rate that evaluation and comparison report.

Source terms are matched as whole words (ignoring case) in scripts with spaces, and as
substrings in Chinese and Japanese; a longer term wins over a shorter one inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property

import torch
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from core_model.artifact import LoadedModel
from core_model.batching import encode_source, pad_sources
from core_model.constrained_decoding import constrained_beam_search
from core_model.tokenizer import Tokenizer
from core_model.translator import TranslationResult
from db.tables import Corpus, GlossaryTerm
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.formats import Malformed, read_columns
from workbench.corpus.text_files import Data
from workbench.corpus.text_rules import normalize_text
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history
from workbench.team.access import Permission, require

MAX_TERM_CHARS = 200
MAX_TERMS = 10_000
# Constrained search needs room for a bank per constraint token: never fewer beams than this.
MIN_CONSTRAINED_BEAM = 8
MAX_CONSTRAINED_BEAM = 16


@dataclass(frozen=True)
class Glossary:
    """Terms as (source term, required target term), longest source first."""

    terms: tuple[tuple[str, str], ...]

    def __bool__(self) -> bool:
        return bool(self.terms)

    @cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        if not self.terms:
            return None
        parts = [_term_pattern(s) for s, _ in self.terms]
        return re.compile("|".join(f"({p})" for p in parts), re.IGNORECASE)

    def matches(self, source: str) -> list[tuple[str, str]]:
        """The terms that occur in `source` (each once, in order of appearance)."""
        if self._pattern is None:
            return []
        found: dict[int, None] = {}
        for m in self._pattern.finditer(source):
            found.setdefault(m.lastindex - 1, None)  # type: ignore[operator]
        return [self.terms[i] for i in found]


def _term_pattern(term: str) -> str:
    escaped = re.escape(term)
    if _without_spaces(term):
        return escaped
    return rf"(?<!\w){escaped}(?!\w)"


def contains_term(text: str, term: str) -> bool:
    """Whether `text` contains `term` as source terms are matched: a whole word (ignoring
    case) in scripts with spaces ("woman" does not contain "man"), a substring in Chinese."""
    return re.search(_term_pattern(term), text, re.IGNORECASE) is not None


def _without_spaces(text: str) -> bool:
    """Whether `text` is (partly) in a script written without spaces between words (CJK
    ideographs, kana): where a term is a substring, not a word, and a piece inside a
    sentence rarely begins a word."""
    return any(
        0x3040 <= cp <= 0x30FF or 0x3400 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF
        for cp in map(ord, text)
    )


def _term_ids(tokenizer: Tokenizer, term: str, spaced: bool) -> list[int]:
    """The target pieces of `term` as written inside a sentence. A subword tokenizer begins
    a text (the term on its own is one) with "▁": right in a target with spaces, where a
    term begins a word, but in Chinese a "▁" piece is one the model writes only at the
    sentence start (it would pull the term there, and "▁图书馆" comes out as " 图书馆"), so
    there the marker goes: a lone "▁" is left out, a "▁X" piece becomes "X", or X's
    characters, where the vocabulary has them."""
    ids = tokenizer.encode(term)
    first = tokenizer.ids_to_pieces(ids[:1])
    if spaced or not first or not first[0].startswith("▁"):
        return ids
    bare = first[0][1:]
    vocabulary = {p: i for i, p in enumerate(tokenizer.ids_to_pieces(range(tokenizer.vocab_size)))}
    for pieces in ([bare] if bare else [], list(bare)):
        if all(p in vocabulary for p in pieces):
            return [vocabulary[p] for p in pieces] + ids[1:]
    return ids


def _word_starts(tokenizer: Tokenizer) -> torch.Tensor:
    """[V] bool: the target pieces that begin a word ("▁" in SentencePiece pieces, a Marian
    vocabulary's too), punctuation, the end marker: what may follow a required term, and what
    the search may write only where the model has finished a word (so a term never cuts the
    word before it). A whitespace tokenizer's tokens are all words."""
    pieces = tokenizer.ids_to_pieces(range(tokenizer.vocab_size))
    if getattr(tokenizer, "kind", "") not in ("sentencepiece", "marian"):
        return torch.ones(len(pieces), dtype=torch.bool)
    eos = tokenizer.specials.eos
    return torch.tensor(
        [p.startswith("▁") or not p[:1].isalnum() or i == eos for i, p in enumerate(pieces)]
    )


# ---------------------------------------------------------------------------- storage


def _clean_terms(rows: list[tuple[object, object]]) -> list[tuple[str, str]]:
    """Validated (source, target) terms; a repeated source term is an error."""
    terms: dict[str, str] = {}
    for n, (src, tgt) in enumerate(rows, start=1):
        source = normalize_text("" if src is None else str(src))
        target = normalize_text("" if tgt is None else str(tgt))
        if not source and not target:
            continue
        if not source or not target:
            raise WorkbenchError(
                N_("glossary row {n}: the source term is empty")
                if not source
                else N_("glossary row {n}: the target term is empty"),
                n=n,
            )
        if max(len(source), len(target)) > MAX_TERM_CHARS:
            raise WorkbenchError(
                N_("glossary row {n}: a term is longer than {max}"), n=n, max=MAX_TERM_CHARS
            )
        if source.casefold() in {s.casefold() for s in terms}:
            raise WorkbenchError(
                N_("glossary row {n}: {term!r} is in the glossary twice"), n=n, term=source
            )
        terms[source] = target
    if len(terms) > MAX_TERMS:
        raise WorkbenchError(N_("a glossary holds at most {max} terms"), max=f"{MAX_TERMS:,}")
    return list(terms.items())


def set_terms(corpus_id: CorpusRef, rows: list[tuple[object, object]]) -> int:
    """Replace a corpus' glossary with `rows` (source term, target term), in one
    transaction; blank rows are ignored. Returns how many terms it holds."""
    require(Permission.EDIT)
    with session_scope() as s:
        return replace_terms(s, find(s, corpus_id), rows)


def replace_terms(s: Session, corpus: Corpus, rows: list[tuple[object, object]]) -> int:
    """``set_terms`` inside the caller's unit of work (a saved glossary draft)."""
    terms = _clean_terms(rows)
    mine = GlossaryTerm.corpus_id == corpus.id
    before = history.capture(s, GlossaryTerm, where=mine)
    # Terms that stay keep their rows (and ids), so the history shows only real changes.
    wanted = dict(terms)
    kept = {r["source_term"] for r in before.values() if r["source_term"] in wanted}
    s.execute(delete(GlossaryTerm).where(mine, GlossaryTerm.source_term.not_in(kept)))
    for row in s.scalars(select(GlossaryTerm).where(mine)):
        row.target_term = wanted[row.source_term]
    s.add_all(
        GlossaryTerm(corpus_id=corpus.id, source_term=a, target_term=b)
        for a, b in terms
        if a not in kept
    )
    s.flush()
    history.record(
        s,
        "glossary",
        history.diff(GlossaryTerm, before, history.capture(s, GlossaryTerm, where=mine)),
        corpus_id=corpus.id,
        summary=f"glossary saved: {len(terms)} terms",
    )
    return len(terms)


def import_terms(corpus_id: CorpusRef, data: Data, fmt: str = "tsv") -> int:
    """Add the terms of a file in a format of columns (``formats.COLUMN_FORMATS``: tsv, csv;
    source term, target term per record, more columns ignored; a header ``source, target`` is
    skipped), read as the pairs' import reads it, to a corpus' glossary; a term already there
    takes the file's translation. Any line that is not a term refuses the whole file. Returns
    how many terms the glossary holds."""
    require(Permission.EDIT)
    rows: list[tuple[object, object]] = []
    for record in read_columns(data, fmt, "glossary file"):
        if isinstance(record, Malformed):
            raise WorkbenchError(
                N_("glossary file line {line}: {reason}"), line=record.line, reason=record.reason
            )
        line, cols = record
        if len(cols) < 2:
            raise WorkbenchError(N_("glossary file line {line}: expected two columns"), line=line)
        rows.append((cols[0], cols[1]))
    new = dict(_clean_terms(rows))
    kept = [
        (s, t) for s, t in list_terms(corpus_id) if s.casefold() not in {n.casefold() for n in new}
    ]
    return set_terms(corpus_id, [*kept, *new.items()])


def list_terms(corpus_id: CorpusRef) -> list[tuple[str, str]]:
    """A corpus' glossary as (source term, target term), in alphabetical order."""
    with session_scope() as s:
        return terms_of(s, find(s, corpus_id))


def terms_of(s: Session, corpus: Corpus) -> list[tuple[str, str]]:
    """``list_terms`` inside the caller's unit of work."""
    rows = s.execute(
        select(GlossaryTerm.source_term, GlossaryTerm.target_term)
        .where(GlossaryTerm.corpus_id == corpus.id)
        .order_by(GlossaryTerm.source_term)
    ).all()
    return [(r[0], r[1]) for r in rows]


def glossary_of(corpus_id: CorpusRef) -> Glossary:
    """A corpus' glossary, ready to match (longest source terms first)."""
    terms = sorted(list_terms(corpus_id), key=lambda t: (-len(t[0]), t[0]))
    return Glossary(tuple(terms))


# ------------------------------------------------------------------------ translation


def term_hits(sources: list[str], outputs: list[str], glossary: Glossary) -> tuple[int, int]:
    """(required terms found in the outputs, terms required): a term is required in every
    sentence whose source contains it, and found when its target term is in the output
    (``contains_term``)."""
    hits = required = 0
    for source, output in zip(sources, outputs, strict=True):
        for _src, tgt in glossary.matches(source):
            required += 1
            hits += contains_term(output, tgt)
    return hits, required


def enforce(
    loaded: LoadedModel,
    texts: list[str],
    results: list[TranslationResult],
    glossary: Glossary,
    beam: int,
) -> list[TranslationResult]:
    """`results` (the unconstrained translations of `texts`), with every sentence that
    misses a required term decoded again under constraints (see the module docstring).
    A term whose target pieces the model's vocabulary cannot write is not enforced."""
    out = list(results)
    tokenizers, model = loaded.tokenizers, loaded.model
    device = next(model.parameters()).device
    for i, text in enumerate(texts):
        required = [t for _, t in glossary.matches(text)]
        if not required or all(contains_term(out[i].text, t) for t in required):
            continue
        # The word rules need words with spaces: in Chinese or Japanese a piece inside a
        # sentence rarely begins a word, so they would push a term to the start or to a comma.
        spaced = not _without_spaces(out[i].text + "".join(required))
        constraints = [_term_ids(tokenizers.tgt, t, spaced) for t in required]
        constraints = [c for c in constraints if c and tokenizers.specials.unk not in c]
        if not constraints:
            continue
        src = pad_sources([encode_source(tokenizers, text, model.cfg.max_len)], model.cfg.pad_id)
        src = src.to(device)
        width = min(MAX_CONSTRAINED_BEAM, max(beam, MIN_CONSTRAINED_BEAM))
        decoded = constrained_beam_search(
            model,
            src,
            constraints,
            beam_size=width,
            word_starts=_word_starts(tokenizers.tgt) if spaced else None,
        )
        out[i] = replace(
            out[i],
            text=tokenizers.tgt.decode(decoded.tokens),
            out_pieces=tokenizers.tgt.ids_to_pieces(decoded.tokens)
            + (["</s>"] if decoded.ended else []),
            attention=None,
            score=decoded.score,
            out_ids=list(decoded.tokens),
        )
    return out
