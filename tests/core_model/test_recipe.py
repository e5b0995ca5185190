"""The automatic recipe (core_model.training.recipe): what a one-click run trains, by corpus
size, budget and device. Each case is a decision the tuning evidence in docs/TRAINING.md
rests on; a change of default has to change a line here."""

from __future__ import annotations

import pytest

from core_model.training.config import TrainConfig
from core_model.training.recipe import CorpusFacts, auto_minutes, memorises, resolve

# Rough sizes of the benchmark corpora (source + target tokens, as CorpusFacts estimates them).
MULTI30K = CorpusFacts(train_pairs=29_000, valid_pairs=1_014, tokens=754_000, shared_alphabet=True)
TATOEBA = CorpusFacts(train_pairs=24_427, valid_pairs=1_362, tokens=366_000, shared_alphabet=False)
SLICE_2K = CorpusFacts(train_pairs=2_000, valid_pairs=1_014, tokens=52_000, shared_alphabet=True)
SIXTEEN = CorpusFacts(train_pairs=16, valid_pairs=0, tokens=200, shared_alphabet=False)


def auto(facts: CorpusFacts, minutes: float | None = None, gpu: bool = False, **kw) -> TrainConfig:
    cfg = TrainConfig(time_budget_s=None if minutes is None else 60 * minutes, **kw)
    return resolve(cfg, facts, gpu=gpu)


@pytest.mark.parametrize("facts", [MULTI30K, TATOEBA])
def test_ten_minutes_on_a_cpu_is_the_tuned_short_budget_recipe(facts: CorpusFacts) -> None:
    cfg = auto(facts, minutes=10)
    assert (cfg.preset, cfg.lr, cfg.warmup_steps, cfg.lr_schedule) == ("small", 1e-3, 200, "linear")
    assert cfg.max_tokens_per_batch == 1250 and cfg.average_last == 5
    assert cfg.dropout == 0.0  # a few passes over tens of thousands of pairs cannot overfit
    assert cfg.time_budget_s == 600


def test_vocabulary_is_joint_for_a_shared_alphabet_and_per_side_otherwise() -> None:
    de_en, zh_en = auto(MULTI30K, minutes=10), auto(TATOEBA, minutes=10)
    assert (de_en.joint_vocab, de_en.vocab_size) == (True, 8_000)
    assert (zh_en.joint_vocab, zh_en.vocab_size) == (False, 4_000)
    assert auto(SLICE_2K, minutes=5).vocab_size == 4_000  # halved below 5k pairs


def test_many_passes_over_a_small_corpus_get_the_papers_dropout() -> None:
    assert auto(SLICE_2K, minutes=5).dropout == 0.1


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


def test_gpu_with_a_large_corpus_trains_the_papers_base_model() -> None:
    big = CorpusFacts(
        train_pairs=300_000, valid_pairs=3_000, tokens=8_000_000, shared_alphabet=True
    )
    cfg = auto(big, gpu=True)
    assert (cfg.preset, cfg.lr, cfg.max_tokens_per_batch) == ("base", 7e-4, 8192)
    assert cfg.vocab_size == 16_000


def test_what_the_user_chose_wins_and_continuing_lowers_the_rate_and_warm_up() -> None:
    cfg = auto(MULTI30K, minutes=10, preset="tiny", dropout=0.3, vocab_size=1_000)
    assert (cfg.preset, cfg.dropout, cfg.vocab_size) == ("tiny", 0.3, 1_000)
    tuned = resolve(TrainConfig(time_budget_s=600), MULTI30K, gpu=False, fine_tune=True)
    assert tuned.lr == pytest.approx(1e-3 / 4)
    assert (tuned.warmup_steps, auto(MULTI30K, minutes=10).warmup_steps) == (50, 200)
