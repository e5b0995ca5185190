"""Fixtures of the page tests: no demo corpus, no worker process, and a populated database
with two real tiny versions (trained once per test run, copied for each test module, so no
page's tests see another's changes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import module_home
from tests.ui.pages import Trained, pages_home
from workbench.corpus import corpora, demo, pairs
from workbench.models import registry
from workbench.settings import ENV_DB_URL, ENV_HOME
from workbench.training import worker_process


@pytest.fixture
def no_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty database stays empty (the demo corpus is tested on its own)."""
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)


@pytest.fixture
def small_corpus(wb_home: Path, no_demo: None) -> int:
    """A zh→en corpus of three pairs, no demo beside it."""
    info = corpora.create_corpus("Kitchen", "zh", "en")
    pairs.apply_edits(
        info.id,
        added=[
            {"source": "米饭", "target": "rice"},
            {"source": "面条", "target": "noodles"},
            {"source": "茶", "target": "tea"},
        ],
    )
    return info.id


@pytest.fixture
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    """The demo corpus and two real tiny versions (a short and a shorter training)."""
    built = pages_home(tmp_path_factory)
    with module_home(built.home) as home:
        versions = [v.id for v in registry.list_versions()]
        yield Trained(home, built.corpus_id, versions, built.run_ids)


@pytest.fixture
def populated(trained: Trained, monkeypatch: pytest.MonkeyPatch) -> Trained:
    monkeypatch.setenv(ENV_HOME, str(trained.home))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    return trained
