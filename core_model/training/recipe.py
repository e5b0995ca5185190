"""The automatic choices: what a one-click run trains, from the corpus size, the budget and
the device. Every knob a user leaves on 'auto' (None) is decided here, once, at the start of a
run; the resolved config is saved with the model, so the run can be reproduced exactly.

The values are the product's tuned defaults (evidence in docs/TRAINING.md: every figure was
tuned on validation data only, never on a test set). In short:

- **Model**: the `small` preset (d_model 256, 3+3 layers, pre-norm) for real corpora; `tiny` for
  a few hundred pairs, which it memorises in seconds; the paper's `base` only on a GPU with a
  large corpus. Pre-norm trains stably at the high rates that short CPU budgets need.
- **Budget** ('automatic'): a small corpus without validation pairs trains until every pair is
  reproduced; anything else gets a wall-clock ceiling that grows with the corpus (CPU: a
  minute per thousand pairs, 5 to 60 minutes) and a pass ceiling, and stops earlier when
  validation stops improving.
- **Schedule**: linear warm-up over 200 steps (50 when the run continues a trained model),
  then linear decay to zero where the budget ends (the clock or the steps, whichever binds
  first).
- **Regularisation**: dropout only when the budget allows many passes over the corpus; short
  runs over large corpora cannot overfit and dropout would only slow them down.
- **Batches**: small token batches on a CPU (more updates per minute), large ones on a GPU.
- **Vocabulary**: SentencePiece; joint (tied embeddings) when both languages share an alphabet,
  one per side otherwise; sized to the corpus.
- **Selection**: the average of weight snapshots taken over the last part of the decay, the
  best epoch or the last weights — whichever validates best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core_model.tokenizer import shares_alphabet
from core_model.training.config import TrainConfig

AUTO = "auto"
TINY_MAX_PAIRS = 1_000  # below this the tiny model learns as well as a bigger one, faster
BASE_MIN_PAIRS = 200_000  # the paper's base model pays off on a GPU from about here

# Wall-clock ceiling of the automatic budget: a minute per thousand pairs, within these bounds.
AUTO_MINUTES_PER_1K_PAIRS = 1.0
AUTO_MINUTES_CPU = (5.0, 60.0)
AUTO_MINUTES_GPU = (5.0, 240.0)

WARMUP_STEPS = 200  # linear warm-up (35: diverged early; 100: -1 valid BLEU; 150-200: best)
# A run that continues a trained model (same tokenizer, warm weights) only re-warms the
# optimizer's fresh moment estimates: a short ramp, so a short budget is not spent climbing.
CONTINUE_WARMUP_STEPS = 50
CPU_BATCH_TOKENS = 1250  # padded tokens per batch: half of 2,500 gave +7 valid BLEU at equal data
GPU_BATCH_TOKENS = 8192  # (not tuned here: no GPU was available)

# Training speed (source + target tokens per second, a run's average with its validations) by
# preset, used only to estimate how many passes over the corpus a budget allows. CPU: what
# 2-core machines sustain in bf16 (small: 2,000-3,300 in 10-minute runs here, ~1.9-2.7k on the
# slower AMX Xeon; tiny ~14k); a faster machine makes more passes than estimated, and
# early stopping and model selection guard those. (5,000 for small made a 10-minute Tatoeba run
# use dropout and score 2.5 instead of ~15 valid BLEU.)
CPU_TOKENS_PER_S = {"tiny": 12_000.0, "small": 2_500.0, "base": 600.0}
GPU_TOKENS_PER_S = {"tiny": 200_000.0, "small": 150_000.0, "base": 80_000.0}


@dataclass(frozen=True)
class CorpusFacts:
    """What the recipe needs to know about the data (cheap to compute before tokenizing)."""

    train_pairs: int
    valid_pairs: int
    tokens: int  # rough source + target token count of the training pairs
    shared_alphabet: bool  # both languages write with mostly the same letters (de/en)

    @classmethod
    def of(cls, train: list[tuple[str, str]], valid: list[tuple[str, str]] | None) -> CorpusFacts:
        """Tokens estimated as words, or characters / 1.5 for unsegmented scripts."""
        tokens = sum(_rough_tokens(s) + _rough_tokens(t) for s, t in train)
        shared = shares_alphabet([s for s, _ in train], [t for _, t in train])
        return cls(len(train), len(valid or []), tokens, shared)


def _rough_tokens(text: str) -> int:
    words = len(text.split())
    return max(words, math.ceil(len(text) / 1.5) if words <= 2 else words)


def memorises(cfg: TrainConfig, facts: CorpusFacts) -> bool:
    """The automatic budget of a small corpus without (enough) validation pairs: train until
    every training pair is reproduced exactly (the "teach it my 20 sentences" case)."""
    return (
        cfg.epochs is None
        and cfg.time_budget_s is None
        and cfg.token_budget is None
        and facts.valid_pairs < cfg.min_valid_pairs
        and facts.train_pairs <= cfg.memorise_max_pairs
    )


def resolve(
    cfg: TrainConfig, facts: CorpusFacts, gpu: bool, fine_tune: bool = False
) -> TrainConfig:
    """`cfg` with every automatic choice made (see the module docstring). `fine_tune`: the run
    continues a trained model, which a from-scratch peak rate would partly undo."""
    memorise = memorises(cfg, facts)
    preset = cfg.preset if cfg.preset != AUTO else _preset(facts, gpu)
    joint = cfg.joint_vocab if cfg.joint_vocab is not None else facts.shared_alphabet
    time_budget_s = cfg.time_budget_s
    if time_budget_s is None and cfg.epochs is None and cfg.token_budget is None and not memorise:
        time_budget_s = 60.0 * auto_minutes(facts.train_pairs, gpu)
    passes = _passes(facts, preset, gpu, cfg.epochs, time_budget_s, cfg.token_budget)
    return replace(
        cfg,
        preset=preset,
        time_budget_s=time_budget_s,
        dropout=cfg.dropout if cfg.dropout is not None else _dropout(passes, memorise),
        lr_schedule=cfg.lr_schedule if cfg.lr_schedule != AUTO else _schedule(memorise),
        lr=cfg.lr if cfg.lr is not None else _peak_lr(preset, memorise) / (4 if fine_tune else 1),
        warmup_steps=_warmup(cfg, memorise, fine_tune),
        max_tokens_per_batch=cfg.max_tokens_per_batch
        or (GPU_BATCH_TOKENS if gpu else CPU_BATCH_TOKENS),
        joint_vocab=joint,
        vocab_size=cfg.vocab_size or _vocab_size(facts, joint),
        # memorising has no budget end to average over, nor validation to check an average by
        average_last=cfg.average_last if cfg.average_last is not None else (0 if memorise else 5),
    )


def auto_minutes(train_pairs: int, gpu: bool) -> float:
    """The automatic budget's wall-clock ceiling (it usually stops earlier on a GPU)."""
    low, high = AUTO_MINUTES_GPU if gpu else AUTO_MINUTES_CPU
    return min(high, max(low, AUTO_MINUTES_PER_1K_PAIRS * train_pairs / 1000))


def _preset(facts: CorpusFacts, gpu: bool) -> str:
    if facts.train_pairs <= TINY_MAX_PAIRS:
        return "tiny"
    if gpu and facts.train_pairs >= BASE_MIN_PAIRS:
        return "base"
    return "small"


def _passes(
    facts: CorpusFacts,
    preset: str,
    gpu: bool,
    epochs: int | None,
    time_budget_s: float | None,
    token_budget: int | None = None,
) -> float:
    """How many times the budget lets the model see the corpus (an estimate)."""
    if epochs is not None:
        return float(epochs)
    if token_budget is not None:
        return token_budget / max(1, facts.tokens)
    if time_budget_s is None:
        return math.inf  # memorisation: as many as it takes
    speed = (GPU_TOKENS_PER_S if gpu else CPU_TOKENS_PER_S)[preset]
    return time_budget_s * speed / max(1, facts.tokens)


def _dropout(passes: float, memorise: bool) -> float:
    """No dropout when the budget sees the corpus only a few times: it cannot overfit then, and
    dropout slows learning; the paper's 0.1 beyond that, against memorising the corpus."""
    if memorise:
        return 0.0  # memorising is the goal
    return 0.0 if passes <= 8 else 0.1


def _schedule(memorise: bool) -> str:
    """Constant rate while memorising (no budget end to decay to), else linear decay."""
    return "constant" if memorise else "linear"


def _warmup(cfg: TrainConfig, memorise: bool, fine_tune: bool) -> int | None:
    """The user's, else a short re-warm-up when continuing a model, else the tuned ramp;
    memorising runs keep the constant schedule's short default (None)."""
    if cfg.warmup_steps is not None or memorise:
        return cfg.warmup_steps
    return CONTINUE_WARMUP_STEPS if fine_tune else WARMUP_STEPS


def _peak_lr(preset: str, memorise: bool) -> float:
    """Pre-norm small/tiny models: 1e-3 (2e-3 learned less at equal data); memorising a few
    pairs goes twice as fast at 4e-3 (16 pairs: 75 steps instead of 150). The post-norm base
    needs the paper's gentler peak (d_model^-0.5 · 4000^-0.5 ≈ 7e-4)."""
    if preset == "base":
        return 7e-4
    return 4e-3 if memorise else 1e-3


def _vocab_size(facts: CorpusFacts, joint: bool) -> int:
    """Pieces per SentencePiece vocabulary: 8k joint (tied embeddings, de/en) or 4k per side
    (zh/en: 4k beat 8k by 7 valid BLEU on Tatoeba) for tens of thousands of pairs; half that
    for small corpora (their rare pieces are seen too seldom to learn), twice for big ones."""
    per_side = 4_000 if facts.train_pairs < 200_000 else 8_000
    if facts.train_pairs < 5_000:
        per_side //= 2
    return per_side * (2 if joint else 1)
