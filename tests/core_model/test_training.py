"""Training engine: loss, schedule, batching, budget, reproducibility, callbacks, cancel,
checkpoint/resume, fine-tuning, model selection and the user-facing errors."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from core_model import training as tr
from core_model.artifact import load_model
from core_model.batching import (
    collate,
    encode_pairs,
    example_cost,
    make_batches,
    rank_share,
    rebatch,
)
from core_model.special_tokens import BOS_ID, EOS_ID, PAD_ID
from core_model.tokenizer import train_tokenizers
from core_model.training import TrainConfig, TrainingError, plan_budget, train
from core_model.training.checkpoint import find_checkpoint, read_state
from core_model.training.label_smoothing import LabelSmoothingLoss, label_smoothed_nll_loss
from core_model.training.parallel import Ranks
from core_model.training.schedule import (
    LRSchedule,
    constant_lr,
    make_schedule,
    noam_factor_for_peak,
    noam_lr,
)
from core_model.training.selection import average_state_dicts
from core_model.training.setup import make_optimizer
from core_model.transformer import Transformer
from tests.helpers import toy_pairs


def quick(**kw) -> TrainConfig:
    """A few dozen steps of the tiny model: enough to exercise the loop, fast on 2 cores."""
    base = dict(preset="tiny", epochs=2, min_epoch_steps=10, precision="fp32", device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- loss ---------------------------------------------------------------------------------------


def test_label_smoothing_matches_definition() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 10)
    target = torch.tensor([4, 5, 0, 9, 0, 1])  # two PAD positions
    eps = 0.1
    loss, nll = label_smoothed_nll_loss(logits, target, eps, ignore_index=0)
    lp = logits.log_softmax(-1)
    expected = 0.0
    for row, t in enumerate(target.tolist()):
        if t == 0:
            continue
        # (1-ε)·one-hot + ε·uniform over the 9 non-PAD classes
        q = torch.full((10,), eps / 9)
        q[0] = 0.0
        q[t] += 1 - eps
        expected += float(-(q * lp[row]).sum())
    assert math.isclose(float(loss), expected, rel_tol=1e-5)
    keep = target != 0
    ref_nll = F.cross_entropy(logits[keep], target[keep], reduction="sum")
    assert math.isclose(float(nll), float(ref_nll), rel_tol=1e-5)
    plain, _ = label_smoothed_nll_loss(logits, target, 0.0)
    assert math.isclose(float(plain), float(ref_nll), rel_tol=1e-5)
    module = LabelSmoothingLoss(eps)(logits[None], target[None])
    assert math.isclose(float(module), float(loss) / 4, rel_tol=1e-5)


def test_label_smoothing_gradient_ignores_padding() -> None:
    logits = torch.randn(3, 7, requires_grad=True)
    loss, _ = label_smoothed_nll_loss(logits, torch.tensor([0, 3, 0]), 0.1)
    loss.backward()
    assert torch.all(logits.grad[0] == 0) and torch.all(logits.grad[2] == 0)
    assert logits.grad[1].abs().sum() > 0


def test_label_smoothing_gradient_is_the_definitions() -> None:
    """The fused backward equals autograd through log-softmax (fp64, PAD and ε > 0)."""
    torch.manual_seed(0)
    target = torch.tensor([4, 5, 0, 9, 0, 1])
    for eps in (0.0, 0.1):
        logits = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
        loss, _ = label_smoothed_nll_loss(logits, target, eps, ignore_index=0)
        (loss * 0.5).backward()
        ref = logits.detach().clone().requires_grad_(True)
        lp = ref.log_softmax(-1)
        q = torch.full((6, 10), eps / 9, dtype=torch.float64)
        q[:, 0] = 0.0
        q[torch.arange(6), target] += 1 - eps
        (-(q * lp).sum(-1) * (target != 0)).sum().mul(0.5).backward()
        assert torch.allclose(logits.grad, ref.grad, atol=1e-12)
    bf16 = torch.randn(6, 10).bfloat16().requires_grad_(True)
    label_smoothed_nll_loss(bf16, target, 0.1)[0].backward()
    assert bf16.grad.dtype == torch.bfloat16


# -- schedule -----------------------------------------------------------------------------------


def test_noam_schedule_is_the_paper_formula() -> None:
    d, w = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        assert math.isclose(noam_lr(step, d, w), d**-0.5 * min(step**-0.5, step * w**-1.5))
    assert noam_lr(4000, d, w) >= max(noam_lr(s, d, w) for s in range(1, 20000, 97))
    assert math.isclose(noam_lr(10, d, w, factor=2.0), 2 * noam_lr(10, d, w))
    f = noam_factor_for_peak(1e-3, 256, 500)
    assert math.isclose(LRSchedule("noam", 256, 500, factor=f).peak(), 1e-3)
    assert constant_lr(5, 1e-3, warmup=10) == pytest.approx(5e-4)
    assert constant_lr(50, 1e-3, warmup=10) == 1e-3
    linear = LRSchedule("linear", 256, 10, lr=1e-3)
    assert linear.lr_at(5, progress=0.05) == pytest.approx(5e-4)
    assert linear.lr_at(50, progress=0.5) == pytest.approx(5e-4)
    assert linear.lr_at(100, progress=1.0) == 0.0


def test_schedule_resolution() -> None:
    short = make_schedule(TrainConfig(lr_schedule="constant"), d_model=64, total_steps=400)
    assert short.kind == "constant" and short.lr == pytest.approx(noam_lr(4000, 64, 4000))
    long = make_schedule(TrainConfig(lr_schedule="noam"), d_model=256, total_steps=30_000)
    assert long.kind == "noam" and long.warmup == 3000
    assert long.peak() == pytest.approx(noam_lr(4000, 256, 4000))
    paper = make_schedule(TrainConfig(lr_schedule="noam", warmup_steps=4000), 512, 100_000)
    assert paper.lr_at(4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    budget = make_schedule(TrainConfig(lr_schedule="linear", lr=2e-3, warmup_steps=100), 256, 1)
    assert budget.lr_at(50, progress=0.01) == pytest.approx(1e-3)  # half-way up the warm-up
    assert budget.lr_at(100, progress=0.02) == pytest.approx(2e-3 * 0.98)  # decay has begun
    assert budget.lr_at(500, progress=0.5) == pytest.approx(1e-3)  # half-way down
    assert budget.lr_at(900, progress=1.0) == 0.0


def test_the_schedules_the_training_docs_describe() -> None:
    """docs/TRAINING.md as a tester checked it against a run: a continued run capped at 60
    steps climbs 1e-5 a step and turns down at 2.7e-4 (step 27), never reaching its 5e-4
    peak; a memorising run warms up 100 steps, then holds its rate."""
    from core_model.training import recipe

    cfg = TrainConfig(lr_schedule="linear", lr=5e-4, warmup_steps=recipe.CONTINUE_WARMUP_STEPS)
    capped = make_schedule(cfg, 256, 60)
    rates = [capped.lr_at(step, step / 60) for step in range(1, 61)]
    top = max(rates)
    assert rates.index(top) + 1 == 27 and top == pytest.approx(2.7e-4)
    assert rates[1] - rates[0] == pytest.approx(1e-5) and rates[-1] == 0.0
    memorise = make_schedule(TrainConfig(lr_schedule="constant", lr=4e-3), 64, 1_000)
    assert memorise.warmup == 100
    assert memorise.lr_at(50) == pytest.approx(2e-3) and memorise.lr_at(1_000) == 4e-3


# -- batching -----------------------------------------------------------------------------------


def test_batches_respect_token_budget_and_cover_everything() -> None:
    pairs = toy_pairs() * 10
    tok = train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], vocab_size=300)
    examples = encode_pairs(pairs, tok, max_len=64)
    batches = make_batches(examples, max_tokens=100, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(examples)))
    for b in batches:
        assert len(b) == 1 or max(example_cost(examples[i]) for i in b) * len(b) <= 100
    assert batches == make_batches(examples, max_tokens=100, seed=3)
    assert batches != make_batches(examples, max_tokens=100, seed=4)
    batch = collate(examples, batches[0])
    row = 0
    n = len(examples[batches[0][0]].tgt)
    assert batch.tgt_in[row, 0] == BOS_ID
    assert torch.equal(batch.tgt_in[row, 1 : n + 1], batch.tgt_out[row, :n])
    assert batch.tgt_out[row, n] == EOS_ID
    assert batch.src[row, len(examples[batches[0][0]].src) - 1] == EOS_ID
    assert batch.n_tokens == int((batch.tgt_out != PAD_ID).sum())


def test_the_rest_of_an_epoch_batched_again_keeps_each_passs_pairs_apart() -> None:
    """A tiny corpus's epoch of two passes, re-batched at a new size after its first two
    updates: every pair left is trained as often as before, within the new size, and never
    twice in one update."""
    pairs = toy_pairs() * 3
    tok = train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], vocab_size=300)
    examples = encode_pairs(pairs, tok, max_len=64)
    epoch = make_batches(examples, 100, seed=1) + make_batches(examples, 100, seed=2)
    rest = epoch[2:]
    again = rebatch(examples, rest, 40, seed=5)
    assert sorted(i for b in again for i in b) == sorted(i for b in rest for i in b)
    for b in again:
        assert len(set(b)) == len(b)
        assert len(b) == 1 or max(example_cost(examples[i]) for i in b) * len(b) <= 40


def test_ranks_split_every_batch_in_length_order_by_their_parts() -> None:
    batch = list(range(10, 20))  # a batch's pairs, in length order
    assert [rank_share(batch, [0.5, 0.5], r) for r in range(2)] == [batch[:5], batch[5:]]
    assert [rank_share(batch, [2 / 3, 1 / 3], r) for r in range(2)] == [batch[:7], batch[7:]]
    assert rank_share(batch, [1.0], 0) == batch
    # every rank takes at least one pair, however small its part
    assert [len(rank_share(batch, [0.99, 0.01], r)) for r in range(2)] == [9, 1]
    assert [len(rank_share(batch, [0.01, 0.01, 0.98], r)) for r in range(3)] == [1, 1, 8]
    # fewer pairs than ranks: some ranks train the same pair (each needs a backward)
    assert [rank_share([7, 8], [1 / 3] * 3, r) for r in range(3)] == [[7], [8], [7]]


def test_adaptive_budget() -> None:
    cfg = TrainConfig()
    tiny = plan_budget(1, cfg)  # a dozen pairs = one batch
    assert tiny.total_steps >= cfg.min_steps and tiny.steps_per_epoch >= cfg.min_epoch_steps
    assert 3 <= tiny.epochs <= 20
    mid = plan_budget(120, cfg)  # ~30k pairs at 4096 tokens per batch
    assert mid.passes_per_epoch == 1 and 20 <= mid.epochs <= 40
    big = plan_budget(10_000, cfg)
    assert big.total_steps <= cfg.max_adaptive_steps and big.epochs >= 1
    fixed = plan_budget(120, TrainConfig(epochs=3, max_steps=200))
    assert fixed.total_steps == 200 and fixed.epochs == 2


# -- the loop -----------------------------------------------------------------------------------


def test_same_seed_same_weights_and_other_seed_differs() -> None:
    pairs = toy_pairs()
    a = train(pairs, None, quick(seed=1))
    b = train(pairs, None, quick(seed=1))
    c = train(pairs, None, quick(seed=2))
    assert same_weights(weights(a.model), weights(b.model))
    assert not same_weights(weights(a.model), weights(c.model))
    assert a.metrics["steps"] == 20 and not a.cancelled


def test_progress_events_validation_and_history() -> None:
    events: list[tr.ProgressEvent] = []
    pairs = toy_pairs()
    res = train(pairs[:10], pairs[10:], quick(progress_every_s=0.0), callback=events.append)
    kinds = [e.kind for e in events]
    assert kinds.count("epoch") == 2 and kinds[-1] == "done" and "step" in kinds
    epoch_events = [e for e in events if e.kind == "epoch"]
    for e in epoch_events:
        assert e.valid_loss is not None and e.bleu is not None and e.chrf is not None
        assert e.tokens_per_s > 0 and e.total_steps == 20
    assert epoch_events[0].lr > 0 and epoch_events[-1].lr == 0.0  # linear decay to the end
    assert [h["epoch"] for h in res.history] == [1, 2]
    assert {"train_loss", "valid_loss", "bleu", "chrf"} <= set(res.history[-1])
    steps = [e.step for e in events]
    assert steps == sorted(steps)
    assert res.metrics["selected"] in ("last", "best", "average_last_5")
    # the run's tokens/s is its average over the whole training time, not the last window's
    m = res.metrics
    assert m["tokens_trained"] > 0
    rounding = 0.006 / m["train_time_s"]  # train_time_s is rounded to 0.01 s
    assert m["tokens_per_s"] == pytest.approx(
        m["tokens_trained"] / m["train_time_s"], rel=0.01 + rounding
    )
    done = events[-1]
    assert done.stop_reason == "epochs" and done.fraction == 1.0 and done.total_steps == 20
    assert all(e.limit == "steps" for e in events)
    assert res.metrics["longest_source_tokens"] == max(
        len(res.tokenizers.src.encode(s)) + 1 for s, _ in pairs[:10]
    )


def test_every_steps_loss_reaches_the_loss_curve() -> None:
    """Issue 30 item 10: the loss curve comes from the loop's steps, not from the clock. With
    no time-based event at all (epochs far shorter than `progress_every_s`), a short run
    reports every step's loss ('loss' events, one per step); the time-based 'step' events
    carry progress only."""
    events: list[tr.ProgressEvent] = []
    train(toy_pairs(), None, quick(epochs=3, progress_every_s=3600.0), callback=events.append)
    assert "step" not in [e.kind for e in events]
    losses = [e for e in events if e.kind == "loss"]
    assert [e.step for e in losses] == list(range(1, 31))
    assert all(math.isfinite(e.train_loss) for e in losses) and losses[0].lr > 0
    assert losses[-1].train_loss < losses[0].train_loss
    events.clear()
    train(toy_pairs(), None, quick(progress_every_s=0.0), callback=events.append)
    periodic = [e for e in events if e.kind == "step"]
    assert periodic and all(e.train_loss is None for e in periodic)


def test_a_long_run_reports_the_mean_loss_of_ever_longer_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every step up to 2 · LOSS_POINTS, then windows that double with the step count
    (LOSS_POINTS rows per doubling), the last one cut short by the end of the run."""
    from core_model.training import progress

    k = progress.LOSS_POINTS
    strides = [progress.loss_stride(s) for s in (1, 2 * k - 1, 2 * k, 4 * k - 1, 4 * k, 8 * k)]
    assert strides == [1, 1, 2, 2, 4, 8]
    for steps, least, most in ((156, 156, 156), (894, 400, 600), (1_000_000, 1_500, 2_000)):
        rows = sum(1 for s in range(1, steps + 1) if s % progress.loss_stride(s) == 0)
        assert least <= rows <= most, (steps, rows)

    monkeypatch.setattr(progress, "LOSS_POINTS", 4)  # windows of 2 steps from step 8, 4 from 16
    events: list[tr.ProgressEvent] = []
    train(toy_pairs(), None, quick(epochs=3, progress_every_s=3600.0), callback=events.append)
    windows = [*range(1, 9), *range(10, 17, 2), *range(20, 29, 4), 30]  # 30: the end
    assert [e.step for e in events if e.kind == "loss"] == windows


def test_time_budget_progress_follows_the_clock() -> None:
    """Under a binding time budget, progress is the share of the clock used and the expected
    end is projected from the current speed; the run ends with the time-budget reason."""
    events: list[tr.ProgressEvent] = []
    cfg = quick(epochs=1000, time_budget_s=1.5, progress_every_s=0.0)
    res = train(toy_pairs(), None, cfg, callback=events.append)
    assert res.metrics["stop_reason"] == "time_budget"
    steps = [e for e in events if e.kind == "step" and e.step > 5]
    assert steps and all(e.limit == "time" for e in steps)
    assert all(e.total_steps < 1000 * 10 for e in steps), "the expected end follows the clock"
    mid = steps[len(steps) // 2]
    assert abs(mid.fraction - mid.elapsed_s / 1.5) < 0.1
    assert events[-1].stop_reason == "time_budget"


def test_an_open_ended_run_has_no_expected_end_before_its_speed_is_known() -> None:
    """Issue 30 item 12: a minutes run read "step 0 of about 1,000,000,008" until its first
    progress: the step count of an open-ended budget is no expected end. Before a step has
    a speed the end is not known (0); after it, the clock projects it."""
    from core_model.training.schedule import BudgetClock

    budget = plan_budget(10, TrainConfig(), open_ended=True)
    clock = BudgetClock(budget, time_budget_s=60.0, step=0)
    assert clock.expected_total(0) == 0
    clock.t_start -= 2.0  # 20 steps in 2 s: 10 steps/s for the 58 s left
    assert abs(clock.expected_total(20) - 600) <= 2
    planned = BudgetClock(plan_budget(10, TrainConfig(epochs=3)), time_budget_s=None, step=0)
    assert planned.expected_total(0) == planned.budget.total_steps


def test_watch_says_what_may_stop_the_run_early() -> None:
    events: list[tr.ProgressEvent] = []
    train(toy_pairs(), None, TrainConfig(preset="tiny", device="cpu"), callback=events.append)
    epoch_events = [e for e in events if e.kind == "epoch"]
    assert epoch_events[0].watch["rule"] == "memorise"
    assert 0.0 <= epoch_events[0].watch["reproduced"] <= 1.0
    assert events[-1].stop_reason == "memorised"


def test_cancel_returns_quickly(tmp_path: Path) -> None:
    calls = {"n": 0}

    def cancel_after_5() -> bool:
        calls["n"] += 1
        return calls["n"] > 5

    res = train(toy_pairs(), None, quick(epochs=50), out_dir=tmp_path, should_cancel=cancel_after_5)
    assert res.cancelled and res.metrics["steps"] == 5
    assert not (tmp_path / "model.safetensors").exists()  # no model version for a cancelled run


def test_a_cancelled_run_reports_the_share_of_its_budget_it_did() -> None:
    """A run cancelled after 30 of its 60 s recorded `fraction: 1.0`: its last report says
    what was done."""
    events: list[tr.ProgressEvent] = []
    calls = {"n": 0}

    def cancel_after_5() -> bool:
        calls["n"] += 1
        return calls["n"] > 5

    res = train(
        toy_pairs(), None, quick(epochs=50), callback=events.append, should_cancel=cancel_after_5
    )
    done = events[-1]
    assert res.cancelled and done.kind == "done" and done.step == 5
    assert done.fraction == pytest.approx(5 / 500)  # 50 epochs of 10 steps


def test_the_reserve_for_the_final_choice_is_the_mean_of_the_epochs() -> None:
    """A slow validation then a quick one swung the time left for steps, and the step
    estimate with it (2,359 → 1,038 → 2,526): the reserve is their mean, within its cap."""
    from core_model.training.schedule import BudgetClock

    clock = BudgetClock(plan_budget(10, TrainConfig(), open_ended=True), 120.0, step=0)
    clock.keep_reserve(20.0, cap_s=24.0)
    clock.keep_reserve(2.0, cap_s=24.0)
    assert clock.reserve_s == 11.0
    clock.keep_reserve(80.0, cap_s=24.0)
    assert clock.reserve_s == 24.0


def test_a_resumed_run_says_it_trains_at_the_precision_its_first_attempt_chose(
    tmp_path: Path,
) -> None:
    """Attempt 2 timed bf16 fastest but trained fp32, kept from attempt 1 with its plan: its
    reports and its config say which precision trains, and that an earlier attempt chose it."""
    from core_model.training.parallel import Calibration

    cfg = quick(epochs=None, time_budget_s=600.0, precision="auto")
    calls = {"n": 0}

    def cancel_in_epoch_2() -> bool:
        calls["n"] += 1
        return calls["n"] > 15

    first_speed = Calibration(3_000.0, 5, 2.0, 1, "fp32", 1)
    first: list[tr.ProgressEvent] = []
    run = tmp_path / "run"
    train(toy_pairs(), None, cfg, out_dir=run, callback=first.append, speed=first_speed,
          should_cancel=cancel_in_epoch_2)  # fmt: skip
    assert first[-1].pace["precision"] == "fp32" and not first[-1].pace["calibration_kept"]
    calls["n"] = 0  # the second attempt is cancelled too, a few steps after its checkpoint
    second: list[tr.ProgressEvent] = []
    faster_in_bf16 = Calibration(6_000.0, 5, 2.0, 1, "bf16", 1)
    res = train(toy_pairs(), None, cfg, out_dir=run, resume_from=run, callback=second.append,
                speed=faster_in_bf16, should_cancel=cancel_in_epoch_2)  # fmt: skip
    assert second[0].step == 10  # it resumed from the first attempt's checkpoint
    assert second[-1].pace["precision"] == "fp32" and second[-1].pace["calibration_kept"]
    assert res.metrics["precision"] == "fp32" and res.metrics["pace"]["calibration_kept"]


def test_the_optimizer_is_adam_in_its_fused_kernel_with_the_same_steps() -> None:
    """The fused kernel is a speed choice only: its updates are the per-operation Adam's."""
    torch.manual_seed(0)
    cfg = TrainConfig(weight_decay=0.0)
    fused_model, plain_model = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    plain_model.load_state_dict(fused_model.state_dict())
    fused = make_optimizer(cfg, fused_model)
    plain = torch.optim.Adam(plain_model.parameters(), betas=cfg.adam_betas, eps=cfg.adam_eps)
    assert fused.defaults["fused"] is True
    for _ in range(5):
        x = torch.randn(16, 8)
        for model, optimizer in ((fused_model, fused), (plain_model, plain)):
            for group in optimizer.param_groups:
                group["lr"] = 1e-2
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
    for a, b in zip(fused_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_checkpoint_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    pairs = toy_pairs()
    cfg = quick(epochs=3, lr_schedule="constant", warmup_steps=5)
    full = train(pairs, None, cfg)
    calls = {"n": 0}

    def cancel_in_epoch_2() -> bool:
        calls["n"] += 1
        return calls["n"] > 15  # epoch 1 = 10 steps, then cancel in epoch 2

    first = train(pairs, None, cfg, out_dir=tmp_path / "run", should_cancel=cancel_in_epoch_2)
    assert first.cancelled and find_checkpoint(tmp_path / "run") is not None
    # the clock of a time budget continues across attempts: the checkpoint keeps the time spent
    assert read_state(find_checkpoint(tmp_path / "run"))["elapsed_s"] > 0
    # As if killed between save_checkpoint's two renames: only checkpoint.old is left.
    os.replace(tmp_path / "run" / "checkpoint", tmp_path / "run" / "checkpoint.old")
    assert find_checkpoint(tmp_path / "run") == tmp_path / "run" / "checkpoint.old"
    resumed = train(pairs, None, cfg, out_dir=tmp_path / "run", resume_from=tmp_path / "run")
    assert resumed.metrics["steps"] == full.metrics["steps"] == 30
    assert resumed.metrics["tokens_trained"] == full.metrics["tokens_trained"]  # kept on resume
    assert same_weights(weights(resumed.model), weights(full.model))
    assert (tmp_path / "run" / "model.safetensors").exists()
    assert not (tmp_path / "run" / "checkpoint").exists()  # removed after success


def test_out_dir_is_a_loadable_model_and_fine_tuning_reuses_tokenizers(tmp_path: Path) -> None:
    pairs = toy_pairs()
    first = train(pairs, None, quick(), out_dir=tmp_path / "v1", extra_config={"corpus": "toy"})
    loaded = load_model(tmp_path / "v1")
    assert loaded.config["corpus"] == "toy" and loaded.config["training"]["preset"] == "tiny"
    assert loaded.config["metrics"]["steps"] == 20
    more = [("我喜欢喝茶。", "I like drinking tea.")]
    tuned = train(pairs + more, None, quick(preset="small"), init_from=tmp_path / "v1")
    assert tuned.model.cfg == first.model.cfg  # the artifact's model config wins over the preset
    assert tuned.tokenizers.src.encode(pairs[0][0]) == first.tokenizers.src.encode(pairs[0][0])
    assert not same_weights(weights(tuned.model), weights(loaded.model))


def test_early_stopping_and_average(monkeypatch: pytest.MonkeyPatch) -> None:
    # validation that never improves: stop after `patience` epochs past the first (8 epochs:
    # the third is past the first quarter of the budget, before which nothing stops)
    monkeypatch.setattr(tr.Trainer, "_validate", lambda self: {"valid_loss": 1.0, "bleu": 5.0})
    pairs = toy_pairs()
    cfg = quick(epochs=8, patience=2, average_last=3, min_valid_pairs=1, warmup_steps=5)
    res = train(pairs, pairs[:2], cfg)
    assert res.metrics["stop_reason"] == "early_stopping"
    assert res.metrics["epochs"] == 3 and res.metrics["best_epoch"] == 1
    assert res.metrics["selected"] in ("last", "best", "average_last_3")
    # epochs that end inside the warm-up (10 steps each, 25 warm-up steps) never count
    cfg = quick(epochs=8, patience=2, min_valid_pairs=1, warmup_steps=25)
    res = train(pairs, pairs[:2], cfg)
    assert res.metrics["stop_reason"] == "early_stopping" and res.metrics["epochs"] == 4


def test_tiny_validation_set_neither_stops_nor_selects() -> None:
    # 2 validation pairs are noise: the run must still go on until the training pairs are learnt
    pairs = toy_pairs()
    res = train(pairs, pairs[:2], TrainConfig(preset="tiny", device="cpu"))
    assert res.metrics["stop_reason"] == "memorised" and res.metrics["selected"] == "last"
    assert all("bleu" in h and "train_exact_match" in h for h in res.history)


def test_average_state_dicts() -> None:
    a = {"w": torch.tensor([1.0, 3.0]), "n": torch.tensor([1])}
    b = {"w": torch.tensor([3.0, 5.0]), "n": torch.tensor([2])}
    avg = average_state_dicts([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0])) and torch.equal(avg["n"], b["n"])


def test_average_without_validation_is_selected() -> None:
    res = train(toy_pairs(), None, quick(epochs=3, average_last=2))
    assert res.metrics["selected"] == "average_last_2"


def test_bf16_autocast_and_whitespace_tokenizer_run() -> None:
    pairs = [("我 有 一个 苹果", "I have an apple"), ("我 有 一本 书", "I have a book")]
    res = train(pairs, None, quick(precision="bf16", tokenizer="whitespace", epochs=1))
    assert res.metrics["precision"] == "bf16" and res.tokenizers.kind == "whitespace"
    assert math.isfinite(res.metrics["train_loss"])


# -- errors -------------------------------------------------------------------------------------


def test_empty_corpus_is_a_training_error() -> None:
    with pytest.raises(TrainingError, match="empty"):
        train([], None, quick())
    with pytest.raises(TrainingError, match="empty"):
        train([("", "x"), ("  ", "")], None, quick())


def test_cuda_requested_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TrainingError, match="CUDA"):
        train(toy_pairs(), None, quick(device="cuda"))


def test_bad_settings_are_training_errors() -> None:
    for bad in (dict(precision="fp8"), dict(preset="huge"), dict(lr_schedule="cosine")):
        with pytest.raises(TrainingError):
            train(toy_pairs(), None, quick(**bad))


def test_nan_loss_is_a_training_error() -> None:
    with pytest.raises(TrainingError, match="NaN"):
        train(toy_pairs(), None, quick(lr=float("nan")))


def test_out_of_memory_is_a_training_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Transformer, "forward", boom)
    with pytest.raises(TrainingError, match="Out of memory"):
        train(toy_pairs(), None, quick())


def test_resume_from_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="resume"):
        train(toy_pairs(), None, quick(), resume_from=tmp_path)


def test_final_weights_are_scored_when_validation_is_too_small_to_select_by() -> None:
    """Fewer validation pairs than `min_valid_pairs`: validation is reported but does not
    choose the weights. The weights the run ends with (an average, or the last weights of a
    run stopped mid-epoch) still get their scores: they were None, and the versions table
    showed "None" for a run whose live panel had shown a validation loss."""
    from core_model.training.selection import Selector

    model = torch.nn.Linear(2, 2)
    scores = {"valid_loss": 4.046, "bleu": 1.5, "chrf": 12.0}
    calls: list[int] = []

    def validate() -> dict:
        calls.append(1)
        return dict(scores)

    def state(recent: list, last_step: int) -> object:
        history = [{"epoch": 1, "step": last_step, "valid_loss": 9.0, "bleu": 0.0, "chrf": 1.0}]
        return type("State", (), {"recent_weights": recent, "history": history, "step": 50})()

    selector = Selector("bleu", use_validation=False, keep_last=2)
    averaged = state([{k: v.clone() for k, v in model.state_dict().items()}], last_step=40)
    assert selector.choose(averaged, model, validate) == ("average_last_2", scores)
    assert selector.choose(state([], last_step=40), model, validate) == ("last", scores)
    assert len(calls) == 2
    # Ended right after an epoch's validation: that epoch's scores, no second validation.
    last = selector.choose(state([], last_step=50), model, validate)
    assert last == ("last", {"valid_loss": 9.0, "bleu": 0.0, "chrf": 1.0}) and len(calls) == 2


def test_token_budget_ends_the_run_whatever_the_machine() -> None:
    """A token budget ends the run once that many source + target tokens were trained (one
    step's worth at most past it), progress follows the tokens, and the reason says so."""
    events: list[tr.ProgressEvent] = []
    cfg = quick(epochs=None, token_budget=3_000, progress_every_s=0.0)
    res = train(toy_pairs(), None, cfg, callback=events.append)
    m = res.metrics
    assert m["stop_reason"] == "token_budget"
    per_step = m["tokens_trained"] / m["steps"]
    assert 3_000 <= m["tokens_trained"] < 3_000 + 2 * per_step
    steps = [e for e in events if e.kind == "step" and e.step > 3]
    assert steps and all(e.limit == "tokens" for e in steps)
    assert abs(steps[-1].total_steps - m["steps"]) <= 2, "the expected end follows the tokens"


def test_a_minutes_budget_is_not_ended_by_planned_epochs() -> None:
    """Issue 19 item 4: 'Train for 2 minutes' on a small corpus ended at the automatic step
    count with 'finished its planned epochs'. A minutes budget plans no steps: the clock ends
    the run, and a run that asked for no epochs never says 'epochs'."""
    cfg = quick(epochs=None, time_budget_s=2.0, min_steps=10, adaptive_passes=1)
    res = train(toy_pairs(), None, cfg)
    assert res.metrics["stop_reason"] == "time_budget"
    assert res.metrics["train_time_s"] >= 2.0


def test_epochs_whose_ends_are_slow_grow_until_those_are_a_tenth_of_the_run() -> None:
    """A small corpus' epoch is a few steps and its validation (here 120 pairs translated by a
    model that has not learned to stop) takes longer than the steps: the epochs lengthen, at
    most twice each time, so validation stops eating the clock; epochs the user counted keep
    their length."""
    many_valid = toy_pairs() * 10
    cfg = quick(epochs=None, max_steps=40, min_epoch_steps=2, max_len=24, patience=None)
    res = train(toy_pairs(), many_valid, cfg)
    steps = [r["step"] for r in res.history]
    assert steps == [2, 6, 14, 30, 40], steps  # 2 steps, then 4, 8, 16: doubling each time
    assert res.metrics["pace"]["passes_per_epoch"] >= 16  # the metrics say how long they grew
    counted = train(toy_pairs(), many_valid, replace(cfg, epochs=3, max_steps=None))
    assert [r["step"] for r in counted.history] == [2, 4, 6]


def test_the_automatic_budget_says_it_finished_its_passes() -> None:
    """Without a budget from the user the planned passes end the run (in words that do not
    say 'epochs': ``stop_words.describe_stop``, tested with the workbench)."""
    cfg = quick(epochs=None, min_steps=10, adaptive_passes=1, min_valid_pairs=1, patience=None)
    res = train(toy_pairs(), toy_pairs()[:4], cfg)
    reason = tr.StopReason(res.metrics["stop_reason"])
    assert reason is tr.StopReason.AUTO_STEPS


def test_one_process_on_a_gpu_sets_an_indexed_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda.set_device refuses "cuda" without an index (seen on a lent H100): one
    process takes the current GPU, a rank its LOCAL_RANK. No GPU here: torch.cuda's answers
    are stood in for, and what set_device receives is checked."""
    from core_model.training import setup

    chosen: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    one = Ranks()  # not initialised: one process
    assert setup.choose_device("auto", one) == torch.device("cuda", 0)
    rank = Ranks()
    rank.on, rank.rank, rank.world = True, 1, 2  # as a second DDP rank sees itself
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert setup.choose_device("cuda", rank) == torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert all(d.index is not None for d in chosen)
