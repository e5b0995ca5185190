"""Every knob of a training run as one dataclass (cf. nanoGPT's config), saved with the model
so that a run can be reproduced from its folder (cf. JoeyNMT)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core_model.transformer.config import PRESETS, ModelConfig


class TrainingError(Exception):
    """Training cannot go on; the message is one sentence meant for the user."""


# The choices of the string-valued knobs: one source for the engine, the CLI and the UI.
PRECISIONS = ("auto", "fp32", "bf16")
LR_SCHEDULES = ("auto", "noam", "constant", "linear")
TOKENIZERS = ("sentencepiece", "whitespace")
EARLY_STOP_METRICS = ("auto", "bleu", "loss")
PRESET_CHOICES = ("auto", *PRESETS)  # 'auto': the recipe picks the model for the corpus


@dataclass
class TrainConfig:
    """Every knob of a training run; saved with the model so the run can be reproduced."""

    preset: str = "auto"  # 'auto' (the recipe decides) or a model preset
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"norm_first": True}
    dropout: float | None = None  # None => the recipe's choice (see training.recipe)
    # budget
    epochs: int | None = None  # None (and no time budget) => the automatic budget
    max_steps: int | None = None  # hard cap on optimizer steps
    time_budget_s: float | None = None  # stop training after this many seconds
    token_budget: int | None = None  # stop after this many source + target tokens (any machine)
    min_steps: int = 400  # adaptive: fewest optimizer steps (small corpora are repeated)
    max_adaptive_steps: int = 20000  # adaptive: most optimizer steps
    adaptive_passes: int = 30  # adaptive: target passes over a mid-size corpus
    min_epoch_steps: int = 25  # an "epoch" has at least this many steps (tiny corpora repeat)
    min_valid_pairs: int = 20  # fewer validation pairs: reported, not used to stop or select
    memorise_max_pairs: int = 200  # adaptive + no validation pairs + corpus at most this big:
    memorise_epochs: int = 2  # stop after this many epochs reproducing every training pair
    memorise_max_steps: int = 1000  # step budget while waiting for that
    # batches
    max_tokens_per_batch: int | None = None  # padded tokens (max(src, tgt) · sentences)
    max_len: int = 256  # tokens per side; longer sentences are truncated
    # optimisation
    lr_schedule: str = "auto"  # 'noam' | 'constant' | 'linear' | 'auto' (the recipe's)
    lr: float | None = None  # peak rate; None => the recipe's
    lr_factor: float = 1.0  # scale of the Noam curve (noam with lr None: the paper's peak)
    warmup_steps: int | None = None  # None => the recipe's (linear) or a tenth of the budget
    label_smoothing: float | None = None  # None => the recipe's (more over many passes)
    clip_norm: float | None = 1.0
    weight_decay: float = 0.0
    # β2 0.999, not the paper's 0.98 (§5.3, for 25k-token batches): the small CPU batches'
    # noisy gradients want a longer memory of their scale (1.1M tokens, fp32, valid BLEU:
    # Tatoeba 15.80 -> 16.56, Multi30k 25.41 -> 25.37; docs/TRAINING.md)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-9
    precision: str = "auto"  # 'auto' | 'fp32' | 'bf16'
    device: str = "auto"  # 'auto' | 'cpu' | 'cuda' | 'cuda:N'
    seed: int = 0
    num_threads: int | None = None  # CPU threads (per process); None => chosen (see layout)
    processes: int | None = None  # data-parallel processes; None => timed (training.layout)
    # validation / model selection
    patience: int | None = 5  # epochs without improvement before stopping; None/0 = never
    early_stop_metric: str = "auto"  # 'bleu' | 'loss' | 'auto' (bleu when translations exist)
    valid_max_sentences: int = 200  # validation pairs translated per epoch (speed)
    valid_beam: int = 1
    average_last: int | None = None  # >1: also try the average of N snapshots of the
    # weights taken over the budget's last selection.AVERAGE_TAIL (None => the recipe's)
    # tokenizer
    tokenizer: str = "sentencepiece"  # 'sentencepiece' | 'whitespace'
    vocab_size: int | None = None  # SentencePiece pieces (per vocabulary); None => recipe
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

    def model_config(self, src_vocab: int, tgt_vocab: int, shared: bool) -> ModelConfig:
        """The preset's network sized to the vocabularies, with the run's overrides."""
        overrides = dict(self.model_overrides)
        if self.dropout is not None:
            overrides["dropout"] = self.dropout
        try:
            return ModelConfig.from_preset(
                self.preset,
                src_vocab_size=src_vocab,
                tgt_vocab_size=tgt_vocab,
                shared_vocab=shared,
                **overrides,
            )
        except (TypeError, ValueError) as exc:
            raise TrainingError(f"Invalid model settings: {exc}") from exc

    def candidate_model(self) -> ModelConfig:
        """The network a new run of the recipe's config would train, before its tokenizers
        exist: the preset at the recipe's vocabulary size (what a calibration times, what a
        continued model's cost is compared with). Here, without torch, so that planning a run
        (`recipe`) does not import it."""
        vocab = int(self.vocab_size or 8_000)
        return self.model_config(vocab, vocab, bool(self.joint_vocab))

    def check(self) -> None:
        """Reject bad settings before any work is done (one clear sentence each)."""
        choices = {
            "precision": PRECISIONS,
            "lr_schedule": LR_SCHEDULES,
            "tokenizer": TOKENIZERS,
            "early_stop_metric": EARLY_STOP_METRICS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise TrainingError(
                    f"Unknown {name} {getattr(self, name)!r}; use one of {allowed}."
                )
        if self.preset not in PRESET_CHOICES:
            raise TrainingError(f"Unknown preset {self.preset!r}; use one of {PRESET_CHOICES}.")
        if (self.max_tokens_per_batch is not None and self.max_tokens_per_batch < 8) or (
            self.max_len < 2
        ):
            raise TrainingError("max_tokens_per_batch and max_len are too small.")
        if self.epochs is not None and self.epochs < 1:
            raise TrainingError("epochs must be at least 1 (or None for the adaptive budget).")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise TrainingError("The time budget must be more than 0 seconds.")
        if self.token_budget is not None and not self.token_budget > 0:
            raise TrainingError("The token budget must be more than 0 tokens.")
        if self.processes is not None and self.processes < 1:
            raise TrainingError("processes must be at least 1 (or None to time the choices).")
