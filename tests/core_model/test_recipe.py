"""The automatic recipe (core_model.training.recipe): what a one-click run trains, by corpus
size, budget and device. Each case is a decision the tuning evidence in docs/TRAINING.md
rests on; a change of default has to change a line here."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.marian_checkpoint import opus_mt_config
from core_model.batching import Example, collate
from core_model.training import TrainConfig, train
from core_model.training import calibration as calibration_module
from core_model.training import precision as precision_module
from core_model.training import trainer as trainer_module
from core_model.training.calibration import Calibration, epoch_shapes, measure
from core_model.training.checkpoint import find_checkpoint, read_state
from core_model.training.recipe import (
    SHALLOW_LAYERS,
    SHALLOW_MAX_TOKENS,
    CorpusFacts,
    auto_minutes,
    memorises,
    replan,
    resolve,
)
from core_model.transformer import ModelConfig, Transformer

# Rough sizes of the benchmark corpora (source + target tokens, as CorpusFacts estimates them).
MULTI30K = CorpusFacts(train_pairs=29_000, valid_pairs=1_014, tokens=754_000, shared_alphabet=True)
TATOEBA = CorpusFacts(train_pairs=24_427, valid_pairs=1_362, tokens=366_000, shared_alphabet=False)
SLICE_2K = CorpusFacts(train_pairs=2_000, valid_pairs=1_014, tokens=52_000, shared_alphabet=True)
SIXTEEN = CorpusFacts(train_pairs=16, valid_pairs=0, tokens=200, shared_alphabet=False)


def auto(facts: CorpusFacts, minutes: float | None = None, gpu: bool = False, **kw) -> TrainConfig:
    cfg = TrainConfig(time_budget_s=None if minutes is None else 60 * minutes, **kw)
    return resolve(cfg, facts, gpu=gpu).cfg


def tokens(facts: CorpusFacts, n: float, **kw) -> TrainConfig:
    return resolve(TrainConfig(token_budget=int(n), **kw), facts, gpu=False).cfg


def speed_of(tokens_per_s: float, calls: list[TrainConfig] | None = None):
    """A machine that trains every candidate at `tokens_per_s` (records what it was asked)."""

    def speed(candidate: TrainConfig) -> Calibration:
        if calls is not None:
            calls.append(candidate)
        return Calibration(tokens_per_s, 5, 2.0, 2, "fp32", 6_000_000)

    return speed


@pytest.mark.parametrize("facts", [MULTI30K, TATOEBA])
def test_a_short_budget_buys_updates_small_batches_and_a_short_warmup(facts: CorpusFacts) -> None:
    cfg = tokens(facts, 1.1e6)  # what 10 minutes give on a CPU without bf16
    assert (cfg.preset, cfg.lr_schedule) == ("small", "linear")
    # 1,250 would buy only ~500 updates, 625 ~1,000 (valid 18.2), 400 ~1,570 (valid 20.4);
    # 250 ~2,500 (valid 21.8; Tatoeba 13.5 against 11.8 with 400)
    assert cfg.max_tokens_per_batch == 250
    # small batches want a gentler peak (at 625: 1e-3 -2.8, 2e-3 -10 valid; at 250: 7e-4 -0.6)
    assert cfg.lr == 5e-4
    assert cfg.warmup_steps == 200  # a tenth of the updates (and 200 was a third of 550)
    assert cfg.average_last == 5
    assert cfg.dropout == 0.0  # a few passes over tens of thousands of pairs cannot overfit


def test_warmup_and_batch_grow_with_the_budget() -> None:
    half, two, big = (tokens(MULTI30K, n) for n in (0.5e6, 2e6, 4.4e6))
    assert (half.max_tokens_per_batch, half.warmup_steps) == (250, 110)
    # 400 from 1.75M to 2.73M tokens (2,500 updates of 625): at 1.8M 400 validated +1.6 / +3.5
    # over 625 (two seeds), at 2.7M +1.4
    assert (two.max_tokens_per_batch, two.warmup_steps) == (400, 200)
    assert tokens(MULTI30K, 2.7e6).max_tokens_per_batch == 400
    assert tokens(MULTI30K, 2.8e6).max_tokens_per_batch == 625
    # 625 at 4.4M too (~4,000 updates: 36.7 valid BLEU against 35.4 with 1,250), 8k joint
    assert (big.max_tokens_per_batch, big.warmup_steps, big.vocab_size) == (625, 200, 8_000)
    assert (half.lr, two.lr, big.lr) == (5e-4, 7e-4, 7e-4)


def test_label_smoothing_grows_with_the_passes_the_budget_makes() -> None:
    """The paper's 0.1 for a few passes; 0.2 from SMOOTHER_FROM_PASSES while dropout is off
    (the idle AMX click's 5.5 passes over Multi30k: 38.44 / 37.84 valid against 0.1's 37.27 /
    37.15); the paper's pair, dropout 0.1 and smoothing 0.1, beyond NO_DROPOUT_MAX_PASSES
    (Tatoeba's 10-minute click at 10-12 passes without dropout: -0.3), or beyond
    SMALL_CORPUS_NO_DROPOUT_MAX_PASSES for a small corpus (2,000 pairs' 5-minute click at 15-21
    passes without dropout: +0.95 over four seeds; at 35 passes the paper's pair +0.26); a
    user's value stays; memorising keeps 0.1."""
    assert tokens(MULTI30K, 1.1e6).label_smoothing == 0.1  # 1.5 passes
    assert tokens(MULTI30K, 4.2e6).label_smoothing == 0.2  # 5.6 passes

    def regularised(facts: CorpusFacts, n: float) -> tuple[float | None, float | None]:
        cfg = tokens(facts, n)
        return cfg.dropout, cfg.label_smoothing

    assert regularised(MULTI30K, 7e6) == (0.1, 0.1)  # 9.3 passes
    assert regularised(TATOEBA, 3.5e6) == (0.1, 0.1)  # 9.6 passes
    assert regularised(SLICE_2K, 0.9e6) == (0.0, 0.2)  # 17 passes over 2,000 pairs
    assert regularised(SLICE_2K, 1.4e6) == (0.1, 0.1)  # 27 passes
    assert tokens(MULTI30K, 4.2e6, label_smoothing=0.05).label_smoothing == 0.05
    assert auto(SIXTEEN).label_smoothing == 0.1


def test_a_replan_follows_the_tokens_but_keeps_what_the_user_or_the_schedule_fixed() -> None:
    """A minutes run that will train 1.1M tokens instead of the 4M planned: the automatic
    batch and peak rate shrink with the tokens; a batch or rate the user set stays, and the
    paper's (noam) curve keeps the warm-up its rate is made of."""

    def replanned(**kw) -> TrainConfig:
        asked = TrainConfig(time_budget_s=600, **kw)
        plan = resolve(asked, MULTI30K, gpu=False, speed=speed_of(4e6 / 540))
        return replan(plan, asked, MULTI30K, False, False, 1.1e6).cfg

    automatic = replanned()
    assert (automatic.max_tokens_per_batch, automatic.lr) == (250, 5e-4)
    assert automatic.label_smoothing == 0.1  # planned for 5.3 passes (0.2), trains 1.5
    users = replanned(max_tokens_per_batch=625, lr=1e-3)
    assert (users.max_tokens_per_batch, users.lr) == (625, 1e-3)
    asked_noam = TrainConfig(time_budget_s=600, lr_schedule="noam")
    noam_plan = resolve(asked_noam, MULTI30K, gpu=False, speed=speed_of(4e6 / 540))
    noam = replan(noam_plan, asked_noam, MULTI30K, False, False, 1.1e6).cfg
    assert (noam.lr, noam.warmup_steps) == (noam_plan.cfg.lr, noam_plan.cfg.warmup_steps)
    assert noam.max_tokens_per_batch == 250


def test_vocabulary_is_joint_for_a_shared_alphabet_and_per_side_otherwise() -> None:
    de_en, zh_en = tokens(MULTI30K, 4.4e6), tokens(TATOEBA, 4.4e6)
    assert (de_en.joint_vocab, de_en.vocab_size) == (True, 8_000)
    assert (zh_en.joint_vocab, zh_en.vocab_size) == (False, 4_000)
    # a short budget halves either (Tatoeba at 1.1M tokens: 2k per side 11.8 valid BLEU, 4k 8.4)
    assert tokens(MULTI30K, 1.1e6).vocab_size == 4_000
    assert tokens(TATOEBA, 1.1e6).vocab_size == 2_000
    assert tokens(SLICE_2K, 4.4e6).vocab_size == 4_000  # halved below 5k pairs
    # where the 10-minute click's budget falls on a fast CPU: from 3.0M tokens 8k joint
    # (a draw at 3.05M, valid 37.85 at 3.68M against 4k's 36.47-37.15), below that 4k
    assert tokens(MULTI30K, 3.1e6).vocab_size == 8_000
    assert tokens(MULTI30K, 2.9e6).vocab_size == 4_000
    # per side (zh-en) from 2.5M tokens 4k (valid 24.07 at 3.20M against 2k's 20.41 at 3.07M)
    assert tokens(TATOEBA, 2.6e6).vocab_size == 4_000
    assert tokens(TATOEBA, 2.4e6).vocab_size == 2_000


def test_minutes_are_planned_for_the_tokens_this_machine_trains() -> None:
    """The same 10 minutes on a slow CPU (fp32, ~1,850 tokens/s) and a fast one plan for the
    tokens each will see; a slow machine's plan is the one for its projected token budget."""
    calls: list[TrainConfig] = []
    slow = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speed_of(1_850, calls))
    assert slow.budget_tokens == pytest.approx(600 * 1_850 * 0.9)
    assert slow.calibration is not None and slow.metrics()["budget_tokens_projected"]
    assert calls and calls[-1].max_tokens_per_batch == slow.cfg.max_tokens_per_batch
    same = tokens(MULTI30K, slow.budget_tokens)
    assert (slow.cfg.max_tokens_per_batch, slow.cfg.warmup_steps, slow.cfg.vocab_size) == (
        same.max_tokens_per_batch,
        same.warmup_steps,
        same.vocab_size,
    )
    assert slow.cfg.time_budget_s == 600  # the clock still ends the run
    fast = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speed_of(10_000))
    assert (fast.cfg.max_tokens_per_batch, fast.cfg.warmup_steps) == (625, 200)
    assert (slow.cfg.warmup_steps, slow.cfg.vocab_size) == (200, 4_000)
    assert fast.cfg.vocab_size == 8_000


def test_a_budget_pays_each_new_shapes_first_step_once() -> None:
    """The steady speed (second visits) buys the minutes less the first step of each of the
    run's shapes: 80 shapes at 0.5 s each leave 560 of 600 s."""
    cal = Calibration(
        1_000.0, 10, 2.0, 2, "bf16", 6_000_000, shapes=5, new_shape_s=0.5, run_shapes=80
    )
    assert cal.tokens_in(600) == pytest.approx(560_000)
    plan = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: cal)
    assert plan.budget_tokens == pytest.approx(560_000 * 0.9)


def test_a_candidate_is_measured_again_only_when_the_budget_changes_its_cost() -> None:
    calls: list[TrainConfig] = []
    # the first guess (5,000 tokens/s: 3.0M tokens -> 625, 8k) holds at 6,000: one timing
    resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speed_of(6_000, calls))
    assert [(c.max_tokens_per_batch, c.vocab_size) for c in calls] == [(625, 8_000)]
    calls.clear()  # a slow machine: the smaller batch and vocabulary are timed too
    resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speed_of(2_000, calls))
    assert [(c.max_tokens_per_batch, c.vocab_size) for c in calls] == [(625, 8_000), (250, 4_000)]


def speeds(by_cost: dict[tuple[int, int], list[float]], calls: list[TrainConfig]):
    """A machine whose speed depends on the candidate's (batch, vocabulary): each timing of a
    candidate reads the next of its speeds (a host that slows for a moment). Each reading
    says the work a token of the timed model meets, as `calibration.measure` does."""

    def speed(candidate: TrainConfig) -> Calibration:
        calls.append(candidate)
        readings = by_cost[(candidate.max_tokens_per_batch, candidate.vocab_size)]
        work = candidate.candidate_model().token_work
        return Calibration(readings.pop(0), 5, 2.0, 2, "bf16", 6_000_000, token_work=work)

    return speed


def test_the_run_trains_the_candidate_it_was_timed_on() -> None:
    """A fast CPU's 10 minutes: the typical speed's guess (625-token batches, 8k pieces) times
    6,600 tokens/s (3.6M tokens): one timing, and the plan is its (the layout's choice and the
    trainer's, which is given the layout's measurement, agree)."""
    calls: list[TrainConfig] = []
    plan = resolve(
        TrainConfig(time_budget_s=600),
        MULTI30K,
        False,
        speed=speeds({(625, 8_000): [6_600.0]}, calls),
    )
    assert [(c.max_tokens_per_batch, c.vocab_size) for c in calls] == [(625, 8_000)]
    assert (plan.cfg.max_tokens_per_batch, plan.cfg.vocab_size) == (625, 8_000)
    assert plan.calibration is not None and plan.calibration.tokens_per_s == 6_600.0
    given = resolve(
        TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: plan.calibration
    )
    assert (given.cfg, given.budget_tokens) == (plan.cfg, plan.budget_tokens)


def test_a_slow_reading_of_the_deciding_candidate_gets_a_second_look() -> None:
    """8k pieces timed while the host slowed (5,000 tokens/s: 2.7M tokens, under 3.0M) point to
    4k, which times 6,700 (3.6M): that points back to 8k, which is timed again — a click whose
    one 2-second 8k timing read 18 % slow trained 4k pieces (38.27 where the 8k clicks scored
    39.13 and 39.36). The second reading decides, and the plan is on it."""
    calls: list[TrainConfig] = []
    by_cost = {(625, 8_000): [5_000.0, 6_600.0], (625, 4_000): [6_700.0]}
    plan = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speeds(by_cost, calls))
    assert [c.vocab_size for c in calls] == [8_000, 4_000, 8_000]
    assert (plan.cfg.max_tokens_per_batch, plan.cfg.vocab_size) == (625, 8_000)
    assert plan.budget_tokens == pytest.approx(600 * 6_600 * 0.9)
    # read slow twice: no fourth timing; 4k trains, planned on 8k's speed scaled to the 4k
    # model's work a token — as the trainer plans, given that one measurement
    calls.clear()
    by_cost = {(625, 8_000): [5_000.0, 5_500.0], (625, 4_000): [6_700.0]}
    plan = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speeds(by_cost, calls))
    cheaper = calls[0].candidate_model().token_work / plan.cfg.candidate_model().token_work
    assert len(calls) == 3 and plan.budget_tokens == pytest.approx(600 * 5_500 * 0.9 * cheaper)
    assert (plan.cfg.max_tokens_per_batch, plan.cfg.vocab_size) == (625, 4_000)
    given = resolve(
        TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: plan.calibration
    )
    assert (given.cfg, given.budget_tokens) == (plan.cfg, plan.budget_tokens)


def test_a_cheaper_vocabulary_is_planned_at_its_own_models_speed() -> None:
    """A slow laptop's 10 minutes (a 2.45 GHz AVX2-only EPYC): 8k pieces timed at 2,900
    tokens/s project 1.57M tokens, under 3.0M, so 4k pieces — whose smaller output layer
    trains a token 1.157x as fast (measured 1.16-1.34x). At 1.57M the batch would be 250
    tokens (under 2,500 updates of 400), at 4k's own 1.81M it is 400: the 4k model with
    400-token batches is timed next, and the plan is on its reading. (Planned on 8k's speed,
    such a click trained 250-token batches at 2,440 tokens/s, 1.44M tokens; another, with
    625, at 3,538: 2.11M.)"""
    small = {
        v: ModelConfig.from_preset("small", src_vocab_size=v, tgt_vocab_size=v)
        for v in (4_000, 8_000)
    }
    assert small[8_000].token_work / small[4_000].token_work == pytest.approx(1.157, 1e-3)
    calls: list[TrainConfig] = []
    by_cost = {(625, 8_000): [2_900.0], (400, 4_000): [3_300.0]}
    plan = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=speeds(by_cost, calls))
    assert [(c.max_tokens_per_batch, c.vocab_size) for c in calls] == [(625, 8_000), (400, 4_000)]
    assert (plan.cfg.max_tokens_per_batch, plan.cfg.vocab_size) == (400, 4_000)
    assert plan.budget_tokens == pytest.approx(600 * 3_300 * 0.9)
    given = resolve(
        TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: plan.calibration
    )
    assert (given.cfg, given.budget_tokens) == (plan.cfg, plan.budget_tokens)


def work_bound(work_per_s: float, calls: list[TrainConfig]):
    """A machine whose speed is its work a second over the work a token of the timed model
    meets (`ModelConfig.token_work`): fewer layers or pieces train more tokens a second."""

    def speed(candidate: TrainConfig) -> Calibration:
        calls.append(candidate)
        work = candidate.candidate_model().token_work
        return Calibration(work_per_s / work, 5, 2.0, 2, "bf16", 6_000_000, token_work=work)

    return speed


def layers(cfg: TrainConfig) -> tuple[int, int]:
    model = cfg.candidate_model()
    return model.n_encoder_layers, model.n_decoder_layers


def test_a_short_cpu_clock_trains_fewer_layers_for_more_tokens() -> None:
    """A CPU whose 10 minutes buy the `small` preset under SHALLOW_MAX_TOKENS tokens trains it
    with SHALLOW_LAYERS a side: in the same minutes 2 + 2 layers trained 1.34x the tokens and
    validated 35.39 and 36.18 against 3 + 3's 33.85 and 33.39 (docs/TRAINING.md). The choice
    follows the budget's work, so it is the same whichever candidate was timed, and the plan
    is on the timing of the network that trains."""
    basis = ModelConfig.from_preset("small", src_vocab_size=8_000, tgt_vocab_size=8_000)
    slow = 4_500 * basis.token_work  # a 3 + 3 model at 8k pieces: 4,500 tokens/s, 2.4M tokens
    calls: list[TrainConfig] = []
    plan = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=work_bound(slow, calls))
    assert layers(plan.cfg) == (SHALLOW_LAYERS, SHALLOW_LAYERS) and plan.cfg.preset == "small"
    assert layers(calls[-1]) == layers(plan.cfg) and plan.calibration is not None
    assert plan.budget_tokens == pytest.approx(0.9 * plan.calibration.tokens_in(600))
    assert plan.budget_tokens > 1.3 * 600 * 4_500 * 0.9  # a third more tokens than 3 + 3's
    given = resolve(
        TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: plan.calibration
    )
    assert (given.cfg, given.budget_tokens) == (plan.cfg, plan.budget_tokens)
    # planned on a reading of the 3 + 3 model instead (its 2.4M tokens): the same layers
    deep = Calibration(4_500.0, 5, 2.0, 2, "bf16", 6_000_000, token_work=basis.token_work)
    on_deep = resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=lambda _c: deep)
    assert layers(on_deep.cfg) == layers(plan.cfg)
    # a fast CPU (the budget just over the threshold), the same tokens as a budget, a preset or
    # layers the user chose, a GPU, a continued model: the preset's layers
    fast = 1.01 * SHALLOW_MAX_TOKENS / 600 / 0.9 * basis.token_work
    untouched = [
        resolve(TrainConfig(time_budget_s=600), MULTI30K, False, speed=work_bound(fast, [])).cfg,
        tokens(MULTI30K, plan.budget_tokens),
        auto(MULTI30K, minutes=10, preset="small"),
        auto(MULTI30K, minutes=10, gpu=True),
        resolve(TrainConfig(time_budget_s=600), MULTI30K, False, fine_tune=True).cfg,
    ]
    assert [layers(cfg) for cfg in untouched] == [(3, 3)] * len(untouched)
    mine = {"n_encoder_layers": 4, "n_decoder_layers": 1}
    assert auto(MULTI30K, minutes=10, model_overrides=mine).model_overrides == mine
    assert layers(auto(MULTI30K, minutes=10)) == (SHALLOW_LAYERS, SHALLOW_LAYERS)


def test_a_candidate_whose_budget_turns_dropout_on_is_timed_with_it() -> None:
    """A 2,000-pair corpus' 5 minutes: the typical speed's budget (1.5M tokens, 29 passes) turns
    dropout on, which costs a CPU step ~20 %; a measured budget that turns it on or off is
    timed with it or without (a run planned on the speed without dropout trained at 0.85× its
    calibration)."""
    calls: list[TrainConfig] = []

    def speed(candidate: TrainConfig) -> Calibration:
        calls.append(candidate)
        return Calibration(3_000.0 * (0.8 if candidate.dropout else 1.0), 5, 2.0, 1, "fp32", 6e6)

    # the guess trains with dropout, at 2,400 tokens/s: ~14 passes, without — timed so:
    # 3,000 tokens/s, ~17 passes, still without
    plan = resolve(TrainConfig(time_budget_s=300), SLICE_2K, False, speed=speed)
    assert calls[0].dropout and len(calls) > 1 and not any(c.dropout for c in calls[1:])
    assert plan.cfg.dropout == 0.0 and plan.calibration is not None
    assert plan.calibration.tokens_per_s == 3_000.0  # planned on the speed it trains at
    assert plan.cfg.label_smoothing == 0.2 and plan.passes is not None and plan.passes < 25


def test_token_budgets_and_epochs_are_not_measured() -> None:
    calls: list[TrainConfig] = []
    plan = resolve(TrainConfig(token_budget=10**6), MULTI30K, False, speed=speed_of(1, calls))
    assert plan.budget_tokens == 10**6 and plan.calibration is None and not calls
    resolve(TrainConfig(epochs=2), MULTI30K, False, speed=speed_of(1, calls))
    assert not calls


def test_calibration_times_real_training_steps_at_the_runs_precision_and_threads() -> None:
    mcfg = ModelConfig.from_preset("tiny", src_vocab_size=300, tgt_vocab_size=300)
    cal = measure(mcfg, 400, [(10, 10)] * 64, torch.device("cpu"), "fp32", 1, seconds=0.2)
    assert cal.tokens_per_s > 0 and cal.steps >= 2 and cal.seconds > 0
    assert (cal.precision, cal.threads) == ("fp32", 1)
    assert cal.parameters == sum(p.numel() for p in Transformer(mcfg).parameters())


def test_calibration_batches_the_corpus_length_mix_as_the_run_does() -> None:
    """The timed steps are the run's: length-bucketed batches of the corpus' own mix, a new
    shape nearly every step (what CPU bf16 prepares kernels for), not one shape again and
    again; their lengths are rounded as the run rounds them (`shape_multiple`)."""
    pairs = [(" ".join(["wort"] * n), " ".join(["word"] * (n + 2))) for n in range(3, 43)] * 5
    facts = CorpusFacts.of(pairs, None)
    assert sorted(set(facts.lengths)) == sorted(
        {(round(1.3 * n), round(1.3 * (n + 2))) for n in range(3, 43)}
    )
    mcfg = ModelConfig.from_preset("tiny", src_vocab_size=300, tgt_vocab_size=300)
    cpu = torch.device("cpu")
    mixed = measure(mcfg, 250, facts.length_mix(), cpu, "fp32", 1, 600.0, max_steps=6)
    one = measure(mcfg, 250, [(9, 9)] * 50, cpu, "fp32", 1, 600.0, max_steps=6)  # 2 equal batches
    assert mixed.steps == 6 and mixed.shapes >= 3  # 3 batches, each visited twice
    assert mixed.run_shapes >= mixed.shapes and mixed.new_shape_s >= 0.0
    assert (one.shapes, one.run_shapes) == (1, 1)
    assert CorpusFacts(10, 0, 100, True).length_mix()[0] == (6, 6)  # no sample: side_tokens


def test_batch_lengths_round_up_to_few_shapes_without_counting_the_padding() -> None:
    examples = [Example((5, 6, 7), (8, 9)), Example((5,) * 9, (8,) * 10)]
    plain, padded = collate(examples, [0, 1]), collate(examples, [0, 1], multiple=8)
    assert plain.src.shape == (2, 9) and plain.tgt_in.shape == (2, 11)
    assert padded.src.shape == (2, 16) and padded.tgt_in.shape == (2, 16)
    assert (padded.n_tokens, padded.n_src_tokens) == (plain.n_tokens, plain.n_src_tokens)
    assert torch.equal(padded.src[:, :9], plain.src) and (padded.src[:, 9:] == 0).all()


@pytest.mark.parametrize("faster", ["bf16", "fp32"])
def test_auto_trains_the_precision_measured_faster_on_the_runs_batches(
    faster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU with native bf16 a minutes run times both precisions on its own batches and
    trains, and plans by, the faster one: bf16 only where it beats fp32 here."""
    monkeypatch.setattr(precision_module, "cpu_supports_bf16", lambda: True)
    timed: list[str] = []

    def fake_measure(mcfg, batch_tokens, lengths, device, precision, *args, **kwargs):
        timed.append(precision)
        tokens_per_s = 3_000.0 if precision == faster else 2_000.0
        return Calibration(tokens_per_s, 9, 2.0, 1, precision, 5_000_000, shapes=9)

    monkeypatch.setattr(calibration_module, "measure", fake_measure)
    pairs = [(f"ein haus nummer {i}", f"a house number {i}") for i in range(300)]
    cfg = TrainConfig(time_budget_s=2, tokenizer="whitespace", preset="small", num_threads=1)
    m = train(pairs, pairs[:30], cfg).metrics
    assert sorted(set(timed)) == ["bf16", "fp32"]
    assert m["precision"] == faster and m["calibration"]["precision"] == faster
    assert m["pace"]["budget_tokens_at_start"] == int(2 * 3_000.0 * 0.9)


def test_the_shapes_a_run_meets_are_counted_at_its_size() -> None:
    """A run meets more shapes than the 2,000-pair sample its calibration batches (the
    sample's mix repeated to the run's size), and fewer when its lengths are padded."""
    rng = random.Random(0)
    mix = tuple((n, n + rng.randint(-3, 6)) for n in (rng.randint(3, 40) for _ in range(2_000)))
    sample = epoch_shapes(mix, len(mix), 625, 1)
    run = epoch_shapes(mix, 29_000, 625, 1)
    assert run > sample > 1
    assert epoch_shapes(mix, 29_000, 625, 8) < run


def test_a_minutes_run_records_its_calibration_and_projected_budget() -> None:
    pairs = [(f"ein haus nummer {i}", f"a house number {i}") for i in range(300)]
    cfg = TrainConfig(time_budget_s=3, tokenizer="whitespace", precision="fp32", num_threads=1)
    m = train(pairs, pairs[:30], cfg).metrics
    cal = m["calibration"]
    assert m["budget_tokens_projected"] and cal["precision"] == "fp32" and cal["threads"] == 1
    planned = m["pace"]["budget_tokens_at_start"]
    steady_s = max(1.5, 3 - cal["run_shapes"] * cal["new_shape_s"])  # the shapes' first steps
    assert planned == pytest.approx(steady_s * cal["tokens_per_s"] * 0.9, rel=0.01)
    by_tokens = train(pairs[:40], None, TrainConfig(token_budget=500, tokenizer="whitespace"))
    assert by_tokens.metrics["budget_tokens"] == 500
    assert by_tokens.metrics["calibration"] is None


def test_many_passes_over_a_small_corpus_get_the_papers_dropout() -> None:
    """A 2,000-pair corpus' 5 minutes on a laptop core (3,000 tokens/s: ~17 passes) train
    without dropout, smoothing 0.2; at the typical speed's 29 passes, the paper's pair."""
    laptop = resolve(TrainConfig(time_budget_s=300), SLICE_2K, False, speed=speed_of(3_000))
    assert (laptop.cfg.dropout, laptop.cfg.label_smoothing) == (0.0, 0.2)
    fast = auto(SLICE_2K, minutes=5)
    assert (fast.dropout, fast.label_smoothing) == (0.1, 0.1)


def test_automatic_budget_grows_with_the_corpus_within_bounds() -> None:
    assert auto_minutes(2_000, gpu=False) == 5.0
    assert auto_minutes(29_000, gpu=False) == 29.0
    assert auto_minutes(1_000_000, gpu=False) == 60.0
    assert auto(MULTI30K).time_budget_s == 29 * 60  # 'automatic' = that ceiling + patience


def test_a_few_pairs_without_validation_are_memorised_by_the_tiny_model() -> None:
    cfg = auto(SIXTEEN)
    assert memorises(TrainConfig(), SIXTEEN)
    assert (cfg.preset, cfg.lr_schedule, cfg.lr, cfg.dropout) == ("tiny", "constant", 4e-3, 0.0)
    assert cfg.time_budget_s is None and cfg.average_last == 0


def test_a_few_hundred_pairs_with_validation_train_the_small_model() -> None:
    """Beyond a demo corpus the tiny model learns less in the same click than `small` (250
    pairs: 3.0 valid BLEU against 8.2, docs/TRAINING.md "Tiny or small")."""
    demo = CorpusFacts(train_pairs=200, valid_pairs=0, tokens=5_000, shared_alphabet=True)
    assert auto(demo, minutes=5).preset == "tiny"
    few = CorpusFacts(train_pairs=250, valid_pairs=25, tokens=6_500, shared_alphabet=True)
    cfg = auto(few, minutes=5)
    layers = cfg.model_overrides["n_encoder_layers"]
    assert (cfg.preset, layers, cfg.vocab_size) == ("small", 2, 2_000)


def test_gpu_with_a_large_corpus_trains_the_papers_base_model() -> None:
    big = CorpusFacts(
        train_pairs=300_000, valid_pairs=3_000, tokens=8_000_000, shared_alphabet=True
    )
    cfg = auto(big, gpu=True)
    assert (cfg.preset, cfg.lr, cfg.max_tokens_per_batch) == ("base", 7e-4, 8192)
    assert cfg.vocab_size == 16_000


def test_what_the_user_chose_wins_and_continuing_shortens_the_warm_up() -> None:
    cfg = auto(MULTI30K, minutes=10, preset="tiny", dropout=0.3, vocab_size=1_000)
    assert (cfg.preset, cfg.dropout, cfg.vocab_size) == ("tiny", 0.3, 1_000)
    mine = tokens(MULTI30K, 1.1e6, max_tokens_per_batch=2_000, warmup_steps=300)
    assert (mine.max_tokens_per_batch, mine.warmup_steps) == (2_000, 300)
    tuned = resolve(TrainConfig(time_budget_s=600), MULTI30K, gpu=False, fine_tune=True).cfg
    # a warm restart at the budget's peak (a quarter of it: 25.7 instead of 30.7 valid BLEU)
    assert tuned.lr == 7e-4  # 10 min at the typical speed: the 625-token batches' peak
    assert (tuned.warmup_steps, auto(MULTI30K, minutes=10).warmup_steps) == (50, 200)


def test_a_resumed_minutes_run_plans_with_its_first_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume must choose exactly as the first attempt did (its batches, warm-up and
    vocabulary are in the checkpoint), so it reuses the stored measurement, never a new one."""
    pairs = [(f"ein haus nummer {i}", f"a house number {i}") for i in range(300)]
    cfg = TrainConfig(time_budget_s=60, tokenizer="whitespace", min_epoch_steps=5, precision="fp32")
    calls = {"n": 0}

    def cancel_in_epoch_2() -> bool:
        calls["n"] += 1
        return calls["n"] > 8

    first = train(pairs, pairs[:30], cfg, out_dir=tmp_path, should_cancel=cancel_in_epoch_2)
    assert first.cancelled
    stored = read_state(find_checkpoint(tmp_path))["calibration"]
    assert stored == first.metrics["calibration"] and stored["tokens_per_s"] > 0

    def no_new_timing(*args, **kwargs) -> Calibration:
        raise AssertionError("a resumed run must not measure again")

    monkeypatch.setattr(trainer_module, "measure_candidate", no_new_timing)
    calls["n"] = 0  # the same run (its minutes too) resumed, cancelled as soon as it trains
    resumed = train(pairs, pairs[:30], cfg, resume_from=tmp_path, should_cancel=cancel_in_epoch_2)
    assert resumed.metrics["calibration"] == stored
    assert resumed.train_config.max_tokens_per_batch == first.train_config.max_tokens_per_batch


OPUS_MT = opus_mt_config()
FIFTY = CorpusFacts(train_pairs=50, valid_pairs=0, tokens=1_000, shared_alphabet=False)


def test_a_pretrained_model_is_fine_tuned_gently_for_its_own_measured_speed() -> None:
    """The branch for large pretrained models: a low peak, a short warm-up, the checkpoint's
    dropout, never memorising, and a minutes budget measured on the model itself."""
    calls: list[TrainConfig] = []
    plan = resolve(
        TrainConfig(time_budget_s=600),
        TATOEBA,
        gpu=False,
        fine_tune=True,
        speed=speed_of(100, calls),
        pretrained=OPUS_MT,
    )
    cfg = plan.cfg
    assert (cfg.lr, cfg.lr_schedule, cfg.dropout) == (2e-5, "linear", 0.1)
    assert len(calls) == 1 and plan.budget_tokens == pytest.approx(600 * 100 * 0.9)
    assert cfg.max_tokens_per_batch == 250 and cfg.warmup_steps == 12  # a tenth of ~123 updates
    assert (cfg.min_epoch_steps, cfg.adaptive_passes) == (1, 10)  # an epoch is one pass
    # 50 pairs and no validation: the automatic budget is at most 10 passes, not "memorise"
    small = resolve(TrainConfig(), FIFTY, gpu=False, fine_tune=True, pretrained=OPUS_MT)
    assert small.budget_tokens == 10 * FIFTY.tokens and small.cfg.lr == 2e-5
    assert (small.cfg.lr_schedule, small.cfg.average_last) == ("linear", 5)  # (memorising:
    # a constant rate and no averaging)
    # what the user chose still wins
    mine = resolve(TrainConfig(epochs=2, lr=1e-4, dropout=0.3), FIFTY, False, True, None, OPUS_MT)
    assert (mine.cfg.lr, mine.cfg.dropout, mine.budget_tokens) == (1e-4, 0.3, 2 * FIFTY.tokens)


def test_a_token_of_an_opus_mt_model_costs_ten_times_the_small_models_arithmetic() -> None:
    from core_model.training.recipe import (
        CPU_TOKENS_PER_S,
        estimated_tokens_per_s,
        relative_cost,
    )

    assert relative_cost(OPUS_MT) == pytest.approx(9.8, abs=0.1)
    assert estimated_tokens_per_s(OPUS_MT, gpu=False) == pytest.approx(
        CPU_TOKENS_PER_S["small"] / 9.8, rel=0.02
    )


def test_the_docs_table_of_the_recipes_numbers_is_generated_from_its_constants() -> None:
    """docs/TRAINING.md's "What the recipe chooses" holds `recipe_table.table()`: the numbers
    are written once (the constants); a changed constant fails here until
    `python -m core_model.training.recipe_table` has rewritten the docs."""
    from core_model.training import recipe_table

    doc = recipe_table.DOC.read_text("utf-8")
    assert doc.count(recipe_table.BEGIN) == 1 and doc.count(recipe_table.END) == 1
    assert recipe_table.with_table(doc) == doc, "run python -m core_model.training.recipe_table"


def test_kernels_capped_below_avx512_count_as_a_cpu_without_bf16() -> None:
    """How a server emulates an AVX2 laptop (the guide's environment) makes `auto` train fp32
    there, as on the laptop: bf16 would run through slow emulation."""
    probe = "from core_model.training.precision import cpu_supports_bf16 as f; print(f())"
    for env in ({"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "False", env
