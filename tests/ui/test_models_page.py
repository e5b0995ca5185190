"""The Models page under AppTest: versions, compare, serving, API keys, deletion."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
from babel.numbers import format_compact_decimal, format_decimal

from tests.helpers import free_port, wait_for
from tests.ui.pages import Trained, assert_clean, open_page, texts
from workbench import settings
from workbench.corpus import corpora, demo
from workbench.evaluation import significance
from workbench.models import registry
from workbench.serving import api_keys, launcher, served
from workbench.training import run_info, runs, worker


def test_models_compare_versions(populated: Trained) -> None:
    at = open_page("models")
    table = at.dataframe[0].value
    assert sorted(table["id"]) == sorted(populated.version_ids)
    assert table["scored on"].tolist() == ["validation · 3 pairs · greedy"] * 2
    at.button(key="compare").click().run()
    assert_clean(at)
    metrics = at.dataframe[1].value
    assert sorted(metrics["version"]) == sorted(populated.version_ids)
    assert {"BLEU", "BLEU 95 % interval", "chrF"} <= set(metrics.columns)
    other = f"#{metrics['version'].iloc[1]}"
    # 4 test pairs: the warning, and no p-value or verdict right below it
    assert "no p-value or verdict is given" in texts(at.warning)
    shown = texts(at.markdown) + texts(at.caption)
    assert " is better than " not in shown and " is worse than " not in shown
    assert "no significant difference" not in shown and "p = " not in shown
    assert set(metrics["p (BLEU)"]) == set(metrics["p (chrF)"]) == {"—"}  # none, never "None"
    for interval in metrics["BLEU 95 % interval"]:
        low, high = (float(x) for x in interval.split(" – "))
        assert 0 <= low <= high <= 100
    sentences = at.dataframe[2].value
    assert len(sentences) == 4  # the demo corpus' test split
    assert {"source", "reference", "differs", f"Δ chrF {other}"} <= set(sentences.columns)
    at.selectbox(key="compare_sort").select("largest chrF loss first").run()
    assert_clean(at)
    deltas = list(at.dataframe[2].value[f"Δ chrF {other}"])
    assert deltas == sorted(deltas)
    downloads = {b.proto.label: b.proto for b in at.get("download_button")}
    for label, key, icon in (
        ("Download CSV", "compare_csv", ":material/download:"),
        ("Download HTML report", "compare_html", ":material/description:"),
    ):
        assert key in downloads[label].id and downloads[label].icon == icon, downloads[label]
    assert f"Scores on “{demo.DEMO_NAME}”** · test · 4 pairs · greedy" in texts(at.markdown)
    assert "Only 4 test pairs" in texts(at.warning)

    at.button_group(key="compare_mode").set_value("Beam search").run()
    at.button(key="compare").click().run()
    assert_clean(at)
    assert "test · 4 pairs · beam 4" in texts(at.markdown)


def test_models_compare_gives_a_verdict_from_the_minimum_test_size(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the minimum (lowered to the demo's 4 test pairs here) the verdict and p-values are
    shown, and the warning is not."""
    monkeypatch.setattr(significance, "MIN_VERDICT_PAIRS", 4)
    at = open_page("models")
    at.button(key="compare").click().run()
    assert_clean(at)
    metrics = at.dataframe[1].value
    baseline, other = (f"#{v}" for v in metrics["version"])
    verdict = texts(at.markdown)
    assert f"{other} is better than {baseline}" in verdict or "no significant difference" in verdict
    assert "significant below p = 0.05" in texts(at.caption)
    assert not any("no p-value or verdict" in w for w in texts(at.warning).splitlines())


def test_models_show_each_versions_lineage(populated: Trained) -> None:
    """Parent and the tokens and minutes behind each version: in the table and the detail."""
    at = open_page("models")
    table = at.dataframe[0].value
    assert {"parent", "train tokens", "cumulative tokens", "cumulative minutes"} <= set(table)
    newest = registry.get_version(populated.version_ids[0])
    row = table[table["id"] == newest.id].iloc[0]
    assert row["cumulative tokens"] == newest.train_tokens > 0  # a new model: its own only
    assert set(table["origin"]) == {""}, "versions trained here have no origin to show"
    steps = format_decimal(newest.metrics["steps"], locale="en")
    assert f"**steps** {steps} · **stopped because** " in texts(at.markdown)
    tokens = format_compact_decimal(newest.cumulative_tokens, locale="en", fraction_digits=2)
    assert f"**New model** · **trained on** {tokens} tokens" in texts(at.markdown)


def test_models_rename_and_notes(populated: Trained) -> None:
    at = open_page("models")
    version_id = populated.version_ids[0]
    assert "trained on 41 pairs (snapshot)" in texts(at.markdown)
    at.text_input[0].input("first try")
    at.text_area[0].input("demo corpus, tiny")
    at.button[0].click().run()  # the form's Save
    assert_clean(at)
    info = registry.get_version(version_id)
    assert (info.name, info.notes) == ("first try", "demo corpus, tiny")


def test_models_and_train_pages_say_who_trained_each_version(populated: Trained) -> None:
    """The fixture's runs were queued by the services as the local admin (as the CLI is)."""
    who = settings.local_admin_name()
    assert run_info.get_run(populated.run_ids[0]).started_by == who
    at = open_page("models")
    assert f"**Trained by** {who}" in texts(at.markdown)
    assert set(at.dataframe[0].value["trained by"]) == {who}


@pytest.fixture
def serve_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A free port for the server the page starts; the server is stopped at the end (by the
    PID the app recorded: a process this test started)."""
    port = free_port()
    monkeypatch.setenv(settings.ENV_SERVE_PORT, str(port))
    yield port
    if launcher.server_state().pid is not None:
        launcher.stop_server()


def test_serve_a_version_starts_the_server_that_answers_the_request(
    populated: Trained, serve_port: int
) -> None:
    """Issue 30 item 11: "Serve this version" said the version answers over HTTP and showed
    a curl command, but no server ran. The click starts the server (127.0.0.1, the app's
    port), the request shown is answered, and the page says so; "Stop the server" ends it."""
    version_id = populated.version_ids[0]
    url = f"http://127.0.0.1:{serve_port}"
    at = open_page("models")
    at.selectbox(key="models_version").select(version_id).run()
    assert "not served" in texts(at.markdown)
    assert f"nothing answers at {url}" in texts(at.markdown)
    assert f"curl -s {url}/translate" in texts(at.code)
    at.button(key="serve_version").click().run()
    assert_clean(at)
    try:
        assert served.serving_of(version_id) is not None
        assert f"Version #{version_id} now answers zh→en requests at {url}." in texts(at.success)
        assert "answers zh→en requests" in texts(at.markdown)
        assert f"server running**] at {url}" in texts(at.markdown)
        reply = httpx.post(
            f"{url}/translate",
            json={"q": "我想喝一杯茶。", "source": "zh", "target": "en"},
            timeout=60,
        )
        assert reply.status_code == 200 and reply.json()["translatedText"]
        versions = at.dataframe[0].value
        assert versions.set_index("id")["served"].to_dict() == {
            v: "zh→en" if v == version_id else "" for v in populated.version_ids
        }
        table = at.dataframe[-1].value  # the HTTP API tab's served pairs
        assert table["version"].tolist() == [version_id]

        at.button(key="stop_server").click().run()
        assert_clean(at)
        assert f"nothing answers at {url}" in texts(at.markdown)
        # issue 37: the served badge follows the server, not "answers zh→en requests"
        assert "answers zh→en requests" not in texts(at.markdown)
        assert "its requests are answered once the server runs" in texts(at.markdown)
        assert not settings.server_record_path().exists()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", timeout=5)
        # another version of the pair: the served one answers nothing while no server runs
        at.selectbox(key="models_version").select(populated.version_ids[1]).run()
        shown = texts(at.markdown)
        assert f"version #{version_id} is served for it, answering once the server" in shown
        assert "answers them now" not in shown
        at.selectbox(key="models_version").select(version_id).run()
        at.button(key="start_server").click().run()  # a served version, no server: start it
        wait_for(lambda: launcher.server_state().status == "ok", 60, "the version")
        at.button(key="stop_serving").click().run()
        assert_clean(at)
        assert served.list_served() == []
    finally:
        for pair in served.list_served():
            served.stop_serving(pair.version_id)


def test_serve_a_version_on_a_port_in_use_says_so_and_changes_nothing(
    populated: Trained, serve_port: int
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", serve_port))
        taken.listen()
        at = open_page("models")
        at.selectbox(key="models_version").select(populated.version_ids[0]).run()
        at.button(key="serve_version").click().run()
        assert_clean(at)
        assert f"Port {serve_port} on 127.0.0.1 is in use by another program" in texts(at.error)
        assert served.list_served() == []
        assert launcher.server_state().status == "down"


def test_models_api_keys_are_shown_once_and_revoked(populated: Trained) -> None:
    def labelled(widgets, label: str):
        return next(w for w in widgets if w.label == label)

    at = open_page("models")
    labelled(at.text_input, "New key for").input("CAT plugin")
    labelled(at.number_input, "Requests per minute").set_value(30)
    labelled(at.button, "Create key").click().run()
    assert_clean(at)
    [info] = api_keys.list_keys()
    [shown] = [c.value for c in at.code if c.value.startswith(api_keys.KEY_PREFIX)]
    assert api_keys.find_active_key(shown) == info and info.requests_per_minute == 30
    # no limit of its own: what applies is said (issue 37); not revoked: empty, not "None"
    keys = at.dataframe[-1]
    assert keys.value[["requests/min", "characters/request"]].values.tolist() == [
        ["30", "default: 5,000"]
    ]
    assert keys.proto.HasField("placeholder") and keys.proto.placeholder == ""
    assert "shown only this once" in texts(at.success)
    # the form says what an empty limit means
    limit = labelled(at.number_input, "Requests per minute")
    assert limit.placeholder == "no limit"
    at.run()
    assert shown not in texts(at.code), "the key is shown once"
    at.button(key="revoke_key").click().run()
    assert api_keys.find_active_key(shown) is not None, "revoking must ask first"
    at.button(key="revoke_key_confirm").click().run()
    assert_clean(at)
    assert api_keys.find_active_key(shown) is None
    assert f"Revoked API key #{info.id}." in texts(at.success)
    # the form was cleared when the key was created: its name is not sent a second time
    labelled(at.button, "Create key").click().run()
    assert "Key name must not be empty" in texts(at.error)
    assert len(api_keys.list_keys()) == 1


def test_compare_without_test_pairs_says_so(populated: Trained) -> None:
    empty = corpora.create_corpus("No tests", "zh", "en")
    try:
        at = open_page("models")
        at.selectbox(key="compare_corpus").select(empty.id).run()
        at.button(key="compare").click().run()
        assert_clean(at)
        assert "has no test pairs" in texts(at.warning)
    finally:
        corpora.delete_corpus(empty.id)


def test_models_delete_asks_first(populated: Trained) -> None:
    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny", max_steps=5)
    assert worker.run_worker(once=True) == 1
    doomed = run_info.get_run(run_id).version_id
    assert doomed is not None
    served.serve_version(doomed)
    at = open_page("models")
    at.selectbox(key="models_version").select(doomed).run()
    at.button(key="delete_version").click().run()
    assert registry.get_version(doomed), "deleting must ask first"
    assert (
        "It is the version served for zh→en over HTTP: once it is deleted, zh→en requests get "
        "no answer until another version is served for that pair." in texts(at.markdown)
    )
    at.button(key="delete_version_confirm").click().run()
    assert_clean(at)
    assert doomed not in [v.id for v in registry.list_versions()]
    assert f"Deleted version #{doomed}." in texts(at.success)
    assert served.list_served() == [], "its pair is no longer answered"
