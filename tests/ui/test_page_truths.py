"""What the pages say must be true, and no page may make Streamlit log a warning (issue 19):
every page at its own address, pickers that follow new runs and show fresh counts, the
versions table and the comparison without a literal ``None``, help texts as written.

AppTest pages with real models, as in the page tests (``tests/ui/pages.py`` and ``conftest.py``):
this module trains its own two tiny versions once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from streamlit.elements.lib import policies
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.ui.pages import APP, PAGES, TIMEOUT, Trained, assert_clean, open_page, texts
from ui import navigation
from workbench.evaluation import significance


@pytest.fixture
def widget_state_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The warnings Streamlit's widget-state rules log, as a real server logs them.

    AppTest runs without a Streamlit runtime, and the rules (``policies``) are skipped without
    one: the fixture makes them run, and collects what they log."""
    monkeypatch.setattr(policies, "runtime", SimpleNamespace(exists=lambda: True))
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # once per process
    logged: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    handler = Collect(logging.WARNING)
    policies._LOGGER.addHandler(handler)
    try:
        yield logged
    finally:
        policies._LOGGER.removeHandler(handler)


# ------------------------------------------------------------------ item 11: page addresses


def test_every_page_answers_at_its_own_address(wb_home, no_demo: None) -> None:
    """A browser that opens /corpus asks for the page whose URL path is "corpus" (Streamlit
    matches the address against each registered page's ``url_pathname``); the default page
    is registered with "" and answered "Page not found" at its own address."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    assert_clean(at)
    addresses = {info["url_pathname"] for info in at._registered_pages.values()}
    missing = [ref.url_path for ref in navigation.PAGES if ref.url_path not in addresses]
    assert not missing, f"no page answers at /{missing}"
    # The root address still opens the first page, now at its own address.
    assert at._finished_page_script_hash == calc_hash(navigation.PAGES[0].url_path)
    assert [t.value for t in at.title] == [navigation.PAGES[0].title]


# -------------------------------------------------------- item 12: no widget-state warning


def test_no_page_makes_streamlit_warn_about_widget_state(
    populated: Trained, widget_state_warnings: list[str]
) -> None:
    """Each page drawn twice (a widget given its value through Session State is checked on
    the run that gives it); Models' compare picker after a rename changes its labels."""
    from workbench.models import registry

    for page in PAGES:
        at = open_page(page)
        at.run()
        assert_clean(at)
    at = open_page("models")
    registry.rename_version(populated.version_ids[0], "renamed for the picker")
    at.run()
    assert_clean(at)
    assert widget_state_warnings == []


# ---------------------------------------------------------------- item 5: help as written


def test_help_texts_read_as_written(populated: Trained) -> None:
    """The Train page's "Train for" help says "small corpora", not a variable's name (a
    rename of `corpora` to `all_corpora` had reached the text); no help on any page shows an
    identifier of that rename."""
    at = open_page("train")
    help_text = at.get("button_group")[1].proto.help  # "Model size", then "Train for"
    assert "small corpora are repeated until learned" in help_text
    for page in PAGES:
        at = open_page(page)
        helps = [getattr(w.proto, "help", "") for w in at.main if hasattr(w, "proto")]
        assert not [h for h in helps if re.search(r"\ball_\w+", h)], page


# ---------------------------------------------------- item 8: values, or "—" with the reason


def _set_metrics(version_id: int, **changes: object) -> dict:
    """Change a version's recorded metrics (as an older or imported version has them);
    returns the metrics before."""
    from db.tables import ModelVersion
    from workbench.storage import session_scope

    with session_scope() as s:
        row = s.get(ModelVersion, version_id)
        before = dict(row.metrics)
        row.metrics = {**before, **changes}
    return before


def test_versions_table_shows_each_score_or_a_dash_with_the_reason(populated: Trained) -> None:
    from workbench.models import registry

    newest, older = populated.version_ids
    before = _set_metrics(older, valid_loss=None, bleu=None, chrf=None)
    try:
        at = open_page("models")
        assert_clean(at)
        table = at.dataframe[0].value.set_index("id")
        shown = table.loc[:, ["valid loss", "BLEU", "chrF"]]
        assert "None" not in shown.to_string()
        metrics = registry.get_version(newest).metrics
        assert shown.loc[newest].tolist() == [
            f"{metrics['valid_loss']:.3f}",
            f"{metrics['bleu']:.1f}",
            f"{metrics['chrf']:.1f}",
        ]
        assert table.loc[newest, "scored on"] == "validation · 3 pairs · greedy"
        assert shown.loc[older].tolist() == ["—"] * 3
        assert table.loc[older, "scored on"].startswith("not measured at the end of its run")
        helps = json.loads(at.dataframe[0].proto.columns)
        assert "“—”: not measured; “scored on” says why." in helps["valid loss"]["help"]
    finally:
        _set_metrics(older, **before)


def test_compare_shows_a_dash_for_the_reference_p_value(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With p-values shown (the minimum test size lowered to the demo's 4 test pairs), the
    reference row has none of its own: '—' and the reason, never 'None'."""
    monkeypatch.setattr(significance, "MIN_VERDICT_PAIRS", 4)
    at = open_page("models")
    at.button(key="compare").click().run()
    assert_clean(at)
    scores = at.dataframe[1].value
    assert scores["p (BLEU)"].iloc[0] == scores["p (chrF)"].iloc[0] == "—"
    other = scores["p (BLEU)"].iloc[1]
    assert re.fullmatch(r"[01]\.\d{3}", other), other
    helps = json.loads(at.dataframe[1].proto.columns)
    assert "it is the reference the others are tested against" in helps["p (chrF)"]["help"]


# ---------------------------------------------------- item 6: the History run picker


def test_history_follows_the_newest_run_unless_one_was_picked(
    populated: Trained, no_worker: None
) -> None:
    from workbench.training import run_info, runs

    def finished_run() -> int:
        run_id = runs.enqueue_training(populated.corpus_id, preset="tiny")
        runs.cancel_run(run_id)  # queued: cancelled at once, a finished run
        return run_id

    newest = run_info.list_runs()[0].id
    at = open_page("train")
    assert at.selectbox(key="history_run").value == newest
    created = [finished_run()]
    try:
        at.run()
        assert at.selectbox(key="history_run").value == created[-1], "follows the new run"
        at.selectbox(key="history_run").select(newest).run()  # the user picks an older one
        created.append(finished_run())
        at.run()
        assert at.selectbox(key="history_run").value == newest, "the user's pick stays"
        assert_clean(at)
    finally:
        for run_id in created:
            runs.delete_run(run_id)


# ------------------------------------------------ item 7: counts in pickers after a write


def _corpus_option(at: AppTest, key: str) -> str:
    picker = at.selectbox(key=key)
    return picker.options[picker.index]


def test_pair_counts_in_pickers_are_fresh_after_save_as_pair_and_accept(
    populated: Trained, no_worker: None
) -> None:
    """The picker is drawn before the write: the page must be drawn again after it (the
    Translate page showed "48 pairs" after pair #49 was saved)."""
    from workbench.corpus import corpora
    from workbench.curation import pool, pool_jobs
    from workbench.models import registry
    from workbench.training import worker

    def count_label() -> str:
        return f"· {corpora.get_corpus(populated.corpus_id).pair_count} pairs (all splits)"

    at = open_page("translate")
    at.text_area(key="translate_input").input("我想喝一杯茶。").run()
    at.button(key="translate").click().run()
    at.text_area[1].input("A cup of tea for me, please.")
    at.button[-1].click().run()  # Save as pair
    assert_clean(at)
    assert "Saved as pair" in texts(at.success)
    assert _corpus_option(at, "translate_corpus").endswith(count_label())

    pool.add_to_pool(populated.corpus_id, "这个问题非常复杂。\n".encode())
    pool_jobs.enqueue_translation(populated.corpus_id, registry.list_versions()[0].id, None)
    assert worker.run_worker(once=True) == 1
    at = open_page("review")
    item = pool.review_queue(populated.corpus_id)[0]
    at.button(key=f"pool_accept_{item.id}").click().run()
    assert_clean(at)
    assert "Added pair" in texts(at.success)
    assert _corpus_option(at, "review_corpus").endswith(count_label())
