"""How fast this machine trains a given model: a few timed training steps on synthetic batches.

A budget in minutes means very different amounts of learning on different CPUs (a CPU
without bf16 trains about half the tokens per minute of one with it), and the recipe chooses
for the tokens a run will actually see. So before a minutes budget is planned, the candidate
model takes a few full steps (forward, label-smoothed loss, backward, clipping, Adam) at the
run's precision and thread count on random batches of the run's batch size, and the recipe
projects tokens = seconds x tokens/s from that. It costs a couple of seconds, about 1 % of a
5-minute run; the weights it touches are thrown away.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from core_model.batching import Example, collate, make_batches
from core_model.special_tokens import RESERVED, SpecialIds
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
    threads: int
    precision: str  # 'fp32' | 'bf16'
    parameters: int

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
    TrainConfig)."""
    model = Transformer(mcfg).to(device).train()
    n_params = model.num_parameters()
    amp = resolve_precision(precision, device, n_params)
    threads = cpu_threads(num_threads, n_params, torch.get_num_threads())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    vocab = min(mcfg.src_vocab_size, mcfg.tgt_vocab_size)
    examples = synthetic_examples(
        vocab, sentence_tokens, batch_tokens // sentence_tokens + 1, specials=mcfg.specials
    )
    first = make_batches(examples, batch_tokens, shuffle=False)[0]
    batch = collate(examples, first, mcfg.specials).to(device)  # a batch of the run's size
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:

        def step(i: int) -> int:
            forward_backward(model, batch, device, amp, 0.1, mcfg.pad_id)
            clip_and_check(model, 1.0, 0.0, i)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return batch.n_tokens + batch.n_src_tokens

        for i in range(UNTIMED_STEPS):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tokens, steps, start = 0, 0, time.perf_counter()
        while steps < MAX_STEPS and (steps < 2 or time.perf_counter() - start < seconds):
            tokens += step(UNTIMED_STEPS + steps)
            steps += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        spent = time.perf_counter() - start
    finally:
        torch.set_num_threads(before)
    return Calibration(
        tokens_per_s=round(tokens / spent, 1),
        steps=steps,
        seconds=round(spent, 2),
        threads=threads if device.type == "cpu" else 0,
        precision="bf16" if amp is not None else "fp32",
        parameters=n_params,
    )
