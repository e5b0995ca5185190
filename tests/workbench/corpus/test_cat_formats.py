"""TMX and XLIFF (the CAT tools' files): fixtures written as Trados, OmegaT and memoQ write
them and as the XLIFF 2.0 spec shows, hostile XML refused with nothing written, language
variants, units of more than two languages, inline tags, and export → import identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree
from translate.storage.tmx import tmxfile

from tests.helpers import ROOT, cli, cli_in_process, parse_pairs
from workbench.corpus import corpora as C
from workbench.corpus import exporting as E
from workbench.corpus import formats as F
from workbench.corpus import import_checks as K
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.corpus.xliff import fill_targets
from workbench.errors import WorkbenchError
from workbench.team import history

CAT = ROOT / "tests" / "fixtures" / "cat"
LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE tmx [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<tmx version="1.4"><header srclang="zh"/><body>
<tu><tuv xml:lang="zh"><seg>&lol3;</seg></tuv><tuv xml:lang="en"><seg>x</seg></tuv></tu>
</body></tmx>"""
EXTERNAL = b"""<?xml version="1.0"?>
<!DOCTYPE xliff [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file source-language="zh"
 target-language="en"><body><trans-unit id="1"><source>&secret;</source><target>x</target>
</trans-unit></body></file></xliff>"""


def _rows(name: str, src: str, tgt: str) -> K.ParsedImport:
    fmt = "tmx" if name.endswith(".tmx") else "xliff"
    return parse_pairs((CAT / name).read_bytes(), fmt, src_lang=src, tgt_lang=tgt)


def test_the_registry_names_tmx_and_xliff() -> None:
    assert {"tmx", "xliff"} <= set(F.FORMATS)
    assert "tmx" in E.EXPORT_FORMATS and "xliff" not in E.EXPORT_FORMATS
    assert {"tmx", "xlf", "xliff"} <= set(F.FILE_TYPES)
    assert F.infer_format("memory.tmx") == "tmx" and F.infer_format("job.xlf.gz") == "xliff"


def test_a_trados_tmx_utf16_with_regional_variants_codes_and_four_languages() -> None:
    parsed = _rows("trados_zh_en.tmx", "zh", "en")
    assert [(p.line, p.source, p.target) for p in parsed.pairs] == [
        (7, "请立即保存文件。", "Please save the file now."),  # <bpt>/<ept> codes dropped
        (16, "打印机已连接。", "The printer is connected."),  # <ph> dropped
        # zh-TW, zh-CN, EN-GB, de-DE: the file's usual zh variant (zh-CN), <hi> text kept
        (23, "点击确定按钮。", "Click the OK button."),
    ]
    assert [(i.line, i.kind) for i in parsed.report] == [(20, "malformed")]
    assert "no en segment" in str(parsed.report[0].message)


def test_an_omegat_tmx_with_tmx11_lang_and_an_other_language_unit() -> None:
    parsed = _rows("omegat_de_en.tmx", "de", "en")
    assert [(p.source, p.target) for p in parsed.pairs] == [
        ("Der Hund läuft durch den Schnee.", "The dog runs through the snow."),
        ("Öffnen Sie die Datei & speichern Sie sie.", "Open the file & save it."),
    ]
    assert [i.line for i in parsed.report] == [23]


def test_xliff_pairs_of_memoq_12_and_of_20_and_a_reversed_file() -> None:
    memoq = _rows("memoq_en_de.xlf", "en", "de")
    assert [(p.source, p.target, p.note) for p in memoq.pairs] == [
        ("Open the file.", "Öffnen Sie die Datei.", "approved by the client")
    ]
    assert [i.line for i in memoq.report] == [8, 12]  # no target; translate="no" units skipped
    v2 = _rows("xliff2_en_de.xlf", "en", "de")
    assert [(p.source, p.target) for p in v2.pairs] == [("The dog runs.", "Der Hund läuft.")]
    reversed_ = _rows("memoq_en_de.xlf", "de", "en")
    assert [(p.source, p.target) for p in reversed_.pairs] == [
        ("Öffnen Sie die Datei.", "Open the file.")
    ]
    with pytest.raises(WorkbenchError, match="the XLIFF file is en-US→de-DE, the corpus zh→en"):
        _rows("memoq_en_de.xlf", "zh", "en")


def test_an_xliff_version_is_its_roots_and_an_unknown_one_is_refused() -> None:
    """A 1.2 file that mentions 2.0's namespace in a comment or note is still 1.2; an XLIFF 3.0
    is refused, not read as 1.2 and returned unchanged but for an added <body/>."""
    v12 = (CAT / "memoq_en_de.xlf").read_bytes()
    mention = b"<!-- converted from urn:oasis:names:tc:xliff:document:2.0 -->"
    mentioned = v12.replace(b"<xliff", mention + b"\n<xliff", 1)
    assert mentioned != v12
    parsed = parse_pairs(mentioned, "xliff", src_lang="en", tgt_lang="de")
    assert [p.source for p in parsed.pairs] == ["Open the file."]
    assert fill_targets(mentioned, lambda texts: [(t.upper(), False) for t in texts]).translated
    v3 = (
        b'<xliff version="3.0" xmlns="urn:oasis:names:tc:xliff:document:3.0"><file><unit>'
        b"<segment><source>x</source></segment></unit></file></xliff>"
    )
    for call in (
        lambda: fill_targets(v3, lambda texts: [(t, False) for t in texts]),
        lambda: parse_pairs(v3, "xliff", src_lang="en", tgt_lang="de"),
    ):
        with pytest.raises(WorkbenchError, match=r"^XLIFF 3\.0 is not supported: XLIFF 1\.x and"):
            call()
    # entities are refused before the version is read (one of them could name it)
    named = b'<!DOCTYPE x [<!ENTITY v "3.0">]><xliff version="&v;"/>'
    with pytest.raises(WorkbenchError, match=r"^refused: the XML file declares entities"):
        fill_targets(named, lambda texts: [(t, False) for t in texts])


@pytest.mark.parametrize(("data", "fmt"), [(LAUGHS, "tmx"), (EXTERNAL, "xliff")])
def test_hostile_xml_is_refused_and_nothing_is_written(
    wb_home: Path, db_fingerprint, data: bytes, fmt: str
) -> None:
    corpus = C.create_corpus("hostile", "zh", "en")
    before = db_fingerprint()
    for call in (
        lambda: I.preview_import(corpus.id, data, fmt=fmt),
        lambda: I.import_file(corpus.id, data, fmt=fmt),
    ):
        with pytest.raises(WorkbenchError, match=r"^refused: the XML file declares entities"):
            call()
    assert db_fingerprint() == before
    with pytest.raises(WorkbenchError, match="declares entities"):
        fill_targets(data, lambda texts: [(t, False) for t in texts])


def test_not_xml_is_one_line_naming_the_line(wb_home: Path) -> None:
    corpus = C.create_corpus("broken", "zh", "en")
    with pytest.raises(WorkbenchError, match=r"^not a valid TMX file: line 2: "):
        I.import_file(corpus.id, b"<tmx version='1.4'>\n<body><tu></body></tmx>", fmt="tmx")
    with pytest.raises(WorkbenchError, match=r"^not a TMX file$"):
        I.import_file(corpus.id, b"<html/>", fmt="tmx")


def test_import_preview_reports_the_invalid_units(wb_home: Path) -> None:
    corpus = C.create_corpus("trados", "zh", "en")
    preview = I.preview_import(corpus.id, CAT / "trados_zh_en.tmx")
    assert preview.accepted == 3
    assert [(i.line, i.severity) for i in preview.report] == [(20, "error")]
    result = I.import_file(corpus.id, CAT / "trados_zh_en.tmx")
    assert result.added == 3 and result.skipped == 1


def test_tmx_export_is_a_cat_tools_file_and_imports_back_identical(
    wb_home: Path, tmp_path: Path
) -> None:
    corpus = C.create_corpus("memory", "zh", "en")
    I.import_file(corpus.id, CAT / "trados_zh_en.tmx")
    P.apply_edits(
        corpus.id,
        added=[{"source": "a < b & c", "target": "a < b & c", "split": "test", "note": "n1"}],
    )
    out = tmp_path / "memory.tmx"
    assert E.export_pairs(corpus.id, out) == 4
    root = etree.parse(str(out)).getroot()
    header = root.find("header")
    for attr in ("creationtool", "creationtoolversion", "segtype", "o-tmf", "adminlang"):
        assert header.get(attr)
    assert (header.get("srclang"), header.get("datatype")) == ("zh", "plaintext")
    tus = root.findall("body/tu")
    assert all(tu.get("creationdate", "").endswith("Z") for tu in tus)
    assert {tu.get("creationid") for tu in tus} == {history.actor_name()}  # who made them
    store = tmxfile.parsestring(out.read_bytes())  # translate-toolkit reads it as a TMX
    assert len(store.units) == 4

    again = C.create_corpus("memory again", "zh", "en")
    assert I.import_file(again.id, out).added == 4
    # every pair (source, target, split, note) comes back as it was
    assert E.export_bytes(again.id, "tsv") == E.export_bytes(corpus.id, "tsv")
    assert E.export_bytes(again.id, "tmx").count(b"<tu ") == 4


def test_cli_exports_tmx_and_imports_it(wb_home: Path, tmp_path: Path) -> None:
    corpus = C.create_corpus("cli", "de", "en")
    I.import_file(corpus.id, CAT / "omegat_de_en.tmx")
    out = tmp_path / "cli.tmx"
    done = cli_in_process("export", "--corpus", "cli", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text().count("<tu ") == 2
    (tmp_path / "laughs.tmx").write_bytes(LAUGHS)
    # a real process: were the entities expanded, that process, not the test's, would blow up
    bad = cli(
        "import",
        str(tmp_path / "laughs.tmx"),
        "--corpus",
        "cli",
        "--src-lang",
        "de",
        "--tgt-lang",
        "en",
    )
    assert bad.returncode != 0
    assert bad.stderr.startswith("error: refused: the XML file declares entities")
