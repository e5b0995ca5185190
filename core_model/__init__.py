"""The handwritten Transformer ("Attention Is All You Need", Vaswani et al., 2017).

Pure PyTorch: usable from a notebook with no database or UI. Modules follow the
paper's order: embedding → positional_encoding → attention → feed_forward →
encoder / decoder (masks) → generator → transformer; then decoding, tokenizer,
training and the on-disk artifact.
"""

from core_model.config import PRESETS, ModelConfig
from core_model.transformer import Transformer

__all__ = ["PRESETS", "ModelConfig", "Transformer"]
