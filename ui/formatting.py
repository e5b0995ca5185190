"""How numbers, durations, dates and counts read on every page, in the session's language
(Babel formats for ``ui.i18n.locale()``), and how a listing of stored records looks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, Literal

import streamlit as st
from babel.dates import format_date, format_datetime
from babel.numbers import format_compact_decimal, format_decimal

from ui.i18n import N_, _, locale, n_, translate
from workbench.models.model_import import ORIGIN_FORMATS

if TYPE_CHECKING:
    import pandas as pd

PairScope = Literal["all", "training", "snapshot"]
SPLIT_LABELS = {"train": N_("Train"), "valid": N_("Valid"), "test": N_("Test")}


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]<>~$|])")  # what formats inline text


def markdown_literal(text: str) -> str:
    """``text`` shown as it is inside Markdown (an e-mail in bold: ``*``, ``_``, ``<`` … of a
    sign-in claim never format anything)."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)


def split_label(split: str) -> str:
    """A split's name (``workbench.pairs.SPLITS``) as the pages show it."""
    return translate(SPLIT_LABELS.get(split, split))


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # None or NaN
        return "—"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return _("{s} s", s=seconds)
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return _("{m} min {s:02d} s", m=minutes, s=secs)
    hours, minutes = divmod(minutes, 60)
    return _("{h} h {m:02d} min", h=hours, m=minutes)


def fmt_int(value: int) -> str:
    """'1,000' (English), as the session's language writes a whole number."""
    return format_decimal(value, locale=locale())


def fmt_number(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:
        return "—"
    pattern = "#,##0." + "0" * digits if digits else "#,##0"
    return format_decimal(value, format=pattern, locale=locale())


def fmt_count(value: float) -> str:
    """A large count in the session's language, short: '340K', '2.2M' (English); '34万',
    '220万' (Chinese counts in ten thousands, not in millions)."""
    return format_compact_decimal(value, locale=locale(), fraction_digits=2)


def fmt_datetime(moment: datetime | None, seconds: bool = False) -> str:
    """A moment as the session's language writes it, in UTC (the database's clock; a naive
    datetime from SQLite is UTC)."""
    if moment is None:
        return "—"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    pattern = "yyyy-MM-dd HH:mm:ss" if seconds else "yyyy-MM-dd HH:mm"
    return format_datetime(moment, pattern, tzinfo=UTC, locale=locale())


def fmt_date(moment: datetime | date | None) -> str:
    """A day as the session's language writes it (the date of a UTC moment)."""
    if moment is None:
        return "—"
    if isinstance(moment, datetime):
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
        moment = moment.date()
    return format_date(moment, "yyyy-MM-dd", locale=locale())


def pair_count_label(n: int, scope: PairScope) -> str:
    """One wording per kind of pair count, so that counts of one corpus that differ say why:
    'all' = every pair of a corpus, whatever its split; 'training' = the pairs a run learns
    from; 'snapshot' = what a version was trained on (the corpus may have changed since)."""
    if scope == "all":
        return n_("{n} pair (all splits)", "{n} pairs (all splits)", n)
    if scope == "training":
        return n_("{n} training pair", "{n} training pairs", n)
    return n_("trained on {n} pair (snapshot)", "trained on {n} pairs (snapshot)", n)


def markdown_text(text: str) -> str:
    """`text` (a name or a licence from a model's files) shown as itself inside Markdown:
    every ASCII punctuation character escaped, so nothing in it formats or links."""
    return "".join(f"\\{c}" if c in _MARKDOWN_PUNCTUATION else c for c in text)


_MARKDOWN_PUNCTUATION = frozenset("\\`*_[]<>#|~$:&")  # what starts formatting mid-line


def origin_line(origin: dict[str, Any]) -> str:
    """'**Public model** · from opus-mt-zh-en.zip · Marian (Hugging Face) · Hugging Face id
    Helsinki-NLP/opus-mt-zh-en · licence cc-by-4.0': where a version nobody here trained
    came from (``workbench.models.model_import.ORIGIN_KEYS``), in Markdown."""
    shown = {k: markdown_text(str(v)) for k, v in origin.items() if v}
    fmt = ORIGIN_FORMATS.get(origin.get("format") or "")
    parts = [_("**Public model** · from {file}", file=shown.get("file", "—"))]
    parts.append(translate(fmt) if fmt else shown.get("format", "—"))
    if "hub_id" in shown:
        parts.append(_("Hugging Face id {id}", id=shown["hub_id"]))
    if "licence" in shown:
        parts.append(_("licence {licence}", licence=shown["licence"]))
    elif "licence_file" in shown:
        parts.append(_("licence in its {file}", file=shown["licence_file"]))
    else:
        parts.append(_("its files state no licence"))
    return " · ".join(parts)


def lineage_line(version: Any, parent: Any = None) -> str:
    """'**Continued from** #3 · **in all** 2.2M tokens, 20 min 04 s' (or its own training when
    it started a new model; or, for a version nobody here trained, where it came from): what
    a version's training adds up to. `parent`: the version it continued, when still there (a
    public one is named: its pretraining is not counted here)."""
    if version.origin is not None:
        return origin_line(version.origin)
    tokens = fmt_count(version.cumulative_tokens)
    duration = fmt_duration(version.cumulative_seconds)
    if parent is not None and parent.origin is not None:
        return _(
            "**Continued from** #{parent} {name}, a public model · **trained here** {tokens} "
            "tokens, {duration}",
            parent=parent.id,
            name=markdown_text(parent.name),
            tokens=tokens,
            duration=duration,
        )
    if version.parent_version_id is not None:
        return _(
            "**Continued from** #{parent} · **in all** {tokens} tokens, {duration}",
            parent=version.parent_version_id,
            tokens=tokens,
            duration=duration,
        )
    if version.cumulative_tokens > version.train_tokens:
        return _(
            "**Continued from** a deleted version · **in all** {tokens} tokens, {duration}",
            tokens=tokens,
            duration=duration,
        )
    return _(
        "**New model** · **trained on** {tokens} tokens, {duration}",
        tokens=tokens,
        duration=duration,
    )


def records_table(table: pd.DataFrame, columns: Sequence[str], config: dict[str, Any]) -> None:
    """A listing of stored records (the versions, the runs): ``columns`` in that order,
    labelled by ``config``, across the page's width and without pandas' index, alike on
    every page."""
    st.dataframe(
        table, hide_index=True, width="stretch", column_order=columns, column_config=config
    )
