"""Undo cannot lose data: a property over random sequences of changes undone in random orders.

Every write to a corpus (edits, bulk deletes, imports, changes of split, clean-ups and their
own undo, de-duplication, glossaries, renames, and undos themselves) goes through the real
services; pairs share sentences often, so writes move pairs with their sentence groups. A
model keeps, for every row, the value each change left it in (a stack of layers), and which
changes still hold (an undo flips its chain). After every step:

* a write that is refused changes nothing (the whole database, history included);
* a write that is accepted records every row it changed: rewinding its changes' items gives
  back the rows as they were before it;
* after every accepted undo, every row is what the changes that still hold make it, as if the
  undone change had never happened; an undo while a later change that holds touched one of
  its rows must be refused (issue 30, item 4: an import undone while a later delete of its
  pairs held; undoing the delete afterwards brought them back);
* the latest change can always be undone, and undoing everything since the first write gives
  back the corpus as it was created.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from db.tables import Change, Corpus, GlossaryTerm, Pair
from tests.conftest import fingerprint_database
from workbench.corpus import cleanups, corpora, glossary, importing, pairs
from workbench.corpus.cleaning import CleaningOptions
from workbench.errors import WorkbenchError
from workbench.storage import session_scope
from workbench.team import history, undo

Row = tuple[str, int]  # (table, id)
Values = dict[str, Any]  # a row's stored values, as ``history.capture`` gives them

# Few sentences, so that pairs share sources and targets (groups) and collide (duplicates);
# "OK → OK" is a copy that a clean-up removes, "sentence 1" a near-duplicate of "Sentence 1."
SOURCES = [f"句子{i}" for i in range(5)] + ["OK"]
TARGETS = [f"Sentence {i}." for i in range(5)] + ["OK", "sentence 1"]
SPLITS = ["train", "valid", "test"]
PAIR = st.tuples(st.sampled_from(SOURCES), st.sampled_from(TARGETS))
INDEX = st.integers(0, 99)  # the n-th pair or change, modulo how many there are
OPS = st.one_of(
    st.tuples(
        st.just("add"), st.lists(st.tuples(PAIR, st.sampled_from([None, *SPLITS])), max_size=3)
    ),
    st.tuples(st.just("import"), st.lists(PAIR, min_size=1, max_size=4)),
    st.tuples(
        st.just("edit"), INDEX, st.sampled_from(["source", "target", "note", "split"]), INDEX
    ),
    st.tuples(st.just("delete"), st.lists(INDEX, min_size=1, max_size=4)),
    st.tuples(st.just("split"), st.lists(INDEX, min_size=1, max_size=2), st.sampled_from(SPLITS)),
    st.tuples(st.just("cleanup")),
    st.tuples(st.just("cleanup undo")),
    st.tuples(st.just("dedupe")),
    st.tuples(
        st.just("glossary"),
        st.lists(st.tuples(st.sampled_from(["句", "子"]), st.sampled_from(["a", "b"])), max_size=2),
    ),
    st.tuples(st.just("rename"), st.integers(0, 2)),
    st.tuples(st.just("undo"), INDEX),
    st.tuples(st.just("undo since"), INDEX),
)
_names = itertools.count()


def _rows(corpus_id: int) -> dict[Row, Values]:
    """The corpus' rows (its own, its pairs, its glossary) as the history records them."""
    with session_scope() as s:
        return {
            (model.__tablename__, i): values
            for model, mine in (
                (Corpus, Corpus.id == corpus_id),
                (Pair, Pair.corpus_id == corpus_id),
                (GlossaryTerm, GlossaryTerm.corpus_id == corpus_id),
            )
            for i, values in (
                (i, _content(v)) for i, v in history.capture(s, model, where=mine).items()
            )
        }


def _recorded(change: Change) -> dict[Row, Values | None]:
    """The rows a change records, each with its value before the change (None: absent)."""
    out: dict[Row, Values | None] = {}
    for item in change.items:
        if "id_ranges" in item:
            out |= {("pairs", i): None for a, b in item["id_ranges"] for i in range(a, b + 1)}
        else:
            was = item["before"]
            out[(item["table"], item["id"])] = was and _content(was)
    return out


def _content(values: Values) -> Values:
    """A row's values but its revision: every write raises it, an undo's too, so an undo
    gives back the content, never the revision (``test_edit_conflicts`` checks those)."""
    return {k: v for k, v in values.items() if k != history.REVISION}


@dataclass
class Model:
    """What the rows must be: per row, the value each write left it in, oldest first; a row
    is the value of the newest write that still holds, else its value at the start."""

    base: dict[Row, Values]
    layers: dict[Row, list[tuple[int, Values | None]]] = field(default_factory=dict)
    first: dict[int, int] = field(default_factory=dict)  # change -> the write its chain undoes
    holds: dict[int, bool] = field(default_factory=dict)  # write -> whether its effect holds

    def write(self, changes: list[Change], before: dict[Row, Values], after: dict[Row, Values]):
        """A write's changes (one, or an import and its regrouping): rewinding them from the
        rows after it must give the rows before it."""
        rows: dict[Row, Values | None] = dict(after)
        new: list[tuple[int, Row, Values | None]] = []
        for change in reversed(changes):
            assert change.undoes is None
            self.first[change.id], self.holds[change.id] = change.id, True
            for row, was in _recorded(change).items():
                new.append((change.id, row, rows.get(row)))
                rows[row] = was
        assert {r: v for r, v in rows.items() if v is not None} == before, "unrecorded write"
        for change_id, row, value in sorted(new, key=lambda n: n[0]):
            self.layers.setdefault(row, []).append((change_id, value))

    def undo(self, change: Change) -> None:
        first = self.first[change.undoes]
        self.first[change.id], self.holds[first] = first, not self.holds[first]

    def expected(self) -> dict[Row, Values]:
        out: dict[Row, Values | None] = dict(self.base)
        for row, layers in self.layers.items():
            for change_id, value in layers:
                if self.holds[change_id]:
                    out[row] = value
        return {row: value for row, value in out.items() if value is not None}


@dataclass
class Run:
    corpus_id: int
    name: str
    model: Model
    seen: int  # the newest change id the model knows

    def new_changes(self) -> list[Change]:
        with session_scope() as s:
            stmt = select(Change).where(Change.corpus_id == self.corpus_id, Change.id > self.seen)
            found = list(s.scalars(stmt.order_by(Change.id)))
        if found:
            self.seen = found[-1].id
        return found

    def change_ids(self) -> list[int]:
        with session_scope() as s:
            stmt = select(Change.id).where(Change.corpus_id == self.corpus_id)
            return list(s.scalars(stmt.order_by(Change.id)))

    def pair_ids(self) -> list[int]:
        return sorted(i for table, i in _rows(self.corpus_id) if table == "pairs")

    def step(self, op: tuple[Any, ...]) -> None:
        """Do one write; check that a refusal changed nothing and the model agrees after it."""
        database, before = fingerprint_database(), _rows(self.corpus_id)
        try:
            self._do(op)
        except WorkbenchError:
            event(f"{op[0]}: refused")
            assert fingerprint_database() == database, f"{op} was refused but changed data"
            assert self.new_changes() == []
            return
        event(f"{op[0]}: accepted")
        changes = self.new_changes()
        undos = [c for c in changes if c.undoes is not None]
        if undos:
            assert undos == changes  # an undo records nothing but undos
            for change in undos:
                self.model.undo(change)
        else:
            self.model.write(changes, before, _rows(self.corpus_id))
        assert _rows(self.corpus_id) == self.model.expected(), f"after {op}"

    def _do(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        cid, ids, changes = self.corpus_id, self.pair_ids(), self.change_ids()
        if kind == "add":
            rows = [{"source": s, "target": t, "split": split} for (s, t), split in args[0]]
            pairs.apply_edits(cid, added=rows)
        elif kind == "import":
            importing.import_file(
                cid, "\n".join(f"{s}\t{t}" for s, t in args[0]).encode(), fmt="tsv"
            )
        elif kind == "edit" and ids:
            index, column, value = args
            new = {"source": SOURCES, "target": TARGETS, "split": SPLITS}.get(column)
            text = new[value % len(new)] if new else f"note {value}"
            pairs.apply_edits(cid, edited={ids[index % len(ids)]: {column: text}})
        elif kind == "delete" and ids:
            pairs.apply_edits(cid, deleted=sorted({ids[i % len(ids)] for i in args[0]}))
        elif kind == "split" and ids:
            pairs.set_split(cid, [ids[i % len(ids)] for i in args[0]], args[1])
        elif kind == "cleanup":
            cleanups.apply_cleanup(cid, CleaningOptions(drop_copies=True))
        elif kind == "cleanup undo":
            waiting = [c for c in cleanups.list_cleanups(cid) if c.undone_at is None]
            if waiting:
                cleanups.undo_cleanup(waiting[0].id)
        elif kind == "dedupe":
            pairs.deduplicate(cid)
        elif kind == "glossary":
            glossary.set_terms(cid, args[0])
        elif kind == "rename":
            corpora.rename_corpus(cid, f"{self.name}-{args[0]}")
        elif kind == "undo":
            undo.undo_change(changes[args[0] % len(changes)])
        elif kind == "undo since":
            with session_scope() as s:
                since = s.get(Change, changes[args[0] % len(changes)]).at
            undo.undo_since(cid, since)


FILLER = [(f"填充{i}", f"filler {i}") for i in range(24)]  # so that not everything is in train


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(OPS, min_size=4, max_size=16),
    undos=st.lists(INDEX, min_size=2, max_size=12),
)
def test_undo_in_any_order_leaves_what_the_other_changes_made(
    wb_home: Path, writes: list[tuple[Any, ...]], undos: list[int]
) -> None:
    name = f"prop{next(_names)}"  # one corpus per example
    corpus_id = corpora.create_corpus(name, "zh", "en").id
    run = Run(corpus_id, name, Model(_rows(corpus_id)), seen=0)
    [created] = run.new_changes()
    for op in [("import", FILLER), *writes, *(("undo", index) for index in undos)]:
        run.step(op)
    undo.undo_change(run.change_ids()[-1])  # the latest change can always be undone
    with session_scope() as s:
        after_creation = select(Change.at).where(
            Change.corpus_id == corpus_id, Change.id > created.id
        )
        start = s.scalar(after_creation.order_by(Change.id).limit(1))
    undo.undo_since(corpus_id, start)  # (the creation cannot be undone: left alone)
    assert _rows(corpus_id) == run.model.base  # the corpus as it was created
