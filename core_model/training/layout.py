"""How a run spreads over this machine: one process with a thread per core, or data-parallel
ranks with fewer threads each (`parallel.Layout`) — chosen by timing each on the run's own
model and batch before it starts.

Why measure instead of a rule: intra-op threads share only the large matrix products of a
step, and the small CPU batches of short budgets have few large ones (one process with two
threads trained 1.5x one thread on a 2-core CPU), while ranks each do a whole step on their
share of the update but pay an all-reduce of every gradient per step. Which wins depends on
the model, the batch, the cores and the memory; a couple of seconds of real steps tell.

The timing is the calibration's (`calibration.measure_layout`: full training steps, each rank
with its share of the update), and it doubles as the speed that projects a minutes budget to
tokens, so the recipe plans for the layout that will train. Runs too short to pay for
starting processes (memorising a few pairs, budgets under a minute) keep one process and the
idle-core thread policy. On GPUs: one process per GPU, no timing.

Ranks must time `RANKS_MARGIN` faster than one process to be chosen (`preferred`), for two
measured reasons. Their short timing flatters them: on an AMX Xeon and an AVX512-BF16 EPYC, 2 x 1
won its 2-second timing by 2-14 % where it won at all, and trained at 0.90x the speed of 1 x 2 in
runs with the layout forced (5,737 against 6,357-6,463 tokens/s; 8,261 against 9,210). And a
core taken by another program costs them more: one process drops to one thread and kept 0.64-0.80x
an idle click's tokens; two single-threaded ranks, one sharing its core, kept 0.53-0.58x (the
other waits for it at every all-reduce) and lost 1.9-4.3 BLEU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from core_model.training import recipe, setup
from core_model.training.calibration import Calibration, fastest, measure_candidate, merit
from core_model.training.config import TrainConfig, TrainingError
from core_model.training.pace import SLOW_SHARE
from core_model.training.parallel import Layout, cpu_cores, cpu_layouts
from core_model.training.precision import resolve_device
from core_model.transformer import ModelConfig

PARALLEL_MIN_S = 60.0  # a run expected to train for less keeps one process (not timed)
RANKS_MARGIN = 1.15  # ranks are chosen over one process only when they time this much faster
ONE_PROCESS = Layout(1, 0)  # threads 0: the idle cores at the start, then `pace.ThreadWatch`


@dataclass(frozen=True)
class LayoutChoice:
    """The layout a run trains with, the measured speed its budget is planned by and its
    precision trains at (None: not measured here; the run measures itself, or uses the
    preset's typical speed on a GPU), every layout and precision timed, and why, in words."""

    layout: Layout
    speed: Calibration | None
    timings: tuple[Calibration, ...]
    reason: str

    def metrics(self) -> dict[str, Any]:
        """What a user sees of the choice in the run's metrics."""
        return {
            "processes": self.layout.processes,
            "threads_per_process": self.layout.threads or None,
            "layout_reason": self.reason,
            "layout_timings": [
                {
                    "processes": t.processes,
                    "threads": t.threads,
                    "precision": t.precision,
                    "tokens_per_s": t.tokens_per_s,
                    "shapes": t.shapes,
                }
                for t in self.timings
            ],
        }


def choose_layout(
    cfg: TrainConfig,
    train_pairs: Sequence[tuple[str, str]],
    valid_pairs: Sequence[tuple[str, str]] | None,
    init_from: str | Path | None = None,
    cores: int | None = None,
) -> LayoutChoice:
    """The layout of a run of `cfg` on these pairs (continuing the model folder `init_from`,
    if given): `cfg.processes` when given (threads: the config's, else the cores shared out),
    else the fastest of `parallel.cpu_layouts(cores)` by measurement (cores: this machine's
    physical ones)."""
    processes = cfg.processes
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        n = processes or gpus
        if n > gpus:
            raise TrainingError(f"{n} processes asked for, but this machine has {gpus} GPU(s).")
        return LayoutChoice(Layout(n, 0), None, (), f"one process per GPU ({n})")
    cores = cores or cpu_cores()
    facts = recipe.CorpusFacts.of(setup.clean_pairs(train_pairs), setup.clean_pairs(valid_pairs))
    fine_tune = init_from is not None
    start = setup.continued(init_from) if init_from is not None else None
    model = start.model if start is not None else None  # a continued run trains its model
    pretrained = model if start is not None and start.pretrained else None
    if processes:
        threads = cfg.num_threads or max(1, cores // processes)
        candidates = [Layout(processes, threads)]
        reason = f"{processes} process(es) asked for"
    else:
        estimate = recipe.resolve(cfg, facts, False, fine_tune, pretrained=pretrained)
        seconds = _typical_seconds(estimate, model)
        if cores == 1 or seconds is None or seconds < PARALLEL_MIN_S:
            why = "one core" if cores == 1 else "a short run"
            return LayoutChoice(ONE_PROCESS, None, (), f"one process: {why}")
        candidates = cpu_layouts(cores)
        reason = "the fastest when timed"

    timings: list[Calibration] = []  # of the candidates and precisions, on the last plan
    timed_for: TrainConfig | None = None  # the candidate of those timings

    def speed(candidate: TrainConfig) -> Calibration:
        """Time every candidate layout, at every precision the run may train, on this
        candidate's model and batch. The recipe asks again when its plan changes the model
        or batch, and the layouts are timed again: a rank's share of a 250-token batch is too
        small to pay for the exchange of gradients where its share of a 625-token one is not
        (measured: 2 x 1 at 0.80x of 1 x 2 on 250 tokens, 1.04x on 625). When only dropout or
        the vocabulary changed (the measured budget crossed `recipe.NO_DROPOUT_MAX_PASSES` or
        `recipe.SHORT_BUDGET_TOKENS`), its masks or its output layer add work per token to
        every layout alike: the fastest is timed again alone, at its precision (timing them
        all again kept a click ~30 s longer before its first step; on an AMX Xeon 8k pieces,
        then 4k, all timed: 62 s from the run's start to its first step)."""
        nonlocal timed_for

        def timed(layouts: Sequence[Layout], asked: TrainConfig = candidate) -> list[Calibration]:
            return [
                timing
                for layout in layouts
                for timing in measure_candidate(
                    asked, facts.length_mix(), device, layout, model, facts.train_pairs
                )
            ]

        if timed_for is not None and recipe.same_layers_and_batch(candidate, timed_for):
            best = preferred(timings, timed_for.time_budget_s)
            (again,) = timed([best.layout], replace(candidate, precision=best.precision))
            timings[:] = [again, *(t for t in timings if t is not best)]
            timed_for = candidate
            return again
        timed_for = candidate
        timings[:] = timed(candidates)
        # A core busy for a few seconds while a layout on more cores was timed would leave
        # the run on fewer cores, or at the other precision, for good (a click once chose
        # 1 x 1 after its 1 x 2 timings fell to 354 tokens/s; another trained fp32 after bf16
        # 1 x 2 read 1,204 against bf16 1 x 1's 3,884): such layouts are timed once more, and
        # the better of their two timings counts.
        best = preferred(timings, candidate.time_budget_s)
        suspect = _slowed(candidates, timings, best, candidate.time_budget_s)
        if suspect:
            timings.extend(timed(suspect))
        return preferred(timings, candidate.time_budget_s)

    plan = recipe.resolve(cfg, facts, False, fine_tune, speed, pretrained)
    if plan.calibration is None and not processes:  # tokens or epochs: time only to choose
        speed(plan.cfg)
    if not timings:
        return LayoutChoice(candidates[0], None, (), reason)
    best = plan.calibration or preferred(timings)
    chosen = best.layout
    quickest = fastest(timings, plan.cfg.time_budget_s)
    if not processes and quickest.processes > best.processes:
        reason = (
            f"one process: ranks must time {RANKS_MARGIN:g}x as fast to be chosen "
            "(they train slower than timed, and wait for a busy core)"
        )
    return LayoutChoice(chosen, best, tuple(timings), reason)


def preferred(timings: Sequence[Calibration], seconds: float | None = None) -> Calibration:
    """The timing a run trains by: the fastest (`calibration.fastest`), unless it is of
    several processes and the fastest of one process trains `RANKS_MARGIN` as many tokens
    or more (module docstring)."""
    best = fastest(timings, seconds)
    one_process = [t for t in timings if t.processes == 1]
    if best.processes == 1 or not one_process:
        return best
    single = fastest(one_process, seconds)
    return best if merit(best, seconds) >= RANKS_MARGIN * merit(single, seconds) else single


def _slowed(
    layouts: Sequence[Layout],
    timings: Sequence[Calibration],
    best: Calibration,
    seconds: float | None,
) -> list[Layout]:
    """The layouts whose timing a busy core may have spoiled: those on more cores than the
    `best` timing's, and those that read under `pace.SLOW_SHARE` of a layout on fewer cores
    at the same precision (a core taken from threads that wait for each other)."""

    collapsed = {
        t.layout
        for t in timings
        for u in timings
        if u.precision == t.precision
        and u.layout.cores < t.layout.cores
        and merit(t, seconds) < SLOW_SHARE * merit(u, seconds)
    }
    return [layout for layout in layouts if layout.cores > best.layout.cores or layout in collapsed]


def _typical_seconds(plan: recipe.Plan, model: ModelConfig | None) -> float | None:
    """About how long a plan trains at its model's typical CPU speed (`model`: the one a
    continued run trains; None: the plan's preset) (None: memorising)."""
    if plan.budget_tokens is None:
        return None
    if model is not None:
        return plan.budget_tokens / recipe.estimated_tokens_per_s(model, gpu=False)
    return plan.budget_tokens / recipe.CPU_TOKENS_PER_S[plan.cfg.preset]
