"""A glossary the model obeys: a small trained model writes a required term it would never
choose on its own; sentences without a term are translated exactly as before; evaluation
reports the term-hit rate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from core_model.tokenizer import SentencePieceTokenizer
from tests.helpers import (
    cli_in_process,
    make_toy_corpus,
    module_home,
    toy_pairs,
    trained_home,
    training,
)
from workbench.corpus import glossary
from workbench.errors import WorkbenchError
from workbench.evaluation import evaluation
from workbench.models import translation

PARK = "我们明天去公园散步吧。"  # -> "Let's go for a walk in the park tomorrow."
COFFEE = "我每天早上喝一杯咖啡。"  # -> "I drink a cup of coffee every morning."


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    built = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    with module_home(built.home) as home:
        yield {"home": home, "corpus_id": built.corpus_id, "version": built.version_ids[0]}


def test_required_terms_appear_and_other_outputs_do_not_change(trained: dict) -> None:
    # Terms the model has learned to translate otherwise: "公园" is "park", "咖啡" "coffee".
    glossary.set_terms(trained["corpus_id"], [("公园", "library"), ("咖啡", "tea")])
    terms = glossary.glossary_of(trained["corpus_id"])
    sources = [s for s, _ in toy_pairs()]
    plain = [r.text for r in translation.translate(trained["version"], sources)]
    assert "library" not in plain[sources.index(PARK)]
    assert "tea" not in _words(plain[sources.index(COFFEE)])
    obeyed = [r.text for r in translation.translate(trained["version"], sources, glossary=terms)]
    assert "library" in obeyed[sources.index(PARK)]
    assert "tea" in _words(obeyed[sources.index(COFFEE)])  # a word, not glued to the next
    for i, source in enumerate(sources):
        if source not in (PARK, COFFEE):
            assert obeyed[i] == plain[i]  # no term: exactly the unconstrained output
    # With beam search too, and the hit rates say what happened.
    beamed = translation.translate(trained["version"], [PARK], beam=4, glossary=terms)
    assert "library" in beamed[0].text
    assert glossary.term_hits(sources, plain, terms) == (0, 2)
    assert glossary.term_hits(sources, obeyed, terms) == (2, 2)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


# Terms the model would not write, each of which the search once placed right after a piece
# that only begins a word ("the do window", "a c green tea", "noodles toni evening").
CUT_SHORT = [
    ("我每天早上喝一杯咖啡。", "咖啡", "green tea"),
    ("请把门关上。", "门", "window"),
    ("火车站离这里不远。", "不远", "close"),
    ("今天晚上我们吃面条。", "晚上", "evening"),
    ("外面下着大雨。", "大雨", "snow"),
]


def test_a_term_starts_a_word_and_never_cuts_the_one_before_it(trained: dict) -> None:
    """The constrained search begins a term (and any word) only where the model has finished
    the word it was writing: every term is written, and the word before it is a whole word
    of the corpus' English, not the first piece of one."""
    known = {w.lower() for _, target in toy_pairs() for w in _words(target)}
    for source, src_term, tgt_term in CUT_SHORT:
        terms = glossary.Glossary(((src_term, tgt_term),))
        output = translation.translate(trained["version"], [source], glossary=terms)[0].text
        assert glossary.contains_term(output, tgt_term), output
        before = _words(output[: output.lower().index(tgt_term)])
        assert before and before[-1].lower() in known, output


def test_a_term_in_a_target_without_spaces_goes_where_the_model_puts_the_word(
    trained: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """en→zh: inside a Chinese sentence a piece rarely begins a word ("▁…"), so the word
    rules of targets with spaces would allow a term only at the sentence start or beside
    punctuation. They do not apply there: "park" → "图书馆" comes in the middle of the
    sentence, after the words the model writes on its own before "公园"."""
    walk = "Let's go for a walk in the park tomorrow."
    built = trained_home(tmp_path_factory, "toy_en_zh", training(preset="tiny"))
    with module_home(built.home):
        version = built.version_ids[0]
        plain = translation.translate(version, [walk])[0].text
        assert "公园" in plain and "图书馆" not in plain, plain
        terms = glossary.Glossary((("park", "图书馆"),))
        obeyed = translation.translate(version, [walk], glossary=terms)[0].text
    before = obeyed[: obeyed.find("图书馆")]  # what the model wrote before the term
    assert before and plain.startswith(before), (plain, obeyed)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_a_chinese_term_is_written_without_the_word_marker(model_type: str) -> None:
    """A term on its own is a text of its own: SentencePiece begins it with "▁" — a lone
    piece, or merged ("▁图书馆", which a Chinese sentence decodes as "去 图书馆"). Inside a
    Chinese target the marker is dropped; in a target with spaces it stays."""
    starts = ["图书馆很安静。", "图书馆开门了。", "图书馆在哪里？", "公园很大。"]
    tokenizer = SentencePieceTokenizer.train(
        [*starts, "我们明天去公园。", "今天天气很好。"] * 20, vocab_size=60, model_type=model_type
    )
    assert tokenizer.ids_to_pieces(tokenizer.encode("图书馆"))[0].startswith("▁")
    inside = glossary._term_ids(tokenizer, "图书馆", spaced=False)
    assert tokenizer.decode(tokenizer.encode("我去") + inside) == "我去图书馆"
    assert glossary._term_ids(tokenizer, "图书馆", spaced=True) == tokenizer.encode("图书馆")


def test_evaluation_reports_the_term_hit_rate(trained: dict) -> None:
    glossary.set_terms(trained["corpus_id"], [("公园", "library")])
    terms = glossary.glossary_of(trained["corpus_id"])
    pairs = toy_pairs()
    off = evaluation.evaluate(trained["version"], pairs, glossary=terms, enforce=False)
    on = evaluation.evaluate(trained["version"], pairs, glossary=terms, enforce=True)
    assert (off["term_hits"], off["terms"], off["term_hit_rate"]) == (0, 1, 0.0)
    assert (on["term_hits"], on["terms"], on["term_hit_rate"]) == (1, 1, 1.0)
    assert on["bleu"] < off["bleu"]  # the references say "park": the glossary overrides them
    assert "term_hit_rate" not in evaluation.evaluate(trained["version"], pairs)


def test_matching_and_editing_the_glossary(trained: dict, tmp_path) -> None:
    terms = glossary.Glossary((("New York", "纽约"), ("York", "约克"), ("咖啡", "coffee")))
    assert terms.matches("I love new york and YORK.") == [("New York", "纽约"), ("York", "约克")]
    assert terms.matches("Yorkshire") == []  # whole words in scripts with spaces
    assert terms.matches("喝咖啡吗") == [("咖啡", "coffee")]  # substrings in Chinese
    # An output hits a target term the same way: "woman" does not use the term "man".
    men = glossary.Glossary((("Mann", "man"),))
    sources = ["Ein Mann läuft.", "Ein Mann läuft.", "Ein Mann läuft."]
    outputs = ["A woman runs.", "A Man runs.", "A man's dog runs."]
    assert glossary.term_hits(sources, outputs, men) == (2, 3)
    corpus = trained["corpus_id"]
    assert glossary.set_terms(corpus, [("茶", "tea"), ("", ""), ("猫", "cat")]) == 2
    with pytest.raises(WorkbenchError, match="twice"):
        glossary.set_terms(corpus, [("茶", "tea"), ("茶", "black tea")])
    with pytest.raises(WorkbenchError, match="target term is empty"):
        glossary.set_terms(corpus, [("茶", " ")])
    assert glossary.list_terms(corpus) == [("猫", "cat"), ("茶", "tea")]  # unchanged
    data = "source\ttarget\n茶\tgreen tea\n狗\tdog\n".encode()
    assert glossary.import_terms(corpus, data, "tsv") == 3
    assert dict(glossary.list_terms(corpus)) == {"猫": "cat", "茶": "green tea", "狗": "dog"}
    assert glossary.import_terms(corpus, '"鸟","bird, small"\n'.encode(), "csv") == 4
    with pytest.raises(WorkbenchError, match="line 1: expected two columns"):
        glossary.import_terms(corpus, b"only one column\n", "tsv")
    glossary.set_terms(corpus, [])


def test_the_command_line_enforces_and_reports_terms(trained: dict, tmp_path) -> None:
    glossary.set_terms(trained["corpus_id"], [("公园", "library")])
    version, corpus = str(trained["version"]), str(trained["corpus_id"])
    plain = cli_in_process("translate", "--version", version, PARK)
    obeyed = cli_in_process("translate", "--version", version, "--glossary", corpus, PARK)
    assert plain.returncode == obeyed.returncode == 0, obeyed.stderr
    assert "library" not in plain.stdout and "library" in obeyed.stdout
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(s for s, _ in toy_pairs()) + "\n", encoding="utf-8")
    ref.write_text("\n".join(t for _, t in toy_pairs()) + "\n", encoding="utf-8")
    files = ("--src", str(src), "--ref", str(ref))
    off = cli_in_process("evaluate", "--version", version, *files, "--glossary", corpus)
    on = cli_in_process(
        "evaluate", "--version", version, *files, "--glossary", corpus, "--enforce-glossary"
    )
    assert json.loads(off.stdout.splitlines()[-1])["term_hit_rate"] == 0.0
    assert json.loads(on.stdout.splitlines()[-1])["term_hit_rate"] == 1.0
    bad = cli_in_process("evaluate", "--version", version, *files, "--enforce-glossary")
    assert bad.returncode == 2 and "needs --glossary" in bad.stderr


@pytest.mark.usefixtures("wb_home")
def test_a_glossary_file_is_read_by_the_import_s_rules(db_fingerprint) -> None:
    """A glossary file is read as the pairs' import reads its format (``formats.read_columns``):
    gzip, a header, quoting; any record that is not a term refuses the whole file, naming its
    line (in Chinese on a page), and changes nothing."""
    import gzip

    from tests.workbench.team.test_access import in_chinese

    corpus = make_toy_corpus()
    data = gzip.compress("source\ttarget\textra\n茶\ttea\tignored\n".encode())
    assert glossary.import_terms(corpus, data, "tsv") == 1
    csv = '"纽约","New York, NY"\n'.encode()
    assert glossary.import_terms(corpus, csv, "CSV") == 2
    before = db_fingerprint()
    for data, fmt, message in [
        (b'a,b\n"x"y,b\n', "csv", "glossary file line 2: malformed CSV (',' expected after '\"')"),
        (b"a\tb\n\xff\tc\n", "tsv", "glossary file line 2: not valid UTF-8 (byte 0xff)"),
        (b"a\tb\nc\n", "tsv", "glossary file line 2: expected two columns"),
        (b"{}", "jsonl", "glossary file 'jsonl': not a format of columns, use one of tsv, csv"),
    ]:
        with pytest.raises(WorkbenchError) as refused:
            glossary.import_terms(corpus, data, fmt)
        assert str(refused.value).startswith(message)
        in_chinese(refused.value)
    assert db_fingerprint() == before
    assert glossary.list_terms(corpus) == [("纽约", "New York, NY"), ("茶", "tea")]
