"""Edit conflicts (issue 37, item 1) on a real SQLite file: every write raises a row's
revision; a draft based on an older revision is held back, never written over the other
change; resolving it (theirs, mine, merged) and saving writes what the user chose. A
Hypothesis property plays two tabs editing and saving the same pairs in random orders: no
saved edit is ever lost."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from db.tables import Change, GlossaryTerm, Pair
from tests.helpers import cli_in_process
from workbench.corpus import corpora, draft_saves, drafts, glossary, pairs
from workbench.corpus.drafts import Draft
from workbench.errors import WorkbenchError
from workbench.storage import session_scope
from workbench.team import access, undo
from workbench.team.access import Actor, acting_as

A, B = drafts.new_browser_key(), drafts.new_browser_key()
COLUMNS = drafts.COLUMNS["pairs"]


def _revisions(corpus_id: int) -> dict[int, int]:
    with session_scope() as s:
        rows = s.execute(select(Pair.id, Pair.revision).where(Pair.corpus_id == corpus_id))
        return {pid: rev for pid, rev in rows}


def _targets(corpus_id: int) -> dict[int, str]:
    page = pairs.search_pairs(corpus_id, page_size=1000).rows
    return dict(zip(page["id"].tolist(), page["target"].tolist(), strict=True))


@pytest.fixture
def kitchen(wb_home: Path) -> int:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    pairs.apply_edits(
        info.id,
        added=[
            {"source": s, "target": t} for s, t in [("米饭", "rice"), ("茶", "tea"), ("汤", "soup")]
        ],
    )
    return info.id


def _edit(key: str, corpus_id: int, pair_id: int, target: str, seen: dict[int, int]) -> None:
    """What the grid does when a cell is typed: the change merged into the draft, based on
    the revision the grid showed (``seen``)."""
    ids = sorted(seen)
    state = {"edited_rows": {ids.index(pair_id): {"target": target}}}
    draft = drafts.load(key, corpus_id, "pairs").merged(ids, state, COLUMNS, seen)
    drafts.save(key, corpus_id, "pairs", draft)


def test_every_write_of_a_pair_or_a_term_raises_its_revision(kitchen: int) -> None:
    rice, tea, soup = sorted(_revisions(kitchen))
    assert set(_revisions(kitchen).values()) == {1}
    pairs.apply_edits(kitchen, edited={rice: {"target": "cooked rice"}})  # hash changes: 2 UPDATEs
    assert _revisions(kitchen) == {rice: 2, tea: 1, soup: 1}
    pairs.set_split(kitchen, [tea], "test")
    assert _revisions(kitchen)[tea] == 2
    with session_scope() as s:
        last = s.scalar(select(Change.id).order_by(Change.id.desc()).limit(1))
    undo.undo_change(last)  # an undo is a write too: never back to an older revision
    assert _revisions(kitchen)[tea] == 3
    pairs.apply_edits(kitchen, deleted=[soup])
    with session_scope() as s:
        deletion = s.scalar(select(Change.id).order_by(Change.id.desc()).limit(1))
    undo.undo_change(deletion)  # put back after the revision it was deleted at
    assert _revisions(kitchen)[soup] == 2

    glossary.set_terms(kitchen, [("茶", "tea"), ("汤", "soup")])
    glossary.set_terms(kitchen, [("茶", "tea"), ("汤", "broth")])  # only the changed one
    with session_scope() as s:
        terms = s.execute(select(GlossaryTerm.source_term, GlossaryTerm.revision)).all()
    assert {a: b for a, b in terms} == {"茶": 1, "汤": 2}


def test_a_stale_edit_is_held_back_with_both_versions_and_the_rest_is_saved(kitchen: int) -> None:
    rice, tea, _soup = sorted(_revisions(kitchen))
    seen_by_a = _revisions(kitchen)
    _edit(A, kitchen, rice, "rice (tab A)", seen_by_a)
    _edit(A, kitchen, tea, "green tea", seen_by_a)
    with acting_as(Actor("bo@example.org", access.Role.EDITOR)):
        _edit(B, kitchen, rice, "rice (tab B)", _revisions(kitchen))
        assert draft_saves.apply_pairs(B, kitchen).result.updated == 1

    saved = draft_saves.apply_pairs(A, kitchen)
    assert saved.result.updated == 1  # tea: nobody changed it since
    [conflict] = saved.conflicts
    assert conflict.row_id == rice
    assert conflict.theirs is not None and conflict.theirs["target"] == "rice (tab B)"
    assert conflict.yours is not None and conflict.yours["target"] == "rice (tab A)"
    assert conflict.by == "bo@example.org" and conflict.at is not None
    assert conflict.revision == 2
    assert _targets(kitchen)[rice] == "rice (tab B)"  # not overwritten
    assert _targets(kitchen)[tea] == "green tea"
    kept = drafts.load(A, kitchen, "pairs")  # the held-back edit stays in the draft alone
    assert kept.edited == {rice: {"target": "rice (tab A)"}} and kept.bases == {rice: 1}
    assert draft_saves.conflicts(A, kitchen, "pairs") == [conflict]
    assert draft_saves.apply_pairs(A, kitchen).conflicts == (conflict,)  # saving again: still held

    draft_saves.resolve(A, kitchen, "pairs", rice, "mine")
    assert draft_saves.conflicts(A, kitchen, "pairs") == []
    done = draft_saves.apply_pairs(A, kitchen)
    assert (done.result.updated, done.conflicts) == (1, ())
    assert _targets(kitchen)[rice] == "rice (tab A)"
    assert not drafts.load(A, kitchen, "pairs")


@pytest.mark.parametrize(
    ("keep", "cells", "target"),
    [
        ("theirs", None, "rice (B)"),
        ("merged", {"source": "米饭", "target": "rice (A and B)"}, "rice (A and B)"),
    ],
)
def test_keeping_theirs_forgets_the_edit_and_a_merge_is_saved(
    kitchen: int, keep: str, cells: dict | None, target: str
) -> None:
    rice = min(_revisions(kitchen))
    seen = _revisions(kitchen)
    _edit(A, kitchen, rice, "rice (A)", seen)
    _edit(B, kitchen, rice, "rice (B)", seen)
    draft_saves.apply_pairs(B, kitchen)
    assert [c.row_id for c in draft_saves.apply_pairs(A, kitchen).conflicts] == [rice]
    draft_saves.resolve(A, kitchen, "pairs", rice, keep, cells)
    draft_saves.apply_pairs(A, kitchen)
    assert _targets(kitchen)[rice] == target
    assert not drafts.load(A, kitchen, "pairs")


def test_a_pair_deleted_since_comes_back_only_if_kept(kitchen: int) -> None:
    rice, tea, _soup = sorted(_revisions(kitchen))
    seen = _revisions(kitchen)
    _edit(A, kitchen, rice, "rice (A)", seen)
    drafts.save(B, kitchen, "pairs", Draft(deleted=(rice, tea), bases={rice: 1, tea: 1}))
    draft_saves.apply_pairs(B, kitchen)
    [conflict] = draft_saves.apply_pairs(A, kitchen).conflicts
    assert conflict.theirs is None and conflict.revision is None
    assert conflict.yours == {"source": "米饭", "target": "rice (A)", "split": "train", "note": ""}
    draft_saves.resolve(A, kitchen, "pairs", rice, "mine")
    assert draft_saves.apply_pairs(A, kitchen).result.added == 1
    assert "rice (A)" in _targets(kitchen).values()
    # A deletion of a pair deleted meanwhile is no conflict: both wanted it gone.
    drafts.save(A, kitchen, "pairs", Draft(deleted=(tea,), bases={tea: 1}))
    assert draft_saves.apply_pairs(A, kitchen).conflicts == ()


def test_an_edit_of_a_pair_that_a_draft_deletes_is_a_conflict(kitchen: int) -> None:
    rice = min(_revisions(kitchen))
    drafts.save(A, kitchen, "pairs", Draft(deleted=(rice,), bases={rice: 1}))
    pairs.apply_edits(kitchen, edited={rice: {"note": "keep me"}})
    [conflict] = draft_saves.apply_pairs(A, kitchen).conflicts
    assert conflict.yours is None and conflict.theirs is not None
    assert conflict.theirs["note"] == "keep me"
    assert rice in _targets(kitchen)
    with pytest.raises(WorkbenchError, match="keep one of theirs, mine, merged"):
        draft_saves.resolve(A, kitchen, "pairs", rice, "both")
    with pytest.raises(WorkbenchError, match="no conflict on row 999"):
        draft_saves.resolve(A, kitchen, "pairs", 999, "mine")
    draft_saves.resolve(A, kitchen, "pairs", rice, "mine")  # delete it as it is now
    assert draft_saves.apply_pairs(A, kitchen).result.deleted == 1


def test_a_glossary_term_changed_since_is_held_back(kitchen: int) -> None:
    glossary.set_terms(kitchen, [("茶", "tea"), ("汤", "soup")])
    src, tgt = drafts.COLUMNS["glossary"]
    seen = {"茶": 1, "汤": 1}
    drafts.save(
        A,
        kitchen,
        "glossary",
        Draft(edited={"茶": {tgt: "green tea"}, "汤": {tgt: "broth"}}, bases=seen),
    )
    glossary.set_terms(kitchen, [("茶", "black tea"), ("汤", "soup")])
    saved = draft_saves.apply_glossary(A, kitchen)
    [conflict] = saved.conflicts
    assert conflict.row_id == "茶"
    assert conflict.theirs == {src: "茶", tgt: "black tea"}
    assert conflict.yours == {src: "茶", tgt: "green tea"}
    assert dict(glossary.list_terms(kitchen)) == {"茶": "black tea", "汤": "broth"}


def test_an_undo_from_the_command_line_makes_a_draft_based_before_it_a_conflict(
    kitchen: int,
) -> None:
    """No CLI or HTTP path edits a pair by id; every one that writes pairs (undo here) raises
    the revision, so a tab's draft based on the row before is held back, not written over."""
    rice = min(_revisions(kitchen))
    pairs.apply_edits(kitchen, edited={rice: {"target": "boiled rice"}})
    _edit(A, kitchen, rice, "rice (A)", _revisions(kitchen))
    with session_scope() as s:
        last = s.scalar(select(Change.id).order_by(Change.id.desc()).limit(1))
    proc = cli_in_process("undo", str(last))
    assert proc.returncode == 0, proc.stderr
    [conflict] = draft_saves.apply_pairs(A, kitchen).conflicts
    assert conflict.theirs is not None and conflict.theirs["target"] == "rice"
    assert _targets(kitchen)[rice] == "rice"


# ------------------------------------------------------------------ two tabs, any order


@dataclass
class Tab:
    key: str
    seen: dict[int, int] = field(default_factory=dict)  # revisions the tab's grid shows
    typed: dict[int, str] = field(default_factory=dict)  # edits typed and not saved yet


_texts = itertools.count()
OPS = st.one_of(
    st.tuples(st.just("look"), st.integers(0, 1)),
    st.tuples(st.just("edit"), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("save"), st.integers(0, 1)),
    st.tuples(st.just("resolve"), st.integers(0, 1), st.sampled_from(draft_saves.KEEP[:2])),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(OPS, min_size=6, max_size=24))
def test_two_tabs_in_any_order_lose_no_saved_edit(kitchen: int, ops: list[tuple]) -> None:
    """Two tabs look (their grid redrawn), type, save and resolve in any order. After every
    save: each edit the tab typed is in the database or held back in its draft (with the text
    typed), and a pair is written only by a tab that saw its latest revision: no saved edit
    is ever overwritten unseen. At the end both tabs resolve (keep mine) and save: every
    tab's last typed text was written."""
    for key in (A, B):
        drafts.discard(key, kitchen, "pairs")
    tabs = [Tab(A, _revisions(kitchen)), Tab(B, _revisions(kitchen))]
    ids = sorted(tabs[0].seen)

    def save(tab: Tab) -> None:
        before_rev, before_text = _revisions(kitchen), _targets(kitchen)
        draft = drafts.load(tab.key, kitchen, "pairs")
        saved = draft_saves.apply_pairs(tab.key, kitchen)
        held = {c.row_id for c in saved.conflicts}
        after_rev, after_text = _revisions(kitchen), _targets(kitchen)
        for pid in ids:
            if after_rev[pid] != before_rev[pid]:  # written by this save: based on the latest
                assert draft.bases[pid] == before_rev[pid], (pid, draft.bases, before_rev)
        for pid, text in list(tab.typed.items()):
            if pid in held:
                assert drafts.load(tab.key, kitchen, "pairs").edited[pid]["target"] == text
            else:
                assert after_text[pid] == text, (pid, text, before_text)
                del tab.typed[pid]

    for op in ops:
        tab = tabs[op[1]]
        if op[0] == "look":
            tab.seen = _revisions(kitchen)
        elif op[0] == "edit":
            pid, text = ids[op[2]], f"text {next(_texts)}"
            _edit(tab.key, kitchen, pid, text, tab.seen)
            tab.typed[pid] = text
        elif op[0] == "save":
            save(tab)
        else:
            for c in draft_saves.conflicts(tab.key, kitchen, "pairs"):
                draft_saves.resolve(tab.key, kitchen, "pairs", c.row_id, op[2])
                if op[2] == "theirs":
                    tab.typed.pop(c.row_id, None)
            tab.seen = _revisions(kitchen)
    for tab in tabs:
        last = dict(tab.typed)
        for c in draft_saves.conflicts(tab.key, kitchen, "pairs"):
            draft_saves.resolve(tab.key, kitchen, "pairs", c.row_id, "mine")
        save(tab)
        assert not tab.typed and not drafts.load(tab.key, kitchen, "pairs")
        assert all(_targets(kitchen)[pid] == text for pid, text in last.items())
