"""Lexically constrained beam search: outputs that must contain given token sequences (a
glossary's required target terms), by dynamic beam allocation (Post & Vilar, 2018).

Each hypothesis remembers which constraints it has met and how far it is into the one it is
writing. At every step it may extend with its likeliest tokens *or* with the next token of a
constraint (the first token of one it has not started, the next of the one it is in), so a
term the model would never pick on its own still gets tried. Plain beam search would then
drop those hypotheses at once (they are less likely); instead the beam is split into
**banks** by how many constraint tokens a hypothesis has met, and every bank keeps its best
few, so hypotheses that carry the terms survive until the model has found a fluent way to
continue after them. The end marker is allowed only once every constraint is met; the
winner is the best length-normalised finished hypothesis that met them all.

With subword pieces the terms must also stand as words of their own. After a term only a
piece that begins a word may follow ("tea" + "morning" would read "teamorning"); and no
piece that begins a word (a term's first piece among them) may be written where the model
has not finished the word it is writing: where it puts less than `WORD_END_MASS` of its
next-token probability on word-initial pieces. Without that rule the banks keep alive
hypotheses that cut a word short to make room for a term ("▁w" of "wear", then "face mask":
"Please w face mask."); the decoders that constrain pieces (Post & Vilar's, sockeye's,
fairseq's) have no such rule. A term's own pieces are exempt (the term says where its words
end). If no output meets every term under the rule, the search runs again without it, so
every term is still written. The rules are for targets written with spaces: the caller
leaves them out (``word_starts=None``) for Chinese or Japanese.

It decodes one sentence at a time (only the few sentences that miss a glossary term come
here) with the decoder's key/value cache: a row per live hypothesis, rows reordered to follow
their parents each step, and the sentence's cross-attention keys/values shared by all rows.
It stops once no live hypothesis can beat the best finished one that met every constraint
(extending a hypothesis only lowers its log-probability).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import inf

import torch

from core_model.decoding import LENGTH_PENALTY_ALPHA, DecodeResult, length_penalty
from core_model.transformer import Transformer

# A piece that begins a word may be written only where the model puts at least this much of
# its next-token probability on such pieces: where it has finished the word it was writing.
WORD_END_MASS = 0.5


@dataclass(frozen=True)
class _Hyp:
    tokens: tuple[int, ...]  # output ids so far (no BOS)
    score: float  # summed log-probability
    met: tuple[bool, ...]  # per constraint
    inside: tuple[int, int] | None  # (constraint, tokens of it written) while writing one
    finished: bool = False
    closed: bool = False  # its last token completed a constraint
    parent: int = 0  # the decoder-cache row of the hypothesis it extends

    def coverage(self, constraints: Sequence[Sequence[int]]) -> int:
        """Constraint tokens written: the bank this hypothesis competes in."""
        done = sum(len(c) for c, m in zip(constraints, self.met, strict=True) if m)
        return done + (self.inside[1] if self.inside else 0)


def _advance(hyp: _Hyp, token: int, constraints: Sequence[Sequence[int]]) -> _Hyp:
    """The state after appending `token` (score added by the caller)."""
    met = list(hyp.met)
    inside = None
    if hyp.inside is not None:
        c, pos = hyp.inside
        if constraints[c][pos] == token:
            inside = (c, pos + 1)
    if inside is None:  # not in a constraint (or left it): does `token` start an unmet one?
        for c, (tokens, done) in enumerate(zip(constraints, met, strict=True)):
            if not done and tokens[0] == token:
                inside = (c, 1)
                break
    closed = inside is not None and inside[1] == len(constraints[inside[0]])
    if closed:
        met[inside[0]] = True  # type: ignore[index]
        inside = None
    return _Hyp((*hyp.tokens, token), hyp.score, tuple(met), inside, closed=closed)


@torch.inference_mode()
def constrained_beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    constraints: Sequence[Sequence[int]],
    beam_size: int = 8,
    length_penalty_alpha: float = LENGTH_PENALTY_ALPHA,
    max_len_a: float = 3.0,
    max_len_b: int = 50,
    word_starts: torch.Tensor | None = None,
) -> DecodeResult:
    """Decode one sentence (src_ids [1, S]) so that its output contains every token sequence
    of `constraints` (each non-empty, ids of the target vocabulary). Falls back to the best
    hypothesis found when no finished one meets them all within the length bound.

    word_starts [V] bool: the pieces that begin a word (with subword pieces: "▁…",
    punctuation, the end marker), for the word rules of the module docstring. None: no such
    rules (every token is a word, as with a whitespace tokenizer, or the target is written
    without spaces, as Chinese is, where a piece inside a sentence rarely begins a word)."""
    if src_ids.size(0) != 1:
        raise ValueError("constrained_beam_search decodes one sentence at a time")
    constraints = [list(c) for c in constraints if len(c)]
    search = (model, src_ids, constraints, beam_size, length_penalty_alpha, max_len_a, max_len_b)
    best = _search(*search, word_starts, whole_words=word_starts is not None)
    if word_starts is not None and not all(best.met):  # the terms fit only by cutting a word
        best = _search(*search, word_starts, whole_words=False)
    return DecodeResult(
        list(best.tokens), _normalised(best, length_penalty_alpha), None, ended=best.finished
    )


def _search(
    model: Transformer,
    src_ids: torch.Tensor,
    constraints: list[list[int]],
    k: int,
    length_penalty_alpha: float,
    max_len_a: float,
    max_len_b: int,
    word_starts: torch.Tensor | None,
    whole_words: bool,
) -> _Hyp:
    """The search of `constrained_beam_search` (`whole_words`: `_word_rules`'s second rule
    applies); returns the winner."""
    cfg = model.cfg
    device = src_ids.device
    memory, src_mask = model.encode(src_ids)  # [1, S, D], [1, 1, 1, S]
    src_len = int((src_ids != cfg.pad_id).sum())
    max_len = min(int(src_len * max_len_a + max_len_b), cfg.max_len - 1)
    max_len = max(max_len, sum(len(c) for c in constraints) + 1)
    max_len = min(max_len, cfg.max_len - 1)
    total = sum(len(c) for c in constraints)
    per_bank = max(1, k // (total + 1))
    beam = [_Hyp((), 0.0, tuple(False for _ in constraints), None)]
    cache = model.new_cache(max_len)

    for _step in range(max_len):
        live = [h for h in beam if not h.finished]
        if not live or _settled(beam, length_penalty_alpha, max_len):
            break
        cache.reorder(torch.tensor([h.parent for h in live], device=device))
        last = [[h.tokens[-1] if h.tokens else cfg.bos_id] for h in live]
        step_input = torch.tensor(last, dtype=torch.long, device=device)  # [N, 1]
        # The N rows share the sentence's memory: cached cross-attention reads it once.
        hidden, _ = model.decode_states(step_input, memory, src_mask, cache)  # [N, 1, D]
        log_probs = model.generator(hidden)[:, -1].float()  # [N, V]
        log_probs[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")
        free = log_probs = log_probs.log_softmax(dim=-1)
        if word_starts is not None:
            closed = [h.closed for h in live]
            log_probs = _word_rules(log_probs, closed, word_starts.to(device), whole_words)
        top = log_probs.topk(min(k, log_probs.size(-1)), dim=-1).indices.tolist()
        candidates: dict[tuple[int, ...], _Hyp] = {h.tokens: h for h in beam if h.finished}
        for row, hyp in enumerate(live):
            wanted = set(top[row])
            term_piece = None  # the next piece of the term it is writing: exempt from the rules
            if hyp.inside is not None:
                c, pos = hyp.inside
                term_piece = constraints[c][pos]
                wanted.add(term_piece)
            wanted.update(c[0] for c, m in zip(constraints, hyp.met, strict=True) if not m)
            for token in wanted:
                if token == cfg.eos_id and not all(hyp.met):
                    continue  # no end before every term is in
                step_scores = free if token == term_piece else log_probs
                score = hyp.score + float(step_scores[row, token])
                if score == float("-inf"):
                    continue
                if token == cfg.eos_id:
                    new = _Hyp(hyp.tokens, score, hyp.met, None, finished=True)
                else:
                    new = _advance(hyp, token, constraints)
                    new = _Hyp(
                        new.tokens, score, new.met, new.inside, closed=new.closed, parent=row
                    )
                key = (*new.tokens, -1) if new.finished else new.tokens
                if key not in candidates or candidates[key].score < new.score:
                    candidates[key] = new
        beam = _allocate(list(candidates.values()), constraints, k, per_bank)

    done = [h for h in beam if h.finished and all(h.met)]
    pool = done or [h for h in beam if all(h.met)] or beam
    return max(pool, key=lambda h: _normalised(h, length_penalty_alpha))


def _word_rules(
    log_probs: torch.Tensor, closed: list[bool], starts: torch.Tensor, whole_words: bool
) -> torch.Tensor:
    """log_probs [N, V] with what the word rules forbid at -inf: right after a term
    (`closed` rows) every piece that does not begin a word; with `whole_words`, in the other
    rows every piece that begins one (starts [V]) while the model puts less than
    `WORD_END_MASS` on them, i.e. has not finished the word it is writing."""
    after_term = torch.tensor(closed, device=log_probs.device)[:, None]  # [N, 1]
    banned = after_term & ~starts[None, :]  # [N, V]
    if whole_words:
        mid_word = log_probs[:, starts].exp().sum(dim=-1, keepdim=True) < WORD_END_MASS
        banned |= ~after_term & mid_word & starts[None, :]
    return log_probs.masked_fill(banned, float("-inf"))


def _settled(beam: Sequence[_Hyp], alpha: float, max_len: int) -> bool:
    """True once the best finished hypothesis that met every constraint cannot be overtaken:
    a live hypothesis only loses log-probability as it grows, so the best length-normalised
    score it can still reach is its score now over the length penalty of the longest
    output allowed."""
    done = [_normalised(h, alpha) for h in beam if h.finished and all(h.met)]
    if not done or alpha < 0:  # a penalty that shrinks with length gives no such bound
        return False
    longest = float(length_penalty(torch.tensor(max_len + 1), alpha))
    return max(done) >= max((h.score / longest for h in beam if not h.finished), default=-inf)


def _normalised(hyp: _Hyp, alpha: float) -> float:
    length = torch.tensor(len(hyp.tokens) + (1 if hyp.finished else 0))
    return hyp.score / float(length_penalty(length, alpha))


def _allocate(
    candidates: list[_Hyp], constraints: Sequence[Sequence[int]], k: int, per_bank: int
) -> list[_Hyp]:
    """Dynamic beam allocation: the best `per_bank` of every bank (most constraint tokens
    first), then the best of the rest by score, `k` in all."""
    ranked = sorted(candidates, key=lambda h: h.score, reverse=True)
    banks: dict[int, list[_Hyp]] = {}
    for hyp in ranked:
        banks.setdefault(hyp.coverage(constraints), []).append(hyp)
    chosen: list[_Hyp] = []
    for coverage in sorted(banks, reverse=True):
        chosen.extend(banks[coverage][:per_bank])
    chosen = chosen[:k]
    taken = {id(h) for h in chosen}
    for hyp in ranked:
        if len(chosen) >= k:
            break
        if id(hyp) not in taken:
            chosen.append(hyp)
    return chosen
