"""How fast this machine trains a given model: timed training steps on batches made as the
run will make them.

A budget in minutes means very different amounts of learning on different CPUs (a CPU
without bf16 trains about half the tokens per minute of one with it), and the recipe chooses
for the tokens a run will actually see. So before a minutes budget is planned, the candidate
model takes full steps (forward, label-smoothed loss, backward, clipping, Adam) at the run's
precision and thread count, and the recipe projects tokens = seconds x tokens/s from that.

The steps are taken on batches of the run's own length mix (`CorpusFacts.lengths`: the
corpus' pairs, random ids of their estimated subword lengths), bucketed by `make_batches` at
the run's batch size and padded as the run pads them (`precision.shape_multiple`): nearly
every step of a real run has a new shape, and CPU bf16 (oneDNN) prepares its kernels per
shape, so one synthetic shape timed again and again overstated real runs by up to 2.7x (an
AMX Xeon; 1.2x on an AVX512-BF16 EPYC). Where 'auto' may train either, both precisions are
timed (`precision.candidate_precisions`) and the faster on these batches is the one the run
trains. Each measurement takes at most `CALIBRATION_S`; the weights it touches are thrown
away.

The same measurement chooses how a run spreads over the cores (`choose_layout`): one process
with every thread, or data-parallel ranks with fewer threads each (`parallel.Layout`), timed
as the run would train — each rank with its share of every update, gradients all-reduced.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import nn

from core_model.batching import Example, collate, make_batches, shard_batches
from core_model.special_tokens import RESERVED, SpecialIds
from core_model.training import setup
from core_model.training.config import TrainConfig
from core_model.training.parallel import (
    Calibration,
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
    resolve_precision,
    shape_multiple,
)
from core_model.training.step import clip_and_check, forward_backward
from core_model.transformer import ModelConfig, Transformer

CALIBRATION_S = 2.0  # timed seconds (after untimed steps: allocation, kernel choice)
UNTIMED_STEPS = 2
MAX_STEPS = 30  # enough on a fast machine; the clock ends it first on a slow one
BUDGET_SHARE = 1 / 200  # of a minutes budget, at most, per measurement


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
) -> Calibration:
    """Tokens per second of training steps of a fresh `mcfg` model on this machine, at the
    precision and thread count a run of it would get (`precision`, `num_threads` as in
    TrainConfig), on length-bucketed batches of pairs of these (source, target) `lengths`
    (their lengths rounded up to `multiple`; None: as the run rounds them). Inside a process
    group every rank takes its share of `batch_tokens` and of the batches, and the gradients
    are all-reduced, as in training; the result counts all ranks. (`multiple` and
    `max_steps`: for `bench/batch_shapes.py`.)"""
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
    share = max(1, batch_tokens // ranks.world)
    batches = shard_batches(make_batches(examples, share), ranks.rank, ranks.world)
    multiple = multiple or shape_multiple(device, amp)
    comm = ranks.comm_device(device)
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    shapes: set[tuple[int, ...]] = set()

    def step(i: int, stop: bool) -> int | None:
        """One training step as the loop takes it: first the exchange of the stop flags and
        the update's tokens (None: stop), then forward, backward, clipping, Adam."""
        batch = collate(examples, batches[i % len(batches)], mcfg.specials, multiple).to(device)
        flags = ranks.all_sum([float(stop), 0.0, float(batch.n_tokens)], comm)
        if flags[0] > 0:
            return None
        forward_backward(net, batch, device, amp, 0.1, mcfg.pad_id, flags[2] / ranks.world)
        clip_and_check(model, 1.0, 0.0, i)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= UNTIMED_STEPS:
            shapes.add((*batch.src.shape, batch.tgt_in.size(1)))
        return batch.n_tokens + batch.n_src_tokens

    try:
        for i in range(UNTIMED_STEPS):
            step(i, stop=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tokens, steps, start = 0, 0, time.perf_counter()
        while True:  # rank 0's clock decides, so every rank takes the same steps
            late = steps >= 2 and time.perf_counter() - start >= seconds
            done = step(UNTIMED_STEPS + steps, stop=steps >= max_steps or (ranks.main and late))
            if done is None:
                break
            tokens, steps = tokens + done, steps + 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        spent = time.perf_counter() - start
        tokens = int(ranks.all_sum([float(tokens)], comm)[0])
    finally:
        torch.set_num_threads(before)
    return Calibration(
        tokens_per_s=round(tokens / spent, 1),
        steps=steps,
        seconds=round(spent, 2),
        threads=threads if device.type == "cpu" else 0,
        precision="bf16" if amp is not None else "fp32",
        parameters=n_params,
        processes=ranks.world,
        shapes=len(shapes),
    )


def measure_layout(
    layout: Layout,
    mcfg: ModelConfig,
    batch_tokens: int,
    lengths: Sequence[tuple[int, int]],
    device: torch.device,
    precisions: Sequence[str] = ("auto",),
    seconds: float = CALIBRATION_S,
) -> list[Calibration]:
    """`measure` at each of `precisions` in turn, with the run spread as `layout` says: this
    process is rank 0 of a group of `layout.processes` (the others are started for the
    measurements and stopped after them)."""
    task = MeasureTask(
        model=mcfg,
        batch_tokens=batch_tokens,
        lengths=tuple((s, t) for s, t in lengths),
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
) -> list[Calibration]:
    """The speed of a recipe's candidate config spread as `layout` says: of the `model` the
    run continues (a version's or a public checkpoint's: its size, not the preset's), else of
    the candidate's preset at its vocabulary; at the candidate's batch either way, on batches
    of `lengths` (`CorpusFacts.length_mix`), at each precision the run may train
    (`precision.candidate_precisions`); each measurement takes at most `BUDGET_SHARE` of a
    minutes budget (a test's few seconds give two steps)."""
    mcfg = model or setup.candidate_model(candidate)
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
    )


def fastest(timings: Sequence[Calibration]) -> Calibration:
    """The measurement a run plans by and trains as: the most tokens per second."""
    return max(timings, key=lambda t: t.tokens_per_s)


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
        )
        for precision in task.precisions
    ]
