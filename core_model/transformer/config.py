"""Model hyper-parameters as one small dataclass, with named presets (cf. nanoGPT)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from core_model.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

PRESETS: dict[str, dict[str, Any]] = {
    # Demos and tests: memorises a few dozen pairs on a laptop CPU in seconds.
    "tiny": dict(
        d_model=64,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=256,
        dropout=0.1,
        norm_first=True,
    ),
    # The CPU workhorse: tens of thousands of pairs in minutes. Pre-norm (LayerNorm before each
    # sub-layer) trains stably at the high learning rates short budgets need.
    "small": dict(
        d_model=256,
        n_heads=4,
        n_encoder_layers=3,
        n_decoder_layers=3,
        d_ff=1024,
        dropout=0.1,
        norm_first=True,
    ),
    # The paper's base model exactly (Table 3, "base"; post-norm): wants a GPU and many pairs.
    "base": dict(
        d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048, dropout=0.1
    ),
}


@dataclass
class ModelConfig:
    """Everything needed to rebuild the network; saved as JSON next to the weights."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 1024
    norm_first: bool = False  # False = post-norm as in the paper; True = pre-norm
    shared_vocab: bool = False  # one embedding for both sides, tied with the generator (§3.4)
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.shared_vocab and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("shared_vocab needs equal source and target vocabulary sizes")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(sorted(unknown))}")
        return cls(**data)
