"""A quiet app (issue 37 item 4): `make run` watches no files, and a page where nothing is
in progress arms no refresh timer, so a tab left open costs the server nothing; a page that
shows something on its way (a run, a starting server) follows it until it settles.

The timers are what the pages hand ``st.fragment`` as ``run_every`` (a browser reruns such a
fragment every so many seconds): the tests record them. ``bench/live_panel_cpu.py --idle
--page …`` measures the server's CPU with a real browser tab.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from typing import IO

import pytest
import streamlit as st

from tests.helpers import ROOT, free_port
from tests.ui.pages import PAGES, Trained, assert_clean, open_page, texts
from ui import live_runs, serving_panel
from workbench import settings
from workbench.serving import served
from workbench.training import runs


def test_make_run_watches_no_files() -> None:
    """The settings as Streamlit itself reads them from the checkout (a misspelt option would
    be ignored): no file watcher, no rerun on save."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["fileWatcherType"] == "none"
    script = (
        "from streamlit import config\n"
        "config.get_config_options(force_reparse=True)\n"
        "print(config.get_option('server.fileWatcherType'), "
        "config.get_option('server.runOnSave'))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert shown.stdout.split() == ["none", "False"]


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The ``run_every`` of every fragment the pages draw."""
    armed: list[float | None] = []
    fragment = st.fragment

    def recording(func=None, *, run_every=None):
        armed.append(run_every)
        return fragment(func, run_every=run_every)

    monkeypatch.setattr(st, "fragment", recording)
    return armed


def test_no_page_refreshes_while_nothing_is_in_progress(
    populated: Trained, timers: list[float | None]
) -> None:
    for page in PAGES:
        at = open_page(page)
        at.run()
        assert_clean(at)
    assert not [every for every in timers if every], f"an idle page refreshes: {timers}"


def test_the_live_panel_refreshes_only_while_a_run_is_in_progress(
    populated: Trained, timers: list[float | None], no_worker: None
) -> None:
    at = open_page("train")
    assert not any(timers)
    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny", max_steps=5)
    try:
        at.run()  # as the Train button's rerun does
        assert_clean(at)
        assert timers[-1] == live_runs.LIVE_REFRESH_S
        assert f"Run #{run_id}" in texts(at.markdown)
    finally:
        runs.cancel_run(run_id)
    timers.clear()
    at.run()  # the panel sees the run end and reruns the page: no timer any more
    assert_clean(at)
    assert timers[-1] is None, timers


@pytest.fixture
def starting_server(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[int, IO[str]]]:
    """A served version and a server "on its way": its lock held (by this process, as a
    starting server holds it) and its PID recorded, while nothing answers at its port yet."""
    monkeypatch.setenv(settings.ENV_SERVE_PORT, str(free_port()))
    version_id = populated.version_ids[0]
    served.serve_version(version_id)
    with open(settings.server_lock_path(), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        settings.server_record_path().write_text(json.dumps({"pid": os.getpid()}))
        try:
            yield version_id, lock
        finally:
            settings.server_record_path().unlink(missing_ok=True)
            served.stop_serving(version_id)


def test_models_follow_a_starting_server_and_stop_once_it_settles(
    starting_server: tuple[int, IO[str]], timers: list[float | None]
) -> None:
    version_id, lock = starting_server
    at = open_page("models")
    at.selectbox(key="models_version").select(version_id).run()
    assert_clean(at)
    shown = texts(at.markdown)
    assert "server starting" in shown
    assert "answers zh→en requests" not in shown, "nothing answers yet"
    assert "its requests are answered once the server runs" in shown
    assert timers[-1] == serving_panel.FOLLOW_S
    timers.clear()
    fcntl.flock(lock, fcntl.LOCK_UN)  # the server is gone (it did not start)
    at.run()
    assert_clean(at)
    assert "server not running" in texts(at.markdown)
    assert not any(timers), timers
