"""The training loop (§5 Training): teacher forcing, label-smoothed cross-entropy, Adam with a
scheduled learning rate, validation after every epoch, early stopping, checkpoints, and the
choice of the final weights.

`train()` is the one entry point (the workbench's worker and the benchmarks call it); it builds
a `Trainer`, whose changing state is one `TrainerState` — what a checkpoint stores and a resume
restores. Everything the loop reports goes through `ProgressEvent`s.

(Over 450 lines on purpose: the loop reads top to bottom in one class — setup, epochs, step,
validation, selection, the end — as nanoGPT's train.py does; its parts live in the modules
it imports.)
"""

from __future__ import annotations

import math
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core_model.artifact import ArtifactError, save_model
from core_model.batching import Batch, collate, encode_pairs, make_batches, rank_share, rebatch
from core_model.tokenizer import TokenizerPair
from core_model.training import checkpoint as ckpt
from core_model.training import pace, progress, recipe, setup
from core_model.training.calibration import Calibration, fastest, measure_candidate
from core_model.training.config import TrainConfig, TrainingError
from core_model.training.parallel import CorePin, Layout, Ranks, data_parallel
from core_model.training.precision import (
    SINGLE_THREAD_PARAMETERS,
    cpu_threads,
    idle_cores,
    is_out_of_memory,
    precision_name,
    resolve_precision,
    shape_multiple,
)
from core_model.training.progress import ProgressEvent, StopReason
from core_model.training.schedule import BudgetClock, make_schedule, plan_budget
from core_model.training.selection import Selector
from core_model.training.state import TrainerState
from core_model.training.step import clip_and_check, forward_backward
from core_model.training.validation import (
    evaluate_loss,
    evaluate_translations,
    exact_match_share,
    reproducible_pairs,
)
from core_model.transformer import ModelConfig, Transformer

FINAL_VALIDATIONS = 2  # what choosing the final weights may validate: the average, the last
MAX_RESERVE_SHARE = 0.2  # of a time budget, at most, kept for them
VALIDATION_IDLE_SAMPLE_S = 0.1  # how long rank 0 looks for idle cores before a validation
# The work at an epoch's end (validation, checkpoint) takes at most this share of the run: a
# small corpus' epochs (25 steps, a few seconds) lengthen until it does (`_lengthen_epochs`).
EPOCH_END_SHARE = 0.1


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
    speed: Calibration | None = None,
    threads: int | None = None,
) -> TrainResult:
    """Train a Transformer on `train_pairs`; validate on `valid_pairs` after every epoch.

    - `out_dir`: checkpoints go to out_dir/checkpoint each epoch (resumable); on success the
      finished model folder (config.json, model.safetensors, tokenizer/) is written to out_dir
      and the checkpoint removed (unless cfg.keep_checkpoint).
    - `init_from`: a model folder to fine-tune (its model config and tokenizers are reused).
    - `resume_from`: a checkpoint folder (or an out_dir that holds one) to continue from.
    - `callback(ProgressEvent)` every `progress_every_s` seconds, after each epoch and at the
      end, and with the loss curve's points ('loss', `progress.loss_stride`).
    - `should_cancel()` is polled every step; a cancelled run returns `cancelled=True` with the
      current weights and writes no model folder (the last epoch checkpoint stays resumable).
    - `extra_config` is stored in config.json (e.g. a corpus hash).
    - `speed`: this machine's measured speed for the run's layout (`layout.choose_layout`),
      which a minutes budget is planned by instead of a measurement of its own (data-parallel
      ranks must all plan alike); a resumed run keeps its first measurement.
    - `threads`: CPU threads to train with (None: the idle cores); fewer while a core is taken
      (`pace.ThreadWatch`) unless `cfg.num_threads` fixes them.
    Raises TrainingError with a user-facing sentence on bad input, divergence or OOM.
    """
    trainer = Trainer(cfg or TrainConfig(), callback, should_cancel, speed, threads)
    threads = torch.get_num_threads()
    try:
        trainer.setup(train_pairs, valid_pairs, out_dir, init_from, resume_from)
        with trainer.core_pin:  # a CPU rank trains on cores of its own
            trainer.run()
        return trainer.finish(extra_config)
    except TrainingError:
        raise
    except RuntimeError as exc:
        if is_out_of_memory(exc):
            raise TrainingError(
                "Out of memory during training; lower max_tokens_per_batch or use a smaller preset."
            ) from exc
        raise
    finally:
        torch.set_num_threads(threads)  # the caller's process keeps its own setting


class Trainer:
    """One training run: `setup` (data, tokenizers, model, budget), `run` (the epochs), `finish`
    (the final weights, the model folder, the metrics)."""

    def __init__(
        self,
        cfg: TrainConfig,
        callback: Callable[[ProgressEvent], None] | None = None,
        should_cancel: Callable[[], bool] | None = None,
        speed: Calibration | None = None,
        threads: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.callback = callback
        self.should_cancel = should_cancel
        self.measured_speed = speed
        self.threads = threads
        self.ranks = Ranks()
        self.state = TrainerState()
        self.stop_reason: StopReason | None = None  # set when the run ends
        self.throughput = 0.0  # tokens/s of the latest reporting window
        self.current_epoch = 0  # the epoch being trained (state.epoch counts completed ones)
        self.loss_window = [0.0, 0]  # loss sum and target tokens since the last 'loss' event
        self.pending: deque[list[int]] = deque()  # the epoch's batches not trained yet
        self.pretrained: dict[str, Any] | None = None  # the public checkpoint it descends from
        # the speed and precision planned with were measured by an earlier attempt (`_speed`)
        self.calibration_kept = False

    # -- setup ---------------------------------------------------------------------------------
    def setup(
        self,
        train_pairs: Sequence[tuple[str, str]],
        valid_pairs: Sequence[tuple[str, str]] | None,
        out_dir: str | Path | None,
        init_from: str | Path | None,
        resume_from: str | Path | None,
    ) -> None:
        ranks = self.ranks
        self.cfg.check()
        self.device = setup.choose_device(self.cfg.device, ranks)
        self.comm_device = ranks.comm_device(self.device)

        train_clean, valid_clean = setup.clean_pairs(train_pairs), setup.clean_pairs(valid_pairs)
        if not train_clean:
            raise TrainingError("The training corpus is empty: add sentence pairs with both sides.")
        # The run's own choices as asked (a checkpoint is matched against these), then every
        # automatic one made by the recipe (saved with the model: reproducible).
        self.requested = self.cfg
        facts = recipe.CorpusFacts.of(train_clean, valid_clean)
        gpu, fine_tune = self.device.type == "cuda", init_from is not None
        self.out_path = Path(out_dir) if out_dir is not None else None
        self.ckpt_dir = self.out_path / "checkpoint" if self.out_path is not None else None
        resume_dir = ckpt.find_checkpoint(resume_from)
        if resume_from is not None and resume_dir is None:
            raise TrainingError(f"No checkpoint to resume from in {resume_from}.")
        # A large pretrained model (a public checkpoint, or a version fine-tuned from one)
        # takes the recipe's gentle branch, and its descent is recorded with the result.
        start = setup.continued(init_from) if init_from is not None else None
        self.pretrained = start.pretrained if start is not None else None
        pretrained = start.model if start is not None and start.pretrained else None
        speed = self._speed(facts, resume_dir, start.model if start is not None else None)
        self.plan = recipe.resolve(self.requested, facts, gpu, fine_tune, speed, pretrained)
        self.cfg = cfg = self.plan.cfg
        self.facts, self.fine_tune = facts, fine_tune
        self.budget_tokens_at_start = self.plan.budget_tokens
        self.state.calibration = self.plan.metrics()["calibration"]

        tokenizers, mcfg, init_model = setup.starting_point(
            cfg, train_clean, resume_dir, resume_from, init_from, ranks, self.comm_device
        )
        self.tokenizers, self.mcfg = tokenizers, mcfg

        max_len = min(cfg.max_len, mcfg.max_len)
        self.train_ex = encode_pairs(train_clean, tokenizers, max_len)
        self.valid_ex = encode_pairs(valid_clean, tokenizers, max_len)
        if not self.train_ex:
            raise TrainingError("The training corpus is empty after tokenization.")
        self.valid_translate = valid_clean[: max(0, cfg.valid_max_sentences)]
        # A handful of validation pairs is noise: report it, but do not stop or pick weights by it.
        use_validation = len(self.valid_ex) >= cfg.min_valid_pairs
        self.memorise = pretrained is None and recipe.memorises(self.requested, facts)
        # waited for: the pairs it can reproduce (a continued tokenizer may lack a character)
        self.memorise_pairs = reproducible_pairs(tokenizers, train_clean) if self.memorise else []
        self.unreproducible = len(train_clean) - len(self.memorise_pairs) if self.memorise else 0
        metric = cfg.early_stop_metric
        if metric == "auto":
            metric = "bleu" if self.valid_translate else "loss"
        self.selector = Selector(metric, use_validation, cfg.average_last)

        torch.manual_seed(cfg.seed)
        self.model = init_model if init_model is not None else Transformer(mcfg)
        self.model.to(self.device).train()
        self.n_params = self.model.num_parameters()
        # 'auto' trains at the precision measured fastest on this machine's real batches
        measured = self.plan.calibration or self.measured_speed
        asked = cfg.precision
        precision = measured.precision if asked == "auto" and measured is not None else asked
        self.amp = resolve_precision(precision, self.device, self.n_params)
        self.shape_multiple = shape_multiple(self.device, self.amp)
        self.default_threads = torch.get_num_threads()
        self._set_threads()
        own = self.ranks.own_cores(torch.get_num_threads()) if self.device.type == "cpu" else None
        self.core_pin = CorePin(own)
        self.optimizer = setup.make_optimizer(cfg, self.model)
        # an update is the recipe's batch size whatever the ranks: each takes its part of it
        self.batch_tokens = self.batch_tokens_at_start = int(cfg.max_tokens_per_batch)
        n_batches = len(make_batches(self.train_ex, self.batch_tokens, seed=cfg.seed))
        self.rank_shares = pace.RankShares(ranks.world, adaptive=self.device.type == "cpu")
        asked = self.requested
        self.budget = plan_budget(
            n_batches,
            cfg,
            memorise=self.memorise,
            # minutes or tokens the user asked for end the run, not a planned step count
            open_ended=asked.epochs is None
            and (asked.time_budget_s is not None or asked.token_budget is not None),
        )
        self.schedule = make_schedule(cfg, mcfg.d_model, self.budget.total_steps)
        self.epoch_passes = self.budget.passes_per_epoch  # the plan's; `_lengthen_epochs` adds

        if resume_dir is not None:
            try:
                self.state = ckpt.load_checkpoint(
                    resume_dir, self.model, self.optimizer, self.device
                )
            except (ArtifactError, KeyError, ValueError, RuntimeError) as exc:
                raise TrainingError(f"Cannot resume from {resume_from}: {exc}") from exc
        for record in self.state.replans[-1:]:  # a resumed run goes on with its last re-plan
            self._apply_replan(record["budget_tokens"])
        # the speed a minutes budget was projected with, which the run is held to (`_replan`)
        replannable = (
            asked.time_budget_s is not None
            and asked.token_budget is None
            and asked.epochs is None
            and self.plan.budget_tokens is not None
            and pretrained is None
        )
        self.planned_speed = (
            self.plan.budget_tokens / float(asked.time_budget_s) if replannable else None
        )
        if self.state.replans:
            self.planned_speed = self.state.replans[-1]["real_tokens_per_s"]
        # attempt seconds at which rank 0 next compares real and planned speed: after the
        # first minute, then a minute after each change of threads or of the ranks' parts
        self.next_check_s = pace.REPLAN_AFTER_S
        self.net: nn.Module = self.model
        if ranks.on:
            self.net = data_parallel(self.model, self.device)

    def _speed(
        self,
        facts: recipe.CorpusFacts,
        resume_dir: Path | None,
        model: ModelConfig | None = None,
    ) -> recipe.Speed | None:
        """How the recipe learns this machine's speed for a minutes budget: a resumed run
        reuses its first measurement, so it plans exactly as before; else the measurement the
        run's layout was chosen by, if given; else a calibration of its own on the CPU (of
        the preset's model, or of the `model` a continued run trains). None (the typical
        speed) on a GPU and across data-parallel ranks without a given measurement: the
        ranks must all choose alike."""
        if resume_dir is not None and self.device.type == "cpu":
            try:
                stored = ckpt.read_state(resume_dir).get("calibration")
            except ArtifactError:
                stored = None  # the resume itself reports the damaged checkpoint
            if stored:
                self.calibration_kept = True
                return lambda _candidate: Calibration(**stored)
        if self.measured_speed is not None:
            return lambda _candidate: self.measured_speed
        if self.device.type != "cpu" or self.ranks.on:
            return None
        one = Layout(1, self.cfg.num_threads or 0)
        return lambda candidate: fastest(
            measure_candidate(
                candidate, facts.length_mix(), self.device, one, model, facts.train_pairs
            ),
            candidate.time_budget_s,
        )

    def _set_threads(self) -> None:
        """CPU threads to start with: those the run's layout chose, else (DDP ranks keep
        torchrun's OMP_NUM_THREADS) the idle cores; then, unless the user fixed them, a
        `pace.ThreadWatch` changes them while the run trains when a core is taken or freed."""
        self.thread_watch: pace.ThreadWatch | None = None
        if self.device.type != "cpu":
            return
        if self.threads:
            torch.set_num_threads(self.threads)
        elif self.ranks.on:
            if self.cfg.num_threads:
                torch.set_num_threads(self.cfg.num_threads)
        else:
            torch.set_num_threads(
                cpu_threads(self.cfg.num_threads, self.n_params, self.default_threads)
            )
        if self.cfg.num_threads is None and self.n_params >= SINGLE_THREAD_PARAMETERS:
            full = self.threads or self.default_threads
            self.thread_watch = pace.ThreadWatch(full, torch.get_num_threads(), idle_cores)

    # -- holding the run to its plan (`pace`) -------------------------------------------------
    def _attempt_s(self) -> float:
        """Seconds this attempt has run (a resumed run's earlier attempts not counted)."""
        return self.clock.elapsed() - self.clock.resumed_s

    def _watch_threads(self, tokens: int) -> None:
        """After a step: fewer threads when a core was taken, all again when it is free."""
        if self.thread_watch is None:
            return
        threads = self.thread_watch.observe(tokens, self.clock.elapsed())
        if threads is not None:
            torch.set_num_threads(threads)
            self._compare_after_change()
            self._emit("step", None)  # the Train page says so at once

    def _compare_after_change(self) -> None:
        """The speed changed (a core taken or freed): compare it with the plan a minute on,
        over that minute alone, not at the epoch's end (a slow laptop's first epoch of small
        batches took 8 of a click's 10 minutes)."""
        self.clock.restart_window()
        self.next_check_s = self._attempt_s() + pace.REPLAN_AFTER_S

    def _replan(self) -> None:
        """Compare the real speed with the plan's (rank 0 decides, every rank follows); when
        they differ by more than `pace.REPLAN_TOLERANCE`, choose again what depends on the
        tokens the run will now train (`recipe.replan`) and record it."""
        decision = [0.0, 0.0, 0.0]
        real = self.clock.recent_tokens_per_s(pace.REPLAN_AFTER_S)  # since the last comparison
        left = self.clock.time_left()
        off = abs(real / self.planned_speed - 1.0) if real and self.planned_speed else 0.0
        # (at the clock's end there is nothing left to plan)
        if self.ranks.main and off > pace.REPLAN_TOLERANCE and left is not None and left > 0:
            decision = [1.0, float(real or 0.0), self.state.tokens_trained + real * left]
        decision = self.ranks.broadcast_flags(decision, self.comm_device)
        if not decision[0]:
            return
        real, tokens = decision[1], decision[2]
        self.state.replans.append(
            {
                "elapsed_s": round(self.clock.elapsed(), 1),
                "step": self.state.step,
                "planned_tokens_per_s": round(float(self.planned_speed or 0.0), 1),
                "real_tokens_per_s": round(real, 1),
                "budget_tokens": int(tokens),
                **self._apply_replan(tokens),
            }
        )
        self.planned_speed = real

    def _apply_replan(self, tokens: float) -> dict[str, Any]:
        """The plan for `tokens`: the model's dropout now, the batch from the next update on
        (the rest of the epoch batched again) with its peak rate, the warm-up while it has not
        ended (a longer one must not lower the rate of a run already past it); returns them."""
        gpu = self.device.type == "cuda"
        self.plan = recipe.replan(
            self.plan, self.requested, self.facts, self.fine_tune, gpu, tokens
        )
        self.cfg = self.plan.cfg
        dropout = float(self.cfg.dropout or 0.0)
        if dropout != self.model.cfg.dropout:
            self.model.set_dropout(dropout)
            self.mcfg = self.model.cfg
        batch = int(self.cfg.max_tokens_per_batch)
        if batch != self.batch_tokens:
            self.batch_tokens = batch
            seed = self._shuffle_seed(self.state.step)
            self.pending = deque(rebatch(self.train_ex, self.pending, batch, seed))
        self.schedule.lr = float(self.cfg.lr or self.schedule.lr)
        warmup = self.cfg.warmup_steps
        if warmup is not None and self.state.step < min(warmup, self.schedule.warmup):
            self.schedule.warmup = warmup
        return {
            "dropout": dropout,
            "label_smoothing": self.cfg.label_smoothing,
            "batch_tokens": batch,
            "lr": self.schedule.peak(),
            "warmup_steps": self.schedule.warmup,
        }

    def _pace(self) -> dict[str, Any]:
        """The run against its plan, for the Train page and the metrics: the speed planned at
        the start, the real one (validations included) and that of its steps alone (what the
        calibration timed), every re-plan and every change of threads."""
        real, steps = self.clock.tokens_per_s(), self.clock.tokens_per_s(steps_only=True)
        return {
            "planned_tokens_per_s": (
                None
                if self.budget_tokens_at_start is None or not self.cfg.time_budget_s
                else round(self.budget_tokens_at_start / self.cfg.time_budget_s, 1)
            ),
            "real_tokens_per_s": None if real is None else round(real, 1),
            "step_tokens_per_s": None if steps is None else round(steps, 1),
            "budget_tokens_at_start": (
                None if self.budget_tokens_at_start is None else int(self.budget_tokens_at_start)
            ),
            "batch_tokens_at_start": self.batch_tokens_at_start,
            "passes_per_epoch": self.epoch_passes,
            "replans": list(self.state.replans),
            "threads": torch.get_num_threads() if self.device.type == "cpu" else None,
            "thread_changes": list(self.thread_watch.changes) if self.thread_watch else [],
            "share_changes": list(self.rank_shares.changes),
            # what it trains at, and whether an earlier attempt chose it (a resumed run keeps
            # its plan though its layout may be timed again)
            "precision": precision_name(self.amp),
            "calibration_kept": self.calibration_kept,
        }

    # -- where the run stands ------------------------------------------------------------------
    def _watch(self) -> dict[str, Any]:
        """What may stop the run before its budget ends (see ProgressEvent.watch)."""
        if self.memorise:
            share = self.state.last_record.get("train_exact_match")
            return {
                "rule": "memorise",
                "reproduced": share,
                "pairs": len(self.memorise_pairs),
                "unreproducible": self.unreproducible,
            }
        if self.cfg.patience and self.selector.use_validation:
            return {
                "rule": "patience",
                "bad_epochs": self.state.bad_epochs,
                "patience": self.cfg.patience,
                "metric": self.selector.metric,
            }
        return {}

    def _emit(self, kind: str, train_loss: float | None, **override: Any) -> None:
        if self.callback is None or not self.ranks.main:
            return
        rec = self.state.last_record
        event = ProgressEvent(
            step=self.state.step,
            total_steps=self.clock.expected_total(self.state.step),
            epoch=self.current_epoch,
            train_loss=train_loss,
            valid_loss=rec.get("valid_loss"),
            lr=self.schedule.lr_at(max(1, self.state.step), self.clock.progress(self.state.step)),
            tokens_per_s=self.throughput,
            eta_s=self.clock.eta(self.state.step),
            bleu=rec.get("bleu"),
            chrf=rec.get("chrf"),
            kind=kind,
            elapsed_s=self.clock.elapsed(),
            fraction=self.clock.progress(self.state.step),
            limit=self.clock.binding(self.state.step),
            watch=self._watch(),
            pace=self._pace(),
        )
        for k, v in override.items():
            setattr(event, k, v)
        self.callback(event)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        """Epochs until the budget, the clock, early stopping or a cancel request ends them."""
        self.clock = BudgetClock(
            self.budget,
            self.cfg.time_budget_s,
            self.state.step,
            self.state.elapsed_s,
            token_budget=self.cfg.token_budget,
            already_tokens=self.state.tokens_trained,
        )
        self._emit("start", None)  # tokenizers and model are ready: the UI can show the plan
        for epoch in range(self.state.epoch + 1, self.budget.epochs + 1):
            if self.state.step >= self.budget.total_steps:
                break
            self.current_epoch = epoch
            started = time.monotonic()
            trained = self._train_epoch(epoch)
            if self.stop_reason is StopReason.CANCELLED:
                return
            if trained is None:
                break
            self.state.epoch = epoch
            ended = time.monotonic()
            stop = self._end_epoch(trained)
            if stop is not None:
                self.stop_reason = stop
                return
            if self.stop_reason is not None:  # a budget ran out inside the epoch
                return
            self._lengthen_epochs(ended - started, time.monotonic() - ended)
        self.stop_reason = self.stop_reason or self._planned_end()

    def _planned_end(self) -> StopReason:
        """Why a run ends that trained its whole planned step count: the user's step cap, the
        epochs they asked for, or the automatic budget's passes."""
        if self.cfg.max_steps is not None and self.state.step >= self.cfg.max_steps:
            return StopReason.STEP_LIMIT
        return StopReason.EPOCHS if self.cfg.epochs is not None else StopReason.AUTO_STEPS

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        """The updates' batches for `epoch` (every rank makes the same and takes its part of
        each): fresh length buckets per pass, seeded by epoch."""
        out: list[list[int]] = []
        for rep in range(self.epoch_passes):
            seed = self._shuffle_seed(epoch * 1009 + rep)
            out.extend(make_batches(self.train_ex, self.batch_tokens, seed=seed))
        return out

    def _lengthen_epochs(self, train_s: float, end_s: float) -> None:
        """Repeat the corpus more times an epoch when its end's work (`end_s`: validation,
        checkpoint) took more than EPOCH_END_SHARE of the epoch: a 250-pair corpus' 3-second
        epochs spent 70 % of a 5-minute click validating and checkpointing. At most twice as
        long each time: the first validation, of an untrained model whose outputs run to their
        length limit, is the slowest. Epochs the user counted, and memorising (which checks
        every pair each epoch), keep their length. Rank 0 decides for every rank."""
        if self.cfg.epochs is not None or self.memorise:
            return
        passes = self.epoch_passes
        if self.ranks.main and end_s > EPOCH_END_SHARE * (train_s + end_s):
            wanted_s = end_s * (1 - EPOCH_END_SHARE) / EPOCH_END_SHARE
            passes = min(2 * passes, math.ceil(passes * wanted_s / max(train_s, 1e-3)))
        self.epoch_passes = int(self.ranks.broadcast_flags([float(passes)], self.comm_device)[0])

    def _shuffle_seed(self, salt: int) -> int:
        """A seed for batching made from the run's seed and `salt` (every rank makes the same)."""
        return self.cfg.seed * 1_000_003 + salt

    def _train_epoch(self, epoch: int) -> tuple[float, int] | None:
        """Optimizer steps over one epoch; returns (loss sum, target tokens) or None if no step."""
        ranks = self.ranks
        epoch_loss, epoch_tok = 0.0, 0
        window_all = 0
        window_start = last_emit = time.monotonic()
        self.pending = deque(self._epoch_batches(epoch))  # a re-plan may batch them again
        while self.pending:
            idx = self.pending.popleft()
            if self.state.step >= self.budget.total_steps:
                self.stop_reason = self._planned_end()
                break
            part = rank_share(idx, self.rank_shares.shares, ranks.rank)
            batch = collate(self.train_ex, part, self.mcfg.specials, self.shape_multiple)
            batch = batch.to(self.device)
            # One exchange a step: the stop flags (a rank alone may see a cancel request or
            # its clock run out, and every rank must stop at the same step) and the update's
            # tokens over all ranks (the loss is the mean over them; the budget counts them),
            # and the ranks' speeds (`pace.RankShares`).
            left, tokens_left = self.clock.time_left(), self.clock.tokens_left()
            cancel = bool(self.should_cancel is not None and self.should_cancel())
            # rank 0's clock says when a comparison with the plan is due
            due = ranks.main and self._attempt_s() >= self.next_check_s
            flags = ranks.all_sum(
                [
                    float(cancel),
                    float(left is not None and left <= 0),
                    float(tokens_left is not None and tokens_left <= 0),
                    float(batch.n_tokens),
                    float(batch.n_tokens + batch.n_src_tokens),
                    float(ranks.main and due),
                    *self.rank_shares.published(ranks.rank),
                ],
                self.comm_device,
            )
            if flags[0] > 0:
                self.stop_reason = StopReason.CANCELLED
                return None
            if flags[1] > 0:
                self.stop_reason = StopReason.TIME_BUDGET
                break
            if flags[2] > 0:
                self.stop_reason = StopReason.TOKEN_BUDGET
                break
            if flags[5] > 0:
                self.next_check_s = math.inf
                self._replan()
            loss_sum, forward_s = self._train_step(batch, per_tokens=flags[3] / ranks.world)
            own = batch.n_tokens + batch.n_src_tokens
            if self.rank_shares.update(
                self.state.step, own, forward_s, flags[6:], self.clock.elapsed()
            ):
                self._compare_after_change()
                self._emit("step", None)  # the Train page says so at once
            if self.selector.due(self.state, self.clock.progress(self.state.step)):
                self.selector.snapshot(self.state, self.model)
            epoch_loss += loss_sum  # this rank's share: a sample of the update's loss
            epoch_tok += batch.n_tokens
            window_all += int(flags[4])
            self.state.tokens_trained += int(flags[4])
            self.clock.tokens = self.state.tokens_trained
            self._add_loss(loss_sum, batch.n_tokens)
            self._watch_threads(int(flags[4]) // ranks.world)
            now = time.monotonic()
            if now - last_emit >= self.cfg.progress_every_s:
                self.throughput = window_all / max(1e-9, now - window_start)
                self._emit("step", None)
                last_emit = window_start = now
                window_all = 0
        now = time.monotonic()
        if window_all and now - window_start > 0.5:
            self.throughput = window_all / (now - window_start)
        if not epoch_tok:
            return None
        return epoch_loss, epoch_tok

    def _add_loss(self, loss_sum: float, n_tok: int) -> None:
        """One step's loss into the loss curve's window, reported when the window is full
        (`progress.loss_stride`)."""
        self.loss_window[0] += loss_sum
        self.loss_window[1] += n_tok
        if self.state.step % progress.loss_stride(self.state.step) == 0:
            self._emit_loss()

    def _emit_loss(self) -> None:
        """A 'loss' event: the mean loss per target token of the window's steps."""
        loss_sum, n_tok = self.loss_window
        if n_tok:
            self._emit("loss", loss_sum / n_tok)
        self.loss_window = [0.0, 0]

    def _train_step(self, batch: Batch, per_tokens: float) -> tuple[float, float]:
        """One optimizer step with teacher forcing (the loss divided by `per_tokens`, see
        `step.forward_backward`); returns this rank's loss sum and its forward pass' seconds."""
        cfg = self.cfg
        self.state.step += 1
        lr = self.schedule.lr_at(self.state.step, self.clock.progress(self.state.step))
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        value, forward_s = forward_backward(
            self.net,
            batch,
            self.device,
            self.amp,
            cfg.label_smoothing,
            self.mcfg.pad_id,
            per_tokens,
        )
        clip_and_check(self.model, cfg.clip_norm, value, self.state.step)
        self.optimizer.step()
        return value, forward_s

    def _validate(self) -> dict[str, Any]:
        """Validation loss (all pairs) and BLEU/chrF of greedy translations (capped), on
        `_validation_threads`."""
        threads = torch.get_num_threads()
        with self.core_pin.released():
            torch.set_num_threads(self._validation_threads())
            try:
                return self._scores()
            finally:
                torch.set_num_threads(threads)

    def _validation_threads(self) -> int:
        """Rank 0 validates alone while the other ranks wait in a collective, idle: it takes
        their cores meanwhile where no other program took them (`idle_cores`, sampled as they
        wait). A 2 x 1 run validated on one core of two: 2.4 s a validation of Multi30k's
        10-minute model against 1.8 s on both (6 epochs and 2 final validations a click)."""
        own = torch.get_num_threads()
        if self.device.type != "cpu" or not self.ranks.on or self.cfg.num_threads:
            return own
        idle = idle_cores(VALIDATION_IDLE_SAMPLE_S) or 0.0
        return max(own, min(own * self.ranks.world, int(idle + pace.FREE_MARGIN)))

    def _scores(self) -> dict[str, Any]:
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
                self.model, self.tokenizers, self.valid_translate, self.amp, self.cfg.valid_beam
            )
            out["bleu"], out["chrf"] = s["bleu"], s["chrf"]
        return out

    def _end_epoch(self, trained: tuple[float, int]) -> StopReason | None:
        """Validate (rank 0), track the best/last-N weights, checkpoint, report; returns the
        reason to stop now, if any (rank 0 decides, every rank follows)."""
        cfg, state = self.cfg, self.state
        stop, reserve = 0.0, 0.0
        started = time.monotonic()
        if self.ranks.main:
            scores = self._validate()
            # choosing the final weights validates up to twice more (the average, the last
            # weights): the clock keeps that time, so the whole run fits its budget
            reserve = FINAL_VALIDATIONS * (time.monotonic() - started)
            record: dict[str, Any] = {
                "epoch": state.epoch,
                "step": state.step,
                "train_loss": trained[0] / max(1, trained[1]),
                "lr": self.schedule.lr_at(state.step, self.clock.progress(state.step)),
                "tokens_per_s": self.throughput,
                **scores,
                "elapsed_s": self.clock.elapsed(),
            }
            if self.memorise:
                record["train_exact_match"] = exact_match_share(
                    self.model, self.tokenizers, self.memorise_pairs, self.amp
                )
                hit = record["train_exact_match"] >= 1.0
                state.memorised_epochs = state.memorised_epochs + 1 if hit else 0
            self.selector.observe(state, record, self.model, state.step > self.schedule.warmup)
            state.history.append(record)
            if self.selector.should_stop(state, cfg.patience, self.clock.progress(state.step)):
                stop = 1.0
            if self.memorise and state.memorised_epochs >= cfg.memorise_epochs:
                stop = 2.0
        flags = self.ranks.broadcast_flags([stop, reserve], self.comm_device)
        if self.clock.time_budget_s:
            self.clock.keep_reserve(flags[1], MAX_RESERVE_SHARE * self.clock.time_budget_s)
        self._replan()  # before the checkpoint: a resumed run goes on with this plan
        if self.ranks.main:
            state.elapsed_s = self.clock.elapsed()
            if self.ckpt_dir is not None:
                ckpt.save_checkpoint(
                    self.ckpt_dir,
                    self.model,
                    self.optimizer,
                    self.tokenizers,
                    self.requested.to_dict(),
                    state,
                )
            self._emit("epoch", record["train_loss"])
        self.clock.between_epochs_s += time.monotonic() - started
        if self.thread_watch is not None:
            self.thread_watch.restart()  # the validation was no training step
        return {0: None, 1: StopReason.EARLY_STOPPING, 2: StopReason.MEMORISED}[int(flags[0])]

    # -- the end -------------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self.stop_reason is StopReason.CANCELLED

    def finish(self, extra_config: dict[str, Any] | None) -> TrainResult:
        train_time = round(self.clock.elapsed(), 2)  # one figure: the metrics' and the end's
        pace = self._pace()  # the speeds of the training, before the final weights' choice
        state, ranks = self.state, self.ranks
        chosen, scores = "last", {}
        if not self.cancelled and ranks.main:
            chosen, scores = self.selector.choose(state, self.model, self._validate)
        ranks.broadcast_weights(self.model)  # rank 0 chose the final weights
        self.model.eval()
        metrics: dict[str, Any] = {
            "steps": state.step,
            "epochs": state.epoch,
            "best_epoch": state.best_epoch,
            "stop_reason": self.stop_reason.value,
            "selected": chosen,
            "train_time_s": train_time,
            # the run's average, validation included: what the budget bought
            "tokens_trained": state.tokens_trained,
            "tokens_per_s": round(state.tokens_trained / max(train_time, 1e-9), 1),
            "parameters": self.model.num_parameters(),
            "train_pairs": len(self.train_ex),
            "valid_pairs": len(self.valid_ex),
            # the longest sequences seen in training (tokens incl. EOS): inputs longer than
            # these are outside what the model has learned
            "longest_source_tokens": max(len(ex.src) for ex in self.train_ex),
            "longest_target_tokens": max(len(ex.tgt) + 1 for ex in self.train_ex),
            "precision": precision_name(self.amp),
            "shape_multiple": self.shape_multiple,  # batch lengths rounded up to this
            "device": str(self.device),
            "world_size": ranks.world,
            # per process (every rank has the same)
            "threads": torch.get_num_threads() if self.device.type == "cpu" else None,
            "lr_schedule": self.schedule.kind,
            "peak_lr": self.schedule.peak(),
            "warmup_steps": self.schedule.warmup,
            "train_loss": state.last_record.get("train_loss"),
            # the tokens the recipe chose for, and the measured speed that projected them
            **self.plan.metrics(),
            # the speed planned and the speed trained, each re-plan and change of threads
            "pace": pace,
            **scores,
        }
        if ranks.main and self.out_path is not None and not self.cancelled:
            save_model(
                self.out_path,
                self.model,
                self.tokenizers,
                {
                    "training": self.cfg.to_dict(),
                    "metrics": metrics,
                    "history": state.history,
                    **({"pretrained": self.pretrained} if self.pretrained else {}),
                    **(extra_config or {}),
                },
            )
            if self.ckpt_dir is not None and not self.cfg.keep_checkpoint:
                shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        self._emit_loss()  # the steps since the last full window
        self._emit(
            "done",
            metrics["train_loss"],
            valid_loss=scores.get("valid_loss"),
            bleu=scores.get("bleu"),
            chrf=scores.get("chrf"),
            eta_s=0.0,
            total_steps=state.step,
            # a cancelled run did only its share; any other end used what it was given
            fraction=self.clock.progress(state.step) if self.cancelled else 1.0,
            elapsed_s=train_time,  # the run's trained time, exactly its `train_time_s`
            stop_reason=self.stop_reason.value,
        )
        return TrainResult(
            self.model,
            self.tokenizers,
            metrics,
            state.history,
            self.cancelled,
            self.mcfg,
            self.cfg,
            self.out_path,
        )
