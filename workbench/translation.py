"""Translate with a stored version, and turn a corrected output into a new pair."""

from __future__ import annotations

from collections.abc import Sequence

from core_model.translator import TranslationResult
from core_model.translator import translate as translate_loaded
from workbench import corpus
from workbench.errors import WorkbenchError
from workbench.registry import load_version

MAX_BEAM = 16
MAX_SENTENCES = 5_000


def translate(
    version_id: int,
    texts: Sequence[str],
    beam: int = 1,
    with_attention: bool = False,
) -> list[TranslationResult]:
    """One result per input text, in order (a batch is decoded together).

    beam=1 is greedy decoding; with_attention adds the last decoder layer's cross-attention
    (output pieces × source pieces) for heat-maps.
    """
    if not 1 <= beam <= MAX_BEAM:
        raise WorkbenchError(f"Beam size must be between 1 and {MAX_BEAM}.")
    if len(texts) > MAX_SENTENCES:
        raise WorkbenchError(f"At most {MAX_SENTENCES} sentences at once, got {len(texts)}.")
    loaded = load_version(version_id)
    return translate_loaded(loaded, list(texts), beam=beam, with_attention=with_attention)


def save_correction(corpus_id: int, source: str, target: str, note: str = "correction") -> int:
    """Store a (source, corrected translation) pair in a corpus: the correction loop."""
    return corpus.add_pair(corpus_id, source, target, note=note)
