"""Model hyper-parameters as one small dataclass, with named presets (cf. nanoGPT)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from core_model.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SpecialIds

# The few places where a public checkpoint's network differs from the paper's (see
# core_model.marian); each list's first entry is the paper's choice, the default.
ACTIVATIONS = ("relu", "swish", "gelu")  # §3.3 FFN's max(0, ·); Marian: swish (x·sigmoid(x))
# §3.5: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos ("interleaved"); Marian stores the same
# sinusoids as all the sines, then all the cosines.
SINUSOID_LAYOUTS = ("interleaved", "sines_then_cosines")

# Sane bounds for every integer field, inclusive (a config.json may be hand-edited: a value
# out of range must be a one-line error, never a division by zero or a 25 GB allocation).
# They are far beyond the paper's "big" model, and keep any buffer allocated from the
# config alone (the positional table: max_len x d_model floats) under 512 MB.
BOUNDS: dict[str, tuple[int, int]] = {
    "src_vocab_size": (4, 1_000_000),  # at least the four special tokens
    "tgt_vocab_size": (4, 1_000_000),
    "d_model": (1, 8192),
    "n_heads": (1, 256),
    "n_encoder_layers": (1, 64),
    "n_decoder_layers": (1, 64),
    "d_ff": (1, 65_536),
    "max_len": (2, 16_384),  # room for BOS and EOS
    "pad_id": (0, 999_999),
    "bos_id": (0, 999_999),
    "eos_id": (0, 999_999),
    "unk_id": (0, 999_999),
}


def _preset(layers: int, norm_first: bool, **sizes: int) -> dict[str, Any]:
    """A preset's fields: N = `layers` in each stack, `sizes` (d_model, n_heads, d_ff: Table 3's
    d_model, h, d_ff), and the paper's P_drop = 0.1 (§5.4)."""
    return dict(
        n_encoder_layers=layers,
        n_decoder_layers=layers,
        dropout=0.1,
        norm_first=norm_first,
        **sizes,
    )


PRESETS: dict[str, dict[str, Any]] = {
    # Demos and tests: memorises a few dozen pairs on a laptop CPU in seconds.
    "tiny": _preset(layers=2, norm_first=True, d_model=64, n_heads=4, d_ff=256),
    # The CPU workhorse: tens of thousands of pairs in minutes. Pre-norm (LayerNorm before each
    # sub-layer) trains stably at the high learning rates short budgets need.
    "small": _preset(layers=3, norm_first=True, d_model=256, n_heads=4, d_ff=1024),
    # The paper's base model exactly (Table 3, "base"; post-norm): wants a GPU and many pairs.
    "base": _preset(layers=6, norm_first=False, d_model=512, n_heads=8, d_ff=2048),
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
    activation: str = ACTIVATIONS[0]
    sinusoid_layout: str = SINUSOID_LAYOUTS[0]
    scale_embeddings: bool = True  # §3.4: embeddings × √d_model (some checkpoints: × 1)
    # Dropout on the attention weights and inside the feed-forward network (between W_1 and
    # W_2); None: `dropout`, as the reference implementations do. Marian trains with 0 there.
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID  # the decoder's start token: BOS, or PAD where a checkpoint says so
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __post_init__(self) -> None:
        """Validate every field (type and bounds), each failure one ValueError line."""
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name} must be between {low} and {high}, got {value}")
        for name in ("norm_first", "shared_vocab", "scale_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name, choices in (("activation", ACTIVATIONS), ("sinusoid_layout", SINUSOID_LAYOUTS)):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            dropout = getattr(self, name)
            if dropout is None and name != "dropout":
                continue
            if isinstance(dropout, bool) or not isinstance(dropout, int | float):
                raise ValueError(f"{name} must be a number, got {dropout!r}")
            if not (math.isfinite(dropout) and 0.0 <= dropout < 1.0):
                raise ValueError(f"{name} must be at least 0 and below 1, got {dropout}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.shared_vocab and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("shared_vocab needs equal source and target vocabulary sizes")
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id}
        specials |= {"eos_id": self.eos_id, "unk_id": self.unk_id}
        distinct = {k: v for k, v in specials.items() if k != "bos_id"}
        if len(set(distinct.values())) != len(distinct) or self.bos_id in (
            self.eos_id,
            self.unk_id,
        ):  # (the decoder may start from PAD: Marian does)
            raise ValueError(f"the special token ids must differ, got {specials}")
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        for name, value in specials.items():
            if value >= smallest:
                raise ValueError(f"{name} ({value}) must be below the vocabulary size ({smallest})")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def token_work(self) -> int:
        """The weights a token meets (every layer's matrices and the output layer): what a
        token costs to train, to compare models' speeds before timing them."""
        d, f = self.d_model, self.d_ff
        encoder = self.n_encoder_layers * (4 * d * d + 2 * d * f)  # self-attention, FFN
        decoder = self.n_decoder_layers * (8 * d * d + 2 * d * f)  # + cross-attention
        return encoder + decoder + d * self.tgt_vocab_size

    @property
    def specials(self) -> SpecialIds:
        return SpecialIds(self.pad_id, self.bos_id, self.eos_id, self.unk_id)

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_dropout_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def size_name(self) -> str:
        """The preset this network has the shape of (layers, widths, norm placement), else
        its layers and width ("6+6, d=512": an imported model, a run's overrides): what a
        run continuing it trains, whatever preset that run was given."""
        shape = ("n_encoder_layers", "n_decoder_layers", "d_model", "n_heads", "d_ff", "norm_first")
        for name, preset in PRESETS.items():
            if all(getattr(self, key) == preset[key] for key in shape):
                return name
        return f"{self.n_encoder_layers}+{self.n_decoder_layers}, d={self.d_model}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """From a config.json ``model`` section; a ValueError names the first bad key."""
        if not isinstance(data, dict):
            raise ValueError("the model config must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(sorted(unknown))}")
        missing = [
            f.name for f in fields(cls) if f.name.endswith("vocab_size") and f.name not in data
        ]
        if missing:
            raise ValueError(f"missing model config keys: {', '.join(missing)}")
        return cls(**data)
