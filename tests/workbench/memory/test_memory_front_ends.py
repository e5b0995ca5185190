"""The memory and XLIFF files through the front ends, with a real tiny version: the CLI
(``translate --matches``, ``--memory-exact``, ``--xliff``) and a real HTTP server
(``/v1/translate``'s memory options, ``/v1/translate_file``), XLIFF 1.2 and 2.0 with their
tags intact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from lxml import etree

from tests.helpers import (
    ROOT,
    cli_in_process,
    module_home,
    stop,
    toy_pairs,
    trained_home,
    training,
    wait_for,
)
from tests.workbench.serving.test_http_api import start_server
from workbench.corpus import corpora as C
from workbench.corpus import pairs as P

CAT = ROOT / "tests" / "fixtures" / "cat"
X12 = "{urn:oasis:names:tc:xliff:document:1.2}"
X20 = "{urn:oasis:names:tc:xliff:document:2.0}"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, int]]:
    built = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    with module_home(built.home):
        yield built.home, built.corpus_id, built.version_ids[0]


def as_toys(name: str) -> bytes:
    """A CAT fixture (en→de) labelled zh→en, the toy version's languages: a file of other
    languages is refused (``fill_targets``), and the tags and states are what is tested."""
    data = (CAT / name).read_bytes()
    for before, after in (
        (b'"en-US" target-language="de-DE"', b'"zh" target-language="en"'),
        (b'srcLang="en-US" trgLang="de"', b'srcLang="zh" trgLang="en"'),
    ):
        data = data.replace(before, after)
    assert b"de-DE" not in data and b'"de"' not in data
    return data


def _tags(element: etree._Element) -> list[tuple[str, dict[str, str]]]:
    """The inline elements inside a source or target, in order, with their attributes."""
    return [(e.tag, dict(e.attrib)) for e in element.iterdescendants() if isinstance(e.tag, str)]


def check_xliff12(data: bytes) -> None:
    root = etree.fromstring(data)
    units = {u.get("id"): u for u in root.iter(f"{X12}trans-unit")}
    for uid in ("1", "2"):  # filled, tags as in the source, marked for review
        source, target = units[uid].find(f"{X12}source"), units[uid].find(f"{X12}target")
        assert target is not None and "".join(target.itertext()).strip()
        assert _tags(target) == _tags(source)
        assert target.get("state") == "needs-review-translation"
        assert target.get("state-qualifier") == "mt-suggestion"
    assert units["3"].find(f"{X12}target") is None  # translate="no"
    assert units["5"].find(f"{X12}target") is None  # in a translate="no" group
    kept = units["4"].find(f"{X12}target")  # a translator's target stays
    assert "".join(kept.itertext()) == "Öffnen Sie die <b>Datei</b>."
    assert kept.get("state") == "translated"


def check_xliff20(data: bytes) -> None:
    root = etree.fromstring(data)
    segments = {s.get("id"): s for s in root.iter(f"{X20}segment") if s.get("id")}
    for sid in ("s1", "s2"):
        source, target = segments[sid].find(f"{X20}source"), segments[sid].find(f"{X20}target")
        assert target is not None and _tags(target) == _tags(source)
        assert (segments[sid].get("state"), segments[sid].get("subState")) == (
            "translated",
            "workbench:mt",
        )
    unit4 = next(u for u in root.iter(f"{X20}unit") if u.get("id") == "u4")
    mrk = unit4.find(f"{X20}segment/{X20}target/{X20}mrk")
    assert mrk is not None and mrk.text == "Acme Cloud"  # translate="no" text copied
    untouched = next(u for u in root.iter(f"{X20}unit") if u.get("id") == "u2")
    assert untouched.find(f"{X20}segment/{X20}target") is None
    final = next(u for u in root.iter(f"{X20}unit") if u.get("id") == "u3")
    assert final.find(f"{X20}segment/{X20}target").text == "Der Hund läuft."


def test_cli_translates_xliff_12_and_20_with_tags_intact(
    home: tuple[Path, int, int], tmp_path: Path
) -> None:
    _, _, version = home
    for name, check in (("memoq_en_de.xlf", check_xliff12), ("xliff2_en_de.xlf", check_xliff20)):
        given, out = tmp_path / f"in-{name}", tmp_path / name
        given.write_bytes(as_toys(name))
        done = cli_in_process(
            "translate", "--version", str(version), "--xliff", str(given), "--out", str(out)
        )
        assert done.returncode == 0, done.stderr
        assert "translated" in done.stdout
        check(out.read_bytes())
    other = cli_in_process(
        "translate", "--version", str(version), "--xliff", str(CAT / "memoq_en_de.xlf"),
        "--out", str(tmp_path / "other.xlf"),
    )  # fmt: skip
    assert other.returncode == 2
    assert other.stderr == "error: the XLIFF file is en-US→de-DE, the model version zh→en\n"
    assert not (tmp_path / "other.xlf").exists()
    laughs = tmp_path / "laughs.xlf"
    laughs.write_bytes(b'<!DOCTYPE x [<!ENTITY a "b">]><xliff version="1.2"/>')
    refused = cli_in_process(
        "translate",
        "--version",
        str(version),
        "--xliff",
        str(laughs),
        "--out",
        str(tmp_path / "o.xlf"),
    )
    assert refused.returncode != 0 and refused.stderr.startswith("error: refused: ")
    assert not (tmp_path / "o.xlf").exists()
    # a file translation has no quantization to apply: asked for, it is refused, not ignored
    quantized = cli_in_process(
        "translate", "--version", str(version), "--engine", "ctranslate2",
        "--quantization", "int8", "--xliff", str(tmp_path / "in-memoq_en_de.xlf"),
        "--out", str(tmp_path / "q.xlf"),
    )  # fmt: skip
    assert quantized.returncode != 0 and "--quantization" in quantized.stderr
    assert not (tmp_path / "q.xlf").exists()


def test_cli_memory_matches_and_exact_switch(home: tuple[Path, int, int]) -> None:
    _, corpus_id, version = home
    source, target = toy_pairs()[0]
    model = cli_in_process("translate", "--version", str(version), "--matches", "2", source)
    assert model.returncode == 0, model.stderr
    record = json.loads(model.stdout)
    assert record["origin"] == "model"  # off by default in the CLI
    assert record["matches"][0]["score"] == 100.0 and record["matches"][0]["target"] == target
    pid = P.add_pair(corpus_id, source, "A curated correction.")
    exact = cli_in_process("translate", "--version", str(version), "--memory-exact", source)
    assert exact.stdout.splitlines() == ["A curated correction."]  # the newest exact match
    both = json.loads(
        cli_in_process(
            "translate", "--version", str(version), "--memory-exact", "--matches", "3", source
        ).stdout
    )
    assert both["origin"] == "memory"
    assert {m["pair_id"] for m in both["matches"]} >= {pid}
    # a memory or a glossary of another pair would put its language into the output: refused
    reversed_ = C.create_corpus("Reversed", "en", "zh")
    P.add_pair(reversed_.id, "hello", "你好")
    for option in (["--memory-exact", "--memory-corpus"], ["--glossary"]):
        other = cli_in_process("translate", "--version", str(version), *option, "Reversed", "hello")
        assert other.returncode == 2 and other.stdout == "", other.stdout
        assert other.stderr == (
            f"error: Version {version} translates zh→en but corpus 'Reversed' is en→zh.\n"
        )


def test_http_memory_options_and_translate_file(
    home: tuple[Path, int, int], tmp_path: Path
) -> None:
    _, corpus_id, version = home
    proc, url = start_server(tmp_path / "server.log")
    try:
        wait_for(lambda: httpx.get(f"{url}/health").status_code == 200, 120, "ready")
        source, target = toy_pairs()[1]
        plain = httpx.post(
            f"{url}/v1/translate", json={"q": [source], "version": version}, timeout=60
        )
        assert plain.status_code == 200, plain.text
        assert plain.json()["translations"][0]["origin"] == "model"
        body = {"q": [source], "version": version, "memory_exact": True, "matches": 2}
        answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()["translations"][0]
        assert (answer["origin"], answer["text"]) == ("memory", target)
        assert answer["matches"][0]["score"] == 100.0
        pid = P.add_pair(corpus_id, source + "!", "Saved just now.")
        body = {"q": [source + "!"], "version": version, "memory_exact": True, "matches": 1}
        answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()["translations"][0]
        assert (answer["text"], answer["matches"][0]["pair_id"]) == ("Saved just now.", pid)
        P.apply_edits(corpus_id, deleted=[pid])
        answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()["translations"][0]
        assert answer["origin"] == "model" and all(m["pair_id"] != pid for m in answer["matches"])

        for name, check in (
            ("memoq_en_de.xlf", check_xliff12),
            ("xliff2_en_de.xlf", check_xliff20),
        ):
            files = {"file": (name, as_toys(name), "application/xliff+xml")}
            done = httpx.post(
                f"{url}/v1/translate_file", files=files, data={"version": str(version)}, timeout=60
            )
            assert done.status_code == 200, done.text
            assert done.headers["content-type"].startswith("application/xliff+xml")
            assert int(done.headers["x-units-translated"]) >= 2
            check(done.content)
        hostile = {"file": ("x.xlf", b'<!DOCTYPE x [<!ENTITY a SYSTEM "file:///etc/passwd">]><x/>')}
        refused = httpx.post(
            f"{url}/v1/translate_file", files=hostile, data={"version": str(version)}, timeout=60
        )
        assert refused.status_code == 400 and "declares entities" in refused.json()["error"]
        missing = httpx.post(f"{url}/v1/translate_file", data={"version": str(version)}, timeout=60)
        assert missing.status_code == 415
    finally:
        stop(proc)
