"""The training engine (§5 of the paper): batches by length, label smoothing, Adam + warm-up.

One call, `train(train_pairs, valid_pairs, cfg)`, does everything the workbench needs:
tokenizers, model, the loop (teacher forcing, bf16 autocast where it pays, gradient clipping),
per-epoch validation (loss + BLEU/chrF of greedy translations), early stopping, checkpoint
averaging, resumable checkpoints, progress callbacks and cooperative cancellation. It also runs
unchanged under `torchrun` with DistributedDataParallel (see core_model/distributed.py).

Budget: with `epochs=None` the number of steps adapts to the corpus (see `plan_budget`), so a
click on "Train" with 20 pairs yields a model that reproduces them and 30k pairs get a sensible
number of epochs.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist
from torch import nn

from core_model import checkpoint as ckpt
from core_model.artifact import ArtifactError, load_model, save_model, unique_state_dict
from core_model.batching import (
    Example,
    collate,
    encode_pairs,
    make_batches,
    shard_batches,
)
from core_model.checkpoint import average_state_dicts
from core_model.config import PRESETS, ModelConfig
from core_model.label_smoothing import label_smoothed_nll_loss
from core_model.metrics import score as mt_score
from core_model.schedule import LRSchedule, noam_factor_for_peak, noam_lr
from core_model.tokenizer import (
    TokenizerError,
    TokenizerPair,
    clean_text,
    train_tokenizers,
)
from core_model.transformer import Transformer
from core_model.translator import translate_ids


class TrainingError(Exception):
    """Training cannot go on; the message is one sentence meant for the user."""


@dataclass
class TrainConfig:
    """Every knob of a training run; saved with the model so the run can be reproduced."""

    preset: str = "tiny"
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"norm_first": True}
    dropout: float | None = None  # overrides the preset's dropout
    # budget
    epochs: int | None = None  # None => adaptive budget (plan_budget)
    max_steps: int | None = None  # hard cap on optimizer steps
    time_budget_s: float | None = None  # stop training after this many seconds
    min_steps: int = 400  # adaptive: fewest optimizer steps (small corpora are repeated)
    max_adaptive_steps: int = 20000  # adaptive: most optimizer steps
    adaptive_passes: int = 30  # adaptive: target passes over a mid-size corpus
    min_epoch_steps: int = 50  # an "epoch" has at least this many steps (tiny corpora repeat)
    min_valid_pairs: int = 20  # fewer validation pairs: reported, not used to stop or select
    memorise_max_pairs: int = 200  # adaptive + no validation pairs + corpus at most this big:
    memorise_epochs: int = 2  # stop after this many epochs reproducing every training pair
    memorise_max_steps: int = 1000  # step budget while waiting for that
    # batches
    max_tokens_per_batch: int = 4096  # padded tokens (max(src, tgt) · sentences) per batch
    max_len: int = 256  # tokens per side; longer sentences are truncated
    # optimisation
    lr_schedule: str = "auto"  # 'noam' | 'constant' | 'linear' | 'auto' (constant when short)
    lr: float | None = None  # peak rate; None => the paper's peak for d_model, warm-up 4000
    lr_factor: float = 1.0  # scale of the Noam curve (used when lr is None)
    warmup_steps: int | None = None  # None => adapted to the budget
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    precision: str = "auto"  # 'auto' | 'fp32' | 'bf16'
    device: str = "auto"  # 'auto' | 'cpu' | 'cuda' | 'cuda:N'
    seed: int = 0
    num_threads: int | None = None  # CPU threads; None => 1 for small models, else torch's
    # validation / model selection
    patience: int | None = 5  # epochs without improvement before stopping; None/0 = never
    early_stop_metric: str = "auto"  # 'bleu' | 'loss' | 'auto' (bleu when translations exist)
    valid_max_sentences: int = 200  # validation pairs translated per epoch (speed)
    valid_beam: int = 1
    average_last: int = 0  # >1: also try the average of the last N epoch checkpoints
    # tokenizer
    tokenizer: str = "sentencepiece"  # 'sentencepiece' | 'whitespace'
    vocab_size: int = 8000
    joint_vocab: bool | None = None  # None => joint when both sides share an alphabet
    # reporting / files
    progress_every_s: float = 2.0
    keep_checkpoint: bool = False  # keep out_dir/checkpoint after a successful run

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown training config keys: {', '.join(sorted(unknown))}")
        data = dict(data)
        if "adam_betas" in data:
            data["adam_betas"] = tuple(data["adam_betas"])
        return cls(**data)


class StopReason(StrEnum):
    """Why a run ended. Values are stored in the database (`training_runs.stop_reason`)."""

    EPOCHS = "epochs"  # every planned epoch was trained
    STEP_LIMIT = "max_steps"  # the step budget (max_steps, or the automatic ceiling) ran out
    TIME_BUDGET = "time_budget"  # the wall-clock budget ran out
    EARLY_STOPPING = "early_stopping"  # validation stopped improving for `patience` epochs
    MEMORISED = "memorised"  # a small corpus is reproduced exactly
    CANCELLED = "cancelled"

    def describe(self, patience: int | None = None) -> str:
        """The reason in words, for people ("why did my run stop at step 200?")."""
        if self is StopReason.EARLY_STOPPING and patience:
            return f"validation stopped improving for {patience} epochs"
        return _STOP_WORDS[self]


_STOP_WORDS = {
    StopReason.EPOCHS: "finished its planned epochs",
    StopReason.STEP_LIMIT: "reached its step limit",
    StopReason.TIME_BUDGET: "time budget reached",
    StopReason.EARLY_STOPPING: "validation stopped improving",
    StopReason.MEMORISED: "learned every training pair",
    StopReason.CANCELLED: "cancelled",
}


@dataclass
class ProgressEvent:
    """What a run reports while it trains (`kind`: 'start' | 'step' | 'epoch' | 'done').

    Progress follows what will actually happen: `limit` says which budget binds ('steps' or
    'time'), `fraction` is the share of it used, and `total_steps` is the step the run is
    expected to end at (projected from the current speed under a time budget). `watch` says
    what may end the run earlier: {"rule": "patience", "bad_epochs": k, "patience": p} or
    {"rule": "memorise", "reproduced": share of training pairs}, empty when nothing does.
    """

    step: int
    total_steps: int
    epoch: int
    train_loss: float | None
    valid_loss: float | None
    lr: float
    tokens_per_s: float  # source + target tokens per second (all ranks)
    eta_s: float | None
    bleu: float | None = None
    chrf: float | None = None
    kind: str = "step"
    elapsed_s: float = 0.0
    fraction: float = 0.0
    limit: str = "steps"
    watch: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None  # a StopReason value, on the 'done' event


@dataclass
class TrainResult:
    model: Transformer
    tokenizers: TokenizerPair
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    cancelled: bool = False
    model_config: ModelConfig | None = None
    train_config: TrainConfig | None = None
    out_dir: Path | None = None


@dataclass
class Budget:
    """What `plan_budget` decided: steps per epoch (incl. repeats), epochs, total steps."""

    passes_per_epoch: int  # tiny corpora repeat inside an epoch
    steps_per_epoch: int
    epochs: int
    total_steps: int


# --------------------------------------------------------------------------------------------
# small helpers


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matrix math (AMX or AVX512-BF16): autocast then pays."""
    try:
        if torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported():
            return True
    except AttributeError:  # older torch: fall back to the kernel's flags
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def idle_cores(sample_s: float = 0.2) -> float | None:
    """Cores left idle by other processes right now (Linux /proc/stat over `sample_s`).

    Measured while this process sleeps, so its own work does not count; None where unknown.
    """

    def snapshot() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        return values[3] + values[4], sum(values[:8])  # idle + iowait, total

    a = snapshot()
    time.sleep(sample_s)
    b = snapshot()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1)


def cpu_threads(requested: int | None, n_params: int, default: int) -> int:
    """Threads for CPU training when not set explicitly.

    OpenMP threads spin-wait for each other at every op, so a thread whose core is taken by
    another process stalls them all: on a busy 2-core machine two threads measured 4-10x
    slower than one. Hence: 1 thread for small models (< 2M parameters, too small to gain
    anyway), otherwise as many threads as there are idle cores (at least 1, at most
    `default`, torch's setting). Re-checked every epoch.
    """
    if requested:
        return max(1, int(requested))
    if n_params < 2_000_000:
        return 1
    idle = idle_cores()
    if idle is None:
        return default
    return max(1, min(default, int(idle + 0.3)))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainingError("A CUDA GPU was requested but none is available; use device 'cpu'.")
        return torch.device(name)
    if name == "cpu":
        return torch.device("cpu")
    raise TrainingError(f"Unknown device {name!r}; use 'auto', 'cpu' or 'cuda'.")


def resolve_precision(name: str, device: torch.device, n_params: int = 0) -> torch.dtype | None:
    """Autocast dtype (bf16) or None for plain fp32.

    'auto' picks bf16 on CUDA GPUs that support it, and on CPUs with native bf16 matrix units
    for models big enough (≥ 2M parameters) that the matmuls outweigh the casts; tiny models
    ran 2x slower under CPU autocast.
    """
    if name == "fp32":
        return None
    if name == "bf16":
        return torch.bfloat16  # asked for explicitly: emulated if need be
    if name != "auto":
        raise TrainingError(f"Unknown precision {name!r}; use 'auto', 'fp32' or 'bf16'.")
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return torch.bfloat16 if cpu_supports_bf16() and n_params >= 2_000_000 else None


def _check_config(cfg: TrainConfig) -> None:
    """Reject bad settings before any work is done (one clear sentence each)."""
    choices = {
        "precision": ("auto", "fp32", "bf16"),
        "lr_schedule": ("auto", "noam", "constant", "linear"),
        "tokenizer": ("sentencepiece", "whitespace"),
        "early_stop_metric": ("auto", "bleu", "loss"),
    }
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise TrainingError(f"Unknown {name} {getattr(cfg, name)!r}; use one of {allowed}.")
    if cfg.preset not in PRESETS:
        raise TrainingError(f"Unknown preset {cfg.preset!r}; use one of {tuple(PRESETS)}.")
    if cfg.max_tokens_per_batch < 8 or cfg.max_len < 2:
        raise TrainingError("max_tokens_per_batch and max_len are too small.")
    if cfg.epochs is not None and cfg.epochs < 1:
        raise TrainingError("epochs must be at least 1 (or None for the adaptive budget).")


def _clean_pairs(pairs: Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    out = []
    for pair in pairs or []:
        if len(pair) < 2:
            continue
        s, t = clean_text(pair[0]).strip(), clean_text(pair[1]).strip()
        if s and t:
            out.append((s, t))
    return out


def plan_budget(n_batches: int, cfg: TrainConfig, memorise: bool = False) -> Budget:
    """Adaptive budget (epochs=None) or the requested number of epochs.

    - An epoch has at least `min_epoch_steps` steps: a corpus of 12 pairs (1 batch) is repeated
      50 times per epoch, so validation/checkpoints happen per ~50 steps, not per step.
    - Adaptive total = clamp(adaptive_passes · batches, min_steps, max_adaptive_steps): tiny
      corpora get enough steps to be memorised; a 30k corpus (~120 batches) gets ~30 passes,
      a 1M corpus a few passes; early stopping on validation trims the rest.
    - `memorise` (small corpus, no validation pairs): up to `memorise_max_steps`, because the
      run stops as soon as every training pair is reproduced (12 pairs: ~150 steps).
    """
    n_batches = max(1, n_batches)
    passes = max(1, math.ceil(cfg.min_epoch_steps / n_batches))
    spe = passes * n_batches
    if cfg.epochs is not None:
        epochs = max(1, int(cfg.epochs))
    else:
        target = min(max(cfg.adaptive_passes * n_batches, cfg.min_steps), cfg.max_adaptive_steps)
        if memorise:
            target = max(target, cfg.memorise_max_steps)
        epochs = max(1, math.ceil(target / spe))
    total = epochs * spe
    if cfg.max_steps is not None:
        total = min(total, int(cfg.max_steps))
        epochs = min(epochs, math.ceil(total / spe))
    return Budget(passes, spe, epochs, total)


def make_schedule(cfg: TrainConfig, d_model: int, total_steps: int) -> LRSchedule:
    """Resolve 'auto' choices into a concrete schedule.

    The default peak is the paper's peak for this width (d_model^-0.5 · 4000^-0.5, e.g. 7e-4 at
    512) times `lr_factor`. Short runs (< 2000 steps) use it as a constant rate after a short
    warm-up; longer runs use the Noam curve with warm-up min(4000, total/10), rescaled so that
    shortening the warm-up does not raise the peak.
    """
    kind = cfg.lr_schedule
    if kind == "auto":
        kind = "constant" if total_steps < 2000 else "noam"
    if kind not in ("noam", "constant", "linear"):
        raise TrainingError(f"Unknown learning-rate schedule {cfg.lr_schedule!r}.")
    default_peak = cfg.lr_factor * noam_lr(4000, d_model, 4000)
    peak = cfg.lr if cfg.lr is not None else default_peak
    if kind in ("constant", "linear"):
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else min(100, total_steps // 10)
        return LRSchedule(kind, d_model, warmup, lr=peak)
    warmup = (
        cfg.warmup_steps if cfg.warmup_steps is not None else max(50, min(4000, total_steps // 10))
    )
    if cfg.lr is None and cfg.warmup_steps is not None:
        factor = cfg.lr_factor  # the paper's curve exactly, scaled
    else:
        factor = noam_factor_for_peak(peak, d_model, warmup)
    return LRSchedule("noam", d_model, warmup, factor=factor)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return (
        "out of memory" in text or "can't allocate memory" in text or "defaultcpuallocator" in text
    )


class _Dist:
    """Rank/world-size view of torch.distributed (a no-op when not initialised)."""

    def __init__(self) -> None:
        self.on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.on else 0
        self.world = dist.get_world_size() if self.on else 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        if not self.on:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def broadcast_flags(self, values: list[float], device: torch.device) -> list[float]:
        if not self.on:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.broadcast(t, 0)
        return t.tolist()

    def broadcast_bytes(self, blob: bytes | None, device: torch.device) -> bytes:
        """Send bytes from rank 0 to every rank (length first, then a uint8 tensor)."""
        if not self.on:
            assert blob is not None
            return blob
        n = torch.tensor([len(blob) if blob is not None else 0], dtype=torch.long, device=device)
        dist.broadcast(n, 0)
        if self.main:
            buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device)
        else:
            buf = torch.empty(int(n.item()), dtype=torch.uint8, device=device)
        dist.broadcast(buf, 0)
        return buf.cpu().numpy().tobytes() if not self.main else blob  # type: ignore[return-value]


def _state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copy of the weights (tied matrices once); load back with strict=False."""
    return unique_state_dict(model)


# --------------------------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def evaluate_loss(
    model: Transformer,
    examples: Sequence[Example],
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    max_tokens: int,
    epsilon: float = 0.0,
) -> float:
    """Per-token loss (label-smoothed with `epsilon`) over `examples` (eval mode, no dropout)."""
    if not examples:
        return float("nan")
    was_training = model.training
    model.eval()
    total, n = 0.0, 0
    for idx in make_batches(examples, max_tokens, shuffle=False):
        batch = collate(examples, idx).to(device)
        with _autocast(device, autocast_dtype):
            logits = model(batch.src, batch.tgt_in)  # [B, T, V]
        loss, _ = label_smoothed_nll_loss(
            logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1), epsilon
        )
        total += float(loss)
        n += batch.n_tokens
    if was_training:
        model.train()
    return total / max(1, n)


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def evaluate_translations(
    model: Transformer,
    tokenizers: TokenizerPair,
    pairs: Sequence[tuple[str, str]],
    autocast_dtype: torch.dtype | None = None,
    beam: int = 1,
) -> dict[str, Any]:
    """BLEU/chrF of the model's translations of `pairs` (sacreBLEU, detokenized)."""
    if not pairs:
        return {"bleu": None, "chrf": None, "n": 0}
    device = next(model.parameters()).device
    with _autocast(device, autocast_dtype):
        results = translate_ids(model, tokenizers, [s for s, _ in pairs], beam=beam)
    hyps = [r.text for r in results]
    return mt_score(hyps, [t for _, t in pairs])


# --------------------------------------------------------------------------------------------
# the engine


def train(
    train_pairs: Sequence[tuple[str, str]],
    valid_pairs: Sequence[tuple[str, str]] | None = None,
    cfg: TrainConfig | None = None,
    out_dir: str | Path | None = None,
    callback: Callable[[ProgressEvent], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    init_from: str | Path | None = None,
    resume_from: str | Path | None = None,
    extra_config: dict[str, Any] | None = None,
) -> TrainResult:
    """Train a Transformer on `train_pairs`; validate on `valid_pairs` after every epoch.

    - `out_dir`: checkpoints go to out_dir/checkpoint each epoch (resumable); on success the
      finished model folder (config.json, model.safetensors, tokenizer/) is written to out_dir
      and the checkpoint removed (unless cfg.keep_checkpoint).
    - `init_from`: a model folder to fine-tune (its model config and tokenizers are reused).
    - `resume_from`: a checkpoint folder (or an out_dir that holds one) to continue from.
    - `callback(ProgressEvent)` every `progress_every_s` seconds, after each epoch and at the end.
    - `should_cancel()` is polled every step; a cancelled run returns `cancelled=True` with the
      current weights and writes no model folder (the last epoch checkpoint stays resumable).
    - `extra_config` is stored in config.json (e.g. a corpus hash).
    Raises TrainingError with a user-facing sentence on bad input, divergence or OOM.
    """
    run = _Run(cfg or TrainConfig(), callback, should_cancel)
    threads = torch.get_num_threads()
    try:
        run.setup(train_pairs, valid_pairs, out_dir, init_from, resume_from)
        run.loop()
        return run.finish(extra_config)
    except TrainingError:
        raise
    except RuntimeError as exc:
        if _is_oom(exc):
            raise TrainingError(
                "Out of memory during training; lower max_tokens_per_batch or use a smaller preset."
            ) from exc
        raise
    finally:
        torch.set_num_threads(threads)  # the caller's process keeps its own setting


class _Run:
    """State of one training run; `train()` drives setup -> loop -> finish."""

    def __init__(
        self,
        cfg: TrainConfig,
        callback: Callable[[ProgressEvent], None] | None,
        should_cancel: Callable[[], bool] | None,
    ) -> None:
        self.cfg = cfg
        self.callback = callback
        self.should_cancel = should_cancel
        self.dd = _Dist()
        self.step = 0
        self.epoch = 0
        self.history: list[dict[str, Any]] = []
        self.best_score: float | None = None
        self.best_epoch = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.ring: deque[dict[str, torch.Tensor]] = deque(maxlen=max(1, cfg.average_last))
        self.bad_epochs = 0
        self.cancelled = False
        self.stop_reason = StopReason.EPOCHS
        self.throughput = 0.0
        self.last_record: dict[str, Any] = {}
        self.memorised_epochs = 0

    # -- setup ---------------------------------------------------------------------------------
    def setup(self, train_pairs, valid_pairs, out_dir, init_from, resume_from) -> None:
        cfg, dd = self.cfg, self.dd
        _check_config(cfg)
        device = resolve_device(cfg.device)
        if dd.on and device.type == "cuda" and device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", dd.rank)))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self.device = device
        self.comm_device = (
            device if (dd.on and dist.get_backend() == "nccl") else torch.device("cpu")
        )

        train_clean = _clean_pairs(train_pairs)
        valid_clean = _clean_pairs(valid_pairs)
        if not train_clean:
            raise TrainingError("The training corpus is empty: add sentence pairs with both sides.")
        self.out_path = Path(out_dir) if out_dir is not None else None
        self.ckpt_dir = self.out_path / "checkpoint" if self.out_path is not None else None
        resume_dir = ckpt.find_checkpoint(resume_from)
        if resume_from is not None and resume_dir is None:
            raise TrainingError(f"No checkpoint to resume from in {resume_from}.")

        init_model = None
        if resume_dir is not None:
            try:
                state = ckpt.read_state(resume_dir)
                tokenizers = ckpt.load_tokenizers(resume_dir)
                mcfg = ModelConfig.from_dict(state["model"])
            except (ArtifactError, KeyError, TypeError, ValueError) as exc:
                raise TrainingError(f"Cannot resume from {resume_from}: {exc}") from exc
        elif init_from is not None:
            try:
                loaded = load_model(init_from, device="cpu")
            except ArtifactError as exc:
                raise TrainingError(f"Cannot fine-tune from {init_from}: {exc}") from exc
            tokenizers, init_model, mcfg = (
                loaded.tokenizers,
                loaded.model,
                loaded.model.cfg,
            )
        else:
            tokenizers = self._train_tokenizers(train_clean)
            overrides = dict(cfg.model_overrides)
            if cfg.dropout is not None:
                overrides["dropout"] = cfg.dropout
            try:
                mcfg = ModelConfig.from_preset(
                    cfg.preset,
                    src_vocab_size=tokenizers.src.vocab_size,
                    tgt_vocab_size=tokenizers.tgt.vocab_size,
                    shared_vocab=tokenizers.shared,
                    **overrides,
                )
            except (TypeError, ValueError) as exc:
                raise TrainingError(f"Invalid model settings: {exc}") from exc
        self.tokenizers, self.mcfg = tokenizers, mcfg

        max_len = min(cfg.max_len, mcfg.max_len)
        self.train_ex = encode_pairs(train_clean, tokenizers, max_len)
        self.valid_ex = encode_pairs(valid_clean, tokenizers, max_len)
        if not self.train_ex:
            raise TrainingError("The training corpus is empty after tokenization.")
        self.valid_translate = valid_clean[: max(0, cfg.valid_max_sentences)]
        # A handful of validation pairs is noise: report it, but do not stop or pick weights by it.
        self.select_on_valid = len(self.valid_ex) >= cfg.min_valid_pairs
        # Adaptive budget, small corpus, no usable validation set: watch whether the training
        # pairs are reproduced exactly and stop once they are (the "train on 20 pairs" case).
        self.memorise_check = (
            train_clean
            if cfg.epochs is None
            and not self.select_on_valid
            and len(train_clean) <= cfg.memorise_max_pairs
            else []
        )
        metric = cfg.early_stop_metric
        self.metric = ("bleu" if self.valid_translate else "loss") if metric == "auto" else metric

        torch.manual_seed(cfg.seed)
        self.model = init_model if init_model is not None else Transformer(mcfg)
        self.model.to(device).train()
        n_params = self.model.num_parameters()
        self.amp = resolve_precision(cfg.precision, device, n_params)
        self.n_params = n_params
        self.default_threads = torch.get_num_threads()
        self._set_threads()
        self.optimizer = self._make_optimizer()
        first = make_batches(self.train_ex, cfg.max_tokens_per_batch, seed=cfg.seed)
        n_batches = len(shard_batches(first, 0, dd.world))
        self.budget = plan_budget(n_batches, cfg, memorise=bool(self.memorise_check))
        self.schedule = make_schedule(cfg, mcfg.d_model, self.budget.total_steps)

        if resume_dir is not None:
            try:
                st = ckpt.load_checkpoint(resume_dir, self.model, self.optimizer, device)
            except (ArtifactError, KeyError, ValueError, RuntimeError) as exc:
                raise TrainingError(f"Cannot resume from {resume_from}: {exc}") from exc
            self.step, self.epoch = st["step"], st["epoch"]
            self.history, self.best_score = st["history"], st["best_score"]
            self.best_epoch, self.bad_epochs = st["best_epoch"], st["bad_epochs"]
            self.best_state = st["best_state"]
            self.ring.extend(st["ring"])
            self.last_record = self.history[-1] if self.history else {}
        self.net: nn.Module = self.model
        if dd.on:
            self.net = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )

    def _set_threads(self) -> None:
        """CPU threads for the next epoch (DDP ranks keep torchrun's OMP_NUM_THREADS so that
        every rank computes identically)."""
        if self.device.type != "cpu":
            return
        if self.dd.on:
            if self.cfg.num_threads:
                torch.set_num_threads(self.cfg.num_threads)
            return
        torch.set_num_threads(
            cpu_threads(self.cfg.num_threads, self.n_params, self.default_threads)
        )

    def _train_tokenizers(self, pairs: list[tuple[str, str]]) -> TokenizerPair:
        """Rank 0 trains the tokenizers; other ranks receive the identical bytes."""
        blob = None
        if self.dd.main:
            try:
                tok = train_tokenizers(
                    [s for s, _ in pairs],
                    [t for _, t in pairs],
                    kind=self.cfg.tokenizer,
                    vocab_size=self.cfg.vocab_size,
                    joint=self.cfg.joint_vocab,
                )
            except TokenizerError as exc:
                raise TrainingError(f"Tokenizer training failed: {exc}") from exc
            blob = tok.to_bytes()
        return TokenizerPair.from_bytes(self.dd.broadcast_bytes(blob, self.comm_device))

    def _make_optimizer(self) -> torch.optim.Optimizer:
        """Adam, β=(0.9, 0.98), ε=1e-9 (§5.3); AdamW when weight decay is asked for."""
        cfg = self.cfg
        if cfg.weight_decay > 0:
            return torch.optim.AdamW(
                self.model.parameters(),
                lr=0.0,
                betas=tuple(cfg.adam_betas),
                eps=cfg.adam_eps,
                weight_decay=cfg.weight_decay,
            )
        return torch.optim.Adam(
            self.model.parameters(),
            lr=0.0,
            betas=tuple(cfg.adam_betas),
            eps=cfg.adam_eps,
        )

    # -- progress ------------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def _time_left(self) -> float | None:
        if self.cfg.time_budget_s is None:
            return None
        return self.cfg.time_budget_s - self._elapsed()

    def _progress(self) -> float:
        """Share of the budget used: steps, or wall-clock time when that runs out first."""
        done = self.step / max(1, self.budget.total_steps)
        if self.cfg.time_budget_s:
            done = max(done, self._elapsed() / self.cfg.time_budget_s)
        return min(1.0, done)

    def _time_binds(self) -> bool:
        """Whether the clock, not the step budget, is expected to end the run."""
        if not self.cfg.time_budget_s:
            return False
        return self._elapsed() / self.cfg.time_budget_s >= self.step / max(
            1, self.budget.total_steps
        )

    def _expected_total(self) -> int:
        """The step the run is expected to end at: the step budget, or under a binding time
        budget the steps the current speed reaches before the clock runs out."""
        total = self.budget.total_steps
        done = self.step - self.start_step
        left = self._time_left()
        if left is not None and done > 0 and self._time_binds():
            rate = done / max(1e-9, self._elapsed())
            total = min(total, self.step + int(max(0.0, left) * rate))
        return max(total, self.step)

    def _eta(self) -> float | None:
        done = self.step - self.start_step
        by_steps = (
            (self.budget.total_steps - self.step) * self._elapsed() / done if done > 0 else None
        )
        left = self._time_left()
        if by_steps is None:
            return None if left is None else max(0.0, left)
        return by_steps if left is None else max(0.0, min(by_steps, left))

    def _watch(self) -> dict[str, Any]:
        """What may stop the run before its budget ends (see ProgressEvent.watch)."""
        if self.memorise_check:
            share = self.last_record.get("train_exact_match")
            return {"rule": "memorise", "reproduced": share, "pairs": len(self.memorise_check)}
        if self.cfg.patience and self.select_on_valid:
            return {
                "rule": "patience",
                "bad_epochs": self.bad_epochs,
                "patience": self.cfg.patience,
                "metric": self.metric,
            }
        return {}

    def _emit(self, kind: str, train_loss: float | None, **override: Any) -> None:
        if self.callback is None or not self.dd.main:
            return
        rec = self.last_record
        event = ProgressEvent(
            step=self.step,
            total_steps=self._expected_total(),
            epoch=self.epoch,
            train_loss=train_loss,
            valid_loss=rec.get("valid_loss"),
            lr=self.schedule.lr_at(max(1, self.step), self._progress()),
            tokens_per_s=self.throughput,
            eta_s=self._eta(),
            bleu=rec.get("bleu"),
            chrf=rec.get("chrf"),
            kind=kind,
            elapsed_s=self._elapsed(),
            fraction=self._progress(),
            limit="time" if self._time_binds() else "steps",
            watch=self._watch(),
        )
        for k, v in override.items():
            setattr(event, k, v)
        self.callback(event)

    # -- the loop ------------------------------------------------------------------------------
    def loop(self) -> None:
        self.t_start = time.monotonic()
        self.start_step = self.step
        self._emit("start", None)  # tokenizers and model are ready: the UI can show the plan
        for epoch in range(self.epoch + 1, self.budget.epochs + 1):
            if self.step >= self.budget.total_steps:
                break
            self.epoch = epoch
            if epoch > 1:
                self._set_threads()
            trained = self._train_epoch(epoch)
            if self.cancelled:
                self.stop_reason = StopReason.CANCELLED
                return
            if not trained:
                break
            stop = self._end_epoch(trained)
            if stop:
                self.stop_reason = StopReason.MEMORISED if stop == 2 else StopReason.EARLY_STOPPING
                return
            if self.stop_reason in (StopReason.TIME_BUDGET, StopReason.STEP_LIMIT):
                return
        if self.cfg.max_steps is not None and self.step >= self.cfg.max_steps:
            self.stop_reason = StopReason.STEP_LIMIT

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches for `epoch`: fresh length buckets per pass, seeded by epoch."""
        out: list[list[int]] = []
        for rep in range(self.budget.passes_per_epoch):
            seed = self.cfg.seed * 1_000_003 + epoch * 1009 + rep
            batches = make_batches(self.train_ex, self.cfg.max_tokens_per_batch, seed=seed)
            out.extend(shard_batches(batches, self.dd.rank, self.dd.world))
        return out

    def _train_epoch(self, epoch: int) -> tuple[float, int] | None:
        """Optimizer steps over one epoch; returns (loss sum, target tokens) or None if no step."""
        cfg, dd = self.cfg, self.dd
        epoch_loss, epoch_tok = 0.0, 0
        window_loss, window_tok, window_all = 0.0, 0, 0
        window_start = last_emit = time.monotonic()
        for idx in self._epoch_batches(epoch):
            if self.step >= self.budget.total_steps:
                self.stop_reason = StopReason.STEP_LIMIT
                break
            left = self._time_left()
            cancel = bool(self.should_cancel is not None and self.should_cancel())
            flags = dd.all_sum(
                [float(cancel), float(left is not None and left <= 0)], self.comm_device
            )
            if flags[0] > 0:
                self.cancelled = True
                break
            if flags[1] > 0:
                self.stop_reason = StopReason.TIME_BUDGET
                break
            loss_sum, n_tok, n_all = self._train_step(idx)
            epoch_loss += loss_sum
            epoch_tok += n_tok
            window_loss += loss_sum
            window_tok += n_tok
            window_all += n_all
            now = time.monotonic()
            if now - last_emit >= cfg.progress_every_s:
                self.throughput = window_all * dd.world / max(1e-9, now - window_start)
                self._emit("step", window_loss / max(1, window_tok))
                last_emit = window_start = now
                window_loss, window_tok, window_all = 0.0, 0, 0
        now = time.monotonic()
        if window_all and now - window_start > 0.5:
            self.throughput = window_all * dd.world / (now - window_start)
        if self.cancelled or not epoch_tok:
            return None
        return epoch_loss, epoch_tok

    def _train_step(self, idx: list[int]) -> tuple[float, int, int]:
        """One optimizer step with teacher forcing; returns (loss sum, tgt tokens, all tokens)."""
        cfg = self.cfg
        batch = collate(self.train_ex, idx).to(self.device)
        self.step += 1
        lr = self.schedule.lr_at(self.step, self._progress())
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        with _autocast(self.device, self.amp):
            logits = self.net(batch.src, batch.tgt_in)  # [B, T, V]
        loss_sum, _ = label_smoothed_nll_loss(
            logits.reshape(-1, logits.size(-1)),
            batch.tgt_out.reshape(-1),
            cfg.label_smoothing,
            self.mcfg.pad_id,
        )
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum / batch.n_tokens).backward()
        gnorm = (
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
            if cfg.clip_norm
            else torch.zeros(())
        )
        value = float(loss_sum.detach())
        if not math.isfinite(value) or not math.isfinite(float(gnorm)):
            raise TrainingError(
                f"Training diverged: the loss became NaN/inf at step {self.step}; "
                "try a lower learning rate or precision 'fp32'."
            )
        self.optimizer.step()
        return value, batch.n_tokens, batch.n_tokens + batch.n_src_tokens

    def _validate(self) -> dict[str, Any]:
        """Validation loss (all pairs) and BLEU/chrF of greedy translations (capped)."""
        out: dict[str, Any] = {}
        if self.valid_ex:
            out["valid_loss"] = evaluate_loss(
                self.model,
                self.valid_ex,
                self.device,
                self.amp,
                self.cfg.max_tokens_per_batch,
                self.cfg.label_smoothing,
            )
        if self.valid_translate:
            s = evaluate_translations(
                self.model,
                self.tokenizers,
                self.valid_translate,
                self.amp,
                self.cfg.valid_beam,
            )
            out["bleu"], out["chrf"] = s["bleu"], s["chrf"]
        return out

    def _train_exact_match(self) -> float:
        """Share of (small-corpus) training pairs whose greedy translation equals the target."""
        pairs = self.memorise_check
        with _autocast(self.device, self.amp):
            out = translate_ids(self.model, self.tokenizers, [s for s, _ in pairs])
        hits = sum(
            " ".join(o.text.split()) == " ".join(t.split())
            for o, (_, t) in zip(out, pairs, strict=True)
        )
        return hits / len(pairs)

    def _end_epoch(self, trained: tuple[float, int]) -> int:
        """Validate (rank 0), track the best/last-N weights, checkpoint, report.

        Returns 0 to go on, 1 for early stopping, 2 when a small corpus is memorised.
        """
        cfg = self.cfg
        stop = 0.0
        if self.dd.main:
            record: dict[str, Any] = {
                "epoch": self.epoch,
                "step": self.step,
                "train_loss": trained[0] / max(1, trained[1]),
                "lr": self.schedule.lr_at(self.step, self._progress()),
                "tokens_per_s": self.throughput,
            }
            record.update(self._validate())
            record["elapsed_s"] = self._elapsed()
            current = _selection_score(record, self.metric) if self.select_on_valid else None
            if current is not None and (self.best_score is None or current > self.best_score):
                self.best_score, self.best_epoch, self.bad_epochs = (
                    current,
                    self.epoch,
                    0,
                )
                self.best_state = _state_copy(self.model)
            elif current is not None:
                self.bad_epochs += 1
            if cfg.average_last > 1:
                self.ring.append(_state_copy(self.model))
            self.history.append(record)
            self.last_record = record
            if cfg.patience and current is not None and self.bad_epochs >= cfg.patience:
                stop = 1.0
            if self.memorise_check:
                record["train_exact_match"] = self._train_exact_match()
                hit = record["train_exact_match"] >= 1.0
                self.memorised_epochs = self.memorised_epochs + 1 if hit else 0
                if self.memorised_epochs >= self.cfg.memorise_epochs:
                    stop = 2.0
            if self.ckpt_dir is not None:
                ckpt.save_checkpoint(
                    self.ckpt_dir,
                    self.model,
                    self.optimizer,
                    self.tokenizers,
                    cfg,
                    self.step,
                    self.epoch,
                    self.history,
                    self.best_score,
                    self.best_epoch,
                    self.bad_epochs,
                    self.best_state,
                    list(self.ring),
                )
            self._emit("epoch", record["train_loss"])
        return int(self.dd.broadcast_flags([stop], self.comm_device)[0])

    # -- the end -------------------------------------------------------------------------------
    def finish(self, extra_config: dict[str, Any] | None) -> TrainResult:
        train_time = self._elapsed()
        dd = self.dd
        chosen, scores = "last", {}
        if not self.cancelled and dd.main:
            chosen, scores = self._select_final()
        if dd.on:  # rank 0 chose the final weights; every rank ends with them
            for t in self.model.state_dict().values():
                dist.broadcast(t, 0)
        self.model.eval()
        metrics: dict[str, Any] = {
            "steps": self.step,
            "epochs": self.epoch,
            "best_epoch": self.best_epoch,
            "stop_reason": self.stop_reason.value,
            "selected": chosen,
            "train_time_s": round(train_time, 2),
            "tokens_per_s": round(self.throughput, 1),
            "parameters": self.model.num_parameters(),
            "train_pairs": len(self.train_ex),
            # the longest sequences seen in training (tokens incl. EOS): inputs longer than
            # these are outside what the model has learned
            "longest_source_tokens": max(len(ex.src) for ex in self.train_ex),
            "longest_target_tokens": max(len(ex.tgt) + 1 for ex in self.train_ex),
            "valid_pairs": len(self.valid_ex),
            "precision": "bf16" if self.amp is not None else "fp32",
            "device": str(self.device),
            "world_size": dd.world,
            "threads": torch.get_num_threads() if self.device.type == "cpu" else None,
            "lr_schedule": self.schedule.kind,
            "peak_lr": self.schedule.peak(),
            "warmup_steps": self.schedule.warmup,
            "train_loss": self.history[-1]["train_loss"] if self.history else None,
            **scores,
        }
        if dd.main and self.out_path is not None and not self.cancelled:
            save_model(
                self.out_path,
                self.model,
                self.tokenizers,
                {
                    "training": self.cfg.to_dict(),
                    "metrics": metrics,
                    "history": self.history,
                    **(extra_config or {}),
                },
            )
            if self.ckpt_dir is not None and not self.cfg.keep_checkpoint:
                shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        self._emit(
            "done",
            metrics["train_loss"],
            valid_loss=scores.get("valid_loss"),
            bleu=scores.get("bleu"),
            chrf=scores.get("chrf"),
            eta_s=0.0,
            total_steps=self.step,
            fraction=1.0,
            stop_reason=self.stop_reason.value,
        )
        return TrainResult(
            self.model,
            self.tokenizers,
            metrics,
            self.history,
            self.cancelled,
            self.mcfg,
            self.cfg,
            self.out_path,
        )

    def _select_final(self) -> tuple[str, dict[str, Any]]:
        """Load the final weights into the model; return (name, their validation scores).

        Candidates: the last weights, the best epoch (by validation) and, with average_last > 1,
        the average of the last N epoch weights. Without (enough) validation data: the average if
        asked for, else the last weights.
        """
        keys = ("valid_loss", "bleu", "chrf")
        avg = None
        if self.cfg.average_last > 1 and len(self.ring) > 1:
            avg = average_state_dicts(list(self.ring))
        if not self.select_on_valid:
            if avg is not None:
                self.model.load_state_dict(avg, strict=False)
                return f"average_last_{len(self.ring)}", {}
            rec = self.history[-1] if self.history else {}
            return "last", {k: rec[k] for k in keys if k in rec and rec.get("step") == self.step}
        last_state = _state_copy(self.model)
        last_rec = self.history[-1] if self.history else {}
        if last_rec.get("step") != self.step:  # stopped mid-epoch: score the last weights now
            last_rec = self._validate()
        candidates: list[tuple[str, dict[str, torch.Tensor], dict[str, Any]]] = [
            ("last", last_state, last_rec)
        ]
        if self.best_state is not None and self.best_epoch != self.epoch:
            best_rec = next((h for h in self.history if h["epoch"] == self.best_epoch), {})
            candidates.append(("best", self.best_state, best_rec))
        if avg is not None:
            self.model.load_state_dict(avg, strict=False)
            candidates.append((f"average_last_{len(self.ring)}", avg, self._validate()))
        name, state, rec = max(
            candidates,
            key=lambda c: _selection_score(c[2], self.metric) or float("-inf"),
        )
        self.model.load_state_dict(state, strict=False)
        return name, {k: rec[k] for k in keys if k in rec}


def _selection_score(record: dict[str, Any], metric: str) -> float | None:
    """Higher is better: BLEU (chrF breaks ties), or minus the validation loss."""
    if metric == "bleu" and record.get("bleu") is not None:
        return float(record["bleu"]) + 1e-3 * float(record.get("chrf") or 0.0)
    loss = record.get("valid_loss")
    if loss is not None and math.isfinite(loss):
        return -float(loss)
    return None
