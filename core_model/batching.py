"""Turn sentence pairs into padded id tensors, grouped into length buckets by token count.

Why buckets: padding is wasted compute. Sorting pairs by length and cutting batches at a token
budget (not a sentence count) keeps every batch about equally expensive, as in §5.1 of the paper
("sentence pairs were batched together by approximate sequence length ... ~25000 tokens").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core_model.special_tokens import PAD_ID, RESERVED, SpecialIds
from core_model.tokenizer import TokenizerPair


@dataclass(frozen=True)
class Example:
    """One encoded pair: src ends with EOS; tgt has neither BOS nor EOS (added at collate time)."""

    src: tuple[int, ...]
    tgt: tuple[int, ...]


def encode_source(tokenizers: TokenizerPair, text: str, max_len: int) -> list[int]:
    """Source ids + EOS, truncated so the sequence fits `max_len` positions.

    Training and translation both call this, so they see identical inputs.
    """
    ids = tokenizers.src.encode(text)[: max(0, max_len - 1)]
    return [*ids, tokenizers.specials.eos]


def encode_pairs(
    pairs: Sequence[tuple[str, str]], tokenizers: TokenizerPair, max_len: int
) -> list[Example]:
    """Encode pairs, dropping those with an empty side (they teach nothing)."""
    out = []
    for src_text, tgt_text in pairs:
        tgt = tokenizers.tgt.encode(tgt_text)[: max(1, max_len - 1)]  # room for BOS / EOS
        src = encode_source(tokenizers, src_text, max_len)
        if len(src) > 1 and tgt:
            out.append(Example(tuple(src), tuple(tgt)))
    return out


def example_cost(ex: Example) -> int:
    """Padded positions the example occupies: the longer of src and tgt(+1 for BOS/EOS)."""
    return max(len(ex.src), len(ex.tgt) + 1)


def make_batches(
    examples: Sequence[Example],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    max_sentences: int | None = None,
    only: Sequence[int] | None = None,
) -> list[list[int]]:
    """Length-bucketed batches of example indices, each with ≤ `max_tokens` padded tokens.

    Sorting uses a seeded random tie-break, so each epoch (seed) makes different but reproducible
    batches of similar-length sentences; the batch order is shuffled too. A single example longer
    than `max_tokens` still gets a batch of its own. `only`: batch these indices alone (the rest
    of an epoch whose batch size changed).
    """
    rng = random.Random(seed)
    order = list(range(len(examples))) if only is None else list(only)
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i].src), len(examples[i].tgt)))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        cost = example_cost(examples[i])
        new_longest = max(longest, cost)
        too_many = max_sentences is not None and len(current) >= max_sentences
        if current and (new_longest * (len(current) + 1) > max_tokens or too_many):
            batches.append(current)
            current, new_longest = [], cost
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def rebatch(
    examples: Sequence[Example], rest: Sequence[Sequence[int]], max_tokens: int, seed: int
) -> list[list[int]]:
    """The batches `rest` (what an epoch has not trained yet) made again at `max_tokens`,
    every pair as often as in `rest`. A tiny corpus's epoch repeats its pairs (several passes):
    each pass's remainder is batched on its own, so a pair's copies never share an update."""
    passes: list[list[int]] = []
    seen: dict[int, int] = {}
    for i in (i for batch in rest for i in batch):
        copy = seen[i] = seen.get(i, -1) + 1
        if copy == len(passes):
            passes.append([])
        passes[copy].append(i)
    return [
        batch
        for n, pairs in enumerate(passes)
        for batch in make_batches(examples, max_tokens, seed=seed + n, only=pairs)
    ]


def rank_share(batch: Sequence[int], shares: Sequence[float], rank: int) -> list[int]:
    """This rank's part of an update's batch for data-parallel training: a run of its
    length-sorted pairs, `shares[rank]` of them (the shares sum to 1). So every rank of a step
    takes pairs of one length and the ranks together train what one process would, and a rank
    that trains faster can take more of each update (`pace.RankShares`). Every rank takes at
    least one pair (DDP's all-reduce needs a backward on each): a batch with fewer pairs than
    ranks gives some ranks the same pair."""
    n, world = len(batch), len(shares)
    if world <= 1:
        return list(batch)
    if n < world:
        return [batch[rank % n]]
    bounds, total = [0], 0.0
    for r, share in enumerate(shares[:-1]):
        total += share
        # at least one pair for this rank and for each one after it
        bounds.append(min(max(round(total * n), bounds[-1] + 1), n - (world - 1 - r)))
    bounds.append(n)
    return list(batch[bounds[rank] : bounds[rank + 1]])


@dataclass
class Batch:
    """Padded tensors for teacher forcing."""

    src: torch.Tensor  # [B, S] source ids + EOS, PAD-padded
    tgt_in: torch.Tensor  # [B, T] BOS + target
    tgt_out: torch.Tensor  # [B, T] target + EOS
    n_tokens: int  # real (non-pad) target tokens = loss denominator
    n_src_tokens: int

    def to(self, device: torch.device | str) -> Batch:
        nb = torch.device(device).type == "cuda"
        return Batch(
            self.src.to(device, non_blocking=nb),
            self.tgt_in.to(device, non_blocking=nb),
            self.tgt_out.to(device, non_blocking=nb),
            self.n_tokens,
            self.n_src_tokens,
        )


def collate(
    examples: Sequence[Example],
    indices: Sequence[int],
    specials: SpecialIds = RESERVED,
    multiple: int = 1,
) -> Batch:
    """Pad a batch: decoder input = BOS + target, decoder output = target + EOS (`specials`:
    the model's reserved ids, `ModelConfig.specials`). `multiple`: both lengths are rounded
    up to a multiple of it, so that a run meets few distinct shapes (`precision.shape_multiple`);
    the extra positions are padding, masked like any other."""
    chosen = [examples[i] for i in indices]
    b, s, t = padded_shape(examples, indices, multiple)
    src = torch.full((b, s), specials.pad, dtype=torch.long)
    tgt_in = torch.full((b, t), specials.pad, dtype=torch.long)
    tgt_out = torch.full((b, t), specials.pad, dtype=torch.long)
    for row, ex in enumerate(chosen):
        src[row, : len(ex.src)] = torch.tensor(ex.src)
        n = len(ex.tgt)
        tgt_in[row, 0] = specials.bos
        tgt_in[row, 1 : n + 1] = torch.tensor(ex.tgt)
        tgt_out[row, :n] = torch.tensor(ex.tgt)
        tgt_out[row, n] = specials.eos
    n_tokens = sum(len(ex.tgt) + 1 for ex in chosen)
    n_src = sum(len(ex.src) for ex in chosen)
    return Batch(src, tgt_in, tgt_out, n_tokens, n_src)


def padded_shape(
    examples: Sequence[Example], indices: Sequence[int], multiple: int = 1
) -> tuple[int, int, int]:
    """(rows, source length, decoder length) of the batch `collate` makes, without making it:
    what a kernel sees, so what CPU bf16 prepares kernels for."""
    chosen = [examples[i] for i in indices]
    return (
        len(chosen),
        _round_up(max(len(ex.src) for ex in chosen), multiple),
        _round_up(max(len(ex.tgt) for ex in chosen) + 1, multiple),
    )


def _round_up(n: int, multiple: int) -> int:
    return -(-n // max(1, multiple)) * max(1, multiple)


def pad_sources(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """[B, S] PAD-padded tensor of source id lists (translation time)."""
    s = max(1, max((len(x) for x in seqs), default=1))
    out = torch.full((len(seqs), s), pad_id, dtype=torch.long)
    for row, ids in enumerate(seqs):
        if ids:
            out[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
    return out
