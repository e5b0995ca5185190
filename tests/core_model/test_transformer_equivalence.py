"""Proof that core_model is the Transformer: copied into torch.nn.Transformer, it agrees."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core_model import ModelConfig, Transformer
from core_model.transformer.masks import decoder_self_mask


def _reference(model: Transformer) -> nn.Transformer:
    """An nn.Transformer with the same dimensions and norm placement, holding our weights."""
    cfg = model.cfg
    kwargs = dict(
        d_model=cfg.d_model,
        nhead=cfg.n_heads,
        dim_feedforward=cfg.d_ff,
        dropout=cfg.dropout,
        batch_first=True,
        norm_first=cfg.norm_first,
    )
    final_norm = nn.LayerNorm if cfg.norm_first else (lambda _d: None)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**kwargs),
        cfg.n_encoder_layers,
        norm=final_norm(cfg.d_model),
        enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**kwargs), cfg.n_decoder_layers, norm=final_norm(cfg.d_model)
    )
    ref = nn.Transformer(custom_encoder=encoder, custom_decoder=decoder, **kwargs)

    def copy_attention(dst: nn.MultiheadAttention, src) -> None:
        dst.in_proj_weight.copy_(src.in_proj.weight)
        dst.in_proj_bias.copy_(src.in_proj.bias)
        dst.out_proj.weight.copy_(src.out_proj.weight)
        dst.out_proj.bias.copy_(src.out_proj.bias)

    def copy_linear(dst: nn.Module, src: nn.Module) -> None:
        dst.load_state_dict(src.state_dict())

    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, ref.encoder.layers, strict=True):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_linear(theirs.linear1, ours.feed_forward.w_1)
            copy_linear(theirs.linear2, ours.feed_forward.w_2)
            copy_linear(theirs.norm1, ours.attn_block.norm)
            copy_linear(theirs.norm2, ours.ff_block.norm)
        for ours, theirs in zip(model.decoder.layers, ref.decoder.layers, strict=True):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.cross_attn)
            copy_linear(theirs.linear1, ours.feed_forward.w_1)
            copy_linear(theirs.linear2, ours.feed_forward.w_2)
            copy_linear(theirs.norm1, ours.self_block.norm)
            copy_linear(theirs.norm2, ours.cross_block.norm)
            copy_linear(theirs.norm3, ours.ff_block.norm)
        if cfg.norm_first:
            copy_linear(ref.encoder.norm, model.encoder.final_norm)
            copy_linear(ref.decoder.norm, model.decoder.final_norm)
    return ref.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_matches_torch_nn_transformer(norm_first: bool) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(
        src_vocab_size=40,
        tgt_vocab_size=50,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=3,
        d_ff=64,
        norm_first=norm_first,
    )
    model = Transformer(cfg).eval()
    # Perturb the LayerNorms away from identity so that copying them is actually tested.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    ref = _reference(model)

    src = torch.randint(4, 40, (3, 9))
    src[0, 6:] = cfg.pad_id
    src[2, 4:] = cfg.pad_id
    tgt = torch.randint(4, 50, (3, 7))
    tgt[1, 5:] = cfg.pad_id

    with torch.no_grad():
        memory, src_mask = model.encode(src)
        ours, _ = model.decoder(
            model.positions(model.tgt_embed(tgt)),
            memory,
            decoder_self_mask(tgt, cfg.pad_id),
            src_mask,
        )
        theirs = ref(
            model.positions(model.src_embed(src)),
            model.positions(model.tgt_embed(tgt)),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.bool),
            src_key_padding_mask=src == cfg.pad_id,
            tgt_key_padding_mask=tgt == cfg.pad_id,
            memory_key_padding_mask=src == cfg.pad_id,
        )
    assert ours.shape == theirs.shape == (3, 7, cfg.d_model)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
