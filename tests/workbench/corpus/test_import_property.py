"""Property: an import either succeeds, or raises WorkbenchError and changes nothing.

Hypothesis feeds random bytes, near-valid files with one corrupted line, and random
aligned pairs, in every format, through the real ``import_file`` (with a tiny chunk size,
so failures also happen after earlier chunks were written inside the transaction). After
every error the database digest (all rows of all tables, FTS health, triggers) must be
byte-for-byte what it was; after a success exactly ``added`` pairs must have appeared.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.corpus import corpora as C
from workbench.corpus import exporting as E
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.corpus.import_checks import NothingToImport
from workbench.errors import WorkbenchError

CELL = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from(["\t", ",", '"', "\n", "\r", "\x00", " ", "你", "好", "\ufeff", "a"]),
    max_size=12,
)
PLAIN = st.text(alphabet="abc 你好世界xyz", min_size=1, max_size=10).filter(str.strip)


@st.composite
def near_valid(draw: st.DrawFn) -> tuple[str, bytes]:
    """A mostly valid file in a random format, sometimes with one broken line."""
    fmt = draw(st.sampled_from(["tsv", "csv", "jsonl", "tatoeba"]))
    n = draw(st.integers(0, 12))
    pairs = [(draw(PLAIN), draw(PLAIN)) for _ in range(n)]
    if fmt == "tsv":
        lines = [f"{a}\t{b}" for a, b in pairs]
    elif fmt == "csv":
        lines = [f'"{a}","{b}"' for a, b in pairs]
    elif fmt == "jsonl":
        lines = [json.dumps({"source": a, "target": b}, ensure_ascii=False) for a, b in pairs]
    else:
        lines = [f"{b}\t{a}\tCC-BY 2.0 (France) Attribution: tatoeba.org #1" for a, b in pairs]
    if draw(st.booleans()):
        bad = draw(
            st.sampled_from(
                ["one column only", "a\tb\tc\td\te\tf", '{"source": 1', '"open,quote', "\x00"]
            )
            | CELL
        )
        lines.insert(draw(st.integers(0, len(lines))), bad)
    data = "\n".join(lines).encode()
    if draw(st.booleans()) and data:
        pos = draw(st.integers(0, len(data) - 1))
        data = data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80\x80"])) + data[pos:]
    return fmt, data


@pytest.fixture
def seeded(db_url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(I, "IMPORT_CHUNK", 3)
    info = C.create_corpus("prop", "zh", "en")
    P.apply_edits(
        info.id, added=[{"source": "abc", "target": "你好"}, {"source": "x", "target": "y"}]
    )
    return info.id


def _check(corpus_id: int, fingerprint, fmt: str, data: bytes, tgt: bytes | None = None) -> None:
    before = fingerprint()
    count = C.get_corpus(corpus_id).pair_count
    try:
        result = I.import_file(corpus_id, data, fmt=fmt, tgt=tgt)
    except WorkbenchError as exc:
        assert "\n" not in str(exc)
        assert fingerprint() == before, f"database changed after error: {exc}"
        return
    assert C.get_corpus(corpus_id).pair_count == count + result.added
    if result.added == 0:
        assert fingerprint() == before


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(case=near_valid())
def test_near_valid_files(seeded: int, db_fingerprint, case: tuple[str, bytes]) -> None:
    _check(seeded, db_fingerprint, *case)


@SETTINGS
@given(fmt=st.sampled_from(["tsv", "csv", "jsonl", "tatoeba"]), data=st.binary(max_size=200))
def test_random_bytes(seeded: int, db_fingerprint, fmt: str, data: bytes) -> None:
    _check(seeded, db_fingerprint, fmt, data)


@SETTINGS
@given(
    src=st.lists(CELL.filter(lambda s: "\n" not in s), max_size=6),
    tgt=st.lists(CELL.filter(lambda s: "\n" not in s), max_size=6),
)
def test_aligned_files(seeded: int, db_fingerprint, src: list[str], tgt: list[str]) -> None:
    _check(seeded, db_fingerprint, "aligned", "\n".join(src).encode(), "\n".join(tgt).encode())


TEXT = st.text(
    alphabet=st.characters(codec="utf-8")
    | st.sampled_from(["\x00", "\x07", "\x1b", "\x9b", "\u202e", "\ufeff", "\u200b", "\t"])
    | st.sampled_from(["\ud800", "\udfff"])  # lone surrogates: JSON can carry them
    | st.sampled_from(['"', ",", "\\", " ", "\n", "\r", "你", "a"]),
    max_size=10,
) | st.sampled_from(["source", "target", "Source "])  # header look-alikes


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(st.tuples(TEXT, TEXT, TEXT), min_size=1, max_size=8))
def test_export_then_import_round_trips(
    db_url: str, tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str, str]]
) -> None:
    """Whatever an import accepts, the corpus's own TSV/CSV/JSONL export imports again to the
    same pairs, on both backends (a JSONL "\\u0000" used to be stored on SQLite and break the
    TSV export, and to be an internal DataError on PostgreSQL)."""
    data = "\n".join(json.dumps({"source": s, "target": t, "note": n}) for s, t, n in rows).encode()
    name = f"rt{len(C.list_corpora())}"
    first = C.create_corpus(name, "zh", "en")
    try:
        I.import_file(first.id, data, fmt="jsonl")
    except NothingToImport:  # every row invalid: nothing to round-trip
        assert C.get_corpus(first.id).pair_count == 0
        return
    original = P.search_pairs(first.id, page_size=1000).rows.drop(columns="id")
    folder = tmp_path_factory.mktemp("export")
    for fmt in E.EXPORT_FORMATS:
        path = folder / f"{name}.{fmt}"
        assert E.export_pairs(first.id, path) == len(original)
        copy = C.create_corpus(f"{name} {fmt}", "zh", "en")
        result = I.import_file(copy.id, path)
        assert result.issue_counts.get("control_chars", 0) == 0  # exported text is clean
        again = P.search_pairs(copy.id, page_size=1000).rows.drop(columns="id")
        assert again.equals(original), fmt
