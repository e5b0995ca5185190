"""Inference (§6.1 uses beam 4 and length penalty α=0.6; ours α=1.0): batched greedy and beam
search.

Incremental decoding: each step feeds only the newest token; the decoder's self-attention
keys/values are written into a preallocated cache and cross-attention keys/values are
projected from the encoder memory once per sentence. `use_cache=False` re-runs the decoder
over the whole prefix each step — the slow reference that a test checks the cache against.

A sentence leaves the batch as soon as it is finished, so a batch costs what its unfinished
sentences cost, and the vocabulary-sized work of a step is one log-softmax and one top-k per
row. Beam search is the algorithm of the NMT toolkits (as CTranslate2 runs it, so a model
exported there decodes the same): each step ranks the 2K best continuations of a sentence's K
hypotheses; those among the first K that end in EOS are set aside as finished and the K best
others carry on. A sentence is done once its best continuation has ended and K hypotheses
have finished (or at its length bound); its K most probable finished hypotheses are then
ranked by log-probability / lp(Y), the length penalty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core_model.beam_history import BeamStep, record_step
from core_model.retrieval import RetrievalMemory, retrieve
from core_model.transformer import ModelConfig, Transformer
from core_model.transformer.decoder import DecoderCache


@dataclass
class DecodeResult:
    tokens: list[int]  # output ids without BOS/EOS/PAD
    score: float  # log-probability (beam: length-normalised)
    # [T_out, S_real]: a row per output token (plus the EOS step), last layer, mean of heads
    attention: torch.Tensor | None = None
    ended: bool = True  # produced EOS (False: stopped by the length bound)
    # beam search with `history=True`: the sentence's candidates, step by step
    history: list[BeamStep] | None = None


def output_bounds(src_lengths: torch.Tensor, a: float, b: int, cap: int) -> torch.Tensor:
    """Most output tokens per sentence: ceil(a·|src| + b), at least 1, capped by the
    positional table. src_lengths [B] count the source ids with EOS."""
    return (src_lengths.float() * a + b).ceil().long().clamp(min=1, max=cap)  # [B]


def _max_lengths(src_ids: torch.Tensor, cfg: ModelConfig, a: float, b: int) -> torch.Tensor:
    return output_bounds((src_ids != cfg.pad_id).sum(dim=1), a, b, cfg.max_len - 1)  # [B]


def _next_token_log_probs(
    model: Transformer,
    ys: torch.Tensor,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    cache: DecoderCache | None,
    need_attention: bool,
    forbid_eos: bool,
    retrieval: RetrievalMemory | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the next token [N, V] (`output_log_probs`, interpolated with
    the datastore's votes when `retrieval` is given: kNN-MT), and its cross-attention [N, S]."""
    step_input = ys[:, -1:] if cache is not None else ys
    hidden, weights = model.decode_states(step_input, memory, src_mask, cache, need_attention)
    hidden = hidden[:, -1]  # [N, D]
    log_probs = output_log_probs(model.generator(hidden), model.cfg, forbid_eos)
    if retrieval is not None:
        eos = model.cfg.eos_id if forbid_eos else None
        log_probs = retrieve(retrieval, hidden, log_probs, forbid_eos_id=eos)
    return log_probs, (weights[:, -1] if weights is not None else None)


def output_log_probs(
    logits: torch.Tensor, cfg: ModelConfig, forbid_eos: bool = False
) -> torch.Tensor:
    """The decoder's next-token distribution: logits [..., V] -> log-probabilities [..., V] in
    fp32, PAD and BOS (and EOS when `forbid_eos`) at probability zero. Overwrites `logits`
    when they are fp32 already."""
    logits = logits.float()
    banned = [cfg.pad_id, cfg.bos_id] + ([cfg.eos_id] if forbid_eos else [])
    logits[..., banned] = float("-inf")
    return logits.log_softmax(dim=-1)


def _top_k(x: torch.Tensor, k: int, block: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """x.topk(k) of the rows of x [N, V] -> (values [N, k], indices [N, k]), best first.

    Why not `topk`: on a CPU, top-k (and max with indices) over a vocabulary-sized row is a
    scalar loop, ~15x slower than the vectorised `amax`. The k best values of a row lie in
    the k blocks of `block` columns with the best maxima, so only those are searched.
    """
    n, v = x.shape
    whole = v - v % block
    if whole < block * k:
        return x.topk(min(k, v), dim=-1)
    blocks = x[:, :whole].view(n, whole // block, block)  # [N, V/b, b]
    best = blocks.amax(dim=-1).topk(k, dim=-1).indices  # [N, k] blocks
    offsets = torch.arange(block, device=x.device)
    values = blocks.gather(1, best[:, :, None].expand(-1, -1, block)).view(n, -1)  # [N, k·b]
    columns = (best[:, :, None] * block + offsets).view(n, -1)
    if whole < v:  # the columns past the last whole block are always searched
        values = torch.cat([values, x[:, whole:]], dim=1)
        rest = torch.arange(whole, v, device=x.device).expand(n, -1)
        columns = torch.cat([columns, rest], dim=1)
    top, position = values.topk(k, dim=-1)
    return top, columns.gather(1, position)


def _result(
    row: list[int],
    score: float,
    attention: torch.Tensor | None,
    src_row: torch.Tensor,
    cfg: ModelConfig,
) -> DecodeResult:
    """One finished hypothesis: `row` its output ids (EOS last if it produced one),
    attention [len(row), S] a row per output step."""
    tokens = row[:-1] if row and row[-1] == cfg.eos_id else row
    weights = None
    if attention is not None:
        src_len = int((src_row != cfg.pad_id).sum())
        weights = attention[: len(row), :src_len].cpu()
    return DecodeResult(tokens, score, weights, ended=len(tokens) < len(row))


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    need_attention: bool = False,
    use_cache: bool = True,
    fixed_length: int | None = None,
    retrieval: RetrievalMemory | None = None,
) -> list[DecodeResult]:
    """Pick the most probable token at each step, for a whole batch at once.

    src_ids [B, S] padded with pad_id. `fixed_length` forbids EOS and decodes exactly that
    many tokens (benchmarks compare equal work). `retrieval`: kNN-MT's datastore.
    """
    cfg = model.cfg
    batch = src_ids.size(0)
    memory, src_mask = model.encode(src_ids)  # [B, S, D], [B, 1, 1, S]
    max_lens = _max_lengths(src_ids, cfg, max_len_a, max_len_b)
    if fixed_length is not None:
        max_lens = torch.full_like(max_lens, fixed_length)
    steps = int(max_lens.max())
    cache = model.new_cache(steps) if use_cache else None
    sentence = torch.arange(batch, device=src_ids.device)  # [N] input sentence of each row
    ys = torch.full((batch, 1), cfg.bos_id, dtype=torch.long, device=src_ids.device)  # [N, t+1]
    scores = torch.zeros(batch, device=src_ids.device)  # [N]
    attention = memory.new_zeros(batch, 0, src_ids.size(1)) if need_attention else None  # [N,t,S]
    results: list[DecodeResult] = [DecodeResult([], 0.0)] * batch

    for step in range(steps):
        log_probs, weights = _next_token_log_probs(
            model, ys, memory, src_mask, cache, need_attention, fixed_length is not None, retrieval
        )
        best, token = (t[:, 0] for t in _top_k(log_probs, 1))  # [N]
        scores += best
        ys = torch.cat([ys, token[:, None]], dim=1)
        if attention is not None:
            attention = torch.cat([attention, weights[:, None].float()], dim=1)
        done = (token == cfg.eos_id) | (step + 1 >= max_lens[sentence])  # [N]
        if not bool(done.any()):
            continue
        for i, row in zip(done.nonzero()[:, 0].tolist(), ys[done, 1:].tolist(), strict=True):
            s = int(sentence[i])
            att = attention[i] if attention is not None else None
            results[s] = _result(row, float(scores[i]), att, src_ids[s], cfg)
        keep = (~done).nonzero()[:, 0]  # [N'] rows still decoding
        if keep.numel() == 0:
            break
        sentence, ys, scores = sentence[keep], ys[keep], scores[keep]
        memory, src_mask = memory[keep], src_mask[keep]
        if attention is not None:
            attention = attention[keep]
        if cache is not None:
            cache.reorder(keep, keep)
    return results


# How beam search normalises a finished hypothesis's log-probability by its length (without
# it, beam search prefers short outputs); the first is the default.
#   gnmt   lp(Y) = ((5 + |Y|) / 6)^α   GNMT's, which the paper uses (§6.1, α = 0.6)
#   power  lp(Y) = |Y|^α               fairseq's and CTranslate2's
LENGTH_PENALTIES = ("gnmt", "power")
# α of the length penalty. The paper's 0.6 let beam 4 shorten the small models of CPU budgets'
# translations (output/reference length 0.85 on Tatoeba zh→en where greedy gave 0.995); 1.0
# scored better on validation at 1.1M tokens (greedy → beam 4, α 0.6 / 1.0 / 1.5, gnmt):
# Tatoeba 13.66 → 14.16 / 14.46 / 14.45, Multi30k 22.46 → 23.84 / 23.90 / 23.40.
LENGTH_PENALTY_ALPHA = 1.0


def length_penalty(length: torch.Tensor | int, alpha: float, kind: str = "gnmt") -> Any:
    """lp(Y) of LENGTH_PENALTIES; |Y| counts the output tokens, EOS included when produced."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return length**alpha
    raise ValueError(
        f"unknown length penalty {kind!r}; choose one of {', '.join(LENGTH_PENALTIES)}"
    )


def pick_finished(
    log_probs: Sequence[float], lengths: Sequence[int], k: int, lp: Callable[[int], float]
) -> int:
    """Beam search's winner among a sentence's finished hypotheses, given in the order they
    finished: of the k most probable, the one with the best log-probability / lp(length).
    Returns its index."""
    k_best = sorted(range(len(log_probs)), key=log_probs.__getitem__, reverse=True)[:k]
    return max(k_best, key=lambda j: log_probs[j] / lp(lengths[j]))


@dataclass
class _Finished:
    """A hypothesis set aside: its ids (EOS last if produced) and summed log-probability."""

    row: list[int]
    log_prob: float
    attention: torch.Tensor | None  # [len(row), S]


def _in_place_order(parents: torch.Tensor) -> torch.Tensor:
    """Which of a sentence's K continuing hypotheses goes to which beam slot, so that few
    caches are copied: a hypothesis's first child stays in its slot, further children take
    the slots of hypotheses that had none (only those rows move).

    parents [n, K]: the slot each continuing hypothesis extends, best first. Returns [n, K]:
    for each slot, the index (into the best-first order) of the hypothesis placed there.
    """
    n, k = parents.shape
    slots = torch.arange(k, device=parents.device)
    siblings = parents[:, :, None] == parents[:, None, :]  # [n, K, K]
    earlier = torch.ones(k, k, dtype=torch.bool, device=parents.device).tril(-1)
    first = ~(siblings & earlier).any(dim=-1)  # [n, K]: first child of its parent
    kept = ((parents[:, :, None] == slots) & first[:, :, None]).any(dim=1)  # [n, K] slots
    free = torch.sort(kept.to(torch.uint8), dim=1, stable=True).indices  # free slots first
    nth_other = ((~first).cumsum(dim=1) - 1).clamp(min=0)
    slot = torch.where(first, parents, free.gather(1, nth_other))  # [n, K] slot of each
    return torch.empty_like(slot).scatter_(1, slot, slots.expand(n, k))


def _set_aside(
    finished: list[list[_Finished]],
    ends: torch.Tensor,
    sentence: torch.Tensor,
    ys: torch.Tensor,
    cand_rows: torch.Tensor,
    cand_tokens: torch.Tensor,
    cand_scores: torch.Tensor,
    attention: torch.Tensor | None,
    weights: torch.Tensor | None,
) -> None:
    """Beam search's candidates that end (``ends`` [n, 2K]: EOS, or the length bound) join
    their input sentence's finished hypotheses, with their attention rows when recorded."""
    where = ends.nonzero()  # [F, 2]
    rows = cand_rows[where[:, 0], where[:, 1]]
    outputs = torch.cat([ys[rows, 1:], cand_tokens[where[:, 0], where[:, 1], None]], dim=1)
    logp = cand_scores[where[:, 0], where[:, 1]].tolist()
    for f, (s, row) in enumerate(zip(where[:, 0].tolist(), outputs.tolist(), strict=True)):
        att = None
        if attention is not None and weights is not None:
            att = torch.cat([attention[rows[f]], weights[rows[f], None].float()])
        finished[int(sentence[s])].append(_Finished(row, logp[f], att))


def _winner(
    hyps: list[_Finished], k: int, lp: Callable[[int], float], src: torch.Tensor, cfg: ModelConfig
) -> DecodeResult:
    """A finished sentence's result: its best hypothesis by ``pick_finished``."""
    best = hyps[pick_finished([h.log_prob for h in hyps], [len(h.row) for h in hyps], k, lp)]
    return _result(best.row, best.log_prob / lp(len(best.row)), best.attention, src, cfg)


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = 4,
    length_penalty_alpha: float = LENGTH_PENALTY_ALPHA,
    length_penalty_kind: str = LENGTH_PENALTIES[0],
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    need_attention: bool = False,
    use_cache: bool = True,
    fixed_length: int | None = None,
    history: bool = False,
    retrieval: RetrievalMemory | None = None,
) -> list[DecodeResult]:
    """Keep the `beam_size` best prefixes per sentence; all sentences × beams in one batch.

    The first step runs one row per sentence (all its beams would be equal); the survivors
    then fan out to K rows each. The winner is the one of the K most probable finished
    hypotheses with the best log-probability / lp(Y), lp one of LENGTH_PENALTIES
    (`length_penalty_kind`). `history` records every step's candidates in the results
    (`DecodeResult.history`), to show how the search went; it costs nothing when off.
    `retrieval`: kNN-MT's datastore, interpolated at every step of every hypothesis.
    """
    cfg = model.cfg
    batch, k = src_ids.size(0), beam_size
    length_penalty(1, length_penalty_alpha, length_penalty_kind)  # a ValueError if unknown

    def lp(length: int) -> float:
        return float(length_penalty(length, length_penalty_alpha, length_penalty_kind))

    device = src_ids.device
    memory, src_mask = model.encode(src_ids)  # [n, S, D], [n, 1, 1, S]: one per sentence
    max_lens = _max_lengths(src_ids, cfg, max_len_a, max_len_b)
    if fixed_length is not None:
        max_lens = torch.full_like(max_lens, fixed_length)
    steps = int(max_lens.max())
    cache = model.new_cache(steps) if use_cache else None
    sentence = torch.arange(batch, device=device)  # [n] input sentence of each running one
    ys = torch.full((batch, 1), cfg.bos_id, dtype=torch.long, device=device)  # [N, t+1]
    scores = torch.zeros(batch, 1, device=device)  # [n, beams]: N = n · beams rows
    n_finished = torch.zeros(batch, dtype=torch.long, device=device)  # [n]
    best_ended = torch.zeros(batch, dtype=torch.bool, device=device)  # [n] best candidate ended
    attention = memory.new_zeros(batch, 0, src_ids.size(1)) if need_attention else None  # [N,t,S]
    finished: list[list[_Finished]] = [[] for _ in range(batch)]
    results: list[DecodeResult] = [DecodeResult([], 0.0)] * batch
    steps_of: list[list[BeamStep]] | None = [[] for _ in range(batch)] if history else None

    for step in range(steps):
        n, beams = scores.shape
        # With the cache, the beams of a sentence share its cross-attention keys/values (the
        # attention groups their queries); the reference path repeats the memory per beam.
        per_row = cache is None and beams > 1
        log_probs, weights = _next_token_log_probs(
            model,
            ys,
            memory.repeat_interleave(beams, dim=0) if per_row else memory,
            src_mask.repeat_interleave(beams, dim=0) if per_row else src_mask,
            cache,
            need_attention,
            fixed_length is not None,
            retrieval,
        )
        width = min(2 * k, log_probs.size(-1))
        # A sentence's 2K best continuations are among the 2K best tokens of each hypothesis.
        top_log_probs, top_tokens = _top_k(log_probs, width)  # [N, 2K]
        candidates = (scores.view(-1, 1) + top_log_probs).view(n, beams * width)
        cand_scores, flat = candidates.topk(width, dim=1)  # [n, 2K], best first
        cand_rows = flat // width + beams * torch.arange(n, device=device)[:, None]  # [n, 2K]
        cand_tokens = top_tokens.view(n, -1).gather(1, flat)  # [n, 2K]
        is_eos = cand_tokens == cfg.eos_id
        last = step + 1 >= max_lens[sentence]  # [n]
        # Among the first K candidates, those that end (EOS, or the length bound) finish.
        ends = is_eos | last[:, None]
        ends[:, k:] = False
        if bool(ends.any()):
            _set_aside(
                finished,
                ends,
                sentence,
                ys,
                cand_rows,
                cand_tokens,
                cand_scores,
                attention,
                weights,
            )
            n_finished += ends.sum(dim=1)
            best_ended |= ends[:, 0]
        # The K best candidates that do not end in EOS carry on (at most K of 2K are EOS).
        carry = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :k]  # [n, K]
        fan_out = beams != k  # the first step: each sentence's row becomes K
        if not fan_out:
            carry = carry.gather(1, _in_place_order((flat // width).gather(1, carry)))
        # Done once the best continuation has ended (no hypothesis left is more probable)
        # and K have finished.
        done = last | (best_ended & (n_finished >= k))  # [n]
        if steps_of is not None:
            record_step(
                steps_of, step, sentence, ys, cand_rows, cand_tokens, cand_scores, ends, carry, done
            )
        for s in done.nonzero()[:, 0].tolist():
            i = int(sentence[s])
            results[i] = _winner(finished[i], k, lp, src_ids[i], cfg)
            results[i].history = steps_of[i] if steps_of is not None else None
        keep = (~done).nonzero()[:, 0]  # [n'] sentences still decoding
        if keep.numel() == 0:
            break
        origin = cand_rows.gather(1, carry)[keep].view(-1)  # [n'·K] rows the survivors extend
        ys = torch.cat([ys[origin], cand_tokens.gather(1, carry)[keep].view(-1, 1)], dim=1)
        scores = cand_scores.gather(1, carry)[keep]  # [n', K]
        if attention is not None:
            attention = torch.cat([attention[origin], weights[origin, None].float()], dim=1)
        all_stay = keep.numel() == n
        if not all_stay:  # finished sentences leave
            sentence, n_finished, best_ended = sentence[keep], n_finished[keep], best_ended[keep]
            memory, src_mask = memory[keep], src_mask[keep]
        if cache is not None:
            _follow_survivors(cache, origin, None if all_stay else keep, fan_out)
    return results


def _follow_survivors(
    cache: DecoderCache, origin: torch.Tensor, keep: torch.Tensor | None, fan_out: bool
) -> None:
    """The cache's rows follow the hypotheses that carry on (``origin``: the row each extends;
    ``keep``: the sentences still decoding, None if all are). When no sentence left and no
    beam fanned out, only the rows whose hypothesis moved are copied, in place."""
    if keep is None and not fan_out:
        moved = origin != torch.arange(origin.numel(), device=origin.device)
        cache.move(moved.nonzero()[:, 0], origin[moved])
    else:
        cache.reorder(origin, keep)
