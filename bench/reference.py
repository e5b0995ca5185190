"""The reference the benchmarks measure against: `torch.nn.Transformer` (PyTorch's own
implementation) wrapped in our embeddings, positions and generator, and — for quality — trained
with the paper's settings (§5: post-norm, dropout 0.1, label smoothing 0.1, Adam β=(0.9, 0.98),
ε=1e-9, the Noam schedule with 4000 warm-up steps).

It speaks the interface of `core_model.decoding` (encode / decode without a cache), so the same
beam search decodes both models.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import nn

from core_model import ModelConfig, Transformer
from core_model.batching import collate, encode_pairs, encode_source, make_batches, pad_sources
from core_model.decoding import beam_search
from core_model.tokenizer import TokenizerPair, train_tokenizers
from core_model.training.label_smoothing import label_smoothed_nll_loss
from core_model.training.precision import autocast, resolve_precision
from core_model.training.schedule import noam_lr
from core_model.transformer.masks import padding_mask


class ReferenceModel(nn.Module):
    """torch.nn.Transformer wrapped in our embeddings, positions and generator."""

    def __init__(self, ours: Transformer) -> None:
        super().__init__()
        cfg = ours.cfg
        self.cfg = cfg
        self.src_embed, self.tgt_embed = ours.src_embed, ours.tgt_embed
        self.positions, self.generator = ours.positions, ours.generator
        self.core = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
            norm_first=cfg.norm_first,
        )

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src [B, S] -> (memory [B, S, D], src_mask [B, 1, 1, S] "may attend")."""
        pad = src == self.cfg.pad_id
        memory = self.core.encoder(self.positions(self.src_embed(src)), src_key_padding_mask=pad)
        return memory, padding_mask(src, self.cfg.pad_id)

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, None]:
        """tgt_in [B, T] -> (logits [B, T, V], None); no cache: the whole prefix every step."""
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt_in.size(1), device=tgt_in.device, dtype=torch.bool
        )
        hidden = self.core.decoder(
            self.positions(self.tgt_embed(tgt_in)),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=tgt_in == self.cfg.pad_id,
            memory_key_padding_mask=~src_mask[:, 0, 0, :],
        )
        return self.generator(hidden), None

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        logits, _ = self.decode(tgt_in, memory, src_mask)
        return logits


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


@torch.inference_mode()
def translate_reference(
    model: ReferenceModel, tokenizers: TokenizerPair, sources: Sequence[str], beam: int = 4
) -> list[str]:
    """Beam search (core_model.decoding, no cache) over batches of 32 sentences.

    The output bound is 1.5·|src| + 10, tighter than the translator's 3·|src| + 50: without a
    cache every step re-runs the decoder over the whole prefix, and a reference that has not
    learned to end sentences took over an hour for 1,000 sentences. The bound only cuts such
    runaway outputs (no Multi30k test or validation reference is that long, in words), which
    spares their precision: if anything it favours the reference."""
    out: list[str] = []
    for start in range(0, len(sources), 32):
        ids = [encode_source(tokenizers, s, model.cfg.max_len) for s in sources[start : start + 32]]
        results = beam_search(
            model, pad_sources(ids), beam, max_len_a=1.5, max_len_b=10, use_cache=False
        )
        out.extend(tokenizers.tgt.decode(r.tokens) for r in results)
    return out
