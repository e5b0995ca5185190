"""§3 Model Architecture of "Attention Is All You Need", one module per part, in the paper's
order:

- `config`               the hyper-parameters of Table 3 (d_model, h, N, d_ff, P_drop) + presets
- `embedding`            §3.4 Embeddings (scaled by √d_model) ...
- `generator`            ... and the pre-softmax linear transformation
- `positional_encoding`  §3.5 Positional Encoding (sinusoids)
- `attention`            §3.2 Scaled Dot-Product and Multi-Head Attention (+ the decoding cache)
- `masks`                §3.2.3 padding and causal (auto-regressive) masks
- `feed_forward`         §3.3 Position-wise Feed-Forward Networks
- `dropout`, `residual`  §5.4 Residual Dropout around every sub-layer, with layer normalisation
- `layer_stack`          §3.1 a stack of N identical layers (+ a pre-norm stack's final norm)
- `encoder`, `decoder`   §3.1 Encoder and Decoder Stacks
- `model`                §3 the encoder-decoder `Transformer` assembled from the parts
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core_model.first_use import on_first_use
from core_model.transformer.config import PRESETS, ModelConfig

if TYPE_CHECKING:
    from core_model.transformer.model import Transformer

__all__ = ["PRESETS", "ModelConfig", "Transformer"]
# the config is plain Python; the network needs torch (`core_model.first_use`)
__getattr__ = on_first_use(__name__, {"Transformer": "core_model.transformer.model"})
