"""Tokenizers: tiny corpora train, any Unicode survives, ids are reserved, save/load round-trips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core_model.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SentencePieceTokenizer,
    TokenizerError,
    TokenizerPair,
    WhitespaceTokenizer,
    load_tokenizer,
    tokenizer_safe,
    train_tokenizers,
)
from tests.helpers import toy_pairs


@pytest.fixture(scope="module")
def zh_en() -> TokenizerPair:
    pairs = toy_pairs()
    return train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], vocab_size=8000)


def test_fixture_is_a_dozen_unsegmented_chinese_pairs() -> None:
    pairs = toy_pairs()
    assert 10 <= len(pairs) <= 20
    assert all(" " not in zh and en for zh, en in pairs)


def test_dozen_pairs_train_with_too_large_vocab(zh_en: TokenizerPair) -> None:
    # 8000 is far more than 12 sentences allow: the size must shrink instead of erroring
    assert not zh_en.shared  # zh/en share no alphabet -> one vocabulary per side
    assert 5 < zh_en.src.vocab_size < 8000
    assert 5 < zh_en.tgt.vocab_size < 8000


def test_reserved_ids_and_roundtrip(zh_en: TokenizerPair) -> None:
    for tok in (zh_en.src, zh_en.tgt):
        assert tok.ids_to_pieces([PAD_ID, BOS_ID, EOS_ID, UNK_ID]) == [
            "<pad>",
            "<s>",
            "</s>",
            "<unk>",
        ]
    for zh, en in toy_pairs():
        ids = zh_en.src.encode(zh)
        assert min(ids) > UNK_ID  # every character of the training data is known
        assert zh_en.src.decode(ids) == zh
        assert zh_en.tgt.decode(zh_en.tgt.encode(en)) == en
        assert len(zh_en.src.pieces(zh)) == len(ids)
    # BOS/EOS/PAD are not text
    ids = zh_en.tgt.encode("Please close the door.")
    assert zh_en.tgt.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == "Please close the door."


def test_unknown_characters_become_unk(zh_en: TokenizerPair) -> None:
    ids = zh_en.src.encode("我🍎龘")
    assert UNK_ID in ids


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "🙂🙃" * 5,
        "a\x00b\x07c\u200b\ufeff",
        "\ud800 lone surrogate",
        "我" * 10_000,
        "x" * 10_000,
        "\n\t\r",
        "Ünïcödé ß ﬁ ＡＢＣ",
        "مرحبا",
        "😀" * 3000,
    ],
)
def test_any_unicode_is_handled(zh_en: TokenizerPair, text: str) -> None:
    for tok in (zh_en.src, zh_en.tgt):
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids)
        assert isinstance(tok.decode(ids), str)
        assert len(tok.pieces(text)) == len(ids)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=200))
def test_property_arbitrary_text(zh_en: TokenizerPair, text: str) -> None:
    ids = zh_en.src.encode(text)
    assert all(0 <= i < zh_en.src.vocab_size for i in ids)
    assert len(zh_en.src.pieces(text)) == len(ids)
    zh_en.src.decode(ids)


def test_clean_text_removes_control_and_surrogates() -> None:
    assert tokenizer_safe("a\x00b") == "a b"
    assert "\ud800" not in tokenizer_safe("\ud800")


def test_whitespace_tokenizer_for_segmented_chinese() -> None:
    tok = WhitespaceTokenizer.train(["我 有 一个 苹果", "我 有 一本 书", "他 有 一个 苹果"])
    assert tok.vocab_size == 4 + 7
    ids = tok.encode("我 有 一个 香蕉")
    assert ids[-1] == UNK_ID and UNK_ID not in ids[:-1]
    assert tok.decode(tok.encode("他 有 一本 书")) == "他 有 一本 书"
    assert tok.encode("我") == [tok.encode("我 有")[0]]
    assert tok.ids_to_pieces([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    capped = WhitespaceTokenizer.train(["a a a b b c"], vocab_size=6)
    assert capped.ids_to_pieces(list(range(capped.vocab_size)))[4:] == ["a", "b"]


def test_joint_vocabulary_is_chosen_for_shared_alphabets() -> None:
    src = ["ein Hund läuft im Park", "zwei Katzen schlafen", "der Mann liest ein Buch"] * 4
    tgt = ["a dog runs in the park", "two cats sleep", "the man reads a book"] * 4
    pair = train_tokenizers(src, tgt, vocab_size=500)
    assert pair.shared and pair.src is pair.tgt
    forced = train_tokenizers(src, tgt, vocab_size=500, joint=False)
    assert not forced.shared


def test_empty_corpus_is_an_error() -> None:
    with pytest.raises(TokenizerError):
        SentencePieceTokenizer.train(["", "   "])
    with pytest.raises(TokenizerError):
        WhitespaceTokenizer.train([])
    with pytest.raises(TokenizerError):
        train_tokenizers(["x"], ["y"], kind="bpe-magic")


@pytest.mark.parametrize("kind", ["sentencepiece", "whitespace"])
@pytest.mark.parametrize("joint", [True, False])
def test_save_load_roundtrip(tmp_path: Path, kind: str, joint: bool) -> None:
    pairs = toy_pairs()
    src = [s for s, _ in pairs]
    tgt = [t for _, t in pairs]
    pair = train_tokenizers(src, tgt, kind=kind, vocab_size=300, joint=joint)
    pair.save(tmp_path / "tok")
    loaded = TokenizerPair.load(tmp_path / "tok")
    assert loaded.shared == joint and loaded.kind == kind
    for a, b, texts in ((pair.src, loaded.src, src), (pair.tgt, loaded.tgt, tgt)):
        assert a.vocab_size == b.vocab_size
        for t in texts:
            assert a.encode(t) == b.encode(t)
    clone = TokenizerPair.from_bytes(pair.to_bytes())
    assert clone.tgt.encode(tgt[0]) == pair.tgt.encode(tgt[0])
    sub = "joint" if joint else "src"
    assert load_tokenizer(tmp_path / "tok" / sub).vocab_size == pair.src.vocab_size


def test_training_leaves_no_files_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    import tempfile

    before = set(os.listdir(tempfile.gettempdir()))
    SentencePieceTokenizer.train([s for s, _ in toy_pairs()], vocab_size=100)
    assert list(tmp_path.iterdir()) == []
    assert set(os.listdir(tempfile.gettempdir())) - before == set()


def test_corrupt_tokenizer_folder(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError):
        TokenizerPair.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"kind": "sentencepiece", "shared": true}')
    (tmp_path / "joint").mkdir()
    (tmp_path / "joint" / "tokenizer.json").write_text('{"kind": "sentencepiece"}')
    (tmp_path / "joint" / "spm.model").write_bytes(b"not a model")
    with pytest.raises(TokenizerError):
        TokenizerPair.load(tmp_path)


def test_a_vocabulary_smaller_than_the_alphabet_grows_to_fit_it() -> None:
    """More distinct characters than pieces asked for (a small Chinese vocabulary): the size
    grows to what SentencePiece says every character needs instead of failing."""
    chars = [chr(0x4E00 + i) for i in range(600)]  # 600 distinct CJK characters
    texts = ["".join(chars[i : i + 12]) for i in range(0, 600, 3)]
    tok = SentencePieceTokenizer.train(texts, vocab_size=300)
    assert tok.vocab_size >= 600
    assert UNK_ID not in tok.encode(texts[7])
