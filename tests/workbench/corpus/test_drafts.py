"""Drafts (``workbench.corpus.drafts``) on a real SQLite file: kept per browser, corpus and grid,
merged from a data editor's change set by row id, and saved or refused in one transaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from db.tables import Role
from tests.conftest import fingerprint_database
from tests.workbench.team.test_access import VIEWER
from workbench.corpus import corpora, draft_saves, drafts, glossary, pairs
from workbench.corpus.drafts import Draft
from workbench.errors import PermissionDenied, WorkbenchError
from workbench.team import access, history
from workbench.team.access import Actor, acting_as

A, B = drafts.new_browser_key(), drafts.new_browser_key()


@pytest.fixture
def kitchen(wb_home: Path) -> int:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    pairs.apply_edits(
        info.id,
        added=[{"source": "米饭", "target": "rice"}, {"source": "茶", "target": "tea"}],
    )
    return info.id


def _ids(corpus_id: int) -> list[int]:
    return [int(i) for i in pairs.search_pairs(corpus_id).rows["id"]]


def test_a_draft_is_kept_per_browser_corpus_and_grid(kitchen: int) -> None:
    other = corpora.create_corpus("Travel", "zh", "en").id
    rice = _ids(kitchen)[0]
    draft = Draft(edited={rice: {"target": "cooked rice"}})
    drafts.save(A, kitchen, "pairs", draft)
    assert drafts.load(A, kitchen, "pairs") == draft
    assert not drafts.load(B, kitchen, "pairs"), "another browser has its own drafts"
    assert not drafts.load(A, other, "pairs") and not drafts.load(A, kitchen, "glossary")
    assert [(d.corpus_name, d.table, d.count) for d in drafts.list_drafts(A)] == [
        ("Kitchen", "pairs", 1)
    ]
    drafts.discard(A, kitchen, "pairs")
    assert not drafts.load(A, kitchen, "pairs") and drafts.list_drafts(A) == []
    corpora.delete_corpus(kitchen)  # a deleted corpus takes its drafts with it
    assert drafts.list_drafts(A) == []


def test_a_change_set_is_merged_by_row_id_not_position() -> None:
    """Positions of the shown grid map to row ids; the draft's own added rows follow."""
    base = Draft(edited={7: {"target": "x"}}, added=({"source": "汤", "target": None},))
    shown = base.shown([(7, {"source": "a", "target": "b"}), (9, {"source": "c", "target": "d"})])
    assert shown == [
        (7, {"source": "a", "target": "x"}),
        (9, {"source": "c", "target": "d"}),
        (None, {"source": "汤", "target": None}),
    ]
    merged = base.merged(
        [7, 9],
        {
            "edited_rows": {"2": {"target": "soup"}, "0": {"note": "n", "id": 7}},
            "added_rows": [{"source": "水", "target": float("nan")}],
            "deleted_rows": [1],
        },
        drafts.COLUMNS["pairs"],
    )
    assert merged == Draft(
        edited={7: {"target": "x", "note": "n"}},
        added=({"source": "汤", "target": "soup"}, {"source": "水", "target": None}),
        deleted=(9,),
    )
    assert merged.count == 4
    assert Draft.from_payload(merged.payload()) == merged  # JSON and back


def test_two_tabs_with_one_key_store_their_own_changes_onto_each_others(kitchen: int) -> None:
    """A tab stores its changes since it last stored onto the draft as it is now (another
    tab with the same key may have stored its own), never over it."""
    pairs.apply_edits(kitchen, added=[{"source": "面条", "target": "noodles"}])
    rice, tea, noodles = _ids(kitchen)
    mine = Draft(edited={rice: {"target": "A"}}, added=({"source": "汤", "target": None},))
    drafts.save(A, kitchen, "pairs", mine)
    theirs = Draft(
        edited={rice: {"target": "A"}, noodles: {"target": "B"}},
        added=({"source": "汤", "target": None}, {"source": "水", "target": "water"}),
        bases={noodles: 1},
    )
    drafts.save(A, kitchen, "pairs", theirs, since=mine)  # the other tab: nothing to rebase
    # This tab (it last stored ``mine``) fills its new row, edits rice's note, deletes tea.
    now = Draft(
        edited={rice: {"target": "A", "note": "n"}},
        added=({"source": "汤", "target": "soup"},),
        deleted=(tea,),
        bases={rice: 1, tea: 1},
    )
    stored = drafts.save(A, kitchen, "pairs", now, since=mine)
    assert stored == drafts.load(A, kitchen, "pairs")
    assert stored == Draft(
        edited={rice: {"target": "A", "note": "n"}, noodles: {"target": "B"}},
        added=({"source": "水", "target": "water"}, {"source": "汤", "target": "soup"}),
        deleted=(tea,),
        bases={rice: 1, noodles: 1, tea: 1},
    )


def test_saving_a_draft_writes_the_pairs_and_forgets_it_in_one_transaction(kitchen: int) -> None:
    rice, tea = _ids(kitchen)
    drafts.save(
        A,
        kitchen,
        "pairs",
        Draft(
            edited={rice: {"target": "cooked rice"}},
            added=({"source": "汤", "target": "soup"}, {}),
            deleted=(tea,),
        ),
    )
    result = draft_saves.apply_pairs(A, kitchen).result
    assert (result.added, result.updated, result.deleted) == (1, 1, 1)
    assert pairs.search_pairs(kitchen).rows["target"].tolist() == ["cooked rice", "soup"]
    assert not drafts.load(A, kitchen, "pairs")


@pytest.mark.parametrize(
    ("table", "draft", "message"),
    [
        (
            "pairs",
            Draft(added=({"source": "汤", "target": "soup"}, {"source": "水"})),
            "nothing was saved: new row 2 has no target (en)",
        ),
        (
            "glossary",
            Draft(added=({"source term": "茶", "target term": " "},)),
            "nothing was saved: new row 1 has no target term (en)",
        ),
        ("pairs", Draft(added=({"source": "米饭", "target": "rice"},)), "duplicate"),
    ],
)
def test_a_refused_draft_changes_nothing_and_stays(
    kitchen: int, table: str, draft: Draft, message: str
) -> None:
    """One rule for half-filled rows in every grid; any refusal writes nothing."""
    drafts.save(A, kitchen, table, draft)
    before = fingerprint_database()
    apply = draft_saves.apply_pairs if table == "pairs" else draft_saves.apply_glossary
    with pytest.raises(WorkbenchError, match=re.escape(message)):
        apply(A, kitchen)
    assert fingerprint_database() == before
    assert drafts.load(A, kitchen, table) == draft


def test_a_glossary_draft_edits_terms_by_their_stored_source_term(kitchen: int) -> None:
    glossary.set_terms(kitchen, [("茶", "tea"), ("米饭", "rice")])
    drafts.save(
        A,
        kitchen,
        "glossary",
        Draft(
            edited={"茶": {"target term": "black tea"}},
            added=({"source term": "汤", "target term": "soup"},),
            deleted=("米饭",),
        ),
    )
    assert draft_saves.apply_glossary(A, kitchen).result == 2
    assert glossary.list_terms(kitchen) == [("汤", "soup"), ("茶", "black tea")]


def test_a_browser_key_is_checked() -> None:
    with pytest.raises(WorkbenchError, match="32 hexadecimal"):
        drafts.load("../etc", 1, "pairs")
    with pytest.raises(WorkbenchError, match="no drafts for a table"):
        drafts.load(A, 1, "runs")


@pytest.mark.parametrize("who", [VIEWER, None], ids=["viewer", "nobody"])
def test_only_a_role_that_may_edit_keeps_or_forgets_a_draft(
    kitchen: int, who: Actor | None
) -> None:
    """Issue 30, item 8: a viewer (or nobody signed in) could store draft rows. A draft is
    an edit not saved yet: every draft write needs the role that may save it (edit)."""
    rice = _ids(kitchen)[0]
    drafts.save(A, kitchen, "pairs", Draft(edited={rice: {"target": "cooked rice"}}))
    before = fingerprint_database()
    refused = "vera@example.org is a viewer" if who else "Sign in to edit corpora"
    with acting_as(who):
        if who is None:
            access.use_actor_source(None)
        for write in (
            lambda: drafts.save(B, kitchen, "pairs", Draft(deleted=(rice,))),
            lambda: drafts.save(A, kitchen, "glossary", Draft(added=({"source term": "茶"},))),
            lambda: drafts.save(A, kitchen, "pairs", Draft()),  # forgetting is a write too
            lambda: drafts.discard(A, kitchen, "pairs"),
            lambda: draft_saves.apply_pairs(A, kitchen),
        ):
            with pytest.raises(PermissionDenied, match=refused):
                write()
        # Reading needs no role (a viewer has no drafts of her own: each member has hers).
        assert drafts.load(A, kitchen, "pairs").count == (1 if who is None else 0)
    assert drafts.load(A, kitchen, "pairs").count == 1
    assert fingerprint_database() == before


def test_a_draft_belongs_to_the_member_who_typed_it_not_to_the_address(kitchen: int) -> None:
    """Team walk, item 1: the tab's key travels with the address, so Carol opening Bob's
    copied address saw his unsaved change, and her Save wrote his text under her name (her
    Discard threw his work away). Under the same key each member has her own drafts."""
    bob = Actor("bob@example.org", Role.EDITOR)
    carol = Actor("carol@example.org", Role.EDITOR)
    rice = _ids(kitchen)[0]
    his = Draft(edited={rice: {"target": "cooked rice"}})
    other_tab = drafts.new_browser_key(drafts.browser_of(A))
    with acting_as(bob):
        drafts.save(A, kitchen, "pairs", his)
    with acting_as(carol):
        assert not drafts.load(A, kitchen, "pairs"), "her own (empty) draft, not his"
        assert drafts.list_drafts(A) == [] and drafts.other_tabs(other_tab) == []
        draft_saves.apply_pairs(A, kitchen)
        drafts.discard(A, kitchen, "pairs")
        mine = Draft(edited={rice: {"note": "check"}})
        drafts.save(A, kitchen, "pairs", mine)
        assert drafts.load(A, kitchen, "pairs") == mine
    assert pairs.search_pairs(kitchen).rows["target"].tolist()[0] == "rice", "nothing saved"
    with acting_as(bob):
        assert drafts.load(A, kitchen, "pairs") == his, "his stays his"
        assert drafts.other_tabs(other_tab) == [(A, 1)], "his other tab finds his, not hers"
        draft_saves.apply_pairs(A, kitchen)
        assert not drafts.load(A, kitchen, "pairs")
    assert pairs.search_pairs(kitchen).rows["target"].tolist()[0] == "cooked rice"
    assert history.list_changes(kitchen)[0].actor == "bob@example.org"
    # The local user (sign-in off) keeps the bare key: the drafts kept before stay found.
    assert drafts.stored_key(A) == A and not drafts.load(A, kitchen, "pairs")
