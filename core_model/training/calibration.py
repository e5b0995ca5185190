"""How fast this machine trains a given model: timed training steps on batches made as the
run will make them.

A budget in minutes means very different amounts of learning on different CPUs (a CPU
without bf16 trains about half the tokens per minute of one with it), and the recipe chooses
for the tokens a run will actually see. So before a minutes budget is planned, the candidate
model takes full steps (forward, label-smoothed loss, backward, clipping, Adam) at the run's
precision and thread count, and the recipe projects tokens = seconds x tokens/s from that.

The steps are taken on batches of the run's own length mix (`CorpusFacts.lengths`: the
corpus' pairs, random ids of their estimated subword lengths), bucketed by `make_batches` at
the run's batch size. CPU bf16 (oneDNN) prepares its kernels per shape, so the first step of
a run on a shape is slow: one synthetic shape timed again and again overstated real runs by
up to 2.7x (an AMX Xeon; 1.2x on an AVX512-BF16 EPYC), and timing only first visits
understated them by 1.25x (a 10-minute click calibrated at 4,539 tokens/s trained at 5,656).
So the timed batches are visited twice: the second visits give the steady speed a run keeps
for thousands of steps, the first ones what each new shape costs once (`new_shape_s`), and
the shapes of an epoch of the run's size are counted (`run_shapes`); the recipe takes the
shapes' cost off the budget (`Calibration.tokens_in`). The lengths are padded as the run
pads them (`precision.shape_multiple`). Where 'auto' may train either, both precisions are
timed (`precision.candidate_precisions`) and the faster on these batches is the one the run
trains (`fastest`: the most tokens in the budget). Each measurement takes at most about
`CALIBRATION_S`; the weights it touches are thrown away.

The same measurement chooses how a run spreads over the cores (`choose_layout`): one process
with every thread, or data-parallel ranks with fewer threads each (`parallel.Layout`), timed
as the run would train — each rank with its part of every update, gradients all-reduced.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache

import torch
from torch import nn

from core_model.batching import Example, collate, make_batches, padded_shape, rank_share
from core_model.special_tokens import RESERVED, SpecialIds
from core_model.training import setup
from core_model.training.config import TrainConfig
from core_model.training.parallel import (
    Calibration,
    CorePin,
    Layout,
    MeasureTask,
    RankGroup,
    Ranks,
    data_parallel,
    rank_device,
)
from core_model.training.precision import (
    candidate_precisions,
    cpu_threads,
    precision_name,
    resolve_precision,
    shape_multiple,
)
from core_model.training.step import clip_and_check, forward_backward
from core_model.transformer import ModelConfig, Transformer

CALIBRATION_S = 2.0  # timed seconds (after untimed steps: allocation, kernel choice)
UNTIMED_STEPS = 2
MAX_STEPS = 30  # enough on a fast machine; the clock ends it first on a slow one
BUDGET_SHARE = 1 / 200  # of a minutes budget, at most, per measurement
RUN_SHAPES_PAIRS = 100_000  # enough pairs for a run's count of shapes to level off


def synthetic_examples(
    vocab_size: int,
    lengths: Sequence[tuple[int, int]],
    seed: int = 0,
    specials: SpecialIds = RESERVED,
) -> list[Example]:
    """A random sentence pair of each (source, target) length in `lengths`, no id reserved:
    the cost of a step depends on its shapes, not on the words."""
    g = torch.Generator().manual_seed(seed)
    reserved = torch.tensor(specials)
    out = []
    for src_len, tgt_len in lengths:
        ids = torch.randint(len(RESERVED), vocab_size, (src_len + tgt_len,), generator=g)
        ids[torch.isin(ids, reserved)] = len(RESERVED)  # a reserved id elsewhere
        out.append(Example(tuple(ids[:src_len].tolist()), tuple(ids[src_len:].tolist())))
    return out


def measure(
    mcfg: ModelConfig,
    batch_tokens: int,
    lengths: Sequence[tuple[int, int]],
    device: torch.device,
    precision: str = "auto",
    num_threads: int | None = None,
    seconds: float = CALIBRATION_S,
    multiple: int | None = None,
    max_steps: int = MAX_STEPS,
    run_pairs: int = 0,
) -> Calibration:
    """Tokens per second of training steps of a fresh `mcfg` model on this machine, at the
    precision and thread count a run of it would get (`precision`, `num_threads` as in
    TrainConfig), on length-bucketed batches of pairs of these (source, target) `lengths`
    (their lengths rounded up to `multiple`; None: as a run rounds them when nothing was
    timed). Inside a process group every rank takes an equal part of every batch of `batch_tokens`
    (`batching.rank_share`), and the gradients are all-reduced, as in training; the result counts
    all ranks. The shapes a run of `run_pairs` pairs of this mix meets are counted (`epoch_shapes`;
    0: as many pairs as `lengths`). (`max_steps`: for `bench/batch_shapes.py`.)"""
    ranks = Ranks()
    model = Transformer(mcfg).to(device).train()
    n_params = model.num_parameters()
    amp = resolve_precision(precision, device, n_params)
    threads = cpu_threads(num_threads, n_params, torch.get_num_threads())
    optimizer = setup.make_optimizer(TrainConfig(), model)
    net: nn.Module = model
    if ranks.on:
        net = data_parallel(model, device)
    vocab = min(mcfg.src_vocab_size, mcfg.tgt_vocab_size)
    examples = synthetic_examples(vocab, lengths, specials=mcfg.specials)
    equal = [1.0 / ranks.world] * ranks.world
    batches = [rank_share(b, equal, ranks.rank) for b in make_batches(examples, batch_tokens)]
    multiple = multiple or shape_multiple(device, amp)
    comm = ranks.comm_device(device)
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)

    # a rank's parts have the shapes of batches of its part of the tokens
    rank_tokens = max(1, batch_tokens // ranks.world)
    run_shapes = epoch_shapes(tuple(lengths), run_pairs or len(lengths), rank_tokens, multiple)
    seen: set[tuple[int, int, int]] = set()
    timed: list[tuple[float, int, bool]] = []  # per step: seconds, tokens, a new shape

    def step(i: int, stop: bool) -> bool:
        """One training step as the loop takes it: first the exchange of the stop flags and
        the update's tokens (False: stop), then forward, backward, clipping, Adam."""
        start = time.perf_counter()
        batch = collate(examples, batches[i % len(batches)], mcfg.specials, multiple).to(device)
        flags = ranks.all_sum([float(stop), 0.0, float(batch.n_tokens)], comm)
        if flags[0] > 0:
            return False
        forward_backward(net, batch, device, amp, 0.1, mcfg.pad_id, flags[2] / ranks.world)
        clip_and_check(model, 1.0, 0.0, i)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 0:  # the untimed steps have negative numbers
            key = padded_shape(examples, batches[i % len(batches)], multiple)
            tokens = batch.n_tokens + batch.n_src_tokens
            timed.append((time.perf_counter() - start, tokens, key not in seen))
            seen.add(key)
        return True

    # a rank is timed on the cores it would train on (`parallel.CorePin`)
    with CorePin(ranks.own_cores(threads) if device.type == "cpu" else None):
        try:
            for i in range(UNTIMED_STEPS):  # the last batches: allocation, threads
                step(-1 - i, stop=False)
            # first visits until half the time is spent (rank 0's clock decides, so every rank
            # takes the same steps), then the same batches again
            visits, start = 0, time.perf_counter()
            while True:
                late = visits >= 1 and time.perf_counter() - start >= seconds / 2
                if not step(visits, stop=visits >= max_steps // 2 or (ranks.main and late)):
                    break
                visits += 1
            for i in range(visits):
                step(i, stop=False)
            again = [(s, n) for s, n, new in timed if not new] or [(s, n) for s, n, _ in timed]
            steady = ranks.all_sum([float(sum(n for _, n in again))], comm)[0] / sum(
                s for s, _ in again
            )
            extra = [s - n / (steady / ranks.world) for s, n, new in timed if new]
        finally:
            torch.set_num_threads(before)
    return Calibration(
        tokens_per_s=round(steady, 1),
        steps=len(timed),
        seconds=round(sum(s for s, _, _ in timed), 2),
        threads=threads if device.type == "cpu" else 0,
        precision=precision_name(amp),
        parameters=n_params,
        processes=ranks.world,
        shapes=len(seen),
        new_shape_s=round(max(0.0, sum(extra) / len(extra)) if extra else 0.0, 4),
        run_shapes=run_shapes,
        token_work=mcfg.token_work,
    )


@lru_cache(maxsize=16)
def epoch_shapes(
    lengths: tuple[tuple[int, int], ...], pairs: int, batch_tokens: int, multiple: int
) -> int:
    """The distinct padded batch shapes of an epoch of `pairs` pairs of this length mix (the
    mix repeated to that size, at most RUN_SHAPES_PAIRS): what a run prepares kernels for.
    Counted on the run's size, not the sample's: a 2,000-pair sample of Multi30k makes 44
    unpadded shapes, its 29,000 pairs 114 (21 and 40 padded to 8). Cached: a click times the
    same mix at every layout and precision (0.06 s each for 29,000 pairs, 0.26 s at the cap)."""
    n = min(max(pairs, 1), RUN_SHAPES_PAIRS)
    mix = [Example((0,) * s, (0,) * t) for s, t in lengths]
    examples = (mix * (n // len(mix) + 1))[:n]
    return len({padded_shape(examples, b, multiple) for b in make_batches(examples, batch_tokens)})


def measure_layout(
    layout: Layout,
    mcfg: ModelConfig,
    batch_tokens: int,
    lengths: Sequence[tuple[int, int]],
    device: torch.device,
    precisions: Sequence[str] = ("auto",),
    seconds: float = CALIBRATION_S,
    run_pairs: int = 0,
) -> list[Calibration]:
    """`measure` at each of `precisions` in turn, with the run spread as `layout` says: this
    process is rank 0 of a group of `layout.processes` (the others are started for the
    measurements and stopped after them)."""
    task = MeasureTask(
        model=mcfg,
        batch_tokens=batch_tokens,
        lengths=tuple((s, t) for s, t in lengths),
        run_pairs=run_pairs,
        device=device.type,
        precisions=tuple(precisions),
        threads=layout.threads,
        seconds=seconds,
    )
    if layout.processes == 1:
        return measure_share(task, device)
    with RankGroup(layout, task, device):
        return measure_share(task, rank_device(task.device, 0))


def measure_candidate(
    candidate: TrainConfig,
    lengths: Sequence[tuple[int, int]],
    device: torch.device,
    layout: Layout,
    model: ModelConfig | None = None,
    run_pairs: int = 0,
) -> list[Calibration]:
    """The speed of a recipe's candidate config spread as `layout` says: of the `model` the
    run continues (a version's or a public checkpoint's: its size, not the preset's), else of
    the candidate's preset at its vocabulary; at the candidate's batch either way, on batches
    of `lengths` (`CorpusFacts.length_mix`; a run of `run_pairs` pairs), at each precision the
    run may train (`precision.candidate_precisions`); each measurement takes at most
    `BUDGET_SHARE` of a minutes budget (a test's few seconds give two steps)."""
    mcfg = model or candidate.candidate_model()
    budget_s = candidate.time_budget_s or CALIBRATION_S / BUDGET_SHARE
    # the size decides whether bf16 is a candidate: counted only when 'auto' asks
    n_params = Transformer(mcfg).num_parameters() if candidate.precision == "auto" else 0
    return measure_layout(
        layout,
        mcfg,
        int(candidate.max_tokens_per_batch or 1_250),
        lengths,
        device,
        candidate_precisions(candidate.precision, device, n_params),
        seconds=min(CALIBRATION_S, budget_s * BUDGET_SHARE),
        run_pairs=run_pairs,
    )


def fastest(timings: Sequence[Calibration], seconds: float | None = None) -> Calibration:
    """The measurement a run plans by and trains as: the greatest `merit`."""
    return max(timings, key=lambda t: merit(t, seconds))


def merit(timing: Calibration, seconds: float | None) -> float:
    """What timings are compared by: the tokens in `seconds` of training (each of the run's
    shapes' first steps paid: `Calibration.tokens_in`), or per second at the steady speed
    (None: a budget not in time)."""
    return timing.tokens_in(seconds) if seconds else timing.tokens_per_s


def measure_share(task: MeasureTask, device: torch.device) -> list[Calibration]:
    """What every rank of a measurement does, rank 0 and the children alike (inside a group,
    each with its share of every batch): `measure` at each of the task's precisions."""
    return [
        measure(
            task.model,
            task.batch_tokens,
            task.lengths,
            device,
            precision,
            task.threads,
            task.seconds,
            run_pairs=task.run_pairs,
        )
        for precision in task.precisions
    ]
