"""Translating with the memory beside the model: each sentence's memory matches, and for an
exact match the curated target instead of the model's output, marked as from the memory
(what a CAT tool does with a 100 % match). The page, the CLI and the HTTP API call this (the
HTTP API decodes through its batcher, so it uses ``recall`` and ``MEMORY_ORIGIN`` itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core_model.translator import TranslationResult
from workbench.corpus.corpora import CorpusRef
from workbench.corpus.glossary import Glossary
from workbench.errors import WorkbenchError
from workbench.memory import datastore
from workbench.memory.matches import Match, find_matches
from workbench.models import registry, translation
from workbench.models.engines import ENGINES
from workbench.models.translation import MEMORY_NEEDS_HANDWRITTEN, DecodingOptions

MEMORY_ORIGIN = "memory"  # a translation's origin when an exact match gave it (else "model")


@dataclass(frozen=True)
class Recalled:
    """A sentence's memory: its matches (best first) and the exact one that gives its
    translation (None: the model translates it)."""

    matches: list[Match]
    exact: Match | None


def memory_corpus(version_id: int, corpus: CorpusRef | None) -> CorpusRef | None:
    """The corpus a version's memory is: the one given (of the version's languages), else the
    version's own (None: an imported version has none, then there is no memory)."""
    if corpus is not None:
        return registry.corpus_of_pair(version_id, corpus)
    return registry.get_version(version_id).corpus_id


def recall(
    version_id: int,
    sentences: Sequence[str],
    *,
    matches: int = 3,
    use_exact: bool = True,
    corpus: CorpusRef | None = None,
) -> list[Recalled]:
    """Each sentence's matches in the memory of ``version_id`` (``memory_corpus``), and the
    exact match that gives its translation when ``use_exact``."""
    nothing = [Recalled([], None) for _ in sentences]
    memory = memory_corpus(version_id, corpus) if matches or use_exact else None
    if memory is None or not sentences:
        return nothing
    try:
        found = find_matches(memory, sentences, limit=max(matches, 1))
    except WorkbenchError:
        if corpus is not None:
            raise
        return nothing  # the version's own corpus was deleted since: no memory, no refusal
    out = []
    for ms in found:
        exact = next((m for m in ms if m.exact), None) if use_exact else None
        out.append(Recalled(ms[:matches] if matches else [], exact))
    return out


def from_memory(match: Match) -> TranslationResult:
    """A curated target as a translation result (no pieces, no attention: nothing decoded)."""
    return TranslationResult(text=match.target, src_pieces=[], out_pieces=[])


def merged(
    memory: Sequence[Recalled], decoded: Sequence[TranslationResult]
) -> list[TranslationResult]:
    """Each sentence's result: its curated target where the memory holds an exact match, else
    the next of ``decoded`` (the translations of the others, in order)."""
    if len(decoded) != sum(r.exact is None for r in memory):
        raise ValueError("one decoded result is needed per sentence without an exact match")
    rest = iter(decoded)
    return [next(rest) if r.exact is None else from_memory(r.exact) for r in memory]


def decode(
    version_id: int,
    sentences: Sequence[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    glossary: Glossary | None = None,
) -> list[TranslationResult]:
    """``translation.translate``, with the kNN-MT datastore of ``options.memory_corpus`` (as
    ``datastore.memory_corpus`` chooses) when ``options.knn`` (the handwritten decoder only:
    CTranslate2 keeps its decoder states to itself). The HTTP server's batches decode through
    this (``workbench.serving.batching``)."""
    if options.knn and options.engine != ENGINES[0]:
        raise WorkbenchError(MEMORY_NEEDS_HANDWRITTEN)
    return translation.translate(
        version_id,
        sentences,
        options.beam,
        with_attention=options.with_attention,
        engine=options.engine,
        quantization=options.quantization,
        glossary=glossary,
        retrieval=datastore.retrieval(version_id, options.memory_corpus) if options.knn else None,
    )


def translate_with_memory(
    version_id: int,
    sentences: Sequence[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    glossary: Glossary | None = None,
    matches: int = 3,
    use_exact: bool = True,
    corpus: CorpusRef | None = None,
) -> tuple[list[TranslationResult], list[Recalled]]:
    """``decode`` of the sentences without an exact match (all of them when not
    ``use_exact``), the others given their curated target; and each one's memory. ``corpus``
    is the memory of both: the matches and the kNN-MT datastore (``options.knn``)."""
    memory = recall(version_id, sentences, matches=matches, use_exact=use_exact, corpus=corpus)
    todo = [i for i, r in enumerate(memory) if r.exact is None]
    decoded = (
        decode(
            version_id,
            [sentences[i] for i in todo],
            replace(options, memory_corpus=corpus),
            glossary=glossary,
        )
        if todo
        else []
    )
    return merged(memory, decoded), memory
