"""A trained model on disk: one self-describing folder, no pickle anywhere.

```
<dir>/config.json        {"format", "format_version", "model": ModelConfig, "weights_sha256", ...
                          caller's keys: "training", "metrics", "corpus", ...}
<dir>/model.safetensors  the weights (tied matrices stored once)
<dir>/tokenizer/...      the TokenizerPair the model was trained with
```

Loading validates everything it reads and turns every failure into one `ArtifactError` line,
because users point the workbench at folders that may be half-copied or hand-edited: every
model config value is checked against sane bounds (`ModelConfig`), and the weights file's
tensor names and shapes are checked against the config *before* anything is allocated.

What a model folder consists of is exactly `model_files`: config.json, model.safetensors
and the regular files under tokenizer/. Anything else in the folder (notes, a symbolic link
to /etc/shadow) is not part of the model and is never read, copied or zipped; a symbolic
link or special file (FIFO, device) among the model files is refused, and so is a folder
of more than `MAX_ARTIFACT_BYTES`.

Checksums. config.json records `weights_sha256` (the weights alone; checked on load with
`verify=True`). `artifact_digest` covers the whole model: the `model` section of config.json
(canonical JSON) and the bytes of every other model file (weights, tokenizer). The registry
stores it as a version's sha256 and checks it before loading, so a hand-edited model config
is caught like a flipped byte in the weights. Versions registered before the digest existed
stored the weights' sha256 instead; `matches_recorded_sha256` still accepts that (their
config is then not covered, as before), so old folders stay loadable. The digest leaves out
config.json's other keys (training settings, metrics, corpus), which describe the model but
do not change what it computes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError, safe_open

from core_model.tokenizer import TokenizerError, TokenizerPair
from core_model.transformer.config import ModelConfig
from core_model.untrusted_files import UntrustedFileError, read_json

if TYPE_CHECKING:
    import torch

    from core_model.transformer import Transformer
# torch (and the network, safetensors' torch half) are imported where weights are read or
# written: listing versions or runs reads folders and configs only (`core_model.first_use`).

FORMAT = "translation-workbench/model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
_RESERVED = {"format", "format_version", "model", "weights_sha256"}
MAX_ARTIFACT_BYTES = 2 << 30  # all files of one model; the paper's "base" model is ~250 MB
MAX_TOKENIZER_FILES = 64


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


def model_files(directory: str | Path) -> list[str]:
    """The files the model folder consists of, as sorted relative POSIX paths (see the module
    docstring); ArtifactError for a link, a special file, too many files or too many bytes."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"model folder {d} does not exist")
    found: list[str] = []
    total = 0
    for rel in (CONFIG_FILE, WEIGHTS_FILE):
        total += _regular_size(d, rel)
        found.append(rel)
    info = _lstat(d, TOKENIZER_DIR)
    if info is not None:
        if not stat.S_ISDIR(info.st_mode):
            raise ArtifactError(f"{TOKENIZER_DIR} in {d} is not a folder (or is a link)")
        for root, dirs, names in os.walk(d / TOKENIZER_DIR):
            for name in sorted(dirs + names):
                rel = (Path(root) / name).relative_to(d).as_posix()
                info = _lstat(d, rel)
                if info is not None and stat.S_ISDIR(info.st_mode):
                    continue  # walked into next (os.walk does not follow links)
                total += _regular_size(d, rel)
                found.append(rel)
                if len(found) - 2 > MAX_TOKENIZER_FILES:
                    raise ArtifactError(f"{TOKENIZER_DIR} in {d} has too many files")
    if total > MAX_ARTIFACT_BYTES:
        raise ArtifactError(
            f"model folder {d} is larger than {MAX_ARTIFACT_BYTES >> 20} MiB ({total >> 20} MiB)"
        )
    return sorted(found)


def _lstat(d: Path, rel: str) -> os.stat_result | None:
    try:
        return os.lstat(d / rel)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ArtifactError(f"cannot read {rel} in {d} ({exc.strerror})") from exc


def _regular_size(d: Path, rel: str) -> int:
    info = _lstat(d, rel)
    if info is None:
        raise ArtifactError(f"model folder {d} has no {rel}")
    if stat.S_ISLNK(info.st_mode):
        raise ArtifactError(f"{rel} in {d} is a symbolic link: a model folder holds real files")
    if not stat.S_ISREG(info.st_mode):
        raise ArtifactError(f"{rel} in {d} is not a regular file")
    return info.st_size


def copy_model(source: str | Path, destination: str | Path) -> None:
    """Copy the model files (only those) into the new folder `destination`, never following
    a link and never copying more than `MAX_ARTIFACT_BYTES` even if a file grows meanwhile."""
    src, dst = Path(source), Path(destination)
    budget = MAX_ARTIFACT_BYTES
    for rel in model_files(src):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(src / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise ArtifactError(f"cannot read {rel} in {src} ({exc.strerror})") from exc
        with os.fdopen(fd, "rb") as fin, open(target, "xb") as fout:
            if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
                raise ArtifactError(f"{rel} in {src} is not a regular file")
            while block := fin.read(min(1 << 20, budget + 1)):
                budget -= len(block)
                if budget < 0:
                    raise ArtifactError(
                        f"model folder {src} is larger than {MAX_ARTIFACT_BYTES >> 20} MiB"
                    )
                fout.write(block)


def artifact_digest(directory: str | Path) -> str:
    """sha256 over the model config and every model file but config.json (module docstring)."""
    d = Path(directory)
    files = model_files(d)
    model = read_config(d)["model"]
    h = hashlib.sha256(b"translation-workbench model digest 1\n")
    h.update(json.dumps(model, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    for rel in files:
        if rel != CONFIG_FILE:
            h.update(f"{rel}\t{sha256_file(d / rel)}\n".encode())
    return h.hexdigest()


def matches_recorded_sha256(directory: str | Path, recorded: str) -> bool:
    """Whether the folder matches a registry's recorded sha256: its `artifact_digest`, or for
    versions registered before the digest existed the sha256 of the weights file alone."""
    d = Path(directory)
    if artifact_digest(d) == recorded:
        return True
    return sha256_file(d / WEIGHTS_FILE) == recorded


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def save_weights(path: str | Path, model: torch.nn.Module, metadata: dict[str, str] | None = None):
    """Write `model`'s unique weights to a safetensors file atomically (tmp + rename)."""
    from safetensors.torch import save_file

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file(unique_state_dict(model), str(tmp), metadata=metadata)
    os.replace(tmp, path)


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load a safetensors file into `model`, strictly except for names dropped as tied aliases.

    Raises ArtifactError for unreadable files, missing/unexpected names and shape mismatches.
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"missing weights file {path}")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path.name} is corrupt or truncated ({_one_line(exc)})") from exc
    _match_shapes(path, {k: tuple(v.shape) for k, v in state.items()}, model)
    model.load_state_dict(state, strict=False)


def _match_shapes(path: Path, shapes: dict[str, tuple[int, ...]], model: torch.nn.Module) -> None:
    """ArtifactError unless the file's tensors are `model`'s (tied aliases may be absent)."""
    expected = model.state_dict(keep_vars=True)
    unique: dict[int, str] = {}
    for name, tensor in expected.items():
        unique.setdefault(id(tensor), name)
    tied = set(expected) - set(unique.values())
    missing = sorted(set(expected) - set(shapes) - tied)
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        detail = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise ArtifactError(f"{path.name} does not match the model config: {detail}")
    for name, shape in shapes.items():
        if shape != tuple(expected[name].shape):
            raise ArtifactError(
                f"{path.name} does not match the model config: {name} has shape "
                f"{shape}, expected {tuple(expected[name].shape)}"
            )


def _check_weights_before_loading(path: Path, cfg: ModelConfig) -> None:
    """Names and shapes from the file's header against a model built on the meta device:
    a config that does not fit its weights is refused before any memory is allocated."""
    import torch

    from core_model.transformer import Transformer

    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path.name} is corrupt or truncated ({_one_line(exc)})") from exc
    with torch.device("meta"):
        skeleton = Transformer(cfg)
    _match_shapes(path, shapes, skeleton)


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
        data = read_json(path)  # (a folder made elsewhere is read through here too)
    except UntrustedFileError as exc:
        raise ArtifactError(str(exc)) from None
    except OSError as exc:
        raise ArtifactError(f"{CONFIG_FILE} in {d} cannot be read ({_one_line(exc)})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ArtifactError(f"{CONFIG_FILE} in {d} has no 'model' section")
    version = data.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{CONFIG_FILE} in {d} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
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
    except (TypeError, ValueError, OverflowError) as exc:
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
    if tokenizers.specials != cfg.specials:
        raise ArtifactError(
            f"tokenizer of {d} reserves ids {tuple(tokenizers.specials)} (pad, bos, eos, unk) "
            f"but the model {tuple(cfg.specials)}"
        )
    weights = d / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"model folder {d} has no {WEIGHTS_FILE}")
    recorded = data.get("weights_sha256")
    if verify and recorded and sha256_file(weights) != recorded:
        raise ArtifactError(f"{WEIGHTS_FILE} in {d} does not match its recorded sha256 (corrupt?)")
    _check_weights_before_loading(weights, cfg)
    from core_model.transformer import Transformer

    model = Transformer(cfg)
    load_weights(model, weights)
    model.to(device).eval()
    return LoadedModel(model, tokenizers, data, d)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__
