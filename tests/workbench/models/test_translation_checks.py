"""What the translation services tell a user besides the translation: how much of an input the
model cannot read, whether it is longer than anything it learned, what a score was measured
on, and why a correction was not saved."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core_model import ModelConfig, Transformer
from core_model.tokenizer import TokenizerPair, WhitespaceTokenizer
from core_model.translator import translate_ids
from db.tables import ModelVersion
from tests.helpers import module_home, trained_home, training
from workbench.corpus import corpora, demo, pairs
from workbench.errors import WorkbenchError
from workbench.evaluation import evaluation
from workbench.models import registry, translation
from workbench.models.translation import UNKNOWN_SHARE_WARNING, InputCheck
from workbench.storage import session_scope

# ----------------------------------------------------------------------------- core_model


def test_translator_reports_the_uncut_length_and_the_unknown_pieces() -> None:
    words = WhitespaceTokenizer.train(["a b c d", "e f g h"])
    tokenizers = TokenizerPair(words, words, shared=True)
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset(
        "tiny",
        src_vocab_size=words.vocab_size,
        tgt_vocab_size=words.vocab_size,
        shared_vocab=True,
        max_len=8,
    )
    model = Transformer(cfg).eval()
    known, unknown, long = translate_ids(
        model,
        tokenizers,
        ["a b c", "a zz b yy xx", "a b c d e f g h a b c"],
        max_len_a=0,
        max_len_b=4,
    )
    assert (known.src_tokens, known.unk_tokens) == (4, 0)  # pieces + the end marker
    assert (unknown.src_tokens, unknown.unk_tokens) == (6, 3)
    assert (long.src_tokens, long.unk_tokens) == (12, 0), "counted before the cut"
    assert len(long.src_pieces) == 8, "the model itself read only max_len positions"


# ------------------------------------------------------------------------- input checks


def test_input_check_warns_above_the_unknown_share_only() -> None:
    # 10 pieces (+ end marker): 2 unknown is exactly the threshold, 3 is above it.
    at_threshold = InputCheck(pieces=11, unknown=2, longest_trained=20, max_len=64)
    assert at_threshold.unknown_share == pytest.approx(UNKNOWN_SHARE_WARNING)
    assert at_threshold.warnings == []
    above = InputCheck(pieces=11, unknown=3, longest_trained=20, max_len=64)
    assert above.warnings == [
        "30% of its pieces are unknown to this model: expect a wrong translation"
    ]
    assert InputCheck(pieces=0, unknown=0, longest_trained=20, max_len=64).warnings == []


def test_input_check_tells_longer_than_trained_from_cut() -> None:
    longer = InputCheck(pieces=31, unknown=0, longest_trained=21, max_len=64)
    assert longer.warnings == [
        "it is longer than any sentence the model was trained on (30 pieces, at most 20 in "
        "training)"
    ]
    cut = InputCheck(pieces=2_001, unknown=0, longest_trained=21, max_len=64)
    assert cut.warnings == [
        "only its first 63 of 2,000 pieces were translated (the model reads no more)"
    ]


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One real tiny version trained on the demo corpus (the page tests' first one)."""
    built = trained_home(tmp_path_factory, "demo", training(preset="tiny", max_steps=60))
    with module_home(built.home):
        yield built.version_ids[0]


def test_checks_use_the_longest_trained_source_else_max_len(version: int) -> None:
    texts = ["我想喝一杯茶。", "ЖЩЮЯ ΔΘΛΞ", "我想喝一杯茶。" * 20]
    results = translation.translate(version, texts)
    checks = translation.check_inputs(version, results)
    longest = registry.get_version(version).metrics["longest_source_tokens"]
    assert [c.longest_trained for c in checks] == [longest] * 3
    assert [c.max_len for c in checks] == [1024] * 3
    assert checks[0].warnings == []
    assert checks[1].unknown_share > UNKNOWN_SHARE_WARNING
    assert "unknown to this model" in checks[1].warnings[0]
    assert checks[2].pieces > longest
    assert "longer than any sentence" in checks[2].warnings[0]

    # A version trained before the longest source was recorded: only the model's own limit.
    with session_scope() as s:
        row = s.get(ModelVersion, version)
        saved = dict(row.metrics)
        row.metrics = {k: v for k, v in saved.items() if k != "longest_source_tokens"}
    try:
        checks = translation.check_inputs(version, results)
        assert [c.longest_trained for c in checks] == [1024] * 3
        assert checks[2].warnings == []
    finally:
        with session_scope() as s:
            s.get(ModelVersion, version).metrics = saved


def test_an_output_with_unknown_pieces_is_flagged(version: int) -> None:
    """The source may be fully known while the model writes <unk> (⁇): trained on a target
    character its tokenizer lacks. The check counts those too, and warns."""
    (result,) = translation.translate(version, ["我想喝一杯茶。"])
    assert translation.check_inputs(version, [result])[0].warnings == []
    unk = registry.load_version(version).tokenizers.specials.unk
    wrote_unknown = dataclasses.replace(result, out_ids=[unk, *result.out_ids])
    (check,) = translation.check_inputs(version, [wrote_unknown])
    assert (check.unknown_share, check.unknown_output) == (0.0, 1)
    assert check.warnings == [
        "its translation has ⁇ in place of characters this model's tokenizer cannot write"
    ]


def test_training_scores_say_what_they_were_measured_on(version: int) -> None:
    basis = evaluation.training_scores_basis(version)
    assert basis == evaluation.ScoreBasis("validation", 3, 1)  # the demo's 3 valid pairs
    assert str(basis) == "validation · 3 pairs · greedy"
    assert str(evaluation.ScoreBasis("test", 1, 4)) == "test · 1 pair · beam 4"


# ---------------------------------------------------------------------------- corrections


def test_a_correction_that_exists_says_where(wb_home: Path) -> None:
    info = demo.ensure_demo_corpus()
    assert info is not None
    pair_id = int(pairs.search_pairs(info.id, "cup of tea").rows["id"].iloc[0])
    with pytest.raises(WorkbenchError) as exc:
        translation.save_correction(info.id, " 我想喝一杯茶。", "I would like a cup of  tea.")
    assert str(exc.value) == f"This pair is already in corpus “{demo.DEMO_NAME}” (pair {pair_id})."
    with pytest.raises(WorkbenchError, match="The corrected translation is empty"):
        translation.save_correction(info.id, "我想喝一杯茶。", "  ")
    with pytest.raises(WorkbenchError, match=r"^Not saved: target is longer than"):
        translation.save_correction(info.id, "我想喝一杯茶。", "tea " * 1000)
    assert corpora.get_corpus(info.id).pair_count == 48
    new_id = translation.save_correction(info.id, "我想喝一杯茶。", "I'd like a cup of tea.")
    assert corpora.get_corpus(info.id).pair_count == 49 and new_id > pair_id


def test_a_correction_goes_to_train_unless_its_sentence_is_in_another_split(
    wb_home: Path,
) -> None:
    """Train, so that the corpus memory uses it at once; a sentence already in valid or test
    pulls its correction there (no valid/test sentence in train)."""
    info = corpora.create_corpus("corrections", "zh", "en")
    # 40 pairs: past the tiny-corpus rule, so a pair without a split is hashed to one
    pairs.apply_edits(
        info.id,
        added=[{"source": f"句子{i}。", "target": f"Sentence {i}."} for i in range(40)],
    )
    rows = pairs.search_pairs(info.id, page_size=100).rows
    held_out = rows[rows["split"] != "train"].iloc[0]
    fresh = [f"新句子{i}。" for i in range(30)]
    ids = [translation.save_correction(info.id, s, f"New {i}.") for i, s in enumerate(fresh)]
    ids.append(translation.save_correction(info.id, held_out["source"], "Another one."))
    saved = pairs.search_pairs(info.id, page_size=200).rows.set_index("id").loc[ids, "split"]
    assert saved.iloc[:-1].eq("train").all()  # some of these hash to valid/test otherwise
    assert saved.iloc[-1] == held_out["split"]
