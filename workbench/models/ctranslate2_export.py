"""Export a model folder to CTranslate2, the inference engine OpenNMT, Argos Translate and
LibreTranslate serve through.

The CTranslate2 model is built directly from our weights with its model-spec API
(`ctranslate2.specs`): no other toolkit in between. Our Transformer maps onto its
`TransformerSpec` part by part — token embeddings scaled by √d_model (or not, as the model
says), our sinusoid table (in the model's layout) as the position encodings, the model's
activation, pre- or post-norm layers (pre-norm with the final LayerNorms), the stacked Q/K/V
matrix of self-attention as one fused linear, the Q and K/V rows of cross-attention as two,
shared embeddings aliased, and the generator as the output projection. PAD and BOS get a
-1e4 bias in the output projection: our decoder never outputs them (probability zero), so
neither may any consumer of the exported model. A model opened from a Marian checkpoint
(`core_model.marian`) exports the same way: its decoder starts from PAD, whose embedding is
the zero vector CTranslate2's own Marian converter starts from.

The output folder holds CTranslate2's files (model.bin, config.json, vocabularies), the
SentencePiece models as `source.spm`/`target.spm`, our own `tokenizer/` folder and
`workbench.json` (where it came from). It is written to a temporary sibling and renamed:
a failed export leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core_model.artifact import ArtifactError, LoadedModel, load_model
from core_model.tokenizer import MarianTokenizer, SentencePieceTokenizer, Tokenizer
from core_model.transformer import Transformer
from core_model.transformer.attention import MultiHeadAttention
from core_model.transformer.positional_encoding import sinusoid_table
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models.engines import QUANTIZATIONS, UNKNOWN_QUANTIZATION
from workbench.models.registry import get_version, load_model_of

FORMAT = "ctranslate2"
METADATA_FILE = "workbench.json"
NEVER_OUTPUT_BIAS = -1e4  # exp(-1e4) is 0 in float32: the token's probability is zero
# Our activations (ModelConfig.activation) by CTranslate2's name.
ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}


def require_ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise WorkbenchError(
            N_("CTranslate2 is not installed (pip install ctranslate2): cannot export or use it.")
        ) from None
    return ctranslate2


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The tokens of a vocabulary by id: CTranslate2 looks tokens up by their text."""
    return tokenizer.ids_to_pieces(range(tokenizer.vocab_size))


# A vocabulary CTranslate2 cannot take, by side: it looks tokens up by their text.
DUPLICATE_PIECES = {
    "source": N_(
        "CTranslate2 cannot express this model: its source vocabulary has pieces with the "
        "same text (CTranslate2 looks tokens up by their text)."
    ),
    "target": N_(
        "CTranslate2 cannot express this model: its target vocabulary has pieces with the "
        "same text (CTranslate2 looks tokens up by their text)."
    ),
}


def _check_expressible(loaded: LoadedModel) -> None:
    """A WorkbenchError naming the first thing CTranslate2 cannot express."""
    for side, tokenizer in (("source", loaded.tokenizers.src), ("target", loaded.tokenizers.tgt)):
        tokens = vocabulary(tokenizer)
        if len(set(tokens)) != len(tokens):
            raise WorkbenchError(DUPLICATE_PIECES[side])


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor) -> None:
    spec.weight, spec.bias = _array(weight), _array(bias)


def _layer_norm(spec: Any, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention(spec: Any, attn: MultiHeadAttention, self_attention: bool) -> None:
    """Self-attention: the stacked [3D, D] matrix as one fused linear (Q, K, V order, as
    CTranslate2 expects); cross-attention: the Q rows, then the K/V rows."""
    w, b = attn.in_proj.weight, attn.in_proj.bias
    d = attn.in_proj.in_features
    if self_attention:
        _linear(spec.linear[0], w, b)
    else:
        _linear(spec.linear[0], w[:d], b[:d])
        _linear(spec.linear[1], w[d:], b[d:])
    _linear(spec.linear[-1], attn.out_proj.weight, attn.out_proj.bias)


def _feed_forward(spec: Any, layer: Any) -> None:
    _layer_norm(spec.layer_norm, layer.ff_block.norm)
    _linear(spec.linear_0, layer.feed_forward.w_1.weight, layer.feed_forward.w_1.bias)
    _linear(spec.linear_1, layer.feed_forward.w_2.weight, layer.feed_forward.w_2.bias)


def build_spec(loaded: LoadedModel) -> Any:
    """The CTranslate2 `TransformerSpec` of a loaded model, weights set and validated."""
    ctranslate2 = require_ctranslate2()
    specs = ctranslate2.specs
    _check_expressible(loaded)
    model: Transformer = loaded.model
    cfg = model.cfg
    positions = _array(sinusoid_table(cfg.max_len, cfg.d_model, cfg.sinusoid_layout))  # [L, D]
    activation = getattr(specs.Activation, ACTIVATIONS[cfg.activation])
    encoder = specs.TransformerEncoderSpec(
        cfg.n_encoder_layers, cfg.n_heads, pre_norm=cfg.norm_first, activation=activation
    )
    decoder = specs.TransformerDecoderSpec(
        cfg.n_decoder_layers, cfg.n_heads, pre_norm=cfg.norm_first, activation=activation
    )
    spec = specs.TransformerSpec(encoder, decoder)

    # Encoder: §3.4 embeddings × √d_model (CTranslate2's scale_embeddings), §3.5 positions.
    encoder.scale_embeddings = cfg.scale_embeddings
    encoder.embeddings[0].weight = _array(model.src_embed.lookup.weight)
    encoder.position_encodings.encodings = positions
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.attn_block.norm)
        _feed_forward(layer_spec.ffn, layer)
    if cfg.norm_first:
        _layer_norm(encoder.layer_norm, model.encoder.final_norm)

    decoder.scale_embeddings = cfg.scale_embeddings
    decoder.embeddings.weight = _array(model.tgt_embed.lookup.weight)
    decoder.position_encodings.encodings = positions
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_block.norm)
        _attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        _layer_norm(layer_spec.attention.layer_norm, layer.cross_block.norm)
        _feed_forward(layer_spec.ffn, layer)
    if cfg.norm_first:
        _layer_norm(decoder.layer_norm, model.decoder.final_norm)
    bias = model.generator.proj.bias.detach().clone()
    bias[[cfg.pad_id, cfg.bos_id]] = NEVER_OUTPUT_BIAS
    _linear(decoder.projection, model.generator.proj.weight, bias)

    src_tokens = vocabulary(loaded.tokenizers.src)
    tgt_tokens = vocabulary(loaded.tokenizers.tgt)
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    spec.config.layer_norm_epsilon = norms[0].eps
    spec.config.unk_token = tgt_tokens[cfg.unk_id]
    spec.config.bos_token = tgt_tokens[cfg.bos_id]
    spec.config.eos_token = tgt_tokens[cfg.eos_id]
    spec.config.decoder_start_token = tgt_tokens[cfg.bos_id]
    # Our sources end with EOS (core_model.batching.encode_source): so do CTranslate2's, for
    # any consumer that passes the bare SentencePiece pieces.
    spec.config.add_source_eos = True
    spec.validate()
    return spec


def export_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    quantization: str = QUANTIZATIONS[0],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write the CTranslate2 export of the model folder `model_dir` to the new folder
    `out_dir` (it must not exist or be empty). `metadata` (version id, languages) goes into
    workbench.json. Returns `out_dir`."""
    _check_destination(out_dir, quantization)
    try:
        loaded = load_model(model_dir)
    except ArtifactError as exc:
        raise WorkbenchError(N_("Cannot export: {reason}"), reason=str(exc)) from None
    return export_loaded(loaded, out_dir, quantization, metadata)


def export_version(version_id: int, out_dir: str | Path, quantization: str) -> Path:
    """`export_ctranslate2` for a stored version (its files verified by the registry)."""
    _check_destination(out_dir, quantization)
    info = get_version(version_id)
    metadata = {
        "version_id": info.id,
        "version_name": info.name,
        "src_lang": info.src_lang,
        "tgt_lang": info.tgt_lang,
        "source_sha256": info.sha256,
    }
    return export_loaded(load_model_of(info), out_dir, quantization, metadata)


def zip_name(version_id: int, quantization: str) -> str:
    return f"version-{version_id}-ctranslate2-{quantization}.zip"


def export_version_zip(version_id: int, quantization: str) -> bytes:
    """The export of a version as a zip (a download); its files under one folder named as
    the zip (`zip_name`)."""
    name = zip_name(version_id, quantization).removesuffix(".zip")
    with tempfile.TemporaryDirectory(prefix="ct2-export-") as tmp:
        folder = export_version(version_id, Path(tmp) / name, quantization)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    zf.write(path, (Path(name) / path.relative_to(folder)).as_posix())
    return buffer.getvalue()


def _check_destination(out_dir: str | Path, quantization: str) -> None:
    if quantization not in QUANTIZATIONS:
        raise WorkbenchError(
            UNKNOWN_QUANTIZATION, quantization=quantization, choices=", ".join(QUANTIZATIONS)
        )
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WorkbenchError(N_("{folder} already exists and is not an empty folder."), folder=out)


def export_loaded(
    loaded: LoadedModel,
    out_dir: str | Path,
    quantization: str = QUANTIZATIONS[0],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write the CTranslate2 export of a loaded model to the new folder `out_dir`."""
    _check_destination(out_dir, quantization)
    out = Path(out_dir)
    spec = build_spec(loaded)
    spec.optimize(quantization=quantization)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        spec.save(str(tmp))
        _write_tokenizers(loaded, tmp)
        info = {
            "format": FORMAT,
            "quantization": quantization,
            "model": loaded.model.cfg.to_dict(),
            **(metadata or {}),
        }
        (tmp / METADATA_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_tokenizers(loaded: LoadedModel, directory: Path) -> None:
    """Our tokenizer folder (what the workbench reads back) and, for SentencePiece, the plain
    models every SentencePiece user can load."""
    tokenizers = loaded.tokenizers
    tokenizers.save(directory / "tokenizer")
    for name, tokenizer in (("source.spm", tokenizers.src), ("target.spm", tokenizers.tgt)):
        if isinstance(tokenizer, SentencePieceTokenizer | MarianTokenizer):
            (directory / name).write_bytes(tokenizer.model_proto)
