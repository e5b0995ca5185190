"""Translate with a stored version, say which inputs it cannot be trusted on, and turn a
corrected output into a new pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from core_model.retrieval import RetrievalMemory
from core_model.translator import TranslationResult, cross_attention
from core_model.translator import translate as translate_loaded
from db.tables import Pair
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.glossary import Glossary, enforce
from workbench.corpus.pairs import edit_pairs
from workbench.corpus.text_rules import normalize_text, pair_hash
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.models.ctranslate2_translator import load_version_engine
from workbench.models.ctranslate2_translator import translate as ctranslate2_translate
from workbench.models.engines import (
    ENGINE_QUANTIZATION,
    ENGINES,
    MAX_BEAM,
    QUANTIZATIONS,
    UNKNOWN_QUANTIZATION,
)
from workbench.models.registry import get_version, load_model_of, load_version
from workbench.storage import session_scope
from workbench.team.access import Permission, require

DEFAULT_BEAM = 4  # the beam search's width until a user picks another
MAX_SENTENCES = 5_000
# Above this share of unknown source pieces a translation is mostly guesswork: the UI, the CLI
# and the API warn (one pair of unknown characters in a short sentence is already 20 %).
UNKNOWN_SHARE_WARNING = 0.2
# a refusal that inspection shares
BEAM_RANGE = N_("Beam size must be between 1 and {max_beam}.")
MEMORY_NEEDS_HANDWRITTEN = N_(
    "The corpus memory (kNN-MT) needs the handwritten decoder: CTranslate2 does not show "
    "its decoder states. Choose the handwritten engine, or turn the memory off."
)


def decoding_label(beam: int) -> Message:
    """How outputs were decoded, in the words every page and report uses (a page shows it
    through ``ui.i18n.localized``)."""
    return Message(N_("greedy")) if beam == 1 else Message(N_("beam {beam}"), beam=beam)


def translate(
    version_id: int,
    texts: Sequence[str],
    beam: int = 1,
    with_attention: bool = False,
    engine: str = ENGINES[0],
    quantization: str = ENGINE_QUANTIZATION,
    glossary: Glossary | None = None,
    retrieval: RetrievalMemory | None = None,
) -> list[TranslationResult]:
    """One result per input text, in order (a batch is decoded together).

    beam=1 is greedy decoding; with_attention adds the last decoder layer's cross-attention
    (output pieces × source pieces) for heat-maps — always our model's, whichever engine
    decoded. `quantization`: the CTranslate2 engine's weights (QUANTIZATIONS). With a
    `glossary` (``glossary.glossary_of`` a corpus), sentences that contain its source terms
    and miss their target terms are decoded again by our model under constraints
    (``glossary.enforce``: constrained beam search, whichever engine decoded the rest; those
    results have no attention); the others are translated exactly as without it.
    `retrieval`: decode with a kNN-MT datastore (``workbench.memory.datastore.retrieval``);
    our decoder only (CTranslate2 ignores it: ``workbench.memory.recall`` refuses the pair).
    """
    if not 1 <= beam <= MAX_BEAM:
        raise WorkbenchError(BEAM_RANGE, max_beam=MAX_BEAM)
    if len(texts) > MAX_SENTENCES:
        raise WorkbenchError(
            N_("At most {max} sentences at once, got {n}."), max=MAX_SENTENCES, n=len(texts)
        )
    if engine not in ENGINES:
        raise WorkbenchError(
            N_("Unknown engine {engine!r}; choose one of {choices}."),
            engine=engine,
            choices=", ".join(ENGINES),
        )
    if quantization not in QUANTIZATIONS:
        raise WorkbenchError(
            UNKNOWN_QUANTIZATION, quantization=quantization, choices=", ".join(QUANTIZATIONS)
        )
    loaded = load_version(version_id)
    if engine == "handwritten":
        results = translate_loaded(
            loaded, list(texts), beam=beam, with_attention=with_attention, retrieval=retrieval
        )
    else:
        results = ctranslate2_translate(load_version_engine(version_id, quantization), texts, beam)
        if with_attention:
            for result in results:
                result.attention = cross_attention(loaded.model, result)
    if glossary:
        results = enforce(loaded, list(texts), results, glossary, beam)
    return results


def load_for(version_id: int, engine: str = ENGINES[0]) -> None:
    """Load what `translate` with `engine` needs, ahead of the first request: the version's
    model (always: attention maps and glossaries use it) and, for CTranslate2, its export
    (made on first use)."""
    load_version(version_id)
    if engine == "ctranslate2":
        load_version_engine(version_id, ENGINE_QUANTIZATION)


# ------------------------------------------------------------------------ input checks


@dataclass(frozen=True)
class DecodingOptions:
    """How sentences are decoded, whichever version and corpus: the choices the page, the CLI
    and the HTTP API pass down to ``workbench.memory.recall.decode`` (requests with equal
    ones share a serving batch, ``workbench.serving.batching``)."""

    beam: int = 1  # 1: greedy
    with_attention: bool = False  # add cross-attention heat-maps (``translate``)
    engine: str = ENGINES[0]
    quantization: str = ENGINE_QUANTIZATION  # the CTranslate2 engine's weights
    knn: bool = False  # with the corpus' kNN-MT datastore (the handwritten decoder only)
    memory_corpus: CorpusRef | None = None  # that datastore's corpus (None: the version's)


@dataclass(frozen=True)
class InputCheck:
    """What a version can make of one input. Lengths count source pieces + the end marker."""

    pieces: int  # the whole input
    unknown: int  # pieces the version's tokenizer never saw: the model cannot read them
    longest_trained: int  # the longest source the version was trained on
    max_len: int  # positions the model has: a longer input is cut to its first max_len - 1
    unknown_output: int = 0  # <unk> pieces the model wrote (⁇): characters it cannot write

    @property
    def unknown_share(self) -> float:
        return self.unknown / max(1, self.pieces - 1)

    @property
    def warnings(self) -> list[Message]:
        """Why this translation may be confident nonsense; empty when nothing is known (a page
        shows each through ``ui.i18n.localized``)."""
        out = []
        if self.unknown_share > UNKNOWN_SHARE_WARNING:
            out.append(
                Message(
                    N_(
                        "{share:.0%} of its pieces are unknown to this model: expect a wrong "
                        "translation"
                    ),
                    share=self.unknown_share,
                )
            )
        if self.unknown_output:
            out.append(
                Message(
                    N_(
                        "its translation has ⁇ in place of characters this model's tokenizer "
                        "cannot write"
                    )
                )
            )
        if self.pieces > self.max_len:
            out.append(
                Message(
                    N_(
                        "only its first {shown:,} of {pieces:,} pieces were translated (the "
                        "model reads no more)"
                    ),
                    shown=self.max_len - 1,
                    pieces=self.pieces - 1,
                )
            )
        elif self.pieces > self.longest_trained:
            out.append(
                Message(
                    N_(
                        "it is longer than any sentence the model was trained on ({pieces:,} "
                        "pieces, at most {longest:,} in training)"
                    ),
                    pieces=self.pieces - 1,
                    longest=self.longest_trained - 1,
                )
            )
        return out


def check_inputs(version_id: int, results: Sequence[TranslationResult]) -> list[InputCheck]:
    """One check per result of `translate` with this version.

    The longest trained source comes from the version's training metrics; versions trained
    before those were recorded fall back to the model's max_len (then only a cut input warns).
    """
    info = get_version(version_id)
    loaded = load_model_of(info)
    max_len, unk = loaded.model.cfg.max_len, loaded.tokenizers.specials.unk
    longest = int(info.metrics.get("longest_source_tokens") or max_len)
    return [
        InputCheck(r.src_tokens, r.unk_tokens, longest, max_len, r.out_ids.count(unk))
        for r in results
    ]


# -------------------------------------------------------------------------- corrections


def save_correction(
    corpus_id: CorpusRef, source: str, target: str, note: str = "correction"
) -> int:
    """Store a (source, corrected translation) pair in a corpus: the correction loop.

    A correction goes to train, where the corpus memory (kNN-MT, ``workbench.memory``) uses
    it at once, unless its source or target sentence is already in the corpus: then it joins
    that sentence's split (honest splits, ``workbench.corpus.splits``). Refusals speak of
    this one pair, not of the corpus table's "new row 1".
    """
    require(Permission.EDIT)
    content = pair_hash(normalize_text(source), normalize_text(target))
    try:
        with session_scope() as s:
            info = find(s, corpus_id)
            existing = s.scalar(
                select(Pair.id).where(Pair.corpus_id == info.id, Pair.content_hash == content)
            )
            if existing is not None:
                raise WorkbenchError(
                    N_("This pair is already in corpus “{name}” (pair {pair})."),
                    name=info.name,
                    pair=existing,
                )
            if not normalize_text(target):
                raise WorkbenchError(N_("The corrected translation is empty: type it first."))
            try:
                known = s.scalar(
                    select(Pair.id).where(
                        Pair.corpus_id == info.id,
                        (Pair.source == normalize_text(source))
                        | (Pair.target == normalize_text(target)),
                    )
                )
                split = None if known is not None else "train"
                added = [{"source": source, "target": target, "note": note, "split": split}]
                return edit_pairs(s, info, added=added).added_ids[0]
            except WorkbenchError as exc:
                # the corpus' reason (English: it names the table's "new row 1")
                reason = str(exc).removeprefix("new row 1: ")
                raise WorkbenchError(N_("Not saved: {reason}."), reason=reason) from None
    except IntegrityError as exc:  # a concurrent writer saved the same pair meanwhile
        raise WorkbenchError(
            N_("Not saved: the edit conflicts with a concurrent change: {error}."),
            error=exc.orig,
        ) from None
