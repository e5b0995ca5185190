"""What a run starts from: clean pairs, the device, the tokenizers and model configuration
(new, fine-tuned or resumed) and the optimizer. Kept apart from the loop in `trainer` so that
reads in the order a run happens."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from core_model.artifact import ArtifactError, load_model, read_config
from core_model.tokenizer import TokenizerError, TokenizerPair, tokenizer_safe, train_tokenizers
from core_model.training import checkpoint as ckpt
from core_model.training.config import TrainConfig, TrainingError
from core_model.training.parallel import Ranks
from core_model.training.precision import resolve_device
from core_model.transformer import ModelConfig, Transformer


def clean_pairs(pairs: Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """Pairs with both sides non-empty after cleaning (an empty side teaches nothing)."""
    out = []
    for pair in pairs or []:
        if len(pair) < 2:
            continue
        s, t = tokenizer_safe(pair[0]).strip(), tokenizer_safe(pair[1]).strip()
        if s and t:
            out.append((s, t))
    return out


def choose_device(name: str, ranks: Ranks) -> torch.device:
    """The device to train on; each DDP rank on a GPU takes its own (LOCAL_RANK), one process
    the current one (``torch.cuda.set_device`` wants an index: "cuda" alone is refused)."""
    device = resolve_device(name)
    if device.type == "cuda" and device.index is None:
        index = (
            int(os.environ.get("LOCAL_RANK", ranks.rank))
            if ranks.on
            else torch.cuda.current_device()
        )
        device = torch.device("cuda", index)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


class Continued(NamedTuple):
    """The version a run continues, as far as the recipe needs to know it before loading."""

    model: ModelConfig
    pretrained: dict[str, Any] | None  # the public checkpoint it descends from, if any


def continued(init_from: str | Path) -> Continued:
    """What `init_from` (a model folder) is: its model config and its `pretrained` section
    (written by `core_model.marian`, carried by every run that continues it)."""
    try:
        data = read_config(init_from)
        pretrained = data.get("pretrained")
        model = ModelConfig.from_dict(data["model"])
        return Continued(model, pretrained if isinstance(pretrained, dict) else None)
    except (ArtifactError, TypeError, ValueError) as exc:
        raise TrainingError(f"Cannot fine-tune from {init_from}: {exc}") from exc


def starting_point(
    cfg: TrainConfig,
    train_pairs: list[tuple[str, str]],
    resume_dir: Path | None,
    resume_from: str | Path | None,
    init_from: str | Path | None,
    ranks: Ranks,
    comm_device: torch.device,
) -> tuple[TokenizerPair, ModelConfig, Transformer | None]:
    """(tokenizers, model config, model to fine-tune or None): those of the checkpoint being
    resumed, of the version being fine-tuned, or new ones trained for these pairs."""
    if resume_dir is not None:
        try:
            tokenizers = ckpt.load_tokenizers(resume_dir)
            return tokenizers, ModelConfig.from_dict(ckpt.read_state(resume_dir)["model"]), None
        except (ArtifactError, KeyError, TypeError, ValueError) as exc:
            raise TrainingError(f"Cannot resume from {resume_from}: {exc}") from exc
    if init_from is not None:
        try:
            loaded = load_model(init_from, device="cpu")
        except ArtifactError as exc:
            raise TrainingError(f"Cannot fine-tune from {init_from}: {exc}") from exc
        return loaded.tokenizers, loaded.model.cfg, loaded.model
    tokenizers = _train_tokenizers(cfg, train_pairs, ranks, comm_device)
    sizes = (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size, tokenizers.shared)
    return tokenizers, cfg.model_config(*sizes), None


def _train_tokenizers(
    cfg: TrainConfig, pairs: list[tuple[str, str]], ranks: Ranks, comm_device: torch.device
) -> TokenizerPair:
    """Rank 0 trains the tokenizers; other ranks receive the identical bytes."""
    blob = None
    if ranks.main:
        try:
            tok = train_tokenizers(
                [s for s, _ in pairs],
                [t for _, t in pairs],
                kind=cfg.tokenizer,
                vocab_size=cfg.vocab_size,
                joint=cfg.joint_vocab,
            )
        except TokenizerError as exc:
            raise TrainingError(f"Tokenizer training failed: {exc}") from exc
        blob = tok.to_bytes()
    return TokenizerPair.from_bytes(ranks.broadcast_bytes(blob, comm_device))


def make_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Adam (§5.3: ε=1e-9; β from the config: the paper's β2 0.98 wants large batches);
    AdamW when weight decay is asked for. The fused kernel updates each tensor in one pass:
    on a CPU the default per-operation update took 10 ms a step of the 6.6M-parameter `small`
    model, the fused one 3 (a tenth of a 250-token step at 2 threads)."""
    # the devices a run may train on (resolve_device) are CPUs and CUDA GPUs: both have it
    options: dict[str, Any] = dict(
        lr=0.0, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps, fused=True
    )
    if cfg.weight_decay > 0:
        return torch.optim.AdamW(model.parameters(), weight_decay=cfg.weight_decay, **options)
    return torch.optim.Adam(model.parameters(), **options)
