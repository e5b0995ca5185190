"""Text in, text out: tokenize, batch by length, decode (greedy or beam), detokenize.

Sentences are sorted by length before batching so each batch pads little; results come back in
the caller's order. Empty inputs translate to empty outputs without touching the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core_model.artifact import LoadedModel
from core_model.batching import encode_source, pad_sources
from core_model.decoding import beam_search, greedy_decode
from core_model.tokenizer import UNK_ID, TokenizerPair, clean_text
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


def _batches(lengths: Sequence[int], max_tokens: int, max_sentences: int) -> list[list[int]]:
    """Positions sorted by length, cut into batches of ≤ max_tokens source positions."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        too_long = lengths[i] * (len(current) + 1) > max_tokens
        if current and (too_long or len(current) >= max_sentences):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def translate_ids(
    model: Transformer,
    tokenizers: TokenizerPair,
    texts: Sequence[str],
    beam: int = 1,
    with_attention: bool = False,
    max_tokens: int = 4000,
    max_sentences: int = 128,
    # Output bound a·|src| + b in pieces. Generous: zh→en outputs have several times more
    # pieces than their sources, and the bound only ever stops a model that never emits EOS.
    max_len_a: float = 3.0,
    max_len_b: int = 50,
) -> list[TranslationResult]:
    """Translate with an in-memory model (the training loop's validation uses this too)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    max_len = model.cfg.max_len
    src_ids = [
        encode_source(tokenizers, t, max_len) if clean_text(t).strip() else [] for t in texts
    ]
    # Encoded once more, uncut, to tell the caller how long and how unknown each input was.
    full_ids = [
        tokenizers.src.encode(t) if ids else [] for t, ids in zip(texts, src_ids, strict=True)
    ]
    results: list[TranslationResult] = [TranslationResult("", [], []) for _ in texts]
    todo = [i for i, ids in enumerate(src_ids) if ids]
    if beam > 1:  # beam search multiplies the batch by the beam width
        max_tokens = max(1, max_tokens // beam)
        max_sentences = max(1, max_sentences // beam)
    for batch in _batches([len(src_ids[i]) for i in todo], max_tokens, max_sentences):
        idx = [todo[j] for j in batch]
        src = pad_sources([src_ids[i] for i in idx]).to(device)  # [B, S]
        if beam > 1:
            decoded = beam_search(
                model,
                src,
                beam_size=beam,
                max_len_a=max_len_a,
                max_len_b=max_len_b,
                need_attention=with_attention,
            )
        else:
            decoded = greedy_decode(
                model, src, max_len_a=max_len_a, max_len_b=max_len_b, need_attention=with_attention
            )
        for i, res in zip(idx, decoded, strict=True):
            src_pieces = [*tokenizers.src.ids_to_pieces(src_ids[i][:-1]), "</s>"]
            out_pieces = [*tokenizers.tgt.ids_to_pieces(res.tokens), "</s>"]
            att = None
            if with_attention and res.attention is not None:
                att = res.attention.float().cpu()  # [T_out (+1 if EOS was produced), S]
                if att.size(0) < len(out_pieces):  # stopped at the length limit: no EOS row
                    out_pieces = out_pieces[:-1]
            text = tokenizers.tgt.decode(res.tokens)
            full = full_ids[i]
            results[i] = TranslationResult(
                text,
                src_pieces,
                out_pieces,
                att,
                float(res.score),
                src_tokens=len(full) + 1,
                unk_tokens=sum(1 for t in full if t == UNK_ID),
            )
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
    bound a·|src| + b).
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
