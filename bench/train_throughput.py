"""Training speed: the handwritten Transformer vs torch.nn.Transformer, and how much of the
machine's matrix-multiply peak our training reaches.

The model is the one a user gets: core_model's recipe resolved for a token budget on a
corpus (`--tokens 1100000 --corpus multi30k`: preset, vocabulary, tied embeddings, dropout
and the batch size in padded tokens), so a recipe that picks a smaller model for a small
budget is measured at that size. Both models get the same embeddings, positions and
generator, identical batches, the same optimizer and loss, on the same device; only the
encoder/decoder stacks differ. Runs fp32 and bf16 autocast, alternating the two models in
rounds to cancel machine noise, and keeps each model's best round.

Model FLOP/s counts the model's matrix math per optimizer step, on the padded batch shapes
(what the GEMMs compute), as multiply-adds (MACs) × 2 for the forward pass × 3 for training
(the backward pass costs two forwards), i.e. FLOPs = 6 · MACs with, for B sentences of S
source and T target positions, d = d_model, f = d_ff, V = the target vocabulary:

    encoder layer:  B·S·(4d² + 2df)             projections Q, K, V, O and the feed-forward
                    + 2·B·S²·d                  scores Q·Kᵀ and context A·V
    decoder layer:  B·T·(4d² + 2d² + 2df)       self-attention, cross Q and O, feed-forward
                    + B·S·2d²                   cross-attention K and V of the memory
                    + 2·B·T²·d + 2·B·T·S·d      self (causal, counted in full) and cross scores
    generator:      B·T·d·V

(the usual 6 × matmul parameters × tokens, plus attention's score and context products).
Checked against `torch.utils.flop_counter.FlopCounterMode` on a forward + backward pass: the
projection, feed-forward and generator terms equal its count exactly; the attention terms
are the rest (it does not count the CPU attention kernel).
Embedding lookups, norms, softmax, dropout, the loss and Adam are not counted: they are
overhead the share measures. The peak is a large square GEMM (`--gemm 2048`: 2·n³ FLOPs)
timed in the same process with the same threads and dtype, the best of several before and
after each precision's rounds. `share_of_gemm_peak` = model FLOP/s of our best round ÷ that
peak.

`layouts` (CPU, fp32): what a click trains with on the whole machine. Every way the product
may spread the run over the cores (`parallel.cpu_layouts`: one process with every core's
thread, one process per core, the splits between) is timed by the product's own calibration
(`calibration.measure_layout`: full training steps of the recipe's model and batch, each rank
with its share of every update, gradients all-reduced), and its model FLOP/s is put against
the **whole machine's** GEMM peak (the n³ product with a thread per core). `chosen` is the
layout the product would train with (the fastest). Prints one JSON object as the last line,
with the load of the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.nn import functional as F

from bench.data import DATASETS, splits
from bench.reference import ReferenceModel
from core_model import ModelConfig, Transformer
from core_model.batching import collate, make_batches
from core_model.training import TrainConfig, recipe
from core_model.training.calibration import measure_layout, synthetic_examples
from core_model.training.parallel import cpu_cores, cpu_layouts
from core_model.training.precision import cpu_supports_bf16, cpu_threads, idle_cores


def recipe_model(
    token_budget: int, corpus: str, device: str
) -> tuple[ModelConfig, TrainConfig, int]:
    """The model and resolved training config that core_model's recipe gives a run of
    `token_budget` tokens on `corpus`'s training split (vocabularies at their planned size),
    and the corpus' typical subword tokens per side (what the calibration times)."""
    data = splits(corpus)
    facts = recipe.CorpusFacts.of(data["train"], data["valid"])
    asked = TrainConfig(token_budget=token_budget, device=device)
    cfg = recipe.resolve(asked, facts, gpu=device == "cuda").cfg
    vocab = int(cfg.vocab_size or 0)
    return cfg.model_config(vocab, vocab, bool(cfg.joint_vocab)), cfg, facts.side_tokens


def layouts_on_the_whole_machine(
    cfg: ModelConfig, batch_tokens: int, sentence_tokens: int, gemm: int
) -> dict[str, object]:
    """Each layout the product may train a click with, timed by the product's calibration, as
    a share of the whole machine's fp32 GEMM peak (see the module docstring)."""
    cores = cpu_cores()
    before = torch.get_num_threads()
    torch.set_num_threads(cores)
    try:
        peak = max(gemm_flops_per_s(gemm, torch.float32, "cpu") for _ in range(2))
    finally:
        torch.set_num_threads(before)
    timed = []
    for layout in cpu_layouts(cores):
        # the FLOPs of one rank's calibration batch, per token it counts
        share = max(sentence_tokens, batch_tokens // layout.processes)
        lengths = [(sentence_tokens, sentence_tokens)] * (share // sentence_tokens + 1)
        examples = synthetic_examples(cfg.src_vocab_size, lengths)
        batch = collate(examples, make_batches(examples, share, shuffle=False)[0])
        per_token = step_flops(cfg, batch.src, batch.tgt_in) / (batch.n_tokens + batch.n_src_tokens)
        (speed,) = measure_layout(
            layout, cfg, batch_tokens, lengths, torch.device("cpu"), ["fp32"], seconds=5.0
        )
        flops = speed.tokens_per_s * per_token
        timed.append(
            {
                "processes": layout.processes,
                "threads_per_process": layout.threads,
                "tokens_per_s": speed.tokens_per_s,
                "steps": speed.steps,
                "model_gflop_s": round(flops / 1e9, 2),
                "share_of_machine_gemm_peak": round(flops / peak, 3),
            }
        )
    best = max(timed, key=lambda t: t["tokens_per_s"])
    return {
        "physical_cores": cores,
        "machine_gemm_peak_gflop_s": round(peak / 1e9, 2),
        "batch_tokens": batch_tokens,
        "sentence_tokens": sentence_tokens,
        "timed": timed,
        "chosen": {k: best[k] for k in ("processes", "threads_per_process")},
        "chosen_share_of_machine_gemm_peak": best["share_of_machine_gemm_peak"],
    }


def step_flops(cfg: ModelConfig, src: torch.Tensor, tgt_in: torch.Tensor) -> int:
    """Training FLOPs of one step on src [B, S] and tgt_in [B, T] (see the module docstring)."""
    (b, s), t = src.shape, tgt_in.size(1)
    d, f, v = cfg.d_model, cfg.d_ff, cfg.tgt_vocab_size
    encoder = b * s * (4 * d * d + 2 * d * f) + 2 * b * s * s * d
    decoder = (
        b * t * (6 * d * d + 2 * d * f) + b * s * 2 * d * d + 2 * b * t * t * d + 2 * b * t * s * d
    )
    macs = cfg.n_encoder_layers * encoder + cfg.n_decoder_layers * decoder + b * t * d * v
    return 6 * macs


def gemm_flops_per_s(n: int, dtype: torch.dtype, device: str, reps: int = 8) -> float:
    """The best of `reps` timed n×n×n matrix products (after one warm-up): the peak."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    best = float("inf")
    for i in range(reps + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        if i:  # the first is the warm-up
            best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def random_batches(n: int, tokens: int, vocab: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """Batches of ~`tokens` padded tokens (max(source, target) length × sentences, as the
    product counts a batch) with caption-like lengths (8–30)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        length = int(torch.randint(8, 31, (1,), generator=gen))
        rows = max(1, tokens // (length + 2))
        src = torch.randint(4, vocab, (rows, length + 2), generator=gen)
        tgt = torch.randint(4, vocab, (rows, length + 1), generator=gen)
        for row in range(rows):  # ragged ends, as real batches have
            cut = int(torch.randint(0, 4, (1,), generator=gen))
            if cut:
                src[row, -cut:] = 0
                tgt[row, -cut:] = 0
        batches.append((src, tgt))
    return batches


def train_steps(model: nn.Module, batches, device: str, bf16: bool) -> tuple[float, float]:
    """Runs one optimizer step per batch; returns (target tokens, seconds)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    tokens = 0
    start = time.perf_counter()
    for src, tgt in batches:
        src, tgt = src.to(device), tgt.to(device)
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)),
            tgt_out.reshape(-1),
            ignore_index=0,
            label_smoothing=0.1,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += int((tgt_out != 0).sum())
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--tokens",
        type=int,
        default=1_100_000,
        help="the token budget whose recipe model is measured (default: 1.1M, 10 minutes of "
        "an fp32-only 2-core CPU on one thread)",
    )
    parser.add_argument("--corpus", choices=DATASETS, default="multi30k")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--batch-tokens", type=int, help="padded tokens per batch (default: the recipe's)"
    )
    parser.add_argument("--gemm", type=int, default=2048, help="n of the n³ peak GEMM")
    parser.add_argument(
        "--fp32", action="store_true", help="fp32 only, as on a CPU without bf16 (AVX2)"
    )
    parser.add_argument(
        "--threads", type=int, help="CPU threads (default: what a training run would take now)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    idle = idle_cores(1.0)
    torch.manual_seed(0)
    cfg, train_cfg, side_tokens = recipe_model(args.tokens, args.corpus, args.device)
    if args.device == "cpu":  # the trainer's policy: the cores other processes leave idle
        n_params = Transformer(cfg).num_parameters()
        torch.set_num_threads(cpu_threads(args.threads, n_params, torch.get_num_threads()))
    batch_tokens = args.batch_tokens or int(train_cfg.max_tokens_per_batch or 1250)
    ours = Transformer(cfg).to(args.device)
    reference = ReferenceModel(Transformer(cfg)).to(args.device)
    batches = random_batches(args.steps, batch_tokens, cfg.src_vocab_size, seed=1)
    flops = sum(step_flops(cfg, src, tgt[:, :-1]) for src, tgt in batches)
    result: dict[str, object] = {
        "bench": "train_throughput",
        "device": args.device,
        "threads": torch.get_num_threads(),
        "recipe": {"token_budget": args.tokens, "corpus": args.corpus},
        "config": {
            k: getattr(cfg, k)
            for k in ("d_model", "n_heads", "d_ff", "src_vocab_size", "shared_vocab", "dropout")
        }
        | {"preset": train_cfg.preset, "layers": f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}"},
        "parameters": ours.num_parameters(),
        "batch_tokens": batch_tokens,
        "model_gflop_per_step": round(flops / len(batches) / 1e9, 3),
    }
    # bf16 only where a run would train in it: without native bf16 (an AVX2-only CPU) it is
    # emulated, many times slower than fp32, and no run uses it (precision "auto" is fp32)
    native_bf16 = not args.fp32 and (args.device == "cuda" or cpu_supports_bf16())
    if not native_bf16:
        result["bf16"] = (
            "not measured: --fp32 (as a CPU without bf16)"
            if args.fp32
            else "not measured: no native bf16 on this CPU (training runs in fp32)"
        )
    for precision in ("fp32", "bf16") if native_bf16 else ("fp32",):
        bf16 = precision == "bf16"
        dtype = torch.bfloat16 if bf16 else torch.float32
        peaks = [gemm_flops_per_s(args.gemm, dtype, args.device)]
        train_steps(ours, batches[:2], args.device, bf16)  # warm-up both
        train_steps(reference, batches[:2], args.device, bf16)
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(train_steps(ours, batches, args.device, bf16))
            theirs.append(train_steps(reference, batches, args.device, bf16))
        peaks.append(gemm_flops_per_s(args.gemm, dtype, args.device))
        tokens, best_s = min(mine, key=lambda r: r[1])
        best_theirs = min(s for _, s in theirs)
        peak, achieved = max(peaks), flops / best_s
        result[precision] = {
            "ours_tokens_per_s": round(tokens / best_s, 1),
            "nn_transformer_tokens_per_s": round(tokens / best_theirs, 1),
            "ratio": round(best_theirs / best_s, 3),
            "model_gflop_s": round(achieved / 1e9, 2),
            "gemm_peak_gflop_s": round(peak / 1e9, 2),
            "gemm_peaks_gflop_s": [round(p / 1e9, 2) for p in peaks],
            "share_of_gemm_peak": round(achieved / peak, 3),
        }
    if args.device == "cpu":
        result["layouts"] = layouts_on_the_whole_machine(cfg, batch_tokens, side_tokens, args.gemm)
    if native_bf16:
        result["bf16_speedup_ours"] = round(
            result["bf16"]["ours_tokens_per_s"] / result["fp32"]["ours_tokens_per_s"], 3
        )
    result["machine"] = {
        "cpus": os.cpu_count(),
        "idle_cores_at_start": None if idle is None else round(idle, 2),
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
