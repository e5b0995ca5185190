"""How numbers, durations and counts read on every page."""

from __future__ import annotations

from typing import Any, Literal

PairScope = Literal["all", "training", "snapshot"]


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # None or NaN
        return "—"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 pair', '2 pairs', '1,000 pairs'."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def fmt_number(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.{digits}f}"


def pair_count_label(n: int, scope: PairScope) -> str:
    """One wording per kind of pair count, so that counts of one corpus that differ say why:
    'all' = every pair of a corpus, whatever its split; 'training' = the pairs a run learns
    from; 'snapshot' = what a version was trained on (the corpus may have changed since)."""
    if scope == "all":
        return f"{plural(n, 'pair')} (all splits)"
    if scope == "training":
        return plural(n, "training pair")
    return f"trained on {plural(n, 'pair')} (snapshot)"


def lineage_line(version: Any) -> str:
    """'**Continued from** #3 · **in all** 2.2M tokens, 20 min 04 s' (or its own training when
    it started a new model): what a version's training adds up to."""
    tokens = f"{version.cumulative_tokens / 1e6:,.2f}M tokens"
    total = f"{tokens}, {fmt_duration(version.cumulative_seconds)}"
    if version.parent_version_id is not None:
        return f"**Continued from** #{version.parent_version_id} · **in all** {total}"
    if version.cumulative_tokens > version.train_tokens:
        return f"**Continued from** a deleted version · **in all** {total}"
    return f"**New model** · **trained on** {total}"
