"""How fast this machine trains a given model: a few timed training steps on synthetic batches.

A budget in minutes means very different amounts of learning on different CPUs (a CPU
without bf16 trains about half the tokens per minute of one with it), and the recipe chooses
for the tokens a run will actually see. So before a minutes budget is planned, the candidate
model takes a few full steps (forward, label-smoothed loss, backward, clipping, Adam) at the
run's precision and thread count on random batches of the run's batch size, and the recipe
projects tokens = seconds x tokens/s from that. It costs a couple of seconds, about 1 % of a
5-minute run; the weights it touches are thrown away.

The same measurement chooses how a run spreads over the cores (`choose_layout`): one process
with every thread, or data-parallel ranks with fewer threads each (`parallel.Layout`), timed
as the run would train — each rank with its share of every update, gradients all-reduced.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from core_model.batching import Example, collate, make_batches
from core_model.special_tokens import RESERVED, SpecialIds
from core_model.training import setup
from core_model.training.config import TrainConfig
from core_model.training.parallel import Layout, RankGroup, Ranks, data_parallel, rank_device
from core_model.training.precision import cpu_threads, resolve_precision
from core_model.training.step import clip_and_check, forward_backward
from core_model.transformer import ModelConfig, Transformer

CALIBRATION_S = 2.0  # timed seconds (after untimed steps: allocation, kernel choice)
UNTIMED_STEPS = 2
MAX_STEPS = 20  # enough on a fast machine; the clock ends it first on a slow one


@dataclass(frozen=True)
class Calibration:
    """What the measurement saw (saved in the run's metrics so a user can check the plan)."""

    tokens_per_s: float  # source + target tokens per second of full training steps
    steps: int
    seconds: float
    threads: int  # per process
    precision: str  # 'fp32' | 'bf16'
    parameters: int
    processes: int = 1  # data-parallel ranks, each with its share of every batch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def synthetic_examples(
    vocab_size: int, sentence_tokens: int, n: int, seed: int = 0, specials: SpecialIds = RESERVED
) -> list[Example]:
    """`n` random sentence pairs of `sentence_tokens` tokens a side, none of them reserved:
    the cost of a step depends on its shapes, not on the words, and one shape is timed at its
    steady speed (each new shape costs a first, slower step on a CPU)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(RESERVED), vocab_size, (n, 2, sentence_tokens), generator=g)
    ids[torch.isin(ids, torch.tensor(specials))] = len(RESERVED)  # a reserved id elsewhere
    return [Example(tuple(src.tolist()), tuple(tgt.tolist())) for src, tgt in ids]


def measure(
    mcfg: ModelConfig,
    batch_tokens: int,
    sentence_tokens: int,
    device: torch.device,
    precision: str = "auto",
    num_threads: int | None = None,
    seconds: float = CALIBRATION_S,
) -> Calibration:
    """Tokens per second of training steps of a fresh `mcfg` model on this machine, at the
    precision and thread count a run of it would get (`precision`, `num_threads` as in
    TrainConfig). Inside a process group every rank takes its share of `batch_tokens` and the
    gradients are all-reduced, as in training; the result counts all ranks."""
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
    share = max(sentence_tokens, batch_tokens // ranks.world)
    examples = synthetic_examples(
        vocab,
        sentence_tokens,
        share // sentence_tokens + 1,
        seed=ranks.rank,
        specials=mcfg.specials,
    )
    first = make_batches(examples, share, shuffle=False)[0]
    # a full batch (this rank's share) of the run's size
    batch = collate(examples, first, mcfg.specials).to(device)
    comm = ranks.comm_device(device)
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)

    def step(i: int, stop: bool) -> int | None:
        """One training step as the loop takes it: first the exchange of the stop flags and
        the update's tokens (None: stop), then forward, backward, clipping, Adam."""
        flags = ranks.all_sum([float(stop), 0.0, float(batch.n_tokens)], comm)
        if flags[0] > 0:
            return None
        forward_backward(net, batch, device, amp, 0.1, mcfg.pad_id, flags[2] / ranks.world)
        clip_and_check(model, 1.0, 0.0, i)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return batch.n_tokens + batch.n_src_tokens

    try:
        for i in range(UNTIMED_STEPS):
            step(i, stop=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tokens, steps, start = 0, 0, time.perf_counter()
        while True:  # rank 0's clock decides, so every rank takes the same steps
            late = steps >= 2 and time.perf_counter() - start >= seconds
            done = step(UNTIMED_STEPS + steps, stop=steps >= MAX_STEPS or (ranks.main and late))
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
    )


def measure_layout(
    layout: Layout,
    mcfg: ModelConfig,
    batch_tokens: int,
    sentence_tokens: int,
    device: torch.device,
    precision: str = "auto",
    seconds: float = CALIBRATION_S,
) -> Calibration:
    """`measure` with the run spread as `layout` says: this process is rank 0 of a group of
    `layout.processes` (the others are started for the measurement and stopped after it)."""
    if layout.processes == 1:
        return measure(
            mcfg, batch_tokens, sentence_tokens, device, precision, layout.threads, seconds
        )
    spec = {
        "task": "measure",
        "model": mcfg.to_dict(),
        "batch_tokens": batch_tokens,
        "sentence_tokens": sentence_tokens,
        "device": device.type,
        "precision": precision,
        "threads": layout.threads,
        "seconds": seconds,
    }
    with RankGroup(layout, spec, device):
        return measure(
            mcfg, batch_tokens, sentence_tokens, device, precision, layout.threads, seconds
        )


def measure_candidate(
    candidate: TrainConfig,
    sentence_tokens: int,
    device: torch.device,
    layout: Layout,
    model: ModelConfig | None = None,
) -> Calibration:
    """The speed of a recipe's candidate config spread as `layout` says: of the `model` the
    run continues (a version's or a public checkpoint's: its size, not the preset's), else of
    the candidate's preset at its vocabulary; at the candidate's batch either way. It takes at
    most a hundredth of a minutes budget (a test's few seconds give two steps)."""
    mcfg = model or setup.candidate_model(candidate)
    budget_s = candidate.time_budget_s or CALIBRATION_S * 100
    return measure_layout(
        layout,
        mcfg,
        int(candidate.max_tokens_per_batch or 1_250),
        sentence_tokens,
        device,
        candidate.precision,
        seconds=min(CALIBRATION_S, budget_s / 100),
    )


def measure_as_rank(spec: dict[str, Any], rank: int) -> None:
    """A child rank of `measure_layout` (started by `core_model.distributed`, already in the
    group): the same measurement, with its share of each batch."""
    measure(
        ModelConfig.from_dict(spec["model"]),
        spec["batch_tokens"],
        spec["sentence_tokens"],
        rank_device(spec["device"], rank),
        spec["precision"],
        spec["threads"],
        spec["seconds"],
    )
