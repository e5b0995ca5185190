"""Retrieval-augmented decoding: kNN-MT (Khandelwal et al., "Nearest Neighbor Machine
Translation", ICLR 2021), beside the decoders of ``core_model.decoding``.

A datastore maps the decoder's final hidden state at each target position of known pairs
(teacher forcing: the state from which the model predicts the next target token) to that next
token. At each decoding step the state of every hypothesis is a query; its k nearest stored
states vote for their tokens with weights softmax(-d / T) (d the squared L2 distance), and

    p(y_t | x, y_<t) = λ · p_kNN(y_t) + (1 − λ) · p_model(y_t)        (their eq. 2)

A neighbour at distance ≈ 0 is the same source and prefix seen in the store — a translation
memory's exact match — and there only such neighbours vote and λ rises to ``exact_lambda``: a
saved correction is then followed at once instead of being outvoted by a confident model or
by the many near neighbours of the sentences it corrects.

This module knows nothing of where the store lives: ``Datastore`` is the interface the
decoders call (``workbench.memory.datastore`` implements it with a faiss index).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from core_model.batching import Example
from core_model.transformer import Transformer


class Datastore(Protocol):
    def search(
        self, queries: torch.Tensor, k: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """queries [N, D] fp32 -> (squared L2 distances [N, k], next tokens [N, k], entry ids
        [N, k]: the store's own, to say where a neighbour came from); a row with fewer than
        k entries pads with distance inf, token -1 and entry -1."""
        ...


@dataclass(frozen=True)
class KnnSettings:
    """The three knobs of kNN-MT, tuned per store on the valid split (``tune``)."""

    k: int = 8  # neighbours per query
    lam: float = 0.3  # λ: weight of the retrieved distribution
    temperature: float = 10.0  # T of softmax(-d / T), in units of squared distance
    # distances below this are the same context (float noise): λ becomes exact_lambda there
    exact_distance: float = 1e-3
    exact_lambda: float = 0.9


@dataclass
class Neighbour:
    """One retrieved entry, for explaining a step (Inspect)."""

    token: int
    distance: float
    entry: int  # the store's id of the entry (the datastore maps it to its pair)


@dataclass
class StepExplanation:
    """What the memory did at one decoding step: its neighbours, the λ applied, and the
    model's own best token beside the best after interpolation, with their probabilities."""

    neighbours: list[Neighbour]
    lam: float
    model_top: int
    model_p: float
    final_top: int
    final_p: float


@dataclass
class RetrievalMemory:
    """A datastore and its settings, handed to ``greedy_decode`` / ``beam_search``."""

    store: Datastore
    settings: KnnSettings = field(default_factory=KnnSettings)


def knn_weights(distances: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Each neighbour's vote [N, k]: softmax(-d / T) over a row's neighbours, 0 for none (token
    -1); a row without neighbours is all zeros."""
    valid = tokens >= 0
    logits = torch.where(valid, -distances / temperature, float("-inf"))  # [N, k]
    return torch.softmax(logits, dim=-1).nan_to_num(0.0) * valid  # all -inf rows -> 0


def knn_probs(
    distances: torch.Tensor, tokens: torch.Tensor, vocab_size: int, temperature: float
) -> torch.Tensor:
    """p_kNN [N, V]: the votes of each row's neighbours [N, k], summed per token."""
    weights = knn_weights(distances, tokens, temperature)
    probs = distances.new_zeros(distances.size(0), vocab_size)
    return probs.scatter_add_(1, tokens.clamp(min=0), weights)


def row_lambdas(distances: torch.Tensor, settings: KnnSettings) -> torch.Tensor:
    """λ per row [N]: 0 without neighbours, exact_lambda where the nearest is the same
    context, else λ."""
    nearest = distances.min(dim=-1).values  # [N]
    lam = torch.full_like(nearest, settings.lam)
    lam = torch.where(nearest <= settings.exact_distance, settings.exact_lambda, lam)
    return torch.where(torch.isfinite(nearest), lam, 0.0)


def interpolate(
    model_log_probs: torch.Tensor, tokens: torch.Tensor, weights: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """log(λ·p_kNN + (1 − λ)·p_model) [N, V] from log p_model [N, V], the neighbours' tokens
    [N, k] and votes [N, k] (`knn_weights`), λ [N]. p_kNN is 0 outside a row's k tokens, so
    only those columns need more than log(1 − λ) added: O(N·k) work beside one O(N·V) add."""
    lam = lam[:, None].clamp(max=1 - 1e-6)  # [N, 1]
    out = model_log_probs + torch.log1p(-lam)
    columns = tokens.clamp(min=0)  # [N, k]
    # p_kNN of each listed token: the votes of every neighbour with that token
    same = tokens[:, :, None] == tokens[:, None, :]  # [N, k, k]
    p_knn = (same * weights[:, None, :]).sum(dim=-1)  # [N, k]
    p_model = model_log_probs.gather(1, columns).exp()
    mixed = torch.log((1 - lam) * p_model + lam * p_knn)
    return out.scatter_(1, columns, torch.where(tokens >= 0, mixed, out.gather(1, columns)))


def retrieve(
    memory: RetrievalMemory,
    hidden: torch.Tensor,
    model_log_probs: torch.Tensor,
    forbid_eos_id: int | None = None,
) -> torch.Tensor:
    """The decoders' step: hidden [N, D] (the states the model predicted from) and its log
    p_model [N, V] -> the interpolated log-probabilities [N, V]. `forbid_eos_id`: a token the
    step must not produce (fixed-length decoding), removed from the votes too."""
    distances, tokens, _ = memory.store.search(hidden.float(), memory.settings.k)
    distances, tokens = distances.to(hidden.device), tokens.to(hidden.device)
    if forbid_eos_id is not None:
        tokens = torch.where(tokens == forbid_eos_id, -1, tokens)
        distances = torch.where(tokens < 0, float("inf"), distances)
    return _mix(memory.settings, distances, tokens, model_log_probs)[0]


def _mix(
    s: KnnSettings, distances: torch.Tensor, tokens: torch.Tensor, model_log_probs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the interpolated log-probabilities [N, V], λ per row [N])."""
    lam = row_lambdas(distances, s)
    # At an exact context only the exact entries vote: the memory knows what came next there.
    exact = distances[:, :1] <= s.exact_distance  # [N, 1]: sorted, nearest first
    tokens = torch.where(exact & (distances > s.exact_distance), -1, tokens)
    weights = knn_weights(distances, tokens, s.temperature)
    return interpolate(model_log_probs, tokens, weights, lam), lam


@torch.inference_mode()
def explain(
    model: Transformer, src: Sequence[int], out: Sequence[int], memory: RetrievalMemory
) -> list[StepExplanation]:
    """What the memory did at each step of the output `out` (ids, EOS last if produced) of
    the source `src` (ids + EOS): teacher forcing gives the states decoding had."""
    cfg = model.cfg
    device = next(model.parameters()).device
    memory_states, src_mask = model.encode(torch.tensor([list(src)], device=device))
    tgt_in = torch.tensor([[cfg.bos_id, *out[:-1]] if out else [cfg.bos_id]], device=device)
    hidden, _ = model.decode_states(tgt_in, memory_states, src_mask)
    hidden = hidden[0].float()  # [T, D]
    log_probs = torch.log_softmax(model.generator(hidden).float(), dim=-1)  # [T, V]
    distances, tokens, entries = memory.store.search(hidden, memory.settings.k)
    mixed, lam = _mix(memory.settings, distances, tokens, log_probs)
    model_top, final_top = log_probs.argmax(-1), mixed.argmax(-1)
    steps = []
    for t in range(hidden.size(0)):
        neighbours = [
            Neighbour(int(tok), float(d), int(e))
            for d, tok, e in zip(distances[t], tokens[t], entries[t], strict=True)
            if tok >= 0
        ]
        m, f = int(model_top[t]), int(final_top[t])
        steps.append(
            StepExplanation(
                neighbours,
                float(lam[t]),
                m,
                float(log_probs[t, m].exp()),
                f,
                float(mixed[t, f].exp()),
            )
        )
    return steps


# ------------------------------------------------------------------- building a datastore


@dataclass
class Entries:
    """Datastore rows of a batch of pairs: keys [M, D] fp32, next tokens [M], and for each
    row its pair's index in the batch and its target position."""

    keys: torch.Tensor
    tokens: torch.Tensor
    example: torch.Tensor
    position: torch.Tensor


@torch.inference_mode()
def teacher_forced_entries(model: Transformer, examples: Sequence[Example]) -> Entries:
    """The datastore rows of encoded pairs: the decoder's final state at every target
    position (BOS + y_<t) keyed to the token that follows (y_t, EOS after the last)."""
    cfg = model.cfg
    device = next(model.parameters()).device
    src_len = max(len(e.src) for e in examples)
    tgt_len = max(len(e.tgt) for e in examples) + 1
    src = torch.full((len(examples), src_len), cfg.pad_id, dtype=torch.long)
    tgt_in = torch.full((len(examples), tgt_len), cfg.pad_id, dtype=torch.long)
    tgt_out = torch.full((len(examples), tgt_len), cfg.pad_id, dtype=torch.long)
    for i, e in enumerate(examples):
        src[i, : len(e.src)] = torch.tensor(e.src)
        tgt_in[i, : len(e.tgt) + 1] = torch.tensor([cfg.bos_id, *e.tgt])
        tgt_out[i, : len(e.tgt) + 1] = torch.tensor([*e.tgt, cfg.eos_id])
    memory, src_mask = model.encode(src.to(device))
    hidden, _ = model.decode_states(tgt_in.to(device), memory, src_mask)  # [B, T, D]
    real = (tgt_out != cfg.pad_id).to(device)  # [B, T]
    example, position = real.nonzero(as_tuple=True)
    return Entries(
        hidden[real].float().cpu(),
        tgt_out.to(device)[real].cpu(),
        example.cpu(),
        position.cpu(),
    )


# ------------------------------------------------------------------------------ tuning


@dataclass
class TuningData:
    """Valid-split positions with the model's log-probability of the reference token and
    their K_MAX nearest neighbours: enough to score any (k ≤ K_MAX, λ, T) without decoding."""

    model_log_prob: torch.Tensor  # [M] log p_model(y_t)
    distances: torch.Tensor  # [M, K_MAX]
    tokens: torch.Tensor  # [M, K_MAX]
    reference: torch.Tensor  # [M] y_t


K_CHOICES = (4, 8, 16, 32)
LAMBDA_CHOICES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
TEMPERATURE_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)  # × the median nearest distance


@torch.inference_mode()
def tuning_data(model: Transformer, store: Datastore, examples: Sequence[Example]) -> TuningData:
    """Teacher-force the valid pairs once and retrieve max(K_CHOICES) neighbours per position."""
    rows: list[TuningData] = []
    for start in range(0, len(examples), 64):
        batch = examples[start : start + 64]
        entries = teacher_forced_entries(model, batch)
        logits = model.generator(entries.keys.to(next(model.parameters()).device))
        log_probs = torch.log_softmax(logits.float(), dim=-1).cpu()  # [M, V]
        model_lp = log_probs.gather(1, entries.tokens[:, None])[:, 0]
        distances, tokens, _ = store.search(entries.keys, max(K_CHOICES))
        rows.append(TuningData(model_lp, distances.cpu(), tokens.cpu(), entries.tokens))
    return TuningData(
        torch.cat([r.model_log_prob for r in rows]),
        torch.cat([r.distances for r in rows]),
        torch.cat([r.tokens for r in rows]),
        torch.cat([r.reference for r in rows]),
    )


def mean_log_likelihood(data: TuningData, k: int, lam: float, temperature: float) -> float:
    """Mean log p(y_t) of the reference tokens under the interpolation (exact matches do not
    occur here: the valid split is not in the store)."""
    d, t = data.distances[:, :k], data.tokens[:, :k]
    valid = t >= 0
    w = torch.softmax(torch.where(valid, -d / temperature, float("-inf")), dim=-1).nan_to_num(0.0)
    p_knn = (w * (t == data.reference[:, None]) * valid).sum(dim=-1)  # [M]
    has = valid.any(dim=-1)
    lam_t = torch.where(has, torch.tensor(lam), torch.tensor(0.0))
    p = lam_t * p_knn + (1 - lam_t) * data.model_log_prob.exp()
    return float(torch.log(p.clamp(min=1e-12)).mean())


def median_nearest(distances: torch.Tensor) -> float:
    """The median of the finite distances [M] to each query's nearest entry: the scale that T
    and the exact-match distance are measured in (squared distances vary by model)."""
    finite = distances[torch.isfinite(distances)]
    return max(float(finite.median()) if finite.numel() else 1.0, 1e-6)


def scaled_settings(median: float, k: int = 8, lam: float = 0.3, scale: float = 1.0) -> KnnSettings:
    """Settings whose T and exact-match distance follow the store's distance scale."""
    return KnnSettings(k, lam, scale * median, exact_distance=1e-3 * median)


def tune(data: TuningData) -> tuple[KnnSettings, dict[str, float]]:
    """The (k, λ, T) of the choices with the best valid log-likelihood of the references,
    and the figures behind it (the model's own, the tuned one, and the median distance)."""
    median = median_nearest(data.distances[:, 0])
    best: tuple[float, KnnSettings] | None = None
    for k in K_CHOICES:
        for lam in LAMBDA_CHOICES:
            for scale in TEMPERATURE_SCALES:
                score = mean_log_likelihood(data, k, lam, scale * median)
                if best is None or score > best[0]:
                    best = (score, scaled_settings(median, k, lam, scale))
    assert best is not None
    baseline = float(data.model_log_prob.clamp(min=math.log(1e-12)).mean())
    return best[1], {
        "valid_log_likelihood_model": baseline,
        "valid_log_likelihood_knn": best[0],
        "median_nearest_distance": median,
        "valid_positions": int(data.reference.numel()),
    }
