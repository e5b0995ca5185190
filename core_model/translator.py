"""Text in, text out: tokenize, batch by length, decode (greedy or beam), detokenize.

Sentences are sorted by length before batching so each batch pads little; results come back in
the caller's order. Empty inputs translate to empty outputs without touching the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from core_model.artifact import LoadedModel
from core_model.batching import encode_source, pad_sources
from core_model.decoding import LENGTH_PENALTIES, beam_search, greedy_decode
from core_model.retrieval import RetrievalMemory
from core_model.tokenizer import TokenizerPair, tokenizer_safe
from core_model.transformer import Transformer


@dataclass
class TranslationResult:
    text: str
    src_pieces: list[str]  # source pieces + "</s>", one per attention column
    out_pieces: list[str]  # output pieces (+ "</s>" when produced), one per attention row
    attention: torch.Tensor | None = None  # [len(out_pieces), len(src_pieces)] or None
    score: float = 0.0
    # The whole input before it was cut to the model's max_len: its ids + EOS, and how many of
    # them are UNK (pieces the tokenizer never saw in training: the model cannot read them).
    src_tokens: int = 0
    unk_tokens: int = 0
    src_ids: list[int] = field(default_factory=list)  # what the model read (cut, + EOS)
    out_ids: list[int] = field(default_factory=list)  # output ids without BOS/EOS


# Output bound a·|src| + b in pieces. Generous: zh→en outputs have several times more pieces
# than their sources, and the bound only ever stops a model that never emits EOS.
MAX_LEN_A, MAX_LEN_B = 3.0, 50
# A batch's most source positions (pads included) and sentences, at beam 1 (``batches``).
MAX_BATCH_TOKENS, MAX_BATCH_SENTENCES = 4000, 128


@dataclass
class EncodedInput:
    """One input text as the model reads it: `ids` cut to max_len and ending with EOS (empty
    for an empty text), and how long and how unknown the whole, uncut input was."""

    ids: list[int]
    src_tokens: int = 0  # ids of the whole input + EOS
    unk_tokens: int = 0  # how many of them are UNK (never seen in training)


def encode_inputs(
    tokenizers: TokenizerPair, texts: Sequence[str], max_len: int
) -> list[EncodedInput]:
    """Encode texts for any decoder of this model (ours or an exported one)."""
    out = []
    for text in texts:
        if not tokenizer_safe(text).strip():
            out.append(EncodedInput([]))
            continue
        full = tokenizers.src.encode(text)  # once more, uncut, to tell the caller
        ids = encode_source(tokenizers, text, max_len)
        unk = tokenizers.specials.unk
        out.append(EncodedInput(ids, len(full) + 1, sum(1 for t in full if t == unk)))
    return out


def make_result(
    tokenizers: TokenizerPair,
    source: EncodedInput,
    tokens: Sequence[int],
    score: float,
    ended: bool,
    attention: torch.Tensor | None = None,
) -> TranslationResult:
    """The result of one decoded output: `tokens` without BOS/EOS, `ended` whether the
    decoder produced EOS (not stopped by the length bound); attention [T_out(+1), S]."""
    out_pieces = tokenizers.tgt.ids_to_pieces(tokens) + (["</s>"] if ended else [])
    return TranslationResult(
        tokenizers.tgt.decode(tokens),
        [*tokenizers.src.ids_to_pieces(source.ids[:-1]), "</s>"],
        out_pieces,
        attention,
        float(score),
        src_tokens=source.src_tokens,
        unk_tokens=source.unk_tokens,
        src_ids=list(source.ids),
        out_ids=list(tokens),
    )


@torch.inference_mode()
def cross_attention(model: Transformer, result: TranslationResult) -> torch.Tensor | None:
    """The last decoder layer's cross-attention [len(out_pieces), len(src_pieces)] (mean of
    heads) as `model` reads the result's output — teacher forcing gives the rows incremental
    decoding would: the heat-map of an output another engine decoded. None if empty."""
    if not result.src_ids:
        return None
    device = next(model.parameters()).device
    src = torch.tensor([result.src_ids], device=device)  # [1, S]
    tgt = torch.tensor([[model.cfg.bos_id, *result.out_ids]], device=device)  # [1, T_out + 1]
    memory, src_mask = model.encode(src)
    _, weights = model.decode_states(tgt, memory, src_mask, need_weights=True)  # [1, T_out + 1, S]
    return weights[0, : len(result.out_pieces)].float().cpu()


def batches(
    lengths: Sequence[int], max_tokens: int, max_sentences: int, beam: int = 1
) -> list[list[int]]:
    """Positions sorted by length, cut into batches of ≤ max_tokens source positions and ≤
    max_sentences sentences; beam search multiplies a batch by its width, so both are divided
    by `beam` (below 1: greedy's 1)."""
    width = max(1, beam)
    max_tokens, max_sentences = max(1, max_tokens // width), max(1, max_sentences // width)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    current: list[int] = []
    for i in order:
        too_long = lengths[i] * (len(current) + 1) > max_tokens
        if current and (too_long or len(current) >= max_sentences):
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


def translate_ids(
    model: Transformer,
    tokenizers: TokenizerPair,
    texts: Sequence[str],
    beam: int = 1,
    with_attention: bool = False,
    max_tokens: int = MAX_BATCH_TOKENS,
    max_sentences: int = MAX_BATCH_SENTENCES,
    max_len_a: float = MAX_LEN_A,
    max_len_b: int = MAX_LEN_B,
    length_penalty_kind: str = LENGTH_PENALTIES[0],
    retrieval: RetrievalMemory | None = None,
) -> list[TranslationResult]:
    """Translate with an in-memory model (the training loop's validation uses this too);
    `retrieval` decodes with kNN-MT (``core_model.retrieval``)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    inputs = encode_inputs(tokenizers, texts, model.cfg.max_len)
    results: list[TranslationResult] = [TranslationResult("", [], []) for _ in texts]
    todo = [i for i, source in enumerate(inputs) if source.ids]
    for batch in batches([len(inputs[i].ids) for i in todo], max_tokens, max_sentences, beam):
        idx = [todo[j] for j in batch]
        src = pad_sources([inputs[i].ids for i in idx], model.cfg.pad_id).to(device)  # [B, S]
        if beam > 1:
            decoded = beam_search(
                model,
                src,
                beam_size=beam,
                max_len_a=max_len_a,
                max_len_b=max_len_b,
                need_attention=with_attention,
                length_penalty_kind=length_penalty_kind,
                retrieval=retrieval,
            )
        else:
            decoded = greedy_decode(
                model,
                src,
                max_len_a=max_len_a,
                max_len_b=max_len_b,
                need_attention=with_attention,
                retrieval=retrieval,
            )
        for i, res in zip(idx, decoded, strict=True):
            att = res.attention.float().cpu() if res.attention is not None else None
            results[i] = make_result(tokenizers, inputs[i], res.tokens, res.score, res.ended, att)
    if was_training:
        model.train()
    return results


def translate(
    loaded: LoadedModel,
    texts: Sequence[str],
    beam: int = 1,
    with_attention: bool = False,
    **kwargs: object,
) -> list[TranslationResult]:
    """Translate `texts` with a loaded model folder; one result per input, in input order.

    kwargs: max_tokens, max_sentences (batch limits), max_len_a, max_len_b (output length
    bound a·|src| + b), length_penalty_kind (beam search's, core_model.decoding), retrieval
    (kNN-MT's datastore, core_model.retrieval).
    """
    if beam < 1:
        raise ValueError("beam must be at least 1")
    return translate_ids(
        loaded.model,
        loaded.tokenizers,
        list(texts),
        beam,
        with_attention,
        **kwargs,  # type: ignore[arg-type]
    )
