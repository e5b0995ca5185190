"""Storage layer: engine settings, migrations == models, cascades, concurrency of first start."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from db import init
from db.engine import create_workbench_engine
from db.migrate import alembic_config, current_revision, head_revision, include_name, upgrade
from db.tables import Base, Corpus, ModelVersion, Pair, RunMetric, TrainingRun
from tests.helpers import ROOT
from workbench.settings import database_url, home
from workbench.storage import engine, session_scope


def _diffs(url: str) -> list:
    with init(url).connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"include_name": include_name, "compare_type": True}
        )
        return compare_metadata(ctx, Base.metadata)


def test_default_url_is_sqlite_file_in_home(wb_home: Path) -> None:
    assert home() == wb_home.resolve()
    assert database_url() == f"sqlite:///{wb_home.resolve() / 'workbench.db'}"
    engine()
    assert (wb_home / "workbench.db").exists()


def test_default_home_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_HOME", raising=False)
    assert home() == (tmp_path / "workbench_data").resolve()
    assert (tmp_path / "workbench_data").is_dir()


def test_sqlite_pragmas(wb_home: Path) -> None:
    with engine().connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_migrations_produce_exactly_the_models(db_url: str) -> None:
    assert _diffs(db_url) == []
    with init(db_url).connect() as conn:
        assert current_revision(conn) == head_revision()


def test_schema_comparison_detects_drift(db_url: str) -> None:
    """The no-diff test above is meaningful: a missing index is reported."""
    with init(db_url).begin() as conn:
        conn.execute(text("DROP INDEX ix_run_metrics_run_id_step"))
    diffs = _diffs(db_url)
    assert any(d[0] == "add_index" and d[1].name == "ix_run_metrics_run_id_step" for d in diffs)


def test_search_support_created(db_url: str) -> None:
    insp = inspect(init(db_url))
    if db_url.startswith("sqlite"):
        assert "pairs_fts" in insp.get_table_names()
    else:
        names = {ix["name"] for ix in insp.get_indexes("pairs")}
        assert {"ix_pairs_source_trgm", "ix_pairs_target_trgm"} <= names


def test_cascades_and_set_null(db_url: str) -> None:
    with session_scope() as s:
        c = Corpus(name="c", src_lang="zh", tgt_lang="en")
        s.add(c)
        s.flush()
        s.add(Pair(corpus_id=c.id, source="a", target="b", split="train", content_hash="h1"))
        run = TrainingRun(corpus_id=c.id, config={"preset": "tiny"}, snapshot_pair_ids=[1, 2])
        s.add(run)
        s.flush()
        s.add(RunMetric(run_id=run.id, step=1, train_loss=3.5))
        s.add(ModelVersion(run_id=run.id, corpus_id=c.id, artifact_path="x", metrics={"b": 1}))
        cid, rid = c.id, run.id
    with session_scope() as s:
        s.delete(s.get(TrainingRun, rid))
    with session_scope() as s:
        assert s.scalar(select(func.count()).select_from(RunMetric)) == 0
        v = s.scalars(select(ModelVersion)).one()
        assert v.run_id is None and v.metrics == {"b": 1}
        s.delete(s.get(Corpus, cid))
    with session_scope() as s:
        assert s.scalar(select(func.count()).select_from(Pair)) == 0
        assert s.scalars(select(ModelVersion)).one().corpus_id is None


def test_datetimes_are_aware_utc(db_url: str) -> None:
    beat = datetime(2030, 1, 2, 3, 4, 5, 678, tzinfo=UTC) + timedelta(hours=0)
    with session_scope() as s:
        run = TrainingRun(config={}, heartbeat_at=beat.astimezone(), status="running")
        s.add(run)
        s.flush()
        rid = run.id
    with session_scope() as s:
        run = s.get(TrainingRun, rid)
        assert run.heartbeat_at == beat and run.heartbeat_at.tzinfo is not None
        assert run.created_at.tzinfo is not None
        assert abs((datetime.now(UTC) - run.created_at).total_seconds()) < 60
        assert run.cancel_requested is False and run.snapshot_pair_ids == []


def test_session_scope_rolls_back(db_url: str) -> None:
    with pytest.raises(RuntimeError), session_scope() as s:
        s.add(Corpus(name="gone", src_lang="zh", tgt_lang="en"))
        s.flush()
        raise RuntimeError
    with session_scope() as s:
        assert s.scalar(select(func.count()).select_from(Corpus)) == 0


def test_an_engine_is_migrated_by_db_init_only(tmp_path: Path) -> None:
    """Creating an engine touches no schema; `db.init` opens the database and migrates it."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    engine = create_workbench_engine(url)
    assert inspect(engine).get_table_names() == []
    engine.dispose()
    assert {"corpora", "pairs", "training_runs"} <= set(inspect(init(url)).get_table_names())


def test_db_imports_nothing_of_the_application() -> None:
    """The storage layer stands alone: importing all of it loads no workbench or UI module."""
    code = (
        "import sys, db, db.engine, db.migrate, db.tables, db.search\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('workbench', 'ui')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_concurrent_first_start_migrates_once(db_url: str) -> None:
    """Several processes opening a brand-new database at once all succeed."""
    code = (
        "from workbench.storage import engine; from db.migrate import current_revision\n"
        "with engine().connect() as c: print(current_revision(c))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip() == head_revision()
    assert _diffs(db_url) == []


def _database_at(tmp_path: Path, revision: str) -> Engine:
    """A new SQLite database migrated only up to ``revision``: a workbench of that age."""
    engine = create_workbench_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(engine, revision)
    return engine


def upgrade_down(engine: Engine, revision: str) -> None:
    """Alembic's downgrade on ``engine`` (the application only ever upgrades)."""
    from alembic import command

    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def test_a_database_of_an_older_revision_is_upgraded_with_its_rows(tmp_path: Path) -> None:
    """A workbench from before 0002 (no run attempts) keeps its runs when the app upgrades it."""
    engine = _database_at(tmp_path, "0001")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO training_runs (config, status, device, snapshot_pair_ids, "
                "snapshot_hash, snapshot_size, created_at) "
                "VALUES ('{}', 'running', 'cpu', '[]', '', 0, '2026-01-01 00:00:00')"
            )
        )
    upgrade(engine)
    with engine.connect() as conn:
        assert current_revision(conn) == head_revision()
        assert conn.execute(text("SELECT status, attempts FROM training_runs")).one() == (
            "running",
            0,
        )
    engine.dispose()


def test_upgrade_to_0003_backfills_metric_kinds_and_moves_the_resume_note(tmp_path: Path) -> None:
    """Rows written before 0003: epoch ends (a new validation loss) become kind 'epoch', and a
    queued run's resume note moves out of `error` into `note`."""
    engine = _database_at(tmp_path, "0002")
    with engine.begin() as conn:
        for status, error in (("queued", "resumed note"), ("failed", "it broke")):
            conn.execute(
                text(
                    "INSERT INTO training_runs (config, status, device, snapshot_pair_ids, "
                    "snapshot_hash, snapshot_size, error, created_at) VALUES "
                    f"('{{}}', '{status}', 'cpu', '[]', '', 0, '{error}', '2026-01-01 00:00:00')"
                )
            )
        for step, valid in ((10, None), (20, 4.0), (30, 4.0), (40, 3.5)):
            conn.execute(
                text("INSERT INTO run_metrics (run_id, step, valid_loss) VALUES (1, :s, :v)"),
                {"s": step, "v": valid},
            )
    upgrade(engine)
    with engine.connect() as conn:
        kinds = conn.execute(text("SELECT step, kind FROM run_metrics ORDER BY step")).all()
        assert kinds == [(10, "step"), (20, "epoch"), (30, "step"), (40, "epoch")]
        runs = conn.execute(text("SELECT status, error, note FROM training_runs ORDER BY id"))
        assert runs.all() == [("queued", None, "resumed note"), ("failed", "it broke", None)]
    engine.dispose()


def _add_an_old_corpus_with_one_pair(conn: Connection) -> None:
    """Corpus 1 'old' (zh→en) with one train pair, written as a revision before ours would."""
    conn.execute(
        text(
            "INSERT INTO corpora (name, src_lang, tgt_lang, created_at) "
            "VALUES ('old', 'zh', 'en', '2026-01-01 00:00:00')"
        )
    )
    conn.execute(
        text(
            "INSERT INTO pairs (corpus_id, source, target, split, note, content_hash, "
            "created_at, updated_at) VALUES (1, '你好', 'hello', 'train', '', 'h', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
    )


def test_upgrade_to_0004_keeps_corpora_visible(tmp_path: Path) -> None:
    """Corpora and pairs written before 0004 stay real corpora (no import_token)."""
    engine = _database_at(tmp_path, "0003")
    with engine.begin() as conn:
        _add_an_old_corpus_with_one_pair(conn)
    upgrade(engine)
    with engine.connect() as conn:
        assert current_revision(conn) == head_revision()
        assert conn.execute(text("SELECT name, import_token FROM corpora")).all() == [("old", None)]
    engine.dispose()


def test_upgrade_to_0005_keeps_versions_unserved_and_serving_follows_deletes(
    tmp_path: Path,
) -> None:
    """Versions registered before 0005 stay and nothing is served nor keyed; a served version
    that is deleted stops being served (its row goes with it); a downgrade drops the tables."""
    engine = _database_at(tmp_path, "0004")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO model_versions (name, notes, artifact_path, sha256, param_count, "
                "metrics, device, src_lang, tgt_lang, train_pair_count, train_seconds, "
                "created_at) VALUES ('old v1', '', 'models/1', '', 0, '{}', 'cpu', 'zh', 'en', "
                "0, 0.0, '2026-01-01 00:00:00')"
            )
        )
    upgrade(engine)
    with engine.begin() as conn:
        assert current_revision(conn) == head_revision()
        assert conn.execute(text("SELECT name FROM model_versions")).all() == [("old v1",)]
        assert conn.execute(text("SELECT count(*) FROM served_versions")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM api_keys")).scalar() == 0
        conn.execute(
            text(
                "INSERT INTO served_versions (src_lang, tgt_lang, version_id) "
                "VALUES ('zh', 'en', 1)"
            )
        )
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM model_versions WHERE id = 1"))
        assert conn.execute(text("SELECT count(*) FROM served_versions")).scalar() == 0
    upgrade_down(engine, "0004")
    assert {"served_versions", "api_keys"}.isdisjoint(inspect(engine).get_table_names())
    engine.dispose()


def test_upgrade_from_0005_adds_glossaries_pools_and_cleanups(tmp_path: Path) -> None:
    """A workbench of revision 0005 keeps its corpus and pairs, gains empty glossary, pool and
    clean-up tables whose rows follow their corpus (cascade), and refuses unknown statuses."""
    engine = _database_at(tmp_path, "0005")
    with engine.begin() as conn:
        _add_an_old_corpus_with_one_pair(conn)
    upgrade(engine)
    with engine.begin() as conn:
        assert current_revision(conn) == head_revision()
        assert conn.execute(text("SELECT source, target FROM pairs")).all() == [("你好", "hello")]
        for table in ("glossary_terms", "pool_sentences", "pool_jobs", "cleanups"):
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0
        conn.execute(
            text("INSERT INTO glossary_terms (corpus_id, source_term, target_term) "
                 "VALUES (1, '你好', 'hello')")
        )  # fmt: skip
        conn.execute(
            text("INSERT INTO pool_sentences (corpus_id, source, content_hash, status) "
                 "VALUES (1, '早上好', 'x', 'new')")
        )  # fmt: skip
        conn.execute(
            text("INSERT INTO cleanups (corpus_id, options, summary) VALUES (1, '{}', '{}')")
        )
    with pytest.raises(Exception, match="CHECK"), engine.begin() as conn:
        conn.execute(
            text("INSERT INTO pool_sentences (corpus_id, source, content_hash, status) "
                 "VALUES (1, 'a', 'y', 'lost')")
        )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM corpora"))
        for table in ("glossary_terms", "pool_sentences", "cleanups"):
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0
    engine.dispose()


def test_a_database_url_that_cannot_work_is_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    from db.engine import DatabaseConfigError

    missing = tmp_path / "no" / "such"
    with pytest.raises(DatabaseConfigError, match="does not exist"):
        create_workbench_engine(f"sqlite:///{missing}/x.db")
    assert not (tmp_path / "no").exists()
    for url, match in (
        ("not a url", "not a database URL"),
        ("nosuch://x", "unknown database backend"),
        ("mysql://user:secret@host/db", r"driver .* is not installed"),
    ):
        with pytest.raises(DatabaseConfigError, match=match) as info:
            create_workbench_engine(url)
        assert "secret" not in str(info.value) and "\n" not in str(info.value)


def test_upgrade_to_0008_backfills_lineage_and_downgrades_without_losing_rows(
    tmp_path: Path,
) -> None:
    """Versions from before 0008: a version fine-tuned by a run gets that run's start version
    as its parent, and the tokens and seconds add up along the chain; a downgrade drops only
    the new columns (no table copy that would cascade into the rows referring to them)."""
    engine = _database_at(tmp_path, "0006")
    with engine.begin() as conn:
        _add_an_old_corpus_with_one_pair(conn)
        for vid, init, tokens, seconds in (
            (1, None, 1000, 60.0),
            (2, 1, 500, 30.0),
            (3, 2, 250, 15.0),
        ):
            conn.execute(
                text(
                    "INSERT INTO training_runs (id, config, status, device, snapshot_pair_ids, "
                    "snapshot_hash, snapshot_size, init_version_id, created_at) VALUES "
                    "(:id, '{}', 'succeeded', 'cpu', '[]', '', 0, :init, '2026-01-01 00:00:00')"
                ),
                {"id": vid, "init": init},
            )
            conn.execute(
                text(
                    "INSERT INTO model_versions (id, run_id, name, notes, artifact_path, sha256, "
                    "param_count, metrics, device, src_lang, tgt_lang, train_pair_count, "
                    "train_seconds, created_at) VALUES (:id, :id, 'v', '', 'models/x', '', 0, "
                    ":m, 'cpu', 'zh', 'en', 0, :s, '2026-01-01 00:00:00')"
                ),
                {"id": vid, "m": f'{{"tokens_trained": {tokens}}}', "s": seconds},
            )
        conn.execute(
            text(
                "INSERT INTO served_versions (src_lang, tgt_lang, version_id) "
                "VALUES ('zh', 'en', 3)"
            )
        )
    upgrade(engine)
    with engine.connect() as conn:
        lineage = conn.execute(
            text(
                "SELECT id, parent_version_id, train_tokens, cumulative_tokens, "
                "cumulative_seconds FROM model_versions ORDER BY id"
            )
        ).all()
        assert lineage == [
            (1, None, 1000, 1000, 60.0),
            (2, 1, 500, 1500, 90.0),
            (3, 2, 250, 1750, 105.0),
        ]
        assert conn.execute(text("SELECT splits_grouped FROM corpora")).scalar() == 0
    upgrade_down(engine, "0006")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM model_versions")).scalar() == 3
        assert conn.execute(text("SELECT count(*) FROM served_versions")).scalar() == 1
        assert conn.execute(text("SELECT count(*) FROM pairs")).scalar() == 1
        assert "split_note" not in {c["name"] for c in inspect(engine).get_columns("corpora")}


def test_upgrade_to_0009_makes_old_keys_viewers_and_adds_users(tmp_path: Path) -> None:
    """Team mode's revision: API keys made before it become viewers (they could only translate),
    old runs and versions have no recorded person, roles outside the three are refused, and a
    downgrade takes it all back. (The revision before 0009 is read from it: the lead re-chains.)"""
    import importlib.util

    path = ROOT / "db" / "migrations" / "versions" / "0009_users_roles.py"
    spec = importlib.util.spec_from_file_location("m0009", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    engine = _database_at(tmp_path, migration.down_revision)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_keys (name, key_hash, prefix, created_at) "
                "VALUES ('old', 'h', 'wbk_x', '2026-01-01 00:00:00')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO training_runs (config, status, device, snapshot_pair_ids, "
                "snapshot_hash, snapshot_size, created_at) "
                "VALUES ('{}', 'succeeded', 'cpu', '[]', '', 0, '2026-01-01 00:00:00')"
            )
        )
    upgrade(engine, "0009")
    with engine.begin() as conn:
        assert conn.execute(text("SELECT name, role FROM api_keys")).all() == [("old", "viewer")]
        assert conn.execute(text("SELECT started_by FROM training_runs")).all() == [(None,)]
        conn.execute(text("INSERT INTO users (email, role) VALUES ('a@example.org', 'admin')"))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text("INSERT INTO users (email, role) VALUES ('b@example.org', 'owner')"))
    upgrade_down(engine, migration.down_revision)
    assert "users" not in inspect(engine).get_table_names()
    assert "role" not in {c["name"] for c in inspect(engine).get_columns("api_keys")}
    engine.dispose()
