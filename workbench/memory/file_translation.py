"""Translating a CAT tool's XLIFF file with a version: every empty target filled
(``workbench.corpus.xliff.fill_targets`` says how tags and states are kept), the memory's
exact matches used where the caller asks (``use_memory``). The CLI, the Translate page and
the HTTP API call this."""

from __future__ import annotations

from collections.abc import Callable

from workbench.corpus.corpora import CorpusRef
from workbench.corpus.text_files import Data
from workbench.corpus.xliff import FilledFile, fill_targets
from workbench.memory.recall import translate_with_memory
from workbench.models import registry
from workbench.models.engines import ENGINES
from workbench.models.translation import DecodingOptions

BATCH = 1000  # runs of text decoded at a time


def translate_xliff(
    version_id: int,
    data: Data,
    *,
    beam: int = 1,
    engine: str = ENGINES[0],
    use_memory: bool = False,
    corpus: CorpusRef | None = None,
    before_decoding: Callable[[list[str]], None] | None = None,
) -> FilledFile:
    """The XLIFF file ``data`` translated by ``version_id``; with ``use_memory`` a text the
    memory (``recall.memory_corpus``) holds exactly gets its curated target.
    ``before_decoding`` sees every run of text to translate before any is decoded, and may
    refuse them (the HTTP API's characters-per-request limit)."""

    def translate(texts: list[str]) -> list[tuple[str, bool]]:
        if before_decoding is not None:
            before_decoding(texts)
        out: list[tuple[str, bool]] = []
        for start in range(0, len(texts), BATCH):
            chunk = texts[start : start + BATCH]
            results, memory = translate_with_memory(
                version_id,
                chunk,
                DecodingOptions(beam=beam, engine=engine),
                matches=0,
                use_exact=use_memory,
                corpus=corpus,
            )
            out += [(r.text, m.exact is not None) for r, m in zip(results, memory, strict=True)]
        return out

    info = registry.get_version(version_id)
    return fill_targets(data, translate, languages=(info.src_lang, info.tgt_lang))
