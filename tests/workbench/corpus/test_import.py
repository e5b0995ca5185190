"""Import/export: every format, the validation report, and all-or-nothing writes."""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import ROOT, parse_pairs
from tests.workbench.team.test_access import in_chinese
from ui import i18n
from workbench.corpus import corpora as C
from workbench.corpus import exporting as E
from workbench.corpus import formats as F
from workbench.corpus import import_checks as K
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.corpus import text_files
from workbench.corpus import text_rules as T
from workbench.errors import WorkbenchError
from workbench.messages import N_

TSV = "我今天很忙。\tI am busy today.\n外面在下雨。\tIt is raining outside.\n"
ATTR = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"


def _pairs(parsed: K.ParsedImport) -> list[tuple[str, str]]:
    return [(p.source, p.target) for p in parsed.pairs]


# ------------------------------------------------------------------------------ parsing


def test_tsv_header_optional_columns_bom_crlf() -> None:
    data = (
        "\ufeffsource\ttarget\tsplit\tnote\r\n"
        "我今天很忙。\tI am  busy today.\tvalid\tmine\r\n"
        "\r\n"
        "外面在下雨。\tIt is raining outside.\r\n"
        "请把门关上。\tPlease close the door.\t\tno split\n"
    ).encode()
    parsed = parse_pairs(data, "tsv")
    assert _pairs(parsed) == [
        ("我今天很忙。", "I am busy today."),
        ("外面在下雨。", "It is raining outside."),
        ("请把门关上。", "Please close the door."),
    ]
    assert [p.split for p in parsed.pairs] == ["valid", None, None]
    assert [p.note for p in parsed.pairs] == ["mine", "", "no split"]
    assert [p.line for p in parsed.pairs] == [2, 4, 5]
    assert parsed.report == [] and parsed.rows == 3


def test_csv_quotes_and_embedded_newlines() -> None:
    data = 'source,target\n"你好，世界","Hello, ""world""\nagain"\n再见,Bye\n'.encode()
    assert _pairs(parse_pairs(data, "csv")) == [
        ("你好，世界", 'Hello, "world" again'),
        ("再见", "Bye"),
    ]


def test_jsonl() -> None:
    lines = [
        {"source": "你好", "target": "Hello", "split": "test", "note": "n"},
        {"source": "再见", "target": "Bye", "split": None},
    ]
    data = "\n".join(json.dumps(x, ensure_ascii=False) for x in lines).encode()
    parsed = parse_pairs(data, "jsonl")
    assert _pairs(parsed) == [("你好", "Hello"), ("再见", "Bye")]
    assert [p.split for p in parsed.pairs] == ["test", None]


def test_aligned_files(tmp_path: Path) -> None:
    (tmp_path / "a.zh").write_text("你好\n再见\n谢谢\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("Hello\nBye\nThanks\n", encoding="utf-8")
    parsed = parse_pairs(tmp_path / "a.zh", None, tmp_path / "a.en")
    assert _pairs(parsed) == [("你好", "Hello"), ("再见", "Bye"), ("谢谢", "Thanks")]


def test_tatoeba_orientation_follows_corpus_languages() -> None:
    data = f"The tea is hot.\t茶很烫。\t{ATTR}\nWe eat at noon.\t我们中午吃饭。\t{ATTR}\n".encode()
    zh_en = parse_pairs(data, "tatoeba", src_lang="zh", tgt_lang="en")
    assert _pairs(zh_en) == [("茶很烫。", "The tea is hot."), ("我们中午吃饭。", "We eat at noon.")]
    assert zh_en.pairs[0].note == ATTR  # attribution kept (CC-BY)
    en_zh = parse_pairs(data, "tatoeba", src_lang="en", tgt_lang="zh")
    assert _pairs(en_zh) == [("The tea is hot.", "茶很烫。"), ("We eat at noon.", "我们中午吃饭。")]
    with pytest.raises(WorkbenchError, match="English"):
        parse_pairs(data, "tatoeba", src_lang="de", tgt_lang="fr")


def test_gzip_and_format_inference(tmp_path: Path) -> None:
    path = tmp_path / "cmn-eng.tsv.gz"
    path.write_bytes(gzip.compress(f"The tea is hot.\t茶很烫。\t{ATTR}\n".encode()))
    assert F.infer_format(path, path.read_bytes()) == "tatoeba"
    assert _pairs(parse_pairs(path, src_lang="zh", tgt_lang="en")) == [
        ("茶很烫。", "The tea is hot.")
    ]
    assert F.infer_format("x.csv") == "csv"
    assert F.infer_format("x.jsonl") == "jsonl"
    assert F.infer_format("x.tsv", TSV.encode()) == "tsv"
    with pytest.raises(WorkbenchError, match="--format"):
        F.infer_format("x.docx")


def test_the_format_registry_is_the_one_source() -> None:
    """Every format has its reader, a description a page shows translated, and a way to be
    chosen (a file name ending, or a target file); inference, the upload's file types, the
    export's choices and the CLI's --format choices all come from ``FORMATS``."""
    from workbench.cli.dispatch import build_parser

    for name, fmt in F.FORMATS.items():
        assert callable(fmt.read), name
        with mock.patch.object(i18n, "current", lambda: "zh_Hans"):
            assert re.search(r"[\u4e00-\u9fff]", i18n.translate(fmt.description)), name
        assert fmt.extensions or fmt.two_files, name
        for ext in fmt.extensions:
            assert ext in F.FILE_TYPES
            assert ext in F.FORMATS[F.infer_format(f"pairs.{ext}.gz")].extensions
    # …and the upload offers nothing else: each ending once, each read by a format, and gz.
    assert len(F.FILE_TYPES) == len(set(F.FILE_TYPES)) and "gz" in F.FILE_TYPES
    assert all(F.infer_format(f"pairs.{ext}") for ext in F.FILE_TYPES if ext != "gz")
    writers = [n for n, f in F.FORMATS.items() if f.write is not None]
    assert all(F.FORMATS[n].media_type for n in writers)
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command, choices in (("import", list(F.FORMATS)), ("export", writers)):
        (option,) = [a for a in commands[command]._actions if a.dest == "format"]
        assert list(option.choices) == choices
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"[--format {'|'.join(F.FORMATS)} --tgt-file FILE]" in readme


def test_an_unknown_format_is_refused_not_read_as_another(
    wb_home: Path, tmp_path: Path, db_fingerprint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A format the registry does not name is one error line and changes nothing (before, a
    format without its branch was read as Tatoeba); one added to it is read by its own
    reader."""
    path = tmp_path / "pairs.tsv"
    path.write_text(TSV, encoding="utf-8")
    corpus = C.create_corpus("c", "zh", "en")
    before = db_fingerprint()
    for fmt in ("docx", "Tatoeba2"):
        with pytest.raises(WorkbenchError) as refused:
            I.import_file(corpus.id, path, fmt=fmt)
        assert str(refused.value) == (
            f"unknown format {fmt.lower()!r}: use one of "
            "tsv, csv, jsonl, aligned, tatoeba, tmx, xliff"
        )
        assert in_chinese(refused.value).startswith("未知格式")
    assert db_fingerprint() == before

    def pipes(files: F.Files):
        for n, line in files.lines():
            source, target = line.split("|")
            yield n, source, target, None, None

    monkeypatch.setitem(F.FORMATS, "pipe", F.Format("pipe", N_("a|b per line"), pipes))
    assert list(F.read_rows("你好|Hello\n".encode(), "pipe", None, "zh", "en")) == [
        (1, "你好", "Hello", None, None)
    ]


@pytest.mark.parametrize(
    ("fmt", "data", "match"),
    [
        ("tsv", b"ok\tfine\n\xff\xfebad\tbytes\n", r"line 2: not valid UTF-8"),
        ("tsv", b"a\tb\nc\x00\td\n", r"line 2: contains a NUL byte"),
        ("tsv", b"\x1f\x8bnot really gzip", r"gzip"),
        ("xml", b"<a/>", r"unknown format"),
    ],
)
def test_unreadable_files_name_the_line(fmt: str, data: bytes, match: str) -> None:
    """A file that cannot be read as text of its format is refused as a whole."""
    with pytest.raises(WorkbenchError, match=match):
        parse_pairs(data, fmt, src_lang="zh", tgt_lang="en")


GOOD = {  # two valid pairs in each format; MALFORMED's record goes between them
    "tsv": ("你好\tHello\n", "再见\tBye\n"),
    "csv": ("你好,Hello\n", "再见,Bye\n"),
    "jsonl": ('{"source": "你好", "target": "Hello"}\n', '{"source": "再见", "target": "Bye"}\n'),
    "tatoeba": (f"Hello\t你好\t{ATTR}\n", f"Bye\t再见\t{ATTR}\n"),
}
MALFORMED = [
    ("tsv", "a line without a tab\n", r"^expected 2 to 4 tab-separated columns .* found 1$"),
    ("tsv", "a\tb\tc\td\te\n", r"^expected 2 to 4 tab-separated .* found 5$"),
    ("csv", "only one column\n", r"^expected 2 to 4 comma-separated .* found 1$"),
    ("csv", '"x"y,b\n', r"^malformed CSV \(',' expected after '\"'\)$"),
    ("jsonl", '{"source": "a",\n', r"^invalid JSON"),
    ("jsonl", '{"source": "a"}\n', r"^missing key 'target'$"),
    ("jsonl", '{"source": "a", "target": 3}\n', r"^'target' must be a string$"),
    ("jsonl", "[1, 2]\n", r"^expected a JSON object"),
    ("tatoeba", "Tea.\t茶。\n", r"^expected 3 tab-separated columns .* found 2$"),
]


@pytest.mark.parametrize(("fmt", "bad", "reason"), MALFORMED)
def test_a_malformed_record_is_skipped_and_reported_like_an_invalid_row(
    fmt: str, bad: str, reason: str
) -> None:
    """One bad record no longer rejects the whole file (it did, in every format but
    aligned): it is skipped and listed with its line number and why; the rest is read."""
    first, last = GOOD[fmt]
    parsed = parse_pairs((first + bad + last).encode(), fmt, src_lang="zh", tgt_lang="en")
    assert _pairs(parsed) == [("你好", "Hello"), ("再见", "Bye")]
    assert [p.line for p in parsed.pairs] == [1, 3]
    [issue] = parsed.report
    assert (issue.line, issue.kind, issue.severity) == (2, "malformed", "error")
    assert re.search(reason, issue.message), issue.message
    assert parsed.rows == 3 and parsed.skipped == 1 and parsed.accepted == 2
    assert parsed.errors == [issue]


def test_an_unclosed_csv_quote_says_which_lines_it_took() -> None:
    parsed = parse_pairs('你好,Hello\n"open,quote\n再见,Bye\n'.encode(), "csv")
    assert _pairs(parsed) == [("你好", "Hello")]
    [issue] = parsed.report
    assert issue.line == 2 and issue.kind == "malformed"
    assert "lines 2–3 were read as one record" in issue.message


def test_aligned_length_mismatch_names_the_line() -> None:
    with pytest.raises(WorkbenchError, match=r"line 3: aligned files differ"):
        parse_pairs("一\n二\n三\n".encode(), "aligned", b"one\ntwo\n")
    with pytest.raises(WorkbenchError, match="target file"):
        parse_pairs(b"x\n", "aligned")


def test_validation_report() -> None:
    long = "字" * (T.MAX_CHARS + 1)
    rows = [
        "你好\tHello",  # 1 ok
        "\tempty source",  # 2 error
        f"{long}\ttoo long",  # 3 error
        "你好\tHello",  # 4 duplicate of 1
        "同样\t同样",  # 5 identical (warning, imported)
        "短\t" + " ".join(["word"] * 30),  # 6 ratio (warning, imported)
        "分割\tsplit\tdev",  # 7 bad split
    ]
    parsed = parse_pairs("\n".join(rows).encode(), "tsv")
    kinds = {(i.line, i.kind, i.severity) for i in parsed.report}
    assert kinds == {
        (2, "empty", "error"),
        (3, "too_long", "error"),
        (4, "duplicate_in_file", "duplicate"),
        (5, "identical", "warning"),
        (6, "ratio", "warning"),
        (7, "bad_split", "error"),
    }
    assert [p.line for p in parsed.pairs] == [1, 5, 6]
    assert parsed.skipped == 3 and parsed.duplicates == 1 and len(parsed.errors) == 3
    frame = parsed.report_frame()
    assert list(frame.columns) == ["line", "severity", "kind", "message"] and len(frame) == 6


def test_validator_matches_corpus_text_rules() -> None:
    """The inlined hot path must agree with text_rules.normalize_text / pair_hash."""
    raw = "  Ｅ\u0301cole\u2003\u3000l'e\u0301cole  \u00a0 ok "
    p = parse_pairs(f"{raw}\t{raw[::-1]}\n".encode(), "tsv").pairs[0]
    src, tgt = T.normalize_text(raw), T.normalize_text(raw[::-1])
    assert (p.source, p.target, p.content_hash) == (src, tgt, T.pair_hash(src, tgt))


# ------------------------------------------------------------------------------ writing


def test_import_file_reports_and_skips_corpus_duplicates(db_url: str) -> None:
    info = C.create_corpus("c", "zh", "en")
    first = I.import_file(info.id, TSV.encode(), fmt="tsv")
    assert (first.added, first.duplicates, first.skipped) == (2, 0, 0)
    again = I.import_file(info.id, (TSV + "新的\tnew\n\tx\n").encode(), fmt="tsv")
    assert (again.added, again.duplicates, again.skipped) == (1, 2, 1)
    assert {i.kind for i in again.report} == {"duplicate_in_corpus", "empty"}
    assert C.get_corpus(info.id).pair_count == 3
    preview = I.preview_import(info.id, TSV.encode(), fmt="tsv")
    assert preview.pairs == [] and preview.duplicates == 2
    assert C.get_corpus(info.id).pair_count == 3  # preview writes nothing


MASKS = "请戴好口罩。\tMasks must be worn (carol).\n挂号费二十元。\tThe fee is twenty yuan.\n"
DAY2 = (
    "请预约体检。\tPlease book a health check.\n"
    "请戴好口罩。\tPlease wear a mask.\n"  # the corpus says it otherwise
    "挂号费二十元。\tThe fee is twenty yuan.\n"  # the corpus says it so: a duplicate
)


def test_a_source_the_corpus_translates_differently_is_named_then_added_or_skipped(
    db_url: str,
) -> None:
    """The walk's day2.csv: the preview and the import name the row (not an ordinary
    addition), add it by default as before, and leave it out when asked."""
    info = C.create_corpus("c", "zh", "en")
    I.import_file(info.id, MASKS.encode(), fmt="tsv")
    [mask_pair] = P.search_pairs(info.id, "口罩").rows["id"].tolist()
    preview = I.preview_import(info.id, DAY2.encode(), fmt="tsv")
    assert (preview.accepted, preview.duplicates, preview.conflict_count) == (2, 1, 1)
    assert preview.conflicts == [
        K.Conflict(
            2, "请戴好口罩。", "Please wear a mask.", "Masks must be worn (carol).", mask_pair
        )
    ]
    [issue] = [i for i in preview.report if i.kind == "conflict"]
    assert (issue.line, issue.severity) == (2, "warning")
    skipping = I.preview_import(info.id, DAY2.encode(), fmt="tsv", skip_conflicts=True)
    assert (skipping.accepted, skipping.conflict_count) == (1, 1)
    assert [p.line for p in skipping.pairs] == [1]
    assert [i.severity for i in skipping.report if i.kind == "conflict"] == ["filtered"]

    skipped = I.import_file(info.id, DAY2.encode(), fmt="tsv", skip_conflicts=True)
    assert (skipped.added, skipped.conflict_count, skipped.conflicts_skipped) == (1, 1, True)
    assert C.get_corpus(info.id).pair_count == 3
    added = I.import_file(info.id, DAY2.encode(), fmt="tsv")  # the default: added, as before
    assert (added.added, added.duplicates, added.conflict_count) == (1, 2, 1)
    assert added.as_dict()["conflict_examples"] == [
        {
            "line": 2,
            "source": "请戴好口罩。",
            "target": "Please wear a mask.",
            "corpus_target": "Masks must be worn (carol).",
            "pair_id": mask_pair,
            "file_line": 0,
        }
    ]
    masks = set(P.search_pairs(info.id, "口罩").rows["target"])
    assert masks == {"Masks must be worn (carol).", "Please wear a mask."}
    # once both are in the corpus, the file's row is a duplicate, no longer a conflict
    assert I.preview_import(info.id, DAY2.encode(), fmt="tsv").conflict_count == 0


def test_a_file_whose_new_rows_are_all_skipped_conflicts_imports_nothing(
    db_url: str, db_fingerprint
) -> None:
    """Every new row a conflict the user chose to skip (with a duplicate or without): an
    import of 0 pairs, nothing written, the conflicts named; with an invalid row too, the
    refusal counts them."""
    info = C.create_corpus("c", "zh", "en")
    I.import_file(info.id, MASKS.encode(), fmt="tsv")
    before = db_fingerprint()
    only = "请戴好口罩。\tPlease wear a mask.\n挂号费二十元。\tThe fee: twenty yuan.\n"
    for data in (only, only + "挂号费二十元。\tThe fee is twenty yuan.\n"):
        result = I.import_file(info.id, data.encode(), fmt="tsv", skip_conflicts=True)
        assert (result.added, result.conflict_count, result.conflicts_skipped) == (0, 2, True)
        assert [c.line for c in result.conflicts] == [1, 2]
        assert db_fingerprint() == before
    bad = only + "\tno source\n"
    with pytest.raises(
        WorkbenchError,
        match=r"\(1 invalid, 0 duplicates, 0 filtered out, 2 skipped as conflicts\)",
    ):
        I.import_file(info.id, bad.encode(), fmt="tsv", skip_conflicts=True)
    assert db_fingerprint() == before


@pytest.mark.parametrize("chunk", [2, 1000])
def test_rows_of_one_file_that_translate_a_source_differently_are_named(
    db_url: str, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Within one file (one chunk or across chunks, staged or not), into a new corpus too:
    the second translation of a source is named with the line of the first, added by
    default, left out when asked; the same row twice stays an ordinary duplicate."""
    monkeypatch.setattr(I, "IMPORT_CHUNK", chunk)
    data = (
        "早上好。\tGood morning.\n你好。\tHello.\n早上好。\tGood morning.\n"
        "早上好。\tMorning!\n谢谢。\tThanks.\n"
    ).encode()
    preview = I.preview_import(C.create_corpus("c", "zh", "en").id, data, fmt="tsv")
    assert (preview.accepted, preview.duplicates, preview.conflict_count) == (4, 1, 1)
    assert preview.conflicts == [K.Conflict(4, "早上好。", "Morning!", "", 0, 1)]
    [issue] = [i for i in preview.report if i.kind == "conflict"]
    assert (issue.line, issue.severity, issue.message) == (
        4,
        "warning",
        "line 1 of the file translates this source differently",
    )
    added = I.import_file("new", data, fmt="tsv", create_langs=("zh", "en"))
    assert (added.added, added.conflict_count, added.conflicts) == (4, 1, preview.conflicts)
    skipped = I.import_file(
        "other", data, fmt="tsv", create_langs=("zh", "en"), skip_conflicts=True
    )
    assert (skipped.added, skipped.conflict_count, skipped.conflicts_skipped) == (3, 1, True)
    assert set(P.search_pairs(skipped.corpus_id, "早上好").rows["target"]) == {"Good morning."}


def test_strict_import_aborts_on_any_invalid_row(db_url: str, db_fingerprint) -> None:
    info = C.create_corpus("c", "zh", "en")
    before = db_fingerprint()
    with pytest.raises(WorkbenchError, match="line 3: source is empty"):
        I.import_file(info.id, (TSV + "\tno source\n").encode(), fmt="tsv", strict=True)
    assert db_fingerprint() == before


@pytest.mark.parametrize("fmt", sorted(GOOD))
def test_a_malformed_record_is_previewed_then_skipped_on_import(
    wb_home: Path, db_fingerprint, fmt: str
) -> None:
    """The preview lists the malformed record and writes nothing; the import (the user's
    confirmation) adds the valid pairs and reports the skipped line; strict refuses it."""
    info = C.create_corpus("c", "zh", "en")
    bad = next(b for f, b, _ in MALFORMED if f == fmt)
    data = (GOOD[fmt][0] + bad + GOOD[fmt][1]).encode()
    before = db_fingerprint()
    preview = I.preview_import(info.id, data, fmt=fmt)
    assert preview.accepted == 2 and preview.skipped == 1
    assert [(i.line, i.kind) for i in preview.report] == [(2, "malformed")]
    assert db_fingerprint() == before  # nothing written until the user confirms
    with pytest.raises(WorkbenchError, match=r"^line 2: .*; nothing imported$"):
        I.import_file(info.id, data, fmt=fmt, strict=True)
    assert db_fingerprint() == before
    result = I.import_file(info.id, data, fmt=fmt)
    assert (result.added, result.skipped, result.issue_counts) == (2, 1, {"malformed": 1})
    assert [(i.line, i.kind) for i in result.report] == [(2, "malformed")]
    assert C.get_corpus(info.id).pair_count == 2


def test_failure_after_chunks_were_written_rolls_everything_back(
    db_url: str, db_fingerprint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreadable last line of a multi-chunk import leaves the database untouched."""
    monkeypatch.setattr(I, "IMPORT_CHUNK", 7)
    info = C.create_corpus("c", "zh", "en")
    I.import_file(info.id, TSV.encode(), fmt="tsv")
    before = db_fingerprint()
    rows = [f"句子{i}\tsentence {i}" for i in range(50)]
    with pytest.raises(WorkbenchError, match="line 51: not valid UTF-8"):
        I.import_file(info.id, ("\n".join(rows) + "\n").encode() + b"\xff\tx\n", fmt="tsv")
    assert db_fingerprint() == before
    assert P.search_pairs(info.id, "sentence").total == 0
    ok = I.import_file(info.id, "\n".join(rows).encode(), fmt="tsv")
    assert ok.added == 50 and P.search_pairs(info.id, "sentence 4").total == 11
    db_fingerprint()  # FTS integrity check after a multi-chunk import


def test_tiny_rule_applies_to_small_imports(wb_home: Path, monkeypatch) -> None:
    monkeypatch.setattr(I, "IMPORT_CHUNK", 5)
    tiny = C.create_corpus("tiny", "zh", "en")
    I.import_file(tiny.id, "\n".join(f"小{i}\tsmall {i}" for i in range(12)).encode(), fmt="tsv")
    assert P.corpus_stats(tiny.id).split_counts["train"] == 12
    big = C.create_corpus("big", "zh", "en")
    I.import_file(big.id, "\n".join(f"大{i}\tbig {i}" for i in range(300)).encode(), fmt="tsv")
    counts = P.corpus_stats(big.id).split_counts
    assert counts["valid"] > 0 and counts["test"] > 0


def test_import_into_missing_corpus(wb_home: Path) -> None:
    with pytest.raises(WorkbenchError, match="no corpus"):
        I.import_file(12345, TSV.encode(), fmt="tsv")


def test_export_round_trip(db_url: str, tmp_path: Path) -> None:
    info = C.create_corpus("c", "zh", "en")
    I.import_file(
        info.id,
        f"The tea is hot.\t茶很烫。\t{ATTR}\nWe eat at noon.\t我们中午吃饭。\t{ATTR}\n".encode(),
        fmt="tatoeba",
    )
    P.add_pair(info.id, "测试", "held out", split="test", note="mine")
    original = P.search_pairs(info.id).rows.drop(columns="id")
    for ext in ("tsv", "jsonl", "csv"):
        path = tmp_path / f"out.{ext}"
        assert E.export_pairs(info.id, path) == 3
        other = C.create_corpus(f"copy-{ext}", "zh", "en")
        res = I.import_file(other.id, path)
        assert res.added == 3 and res.report == []
        copy = P.search_pairs(other.id).rows.drop(columns="id")
        assert copy.equals(original), ext
    assert E.export_bytes(info.id, "tsv").decode().splitlines()[0] == "source\ttarget\tsplit\tnote"
    with pytest.raises(WorkbenchError, match="folder does not exist"):
        E.export_pairs(info.id, tmp_path / "nope" / "x.tsv")
    with pytest.raises(WorkbenchError, match="cannot export"):
        E.export_pairs(info.id, tmp_path / "x.xml", "xml")


def test_real_tatoeba_sample_if_available(wb_home: Path) -> None:
    path = ROOT.parent / "shared/data/tatoeba-cmn-eng/cmn-eng.tsv.gz"
    if not path.exists():
        pytest.skip(f"reference data not present: {path}")
    info = C.create_corpus("tatoeba", "zh", "en")
    res = I.import_file(info.id, path)  # format sniffed from the attribution column
    assert res.added > 20_000 and res.skipped == 0
    row = P.search_pairs(info.id, page_size=1).rows.iloc[0]
    assert not row["source"].isascii() and row["target"].isascii()


def test_bulk_import_of_many_rows(db_url: str) -> None:
    info = C.create_corpus("bulk", "zh", "en")
    data = "\n".join(f"第{i}句。\tSentence number {i}." for i in range(12_000)).encode()
    res = I.import_file(info.id, data, fmt="tsv")
    assert res.added == 12_000 and C.get_corpus(info.id).pair_count == 12_000
    hit = P.search_pairs(info.id, "number 11999.")
    assert hit.total == 1 and hit.rows.loc[0, "source"] == "第11999句。"
    counts = P.corpus_stats(info.id).split_counts
    assert 0.85 < counts["train"] / 12_000 < 0.95


# ------------------------------------------------------- text rule, limits and streaming


def test_control_characters_are_removed_and_counted_in_the_report() -> None:
    tsv = "a\x07b\tc\x1b[31md\n正常\tfine\n\x00\t\n".replace("\x00", "\u200b").encode()
    parsed = parse_pairs(tsv, "tsv")
    assert _pairs(parsed) == [("ab", "c[31md"), ("正常", "fine")]
    [issue] = [i for i in parsed.report if i.kind == "control_chars"]
    assert (issue.line, issue.severity) == (1, "warning")
    assert "removed 2" in issue.message and "BEL" in issue.message and "ESC" in issue.message
    rows = [
        {"source": "nul\u0000here", "target": "rtl\u202eexe", "note": "\ufeffnote"},
        {"source": "lone\ud800surrogate", "target": "ok"},
        {"source": "\u0007", "target": "only a bell"},
    ]
    data = "\n".join(json.dumps(r) for r in rows).encode()  # ASCII JSON with \\u escapes
    parsed = parse_pairs(data, "jsonl")
    assert _pairs(parsed) == [("nulhere", "rtlexe"), ("lonesurrogate", "ok")]
    assert parsed.pairs[0].note == "note"
    assert parsed.issue_counts["control_chars"] == 2 and parsed.skipped == 1
    assert "after removing 1 invisible" in parsed.errors[0].message


@pytest.mark.parametrize("content", [b"\x00\xffbinary junk", b"plain\ttext\n"])
def test_a_file_named_gz_must_be_gzip(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "pairs.tsv.gz"
    path.write_bytes(content)
    with pytest.raises(WorkbenchError, match="is not a gzip file"):
        parse_pairs(path)


def test_size_and_line_length_are_capped_while_streaming(monkeypatch) -> None:
    monkeypatch.setattr(text_files, "MAX_INPUT_BYTES", 1000)
    with pytest.raises(WorkbenchError, match="larger than 1,000 bytes uncompressed"):
        parse_pairs(gzip.compress(b"a\tb\n" * 1000), "tsv")
    with pytest.raises(WorkbenchError, match="larger than 1,000 bytes: split"):
        parse_pairs(b"a\tb\n" * 1000, "tsv")
    monkeypatch.setattr(text_files, "MAX_LINE_BYTES", 100)
    with pytest.raises(WorkbenchError, match="line 3: longer than 100 bytes"):
        parse_pairs(b"a\tb\n\n" + b"x" * 150 + b"\ty\n", "tsv")
    with pytest.raises(WorkbenchError, match="line 1: longer than 100 bytes"):
        parse_pairs(b"x" * 500, "tsv")  # one endless line, no newline at all
    assert len(parse_pairs(b"a\tb\n" * 20 + b"c\td", "tsv").pairs) == 2


def test_line_numbers_survive_block_boundaries(monkeypatch) -> None:
    """Blank lines are skipped in bulk; errors still name the right line across blocks."""
    monkeypatch.setattr(text_files, "_BLOCK", 16)
    data = "a\tb\n\n\r\n中文\t句子\n" + "\n" * 40 + "c\td\nbroken\n"
    parsed_lines = [p.line for p in parse_pairs(data.encode()[:-7], "tsv").pairs]
    assert parsed_lines == [1, 4, 45]
    [issue] = parse_pairs(data.encode(), "tsv").report
    assert issue.line == 46 and issue.message.startswith("expected 2 to 4")
    with pytest.raises(WorkbenchError, match="line 6: not valid UTF-8"):
        parse_pairs(b"ok\tfine\n" * 5 + b"x\t\xff\n", "tsv")


def test_gzip_of_newlines_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A 256 KB gzip of newlines is 256 MB of text: it used to be held whole (bytes, str and
    a list of 256 million lines, ~2.5 GB); streaming keeps memory flat."""
    path = tmp_path / "newlines.tsv.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(256):
            fh.write(b"\n" * (1 << 20))
    fh_size = path.stat().st_size
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from tests.helpers import parse_pairs\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "parsed = parse_pairs(sys.argv[1])\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(parsed.rows, (after - before) // 1024)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, grown_mib = map(int, proc.stdout.split())
    assert rows == 0 and fh_size < 400_000
    assert grown_mib < 100, f"peak memory grew by {grown_mib} MiB"


def test_preview_keeps_a_bounded_sample(wb_home: Path, monkeypatch) -> None:
    monkeypatch.setattr(I, "IMPORT_CHUNK", 64)
    info = C.create_corpus("c", "zh", "en")
    P.apply_edits(info.id, added=[{"source": "句子3", "target": "sentence 3"}])
    data = "\n".join(f"句子{i}\tsentence {i}" for i in range(500)).encode()
    preview = I.preview_import(info.id, data, fmt="tsv", sample=7)
    assert preview.accepted == 499 and len(preview.pairs) == 7
    assert [p.line for p in preview.pairs] == [1, 2, 3, 5, 6, 7, 8]
    assert preview.duplicates == 1 and preview.rows == 500
    assert C.get_corpus(info.id).pair_count == 1  # a preview writes nothing


def test_an_open_upload_is_read_again_from_its_start(wb_home: Path) -> None:
    info = C.create_corpus("c", "zh", "en")
    upload = io.BytesIO(TSV.encode())
    upload.name = "menu.tsv"  # type: ignore[attr-defined]  (like Streamlit's UploadedFile)
    assert I.preview_import(info.id, upload).accepted == 2
    upload.read()  # whatever position a previous reader left
    assert I.import_file(info.id, upload).added == 2


def test_a_new_corpus_is_created_only_with_its_pairs(
    db_url: str, db_fingerprint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """import_file(create_langs=…) makes the corpus appear together with its pairs: a bad file
    (here failing after several chunks were written) leaves no empty corpus behind."""
    monkeypatch.setattr(I, "IMPORT_CHUNK", 3)
    C.create_corpus("other", "zh", "en")
    rows = "\n".join(f"句子{i}\tsentence {i}" for i in range(10))
    before = db_fingerprint()
    with pytest.raises(WorkbenchError, match="line 11: not valid UTF-8"):
        bad = (rows + "\n").encode() + b"\xff\tx\n"
        I.import_file("fresh", bad, fmt="tsv", create_langs=("zh", "en"))
    assert db_fingerprint() == before
    assert [c.name for c in C.list_corpora()] == ["other"]
    res = I.import_file("fresh", rows.encode(), fmt="tsv", create_langs=("zh", "en"))
    fresh = C.get_corpus("fresh")
    assert (res.added, res.corpus_id, fresh.pair_count) == (10, fresh.id, 10)
    assert (fresh.src_lang, fresh.tgt_lang) == ("zh", "en")
    again = I.import_file("fresh", TSV.encode(), fmt="tsv", create_langs=("zh", "en"))
    assert again.corpus_id == fresh.id and C.get_corpus("fresh").pair_count == 12
    with pytest.raises(WorkbenchError, match="is zh→en, not de→en"):
        I.import_file("fresh", TSV.encode(), fmt="tsv", create_langs=("de", "en"))
    with pytest.raises(WorkbenchError, match="no corpus '42'; a new corpus name cannot be a"):
        I.import_file("42", TSV.encode(), fmt="tsv", create_langs=("zh", "en"))


def test_a_file_over_the_size_cap_is_refused_before_a_row_is_read(
    monkeypatch, tmp_path: Path
) -> None:
    """A 4.7 MB gzip of rows that decompress to 1.5 GiB ran 566 s of CPU, every row parsed and
    checked, before the cap refused it: the size is now known before the first row."""
    monkeypatch.setattr(text_files, "MAX_INPUT_BYTES", 4 << 20)
    checked: list[int] = []
    check = K.Validator.check
    monkeypatch.setattr(
        K.Validator, "check", lambda self, raw: checked.append(1) or check(self, raw)
    )
    rows = "你好\thello\n".encode() * (1 << 20)  # 13 MiB
    bomb, plain = tmp_path / "bomb.tsv.gz", tmp_path / "plain.tsv"
    bomb.write_bytes(gzip.compress(rows))
    plain.write_bytes(rows)
    with pytest.raises(WorkbenchError, match="larger than 4 MiB uncompressed"):
        parse_pairs(bomb)
    with pytest.raises(WorkbenchError, match="larger than 4 MiB: split"):
        parse_pairs(plain)
    assert checked == []
    assert parse_pairs(gzip.compress(rows[:13_000]), "tsv").rows == 1000  # under the cap
