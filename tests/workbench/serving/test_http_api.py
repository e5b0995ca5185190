"""The HTTP API for real: `python -m workbench serve` (uvicorn) on a free 127.0.0.1 port, a
temporary WORKBENCH_HOME with real tiny versions, called with the `libretranslatepy` client
from PyPI, httpx and schemathesis."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from libretranslatepy import LibreTranslateAPI
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.helpers import (
    ROOT,
    cli_in_process,
    free_port,
    module_home,
    stop,
    subprocess_env,
    toy_pairs,
    trained_home,
    training,
    wait_for,
)
from workbench import settings as workbench_settings
from workbench.corpus import corpora
from workbench.memory import datastore
from workbench.models import model_import, registry
from workbench.models.engines import ENGINE_QUANTIZATION
from workbench.serving import api_keys, http_app, served


@dataclass
class Api:
    url: str
    home: Path
    v1: int  # served for zh→en
    v2: int  # another zh→en version
    key: str  # a valid key, limited to RATE requests per minute
    log: Path  # what the server printed


RATE = 3


def start_server(log: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """A real server process on a free port; returns it and its URL once /health answers."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workbench", "serve", "--port", str(port), *args],
            cwd=ROOT,
            env=subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/health", timeout=5).status_code in (200, 503)
        except httpx.TransportError:
            return False

    wait_for(answers, 120, "the server to answer")
    return proc, url


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    built = trained_home(
        tmp_path_factory,
        "toy",
        training(preset="tiny"),  # learns the toy corpus by heart
        training(preset="tiny", max_steps=15),
    )
    home = built.home
    with module_home(home):
        v1, v2 = built.version_ids
        served.serve_version(v1)
        key = api_keys.create_key("tests", requests_per_minute=RATE).key
        log = home / "server.log"
        proc, url = start_server(log)  # default host: 127.0.0.1, keys optional
        try:
            wait_for(lambda: httpx.get(f"{url}/health").status_code == 200, 120, "ready")
            yield Api(url, home, v1, v2, key, log)
        finally:
            stop(proc)
            served.serve_version(v1)


def post(api: Api, path: str, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{api.url}{path}", timeout=60, **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------- LibreTranslate


def test_libretranslate_client_translates_like_the_cli(api: Api) -> None:
    client = LibreTranslateAPI(api.url)
    sources = [s for s, _ in toy_pairs()][:5]
    out = cli_in_process("translate", "--version", str(api.v1), *sources)
    assert out.returncode == 0, out.stderr
    expected = out.stdout.splitlines()
    assert [client.translate(s, "zh", "en") for s in sources] == expected
    assert expected == [t for _, t in toy_pairs()][:5]  # and it is the right translation
    # a list (LibreTranslate's JSON form of q) answers in order
    answer = post(api, "/translate", json={"q": sources, "source": "zh", "target": "en"})
    assert answer.status_code == 200 and answer.json() == {"translatedText": expected}
    # alternatives are accepted (the engine returns its best hypothesis only)
    body = {"q": sources[0], "source": "zh", "target": "en", "alternatives": 2}
    answer = post(api, "/translate", json=body)
    assert answer.json() == {"translatedText": expected[0], "alternatives": []}
    # line breaks: each line is translated
    both = "\n".join(sources[:2])
    assert client.translate(both, "zh", "en") == "\n".join(expected[:2])


def test_languages_and_frontend_settings(api: Api) -> None:
    assert LibreTranslateAPI(api.url).languages() == [
        {"code": "en", "name": "English", "targets": []},
        {"code": "zh", "name": "Chinese", "targets": ["en"]},
    ]
    settings_ = httpx.get(f"{api.url}/frontend/settings").json()
    assert settings_["charLimit"] == 5000 and settings_["keyRequired"] is False
    assert settings_["language"]["source"] == {"code": "zh", "name": "Chinese"}


def test_the_server_says_it_binds_locally_without_keys(api: Api) -> None:
    log = api.log.read_text()
    assert "API keys are off, so the server listens on 127.0.0.1 only" in log
    assert "Uvicorn running on http://127.0.0.1:" in log


# ------------------------------------------------------------------------ native


def test_v1_pins_a_version_with_beam_and_attention(api: Api) -> None:
    body = {"q": [toy_pairs()[0][0]], "version": api.v2, "beam": 3, "attention": True}
    answer = post(api, "/v1/translate", json=body)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["version"]["id"] == api.v2 and body["version"]["served"] is False
    [result] = body["translations"]
    attention = result["attention"]
    assert len(attention["weights"]) == len(attention["output_pieces"])
    assert all(len(row) == len(attention["source_pieces"]) for row in attention["weights"])
    served_one = post(api, "/v1/translate", json={"q": "ЖЩЮЯ", "source": "zh", "target": "en"})
    name = registry.get_version(api.v1).name
    assert served_one.json()["version"] == {
        "id": api.v1,
        "name": name,
        "src_lang": "zh",
        "tgt_lang": "en",
        "served": True,
    }
    assert "unknown to this model" in served_one.json()["translations"][0]["warnings"][0]
    listed = httpx.get(f"{api.url}/v1/versions").json()
    assert {(v["id"], v["served"]) for v in listed} == {(api.v1, True), (api.v2, False)}


def test_v1_translates_with_the_corpus_memory_once_it_is_built(api: Api) -> None:
    """The first request starts the store's build and hears 503 with its progress (or, on
    a fast machine, finds it built); then the 15-step version, which has not learned the
    toy corpus, writes its pairs' targets: the memory knows their exact contexts."""
    sources, targets = zip(*toy_pairs()[:4], strict=True)
    body = {"q": list(sources), "version": api.v2, "memory": True}
    first = post(api, "/v1/translate", json=body)
    if first.status_code == 503:
        error = first.json()["error"]
        assert "starting to be built" in error or "being built" in error, error
        assert "0 of 0 pairs" not in error and first.headers["Retry-After"] == "5"
    wait_for(lambda: post(api, "/v1/translate", json=body).status_code == 200, 120, "the memory")
    answer = post(api, "/v1/translate", json=body).json()
    assert [t["text"] for t in answer["translations"]] == list(targets)
    plain = post(api, "/v1/translate", json={**body, "memory": False}).json()
    assert [t["text"] for t in plain["translations"]] != list(targets)
    refused = post(api, "/v1/translate", json={**body, "engine": "ctranslate2"})
    assert refused.status_code == 400 and "handwritten decoder" in refused.json()["error"]


def test_v1_memory_decodes_with_the_memory_corpus_asked_for(api: Api) -> None:
    """``memory_corpus`` chooses the kNN-MT store as the CLI's ``--memory-corpus`` does: a
    version registered without a corpus (a copy of the 15-step one) decodes with the toy
    corpus' memory when asked, where it was refused as "not trained on a corpus here"."""
    copy = model_import.import_version(
        registry.artifact_dir(api.v2), src_lang="zh", tgt_lang="en", name="v2 without a corpus"
    )
    try:
        sources, targets = zip(*toy_pairs()[:4], strict=True)
        body = {"q": list(sources), "version": copy, "memory": True}
        refused = post(api, "/v1/translate", json=body)
        assert refused.status_code == 400 and "not trained on a corpus" in refused.json()["error"]
        body["memory_corpus"] = "toy"
        wait_for(
            lambda: post(api, "/v1/translate", json=body).status_code == 200, 120, "the memory"
        )
        answer = post(api, "/v1/translate", json=body).json()
        assert [t["text"] for t in answer["translations"]] == list(targets)
        unknown = post(api, "/v1/translate", json={**body, "memory_corpus": "\u00b2"})
        assert unknown.status_code == 400 and "no corpus" in unknown.json()["error"]
    finally:
        registry.delete_version(copy)


def test_v1_translates_with_the_ctranslate2_engine_like_the_cli(api: Api) -> None:
    sources = [s for s, _ in toy_pairs()][:4]
    out = cli_in_process("translate", "--version", str(api.v1), "--engine", "ctranslate2", *sources)
    assert out.returncode == 0, out.stderr
    body = {"q": sources, "version": api.v1, "engine": "ctranslate2", "attention": True}
    answer = post(api, "/v1/translate", json=body)
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    assert [t["text"] for t in translations] == out.stdout.splitlines()
    assert all(t["attention"]["weights"] for t in translations)  # our model's heat-map


def test_serve_engine_decodes_libretranslate_requests_with_ctranslate2(
    api: Api, tmp_path: Path
) -> None:
    """`serve --engine ctranslate2`: the LibreTranslate endpoint answers as `translate
    --engine ctranslate2` does, and the export is made while loading, before any request."""
    info = registry.get_version(api.v1)
    export = workbench_settings.ctranslate2_folder(info.artifact_path, ENGINE_QUANTIZATION)
    shutil.rmtree(export, ignore_errors=True)  # (any later use exports it again on demand)
    proc, url = start_server(tmp_path / "ct2.log", "--engine", "ctranslate2")
    try:
        wait_for(lambda: httpx.get(f"{url}/health").status_code == 200, 120, "ready")
        assert (export / "model.bin").is_file()  # loaded = exported, no request made yet
        sources = [s for s, _ in toy_pairs()][:4]
        client = LibreTranslateAPI(url)
        outputs = [client.translate(s, "zh", "en") for s in sources]
    finally:
        stop(proc)
    out = cli_in_process("translate", "--version", str(api.v1), "--engine", "ctranslate2", *sources)
    assert out.returncode == 0, out.stderr
    assert outputs == out.stdout.splitlines()
    refused = cli_in_process("serve", "--engine", "marian")
    assert refused.returncode != 0 and "invalid choice: 'marian'" in refused.stderr


def metric(api: Api, name: str) -> float:
    """A counter of version v1 from /metrics (0 before it first counts)."""
    prefix = f'{name}{{version="{api.v1}"}} '
    lines = httpx.get(f"{api.url}/metrics").text.splitlines()
    return next((float(line.removeprefix(prefix)) for line in lines if line.startswith(prefix)), 0)


def test_concurrent_requests_are_batched(api: Api) -> None:
    def batches_and_sentences() -> tuple[float, float]:
        return (
            metric(api, "workbench_decoder_batches_total"),
            metric(api, "workbench_sentences_translated_total"),
        )

    before = batches_and_sentences()
    sources = [s for s, _ in toy_pairs()] * 2
    threads = [
        threading.Thread(
            target=lambda s=s: post(
                api, "/translate", json={"q": s, "source": "zh", "target": "en"}
            )
        )
        for s in sources
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = batches_and_sentences()
    batches, sentences = after[0] - before[0], after[1] - before[1]
    assert sentences == len(sources)
    assert batches < sentences / 2, f"{batches} decoder calls for {sentences} requests"
    metrics = httpx.get(f"{api.url}/metrics").text
    assert f'workbench_translate_latency_seconds{{version="{api.v1}",quantile="0.95"}}' in metrics


# --------------------------------------------------------------------- bad input


JSON = {"content-type": "application/json"}
FORM = {"content-type": "application/x-www-form-urlencoded"}


def lt(**fields: object) -> dict:
    """A LibreTranslate request that translates 好 zh→en, with these fields changed."""
    return {"json": {"q": "好", "source": "zh", "target": "en", **fields}}


def raw(body: bytes, headers: dict[str, str] = JSON) -> dict:
    return {"content": body, "headers": headers}


@pytest.mark.parametrize(
    ("request_kwargs", "status", "message"),
    [
        (lt(q=""), 400, "q is empty"),
        (lt(q=[]), 400, "q is empty"),
        ({"json": {"source": "zh", "target": "en"}}, 400, "missing q parameter"),
        (lt(target="fr"), 400, "No version is served for zh→fr"),
        (lt(source="auto"), 400, "detection"),
        (lt(target="e\nn"), 400, "invalid target language code 'e\\nn'"),
        (lt(format="html"), 400, "html"),
        (lt(alternatives="x"), 400, "alternatives"),
        (lt(q=5), 400, "Invalid request: q must be a string or a list of strings"),
        (lt(q=["好", None]), 400, "Invalid request: q must be a string or a list of strings"),
        (lt(q="好" * 5001), 400, "exceeds the limit of 5,000"),
        (lt(q=["好"] * 129), 400, "at most 128"),
        (lt(api_key="wbk_wrong"), 403, "Invalid API key"),
        (raw(b'{"q": "\\ud800", "source": "zh", "target": "en"}'), 400, "not valid Unicode"),
        (raw(b'{"q": "x", "source": '), 400, "Invalid JSON"),
        (raw(b"[1, 2]"), 400, "expected an object"),
        (raw(b'{"q": "\xff\xfe", "source": "zh"}'), 400, "not UTF-8"),
        (raw(b"q=%FF%FE&source=zh&target=en", FORM), 400, "not UTF-8"),
        (raw(b"q=\xff&source=zh&target=en", FORM), 400, "not UTF-8"),
        (raw(b"<q/>", {"content-type": "application/xml"}), 415, "send JSON or a form"),
        (raw(b"x" * 1_000_000), 413, "larger than"),
        # numbers and nesting past what Python converts (issue 30, item 7)
        (
            raw(
                b'{"q": "x", "source": "zh", "target": "en", "alternatives": ' + b"9" * 5000 + b"}"
            ),
            400,
            "digits",
        ),
        (raw(b"q=x&source=zh&target=en&alternatives=" + b"9" * 5000, FORM), 400, "alternatives"),
        (lt(alternatives=1e308), 400, "alternatives"),
        (
            raw(b'{"q": "x", "source": "zh", "target": "en", "alternatives": 1e999}'),
            400,
            "alternatives",
        ),
        (raw(b'{"q": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"), 400, "nested too deeply"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_the_server_goes_on(
    api: Api, request_kwargs: dict, status: int, message: str
) -> None:
    answer = post(api, "/translate", **request_kwargs)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_native_bad_input_and_unknown_routes(api: Api) -> None:
    cases = [
        (post(api, "/v1/translate", json={"q": "好", "version": 99999}), 404, "does not exist"),
        (post(api, "/v1/translate", json={"q": "好"}), 400, "give a version"),
        (post(api, "/v1/translate", json={"q": "好", "version": api.v1, "beam": 99}), 400, "beam"),
        (post(api, "/v1/translate", json={"q": "好", "version": 1, "nbest": 2}), 400, "nbest"),
        (
            post(api, "/v1/translate", json={"q": "好", "version": api.v1, "engine": "marian"}),
            400,
            "engine: unknown engine 'marian': choose one of handwritten, ctranslate2",
        ),
        # ids past what the database holds, however they are written (issue 30, item 7)
        (post(api, "/v1/translate", json={"q": "好", "version": 2**63}), 404, "does not exist"),
        (post(api, "/v1/translate", json={"q": "好", "version": 1e300}), 400, "version"),
        (
            post(api, "/v1/translate", **raw(b'{"q": "x", "version": 1' + b"0" * 5000 + b"}")),
            400,
            "digits",
        ),
        (post(api, "/v1/translate", json={"q": "好", "version": "9" * 5000}), 400, "version"),
        (
            post(api, "/v1/translate", **raw(b'{"q": "x", "version": 1, "beam": 1e999}')),
            400,
            "beam",
        ),
        # a wrong q is named as the client wrote it, not by pydantic's path (q.str)
        (
            post(api, "/v1/translate", json={"q": ["请戴好口罩。", None], "version": api.v1}),
            400,
            "Invalid request: q must be a string or a list of strings",
        ),
        (
            post(api, "/v1/translate", json={"q": 123, "version": api.v1}),
            400,
            "Invalid request: q must be a string or a list of strings",
        ),
        # an unknown memory corpus is refused even when neither memory nor matches read it
        (
            post(api, "/v1/translate", json={"q": "好", "version": api.v1, "memory_corpus": "x7"}),
            400,
            "no corpus 'x7'",
        ),
        (httpx.get(f"{api.url}/translate"), 405, "Method Not Allowed"),
        (httpx.get(f"{api.url}/nowhere"), 404, "Not Found"),
    ]
    for answer, status, message in cases:
        assert answer.status_code == status, answer.text
        assert message in answer.json()["error"]


def test_a_memory_build_not_started_yet_says_it_is_starting() -> None:
    """The first ``memory`` request finds the build's pairs not counted yet: "0 of 0 pairs
    encoded" read as an empty memory."""
    starting = http_app.building_text(7, datastore.BuildProgress())
    assert starting == "The corpus memory of version 7 is starting to be built: try again shortly"
    going = http_app.building_text(7, datastore.BuildProgress(done=1200, total=5000))
    assert "is being built (1,200 of 5,000 pairs encoded)" in going


# ------------------------------------------------------------------- translate_file


def xliff(*sources: str) -> bytes:
    """An XLIFF 1.2 file (zh→en) with one unit to translate per source."""
    units = "".join(
        f'<trans-unit id="{i}"><source>{escape(s)}</source></trans-unit>'
        for i, s in enumerate(sources, 1)
    )
    return (
        '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file original="t" '
        'source-language="zh" target-language="en" datatype="plaintext">'
        f"<body>{units}</body></file></xliff>"
    ).encode()


def post_file(api: Api, data: bytes, **fields: str) -> httpx.Response:
    files = {"file": ("t.xlf", data, "application/xliff+xml")}
    return post(api, "/v1/translate_file", files=files, data=fields)


def test_translate_file_counts_its_text_against_the_characters_limit(api: Api) -> None:
    """A key's characters-per-request limit, and the server's, hold for the text a file asks
    to translate, refused as ``/v1/translate`` refuses the same texts."""
    key = api_keys.create_key("files", chars_per_request=20).key
    sources = [s for s, _ in toy_pairs()]
    assert len(sources[0]) <= 20 < sum(map(len, sources))
    small = post_file(api, xliff(sources[0]), version=str(api.v1), api_key=key)
    assert small.status_code == 200, small.text
    assert small.headers["x-units-translated"] == "1"
    over = post_file(api, xliff(*sources), version=str(api.v1), api_key=key)
    texts = post(api, "/v1/translate", json={"q": sources, "version": api.v1, "api_key": key})
    assert over.status_code == texts.status_code == 400, over.text
    assert over.json() == texts.json()
    assert "exceeds the limit of 20 characters" in over.json()["error"]
    # without a key: the server's limit (5,000)
    many = [f"{sources[0]}{i}" for i in range(600)]
    assert sum(map(len, many)) > 5000
    refused = post_file(api, xliff(*many), version=str(api.v1))
    assert refused.status_code == 400
    assert "exceeds the limit of 5,000 characters" in refused.json()["error"]


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"version": "\u00b2"}, 400, "version must be a version id"),
        ({"version": "9" * 5000}, 400, "version must be a version id"),
        ({"version": "99999"}, 404, "does not exist"),
        ({"beam": "\u00b2"}, 400, "beam must be 1 to"),
        ({"beam": "0"}, 400, "beam must be 1 to"),
        ({"memory_exact": "true", "memory_corpus": "\u00b2"}, 400, "no corpus '\u00b2'"),
        ({"memory_corpus": "nosuch"}, 400, "no corpus 'nosuch'"),
        # a pair nothing serves: 400, as LibreTranslate's /translate answers it
        ({"version": "", "source": "zh", "target": "fr"}, 400, "No version is served for zh→fr"),
        ({"version": ""}, 400, "give a version, or a source and a target"),
        ({"engine": "ctranslate2"}, 400, "unknown field(s) 'engine'"),  # not silently ignored
        ({"source": "fr", "target": "de"}, 400, "translates zh→en, not fr→de"),
    ],
)
def test_translate_file_bad_fields_are_a_4xx(
    api: Api, fields: dict[str, str], status: int, message: str
) -> None:
    answer = post_file(api, xliff(toy_pairs()[0][0]), **{"version": str(api.v1), **fields})
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_another_language_pair_is_refused_in_a_request_a_memory_and_a_file(api: Api) -> None:
    """A pinned version asked for another pair, a memory corpus of another pair (its exact
    matches would answer in the wrong language) and an XLIFF file of other languages: each a
    400 naming both pairs, where they were answered 200 in the version's languages."""
    source = toy_pairs()[0][0]
    asked = {"q": source, "version": api.v1}
    pinned = post(api, "/v1/translate", json={**asked, "source": "fr", "target": "de"})
    assert pinned.status_code == 400 and "translates zh→en, not fr→de" in pinned.json()["error"]
    for pair in ({"source": "zh", "target": "en"}, {"source": "auto"}, {"target": " EN"}):
        agreeing = post(api, "/v1/translate", json={**asked, **pair})
        assert agreeing.status_code == 200, (pair, agreeing.text)
    padded = post(api, "/v1/translate", json={"q": source, "source": " zh", "target": "en"})
    assert padded.status_code == 200, padded.text  # the served version, found as before
    corpora.create_corpus("Reversed toy", "en", "zh")  # the module's home (the api fixture)
    memory = {"memory_corpus": "Reversed toy", "memory_exact": True}
    other = post(api, "/v1/translate", json={**asked, **memory})
    assert other.status_code == 400, other.text
    assert "but corpus 'Reversed toy' is en→zh" in other.json()["error"]
    french = xliff(source).replace(b'"zh" target-language="en"', b'"fr" target-language="de"')
    assert french != xliff(source)
    refused = post_file(api, french, version=str(api.v1))
    assert refused.status_code == 400
    assert refused.json()["error"] == "the XLIFF file is fr→de, the model version zh→en"
    two = xliff(source).replace(b"</xliff>", french.split(b">", 1)[1].replace(b"</xliff>", b""))
    two += b"</xliff>"
    mixed = post_file(api, two, version=str(api.v1))  # a second <file> of other languages
    assert mixed.status_code == 400, mixed.text
    assert "<file> elements are of different languages (zh→en, fr→de)" in mixed.json()["error"]
    regional = xliff(source).replace(b'"zh" target-language="en"', b'"zh-CN" target-language="en"')
    filled = post_file(api, regional, version=str(api.v1), secret="ignored")  # as /translate
    assert filled.status_code == 200, filled.text


def test_a_chunked_oversized_body_is_refused(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 10_000

    answer = post(api, "/translate", content=chunks(), headers={"content-type": "application/json"})
    assert answer.status_code == 413


def _sent_and_closed(api: Api, head: bytes) -> None:
    """Send ``head`` on a connection of our own and close it without reading an answer."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head)


def _requests_counted(api: Api, path: str) -> Counter[str]:
    """/metrics' request counts of ``path`` by status."""
    counted: Counter[str] = Counter()
    for line in httpx.get(f"{api.url}/metrics").text.splitlines():
        if line.startswith(f'workbench_http_requests_total{{path="{path}",'):
            labels, n = line.rsplit(" ", 1)
            counted[labels.split('status="')[1].rstrip('"}')] += int(float(n))
    return counted


def test_a_client_that_leaves_mid_body_is_no_server_error(api: Api) -> None:
    """Issue 30, item 7: a client that closed its connection before sending the whole body
    was logged as an internal error with a traceback, and counted as a 500. It is counted
    as 499, nginx's "client closed request", and logged as one access line."""
    logged, before = len(api.log.read_bytes()), _requests_counted(api, "/translate")
    _sent_and_closed(
        api,
        b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"q": "',
    )
    wait_for(
        lambda: _requests_counted(api, "/translate")["499"] == before["499"] + 1,
        30,
        "the closed request to be counted",
    )
    after = _requests_counted(api, "/translate")
    assert after["500"] == before["500"]
    log = api.log.read_bytes()[logged:].decode()
    assert "internal error" not in log and "Traceback" not in log, log
    assert '"POST /translate" 499' in log
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_a_content_length_python_cannot_read_is_a_4xx(api: Api) -> None:
    """A Content-Length of 5,000 digits (or of digits other than 0-9) is refused before
    the body is read, never a 500 (``/v1/translate_file`` too)."""
    host, port = api.url.removeprefix("http://").split(":")
    routes = [(b"/translate", b"application/json"), (b"/v1/translate_file", b"multipart/form-data")]
    for path, kind in routes:
        for length in (b"9" * 5000, "\u00b2".encode("latin-1")):
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(
                    b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: " + kind + b"\r\n"
                    b"Connection: close\r\nContent-Length: " + length + b"\r\n\r\n{}"
                )
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
            status = int(answer.split(b" ", 2)[1])
            assert 400 <= status < 500, (path, answer[:300])
    assert _requests_counted(api, "/translate")["500"] == 0


# ----------------------------------------------------------------- keys and limits


def test_a_key_is_limited_per_minute_and_never_logged(api: Api) -> None:
    client = LibreTranslateAPI(api.url, api_key=api.key)
    source = toy_pairs()[0][0]
    for _ in range(RATE):
        assert client.translate(source, "zh", "en")
    form = {"q": source, "source": "zh", "target": "en"}
    limited = post(api, f"/translate?api_key={api.key}", data=form)
    assert limited.status_code == 429
    assert limited.json()["error"].startswith("Slowdown:")
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    with pytest.raises(urllib.error.HTTPError) as denied:
        LibreTranslateAPI(api.url, api_key="wbk_wrong").translate(source, "zh", "en")
    assert denied.value.code == 403
    assert api.key not in api.log.read_text()
    assert api.key not in httpx.get(f"{api.url}/metrics").text


def test_required_keys_and_a_revoked_key(api: Api, tmp_path: Path) -> None:
    new = api_keys.create_key("short-lived", chars_per_request=3)
    proc, url = start_server(tmp_path / "keys.log", "--require-keys")
    try:
        body = {"q": "好", "source": "zh", "target": "en"}
        missing = httpx.post(f"{url}/translate", json=body)
        assert missing.status_code == 400 and "API key is required" in missing.json()["error"]
        ok = httpx.post(f"{url}/translate", json={**body, "api_key": new.key})
        assert ok.status_code == 200, ok.text
        long = httpx.post(f"{url}/translate", json={**body, "q": "好好好好", "api_key": new.key})
        assert long.status_code == 400 and "limit of 3 characters" in long.json()["error"]
        assert httpx.get(f"{url}/frontend/settings").json()["keyRequired"] is True
        # The GET routes that show stored data or the traffic ask for a key that may read
        # (a viewer's); LibreTranslate's /languages and /health stay public.
        for path in ("/v1/versions", "/metrics"):
            missing = httpx.get(f"{url}{path}")
            assert missing.status_code == 400, (path, missing.text)
            assert "API key is required" in missing.json()["error"]
            wrong = httpx.get(f"{url}{path}", params={"api_key": "wbk_wrong"})
            assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
            assert httpx.get(f"{url}{path}", params={"api_key": new.key}).status_code == 200
        versions = httpx.get(f"{url}/v1/versions", params={"api_key": new.key}).json()
        assert {v["id"] for v in versions} == {api.v1, api.v2}
        languages = httpx.get(f"{url}/languages")
        assert languages.status_code == 200 and {x["code"] for x in languages.json()} >= {"zh"}
        assert httpx.get(f"{url}/health").status_code == 200
        api_keys.revoke_key(new.info.id)
        revoked = httpx.post(f"{url}/translate", json={**body, "api_key": new.key})
        assert revoked.status_code == 403
        revoked = httpx.get(f"{url}/v1/versions", params={"api_key": new.key})
        assert revoked.status_code == 403
    finally:
        stop(proc)
    assert "API keys are required" in (tmp_path / "keys.log").read_text()


# -------------------------------------------------------------- health, switching


def test_health_reports_a_served_version_that_cannot_load(api: Api) -> None:
    broken = model_import.import_version(
        registry.artifact_dir(api.v2), src_lang="en", tgt_lang="de", name="broken copy"
    )
    weights = registry.artifact_dir(broken) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")
    served.serve_version(broken)
    try:
        wait_for(
            lambda: httpx.get(f"{api.url}/health").json()["status"] == "error", 60, "the failure"
        )
        health = httpx.get(f"{api.url}/health")
        assert health.status_code == 503 and "do not match" in health.json()["error"]
        answer = post(api, "/translate", json={"q": "hello", "source": "en", "target": "de"})
        assert answer.status_code == 500 and "Cannot translate" in answer.json()["error"]
    finally:
        registry.delete_version(broken)
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_switching_the_served_version_under_load_drops_nothing(api: Api) -> None:
    """Clients keep translating while the pair's version changes three times: every request
    is answered, and by a version that was served while it was in flight (one sent after a
    switch is answered by the new version)."""
    sources = [s for s, _ in toy_pairs()]
    answers: list[tuple[float, float, httpx.Response]] = []  # (sent, answered, the answer)
    running = threading.Event()
    running.set()

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as session:
            while running.is_set():
                body = {"q": sources[i % len(sources)], "source": "zh", "target": "en"}
                sent = time.monotonic()
                answer = session.post(f"{api.url}/v1/translate", json=body)
                answers.append((sent, time.monotonic(), answer))
                i += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    switched: list[tuple[float, float, int]] = []  # (began, committed by, the new version)
    try:
        for version in (api.v2, api.v1, api.v2):
            time.sleep(1.0)
            began = time.monotonic()
            served.serve_version(version)
            switched.append((began, time.monotonic(), version))
        time.sleep(1.0)
    finally:
        running.clear()
        for t in threads:
            t.join()
        served.serve_version(api.v1)
    assert answers and all(a.status_code == 200 for *_, a in answers), {a.text for *_, a in answers}
    for sent, answered, answer in answers:
        done = [version for _, end, version in switched if end <= sent]
        allowed = {done[-1] if done else api.v1} | {
            version for start, end, version in switched if end > sent and start <= answered
        }  # the version served when it was sent, or one switched to while it was in flight
        assert answer.json()["version"]["id"] in allowed
    used = {a.json()["version"]["id"] for *_, a in answers}
    assert used == {api.v1, api.v2}


# -------------------------------------------------------------------- schemathesis


@schemathesis.check
def error_has_a_message(ctx: object, response: schemathesis.Response, case: object) -> None:
    """Every error answers JSON with a one-line message (LibreTranslate's "error")."""
    if response.status_code >= 400:
        body = json.loads(response.content)
        assert isinstance(body.get("error"), str) and body["error"], body
        assert "\n" not in body["error"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_schema_holds_and_nothing_is_a_500(api: Api, mode: GenerationMode) -> None:
    """Schemathesis' cases for every operation of the server's own OpenAPI schema, valid and
    invalid (a bounded number each): no 500, and every error is JSON with a message.
    (Driven by Hypothesis directly: schemathesis' pytest loader does not run on pytest 9.)"""
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {(o.method.upper(), o.path) for o in operations} >= {
        ("POST", "/translate"), ("GET", "/languages"), ("POST", "/v1/translate"),
        ("GET", "/v1/versions"), ("GET", "/health"), ("GET", "/metrics"),
    }  # fmt: skip
    for operation in operations:
        if mode == GenerationMode.NEGATIVE and not list(operation.body):
            continue  # nothing to get wrong: no body, no parameters

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=15,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def holds(case: schemathesis.Case) -> None:
            case.call_and_validate(
                base_url=api.url, checks=[not_a_server_error, error_has_a_message], timeout=60
            )

        holds()
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_the_http_front_end_holds_no_sql_and_no_torch() -> None:
    """Like the UI and the CLI, the HTTP layer only calls workbench services."""
    import ast

    for name in ("http_app.py", "runtime.py", "protocol.py"):
        tree = ast.parse((ROOT / "workbench" / "serving" / name).read_text("utf-8"))
        modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in modules if m.split(".")[0] in ("db", "sqlalchemy", "torch")], name
