"""Starting from a public model on the pages: the Models page's "Add a public model" (where
such models are found; the upload itself is the service's, tested in
tests/workbench/models/test_public_models.py, since AppTest cannot upload files) and the
Train page's note on what fine-tuning a pretrained version costs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.marian_checkpoint import save_random_marian, toy_pairs
from tests.helpers import train_version
from tests.ui.pages import assert_clean, open_page, texts
from workbench import settings
from workbench.corpus import corpora, pairs
from workbench.models import model_import, staging
from workbench.training import run_info, runs


def test_models_page_says_where_public_models_are_and_how_to_add_one(
    small_corpus: int,
) -> None:
    at = open_page("models")  # no version yet: the panel is there all the same
    assert at.expander[0].label == "Add a public model"
    shown = texts(at.markdown)
    assert "https://huggingface.co/Helsinki-NLP" in shown and "CC-BY 4.0" in shown
    assert "python -m workbench register FOLDER" in texts(at.caption)
    assert at.button(key="public_model_add").disabled  # until a zip is chosen


@pytest.fixture
def imported(wb_home: Path, no_demo: None, tmp_path: Path) -> int:
    """A tiny random Marian checkpoint (2 layers, 2 heads) whose card states its licence,
    registered as a version."""
    folder = save_random_marian(tmp_path / "opus-mt-zh-en", d_model=16, heads=2, ffn=32)
    (folder / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# opus-mt\n")
    return model_import.import_version(folder)


def test_models_page_shows_where_a_public_model_came_from_and_its_fine_tuned_child(
    imported: int,
) -> None:
    """No "trained by", corpus, "0 pairs" or "0 s" for a model nobody here trained: its
    origin and who added it; a version continued from it names it as its parent."""
    corpus = corpora.create_corpus("curated", "zh", "en")
    pairs.apply_edits(corpus.id, added=[{"source": s, "target": t} for s, t in toy_pairs(40, 2)])
    _, child = train_version(corpus.id, init_version_id=imported, max_steps=2, precision="fp32")
    at = open_page("models")
    table = at.dataframe[0].value.set_index("id")
    row = table.loc[imported]
    assert row["name"] == "opus-mt-zh-en" and row["corpus"] == "(public model)"
    assert row["origin"] == "opus-mt-zh-en · cc-by-4.0"
    assert row["added by"] == settings.local_admin_name() and pd.isna(row["trained by"])
    assert pd.isna(row["pairs"]) and pd.isna(row["train time (s)"])  # not 0 pairs, not 0 s
    assert table.loc[child, "parent"] == imported and table.loc[child, "origin"] == ""

    at.selectbox(key="models_version").set_value(imported).run()
    assert_clean(at)
    details = texts(at.markdown)
    assert "**Public model** · from opus-mt-zh-en · Marian (Hugging Face) · licence cc-by-4.0" in (
        details
    )
    assert f"**Added by** {settings.local_admin_name()}" in details
    for untrue in ("**Trained by**", "(deleted corpus)", "trained on 0 pairs", "New model"):
        assert untrue not in details

    at.selectbox(key="models_version").set_value(child).run()
    assert_clean(at)
    assert f"**Continued from** #{imported} opus-mt-zh-en, a public model" in texts(at.markdown)


def test_inspect_page_looks_inside_an_imported_model(imported: int) -> None:
    at = open_page("inspect")
    assert "**Public model** · from opus-mt-zh-en" in texts(at.caption)  # its origin, at once
    at.text_input(key="inspect_text").input("我 喜欢 喝 茶")
    at.button(key="inspect").click().run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    assert "Attention, every layer and head" in [h.value for h in at.subheader]
    assert "Read so far: `<pad>` → chose" in texts(at.markdown)  # Marian starts from <pad>
    assert "Nobody trained this version here: it was added from elsewhere." in texts(at.caption)


def test_train_page_tells_what_fine_tuning_a_pretrained_version_costs(
    imported: int, no_worker: None
) -> None:
    corpus = corpora.create_corpus("curated", "zh", "en")
    pairs.apply_edits(corpus.id, added=[{"source": s, "target": t} for s, t in toy_pairs(40, 2)])
    at = open_page("train")
    assert "is a pretrained model" not in texts(at.info)  # a new model: nothing to say
    at.radio(key=f"train_start_{corpus.id}").set_value(imported).run()
    assert_clean(at)
    note = texts(at.info)
    assert f"Version #{imported} is a pretrained model of" in note
    assert "passes over the corpus' training pairs" in note and "(2e-05)" in note
    at.button(key="train_button").click().run()
    run = run_info.list_runs()[0]
    assert run.init_version_id == imported
    runs.cancel_run(run.id)


def test_the_apps_start_sweeps_what_a_killed_import_left(small_corpus: int) -> None:
    """A staging folder whose lock nobody holds (its import was killed) is gone once the
    app starts (`ui.startup.sweep_imports`)."""
    left = settings.new_import_staging_dir("killed")
    (left / "model").mkdir(parents=True)
    (left / staging.LOCK_FILE).touch()
    open_page("models")
    assert not left.exists()
