"""How well the model does on held-out pairs during training: loss, BLEU/chrF of its greedy
translations, and — for a tiny corpus without validation pairs — whether it reproduces its
own training pairs exactly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from core_model.batching import Example, collate, make_batches
from core_model.metrics import score
from core_model.tokenizer import TokenizerPair, unknown_characters
from core_model.training.label_smoothing import label_smoothed_nll_loss
from core_model.training.precision import autocast
from core_model.transformer import Transformer
from core_model.translator import translate_ids


@torch.no_grad()
def evaluate_loss(
    model: Transformer,
    examples: Sequence[Example],
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    max_tokens: int,
    epsilon: float = 0.0,
) -> float:
    """Per-token loss (label-smoothed with `epsilon`) over `examples` (eval mode, no dropout)."""
    if not examples:
        return float("nan")
    was_training = model.training
    model.eval()
    total, n = 0.0, 0
    for idx in make_batches(examples, max_tokens, shuffle=False):
        batch = collate(examples, idx, model.cfg.specials).to(device)
        with autocast(device, autocast_dtype):
            logits = model(batch.src, batch.tgt_in)  # [B, T, V]
        loss, _ = label_smoothed_nll_loss(
            logits.reshape(-1, logits.size(-1)),
            batch.tgt_out.reshape(-1),
            epsilon,
            model.cfg.pad_id,
        )
        total += float(loss)
        n += batch.n_tokens
    if was_training:
        model.train()
    return total / max(1, n)


def evaluate_translations(
    model: Transformer,
    tokenizers: TokenizerPair,
    pairs: Sequence[tuple[str, str]],
    autocast_dtype: torch.dtype | None = None,
    beam: int = 1,
) -> dict[str, Any]:
    """BLEU/chrF of the model's translations of `pairs` (sacreBLEU, detokenized)."""
    if not pairs:
        return {"bleu": None, "chrf": None, "n": 0}
    device = next(model.parameters()).device
    with autocast(device, autocast_dtype):
        results = translate_ids(model, tokenizers, [s for s, _ in pairs], beam=beam)
    return score([r.text for r in results], [t for _, t in pairs])


def exact_match_share(
    model: Transformer,
    tokenizers: TokenizerPair,
    pairs: Sequence[tuple[str, str]],
    autocast_dtype: torch.dtype | None = None,
) -> float:
    """Share of `pairs` whose greedy translation equals the target (spacing aside)."""
    device = next(model.parameters()).device
    with autocast(device, autocast_dtype):
        out = translate_ids(model, tokenizers, [s for s, _ in pairs])
    hits = sum(
        " ".join(o.text.split()) == " ".join(t.split())
        for o, (_, t) in zip(out, pairs, strict=True)
    )
    return hits / max(1, len(pairs))


def reproducible_pairs(
    tokenizers: TokenizerPair, pairs: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The pairs whose target the target tokenizer can write: a memorising run waits for these
    only (a character it lacks comes out as ⁇, so that pair can never be reproduced)."""
    unknown = set(unknown_characters(tokenizers.tgt, Counter("".join(t for _, t in pairs))))
    return [(s, t) for s, t in pairs if unknown.isdisjoint(t)]
