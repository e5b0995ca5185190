"""The workbench schema as typed SQLAlchemy 2.x declarative models.

Every datetime column is a timezone-aware UTC ``datetime`` in Python on every backend
(``UTCDateTime``), so code comparing heartbeats with ``utcnow()`` works the same on SQLite
(which has no time zones) and PostgreSQL.

Search support lives outside this metadata because it is backend-specific and created by the
migration: on SQLite an FTS5 table ``pairs_fts`` (trigram tokenizer) kept in sync by triggers,
on PostgreSQL ``pg_trgm`` GIN indexes ``ix_pairs_source_trgm`` / ``ix_pairs_target_trgm``;
``db.search`` holds every query that uses them.

(Over 450 lines on purpose: the whole schema is one metadata, which Alembic compares with the
migrations and the schema test compares with both databases.)
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    func,
    literal_column,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

SPLITS = ("train", "valid", "test")


class RunStatus(StrEnum):
    """Where a training run is in its life. The values are what the ``status`` column holds;
    every change from one to another is made in ``workbench.training.runs``."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class PoolStatus(StrEnum):
    """Where a pool sentence is in the review: waiting, or what the reviewer did with it."""

    NEW = "new"
    ACCEPTED = "accepted"  # the machine translation became a pair as it was
    EDITED = "edited"  # a corrected translation became a pair
    SKIPPED = "skipped"


class Role(StrEnum):
    """What a team member may do, weakest first (``workbench.team.access`` says what each
    allows). The values are what ``users.role`` and ``api_keys.role`` hold."""

    VIEWER = "viewer"
    EDITOR = "editor"
    ADMIN = "admin"


CLEANUP_ACTIONS = ("removed", "changed")
DRAFT_TABLES = ("pairs", "glossary")  # the grids whose unsaved edits are kept as drafts


def _one_of(column: str, values: Any) -> str:
    """The SQL of a CHECK that ``column`` holds one of ``values``."""
    return f"{column} IN ({', '.join(repr(str(v)) for v in values)})"


NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only kind stored in the database)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC; always returns aware UTC datetimes (naive input is taken as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        # SQLite keeps no offset: store naive UTC text so ordering/comparison stay lexical.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads it as a class attribute)
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[int]: JSON(),
        list[Any]: JSON(),
    }


# Never reuse ids on SQLite: run snapshots, UI state and models/<id>/ folders refer to them.
_AUTOINCREMENT = {"sqlite_autoincrement": True}


def _job_table_args(table: str) -> tuple[Any, ...]:
    """A table of background jobs (training runs, pool jobs): its status is one of
    ``RunStatus``, and workers claim the oldest queued row through the (status, id) index."""
    return (
        CheckConstraint(_one_of("status", RunStatus), name="status"),
        Index(f"ix_{table}_status_id", "status", "id"),
        _AUTOINCREMENT,
    )


def _created() -> Any:
    return mapped_column(UTCDateTime(), default=utcnow, server_default=func.now())


class Corpus(Base):
    """A named collection of sentence pairs in one direction (src_lang -> tgt_lang).

    A row with an ``import_token`` is hidden while a large import fills it (see
    ``workbench.corpus.import_staging``): a staging corpus of the import's own, or an empty corpus
    receiving pairs in place. No listing shows it.
    """

    __tablename__ = "corpora"
    __table_args__ = (_AUTOINCREMENT,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    src_lang: Mapped[str] = mapped_column(String(32))
    tgt_lang: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = _created()
    # The filling import's token (it names the import's lock file); NULL when not hidden.
    import_token: Mapped[str | None] = mapped_column(String(32))
    # Whether its valid/test split follows the grouped rule (``workbench.corpus.splits``): corpora
    # from before it are regrouped once by the data step that runs after migrating.
    splits_grouped: Mapped[bool] = mapped_column(Boolean, default=True, server_default=false())
    # What the latest regrouping moved, for the Corpus page ('' when nothing ever moved).
    split_note: Mapped[str] = mapped_column(Text, default="", server_default="")
    # In the trash since (``workbench.team.trash``): hidden, and really removed after the
    # trash period. ``name`` then holds a trash name so the old one is free to reuse;
    # ``deleted_name`` keeps the old one for a restore.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    deleted_name: Mapped[str | None] = mapped_column(String(200))


class Pair(Base):
    """One parallel sentence pair; text is stored normalised (NFC, collapsed whitespace).

    ``content_hash`` is a digest of the normalised (source, target); it is unique per corpus,
    which makes exact duplicates impossible and import de-duplication an index lookup.
    """

    __tablename__ = "pairs"
    __table_args__ = (
        UniqueConstraint("corpus_id", "content_hash"),
        Index("ix_pairs_corpus_id_id", "corpus_id", "id"),  # pages in id order
        Index("ix_pairs_corpus_id_split_id", "corpus_id", "split", "id"),
        CheckConstraint(_one_of("split", SPLITS), name="split"),
        _AUTOINCREMENT,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(Text)
    split: Mapped[str] = mapped_column(String(8), default="train")
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    content_hash: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )
    # Raised by one on every write: a save names the revision its edit was based on, and a
    # pair changed since is a conflict, never a silent overwrite (migration 0011). Every
    # UPDATE that does not set it raises it, ORM flush or Core statement alike.
    revision: Mapped[int] = mapped_column(
        Integer, default=1, server_default="1", onupdate=literal_column("revision") + 1
    )


class TrainingRun(Base):
    """One training job: frozen config + corpus snapshot, claimed and driven by a worker."""

    __tablename__ = "training_runs"
    __table_args__ = _job_table_args(__tablename__)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int | None] = mapped_column(
        ForeignKey("corpora.id", ondelete="SET NULL"), index=True
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.QUEUED.value)
    device: Mapped[str] = mapped_column(String(32), default="cpu")
    snapshot_pair_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    snapshot_hash: Mapped[str] = mapped_column(String(64), default="")
    snapshot_size: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(128))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    error: Mapped[str | None] = mapped_column(Text)
    # No FK: a version may be deleted while old runs still name it as their starting point.
    init_version_id: Mapped[int | None] = mapped_column(Integer)
    # Claims so far: a run whose worker died is re-queued and resumed, up to a limit.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    progress_step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    progress_total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    eta_s: Mapped[float | None] = mapped_column(Float)
    # Why the run ended (a core_model StopReason value); None while it runs or if it failed.
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    # The latest progress: which limit binds (steps or time) and what may stop it early.
    progress_detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # A note for the user that is not an error, e.g. that the run was resumed.
    note: Mapped[str | None] = mapped_column(Text)
    # Who queued the run (an e-mail, or the local admin's name); NULL for runs before 0009.
    started_by: Mapped[str | None] = mapped_column(String(320))
    created_at: Mapped[datetime] = _created()
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class RunMetric(Base):
    """A progress row streamed by the worker (one per logging step / validation)."""

    __tablename__ = "run_metrics"
    __table_args__ = (Index("ix_run_metrics_run_id_step", "run_id", "step"), _AUTOINCREMENT)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("training_runs.id", ondelete="CASCADE"))
    # 'start' | 'step' (periodic) | 'epoch' (after validation) | 'done'
    kind: Mapped[str] = mapped_column(String(8), default="step", server_default="step")
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[float | None] = mapped_column(Float)
    train_loss: Mapped[float | None] = mapped_column(Float)
    valid_loss: Mapped[float | None] = mapped_column(Float)
    lr: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    bleu: Mapped[float | None] = mapped_column(Float)
    chrf: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = _created()


class ModelVersion(Base):
    """A trained model registered in the workbench; files live in ``artifact_path``."""

    __tablename__ = "model_versions"
    __table_args__ = (_AUTOINCREMENT,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("training_runs.id", ondelete="SET NULL"), index=True
    )
    corpus_id: Mapped[int | None] = mapped_column(
        ForeignKey("corpora.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str] = mapped_column(String(200), default="")
    notes: Mapped[str] = mapped_column(Text, default="", server_default="")
    artifact_path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    param_count: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    device: Mapped[str] = mapped_column(String(32), default="cpu")
    src_lang: Mapped[str] = mapped_column(String(32), default="")
    tgt_lang: Mapped[str] = mapped_column(String(32), default="")
    train_pair_count: Mapped[int] = mapped_column(Integer, default=0)
    train_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # Lineage: the version this one continued (warm start), the training tokens of its own
    # run, and the tokens and seconds behind it (its own plus every ancestor's).
    # (no foreign key: see migration 0008; deleting a version clears its children's parent)
    parent_version_id: Mapped[int | None] = mapped_column(Integer)
    train_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cumulative_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cumulative_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Who trained it: its run's ``started_by`` (kept when the run is deleted), or who
    # registered a model folder; NULL for versions before 0009.
    trained_by: Mapped[str | None] = mapped_column(String(320))
    # Where a registered public model came from (file, format, model type, languages, hub
    # id, licence); NULL for a version trained here (migration 0011).
    origin: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _created()


class ServedVersion(Base):
    """The version that answers HTTP requests for one language pair (``workbench serve``).

    One row per pair: choosing another version for the pair replaces the row's version, and
    deleting a version stops serving it (the row goes with it).
    """

    __tablename__ = "served_versions"

    src_lang: Mapped[str] = mapped_column(String(32), primary_key=True)
    tgt_lang: Mapped[str] = mapped_column(String(32), primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), unique=True
    )
    since: Mapped[datetime] = _created()


class ApiKey(Base):
    """A key for the HTTP API. Only a digest of the key is stored (the key itself is shown
    once, when it is created), plus its first characters so people can tell keys apart.

    The limits are per key; NULL means the server's default.
    """

    __tablename__ = "api_keys"
    __table_args__ = (_AUTOINCREMENT,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256, hex
    prefix: Mapped[str] = mapped_column(String(16))
    requests_per_minute: Mapped[int | None] = mapped_column(Integer)
    chars_per_request: Mapped[int | None] = mapped_column(Integer)
    # What a request with this key may do (a Role value); translating needs only a viewer.
    role: Mapped[str] = mapped_column(
        String(16), default=Role.VIEWER.value, server_default=Role.VIEWER.value
    )
    created_at: Mapped[datetime] = _created()
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class User(Base):
    """A team member's role, by e-mail (as the OpenID Connect provider reports it, lower
    case). Admins named in ``WORKBENCH_ADMINS`` need no row: configuration makes them admins."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_one_of("role", Role), name="role"), _AUTOINCREMENT)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    added_by: Mapped[str | None] = mapped_column(String(320))
    created_at: Mapped[datetime] = _created()


class GlossaryTerm(Base):
    """A corpus' required translation of a source term: wherever ``source_term`` occurs in
    a source sentence, the output must contain ``target_term`` (``workbench.corpus.glossary``)."""

    __tablename__ = "glossary_terms"
    __table_args__ = (UniqueConstraint("corpus_id", "source_term"), _AUTOINCREMENT)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    source_term: Mapped[str] = mapped_column(String(200))
    target_term: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = _created()
    # As ``Pair.revision``: the base of an edit, checked when it is saved.
    revision: Mapped[int] = mapped_column(
        Integer, default=1, server_default="1", onupdate=literal_column("revision") + 1
    )


class PoolJob(Base):
    """A background translation of a corpus' pool with one version (two: their disagreement
    ranks the sentences). Its status goes through the values of ``RunStatus``; every change
    is made in ``workbench.curation.pool_jobs``."""

    __tablename__ = "pool_jobs"
    __table_args__ = _job_table_args(__tablename__)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL")
    )
    second_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL")
    )
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.QUEUED.value)
    total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    worker_id: Mapped[str | None] = mapped_column(String(128))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created()
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class PoolSentence(Base):
    """A monolingual source sentence waiting to be translated, ranked and reviewed.

    ``uncertainty`` is what ranks it (higher: review first), written with ``output`` by the
    latest pool job that translated it (``job_id``). A reviewed sentence records the pair it
    became (``pair_id``; no FK: the pair may be edited or deleted later)."""

    __tablename__ = "pool_sentences"
    __table_args__ = (
        UniqueConstraint("corpus_id", "content_hash"),
        Index(
            "ix_pool_sentences_corpus_id_status_uncertainty", "corpus_id", "status", "uncertainty"
        ),
        CheckConstraint(_one_of("status", PoolStatus), name="status"),
        _AUTOINCREMENT,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(8), default=PoolStatus.NEW.value)
    output: Mapped[str | None] = mapped_column(Text)
    second_output: Mapped[str | None] = mapped_column(Text)
    uncertainty: Mapped[float | None] = mapped_column(Float)
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("pool_jobs.id", ondelete="SET NULL"), index=True
    )
    pair_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created()
    reviewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Cleanup(Base):
    """One clean-up of a corpus (``workbench.corpus.cleaning``): the options it ran with, what it
    did, and whether it was undone. ``cleanup_changes`` keeps what it removed or changed."""

    __tablename__ = "cleanups"
    __table_args__ = (_AUTOINCREMENT,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)  # reason -> pairs
    created_at: Mapped[datetime] = _created()
    undone_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class CleanupChange(Base):
    """A pair as it was before a clean-up removed or changed it: enough to put it back."""

    __tablename__ = "cleanup_changes"
    __table_args__ = (
        CheckConstraint(_one_of("action", CLEANUP_ACTIONS), name="action"),
        _AUTOINCREMENT,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cleanup_id: Mapped[int] = mapped_column(
        ForeignKey("cleanups.id", ondelete="CASCADE"), index=True
    )
    pair_id: Mapped[int] = mapped_column(Integer)  # no FK: a removed pair's row is gone
    action: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(Text)
    split: Mapped[str] = mapped_column(String(8))
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    content_hash: Mapped[str] = mapped_column(String(32))
    pair_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The content hash the clean-up gave a changed pair: undo restores only an unchanged one.
    new_hash: Mapped[str | None] = mapped_column(String(32))


class TableDraft(Base):
    """The unsaved edits of one grid (``table``: pairs or glossary) of one corpus, made in one
    browser (``browser_key``, kept in its address): kept here, not in the widget, so that a
    corpus switch, another page, a reload or a crashed browser loses none of them
    (``workbench.corpus.drafts``). ``payload`` holds the edits by row id, not by row position."""

    __tablename__ = "table_drafts"
    __table_args__ = (
        UniqueConstraint("browser_key", "corpus_id", "table_kind"),
        CheckConstraint(_one_of("table_kind", DRAFT_TABLES), name="table_kind"),
        _AUTOINCREMENT,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    browser_key: Mapped[str] = mapped_column(String(64))
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"), index=True)
    table_kind: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class Change(Base):
    """One recorded write (``workbench.team.history``): who made it, when, and what it did.

    Append-only: rows are added in the transaction of the write they describe and never
    updated or deleted. ``items`` lists the rows the write touched, each
    ``{"table", "id", "before", "after"}`` with the exact stored values (None: the row did
    not exist); an import lists only its new pairs' ids as ``{"table", "id_ranges"}``.
    ``undoes`` names the change an undo reversed.
    """

    __tablename__ = "changes"
    __table_args__ = (
        Index("ix_changes_corpus_id_id", "corpus_id", "id"),
        Index("ix_changes_at", "at"),
        _AUTOINCREMENT,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))
    # No FKs: a change outlives the corpus or version it describes.
    corpus_id: Mapped[int | None] = mapped_column(Integer)
    entity: Mapped[str] = mapped_column(String(16))  # pair, term, corpus, version
    entity_id: Mapped[int | None] = mapped_column(Integer)  # when the change is about one row
    action: Mapped[str] = mapped_column(String(16))
    summary: Mapped[str] = mapped_column(Text, default="", server_default="")
    items: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reversible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    undoes: Mapped[int | None] = mapped_column(Integer, index=True)
