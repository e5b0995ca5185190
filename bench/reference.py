"""The reference the benchmarks measure against: `torch.nn.Transformer` (PyTorch's own
implementation) wrapped in our embeddings, positions and generator, and — for quality — trained
with the paper's settings (§5: post-norm, dropout 0.1, label smoothing 0.1, Adam β=(0.9, 0.98),
ε=1e-9, the Noam schedule with 4000 warm-up steps).

nn.Transformer computes with the parameters of one of our Transformers (shared, not copied), so
after training our cached decoder translates with the reference's weights: the same beam search
and length bounds as the product, at the product's speed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import nn

from core_model import ModelConfig, Transformer
from core_model.batching import collate, encode_pairs, make_batches
from core_model.tokenizer import TokenizerPair, train_tokenizers
from core_model.training.label_smoothing import label_smoothed_nll_loss
from core_model.training.precision import autocast, resolve_precision
from core_model.training.schedule import noam_lr
from core_model.transformer.attention import MultiHeadAttention
from core_model.translator import translate_ids


class ReferenceModel(nn.Module):
    """torch.nn.Transformer between our embeddings/positions and our generator, computing with
    `ours`'s parameters. Post-norm stacks get no final LayerNorm (the paper has none;
    nn.Transformer's default adds one), pre-norm stacks end with one, as ours do."""

    def __init__(self, ours: Transformer) -> None:
        super().__init__()
        cfg = ours.cfg
        self.cfg = cfg
        self.ours = ours
        layer = dict(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
            norm_first=cfg.norm_first,
        )
        final_norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.norm_first else (lambda: None)
        self.core = nn.Transformer(
            custom_encoder=nn.TransformerEncoder(
                nn.TransformerEncoderLayer(**layer),
                cfg.n_encoder_layers,
                norm=final_norm(),
                enable_nested_tensor=False,
            ),
            custom_decoder=nn.TransformerDecoder(
                nn.TransformerDecoderLayer(**layer), cfg.n_decoder_layers, norm=final_norm()
            ),
            **layer,
        )
        _share_parameters(ours, self.core)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src [B, S], tgt_in [B, T] -> logits [B, T, V]."""
        ours, pad = self.ours, self.cfg.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt_in.size(1), device=tgt_in.device, dtype=torch.bool
        )
        hidden = self.core(
            ours.positions(ours.src_embed(src)),
            ours.positions(ours.tgt_embed(tgt_in)),
            tgt_mask=causal,
            src_key_padding_mask=src == pad,
            tgt_key_padding_mask=tgt_in == pad,
            memory_key_padding_mask=src == pad,
        )
        return ours.generator(hidden)


def _share_parameters(ours: Transformer, core: nn.Transformer) -> None:
    """Make every parameter of `core` one of `ours`'s (same layout: nn.MultiheadAttention also
    stacks W^Q, W^K, W^V into one [3D, D] matrix)."""

    def share(theirs: nn.Module, mine: nn.Module) -> None:  # modules with the same names
        for name, param in mine.named_parameters(recurse=False):
            setattr(theirs, name, param)

    def share_attention(theirs: nn.MultiheadAttention, mine: MultiHeadAttention) -> None:
        theirs.in_proj_weight, theirs.in_proj_bias = mine.in_proj.weight, mine.in_proj.bias
        share(theirs.out_proj, mine.out_proj)

    for mine, theirs in zip(ours.encoder.layers, core.encoder.layers, strict=True):
        share_attention(theirs.self_attn, mine.self_attn)
        share(theirs.linear1, mine.feed_forward.w_1)
        share(theirs.linear2, mine.feed_forward.w_2)
        share(theirs.norm1, mine.attn_block.norm)
        share(theirs.norm2, mine.ff_block.norm)
    for mine, theirs in zip(ours.decoder.layers, core.decoder.layers, strict=True):
        share_attention(theirs.self_attn, mine.self_attn)
        share_attention(theirs.multihead_attn, mine.cross_attn)
        share(theirs.linear1, mine.feed_forward.w_1)
        share(theirs.linear2, mine.feed_forward.w_2)
        share(theirs.norm1, mine.self_block.norm)
        share(theirs.norm2, mine.cross_block.norm)
        share(theirs.norm3, mine.ff_block.norm)
    if ours.cfg.norm_first:
        share(core.encoder.norm, ours.encoder.final_norm)
        share(core.decoder.norm, ours.decoder.final_norm)


def paper_model(tokenizers: TokenizerPair, preset: str = "base") -> ReferenceModel:
    """nn.Transformer of a preset's size with the paper's post-norm and dropout 0.1."""
    cfg = ModelConfig.from_preset(
        preset,
        src_vocab_size=tokenizers.src.vocab_size,
        tgt_vocab_size=tokenizers.tgt.vocab_size,
        shared_vocab=tokenizers.shared,
        norm_first=False,
        dropout=0.1,
    )
    return ReferenceModel(Transformer(cfg))


def train_paper_reference(
    train_pairs: Sequence[tuple[str, str]],
    minutes: float,
    preset: str = "base",
    max_tokens: int = 4096,
    seed: int = 0,
) -> tuple[ReferenceModel, TokenizerPair, dict[str, float]]:
    """The paper's recipe on nn.Transformer for a wall-clock budget; returns the last weights
    (in eval mode), the tokenizers and {steps, tokens_per_s, train_time_s, parameters}."""
    torch.manual_seed(seed)
    tokenizers = train_tokenizers([s for s, _ in train_pairs], [t for _, t in train_pairs])
    model = paper_model(tokenizers, preset).train()
    examples = encode_pairs(train_pairs, tokenizers, model.cfg.max_len)
    n_params = sum(p.numel() for p in model.parameters())
    amp = resolve_precision("auto", torch.device("cpu"), n_params)
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    start, step, tokens, epoch = time.monotonic(), 0, 0, 0
    while time.monotonic() - start < minutes * 60:
        epoch += 1
        for idx in make_batches(examples, max_tokens, seed=seed + epoch):
            if time.monotonic() - start >= minutes * 60:
                break
            batch = collate(examples, idx)
            step += 1
            for group in opt.param_groups:
                group["lr"] = noam_lr(step, model.cfg.d_model, 4000)
            with autocast(torch.device("cpu"), amp):
                logits = model(batch.src, batch.tgt_in)
            loss, _ = label_smoothed_nll_loss(
                logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1), 0.1
            )
            opt.zero_grad(set_to_none=True)
            (loss / batch.n_tokens).backward()
            opt.step()
            tokens += batch.n_tokens + batch.n_src_tokens
    elapsed = time.monotonic() - start
    stats = {
        "steps": step,
        "tokens_per_s": round(tokens / elapsed, 1),
        "train_time_s": round(elapsed, 1),
        "parameters": n_params,
        "precision": "bf16" if amp is not None else "fp32",
    }
    return model.eval(), tokenizers, stats


def translate_reference(
    model: ReferenceModel, tokenizers: TokenizerPair, sources: Sequence[str], beam: int = 4
) -> list[str]:
    """The trained reference translates through our decoder (K/V cache, the product's batch
    sizes and output bound), as the registered versions do in `workbench.evaluation.evaluation`."""
    return [r.text for r in translate_ids(model.ours, tokenizers, sources, beam)]
