"""Corpora: named collections of sentence pairs in one direction (source → target language).

Services (each one unit of work): create, get-or-create, rename, delete, list, get. The
functions that take a ``session`` are the building blocks other modules use inside their own
unit of work: ``find`` a corpus by reference, ``corpus_info`` (its plain record).

A corpus is addressed by a *reference* (``CORPUS_REF_HELP``): its name, ``#ID``, or a plain
number taken as an id when no corpus has that name. A corpus hidden by a large import in
progress (``corpora.import_token`` set, see ``workbench.corpus.import_staging``) is not listed: its
own staging corpus does not exist for anyone else, and an empty corpus receiving pairs in
place says it is busy.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.engine import MAX_ID
from db.tables import Corpus, Pair
from workbench.corpus.text_rules import explicit_id, normalize_text, validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history, trash
from workbench.team.access import Permission, require

CorpusRef = int | str
CORPUS_REF_HELP = (
    "a corpus name, or its id written #ID (a plain number is taken as an id when no corpus "
    "has that name)"
)
STAGING_NAME = "(import {token})"  # a hidden staging corpus (workbench.corpus.import_staging)
_LANG_RE = re.compile(r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$")


@dataclass(frozen=True)
class CorpusInfo:
    id: int
    name: str
    src_lang: str
    tgt_lang: str
    pair_count: int
    created_at: datetime | None = None


class _NameTaken(WorkbenchError):
    pass


# ------------------------------------------------------------------------------ services


def create_corpus(name: str, src_lang: str, tgt_lang: str) -> CorpusInfo:
    """A new empty corpus; names are unique (after whitespace normalisation)."""
    require(Permission.EDIT)
    clean = validate_name(name)
    src, tgt = validate_languages(src_lang, tgt_lang)
    try:
        with session_scope() as s:
            return _create(s, clean, src, tgt)
    except IntegrityError:  # lost a race with a concurrent create
        raise _NameTaken(N_("a corpus named {name!r} already exists"), name=clean) from None


def get_or_create_corpus(name: str, src_lang: str, tgt_lang: str) -> CorpusInfo:
    """The corpus ``name``; created if missing. An existing corpus must match the languages."""
    require(Permission.EDIT)
    try:
        with session_scope() as s:
            try:
                info = corpus_info(s, find(s, name))
            except WorkbenchError:
                clean = validate_name(name)
                return _create(s, clean, *validate_languages(src_lang, tgt_lang))
    except (IntegrityError, _NameTaken):  # created concurrently
        info = get_corpus(name)
    check_languages(info.name, (info.src_lang, info.tgt_lang), (src_lang, tgt_lang))
    return info


def check_languages(name: str, has: tuple[str, str], wanted: tuple[str, str]) -> None:
    """A WorkbenchError unless corpus ``name``, which translates ``has``, translates
    ``wanted`` (source, target)."""
    if tuple(has) != tuple(wanted):
        raise WorkbenchError(
            N_("corpus {name!r} is {src}→{tgt}, not {want_src}→{want_tgt}"),
            name=name,
            src=has[0],
            tgt=has[1],
            want_src=wanted[0],
            want_tgt=wanted[1],
        )


def rename_corpus(corpus_id: CorpusRef, new_name: str) -> CorpusInfo:
    require(Permission.EDIT)
    clean = validate_name(new_name)
    try:
        with session_scope() as s:
            corpus = find(s, corpus_id)
            other = s.scalar(select(Corpus.id).where(Corpus.name == clean))
            if other is not None and other != corpus.id:
                raise WorkbenchError(N_("a corpus named {name!r} already exists"), name=clean)
            before = history.capture(s, Corpus, [corpus.id])
            corpus.name = clean
            s.flush()
            history.record(
                s,
                "rename",
                history.diff(Corpus, before, history.capture(s, Corpus, [corpus.id])),
                corpus_id=corpus.id,
                summary=f"renamed the corpus to {clean!r}",
            )
            return corpus_info(s, corpus)
    except IntegrityError:
        raise WorkbenchError(N_("a corpus named {name!r} already exists"), name=clean) from None


def delete_corpus(corpus_id: CorpusRef) -> None:
    """Move a corpus with its pairs to the trash (``workbench.team.trash``): hidden at once,
    restorable for ``trash.TRASH_DAYS`` days, then removed for good."""
    require(Permission.DELETE)
    with session_scope() as s:
        trash.trash_corpus(s, find(s, corpus_id))


def list_corpora() -> list[CorpusInfo]:
    """All corpora by name, with pair counts (one grouped query)."""
    counts = select(Pair.corpus_id, func.count().label("n")).group_by(Pair.corpus_id).subquery()
    stmt = (
        select(Corpus, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.corpus_id == Corpus.id)
        .where(Corpus.import_token.is_(None), Corpus.deleted_at.is_(None))
        .order_by(Corpus.name)
    )
    with session_scope() as s:
        return [
            CorpusInfo(c.id, c.name, c.src_lang, c.tgt_lang, int(n), c.created_at)
            for c, n in s.execute(stmt)
        ]


def get_corpus(id_or_name: CorpusRef) -> CorpusInfo:
    with session_scope() as s:
        return corpus_info(s, find(s, id_or_name))


# ------------------------------------------------------------------------ building blocks


def validate_lang(lang: str, what: str) -> str:
    """A language code as stored (e.g. zh, en, pt-BR); ``WorkbenchError`` otherwise. ``what``:
    "source" or "target"."""
    value = (lang or "").strip()
    if not _LANG_RE.match(value):
        if what == "source":
            raise WorkbenchError(
                N_("invalid source language code {lang!r} (expected e.g. zh, en, pt-BR)"), lang=lang
            )
        raise WorkbenchError(
            N_("invalid target language code {lang!r} (expected e.g. zh, en, pt-BR)"), lang=lang
        )
    return value


def validate_languages(src_lang: str, tgt_lang: str) -> tuple[str, str]:
    """A translation direction as stored (``validate_lang`` of each side); the same language
    on both sides is refused: a corpus or a version translates from one language into
    another (pt-BR→pt-PT are two)."""
    src, tgt = validate_lang(src_lang, "source"), validate_lang(tgt_lang, "target")
    if src.casefold() == tgt.casefold():
        raise WorkbenchError(
            N_("the source and target languages are both {lang!r}: they must differ"), lang=src
        )
    return src, tgt


def corpus_info(session: Session, corpus: Corpus) -> CorpusInfo:
    """The corpus as a plain record, with its pair count."""
    count = session.scalar(select(func.count()).where(Pair.corpus_id == corpus.id)) or 0
    return CorpusInfo(
        corpus.id, corpus.name, corpus.src_lang, corpus.tgt_lang, count, corpus.created_at
    )


def visible(corpus: Corpus | None) -> Corpus | None:
    """``corpus`` unless it is in the trash or hidden by a large import in progress: a
    staging corpus does not exist for anyone else; an (empty) corpus receiving pairs is busy."""
    if corpus is not None and corpus.deleted_at is not None:
        return None
    if corpus is None or corpus.import_token is None:
        return corpus
    if corpus.name == STAGING_NAME.format(token=corpus.import_token):
        return None
    raise WorkbenchError(
        N_("corpus {name!r} is receiving a large import; try again when it is done"),
        name=corpus.name,
    )


def find_by_id(session: Session, corpus_id: int) -> Corpus | None:
    """The visible corpus with this id, or None."""
    if not 0 < corpus_id <= MAX_ID:  # beyond the INTEGER column: no such row
        return None
    return visible(session.get(Corpus, corpus_id))


def find_by_name(session: Session, name: str) -> Corpus | None:
    """The visible corpus with this (already normalised) name, or None."""
    return visible(session.scalar(select(Corpus).where(Corpus.name == name)))


def find(session: Session, ref: CorpusRef) -> Corpus:
    """A visible corpus by reference (see ``CORPUS_REF_HELP``); ``WorkbenchError`` if none."""
    corpus: Corpus | None = None
    if isinstance(ref, str):
        explicit = explicit_id(ref)
        if explicit is not None:
            corpus = find_by_id(session, explicit)
        else:
            corpus = find_by_name(session, normalize_text(ref))
            if ref.strip().isascii() and ref.strip().isdigit():  # "²".isdigit() too
                by_id = find_by_id(session, int(ref))
                if corpus is not None and by_id is not None and by_id.id != corpus.id:
                    raise WorkbenchError(
                        N_(
                            "{ref!r} is both the name of corpus #{id} and the id of corpus "
                            "{name!r}: write '#{ref}' for the id, or rename the corpus"
                        ),
                        ref=ref.strip(),
                        id=corpus.id,
                        name=by_id.name,
                    )
                corpus = corpus or by_id
    elif isinstance(ref, numbers.Integral) and not isinstance(ref, bool):  # numpy ints too
        corpus = find_by_id(session, int(ref))
    if corpus is None:
        raise WorkbenchError(N_("no corpus {ref!r}"), ref=ref)
    return corpus


def _create(session: Session, name: str, src_lang: str, tgt_lang: str) -> CorpusInfo:
    if session.scalar(select(Corpus.id).where(Corpus.name == name)) is not None:
        raise _NameTaken(N_("a corpus named {name!r} already exists"), name=name)
    corpus = Corpus(name=name, src_lang=src_lang, tgt_lang=tgt_lang)
    session.add(corpus)
    session.flush()
    history.record(
        session,
        "create",
        history.diff(Corpus, {}, history.capture(session, Corpus, [corpus.id])),
        corpus_id=corpus.id,
        summary=f"created corpus {name!r}",
        reversible=False,  # Delete removes a corpus (through the trash), not undo
    )
    return CorpusInfo(corpus.id, name, src_lang, tgt_lang, 0, corpus.created_at)
