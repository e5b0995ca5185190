"""The history of changes, its undo, and the trash (``workbench.team``), on real databases."""

from __future__ import annotations

import ast
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from db.tables import Change, Pair, utcnow
from tests.conftest import fingerprint_database
from tests.helpers import ROOT
from tests.workbench.models.test_registry import outside_folder  # noqa: F401 (a fixture)
from tests.workbench.team.test_access import in_chinese
from workbench.corpus import cleanups, corpora, glossary, importing, pairs
from workbench.corpus.cleaning import CleaningOptions
from workbench.errors import WorkbenchError
from workbench.messages import Message
from workbench.models import registry
from workbench.storage import engine, session_scope
from workbench.team import access, history, trash, undo


def _raw(table: str, where: str = "") -> list[tuple[Any, ...]]:
    """Every stored row of ``table`` as the driver returns it (no ORM types in between),
    but its revision: every write raises it, an undo's too (``test_edit_conflicts``)."""
    with engine().connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT * FROM {table} {where} ORDER BY id").mappings()
        return [tuple(v for k, v in r.items() if k != "revision") for r in rows]


def _revisions() -> list[int]:
    with session_scope() as s:
        return list(s.scalars(select(Pair.revision).order_by(Pair.id)))


def _changes() -> list[Change]:
    with session_scope() as s:
        return list(s.scalars(select(Change).order_by(Change.id)))


def _latest() -> history.ChangeInfo:
    [corpus] = corpora.list_corpora()
    return history.list_changes(corpus.id)[0]


def _thousand(corpus_id: int) -> list[int]:
    rows = [
        {"source": f"第{i}句话", "target": f"sentence {i}", "note": f"n{i}" if i % 3 else ""}
        for i in range(1000)
    ]
    return pairs.apply_edits(corpus_id, added=rows).added_ids


def test_undo_of_a_bulk_delete_restores_1000_pairs_byte_for_byte(db_url: str) -> None:
    info = corpora.create_corpus("bulk", "zh", "en")
    ids = _thousand(info.id)
    pairs.set_split(info.id, ids[:40], "test")
    stored, revisions = _raw("pairs"), _revisions()
    assert len(stored) == 1000 and set(revisions) == {1, 2}

    pairs.apply_edits(info.id, deleted=ids)
    assert _raw("pairs") == []
    deletion = _latest()
    assert (deletion.action, deletion.rows) == ("edit", 1000)
    assert deletion.actor == access.local_admin().email  # who the tests act as

    undo_id = undo.undo_change(deletion.id)
    assert _raw("pairs") == stored  # every column of every row, ids and timestamps too
    assert pairs.search_pairs(info.id, "sentence 99").total == 11  # the search index too
    listed = history.list_changes(info.id)
    assert (listed[0].id, listed[0].undoes, listed[0].rows) == (undo_id, deletion.id, 1000)
    assert listed[1].undone_by == undo_id
    with pytest.raises(WorkbenchError, match="already undone"):
        undo.undo_change(deletion.id)
    undo.undo_change(undo_id)  # an undo is a change like any other: undo it again
    assert _raw("pairs") == []


def test_undo_since_a_time_returns_the_corpus_to_that_moment(wb_home: Path) -> None:
    info = corpora.create_corpus("since", "zh", "en")
    ids = pairs.apply_edits(
        info.id, added=[{"source": f"句{i}", "target": f"s{i}"} for i in range(6)]
    ).added_ids
    glossary.set_terms(info.id, [("句", "sentence"), ("字", "character")])
    moment = utcnow()
    snapshot = (_raw("pairs"), _raw("glossary_terms"), _raw("corpora"))

    pairs.apply_edits(info.id, edited={ids[0]: {"target": "changed"}}, deleted=[ids[1]])
    pairs.apply_edits(
        info.id,
        edited={
            ids[2]: {"source": "句3", "target": "s3"},
            ids[3]: {"source": "句2", "target": "s2"},
        },
    )  # a swap
    pairs.set_split(info.id, ids[4:], "valid")
    pairs.add_pair(info.id, "新", "new")
    glossary.set_terms(info.id, [("句", "clause"), ("词", "word")])
    corpora.rename_corpus(info.id, "since renamed")
    undo.undo_change(_latest().id)  # the rename, undone already: left alone
    corpora.rename_corpus(info.id, "renamed again")
    pairs.add_pair(info.id, "再", "again")
    undo.undo_change(undo.undo_change(_latest().id))  # added, removed, added again
    pairs.deduplicate(info.id)  # changes nothing: records nothing

    assert undo.changes_since(info.id, moment) == 7
    undone = undo.undo_since(info.id, moment)
    assert len(undone) == 7
    assert (_raw("pairs"), _raw("glossary_terms"), _raw("corpora")) == snapshot
    assert undo.changes_since(info.id, moment) == 0  # the undos cancel the window out
    assert undo.undo_since(info.id, moment) == []


def test_undo_refuses_a_row_changed_since_and_changes_nothing(wb_home: Path) -> None:
    info = corpora.create_corpus("later", "zh", "en")
    pid = pairs.add_pair(info.id, "一", "one")
    first = _latest().id
    pairs.apply_edits(info.id, edited={pid: {"target": "uno"}})
    edit = _latest().id
    before = (_raw("pairs"), len(_changes()))
    message = f"pair {pid} was changed by change #{edit} after change #{first}; undo change #{edit}"
    with pytest.raises(WorkbenchError, match=message):
        undo.undo_change(first)
    assert (_raw("pairs"), len(_changes())) == before
    # a write that bypassed the history: the row is not as the edit left it
    with engine().begin() as conn:
        conn.exec_driver_sql("UPDATE pairs SET note = 'by hand'")
    before = (_raw("pairs"), len(_changes()))
    with pytest.raises(WorkbenchError, match=f"pair {pid} was changed after change #{edit}"):
        undo.undo_change(edit)
    assert (_raw("pairs"), len(_changes())) == before
    with pytest.raises(WorkbenchError, match="does not exist"):
        undo.undo_change(999)


def test_undo_and_trash_refusals_and_the_history_labels_read_chinese(wb_home: Path) -> None:
    """What a page shows of the history in 简体中文: the refusals (message ids with their
    parameters) and the names of the actions and of what they touched."""
    info = corpora.create_corpus("later", "zh", "en")
    pid = pairs.add_pair(info.id, "一", "one")
    first = _latest().id
    pairs.apply_edits(info.id, edited={pid: {"target": "uno"}})
    with pytest.raises(WorkbenchError) as err:
        undo.undo_change(first)
    assert in_chinese(err.value) == (
        f"句对 {pid} 在修改 #{first} 之后又被修改 #{first + 1} 改动过；请先撤销修改 #{first + 1}"
    )
    undo_id = undo.undo_change(_latest().id)
    with pytest.raises(WorkbenchError) as err:
        undo.undo_change(undo_id - 1)
    assert str(err.value) == f"change #{undo_id - 1} was already undone (change #{undo_id})"
    assert in_chinese(err.value) == f"修改 #{undo_id - 1} 已经撤销过了（修改 #{undo_id}）"
    with pytest.raises(WorkbenchError) as err:
        undo.undo_change(999)
    assert in_chinese(err.value) == "修改 #999 不存在"
    with pytest.raises(WorkbenchError) as err:
        trash.restore_corpus(info.id)
    assert in_chinese(err.value) == f"语料库 #{info.id} 不在回收站中"
    corpora.delete_corpus(info.id)
    corpora.create_corpus("later", "zh", "en")
    with pytest.raises(WorkbenchError) as err:
        trash.restore_corpus(info.id)
    assert in_chinese(err.value) == "已有名为“later”的语料库：请先给它改名，再恢复这一个"

    for change in _changes():  # create, edit, undo, delete: each named on the page
        assert change.action in history.ACTION_LABELS and change.entity in history.ENTITY_LABELS
    for label in [*history.ACTION_LABELS.values(), *history.ENTITY_LABELS.values()]:
        in_chinese(Message(label))


def test_a_failed_write_records_nothing(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = corpora.create_corpus("atomic", "zh", "en")
    pairs.add_pair(info.id, "一", "one")
    state = (_raw("pairs"), len(_changes()))
    with pytest.raises(WorkbenchError, match="duplicates"):
        pairs.apply_edits(info.id, added=[{"source": "一", "target": "one"}])
    assert (_raw("pairs"), len(_changes())) == state

    record = history.record

    def record_then_fail(*args: Any, **kwargs: Any) -> int | None:
        record(*args, **kwargs)
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(history, "record", record_then_fail)
    for write in (
        lambda: pairs.add_pair(info.id, "二", "two"),
        lambda: corpora.delete_corpus(info.id),
        lambda: glossary.set_terms(info.id, [("一", "one")]),
        lambda: importing.import_file(info.id, "三\tthree\n".encode(), fmt="tsv"),
    ):
        with pytest.raises(RuntimeError, match="disk is full"):
            write()
        assert (_raw("pairs"), len(_changes())) == state  # neither the write nor its record
    assert [c.name for c in corpora.list_corpora()] == ["atomic"]


def test_an_import_is_one_change_of_id_ranges_and_can_be_undone(wb_home: Path) -> None:
    data = "\n".join(f"源{i}\ttarget {i}" for i in range(300)).encode()
    result = importing.import_file("imported", data, fmt="tsv", create_langs=("zh", "en"))
    [change] = _changes()
    assert change.action == "import" and change.corpus_id == result.corpus_id
    [created, ranges] = change.items
    assert created["table"] == "corpora" and created["before"] is None
    first, last = _raw("pairs")[0][0], _raw("pairs")[-1][0]
    assert ranges == {"table": "pairs", "id_ranges": [[first, last]]}
    assert last - first + 1 == 300
    # Team walk, item 4: "rows 203" beside "imported 202 pairs": the corpus row is said.
    [listed] = history.list_changes(result.corpus_id)
    assert (listed.rows, listed.summary) == (301, "created the corpus and imported 300 pairs")

    pid = pairs.search_pairs(result.corpus_id, "target 7").rows["id"].iloc[0]
    pairs.apply_edits(result.corpus_id, edited={int(pid): {"note": "checked"}})
    with pytest.raises(WorkbenchError, match=f"pair {pid} was changed by change #{change.id + 1}"):
        undo.undo_change(change.id)
    undo.undo_change(_latest().id)
    undo.undo_change(change.id)  # its pairs; the corpus it created stays, empty
    assert _raw("pairs") == [] and corpora.get_corpus("imported").pair_count == 0


def test_clean_ups_and_versions_are_recorded(wb_home: Path) -> None:
    info = corpora.create_corpus("clean", "zh", "en")
    pairs.apply_edits(
        info.id, added=[{"source": "你好", "target": "你好"}, {"source": "猫", "target": "cat"}]
    )
    stored = _raw("pairs")
    cleanups.apply_cleanup(info.id, CleaningOptions(drop_copies=True))
    change = _latest()
    assert (change.action, change.rows) == ("cleanup", 1)
    undo.undo_change(change.id)
    assert _raw("pairs") == stored


def test_changes_are_filtered_by_actor_and_time(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "actor_name", lambda: "ana@example.org")
    info = corpora.create_corpus("team", "zh", "en")
    pairs.add_pair(info.id, "一", "one")
    middle = utcnow()
    monkeypatch.setattr(history, "actor_name", lambda: "bo@example.org")
    pairs.add_pair(info.id, "二", "two")
    assert history.actors(info.id) == ["ana@example.org", "bo@example.org"]
    assert [c.summary for c in history.list_changes(info.id, actor="bo@example.org")] == ["1 added"]
    assert len(history.list_changes(info.id, since=middle)) == 1
    assert len(history.list_changes(info.id, until=middle)) == 2


def test_a_deleted_corpus_waits_in_the_trash_then_is_swept(wb_home: Path) -> None:
    info = corpora.create_corpus("precious", "zh", "en")
    _thousand(info.id)
    stored = _raw("pairs")
    corpora.delete_corpus(info.id)
    assert corpora.list_corpora() == []
    with pytest.raises(WorkbenchError, match="no corpus"):
        corpora.get_corpus("precious")
    [trashed] = trash.list_trash()
    assert (trashed.name, trashed.pair_count) == ("precious", 1000)
    assert trashed.removed_after - trashed.deleted_at == timedelta(days=trash.TRASH_DAYS)

    # The name is free meanwhile; restoring under it waits until it is free again.
    other = corpora.create_corpus("precious", "zh", "en")
    with pytest.raises(WorkbenchError, match="rename it"):
        trash.restore_corpus(info.id)
    corpora.rename_corpus(other.id, "other")
    assert trash.sweep_trash(utcnow() + timedelta(days=trash.TRASH_DAYS - 1)) == 0
    assert trash.restore_corpus(info.id) == "precious"
    assert corpora.get_corpus("precious").pair_count == 1000
    assert _raw("pairs") == stored and trash.list_trash() == []

    corpora.delete_corpus("precious")
    assert trash.sweep_trash(utcnow() + timedelta(days=trash.TRASH_DAYS + 1)) == 1
    assert trash.list_trash() == [] and _raw("pairs") == []
    purge = history.list_changes(info.id)[0]
    assert (purge.action, purge.actor, purge.reversible) == ("purge", "system", False)
    with pytest.raises(WorkbenchError, match="cannot be undone"):
        undo.undo_change(purge.id)


def test_undo_of_a_corpus_delete_restores_it_from_the_trash(wb_home: Path) -> None:
    info = corpora.create_corpus("oops", "zh", "en")
    pairs.add_pair(info.id, "一", "one")
    stored = _raw("corpora")
    corpora.delete_corpus(info.id)
    undo.undo_change(history.list_changes(info.id)[0].id)
    assert _raw("corpora") == stored


def test_the_history_is_append_only_and_imports_no_corpus_service() -> None:
    """No module writes to ``changes`` except by adding rows, and the team package imports
    only ``db`` and the top-level settings/storage/errors/messages modules (services call into
    it)."""
    allowed = {
        "workbench.settings",
        "workbench.storage",
        "workbench.errors",
        "workbench.messages",
        "workbench.team",
        "workbench.team.access",
    }
    for path in (ROOT / "workbench" / "team").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                names = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                assert names & allowed, f"{path.name} imports {node.module}"
    for path in (ROOT / "workbench").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for bad in (
            "update(Change)",
            "delete(Change)",
            "Change.__table__.update",
            "Change.__table__.delete",
        ):
            assert bad not in text, f"{path} changes recorded history"


def test_nothing_is_recorded_for_reads(wb_home: Path) -> None:
    info = corpora.create_corpus("quiet", "zh", "en")
    pairs.search_pairs(info.id)
    corpora.list_corpora()
    with session_scope() as s:
        assert s.scalar(select(func.count()).select_from(Change)) == 1  # the create


def test_version_changes_are_recorded_and_renames_undone(request: pytest.FixtureRequest) -> None:
    folder = request.getfixturevalue("outside_folder")  # (from test_registry)
    info = corpora.create_corpus("models", "zh", "en")
    version = registry.register_version(folder, {}, corpus_id=info.id, name="first")
    registry.rename_version(version, "better name")
    registry.set_notes(version, "good on menus")
    rename = history.list_changes(info.id)[1]
    assert (rename.entity, rename.entity_id, rename.action) == ("version", version, "rename")
    with pytest.raises(WorkbenchError, match="changed by change #4"):  # the notes came later
        undo.undo_change(rename.id)
    undo.undo_since(info.id, rename.at)
    assert (registry.get_version(version).name, registry.get_version(version).notes) == (
        "first",
        "",
    )
    registry.delete_version(version)
    actions = [(c.action, c.reversible) for c in history.list_changes(info.id)]
    assert actions[0] == ("delete", False) and ("register", False) in actions


def test_a_version_is_registered_by_its_trainer_under_its_corpus_real_name(
    request: pytest.FixtureRequest,
) -> None:
    """Team walk, items 2 and 4: a version registered while its corpus was in the trash was
    named "(deleted #1) clinic v2" for ever, and its registration was recorded as the
    worker's (root@localhost), not as the change of bob, who queued the run."""
    folder = request.getfixturevalue("outside_folder")  # (from test_registry)
    info = corpora.create_corpus("clinic", "zh", "en")
    corpora.delete_corpus(info.id)  # the run goes on; the corpus is in the trash
    version = registry.register_version(folder, {}, corpus_id=info.id, trained_by="bob@x.org")
    assert registry.get_version(version).name == f"clinic v{version}"
    register = history.list_changes(info.id)[0]
    assert (register.action, register.actor) == ("register", "bob@x.org")
    assert register.summary == f"registered version 'clinic v{version}'"
    assert trash.restore_corpus(info.id) == "clinic"


def test_the_command_line_lists_undoes_and_restores(wb_home: Path, tmp_path: Path) -> None:
    from tests.helpers import cli_in_process

    data = tmp_path / "pairs.tsv"
    data.write_text("汤\tsoup\n面\tnoodles\n", encoding="utf-8")
    made = cli_in_process(
        "import", "--corpus", "Menus", "--src-lang", "zh", "--tgt-lang", "en", str(data)
    )
    assert made.returncode == 0, made.stderr
    [corpus] = corpora.list_corpora()
    listed = cli_in_process("history", "--corpus", "Menus", "--json")
    [change] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (change["action"], change["rows"]) == ("import", 3)  # corpus + pairs
    assert change["actor"] == access.local_admin().email  # the CLI acts as the local admin

    undone = cli_in_process("undo", str(change["id"]))
    assert undone.returncode == 0 and corpora.get_corpus(corpus.id).pair_count == 0
    assert undone.stdout.strip() == f"undid #{change['id']} as change #{change['id'] + 1}"
    since = cli_in_process("undo", "--corpus", "Menus", "--since", "2000-01-01")
    assert since.stdout.strip() == "undid 0 changes"  # the import and its undo cancel out
    cli_in_process("undo", str(change["id"] + 1))  # the undo, undone
    assert corpora.get_corpus(corpus.id).pair_count == 2
    bad = cli_in_process("undo")
    assert bad.returncode == 2 and bad.stderr.startswith("error: give a change id")
    for moment in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):  # beyond UTC
        beyond = cli_in_process("history", "--corpus", "Menus", "--since", moment)
        assert beyond.returncode == 2 and "not an ISO date or time" in beyond.stderr

    corpora.delete_corpus(corpus.id)
    assert f"#{corpus.id}  Menus  2 pairs" in cli_in_process("trash").stdout
    assert (
        cli_in_process("restore-corpus", str(corpus.id)).stdout.strip() == "restored corpus 'Menus'"
    )
    assert corpora.get_corpus("Menus").pair_count == 2


def test_a_pool_sentence_accepted_into_the_corpus_is_recorded(wb_home: Path) -> None:
    from db.tables import PoolSentence
    from workbench.curation import pool

    info = corpora.create_corpus("pool", "zh", "en")
    pool.add_to_pool(info.id, "早上好\n".encode())
    with session_scope() as s:  # as a pool job would have translated it
        sentence = s.scalar(select(PoolSentence))
        sentence.output, sentence_id = "good morning", sentence.id
    pair_id = pool.review(sentence_id, "accept")
    change = history.list_changes(info.id)[0]
    assert (change.action, change.entity, change.entity_id) == ("edit", "pair", pair_id)
    undo.undo_change(change.id)
    assert corpora.get_corpus(info.id).pair_count == 0


def test_an_import_is_not_undone_while_a_later_delete_of_its_pairs_stands(wb_home: Path) -> None:
    """Issue 30, item 4: undoing the import while the bulk delete of two of its pairs stands
    was accepted, and undoing the delete afterwards brought the two pairs back."""
    data = "\n".join(f"源{i}\ttarget {i}" for i in range(5)).encode()
    corpus = importing.import_file("menus", data, fmt="tsv", create_langs=("zh", "en")).corpus_id
    imported = _latest().id
    ids = [row[0] for row in _raw("pairs")]
    pairs.apply_edits(corpus, deleted=ids[:2])
    deletion = _latest().id
    state = fingerprint_database()
    message = f"pair {ids[0]} was changed by change #{deletion} after change #{imported}"
    with pytest.raises(WorkbenchError, match=message):
        undo.undo_change(imported)
    assert fingerprint_database() == state

    undo.undo_change(deletion)
    undo.undo_change(imported)  # now nothing later touches its pairs
    assert _raw("pairs") == []
