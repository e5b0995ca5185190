"""Translate with a CTranslate2 export (workbench.models.ctranslate2_export) — as our decoder would.

Inputs are encoded by our own tokenizers (core_model.translator.encode_inputs), so both
engines read identical ids. Decoding matches core_model.decoding: the same per-sentence
output bound a·|src| + b (sentences are decoded in groups that share it), greedy as is, and
beam search — the same algorithm in CTranslate2 run without its own length penalty, which
then ends a sentence as ours does (its best continuation ended and K hypotheses finished)
and returns the K most probable finished hypotheses: ranked here by our length penalty.
Cross-attention heat-maps stay with our decoder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from core_model.decoding import (
    LENGTH_PENALTIES,
    LENGTH_PENALTY_ALPHA,
    length_penalty,
    output_bounds,
)
from core_model.tokenizer import TokenizerPair
from core_model.transformer import ModelConfig
from core_model.translator import (
    MAX_BATCH_SENTENCES,
    MAX_BATCH_TOKENS,
    MAX_LEN_A,
    MAX_LEN_B,
    TranslationResult,
    batches,
    encode_inputs,
    make_result,
)
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models.ctranslate2_export import (
    METADATA_FILE,
    export_version,
    require_ctranslate2,
    vocabulary,
)
from workbench.models.engines import ENGINE_QUANTIZATION
from workbench.models.registry import get_version


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
    ctranslate2 = require_ctranslate2()
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
        raise WorkbenchError(
            N_("The CTranslate2 export in {folder} cannot be loaded: {reason}"),
            folder=d,
            reason=reason,
        ) from None
    tokens = vocabulary(tokenizers.tgt)
    target_ids = {token: i for i, token in enumerate(tokens)}
    return Ctranslate2Model(translator, tokenizers, cfg, target_ids, tokens[cfg.eos_id])


@lru_cache(maxsize=4)
def _load_cached(folder: str, source_sha256: str, threads: int) -> Ctranslate2Model:
    return load_export(folder, threads)


def load_version_engine(
    version_id: int, quantization: str = ENGINE_QUANTIZATION
) -> Ctranslate2Model:
    """The version exported to CTranslate2, exported on first use into the version's folder
    (again when the version's files no longer match it) and then kept loaded."""
    require_ctranslate2()
    info = get_version(version_id)
    folder = settings.ctranslate2_folder(info.artifact_path, quantization)
    if _exported_from(folder) != info.sha256:
        # Exports appear whole (written aside, then renamed), so an existing folder is a
        # stale or broken one; when there is none, deleting nothing keeps the export another
        # process (another server worker) may be finishing this moment.
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        try:
            export_version(version_id, folder, quantization)
        except (WorkbenchError, OSError):
            if _exported_from(folder) != info.sha256:  # not another process's export
                raise
    return _load_cached(str(folder), info.sha256, torch.get_num_threads())


def _exported_from(folder: Path) -> str | None:
    """The sha256 of the version an export folder was made from (None: no export)."""
    try:
        return json.loads((folder / METADATA_FILE).read_text(encoding="utf-8"))["source_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def translate(
    model: Ctranslate2Model,
    texts: Sequence[str],
    beam: int = 1,
    length_penalty_kind: str = LENGTH_PENALTIES[0],
) -> list[TranslationResult]:
    """One result per text, in order, decoded as core_model.translator.translate_ids decodes
    by default (its batch limits, output bound and beam_search's length penalty α)."""
    cfg, tokenizers = model.cfg, model.tokenizers
    inputs = encode_inputs(tokenizers, texts, cfg.max_len)
    results = [TranslationResult("", [], []) for _ in texts]
    todo = [i for i, source in enumerate(inputs) if source.ids]
    lengths = torch.tensor([len(inputs[i].ids) for i in todo], dtype=torch.long)
    bounds = output_bounds(lengths, MAX_LEN_A, MAX_LEN_B, cfg.max_len - 1).tolist()
    for batch in batches(lengths.tolist(), MAX_BATCH_TOKENS, MAX_BATCH_SENTENCES, beam):
        for bound in sorted({bounds[j] for j in batch}):
            idx = [todo[j] for j in batch if bounds[j] == bound]
            # Source pieces without our EOS: the export appends it (add_source_eos).
            source = [tokenizers.src.ids_to_pieces(inputs[i].ids[:-1]) for i in idx]
            decoded = model.translator.translate_batch(
                source,
                beam_size=beam,
                length_penalty=0.0,  # scores are log-probabilities; ranked by ours below
                num_hypotheses=beam,
                return_scores=True,
                return_end_token=True,
                max_input_length=0,
                max_decoding_length=bound,
                min_decoding_length=0,  # ours may output EOS first (an empty translation)
            )
            for i, out in zip(idx, decoded, strict=True):
                tokens, score = _best(out, beam, LENGTH_PENALTY_ALPHA, length_penalty_kind)
                ended = bool(tokens) and tokens[-1] == model.eos_token
                ids = [model.target_ids[t] for t in tokens[: len(tokens) - ended]]
                results[i] = make_result(tokenizers, inputs[i], ids, score, ended)
    return results


def _best(out: Any, beam: int, alpha: float, kind: str) -> tuple[list[str], float]:
    """The winning hypothesis (tokens, EOS included when produced) and its score: greedy's
    log-probability, or for beam search the best log-probability / lp(Y) of the K returned."""
    if beam == 1:
        return list(out.hypotheses[0]), float(out.scores[0])
    ranked = [
        (float(score) / float(length_penalty(len(tokens), alpha, kind)), list(tokens))
        for tokens, score in zip(out.hypotheses, out.scores, strict=True)
    ]
    normalised, tokens = max(ranked, key=lambda r: r[0])
    return tokens, normalised
