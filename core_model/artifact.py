"""A trained model on disk: one self-describing folder, no pickle anywhere.

```
<dir>/config.json        {"format", "format_version", "model": ModelConfig, "weights_sha256", ...
                          caller's keys: "training", "metrics", "corpus", ...}
<dir>/model.safetensors  the weights (tied matrices stored once)
<dir>/tokenizer/...      the TokenizerPair the model was trained with
```

Loading validates everything it reads and turns every failure into one `ArtifactError` line,
because users point the workbench at folders that may be half-copied or hand-edited.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from core_model.tokenizer import TokenizerError, TokenizerPair
from core_model.transformer import Transformer
from core_model.transformer.config import ModelConfig

FORMAT = "translation-workbench/model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
_RESERVED = {"format", "format_version", "model", "weights_sha256"}


class ArtifactError(Exception):
    """A model folder is missing, corrupt or does not match itself; message is one line."""


@dataclass
class LoadedModel:
    """What translation needs: the network (eval mode), its tokenizers and its saved config."""

    model: Transformer
    tokenizers: TokenizerPair
    config: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict with tied (aliased) tensors kept once, contiguous and on CPU.

    safetensors refuses tensors that share memory; the model re-ties them on construction, so
    the dropped names are restored by `load_state_dict` through the tie itself.
    """
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu").contiguous().clone()
    return out


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def save_weights(path: str | Path, model: torch.nn.Module, metadata: dict[str, str] | None = None):
    """Write `model`'s unique weights to a safetensors file atomically (tmp + rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file(unique_state_dict(model), str(tmp), metadata=metadata)
    os.replace(tmp, path)


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load a safetensors file into `model`, strictly except for names dropped as tied aliases.

    Raises ArtifactError for unreadable files, missing/unexpected names and shape mismatches.
    """
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"missing weights file {path}")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path.name} is corrupt or truncated ({_one_line(exc)})") from exc
    expected = model.state_dict()
    tied = set(expected) - set(unique_state_dict_names(model))
    missing = sorted(set(expected) - set(state) - tied)
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        detail = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise ArtifactError(f"{path.name} does not match the model config: {detail}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise ArtifactError(
                f"{path.name} does not match the model config: {name} has shape "
                f"{tuple(tensor.shape)}, expected {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state, strict=False)


def unique_state_dict_names(model: torch.nn.Module) -> list[str]:
    """Names `unique_state_dict` keeps (first name of every tied group)."""
    names, seen = [], set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def save_model(
    directory: str | Path,
    model: Transformer,
    tokenizers: TokenizerPair,
    config: dict[str, Any] | None = None,
) -> Path:
    """Write a complete model folder; `config` (training settings, metrics, corpus hash, ...) is
    stored in config.json next to the model's own config. Returns the folder."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    extra = dict(config or {})
    clash = _RESERVED & set(extra)
    if clash:
        raise ValueError(f"config keys reserved by the artifact format: {sorted(clash)}")
    tokenizers.save(d / TOKENIZER_DIR)
    save_weights(d / WEIGHTS_FILE, model, metadata={"format": FORMAT})
    data = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model.cfg.to_dict(),
        "weights_sha256": sha256_file(d / WEIGHTS_FILE),
        **extra,
    }
    _write_json_atomic(d / CONFIG_FILE, data)
    return d


def read_config(directory: str | Path) -> dict[str, Any]:
    """config.json of a model folder, validated to be a JSON object with a model section."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"model folder {d} does not exist")
    path = d / CONFIG_FILE
    if not path.is_file():
        raise ArtifactError(f"model folder {d} has no {CONFIG_FILE}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise ArtifactError(f"{CONFIG_FILE} in {d} is not valid JSON ({_one_line(exc)})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ArtifactError(f"{CONFIG_FILE} in {d} has no 'model' section")
    if data.get("format_version", FORMAT_VERSION) > FORMAT_VERSION:
        raise ArtifactError(f"{d} was written by a newer version (format {data['format_version']})")
    return data


def load_model(
    directory: str | Path, device: str | torch.device = "cpu", verify: bool = True
) -> LoadedModel:
    """Rebuild model + tokenizers from a folder written by `save_model` (eval mode).

    `verify` checks the weights file against the sha256 recorded in config.json, catching
    corruption that still parses (a flipped byte inside a tensor).
    """
    d = Path(directory)
    data = read_config(d)
    try:
        cfg = ModelConfig.from_dict(data["model"])
    except (TypeError, ValueError) as exc:
        raise ArtifactError(
            f"{CONFIG_FILE} in {d}: invalid model config ({_one_line(exc)})"
        ) from exc
    try:
        tokenizers = TokenizerPair.load(d / TOKENIZER_DIR)
    except TokenizerError as exc:
        raise ArtifactError(f"tokenizer of {d} cannot be loaded ({_one_line(exc)})") from exc
    if (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size) != (
        cfg.src_vocab_size,
        cfg.tgt_vocab_size,
    ):
        raise ArtifactError(
            f"tokenizer of {d} has vocabularies {tokenizers.src.vocab_size}/"
            f"{tokenizers.tgt.vocab_size} but the model expects {cfg.src_vocab_size}/"
            f"{cfg.tgt_vocab_size}"
        )
    weights = d / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"model folder {d} has no {WEIGHTS_FILE}")
    recorded = data.get("weights_sha256")
    if verify and recorded and sha256_file(weights) != recorded:
        raise ArtifactError(f"{WEIGHTS_FILE} in {d} does not match its recorded sha256 (corrupt?)")
    model = Transformer(cfg)
    load_weights(model, weights)
    model.to(device).eval()
    return LoadedModel(model, tokenizers, data, d)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__
