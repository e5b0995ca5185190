"""The automatic choices: what a one-click run trains, from the corpus size, the budget and
the device. Every knob a user leaves on 'auto' (None) is decided here, once, at the start of a
run; the resolved config is saved with the model, so the run can be reproduced exactly.

The choices follow the **tokens the run will actually train** (source + target), not the
minutes: a CPU without bf16 trains about half the tokens per minute of one with it, and what a
model learns depends on the tokens and updates it gets. Given tokens (`token_budget`), that is
the budget; given minutes (or the automatic budget's clock), the trainer times a few training
steps of the candidate model on this machine (`calibration`, ~2 s) and the budget is projected
as seconds x tokens/s; both are recorded in the run's metrics. A candidate whose vocabulary is
not the timed one's is planned at the timed speed scaled by the work a token meets
(`_choose_for`), and timed in its turn.

The values are the product's tuned defaults, each a constant below (the one copy of them: the
table "What the recipe chooses" in docs/TRAINING.md is generated from them by `recipe_table`; the
evidence is there too, every figure tuned on validation data only, never on a test set). The
rules, in short:

- **Model**: the `small` preset (pre-norm) for real corpora; `tiny` for a corpus of demo size
  (up to `TINY_MAX_PAIRS`), which it memorises in seconds; the paper's `base` only on a GPU
  with a large corpus (`BASE_MIN_PAIRS`). Pre-norm trains stably at the high rates that short
  CPU budgets need. A CPU clock that buys it few tokens trains it with fewer layers
  (`SHALLOW_LAYERS` below `SHALLOW_MAX_TOKENS`): in the same minutes a shallower network
  trains a third more tokens and learns more from them than the deeper one from its fewer. A
  token budget keeps the preset's layers (at equal tokens there is nothing to gain).
- **Budget** ('automatic'): a small corpus without validation pairs trains until every pair is
  reproduced; anything else gets a wall-clock ceiling that grows with the corpus
  (`auto_minutes`) and a pass ceiling, and stops earlier when validation stops improving.
- **Schedule**: linear warm-up over a share of the updates the budget buys (`WARMUP_SHARE`
  within `WARMUP_STEPS`; `CONTINUE_WARMUP_STEPS` when the run continues a trained model), then
  linear decay to zero where the budget ends (the clock, the tokens or the steps, whichever
  binds first); the peak rate follows the batch: gentler for the small CPU batches of short
  budgets (`SMALL_BATCH_LRS`), `PEAK_LR` with larger ones (a GPU's), `BASE_PEAK_LR` for the
  post-norm base, `MEMORISE_PEAK_LR` while memorising.
- **Regularisation**: dropout only when the budget allows many passes over the corpus
  (`NO_DROPOUT_MAX_PASSES`, more below `SMALL_CORPUS_PAIRS`); short runs over large corpora
  cannot overfit and dropout would only slow them down. Label smoothing, free a step, is
  larger from a few passes on until dropout starts (`SMOOTHER_FROM_PASSES`).
- **Batches**: on a CPU the largest batch that still buys `MIN_UPDATES` updates
  (`CPU_BATCH_TOKENS`): a short budget needs updates more than it needs accurate gradients,
  so a run that re-plans for fewer tokens takes smaller batches from then on (`replan`);
  large ones on a GPU (`GPU_BATCH_TOKENS`).
- **Vocabulary**: SentencePiece; joint (tied embeddings) when both languages share an alphabet,
  one per side otherwise; sized to the corpus (`JOINT_VOCAB`, `SMALL_CORPUS_PAIRS`,
  `LARGE_CORPUS_PAIRS`), and halved for short budgets (`SHORT_BUDGET_TOKENS`: few tokens cannot
  teach many rare pieces, and the output layer costs less).
- **Selection**: the average of `AVERAGE_LAST` weight snapshots taken over the last part of the
  decay, the best epoch or the last weights — whichever validates best.
- **Fine-tuning a large pretrained model** (a public checkpoint opened by `core_model.marian`,
  or a version fine-tuned from one): what it already knows is worth more than the user's few
  hundred pairs can teach, so the run nudges it (`_pretrained`): a low peak rate
  (`PRETRAINED_PEAK_LR`, the rate of the Hugging Face course's fine-tuning of opus-mt-en-fr:
  huggingface.co/learn/nlp-course/chapter7/4) after a short warm-up (a share of the updates, at
  most `PRETRAINED_WARMUP_STEPS`), the checkpoint's own dropout, no memorising, and an
  automatic budget of at most `PRETRAINED_PASSES` passes (an epoch is one pass, validated after
  each) within the clock. A minutes budget is measured on the model itself: a 77M-parameter
  OPUS-MT model trains about ten times fewer tokens per second than the CPU `small` model
  (`relative_cost`).

(Over 450 lines on purpose: every automatic choice and the constant that decides it has this
one home, so the docs' table of them is generated from here and a newcomer who moves one —
the peak rate, a batch size — reads its neighbours beside it.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from core_model.tokenizer import shares_alphabet
from core_model.training.config import TrainConfig
from core_model.transformer import ModelConfig

if TYPE_CHECKING:  # a plan is made without torch (`python -m workbench train` only queues)
    from core_model.training.parallel import Calibration

AUTO = "auto"
# Up to this many pairs (what a run memorises, `TrainConfig.memorise_max_pairs`) the tiny model;
# beyond, `small` learns far more in the same 5-minute click, though it trains a third of the
# tokens a second (Multi30k slices, fp32, one core each, valid greedy BLEU small / tiny: 250
# pairs 8.24-8.33 / 3.02-3.10, 500 10.50-10.65 / 7.70, 1,000 13.73-13.87 / 7.99-8.32;
# docs/TRAINING.md "Tiny or small").
TINY_MAX_PAIRS = 200
BASE_MIN_PAIRS = 200_000  # the paper's base model pays off on a GPU from about here
# A CPU clock whose budget is below SHALLOW_MAX_TOKENS tokens of the `small` preset at 8k pieces
# (the basis of CPU_TOKENS_PER_S; a budget of work, the same whichever candidate was timed)
# trains `small` with SHALLOW_LAYERS encoder and decoder layers instead of 3: 1.25-1.34x the
# tokens a second, and more learned in the same minutes (Multi30k de-en, bf16, two runs side by
# side on the 2-core AMX Xeon, 1 thread each, valid greedy BLEU, 2 + 2 against 3 + 3:
# 13 minutes 35.39 (3.39M tokens) / 33.85 (2.53M), seed 1 36.18 (3.42M) / 33.39 (3.02M); at
# 20 minutes 3 + 3's 4.9M tokens won: 37.97 against 37.53 on average over three 2 + 2 runs).
# The gain, +2.2 where 3 + 3's budget was 2.2-2.6M basis tokens and -0.4 at 4.2M, crosses
# zero near 3.9M: the threshold stays below it (docs/TRAINING.md "Fewer layers for a short clock").
SHALLOW_LAYERS = 2
SHALLOW_MAX_TOKENS = 3_500_000

# Wall-clock ceiling of the automatic budget: a minute per thousand pairs, within these bounds.
AUTO_MINUTES_PER_1K_PAIRS = 1.0
AUTO_MINUTES_CPU = (5.0, 60.0)
AUTO_MINUTES_GPU = (5.0, 240.0)

# Linear warm-up: a share of the updates the budget buys, within bounds. (At 2M tokens and 887
# steps: 35 diverged early, 100 -1 valid BLEU, 150-200 best; at 1.1M tokens a 200-step warm-up
# was over a third of the run: valid 7.9.)
WARMUP_SHARE = 0.1
WARMUP_STEPS = (50, 200)
# A run that continues a trained model (same tokenizer, warm weights) only re-warms the
# optimizer's fresh moment estimates (a short ramp, so a short budget is not spent climbing),
# then takes the budget's own peak rate: a warm restart. (Multi30k, a second 1.1M-token run
# continuing the first, fp32: 30.7 valid BLEU at the peak 7e-4, 25.7 at a quarter of it; the
# first run 20.0.)
CONTINUE_WARMUP_STEPS = 50
# CPU batches (padded tokens), largest first: the largest that buys MIN_UPDATES updates, else
# the smallest. 1,250 instead of 2,500 gave +7 valid BLEU at 2M tokens; 625 +0.8 more there;
# at 1.1M tokens (fp32) 625 gave 18.2 valid BLEU (981 updates), 400 20.0-20.4 (1,531), 250
# 21.8 (2,507); Tatoeba zh→en 400: 11.8, 250: 13.5; at 4.4M tokens 625 36.7 against 35.4
# for 1,250 (1,959 updates): larger budgets also want the updates, so 625 is the largest.
# Between them 400 (2026-12-03, equal tokens, valid greedy): at 1.8M (2 + 2 layers, fp32)
# 31.01 / 30.77 against 625's 29.39 / 27.30 (seeds 0 / 1; 250: 32.03, seed 0), at 2.7M
# (3 + 3, bf16) 35.16 against 33.75 — so the 625 batch needs 2,500 of its updates (2.73M
# tokens). A smaller batch trains fewer tokens a second, which the plan times: with AVX2 fp32
# 400 read 0.96x 625 on one thread, ~0.9x on two; in bf16 on two threads ~0.9x.
CPU_BATCH_TOKENS = (625, 400, 250)
MIN_UPDATES = 2_500
# Peak rate of the small CPU batches of short budgets, by the most padded tokens a batch has:
# the smaller the batch, the noisier its gradient and the gentler the step it wants (see
# _peak_lr); larger batches take PEAK_LR.
SMALL_BATCH_LRS = ((250, 5e-4), (625, 7e-4))
PEAK_LR = 1e-3  # pre-norm tiny/small with larger batches (2e-3 learned less at equal data)
BASE_PEAK_LR = 7e-4  # the post-norm base: the paper's gentler peak (d_model^-0.5 · 4000^-0.5)
MEMORISE_PEAK_LR = 4e-3  # memorising a few pairs: twice as fast as PEAK_LR (16 pairs: 75 steps)
REAL_TOKENS_PER_PADDED = 1.75  # source + target tokens per padded batch token (Multi30k 1.8,
# Tatoeba 1.7: a batch is counted as max(src, tgt) x sentences)
GPU_BATCH_TOKENS = 8192  # (not tuned here: no GPU was available)
# Budgets below these halve the vocabulary (see _vocab_size), a joint one and one per side
# (10-minute clicks, valid greedy BLEU). Joint (Multi30k de-en): 8k 37.85 at 3.68M tokens
# against 4k's 36.47-37.15 at 3.50-3.64M; 8k 35.80 and 36.98 at 3.05-3.06M against 4k's
# 36.06-36.58 at 3.00-3.31M (a draw); equal at 2M. So a joint vocabulary halves below 3.0M:
# from a draw up, and a plan near it ends 0.96-1.33x its tokens (the final clicks trained
# 3.00-4.17M), where 8k pulls ahead. Per side (Tatoeba
# zh-en): 4k 24.07 at 3.20M against 2k's 20.41 at 3.07M, but 2k 11.8 against 4k 8.4 at 1.1M:
# the gain changes sign near 2M.
SHORT_BUDGET_TOKENS = {"joint": 3_000_000, "per side": 2_500_000}
# SentencePiece pieces of a joint vocabulary for tens of thousands of pairs (one per side: half
# that each); halved for a corpus below SMALL_CORPUS_PAIRS, doubled from LARGE_CORPUS_PAIRS.
JOINT_VOCAB = 8_000
SMALL_CORPUS_PAIRS = 5_000
LARGE_CORPUS_PAIRS = 200_000
# Dropout: none while the budget sees the corpus at most this many times, else the paper's;
# a corpus below SMALL_CORPUS_PAIRS (what users bring) goes without it for longer. Measured at
# token budgets (fp32, 2 + 2, valid greedy; docs/TRAINING.md, "Dropout's cost"): a 2,000-pair
# Multi30k slice without dropout, smoothing 0.2, at 17 passes +0.80 (two seeds, chrF +2.1),
# ~1.1x the tokens/s, at 25 a draw, at 35 the paper's pair +0.26; its 5-minute click on a
# laptop core (15-21 passes) +0.95 over four seeds, a 4,000-pair slice's (~11 passes) +2.1
# over two. Tatoeba (24k pairs) at 8.2 passes +0.37, but its 10-minute click (10-12 passes
# without dropout) -0.3 over two seeds.
NO_DROPOUT_MAX_PASSES = 8
SMALL_CORPUS_NO_DROPOUT_MAX_PASSES = 25
DROPOUT = 0.1
# Label smoothing (§5.4): the paper's 0.1, and more from SMOOTHER_FROM_PASSES passes over the
# corpus while dropout is off (`_no_dropout_max_passes`), where a model without dropout starts
# to fit it (the validation loss flattens over the last epochs): smoothing regularises at no
# cost a step, where dropout slows every step and learning (beyond, the paper's dropout and
# smoothing).
# At the AMX Xeon's idle click's ~4.2M tokens (5.5 passes over Multi30k, 13-minute
# side-by-side runs, valid greedy) 0.2 gave 38.44 / 37.84 against 0.1's 37.27 / 37.15 (seeds
# 0 / 1); below 4 passes a draw: Multi30k at 2.9 passes +0.71 / +0.07, at 1.4 -0.03 (fp32,
# token budgets), Tatoeba at 3 passes -0.5 (docs/TRAINING.md, "Dropout's cost").
LABEL_SMOOTHING = 0.1
SMOOTHER_FROM_PASSES = 4
SMOOTHER_LABEL_SMOOTHING = 0.2
AVERAGE_LAST = 5  # weight snapshots averaged at the end of the decay (training.selection)
# A run's tokens/s (validation, batching and reporting included) against the calibration's
# full-step speed: the share of the clock that trains.
RUN_SHARE_OF_CALIBRATION = 0.9

# Typical training speed (source + target tokens per second, a run's average with its
# validations) by preset: the first guess of a minutes budget's tokens, which a CPU run then
# replaces by a measurement (`calibration`); used as is on a GPU and across data-parallel
# ranks. CPU small: what a 2-core machine sustains in a 10-minute click at its 625-token
# batches (5,491 fp32 with AVX2 kernels, 5,619-6,588 bf16: docs/TRAINING.md). The old guess,
# 2,500, made a click time two candidates (~36 s of its 10 minutes) that nothing trained; near
# the measurement, the first candidate timed is the one the run trains.
CPU_TOKENS_PER_S = {"tiny": 12_000.0, "small": 5_000.0, "base": 600.0}
GPU_TOKENS_PER_S = {"tiny": 200_000.0, "small": 150_000.0, "base": 80_000.0}

# Fine-tuning a large pretrained model (module docstring): peak rate, warm-up, passes.
PRETRAINED_PEAK_LR = 2e-5
PRETRAINED_WARMUP_STEPS = 50  # at most; a tenth of the planned updates below that
PRETRAINED_PASSES = 10  # the automatic budget's ceiling, in passes over the corpus


LENGTH_SAMPLE = 2_000  # pairs whose lengths the calibration's batches are made of
SUBWORDS_PER_WORD = 1.3  # SentencePiece pieces per rough token (word) of our vocabularies
LONGEST_SIDE = 255  # no side is longer (TrainConfig.max_len, less the EOS)


@dataclass(frozen=True)
class CorpusFacts:
    """What the recipe needs to know about the data (cheap to compute before tokenizing)."""

    train_pairs: int
    valid_pairs: int
    tokens: int  # rough source + target token count of the training pairs
    shared_alphabet: bool  # both languages write with mostly the same letters (de/en)
    # estimated subword lengths (source, target) of an even sample of the training pairs:
    # the length mix the calibration batches as the run will (empty: `side_tokens` each)
    lengths: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, train: list[tuple[str, str]], valid: list[tuple[str, str]] | None) -> CorpusFacts:
        """Tokens estimated as words, or characters / 1.5 for unsegmented scripts."""
        rough = [(_rough_tokens(s), _rough_tokens(t)) for s, t in train]
        tokens = sum(s + t for s, t in rough)
        shared = shares_alphabet([s for s, _ in train], [t for _, t in train])
        every = max(1, len(rough) // LENGTH_SAMPLE)
        lengths = tuple((_subwords(s), _subwords(t)) for s, t in rough[::every][:LENGTH_SAMPLE])
        return cls(len(train), len(valid or []), tokens, shared, lengths)

    @property
    def side_tokens(self) -> int:
        """Typical subword tokens of one side of a pair (about 1.3 per word), for timing."""
        per_side = SUBWORDS_PER_WORD * self.tokens / max(1, 2 * self.train_pairs)
        return min(64, max(4, round(per_side)))

    def length_mix(self) -> list[tuple[int, int]]:
        """The (source, target) subword lengths a calibration batches: the sample's, else
        `side_tokens` on both sides (facts given without their sample)."""
        return list(self.lengths) or [(self.side_tokens, self.side_tokens)] * 64


def _subwords(rough_tokens: int) -> int:
    return min(LONGEST_SIDE, max(1, round(SUBWORDS_PER_WORD * rough_tokens)))


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


@dataclass(frozen=True)
class Plan:
    """The resolved config and the token budget its choices were made for."""

    cfg: TrainConfig
    budget_tokens: float | None  # asked for, or projected from the clock; None: unknown
    calibration: Calibration | None = None  # the measured speed a projection used
    corpus_tokens: int = 0  # of the training pairs, as `CorpusFacts.tokens` counts them

    @property
    def passes(self) -> float | None:
        """Passes over the training pairs the budget buys (None: unknown, memorising)."""
        if self.budget_tokens is None:
            return None
        return self.budget_tokens / max(1, self.corpus_tokens)

    def metrics(self) -> dict[str, Any]:
        """What a user sees of the plan in the run's metrics."""
        projected = self.calibration is not None
        passes = self.passes
        return {
            "budget_tokens": None if self.budget_tokens is None else int(self.budget_tokens),
            "budget_passes": None if passes is None else round(passes, 2),
            "budget_tokens_projected": projected,
            "calibration": self.calibration.to_dict() if projected else None,
        }


# Candidates a minutes budget times at most: the typical speed's guess, the measured budget's
# (another batch, vocabulary or dropout: the budget crossed CPU_BATCH_TOKENS' updates,
# SHORT_BUDGET_TOKENS or NO_DROPOUT_MAX_PASSES), and one more where that points back (the
# guess timed again: one slow reading must not decide the vocabulary alone).
MEASURED_CANDIDATES = 3
# How fast this machine trains a candidate config (`calibration.measure` in the trainer).
Speed = Callable[[TrainConfig], "Calibration"]


def resolve(
    cfg: TrainConfig,
    facts: CorpusFacts,
    gpu: bool,
    fine_tune: bool = False,
    speed: Speed | None = None,
    pretrained: ModelConfig | None = None,
) -> Plan:
    """`cfg` with every automatic choice made (see the module docstring). `fine_tune`: the run
    continues a trained model (a short re-warm-up, the budget's own peak rate). `pretrained`:
    the model it continues is a large pretrained one (its config): the gentle branch. `speed`:
    how fast this machine trains a candidate (a CPU run with minutes measures it; without it
    the minutes are converted at the preset's typical speed)."""
    if pretrained is not None:
        return _pretrained(cfg, facts, gpu, pretrained, speed)
    memorise = memorises(cfg, facts)
    preset = cfg.preset if cfg.preset != AUTO else _preset(facts, gpu)
    time_budget_s = cfg.time_budget_s
    if time_budget_s is None and cfg.epochs is None and cfg.token_budget is None and not memorise:
        time_budget_s = 60.0 * auto_minutes(facts.train_pairs, gpu)
    base = replace(cfg, preset=preset, time_budget_s=time_budget_s)
    # fewer layers may only pay on a CPU's clock, for a model nobody fixed
    clock = time_budget_s is not None and cfg.token_budget is None and cfg.epochs is None
    shallow = (
        clock
        and (cfg.preset, preset) == (AUTO, "small")
        and not (gpu or fine_tune or cfg.model_overrides)
    )
    choose = partial(
        _choose, facts=facts, gpu=gpu, fine_tune=fine_tune, memorise=memorise, shallow=shallow
    )
    # a continued run trains its own model whatever the vocabulary: nothing to scale
    choose_for = partial(_choose_for, choose, base, scale=not fine_tune)
    calibration = None
    tokens = _budget_tokens(base, facts, gpu, memorise, None)
    if speed is not None and tokens is not None and cfg.token_budget is None and cfg.epochs is None:
        # minutes: measure the candidate for the estimate, then the one for the measured budget
        # while that differs (a short budget trains a cheaper configuration). A budget on a
        # threshold may still point back (8k pieces timed slower than 4k project under 3.0M
        # tokens): then the cheaper one trains, planned on the dearer one's speed scaled to
        # its own model (`_choose_for`) — what the trainer, given that one measurement,
        # chooses too.
        measured: TrainConfig | None = None
        for _ in range(MEASURED_CANDIDATES):
            candidate, _ = choose_for(tokens, calibration)
            if measured is not None and _same_cost(candidate, measured):
                break
            calibration, measured = speed(candidate), candidate
            tokens = _budget_tokens(base, facts, gpu, memorise, calibration)
    chosen, tokens = choose_for(tokens, calibration)
    return Plan(chosen, tokens, calibration, facts.tokens)


def _choose_for(
    choose: Callable[[TrainConfig, float | None], TrainConfig],
    cfg: TrainConfig,
    tokens: float | None,
    calibration: Calibration | None,
    scale: bool,
) -> tuple[TrainConfig, float | None]:
    """`choose` (`_choose` bound to the run's facts) for `tokens` projected from `calibration`,
    and the tokens it plans. The vocabulary follows those tokens; where it is not the timed
    model's (and `scale`: not a continued run, which trains its own model), the rest (the
    batch, the warm-up, dropout) and the plan follow the tokens the chosen model trains instead:
    the timed speed scaled by the work a token meets (`ModelConfig.token_work`; 4k pieces
    instead of 8k: 1.15x, measured 1.16-1.34x). Else a slow laptop's 8k timing chose 250-token
    batches for the 4k model, which trained 1.44M tokens where 625-token batches trained 2.11M.
    (The layers follow the budget's work, tokens x the work of a token of the model they count,
    which this scaling keeps: they are the same in both choices.)"""
    timed = calibration.token_work if calibration is not None and calibration.token_work else 0
    chosen = choose(cfg, tokens, timed or _basis_work())
    if not scale or not timed or tokens is None:
        return chosen, tokens
    work = chosen.candidate_model().token_work
    if math.isclose(timed / work, 1.0):
        return chosen, tokens
    own = tokens * timed / work
    pinned = replace(cfg, vocab_size=chosen.vocab_size)
    return choose(pinned, own, work), own


def replan(
    plan: Plan,
    requested: TrainConfig,
    facts: CorpusFacts,
    fine_tune: bool,
    gpu: bool,
    tokens: float,
) -> Plan:
    """`plan` for a run that will train `tokens` instead of `plan.budget_tokens` (it trains
    faster or slower than calibrated, `training.pace`): the automatic choices that follow the
    budget and can still change once the run has started — dropout (the passes it will make),
    a CPU's batch and its peak rate (the updates the tokens must buy: a core taken at minute 2
    leaves a click too few of them at 625 tokens) and the warm-up (the updates it buys); the
    vocabulary and the model are fixed by then, and the decay and the averaging window follow
    the clock already."""
    cfg = plan.cfg
    passes = tokens / max(1, facts.tokens)
    batch = _batch(requested, gpu, tokens)
    lr = requested.lr if requested.lr is not None else _peak_lr(cfg.preset, False, batch)
    warmup = _warmup(requested, False, fine_tune, tokens, batch)
    if cfg.lr_schedule == "noam":  # the paper's curve: its rate follows the warm-up it began with
        lr, warmup = cfg.lr, cfg.warmup_steps
    return Plan(
        replace(
            cfg,
            **_regularisation(requested, passes, facts.train_pairs, False),
            max_tokens_per_batch=batch,
            lr=lr,
            warmup_steps=warmup,
        ),
        tokens,
        plan.calibration,
        plan.corpus_tokens,
    )


def _budget_tokens(
    cfg: TrainConfig,
    facts: CorpusFacts,
    gpu: bool,
    memorise: bool,
    calibration: Calibration | None,
) -> float | None:
    """The source + target tokens the run will train: asked for, or the clock at the measured
    speed (or at the preset's typical speed), or the epochs over the corpus; None: memorising."""
    if cfg.token_budget is not None:
        return float(cfg.token_budget)
    if cfg.epochs is not None:
        return float(cfg.epochs) * facts.tokens
    if memorise or cfg.time_budget_s is None:
        return None
    if calibration is not None:
        return calibration.tokens_in(cfg.time_budget_s) * RUN_SHARE_OF_CALIBRATION
    return cfg.time_budget_s * (GPU_TOKENS_PER_S if gpu else CPU_TOKENS_PER_S)[cfg.preset]


def _choose(
    cfg: TrainConfig,
    tokens: float | None,
    work: int,
    *,
    facts: CorpusFacts,
    gpu: bool,
    fine_tune: bool,
    memorise: bool,
    shallow: bool,
) -> TrainConfig:
    """Every remaining automatic choice for a budget of `tokens` (None: unbounded) of a model
    whose token costs `work` (`ModelConfig.token_work`). `shallow`: fewer layers may pay (a
    CPU clock, the `small` preset chosen for the user, no layers of theirs)."""
    joint = cfg.joint_vocab if cfg.joint_vocab is not None else facts.shared_alphabet
    batch = _batch(cfg, gpu, tokens)
    passes = math.inf if tokens is None else tokens / max(1, facts.tokens)
    return replace(
        cfg,
        **_regularisation(cfg, passes, facts.train_pairs, memorise),
        lr_schedule=cfg.lr_schedule if cfg.lr_schedule != AUTO else _schedule(memorise),
        lr=cfg.lr if cfg.lr is not None else _peak_lr(cfg.preset, memorise, batch),
        warmup_steps=_warmup(cfg, memorise, fine_tune, tokens, batch),
        max_tokens_per_batch=batch,
        joint_vocab=joint,
        vocab_size=cfg.vocab_size or _vocab_size(facts, joint, tokens),
        model_overrides=_layers(cfg, shallow, tokens, work),
        # memorising has no budget end to average over, nor validation to check an average by
        average_last=(
            cfg.average_last if cfg.average_last is not None else 0 if memorise else AVERAGE_LAST
        ),
    )


def _pretrained(
    cfg: TrainConfig,
    facts: CorpusFacts,
    gpu: bool,
    model: ModelConfig,
    speed: Speed | None,
) -> Plan:
    """The fine-tuning branch for a large pretrained model (see the module docstring): the
    budget in tokens (a minutes budget measured on `model` itself by `speed`), then a low
    peak rate, a short warm-up and the checkpoint's dropout."""
    automatic = cfg.epochs is None and cfg.time_budget_s is None and cfg.token_budget is None
    preset = cfg.preset if cfg.preset != AUTO else _preset(facts, gpu)
    time_budget_s = 60.0 * auto_minutes(facts.train_pairs, gpu) if automatic else cfg.time_budget_s
    base = replace(
        cfg,
        preset=preset,
        time_budget_s=time_budget_s,
        # an epoch is one pass (validated, so patience can stop a run that starts to forget),
        # and the automatic budget is at most PRETRAINED_PASSES of them
        min_epoch_steps=1,
        min_steps=1,
        adaptive_passes=PRETRAINED_PASSES,
    )
    calibration = None
    if time_budget_s is None or cfg.token_budget is not None:  # tokens, or epochs
        tokens = _budget_tokens(base, facts, gpu, False, None)
    else:  # minutes: at the measured speed of the model itself, else at a first guess
        tokens = time_budget_s * estimated_tokens_per_s(model, gpu)
    batch = _batch(cfg, gpu, tokens)
    if speed is not None and tokens is not None and cfg.token_budget is None and cfg.epochs is None:
        calibration = speed(replace(base, max_tokens_per_batch=batch))
        tokens = _budget_tokens(base, facts, gpu, False, calibration)
    if automatic and tokens is not None:
        tokens = min(tokens, PRETRAINED_PASSES * facts.tokens)
    planned = updates(tokens, batch) if tokens is not None else None
    warmup = cfg.warmup_steps
    if warmup is None:
        short = round(WARMUP_SHARE * planned) if planned is not None else PRETRAINED_WARMUP_STEPS
        warmup = max(1, min(PRETRAINED_WARMUP_STEPS, short))
    chosen = replace(
        base,
        dropout=cfg.dropout if cfg.dropout is not None else model.dropout,
        label_smoothing=(
            cfg.label_smoothing if cfg.label_smoothing is not None else LABEL_SMOOTHING
        ),
        lr_schedule=cfg.lr_schedule if cfg.lr_schedule != AUTO else "linear",
        lr=cfg.lr if cfg.lr is not None else PRETRAINED_PEAK_LR,
        warmup_steps=warmup,
        max_tokens_per_batch=batch,
        average_last=cfg.average_last if cfg.average_last is not None else AVERAGE_LAST,
    )
    return Plan(chosen, tokens, calibration, facts.tokens)


def _layers(cfg: TrainConfig, shallow: bool, tokens: float | None, work: int) -> dict[str, Any]:
    """The network's overrides: SHALLOW_LAYERS a side where fewer layers may pay and the
    budget's work is below SHALLOW_MAX_TOKENS tokens of the basis model; else the user's."""
    if not shallow or tokens is None or tokens * work >= SHALLOW_MAX_TOKENS * _basis_work():
        return cfg.model_overrides
    return {"n_encoder_layers": SHALLOW_LAYERS, "n_decoder_layers": SHALLOW_LAYERS}


@cache
def _basis_work() -> int:
    """The work a token of CPU_TOKENS_PER_S' model meets (`small` at 8k pieces)."""
    return ModelConfig.from_preset("small", src_vocab_size=8_000, tgt_vocab_size=8_000).token_work


def relative_cost(model: ModelConfig, basis: ModelConfig | None = None) -> float:
    """How many times the work of a token of `basis` one token of `model` costs
    (`ModelConfig.token_work`). The default basis is the `small` preset with an 8k
    vocabulary, the model of the typical speeds (a 6+6-layer d512 OPUS-MT model with 58k
    pieces: about 10); a page compares with the model a new run of the corpus would train
    instead (a small public model costs a fraction of it: never "0×")."""
    return model.token_work / (basis.token_work if basis else _basis_work())


def estimated_tokens_per_s(model: ModelConfig, gpu: bool) -> float:
    """A first guess of `model`'s training speed before any measurement: the `small`
    preset's typical speed divided by `relative_cost`."""
    typical = (GPU_TOKENS_PER_S if gpu else CPU_TOKENS_PER_S)["small"]
    return typical / relative_cost(model)


def same_shapes(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two candidates train the same model, vocabulary and batch: dropout aside, the
    same work a step on every layout."""
    return same_layers_and_batch(a, b) and (a.vocab_size, a.joint_vocab) == (
        b.vocab_size,
        b.joint_vocab,
    )


def same_layers_and_batch(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two candidates train the same layers on the same batch, their vocabularies
    aside: what ranks the layouts (a vocabulary's embedding and output layer, like dropout's
    masks, add work per token to every layout alike)."""
    return (a.preset, a.model_overrides, a.max_tokens_per_batch) == (
        b.preset,
        b.model_overrides,
        b.max_tokens_per_batch,
    )


def _same_cost(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two candidates train at the same speed: the same shapes, and dropout on in both
    or in neither (on a CPU dropout's random masks cost a step ~20 %: a run planned on a timing
    without them trained at 0.85× its calibration)."""
    return same_shapes(a, b) and bool(a.dropout) == bool(b.dropout)


def updates(tokens: float, batch_tokens: int) -> float:
    """About how many optimizer steps `tokens` buy at `batch_tokens` padded tokens a batch."""
    return tokens / (batch_tokens * REAL_TOKENS_PER_PADDED)


def _batch(cfg: TrainConfig, gpu: bool, tokens: float | None) -> int:
    """The user's batch, else a GPU's large one, else the CPU batch `tokens` want."""
    return cfg.max_tokens_per_batch or (GPU_BATCH_TOKENS if gpu else _cpu_batch(tokens))


def _cpu_batch(tokens: float | None) -> int:
    """The largest CPU batch that still buys MIN_UPDATES updates (else the smallest)."""
    for batch in CPU_BATCH_TOKENS:
        if tokens is None or updates(tokens, batch) >= MIN_UPDATES:
            return batch
    return CPU_BATCH_TOKENS[-1]


def _warmup(
    cfg: TrainConfig, memorise: bool, fine_tune: bool, tokens: float | None, batch_tokens: int
) -> int | None:
    """The user's; memorising runs keep the constant schedule's short default (None); a run
    that continues a trained model only re-warms the optimizer's fresh moment estimates
    (CONTINUE_WARMUP_STEPS); else a tenth of the updates the budget buys, within WARMUP_STEPS
    (the most when unbounded)."""
    if cfg.warmup_steps is not None or memorise:
        return cfg.warmup_steps
    if fine_tune:
        return CONTINUE_WARMUP_STEPS
    low, high = WARMUP_STEPS
    if tokens is None:
        return high
    return int(min(high, max(low, round(WARMUP_SHARE * updates(tokens, batch_tokens), -1))))


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


def _regularisation(
    cfg: TrainConfig, passes: float, pairs: int, memorise: bool
) -> dict[str, float]:
    """What follows the passes the budget makes over the corpus of `pairs` training pairs (at
    the start and at each re-plan): dropout and label smoothing, each the user's where they set
    it."""
    max_passes = _no_dropout_max_passes(pairs)
    dropout = _dropout(passes, max_passes, memorise) if cfg.dropout is None else cfg.dropout
    smoothing = cfg.label_smoothing
    if smoothing is None:
        smoothing = _label_smoothing(passes, max_passes, memorise)
    return {"dropout": dropout, "label_smoothing": smoothing}


def _no_dropout_max_passes(pairs: int) -> int:
    """The passes up to which a corpus trains without dropout: more for a small one, where a
    few thousand pairs' short runs still learn more without it than they overfit."""
    return (
        SMALL_CORPUS_NO_DROPOUT_MAX_PASSES if pairs < SMALL_CORPUS_PAIRS else NO_DROPOUT_MAX_PASSES
    )


def _dropout(passes: float, max_passes: int, memorise: bool) -> float:
    """No dropout when the budget sees the corpus only `max_passes` times or fewer: it cannot
    overfit then, and dropout slows learning; the paper's beyond that, against memorising."""
    if memorise:
        return 0.0  # memorising is the goal
    return 0.0 if passes <= max_passes else DROPOUT


def _label_smoothing(passes: float, max_passes: int, memorise: bool) -> float:
    """The paper's smoothing, and more from SMOOTHER_FROM_PASSES passes while dropout is off
    (up to `max_passes`; beyond, the paper's dropout and smoothing, the pair it measured);
    memorising wants the pairs themselves."""
    if memorise or not SMOOTHER_FROM_PASSES <= passes <= max_passes:
        return LABEL_SMOOTHING
    return SMOOTHER_LABEL_SMOOTHING


def _schedule(memorise: bool) -> str:
    """Constant rate while memorising (no budget end to decay to), else linear decay."""
    return "constant" if memorise else "linear"


def _peak_lr(preset: str, memorise: bool, batch_tokens: int) -> float:
    """Pre-norm small/tiny models: PEAK_LR, gentler with the small CPU batches, whose noisier
    gradients want a gentler step (SMALL_BATCH_LRS; the measurements are docs/TRAINING.md's
    "peak rate"); memorising a few pairs goes faster at MEMORISE_PEAK_LR; the post-norm base
    needs the paper's gentler BASE_PEAK_LR."""
    if preset == "base":
        return BASE_PEAK_LR
    if memorise:
        return MEMORISE_PEAK_LR
    return next((lr for most, lr in SMALL_BATCH_LRS if batch_tokens <= most), PEAK_LR)


def _vocab_size(facts: CorpusFacts, joint: bool, tokens: float | None) -> int:
    """Pieces per SentencePiece vocabulary: JOINT_VOCAB joint (tied embeddings, de/en) or half
    that per side (zh/en) for tens of thousands of pairs; half for small corpora (their rare
    pieces are seen too seldom to learn), twice for big ones. A short budget halves either:
    few tokens cannot teach many rare pieces (docs/TRAINING.md's "vocabulary"). A Chinese side
    keeps every character whatever the size (SentencePiece grows the vocabulary to them)."""
    size = JOINT_VOCAB if joint else JOINT_VOCAB // 2
    if facts.train_pairs < SMALL_CORPUS_PAIRS:
        size //= 2
    elif facts.train_pairs >= LARGE_CORPUS_PAIRS:
        size *= 2
    if tokens is not None and tokens < SHORT_BUDGET_TOKENS["joint" if joint else "per side"]:
        size //= 2
    return size
