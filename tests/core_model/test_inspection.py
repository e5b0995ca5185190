"""Looking inside: the attention weights the model returns per layer and head are proper
distributions that respect the masks, the greedy steps are the decoder's own, and the beam
search history accounts for the returned translation."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from core_model import ModelConfig, Transformer
from core_model.artifact import LoadedModel
from core_model.decoding import beam_search, greedy_decode, length_penalty
from core_model.inspection import MAX_PIECES, inspect_sentence, nearest_neighbours
from core_model.special_tokens import SPECIAL_PIECES
from core_model.tokenizer import TokenizerPair, WhitespaceTokenizer
from core_model.transformer.masks import causal_mask

WORDS = [*SPECIAL_PIECES, *(f"w{i}" for i in range(4, 40))]  # "wN" is id N


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0)
    m = Transformer(cfg).eval()
    with torch.no_grad():  # sharpen the untrained model so that outputs vary by input
        m.generator.proj.weight.mul_(3.0)
    return m


@pytest.fixture(scope="module")
def loaded(model: Transformer) -> LoadedModel:
    words = WhitespaceTokenizer(WORDS)
    return LoadedModel(model, TokenizerPair(words, words))


@pytest.fixture(scope="module")
def ending(loaded: LoadedModel) -> LoadedModel:
    """The model with EOS made likely: its hypotheses finish at different lengths, so the
    length penalty decides between them."""
    model = copy.deepcopy(loaded.model)
    with torch.no_grad():
        model.generator.proj.bias[model.cfg.eos_id] = 4.0
    return LoadedModel(model, loaded.tokenizers)


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[5, 9, 12, 7, 2], [8, 11, 2, 0, 0]])  # the second padded
    tgt = torch.tensor([[1, 6, 13, 21], [1, 17, 0, 0]])
    return src, tgt


def test_every_head_is_a_distribution_over_the_keys_its_mask_allows(model: Transformer) -> None:
    src, tgt = _padded_batch()
    with torch.no_grad():
        logits, maps = model.attention_maps(src, tgt)
        assert torch.allclose(logits, model(src, tgt), atol=1e-5), "the same pass as forward"
    cfg = model.cfg
    assert len(maps.encoder_self) == cfg.n_encoder_layers
    assert len(maps.decoder_self) == len(maps.cross) == cfg.n_decoder_layers
    src_keys = (src != 0)[:, None, None, :]  # [B, 1, 1, S]
    tgt_keys = causal_mask(tgt.size(1)) & (tgt != 0)[:, None, None, :]  # [B, 1, T, T]
    for weights, allowed in [
        *((w, src_keys) for w in maps.encoder_self),
        *((w, tgt_keys) for w in maps.decoder_self),
        *((w, src_keys) for w in maps.cross),
    ]:
        assert weights.shape[1] == cfg.n_heads
        allowed = allowed.expand_as(weights)
        assert torch.all(weights[~allowed] == 0), "masked keys (padding, the future) get zero"
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
        assert torch.all(weights[allowed] > 0)


def test_padding_changes_nothing_for_the_real_positions(loaded: LoadedModel) -> None:
    plain = inspect_sentence(loaded, "w4 w9 w12 w7", beam_size=1)
    padded = inspect_sentence(loaded, "w4 w9 w12 w7", beam_size=1, padding=3)
    s, t = len(plain.src_ids), len(plain.out_ids)
    assert padded.out_ids == plain.out_ids
    for kind in ("encoder_self", "decoder_self", "cross"):
        for a, b in zip(getattr(plain, kind), getattr(padded, kind), strict=True):
            a, b = torch.tensor(a), torch.tensor(b)  # [H, rows, cols]
            rows, cols = a.shape[1:]
            assert b.shape[1:] == (rows + 3, cols + 3)
            assert torch.allclose(a, b[:, :rows, :cols], atol=1e-5)
            assert torch.all(b[:, :, cols:] == 0), "no query attends to a PAD key"
    assert len(padded.encoder_self[0][0]) == s + 3 and len(padded.cross[0][0]) == t + 3
    # the masks it reports are the model's: exactly the cells with zero weight
    for kind in ("encoder_self", "decoder_self", "cross"):
        masked = torch.tensor(getattr(padded, f"{kind}_masked"))  # [rows, cols]
        weights = torch.tensor(getattr(padded, kind))  # [layers, H, rows, cols]
        assert torch.equal(weights == 0, masked.expand_as(weights))
    assert padded.decoder_self_masked[0][1] and not padded.decoder_self_masked[1][0]
    assert padded.cross_masked[0][s:] == [True] * 3 and not any(padded.cross_masked[0][:s])


def test_greedy_steps_are_the_decoders_own(loaded: LoadedModel, model: Transformer) -> None:
    seen = inspect_sentence(loaded, "w4 w9 w12 w7 w30", beam_size=1, top_k=5)
    src = torch.tensor([seen.src_ids])
    # the model's own first step, computed here from scratch: BOS in, softmax over the
    # vocabulary with PAD and BOS never output
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        hidden, _ = model.decode_states(torch.tensor([[1]]), memory, src_mask)
    logits = model.generator(hidden)[0, -1]
    logits[[0, 1]] = float("-inf")
    probs, ids = logits.softmax(-1).topk(5)
    first = seen.greedy[0]
    assert [c.id for c in first.top] == ids.tolist()
    assert [c.value for c in first.top] == pytest.approx(probs.tolist(), abs=1e-5)
    [decoded] = greedy_decode(model, src, max_len_a=0.0, max_len_b=len(seen.out_ids))
    assert seen.out_ids[: len(decoded.tokens)] == decoded.tokens
    assert all(step.chosen.id == step.top[0].id for step in seen.greedy), "greedy = argmax"
    assert math.log(math.prod(s.chosen.value for s in seen.greedy)) == pytest.approx(
        decoded.score, abs=1e-4
    )
    assert seen.greedy_log_prob == pytest.approx(decoded.score, abs=1e-4)


@pytest.mark.parametrize("kind", ["gnmt", "power"])
def test_beam_history_reproduces_the_returned_translation(ending: LoadedModel, kind: str) -> None:
    model = ending.model
    seen = inspect_sentence(ending, "w5 w9 w12 w7 w33 w20", beam_size=3, penalty_kind=kind)
    beam = seen.beam
    assert beam is not None
    src = torch.tensor([seen.src_ids])
    bound = max(r.step for r in beam.rows) + 1
    [plain] = beam_search(
        model, src, beam_size=3, length_penalty_kind=kind, max_len_a=0.0, max_len_b=bound
    )
    assert (beam.best_ids, beam.score) == (plain.tokens, pytest.approx(plain.score))
    # From the history alone: of the K most probable finished hypotheses, the best by
    # log P / lp(|Y|) is the returned one, with its score.
    finished = [r for r in beam.rows if r.status == "finished"]
    assert len(finished) >= 3
    finalists = sorted(finished, key=lambda r: r.log_prob, reverse=True)[:3]
    assert [r.finalist for r in finished].count(True) == 3
    assert all(r.finalist for r in finalists)
    best = max(finalists, key=lambda r: r.log_prob / length_penalty(r.length, 0.6, kind))
    assert best.best and [r.best for r in finished].count(True) == 1
    assert plain.ended and len({r.length for r in finished}) > 1
    words = ending.tokenizers.tgt
    assert [*best.prefix, best.piece] == [*words.ids_to_pieces(plain.tokens), "</s>"]
    assert best.score == pytest.approx(plain.score)
    assert best.log_prob / best.penalty == pytest.approx(plain.score)
    # every step: 2K candidates, best first; at most K carry on
    for step in sorted({r.step for r in beam.rows}):
        rows = [r for r in beam.rows if r.step == step]
        assert len(rows) == 6
        assert [r.log_prob for r in rows] == sorted((r.log_prob for r in rows), reverse=True)
        assert sum(r.status in ("kept", "stopped") for r in rows) <= 3
        # a kept hypothesis is the prefix of the next step's candidates
        kept = {(*r.prefix, r.piece) for r in rows if r.status == "kept"}
        later = {tuple(r.prefix) for r in beam.rows if r.step == step + 1}
        assert later <= kept


def test_history_costs_nothing_when_not_asked(model: Transformer) -> None:
    src = torch.tensor([[5, 9, 12, 7, 2], [8, 11, 2, 0, 0]])
    plain = beam_search(model, src, beam_size=3)
    traced = beam_search(model, src, beam_size=3, history=True)
    assert all(r.history is None for r in plain)
    assert [r.tokens for r in plain] == [r.tokens for r in traced]
    assert all(r.history for r in traced)


def test_positions_shapes_and_neighbours(loaded: LoadedModel, model: Transformer) -> None:
    seen = inspect_sentence(loaded, "w4 w9 w12", beam_size=1, padding=2)
    d = model.cfg.d_model
    table = torch.tensor(seen.positional)
    assert table.shape == (max(len(seen.src_ids), len(seen.out_ids)) + 2, d)
    assert table[0, 0::2].abs().max() == 0 and torch.all(table[0, 1::2] == 1), "sin 0, cos 0"
    assert seen.positional_norms == pytest.approx([math.sqrt(d / 2)] * 4, abs=1e-4)
    assert len(seen.embedding_norms) == 4
    shapes = dict(seen.shapes)
    assert shapes["encoder self-attention weights softmax(QKᵀ/√d_k)"] == [1, 4, 6, 6]
    near = nearest_neighbours(loaded, 10, n=5)
    assert len(near) == 5 and 10 not in [c.id for c in near]
    assert all(c.id > 3 for c in near), "no reserved token"
    assert [c.value for c in near] == sorted((c.value for c in near), reverse=True)
    vectors = torch.nn.functional.normalize(model.tgt_embed.lookup.weight.detach(), dim=-1)
    assert near[0].value == pytest.approx(float(vectors[10] @ vectors[near[0].id]), abs=1e-5)


def test_empty_text_is_refused(loaded: LoadedModel) -> None:
    with pytest.raises(ValueError, match="empty"):
        inspect_sentence(loaded, "   ")


def test_long_text_is_cut(loaded: LoadedModel) -> None:
    seen = inspect_sentence(loaded, " ".join(["w5"] * (MAX_PIECES + 10)), beam_size=1)
    assert len(seen.src_ids) == MAX_PIECES + 1 and seen.src_tokens == MAX_PIECES + 11
