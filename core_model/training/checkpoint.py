"""Resumable training checkpoints — safetensors + JSON, no pickle.

```
<out_dir>/checkpoint/state.json            step, epoch, history, selection state, configs,
                                           optimizer param groups
<out_dir>/checkpoint/model.safetensors     current weights
<out_dir>/checkpoint/optimizer.safetensors Adam moments ("state.<i>.<key>") + RNG states
<out_dir>/checkpoint/best.safetensors      best weights so far (by validation), if any
<out_dir>/checkpoint/ring_<k>.safetensors  last N epoch weights (checkpoint averaging)
<out_dir>/checkpoint/tokenizer/...
```

A checkpoint is written to a sibling temp folder and swapped in, so a crash mid-write leaves the
previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core_model.artifact import ArtifactError, unique_state_dict
from core_model.tokenizer import TokenizerError, TokenizerPair
from core_model.training.state import TrainerState

if TYPE_CHECKING:
    import torch
# torch is imported where a checkpoint is written or read: finding one and reading its state
# (how far a run got, `python -m workbench runs`) needs only the files (see core_model.artifact).

STATE_FILE = "state.json"


def find_checkpoint(path: str | Path | None) -> Path | None:
    """`path` itself if it is a checkpoint folder, else `path`/checkpoint if that is one.

    A process killed between the two renames of `save_checkpoint` leaves checkpoint.tmp (the
    new one, complete once its state file exists: that is written last) and checkpoint.old
    (the previous one); they are tried next, newest first.
    """
    if path is None:
        return None
    p = Path(path)
    for cand in (p, p / "checkpoint", p / "checkpoint.tmp", p / "checkpoint.old"):
        if (cand / STATE_FILE).is_file():
            return cand
    return None


def _save_weights(path: Path, state: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(path))


def save_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizers: TokenizerPair,
    train_config: dict[str, Any],
    state: TrainerState,
) -> Path:
    """Write everything needed to continue the run exactly where it stands (epoch end)."""
    import torch

    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _save_weights(tmp / "model.safetensors", unique_state_dict(model))
    opt = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for i, st in opt["state"].items():
        for key, value in st.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"state.{i}.{key}"] = t
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for k, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{k}"] = s
    _save_weights(tmp / "optimizer.safetensors", tensors)
    values = state.state_dict()
    best, recent = values.pop("best_weights"), values.pop("recent_weights")
    if best is not None:
        _save_weights(tmp / "best.safetensors", best)
    for k, weights in enumerate(recent):
        _save_weights(tmp / f"ring_{k}.safetensors", weights)
    tokenizers.save(tmp / "tokenizer")
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()}
        for g in opt["param_groups"]
    ]
    meta = {
        **values,
        "has_best": best is not None,
        "ring_size": len(recent),
        "model": model.cfg.to_dict(),  # type: ignore[attr-defined]
        "training": train_config,
        "param_groups": groups,
    }
    (tmp / STATE_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / STATE_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"checkpoint state {path} is missing or not valid JSON") from exc


def load_tokenizers(directory: str | Path) -> TokenizerPair:
    try:
        return TokenizerPair.load(Path(directory) / "tokenizer")
    except TokenizerError as exc:
        raise ArtifactError(f"checkpoint tokenizer in {directory} cannot be loaded: {exc}") from exc


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises several types for damaged files
        raise ArtifactError(f"checkpoint file {path} is corrupt or missing") from exc


def load_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> TrainerState:
    """Restore weights, optimizer moments and RNG into the given objects; return the run's
    state (step, epoch, history, selection) as it was when the checkpoint was written."""
    import torch

    d = Path(directory)
    meta = read_state(d)
    model.load_state_dict(_load(d / "model.safetensors"), strict=False)
    tensors = _load(d / "optimizer.safetensors")
    opt_state: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        if name.startswith("state."):
            _, i, key = name.split(".", 2)
            opt_state.setdefault(int(i), {})[key] = t
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
    if "rng.cpu" in tensors:
        torch.set_rng_state(tensors["rng.cpu"])
    cuda_states = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
    if cuda_states and device.type == "cuda":
        torch.cuda.set_rng_state_all(cuda_states)
    state = TrainerState()
    state.load_state_dict(
        {
            **meta,
            "best_weights": _load(d / "best.safetensors") if meta.get("has_best") else None,
            "recent_weights": [
                _load(d / f"ring_{k}.safetensors") for k in range(int(meta.get("ring_size", 0)))
            ],
        }
    )
    return state
