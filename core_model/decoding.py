"""Inference (§6.1 uses beam 4 and length penalty α=0.6): batched greedy and beam search.

Incremental decoding: each step feeds only the newest token; the decoder's self-attention
keys/values grow in a cache and cross-attention keys/values are projected from the encoder
memory once per sentence. `use_cache=False` re-runs the decoder over the whole prefix each
step — the slow reference that a test checks the cache against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core_model.transformer import Transformer


@dataclass
class DecodeResult:
    tokens: list[int]  # output ids without BOS/EOS/PAD
    score: float  # log-probability (beam: length-normalised)
    # [T_out, S_real]: a row per output token (plus the EOS step), last layer, mean of heads
    attention: torch.Tensor | None = None


def _max_lengths(src_ids: torch.Tensor, pad_id: int, a: float, b: int, cap: int) -> torch.Tensor:
    """Output length bound per sentence: a·|src| + b, capped by the positional table."""
    src_len = (src_ids != pad_id).sum(dim=1)
    return (src_len.float() * a + b).ceil().long().clamp(min=1, max=cap)  # [B]


def _step_log_probs(
    model: Transformer,
    ys: torch.Tensor,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    cache,
    need_attention: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the next token [N, V] (and its cross-attention [N, S]).

    PAD and BOS are never outputs: they get probability zero.
    """
    step_input = ys[:, -1:] if cache is not None else ys
    logits, weights = model.decode(step_input, memory, src_mask, cache, need_attention)
    logits = logits[:, -1].float()
    logits[:, [model.cfg.pad_id, model.cfg.bos_id]] = float("-inf")
    last_weights = weights[:, -1] if weights is not None else None
    return logits.log_softmax(dim=-1), last_weights


def _collect(
    model: Transformer,
    ys: torch.Tensor,
    scores: torch.Tensor,
    attention: list[torch.Tensor] | None,
    src_ids: torch.Tensor,
) -> list[DecodeResult]:
    cfg = model.cfg
    att = torch.stack(attention, dim=1) if attention else None  # [N, T_out, S]
    results = []
    for i, row in enumerate(ys[:, 1:].tolist()):
        n = len(row)
        for j, tok in enumerate(row):
            if tok in (cfg.eos_id, cfg.pad_id):
                n = j
                break
        src_len = int((src_ids[i] != cfg.pad_id).sum())
        weights = att[i, : n + 1, :src_len].cpu() if att is not None else None
        results.append(DecodeResult(row[:n], float(scores[i]), weights))
    return results


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    need_attention: bool = False,
    use_cache: bool = True,
    fixed_length: int | None = None,
) -> list[DecodeResult]:
    """Pick the most probable token at each step, for a whole batch at once.

    src_ids [B, S] padded with pad_id. `fixed_length` forbids EOS and decodes exactly that
    many tokens (benchmarks compare equal work).
    """
    cfg = model.cfg
    batch = src_ids.size(0)
    memory, src_mask = model.encode(src_ids)
    max_lens = _max_lengths(src_ids, cfg.pad_id, max_len_a, max_len_b, cfg.max_len - 1)
    if fixed_length is not None:
        max_lens = torch.full_like(max_lens, fixed_length)
    ys = torch.full((batch, 1), cfg.bos_id, dtype=torch.long, device=src_ids.device)
    scores = torch.zeros(batch, device=src_ids.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    cache = model.new_cache() if use_cache else None
    attention: list[torch.Tensor] | None = [] if need_attention else None

    for step in range(int(max_lens.max())):
        log_probs, weights = _step_log_probs(model, ys, memory, src_mask, cache, need_attention)
        if fixed_length is not None:
            log_probs[:, cfg.eos_id] = float("-inf")
        best, token = log_probs.max(dim=-1)  # [B]
        token = token.masked_fill(finished, cfg.pad_id)
        scores += best.masked_fill(finished, 0.0)
        ys = torch.cat([ys, token[:, None]], dim=1)
        if attention is not None:
            attention.append(weights)
        finished |= (token == cfg.eos_id) | (step + 1 >= max_lens)
        if bool(finished.all()):
            break
    return _collect(model, ys, scores, attention, src_ids)


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α: without it beam search prefers short outputs."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = 4,
    length_penalty_alpha: float = 0.6,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    need_attention: bool = False,
    use_cache: bool = True,
    fixed_length: int | None = None,
) -> list[DecodeResult]:
    """Keep the `beam_size` best prefixes per sentence; all sentences × beams in one batch.

    A finished hypothesis stays in its beam and extends only with PAD at no cost, so the
    beams of a batch stay rectangular. The winner is the best length-normalised score.
    """
    cfg = model.cfg
    batch, k = src_ids.size(0), beam_size
    device = src_ids.device
    memory, src_mask = model.encode(src_ids)
    memory = memory.repeat_interleave(k, dim=0)  # [B*K, S, D]
    src_mask = src_mask.repeat_interleave(k, dim=0)
    max_lens = _max_lengths(src_ids, cfg.pad_id, max_len_a, max_len_b, cfg.max_len - 1)
    if fixed_length is not None:
        max_lens = torch.full_like(max_lens, fixed_length)
    max_lens = max_lens.repeat_interleave(k)  # [B*K]

    ys = torch.full((batch * k, 1), cfg.bos_id, dtype=torch.long, device=device)
    scores = torch.zeros(batch, k, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    finished = torch.zeros(batch * k, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * k, dtype=torch.long, device=device)
    cache = model.new_cache() if use_cache else None
    attention: list[torch.Tensor] | None = [] if need_attention else None
    base = (torch.arange(batch, device=device) * k)[:, None]  # [B, 1]

    for step in range(int(max_lens.max())):
        log_probs, weights = _step_log_probs(model, ys, memory, src_mask, cache, need_attention)
        vocab = log_probs.size(-1)
        if fixed_length is not None:
            log_probs[:, cfg.eos_id] = float("-inf")
        # A finished hypothesis may only append PAD, at zero cost.
        log_probs[finished] = float("-inf")
        log_probs[finished, cfg.pad_id] = 0.0
        candidates = (scores.view(-1, 1) + log_probs).view(batch, k * vocab)
        scores, flat_index = candidates.topk(k, dim=1)  # [B, K]
        origin = (base + flat_index // vocab).view(-1)  # [B*K] rows that survive
        token = (flat_index % vocab).view(-1)
        was_finished = finished[origin]
        lengths = lengths[origin] + (~was_finished).long()
        finished = was_finished | (token == cfg.eos_id) | (step + 1 >= max_lens)
        ys = torch.cat([ys[origin], token[:, None]], dim=1)
        if cache is not None:
            cache.reorder(origin)
        if attention is not None:
            attention = [a[origin] for a in attention] + [weights[origin]]
        if bool(finished.all()):
            break

    normalised = scores.view(-1) / length_penalty(lengths, length_penalty_alpha)
    best = base.view(-1) + normalised.view(batch, k).argmax(dim=1)  # [B]
    att = [a[best] for a in attention] if attention is not None else None
    return _collect(model, ys[best], normalised[best], att, src_ids)
