"""The serving services on real tiny versions: served pairs, API keys, rate limits, metrics,
the batcher (with the real translation service), and their CLI commands."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from sqlalchemy import text

from tests.helpers import (
    cli_in_process,
    module_home,
    toy_pairs,
    train_version,
    trained_home,
    training,
)
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.models import registry, translation
from workbench.models.translation import DecodingOptions
from workbench.serving import api_keys, launcher, served
from workbench.serving.batching import BatchDone, Batcher, Busy, Engine, default_engine
from workbench.serving.limits import RateLimiter
from workbench.serving.metrics import Metrics, percentile
from workbench.storage import engine


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """Two real tiny zh→en versions on the toy corpus (those of the pool's and the HTTP API's
    tests)."""
    built = trained_home(
        tmp_path_factory, "toy", training(preset="tiny"), training(preset="tiny", max_steps=15)
    )
    with module_home(built.home):
        v1, v2 = built.version_ids
        yield v1, v2


@pytest.fixture
def clean(versions: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """Nothing served and no keys, before and after the test."""

    def wipe() -> None:
        with engine().begin() as conn:
            conn.execute(text("DELETE FROM served_versions"))
            conn.execute(text("DELETE FROM api_keys"))

    wipe()
    yield versions
    wipe()


# --------------------------------------------------------------------- served versions


def test_one_version_answers_per_pair_and_a_switch_replaces_it(clean: tuple[int, int]) -> None:
    v1, v2 = clean
    with pytest.raises(WorkbenchError, match="No version is served for zh→en"):
        served.served_version_id("zh", "en")
    assert served.serve_version(v1) is None
    assert served.served_version_id("ZH", "en") == v1  # codes compared without case
    assert served.serve_version(v2) == v1
    assert served.serve_version(v2) is None  # already served: nothing replaced
    [pair] = served.list_served()
    assert (pair.pair, pair.version_id) == ("zh→en", v2)
    assert served.serving_of(v1) is None and served.serving_of(v2) == pair
    served.stop_serving(v2)
    assert served.list_served() == []
    with pytest.raises(WorkbenchError, match="is not served"):
        served.stop_serving(v2)
    with pytest.raises(WorkbenchError, match="does not exist"):
        served.serve_version(10_000)


def test_deleting_a_served_version_stops_serving_its_pair(clean: tuple[int, int]) -> None:
    corpus_id = registry.get_version(clean[0]).corpus_id
    assert corpus_id is not None
    _, doomed = train_version(corpus_id, preset="tiny", max_steps=2)
    served.serve_version(doomed)
    registry.delete_version(doomed)
    assert served.list_served() == []


def test_the_curl_example_is_a_valid_libretranslate_request() -> None:
    example = served.curl_example("zh", "en", "http://127.0.0.1:5000")
    assert example.startswith("curl -s http://127.0.0.1:5000/translate ")
    body = json.loads(example.split("-d '")[1].rstrip("'"))
    assert body == {"q": "YOUR TEXT", "source": "zh", "target": "en"}


# --------------------------------------------------------------------------- API keys


def test_keys_are_stored_hashed_and_stop_working_when_revoked(clean: tuple[int, int]) -> None:
    new = api_keys.create_key("translator plugin", requests_per_minute=30)
    assert new.key.startswith(api_keys.KEY_PREFIX) and len(new.key) > 30
    with engine().connect() as conn:
        stored = conn.execute(text("SELECT * FROM api_keys")).all()
    assert new.key not in repr(stored), "the key itself must never be stored"
    assert api_keys.digest(new.key) in repr(stored)
    found = api_keys.find_active_key(new.key)
    assert found is not None and found.id == new.info.id and found.requests_per_minute == 30
    assert found.shown == new.key[:8] + "…"
    assert api_keys.find_active_key(new.key + "x") is None
    assert api_keys.find_active_key("not-a-key") is None
    api_keys.revoke_key(new.info.id)
    assert api_keys.find_active_key(new.key) is None
    [listed] = api_keys.list_keys()
    assert not listed.active
    with pytest.raises(WorkbenchError, match="already revoked"):
        api_keys.revoke_key(new.info.id)
    with pytest.raises(WorkbenchError, match="does not exist"):
        api_keys.revoke_key(10_000)


@pytest.mark.parametrize(
    ("name", "rpm", "chars", "error"),
    [
        ("", None, None, "must not be empty"),
        ("ok", 0, None, "requests per minute must be a whole number"),
        ("ok", None, -5, "characters per request must be a whole number"),
        ("ok", True, None, "requests per minute"),
    ],
)
def test_bad_key_settings_are_refused(
    clean: tuple[int, int], name: str, rpm: object, chars: object, error: str
) -> None:
    with pytest.raises(WorkbenchError, match=error):
        api_keys.create_key(name, rpm, chars)  # type: ignore[arg-type]
    assert api_keys.list_keys() == []


# ------------------------------------------------------------------ limits and metrics


def test_the_rate_window_slides_per_client() -> None:
    now = [1000.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.allow("a", 2) for _ in range(2)] == [None, None]
    assert limiter.allow("a", 2) == pytest.approx(60.0)
    assert limiter.allow("b", 2) is None  # another client has its own window
    now[0] += 30
    assert limiter.allow("a", 2) == pytest.approx(30.0)
    now[0] += 30.5
    assert limiter.allow("a", 2) is None
    now[0] += 500
    limiter.allow("c", 1)
    assert set(limiter._seen) == {"c"}  # idle clients are forgotten


def test_metrics_render_counts_and_percentiles_in_prometheus_text() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0
    metrics = Metrics()
    for ms in range(1, 101):
        metrics.observe_request("/translate", 3, 200, ms / 1000)
    metrics.observe_request("/translate", None, 400, 0.001)
    metrics.observe_batch(BatchDone(3, requests=10, sentences=12, seconds=0.5))
    out = metrics.render(queued_sentences=7)
    assert 'workbench_http_requests_total{path="/translate",version="3",status="200"} 100' in out
    assert 'workbench_http_requests_total{path="/translate",version="",status="400"} 1' in out
    assert 'workbench_translate_latency_seconds{version="3",quantile="0.5"} 0.050000' in out
    assert 'workbench_translate_latency_seconds{version="3",quantile="0.99"} 0.099000' in out
    assert 'workbench_translate_latency_seconds_count{version="3"} 100' in out
    assert 'workbench_decoder_batches_total{version="3"} 1' in out
    assert 'workbench_sentences_translated_total{version="3"} 12' in out
    assert out.endswith("workbench_queued_sentences 7\n")


# ---------------------------------------------------------------------------- batching


class CountingEngine:
    """The real translation service, counting how many sentences each call decodes."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[int] = []
        self.threads: list[int] = []  # torch's CPU threads seen by each call
        self.engines: list[str] = []
        self.fail_on = fail_on
        self.real = default_engine()

    def translate(
        self,
        version_id: int,
        texts: Sequence[str],
        options: DecodingOptions,
    ) -> list[translation.TranslationResult]:
        self.calls.append(len(texts))
        self.threads.append(torch.get_num_threads())
        self.engines.append(options.engine)
        if self.fail_on in texts:
            raise RuntimeError("engine failure")
        return self.real.translate(version_id, texts, options)

    def engine(self) -> Engine:
        return Engine(self.translate, self.real.load)


async def _concurrently(batcher: Batcher, version_id: int, texts: list[str]) -> list[object]:
    batcher.start()
    try:
        await batcher.load(version_id)
        return await asyncio.gather(
            *(batcher.translate(version_id, [t], DecodingOptions()) for t in texts),
            return_exceptions=True,
        )
    finally:
        await batcher.stop()


def test_concurrent_requests_share_decoder_batches(versions: tuple[int, int]) -> None:
    sources = [s for s, _ in toy_pairs()]
    expected = [r.text for r in translation.translate(versions[0], sources)]
    counting = CountingEngine()
    done: list[BatchDone] = []
    batcher = Batcher(counting.engine(), window_s=0.05, on_batch=done.append)
    answers = asyncio.run(_concurrently(batcher, versions[0], sources))
    assert [a[0].text for a in answers] == expected  # type: ignore[index]
    assert counting.calls == [len(sources)], "one shared batch for requests arriving together"
    assert done[0].requests == len(sources) and batcher.queued_sentences == 0


def test_without_batching_each_request_is_decoded_alone(versions: tuple[int, int]) -> None:
    sources = [s for s, _ in toy_pairs()][:4]
    counting = CountingEngine()
    batcher = Batcher(counting.engine(), batching=False)
    answers = asyncio.run(_concurrently(batcher, versions[0], sources))
    assert len(answers) == 4 and counting.calls == [1, 1, 1, 1]


def test_requests_for_different_engines_never_share_a_batch(versions: tuple[int, int]) -> None:
    counting = CountingEngine()
    batcher = Batcher(counting.engine(), window_s=0.05)
    sources = [s for s, _ in toy_pairs()][:4]

    async def both() -> list[object]:
        batcher.start()
        try:
            await batcher.load(versions[0])
            return await asyncio.gather(
                *(
                    batcher.translate(versions[0], [t], DecodingOptions(engine=engine))
                    for t in sources
                    for engine in ("handwritten", "ctranslate2")
                )
            )
        finally:
            await batcher.stop()

    answers = asyncio.run(both())
    batches = sorted(zip(counting.engines, counting.calls, strict=True))
    assert batches == [("ctranslate2", 4), ("handwritten", 4)]
    assert all(a[0].text for a in answers)  # type: ignore[index]


def test_a_cap_splits_batches_and_a_failure_stays_in_its_batch(versions: tuple[int, int]) -> None:
    sources = [s for s, _ in toy_pairs()][:6]
    counting = CountingEngine(fail_on=sources[4])
    batcher = Batcher(counting.engine(), window_s=0.05, max_sentences=2)
    answers = asyncio.run(_concurrently(batcher, versions[0], sources))
    assert counting.calls == [2, 2, 2]
    failed = [i for i, a in enumerate(answers) if isinstance(a, Exception)]
    assert failed == [4, 5]  # the third batch; the first two were answered
    assert all(not isinstance(a, Exception) and a[0].text for a in answers[:4])


def test_decoding_uses_the_configured_torch_threads(versions: tuple[int, int]) -> None:
    counting = CountingEngine()
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            batcher = Batcher(counting.engine(), threads=threads)
            asyncio.run(_concurrently(batcher, versions[0], ["一"]))
    finally:
        torch.set_num_threads(before)
    assert counting.threads == [2, 1]


def test_a_full_queue_refuses_instead_of_waiting(versions: tuple[int, int]) -> None:
    batcher = Batcher(CountingEngine().engine(), window_s=0.05, max_queued_sentences=3)
    answers = asyncio.run(_concurrently(batcher, versions[0], ["一", "二", "三", "四"]))
    assert [type(a) for a in answers][3] is Busy
    assert all(isinstance(a, list) for a in answers[:3])


# --------------------------------------------------------------------------------- CLI


def test_cli_serves_versions_and_manages_keys(clean: tuple[int, int]) -> None:
    v1, v2 = clean
    out = cli_in_process("serve-version", str(v1))
    assert out.returncode == 0 and f"version {v1}" in out.stdout and "zh→en" in out.stdout
    out = cli_in_process("serve-version", str(v2))
    assert f"(instead of version {v1})" in out.stdout
    assert json.loads(cli_in_process("served", "--json").stdout) == [
        {"source": "zh", "target": "en", "version_id": v2}
    ]
    assert cli_in_process("serve-version", "999999").returncode == 2
    assert cli_in_process("serve-version", str(v2), "--stop").returncode == 0
    assert "no version is served" in cli_in_process("served").stdout

    created = json.loads(
        cli_in_process("api-key-create", "--name", "plugin", "--chars-per-request", "99").stdout
    )
    assert created["api_key"].startswith("wbk_")
    listing = cli_in_process("api-keys", "--json").stdout
    assert created["api_key"] not in listing
    [record] = json.loads(listing)
    assert record["chars_per_request"] == 99 and record["revoked_at"] is None
    assert cli_in_process("api-key-revoke", str(created["id"])).returncode == 0
    again = cli_in_process("api-key-revoke", str(created["id"]))
    assert again.returncode == 2 and "already revoked" in again.stderr
    [line] = cli_in_process("api-keys").stdout.splitlines()
    assert "revoked" in line and "plugin" in line
    assert "server default requests/min, 99 characters/request" in line
    bad = cli_in_process("serve", "--port", "70000")
    assert bad.returncode == 2 and "65535" in bad.stderr
    assert cli_in_process("serve", "--threads", "0").returncode == 2


@pytest.mark.parametrize("value", ["http", "0", "70000"])
def test_a_bad_serve_port_setting_is_one_clear_error(
    value: str, wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.ENV_SERVE_PORT, value)
    with pytest.raises(WorkbenchError, match="must be a port number from 1 to 65535"):
        launcher.server_state()
    monkeypatch.setenv(settings.ENV_SERVE_PORT, "5123")
    assert launcher.server_url() == "http://127.0.0.1:5123"
