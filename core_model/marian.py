"""Open a public Marian checkpoint (the OPUS-MT models, in Hugging Face's `MarianMTModel`
format) as our Transformer, so it can be translated with, inspected and fine-tuned like a
model trained here.

A Marian model is the paper's encoder-decoder with a few documented variations, each an
option of `ModelConfig` (the defaults are the paper's): the feed-forward activation (swish),
the sinusoid table's layout (all sines, then all cosines), one embedding matrix shared by
encoder, decoder and the pre-softmax layer, an output bias (`final_logits_bias`, our
generator's bias), a decoder that starts from PAD, post-norm, no attention or activation
dropout. Nothing of `transformers` is imported: the weights are read with safetensors (or
`torch.load(weights_only=True)` for pytorch_model.bin), the vocabulary with SentencePiece and
vocab.json (`core_model.tokenizer.MarianTokenizer`).

The folder, as `MarianMTModel.save_pretrained` and the tokenizer write it:

```
config.json            model_type "marian": sizes, activation, special ids
model.safetensors      the weights (or pytorch_model.bin)
source.spm target.spm  the SentencePiece models of each side
vocab.json             piece -> id, one vocabulary for both sides
tokenizer_config.json  (optional) source_lang, target_lang; separate_vocabs is refused
README.md              (optional) the model card: its benchmark table is kept as notes, its
LICENSE                licence and the config's hub id as the version's origin (`model_card`)
```

Every file is read as `core_model.untrusted_files` reads it: a regular file (never a link,
a FIFO or a device), bounded, its JSON nested no deeper than a config needs.

Each variation's option and the parameter names, Marian's beside ours, are tabled in one
place: docs/ARCHITECTURE.md, "A Marian checkpoint in our Transformer".

Every problem is one `MarianError` line, raised before anything is written: a folder of
another `model_type`, a missing file, a variant we do not express (separate vocabularies,
untied output layer, pre-norm, different encoder/decoder widths), a tensor whose shape does
not match the config, a pickle that `weights_only` refuses, a multilingual model without its
target-language token (the error lists them).

(Over 450 lines on purpose: one concept, reading a checkpoint into our Transformer; its
parameter-name table and the checks of each variation, each with its reason, are most of it.)
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from core_model import model_card
from core_model.artifact import MAX_ARTIFACT_BYTES, save_model
from core_model.tokenizer import MarianTokenizer, TokenizerError, TokenizerPair, language_tokens
from core_model.transformer import ModelConfig, Transformer
from core_model.transformer.positional_encoding import sinusoid_table
from core_model.untrusted_files import UntrustedFileError, read_bytes, read_json

MODEL_TYPE = "marian"
CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # the first present is read
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
TOKENIZER_CONFIG = "tokenizer_config.json"
# transformers' activation names -> ours
ACTIVATION_NAMES = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
EMBEDDING_NAMES = (
    "shared.weight",
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "lm_head.weight",
)
POSITION_NAMES = ("encoder.embed_positions.weight", "decoder.embed_positions.weight")
POSITION_TOLERANCE = 1e-3  # a stored sinusoid table must be the one we compute


class MarianError(ValueError):
    """The folder is not a Marian checkpoint we can open; the message is one line."""


@dataclass
class MarianModel:
    """An opened checkpoint: the network (eval mode), its tokenizers, and what it says about
    itself (recorded with the model as its `pretrained` section)."""

    model: Transformer
    tokenizers: TokenizerPair
    source: dict[str, Any] = field(default_factory=dict)


def is_marian(folder: str | Path) -> bool:
    """Whether `folder` holds a config.json of model_type "marian" (False without one); a
    config.json that cannot be read safely (a link, a FIFO, hostile JSON) is a MarianError
    whatever the folder holds."""
    try:
        config = _read_json(Path(folder), CONFIG_FILE)
    except FileNotFoundError:
        return False
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def target_tokens(folder: str | Path) -> list[str]:
    """The target-language tokens of a multilingual checkpoint (one must be chosen), or []."""
    try:
        vocab = _read_json(Path(folder), "vocab.json")
    except FileNotFoundError:
        return []
    return language_tokens(vocab) if isinstance(vocab, dict) else []


def read_marian(
    folder: str | Path, target_token: str | None = None, name: str | None = None
) -> MarianModel:
    """Open the checkpoint in `folder` (see the module docstring). `target_token`: the
    target-language token every source starts with, for a multilingual model (required
    there, refused elsewhere). `name`: the checkpoint's (its folder's by default; an OPUS-MT
    name says its languages)."""
    d = Path(folder)
    if not d.is_dir():
        raise MarianError(f"{d} is not a folder")
    try:
        config = _read_json(d, CONFIG_FILE)
    except FileNotFoundError:
        raise MarianError(f"{d} has no {CONFIG_FILE}") from None
    if not isinstance(config, dict):
        raise MarianError(f"{CONFIG_FILE} in {d} is not a JSON object")
    kind = config.get("model_type")
    if kind != MODEL_TYPE:
        raise MarianError(f"{d} holds no Marian model ({CONFIG_FILE}: model_type {kind!r})")
    weights = _files(d)
    tokenizers = _tokenizers(d, target_token)
    cfg = model_config(config, tokenizers.specials.unk)
    _check_vocabulary(tokenizers, cfg)
    state = _weights(weights, cfg)
    model = Transformer(cfg)
    model.load_state_dict(state, strict=True)
    model.eval()
    source = {
        "format": MODEL_TYPE,
        "model_type": MODEL_TYPE,
        "name": name or d.name,
        "target_token": target_token,
        **_languages(d, name or d.name),
        **describe(d, config),
    }
    return MarianModel(model, tokenizers, source)


def convert_marian(
    folder: str | Path,
    out_dir: str | Path,
    target_token: str | None = None,
    name: str | None = None,
) -> MarianModel:
    """`read_marian`, then write it as a model folder of ours (`core_model.artifact`) to
    `out_dir`, with the checkpoint's description as the config's `pretrained` section."""
    opened = read_marian(folder, target_token, name)
    save_model(out_dir, opened.model, opened.tokenizers, {"pretrained": opened.source})
    return opened


# --------------------------------------------------------------------------- the config


def model_config(config: dict[str, Any], unk_id: int) -> ModelConfig:
    """Our ModelConfig of a Marian config.json (transformers' MarianConfig defaults where a
    key is absent; <unk> is vocab.json's); a MarianError for what we do not express."""

    def get(key: str, default: Any) -> Any:
        value = config.get(key, default)
        return default if value is None else value

    unsupported = [
        ("share_encoder_decoder_embeddings", True, "separate source and target embeddings"),
        ("tie_word_embeddings", True, "an output layer apart from the embeddings"),
        ("normalize_before", False, "pre-norm layers"),
        ("normalize_embedding", False, "a LayerNorm on the embeddings"),
        ("add_final_layer_norm", False, "a final LayerNorm"),
    ]
    for key, expected, what in unsupported:
        if get(key, expected) != expected:
            raise MarianError(f"this Marian model has {what} ({key}): not supported")
    for side, default in (("attention_heads", 16), ("ffn_dim", 4096)):
        if get(f"encoder_{side}", default) != get(f"decoder_{side}", default):
            raise MarianError(f"encoder_{side} and decoder_{side} differ: not supported")
    vocab_size = get("vocab_size", 58101)
    if get("decoder_vocab_size", vocab_size) != vocab_size:
        raise MarianError("decoder_vocab_size differs from vocab_size: not supported")
    activation = ACTIVATION_NAMES.get(str(get("activation_function", "gelu")))
    if activation is None:
        raise MarianError(
            f"activation_function {config.get('activation_function')!r} is not supported "
            f"(one of {', '.join(ACTIVATION_NAMES)})"
        )
    pad = get("pad_token_id", 58100)
    if get("decoder_start_token_id", pad) != pad:
        raise MarianError("decoder_start_token_id is not the pad id: not supported")
    eos = get("eos_token_id", 0)
    if isinstance(eos, list) and len(eos) == 1:
        eos = eos[0]
    try:
        return ModelConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=get("d_model", 1024),
            n_heads=get("encoder_attention_heads", 16),
            n_encoder_layers=get("encoder_layers", 12),
            n_decoder_layers=get("decoder_layers", 12),
            d_ff=get("encoder_ffn_dim", 4096),
            dropout=get("dropout", 0.1),
            attention_dropout=get("attention_dropout", 0.0),
            activation_dropout=get("activation_dropout", 0.0),
            max_len=get("max_position_embeddings", 1024),
            norm_first=False,
            shared_vocab=True,
            activation=activation,
            sinusoid_layout="sines_then_cosines",
            scale_embeddings=bool(get("scale_embedding", False)),
            pad_id=pad,
            bos_id=pad,
            eos_id=eos,
            unk_id=unk_id,
        )
    except (TypeError, ValueError) as exc:
        raise MarianError(f"{CONFIG_FILE}: {exc}") from None


# --------------------------------------------------------------------------- the files


def _files(d: Path) -> Path:
    """The weights file; a MarianError for a missing, linked or oversized file."""
    total = 0
    for name in (CONFIG_FILE, *TOKENIZER_FILES):
        total += _regular_size(d, name)
    weights = next((d / n for n in WEIGHT_FILES if (d / n).exists()), None)
    if weights is None:
        raise MarianError(f"{d} has no {' or '.join(WEIGHT_FILES)}")
    total += _regular_size(d, weights.name)
    if total > MAX_ARTIFACT_BYTES:
        raise MarianError(f"{d} is larger than {MAX_ARTIFACT_BYTES >> 20} MiB")
    return weights


def _regular_size(d: Path, name: str) -> int:
    try:
        info = (d / name).lstat()
    except FileNotFoundError:
        raise MarianError(f"{d} has no {name}") from None
    except OSError as exc:
        raise MarianError(f"cannot read {name} in {d} ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise MarianError(f"{name} in {d} is not a regular file (a link?)")
    return info.st_size


def _read_json(d: Path, name: str) -> Any:
    """The JSON of `name` (``untrusted_files.read_json``); FileNotFoundError when missing."""
    try:
        return read_json(d / name)
    except UntrustedFileError as exc:
        raise MarianError(str(exc)) from None


def describe(d: Path, config: dict[str, Any]) -> dict[str, Any]:
    """`model_card.describe` (card rows, hub id, licence), its refusals as MarianErrors."""
    try:
        return model_card.describe(d, config)
    except UntrustedFileError as exc:
        raise MarianError(str(exc)) from None


def _tokenizers(d: Path, target_token: str | None) -> TokenizerPair:
    """Source and target sides of the shared vocabulary."""
    settings = _tokenizer_config(d)
    if settings.get("separate_vocabs"):
        raise MarianError("this Marian model has separate source and target vocabularies")
    try:
        vocab = _read_json(d, "vocab.json")
    except FileNotFoundError:
        raise MarianError(f"{d} has no vocab.json") from None
    choices = language_tokens(vocab) if isinstance(vocab, dict) else []
    if choices and target_token is None:
        shown = ", ".join(choices[:40]) + (" …" if len(choices) > 40 else "")
        raise MarianError(f"this model translates into several languages: choose one of {shown}")
    if target_token is not None and target_token not in choices:
        raise MarianError(
            f"{target_token!r} is not a target-language token of this model"
            + (f" (one of {', '.join(choices[:40])})" if choices else " (it has none)")
        )
    try:
        src = MarianTokenizer(read_bytes(d / "source.spm", MAX_ARTIFACT_BYTES), vocab, target_token)
        tgt = MarianTokenizer(read_bytes(d / "target.spm", MAX_ARTIFACT_BYTES), vocab)
    except (OSError, ValueError, TokenizerError) as exc:
        raise MarianError(f"the vocabulary of {d} cannot be read ({_one_line(exc)})") from None
    return TokenizerPair(src, tgt, shared=False)


def _check_vocabulary(tokenizers: TokenizerPair, cfg: ModelConfig) -> None:
    """vocab.json and config.json agree on the size and on where <pad> and </s> are."""
    tgt = tokenizers.tgt
    if tgt.vocab_size != cfg.tgt_vocab_size:
        raise MarianError(
            f"vocab.json has {tgt.vocab_size} pieces but {CONFIG_FILE} says {cfg.tgt_vocab_size}"
        )
    if tgt.specials != cfg.specials:
        raise MarianError(
            f"vocab.json puts <pad> at {tgt.specials.pad} and </s> at {tgt.specials.eos}, "
            f"{CONFIG_FILE} at {cfg.pad_id} and {cfg.eos_id}"
        )


def _tokenizer_config(d: Path) -> dict[str, Any]:
    try:
        settings = _read_json(d, TOKENIZER_CONFIG)
    except FileNotFoundError:
        return {}
    return settings if isinstance(settings, dict) else {}


def _languages(d: Path, name: str) -> dict[str, str]:
    """The languages the checkpoint names: tokenizer_config.json's, else an OPUS-MT name
    (opus-mt-zh-en); the caller's choice overrides them."""
    settings = _tokenizer_config(d)
    src, tgt = settings.get("source_lang"), settings.get("target_lang")
    if isinstance(src, str) and isinstance(tgt, str) and src and tgt:
        return {"src_lang": src, "tgt_lang": tgt}
    match = re.fullmatch(r"(?:.*[-_])?opus-mt-(?:tc-[a-z]+-)?([A-Za-z]+)-([A-Za-z]+)", name)
    return {"src_lang": match[1], "tgt_lang": match[2]} if match else {}


# --------------------------------------------------------------------------- the weights


def _weights(path: Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under our names (see the module docstring's table)."""
    raw = _load_tensors(path)
    names = {k.removeprefix("model."): k for k in raw}
    if len(names) != len(raw):
        raise MarianError(f"{path.name} names some tensors twice (with and without 'model.')")
    tensors = {short: raw[full] for short, full in names.items()}
    d, v = cfg.d_model, cfg.tgt_vocab_size
    state: dict[str, torch.Tensor] = {}

    def take(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in tensors:
            raise MarianError(f"{path.name} has no {name}")
        t = tensors.pop(name)
        if tuple(t.shape) != shape:
            raise MarianError(
                f"{path.name} does not match {CONFIG_FILE}: {name} has shape "
                f"{tuple(t.shape)}, expected {shape}"
            )
        return t.float()

    embeddings = [(n, take(n, (v, d))) for n in EMBEDDING_NAMES if n in tensors]
    if not embeddings:
        raise MarianError(f"{path.name} has no shared.weight (the embeddings)")
    first_name, embedding = embeddings[0]
    for name, other in embeddings[1:]:
        if not torch.equal(other, embedding):
            raise MarianError(f"{name} differs from {first_name}: untied embeddings")
    state["src_embed.lookup.weight"] = embedding
    state["generator.proj.weight"] = embedding
    bias = tensors.pop("final_logits_bias", None)
    if bias is not None and tuple(bias.shape) != (1, v):
        raise MarianError(f"final_logits_bias has shape {tuple(bias.shape)}, expected {(1, v)}")
    state["generator.proj.bias"] = bias[0].float() if bias is not None else torch.zeros(v)
    table = sinusoid_table(cfg.max_len, d, cfg.sinusoid_layout)
    for name in POSITION_NAMES:
        if name in tensors and _differs(take(name, (cfg.max_len, d)), table):
            raise MarianError(f"{name} is not the sinusoid table Marian computes")

    def linear(ours: str, theirs: str, rows: int, cols: int) -> None:
        state[f"{ours}.weight"] = take(f"{theirs}.weight", (rows, cols))
        state[f"{ours}.bias"] = take(f"{theirs}.bias", (rows,))

    def attention(ours: str, theirs: str) -> None:
        for part in ("weight", "bias"):
            shape = (d, d) if part == "weight" else (d,)
            q, k, val = (take(f"{theirs}.{x}_proj.{part}", shape) for x in "qkv")
            state[f"{ours}.in_proj.{part}"] = torch.cat([q, k, val])  # [3D, D]: Q, K, V rows
        linear(f"{ours}.out_proj", f"{theirs}.out_proj", d, d)

    def norm(ours: str, theirs: str) -> None:
        state[f"{ours}.weight"] = take(f"{theirs}.weight", (d,))
        state[f"{ours}.bias"] = take(f"{theirs}.bias", (d,))

    def feed_forward(ours: str, theirs: str) -> None:
        linear(f"{ours}.feed_forward.w_1", f"{theirs}.fc1", cfg.d_ff, d)
        linear(f"{ours}.feed_forward.w_2", f"{theirs}.fc2", d, cfg.d_ff)
        norm(f"{ours}.ff_block.norm", f"{theirs}.final_layer_norm")

    for i in range(cfg.n_encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"encoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.attn_block.norm", f"{theirs}.self_attn_layer_norm")
        feed_forward(ours, theirs)
    for i in range(cfg.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"decoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.self_block.norm", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn")
        norm(f"{ours}.cross_block.norm", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(ours, theirs)
    if tensors:
        extra = sorted(tensors)
        raise MarianError(f"{path.name} does not match {CONFIG_FILE}: unexpected {extra[:3]}")
    state["tgt_embed.lookup.weight"] = embedding
    return state


def _differs(stored: torch.Tensor, table: torch.Tensor) -> bool:
    return bool((stored - table).abs().max() > POSITION_TOLERANCE)


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the weights file, on the CPU. A pickle (pytorch_model.bin) is read
    with `weights_only=True`: tensors and plain containers only, never code."""
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise MarianError(f"{path.name} is corrupt or truncated ({_one_line(exc)})") from None
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # (the unpickler raises many kinds)
        raise MarianError(
            f"{path.name} cannot be read safely ({_one_line(exc)}): only plain tensors are "
            "accepted (weights_only)"
        ) from None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in raw.items()
    ):
        raise MarianError(f"{path.name} is not a dictionary of named tensors")
    return raw


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__
