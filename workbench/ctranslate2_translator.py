"""Translate with a CTranslate2 export (workbench.ctranslate2_export) — as our decoder would.

Inputs are encoded by our own tokenizers (core_model.translator.encode_inputs), so both
engines read identical ids. Decoding matches core_model.decoding: the same per-sentence
output bound a·|src| + b (sentences are decoded in groups that share it), greedy as is, and
beam search — the same algorithm in CTranslate2 — asked for its K best finished
hypotheses, ranked by our length penalty. With the 'power' penalty (CTranslate2's own) the
outputs are ours; with GNMT's they differ where more than K hypotheses finish and the one GNMT
prefers is not among CTranslate2's K best by |Y|^α. Cross-attention heat-maps stay with our decoder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core_model.decoding import LENGTH_PENALTIES, length_penalty, output_bounds
from core_model.tokenizer import TokenizerPair
from core_model.transformer import ModelConfig
from core_model.translator import (
    MAX_LEN_A,
    MAX_LEN_B,
    TranslationResult,
    batches,
    encode_inputs,
    make_result,
)
from workbench.ctranslate2_export import METADATA_FILE, _require_ctranslate2, vocabulary
from workbench.errors import WorkbenchError


@dataclass
class Ctranslate2Model:
    """A loaded export: the CTranslate2 translator, our tokenizers and the model config."""

    translator: Any  # ctranslate2.Translator
    tokenizers: TokenizerPair
    cfg: ModelConfig
    target_ids: dict[str, int]  # target token text -> id
    eos_token: str


def load_export(
    directory: str | Path, threads: int | None = None, compute_type: str = "default"
) -> Ctranslate2Model:
    """Load an export folder for CPU translation. `compute_type` 'default' runs the weights
    as exported; 'int8' etc. convert them on load. `threads`: CPU threads (default: torch's)."""
    ctranslate2 = _require_ctranslate2()
    d = Path(directory)
    try:
        info = json.loads((d / METADATA_FILE).read_text(encoding="utf-8"))
        cfg = ModelConfig.from_dict(info["model"])
        tokenizers = TokenizerPair.load(d / "tokenizer")
        translator = ctranslate2.Translator(
            str(d),
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads or torch.get_num_threads(),
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise WorkbenchError(f"The CTranslate2 export in {d} cannot be loaded: {reason}") from None
    tokens = vocabulary(tokenizers.tgt)
    target_ids = {token: i for i, token in enumerate(tokens)}
    return Ctranslate2Model(translator, tokenizers, cfg, target_ids, tokens[cfg.eos_id])


def translate(
    model: Ctranslate2Model,
    texts: Sequence[str],
    beam: int = 1,
    length_penalty_alpha: float = 0.6,
    length_penalty_kind: str = LENGTH_PENALTIES[0],
    max_tokens: int = 4000,
    max_sentences: int = 128,
    max_len_a: float = MAX_LEN_A,
    max_len_b: int = MAX_LEN_B,
) -> list[TranslationResult]:
    """One result per text, in order — the arguments mean what they mean for
    core_model.translator.translate_ids (batch limits, output bound) and beam_search."""
    # Any nonzero penalty makes CTranslate2 stop a sentence at K finished hypotheses, as ours
    # does; it divides their log-probabilities by |Y|^alpha ('power'), and returns the K best.
    alpha = length_penalty_alpha if length_penalty_alpha > 0 else 1.0
    cfg, tokenizers = model.cfg, model.tokenizers
    inputs = encode_inputs(tokenizers, texts, cfg.max_len)
    results = [TranslationResult("", [], []) for _ in texts]
    todo = [i for i, source in enumerate(inputs) if source.ids]
    lengths = torch.tensor([len(inputs[i].ids) for i in todo], dtype=torch.long)
    bounds = output_bounds(lengths, max_len_a, max_len_b, cfg.max_len - 1).tolist()
    if beam > 1:
        max_tokens, max_sentences = max(1, max_tokens // beam), max(1, max_sentences // beam)
    for batch in batches([len(inputs[i].ids) for i in todo], max_tokens, max_sentences):
        for bound in sorted({bounds[j] for j in batch}):
            idx = [todo[j] for j in batch if bounds[j] == bound]
            # Source pieces without our EOS: the export appends it (add_source_eos).
            source = [tokenizers.src.ids_to_pieces(inputs[i].ids[:-1]) for i in idx]
            decoded = model.translator.translate_batch(
                source,
                beam_size=beam,
                length_penalty=alpha if beam > 1 else 0.0,
                num_hypotheses=beam,
                return_scores=True,
                return_end_token=True,
                max_input_length=0,
                max_decoding_length=bound,
                min_decoding_length=0,  # ours may output EOS first (an empty translation)
            )
            for i, out in zip(idx, decoded, strict=True):
                tokens, score = _best(out, beam, alpha, length_penalty_alpha, length_penalty_kind)
                ended = bool(tokens) and tokens[-1] == model.eos_token
                ids = [model.target_ids[t] for t in tokens[: len(tokens) - ended]]
                results[i] = make_result(tokenizers, inputs[i], ids, score, ended)
    return results


def _best(
    out: Any, beam: int, ct2_alpha: float, alpha: float, kind: str
) -> tuple[list[str], float]:
    """The winning hypothesis (tokens, EOS included when produced) and its score: greedy's
    log-probability, or beam's log-probability / lp(Y) as core_model.decoding ranks them
    (CTranslate2 divided each by |Y|^ct2_alpha)."""
    if beam == 1:
        return list(out.hypotheses[0]), float(out.scores[0])
    ranked = []
    for tokens, score in zip(out.hypotheses, out.scores, strict=True):
        log_prob = float(score) * len(tokens) ** ct2_alpha
        ranked.append((log_prob / float(length_penalty(len(tokens), alpha, kind)), list(tokens)))
    normalised, tokens = max(ranked, key=lambda r: r[0])
    return tokens, normalised
