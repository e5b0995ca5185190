"""Proof that core_model is the Transformer: with its parameters, torch.nn.Transformer (the
benchmarks' reference, bench/reference.py) computes the same function."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.reference import ReferenceModel
from core_model import ModelConfig, Transformer


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
    # Perturb the LayerNorms away from identity so that sharing them is actually tested.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    ref = ReferenceModel(model).eval()
    # nn.Transformer holds none of its own parameters: training it trains ours.
    assert {id(p) for p in ref.parameters()} == {id(p) for p in model.parameters()}

    src = torch.randint(4, 40, (3, 9))
    src[0, 6:] = cfg.pad_id
    src[2, 4:] = cfg.pad_id
    tgt = torch.randint(4, 50, (3, 7))
    tgt[1, 5:] = cfg.pad_id

    with torch.no_grad():
        ours, theirs = model(src, tgt), ref(src, tgt)
    assert ours.shape == theirs.shape == (3, 7, cfg.tgt_vocab_size)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
