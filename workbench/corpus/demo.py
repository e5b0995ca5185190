"""A built-in demo corpus, so a brand-new workbench has something to train on at once.

`demo_zh_en.tsv` holds 48 short everyday Chinese sentences (unsegmented) with English
translations, written for this project. Their splits are fixed in the file: 41 train, 3 valid,
4 test, so the first model learns the training pairs by heart within a minute or two on a laptop
CPU (tiny preset, automatic budget) and the Models page has test pairs to compare versions on.
"""

from __future__ import annotations

from pathlib import Path

from db.tables import Role
from workbench.corpus import corpora, importing
from workbench.corpus.corpora import CorpusInfo
from workbench.corpus.import_checks import NothingToImport
from workbench.team.access import Actor, acting_as

DEMO_NAME = "Everyday phrases (demo)"
DEMO_SRC_LANG, DEMO_TGT_LANG = "zh", "en"
DEMO_FILE = Path(__file__).with_name("demo_zh_en.tsv")
DEMO_ACTOR = Actor("workbench (demo corpus)", Role.EDITOR)


def ensure_demo_corpus() -> CorpusInfo | None:
    """Add the demo corpus when the database has no corpus at all; return it, else None.

    Idempotent: once any corpus exists (the demo or the user's own) this does nothing, so a
    user who deletes the demo after creating their own corpus never sees it come back. The
    corpus is created together with its pairs (one import), so a failure leaves nothing
    half-made; two sessions racing on an empty database create it once (the second import
    finds every pair there already, and its import is refused as adding nothing).
    """
    if corpora.list_corpora():
        return None
    with acting_as(DEMO_ACTOR):  # the app adds it, whoever opened the page
        try:
            result = importing.import_file(
                DEMO_NAME,
                DEMO_FILE,
                fmt="tsv",
                strict=True,
                create_langs=(DEMO_SRC_LANG, DEMO_TGT_LANG),
            )
        except NothingToImport:  # another session's import made it first
            return None
    # (0 added: another session's import made it first, and found it under the write lock)
    return corpora.get_corpus(result.corpus_id) if result.added else None
