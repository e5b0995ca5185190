"""Unit tests of the paper's parts: embeddings, positions, masks, attention, config."""

from __future__ import annotations

import math

import pytest
import torch

from core_model import PRESETS, ModelConfig, Transformer
from core_model.transformer.attention import (
    KeyValueCache,
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from core_model.transformer.dropout import Dropout
from core_model.transformer.embedding import TokenEmbedding
from core_model.transformer.masks import causal_mask, decoder_self_mask, padding_mask
from core_model.transformer.positional_encoding import PositionalEncoding, sinusoid_table


def test_base_preset_is_the_paper() -> None:
    cfg = ModelConfig.from_preset("base", src_vocab_size=100, tgt_vocab_size=100)
    assert (cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers) == (512, 8, 6, 6)
    assert (cfg.d_ff, cfg.dropout, cfg.norm_first) == (2048, 0.1, False)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.from_preset("huge", src_vocab_size=1, tgt_vocab_size=1)
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(src_vocab_size=9, tgt_vocab_size=9, d_model=30, n_heads=4)


def test_embedding_is_scaled_by_sqrt_d_model() -> None:
    embed = TokenEmbedding(10, 16, pad_id=0)
    ids = torch.tensor([[3, 0]])
    assert torch.allclose(embed(ids)[0, 0], embed.lookup.weight[3] * 4.0)
    assert embed(ids)[0, 1].abs().sum() == 0  # padding row stays zero


def test_sinusoids_follow_the_formula() -> None:
    table = sinusoid_table(50, 8)
    pos, i = 7, 2
    assert table[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    pe = PositionalEncoding(8, 50, dropout=0.0)
    x = torch.zeros(1, 3, 8)
    assert torch.equal(pe(x, offset=4)[0], table[4:7])
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 51, 8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_zeroes_p_and_rescales_the_rest(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    drop = Dropout(0.25)
    x = torch.ones(400, 500, dtype=dtype, requires_grad=True)
    y = drop(x)
    assert y.dtype == dtype
    kept = y != 0
    assert kept.float().mean().item() == pytest.approx(0.75, abs=0.005)
    assert torch.all(y[kept] == torch.tensor(1 / 0.75, dtype=dtype))  # survivors scaled
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # gradient flows only where kept
    torch.manual_seed(0)
    assert torch.equal(drop(x), y)  # seeded: same mask
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match="dropout"):
        Dropout(1.0)


def test_dropout_of_any_rate_keeps_the_expectation() -> None:
    """P_drop is drawn at 1/32,768 steps (0.1 -> 0.100006) and the survivors are scaled by
    the rate drawn, so the mean activation is unchanged; every element is drawn anew."""
    torch.manual_seed(1)
    x = torch.ones(1_000, 1_000)
    y = Dropout(0.1)(x)
    assert (y == 0).float().mean().item() == pytest.approx(0.1, abs=0.002)
    assert y.mean().item() == pytest.approx(1.0, abs=0.002)
    assert torch.all(y[y != 0] == 32_768 / (32_768 - 3_277))
    rows = (y != 0).float().mean(dim=1)  # no stretch of the mask repeats another's
    assert rows.std().item() > 0 and not torch.equal(y[0], y[1])


def test_masks() -> None:
    ids = torch.tensor([[5, 6, 0]])
    assert padding_mask(ids, 0).tolist() == [[[[True, True, False]]]]
    assert causal_mask(3)[0, 0].tolist() == [[True, False, False], [True, True, False], [True] * 3]
    combined = decoder_self_mask(ids, 0)[0, 0]
    assert combined.tolist() == [[True, False, False], [True, True, False], [True, True, False]]


def test_fused_and_explicit_attention_agree() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4, dropout=0.0).eval()
    x = torch.randn(2, 5, 16)
    memory = torch.randn(2, 7, 16)
    mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), 0)
    fused, none = attn(x, memory, mask=mask)
    explicit, weights = attn(x, memory, mask=mask, need_weights=True)
    assert none is None
    assert torch.allclose(fused, explicit, atol=1e-6)
    assert weights.shape == (2, 4, 5, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5))
    assert weights[1, :, :, 4:].abs().max() == 0  # padded keys get no attention


def test_explicit_attention_is_equation_one() -> None:
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
    assert torch.allclose(weights, expected)
    assert torch.allclose(out, expected @ v)


def test_self_attention_cache_appends_one_step_at_a_time() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=8, n_heads=2, dropout=0.0).eval()
    x = torch.randn(1, 4, 8)
    full, _ = attn(x, mask=causal_mask(4))
    for capacity in (0, 6):  # grows as needed / preallocated: written in place, never copied
        cache = KeyValueCache(capacity)
        steps = [attn(x[:, t : t + 1], cache=cache)[0] for t in range(4)]
        assert cache.length == 4 and torch.allclose(torch.cat(steps, dim=1), full, atol=1e-6)
    assert cache.key.shape == (1, 2, 6, 4)
    history, buffer = cache.key[:, :, :4].clone(), cache.key.data_ptr()
    attn(x[:, :2], cache=cache)  # two more positions fit the buffer
    assert cache.key.data_ptr() == buffer and cache.length == 6
    attn(x[:, :1], cache=cache)  # a seventh does not: the buffer doubles, history kept
    assert cache.key.shape == (1, 2, 12, 4) and torch.equal(cache.key[:, :, :4], history)


def test_shared_vocabulary_ties_embeddings_and_generator() -> None:
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=30, shared_vocab=True)
    model = Transformer(cfg)
    assert model.src_embed is model.tgt_embed
    assert model.generator.proj.weight is model.tgt_embed.lookup.weight
    untied = Transformer(ModelConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=30))
    assert model.num_parameters() == untied.num_parameters() - 2 * 30 * cfg.d_model


def test_pre_norm_has_final_layer_norms() -> None:
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=20, tgt_vocab_size=20, norm_first=True)
    model = Transformer(cfg)
    assert isinstance(model.encoder.final_norm, torch.nn.LayerNorm)
    logits = model(torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 3)))
    assert logits.shape == (2, 3, 20) and torch.isfinite(logits).all()


def test_bf16_on_cpu_takes_the_explicit_path_with_the_fused_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bf16 CPU attention is written out (the fused backward is slow there): same values and
    gradients as the fused kernel, within bf16 precision."""
    from core_model.transformer import attention

    fused_dtypes = []
    real = attention.F.scaled_dot_product_attention

    def spy(q, *args, **kwargs):
        fused_dtypes.append(q.dtype)
        return real(q, *args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, dropout=0.0).eval()
    x = torch.randn(3, 7, 32)
    mask = padding_mask(torch.tensor([[5] * 7, [5] * 5 + [0] * 2, [5] * 3 + [0] * 4]), 0)
    grads = []
    for bf16 in (False, True):
        mha.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out, weights = mha(x, mask=mask)
        out.float().square().sum().backward()
        grads.append((out.float(), mha.in_proj.weight.grad.clone()))
        assert weights is None
    (fp32_out, fp32_grad), (bf16_out, bf16_grad) = grads
    assert fused_dtypes == [torch.float32]
    assert torch.allclose(fp32_out, bf16_out, atol=0.05, rtol=0.05)
    assert torch.allclose(fp32_grad, bf16_grad, atol=0.1, rtol=0.05)


def test_a_network_is_named_by_the_preset_it_has_the_shape_of() -> None:
    """What a run continuing a version trains (its size, not the run's preset): each preset
    by name, whatever the vocabularies; another shape by its layers and width."""
    for name in PRESETS:
        assert (
            ModelConfig.from_preset(name, src_vocab_size=99, tgt_vocab_size=77).size_name() == name
        )
    wider = ModelConfig.from_preset("tiny", src_vocab_size=99, tgt_vocab_size=99, d_ff=512)
    assert wider.size_name() == "2+2, d=64"
    post_norm = ModelConfig.from_preset(
        "small", src_vocab_size=9, tgt_vocab_size=9, norm_first=False
    )
    assert post_norm.size_name() == "3+3, d=256"
