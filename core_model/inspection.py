"""The Transformer at work on one sentence, looked at part by part: every layer's and head's
attention (§3.2), the decoder's next-token distribution at each greedy step and beam search's
candidates step by step (§6.1), the sinusoids of §3.5 and the embedding space of §3.4.

Everything comes from explicit return values — `Transformer.attention_maps` (a teacher-forced
pass over the greedy output, which gives the rows incremental decoding computed) and
`beam_search(history=True)` — so training and decoding pay nothing for it. The results are
plain Python lists and numbers: a front end draws them without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core_model.artifact import LoadedModel
from core_model.decoding import (
    LENGTH_PENALTIES,
    LENGTH_PENALTY_ALPHA,
    beam_search,
    greedy_decode,
    length_penalty,
    output_bounds,
    output_log_probs,
    pick_finished,
)
from core_model.tokenizer import Tokenizer
from core_model.transformer import ModelConfig
from core_model.transformer.masks import decoder_self_mask, padding_mask
from core_model.translator import MAX_LEN_A, MAX_LEN_B, encode_inputs

Matrix = list[list[float]]

MAX_PIECES = 40  # source pieces looked at; a layer × head grid of larger maps is unreadable
MAX_OUTPUT = 60  # output pieces


@dataclass
class TokenChoice:
    """A vocabulary entry and how likely (or, for neighbours, how similar) it is."""

    id: int
    piece: str
    value: float  # a probability, or a cosine similarity


@dataclass
class GreedyStep:
    """One greedy step: the piece chosen (the most probable) and the k most probable."""

    position: int  # output position predicted (0: the first piece, read after BOS)
    chosen: TokenChoice
    top: list[TokenChoice]  # best first


@dataclass
class BeamRow:
    """One beam search candidate (core_model.beam_history.BeamCandidate) in pieces; a finished
    one also carries its length penalty lp(|Y|) and normalised score log P / lp(|Y|)."""

    step: int
    prefix: list[str]  # the hypothesis it extends
    piece: str
    log_prob: float
    status: str  # beam_history.BEAM_STATUSES
    length: int | None = None  # |Y|: output pieces, EOS included (finished only)
    penalty: float | None = None
    score: float | None = None
    finalist: bool = False  # among the K most probable finished: the ones ranked by score
    best: bool = False  # the returned translation


@dataclass
class BeamInspection:
    beam_size: int
    alpha: float
    penalty_kind: str  # decoding.LENGTH_PENALTIES
    rows: list[BeamRow]  # step by step, each step's candidates best first
    best_ids: list[int]  # the returned output ids (no BOS/EOS)
    best_text: str
    score: float  # the returned score: log P / lp(|Y|)


@dataclass
class Inspection:
    """One sentence through the model. S and T count the source and decoder positions,
    padding included; the first `len(src_pieces)` / `len(tgt_in_pieces)` are real."""

    src_ids: list[int]  # source ids + EOS, as the model reads them (cut to MAX_PIECES)
    src_pieces: list[str]
    src_tokens: int  # pieces of the whole input + EOS (more than len(src_ids) when cut)
    out_ids: list[int]  # greedy output ids (+ EOS when produced): one per decoder position
    out_pieces: list[str]
    tgt_in_pieces: list[str]  # the decoder's input: BOS + out_ids[:-1] (teacher forcing)
    text: str  # the greedy translation
    padding: int  # PAD positions after source and decoder input (a padded batch)
    encoder_self: list[list[Matrix]]  # [layer][head] -> [S, S]
    decoder_self: list[list[Matrix]]  # [layer][head] -> [T, T]: zero above the diagonal
    cross: list[list[Matrix]]  # [layer][head] -> [T, S]
    # the masks (§3.2.3) of each kind: True where a query may not see a key (PAD, the future)
    encoder_self_masked: list[list[bool]]  # [S, S]
    decoder_self_masked: list[list[bool]]  # [T, T]
    cross_masked: list[list[bool]]  # [T, S]
    greedy: list[GreedyStep]
    greedy_log_prob: float  # of the greedy output: the sum of its steps'
    beam: BeamInspection | None
    positional: Matrix  # §3.5 PE [max(S, T), d_model]
    embedding_norms: list[float]  # ‖E(x)·√d_model‖ per real source position
    positional_norms: list[float]  # ‖PE(pos)‖ per real source position (√(d_model/2))
    shapes: list[tuple[str, list[int]]]  # (stage, tensor shape), in the order data flows


def _pieces(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    return tokenizer.ids_to_pieces(list(ids))


def _choices(tokenizer: Tokenizer, ids: list[int], values: list[float]) -> list[TokenChoice]:
    return [
        TokenChoice(i, p, v) for i, p, v in zip(ids, _pieces(tokenizer, ids), values, strict=True)
    ]


def _per_head(weights: list[torch.Tensor], rows: int, cols: int) -> list[list[Matrix]]:
    """[B=1, H, ≥rows, ≥cols] per layer -> [layer][head] lists of [rows, cols]."""
    return [w[0, :, :rows, :cols].float().tolist() for w in weights]


def _shapes(cfg: ModelConfig, s: int, t: int) -> list[tuple[str, list[int]]]:
    d, h = cfg.d_model, cfg.n_heads
    d_k = d // h
    return [
        ("source ids", [1, s]),
        ("source embeddings + positions (§3.4, §3.5)", [1, s, d]),
        ("Q, K, V split into heads (§3.2.2)", [1, h, s, d_k]),
        ("encoder self-attention weights softmax(QKᵀ/√d_k)", [1, h, s, s]),
        ("heads concatenated, then W^O", [1, s, d]),
        ("feed-forward inner layer (§3.3)", [1, s, cfg.d_ff]),
        ("encoder output (memory)", [1, s, d]),
        ("decoder input ids (BOS + output so far)", [1, t]),
        ("decoder masked self-attention weights", [1, h, t, t]),
        ("cross-attention weights (queries: decoder, keys: memory)", [1, h, t, s]),
        ("decoder output", [1, t, d]),
        ("logits (pre-softmax linear, §3.4)", [1, t, cfg.tgt_vocab_size]),
    ]


@torch.inference_mode()
def inspect_sentence(
    loaded: LoadedModel,
    text: str,
    *,
    beam_size: int = 4,
    top_k: int = 5,
    padding: int = 0,
    penalty_kind: str = LENGTH_PENALTIES[0],
) -> Inspection:
    """Translate `text` greedily (and with beam search when beam_size > 1) and look inside.

    The source is cut to MAX_PIECES pieces (+ EOS) and outputs to MAX_OUTPUT pieces, so
    every map stays drawable; `padding` PAD positions are appended to the source and the
    decoder input, as in a batch with a longer sentence (the masks give them zero weight).
    Raises ValueError for an empty text.
    """
    model, tokenizers = loaded.model, loaded.tokenizers
    model.eval()
    cfg = model.cfg
    device = loaded.device
    [source] = encode_inputs(tokenizers, [text], min(cfg.max_len, MAX_PIECES + 1))
    if not source.ids:
        raise ValueError("nothing to inspect: the text is empty")
    src = torch.tensor([source.ids], device=device)  # [1, S]
    bound = min(
        int(output_bounds(torch.tensor([len(source.ids)]), MAX_LEN_A, MAX_LEN_B, cfg.max_len - 1)),
        MAX_OUTPUT,
    )
    # a·|src| + b with a = 0: one sentence, so its bound is passed as b
    [greedy] = greedy_decode(model, src, max_len_a=0.0, max_len_b=bound)
    out_ids = greedy.tokens + ([cfg.eos_id] if greedy.ended else [])  # [T]
    tgt_in = [cfg.bos_id, *out_ids[:-1]]
    s, t = len(source.ids), len(out_ids)
    pads = [cfg.pad_id] * padding
    src_padded = torch.tensor([source.ids + pads], device=device)  # [1, S + padding]
    tgt_padded = torch.tensor([tgt_in + pads], device=device)  # [1, T + padding]
    logits, maps = model.attention_maps(src_padded, tgt_padded)  # logits [1, T + padding, V]
    src_keys = padding_mask(src_padded, cfg.pad_id)[0, 0, 0]  # [S]: True = may attend
    decoder_keys = decoder_self_mask(tgt_padded, cfg.pad_id)[0, 0]  # [T, T]

    log_probs = output_log_probs(logits[0, :t], cfg)  # [T, V]: the greedy steps' distributions
    top_values, top_ids = log_probs.topk(min(top_k, log_probs.size(-1)), dim=-1)  # [T, k]
    chosen = log_probs.gather(1, torch.tensor(out_ids, device=device)[:, None])[:, 0]  # [T]
    greedy_steps = [
        GreedyStep(
            pos,
            _choices(tokenizers.tgt, [out_ids[pos]], [float(chosen[pos].exp())])[0],
            _choices(tokenizers.tgt, ids, [float(v) for v in values.exp()]),
        )
        for pos, (ids, values) in enumerate(zip(top_ids.tolist(), top_values, strict=True))
    ]

    table = model.positions.table  # [max_len, D]
    if cfg.sinusoid_layout == "sines_then_cosines":  # shown as the paper lays it: sin/cos pairs
        half = (cfg.d_model + 1) // 2
        table = table[:, [j for i in range(half) for j in (i, half + i) if j < cfg.d_model]]
    embedded = model.src_embed(src)[0]  # [S, D], scaled by √d_model
    return Inspection(
        src_ids=list(source.ids),
        src_pieces=_pieces(tokenizers.src, source.ids),
        src_tokens=source.src_tokens,
        out_ids=out_ids,
        out_pieces=_pieces(tokenizers.tgt, out_ids),
        tgt_in_pieces=_pieces(tokenizers.tgt, tgt_in),
        text=tokenizers.tgt.decode(greedy.tokens),
        padding=padding,
        encoder_self=_per_head(maps.encoder_self, s + padding, s + padding),
        decoder_self=_per_head(maps.decoder_self, t + padding, t + padding),
        cross=_per_head(maps.cross, t + padding, s + padding),
        encoder_self_masked=(~src_keys).expand(s + padding, -1).tolist(),
        decoder_self_masked=(~decoder_keys).tolist(),
        cross_masked=(~src_keys).expand(t + padding, -1).tolist(),
        greedy=greedy_steps,
        greedy_log_prob=float(chosen.sum()),
        beam=(_beam(loaded, src, beam_size, bound, penalty_kind) if beam_size > 1 else None),
        positional=table[: max(s, t) + padding].tolist(),
        embedding_norms=embedded.norm(dim=-1).tolist(),
        positional_norms=table[:s].norm(dim=-1).tolist(),
        shapes=_shapes(cfg, s + padding, t + padding),
    )


def _beam(
    loaded: LoadedModel,
    src: torch.Tensor,
    beam_size: int,
    bound: int,
    penalty_kind: str,
) -> BeamInspection:
    """Beam search with its history, in pieces; the finished candidates are ranked as beam
    search ranks them (`decoding.pick_finished`), which marks the returned translation."""
    tgt = loaded.tokenizers.tgt
    [result] = beam_search(
        loaded.model,
        src,
        beam_size=beam_size,
        length_penalty_alpha=LENGTH_PENALTY_ALPHA,
        length_penalty_kind=penalty_kind,
        max_len_a=0.0,
        max_len_b=bound,
        history=True,
    )

    def lp(length: int) -> float:
        return float(length_penalty(length, LENGTH_PENALTY_ALPHA, penalty_kind))

    rows = []
    for step in result.history or []:
        for c in step.candidates:
            piece = _pieces(tgt, [c.token])[0]
            row = BeamRow(step.step, _pieces(tgt, c.prefix), piece, c.log_prob, c.status)
            if c.status == "finished":
                row.length = len(c.prefix) + 1
                row.penalty = lp(row.length)
                row.score = c.log_prob / row.penalty
            rows.append(row)
    finished = [r for r in rows if r.status == "finished"]
    if finished:
        log_probs = [r.log_prob for r in finished]
        ranked = sorted(range(len(finished)), key=log_probs.__getitem__, reverse=True)
        for j in ranked[:beam_size]:
            finished[j].finalist = True
        lengths = [r.length or 0 for r in finished]
        finished[pick_finished(log_probs, lengths, beam_size, lp)].best = True
    return BeamInspection(
        beam_size,
        LENGTH_PENALTY_ALPHA,
        penalty_kind,
        rows,
        result.tokens,
        tgt.decode(result.tokens),
        result.score,
    )


@torch.inference_mode()
def nearest_neighbours(
    loaded: LoadedModel, token_id: int, side: str = "tgt", n: int = 8
) -> list[TokenChoice]:
    """The `n` vocabulary entries whose embeddings (§3.4; one matrix for both sides and the
    pre-softmax layer when the vocabulary is shared) are closest to `token_id`'s by cosine
    similarity; the reserved tokens and the token itself are left out."""
    model, cfg = loaded.model, loaded.model.cfg
    embed = model.src_embed if side == "src" else model.tgt_embed
    tokenizer = loaded.tokenizers.src if side == "src" else loaded.tokenizers.tgt
    matrix = embed.lookup.weight.float()  # [V, D]
    vectors = torch.nn.functional.normalize(matrix, dim=-1)
    similarity = vectors @ vectors[token_id]  # [V]
    similarity[[cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id, token_id]] = float("-inf")
    similarity[tokenizer.vocab_size :] = float("-inf")  # rows no piece maps to
    values, ids = similarity.topk(min(n, max(0, tokenizer.vocab_size - 5)))
    return _choices(tokenizer, ids.tolist(), values.tolist())
