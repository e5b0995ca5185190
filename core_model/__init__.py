"""The handwritten Transformer ("Attention Is All You Need", Vaswani et al., 2017).

Pure PyTorch: usable from a notebook with no database or UI.

- `transformer/`  §3 the network, one module per part of the paper, in its order
- `tokenizer`     the vocabulary: SentencePiece subwords or whitespace words
                  (`special_tokens`: the reserved PAD/BOS/EOS/UNK ids, defined once)
- `batching`      §5.1 pairs → length-bucketed, token-budgeted batches
- `training/`     §5 the training loop, its budget, schedule, precision and checkpoints
- `decoding`      §6.1 batched greedy and beam search with a key/value cache
- `translator`    text in, text out
- `inspection`    one sentence looked at inside: attention per layer and head, decoding steps,
                  beam search history, positional encoding, embedding neighbours
- `metrics`       sacreBLEU BLEU and chrF
- `artifact`      a trained model on disk (safetensors + JSON, no pickle)
- `marian`        a public Marian (OPUS-MT) checkpoint opened as this Transformer
- `distributed`   the torchrun entry point for data-parallel training
- `first_use`     names a package imports on first use (the parts that need torch)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core_model.first_use import on_first_use
from core_model.transformer.config import PRESETS, ModelConfig

if TYPE_CHECKING:
    from core_model.transformer.model import Transformer

__all__ = ["PRESETS", "ModelConfig", "Transformer"]
__getattr__ = on_first_use(__name__, {"Transformer": "core_model.transformer.model"})
