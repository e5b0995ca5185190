"""What a public model's own files say about it besides its weights: where it came from and
under which licence, so that a version made from it can say so (and never look like a model
trained here).

* the model card (README.md, as the Hugging Face hub writes it): its benchmark table (the
  rows of a Markdown table whose header names BLEU) and its YAML front matter's ``license:``;
* config.json's ``license`` (some configs carry one) and its ``_name_or_path`` — the hub id,
  e.g. ``Helsinki-NLP/opus-mt-zh-en``, when it is one (a local path such as
  ``/tmp/opus-mt-zh-en`` says nothing about the hub and is left out);
* a licence file (LICENSE, COPYING …): its name, and its first line as the licence when
  neither the card nor the config names one ("MIT License", "Apache License").

Every file is read through ``untrusted_files`` (regular, bounded); only short clean strings
are kept.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from core_model.untrusted_files import read_text

CARD_FILE = "README.md"
LICENCE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING")
HUB_ID_KEYS = ("_name_or_path", "name_or_path", "model_id")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
_SHORT = 100  # the most characters kept of a licence or an id


def read_card(folder: str | Path) -> str:
    """The model card's text ('' when the folder has none); a card that is a link, a FIFO or
    too large is refused (``UntrustedFileError``), never followed."""
    try:
        return read_text(Path(folder) / CARD_FILE)
    except FileNotFoundError:
        return ""


def describe(folder: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    """What the folder says about the model: ``card`` (benchmark rows), ``hub_id``,
    ``licence`` and ``licence_file`` (each None when not said)."""
    d = Path(folder)
    card = read_card(d)
    licence_file, licence_text = _licence_file(d)
    licence = (
        _short(front_matter(card).get("license"))
        or _short(config.get("license"))
        or _first_line(licence_text)
    )
    return {
        "card": benchmark_rows(card),
        "hub_id": hub_id(config),
        "licence": licence,
        "licence_file": licence_file,
    }


def hub_id(config: dict[str, Any]) -> str | None:
    """The Hugging Face id the config names (``owner/name``), or None."""
    for key in HUB_ID_KEYS:
        value = config.get(key)
        if isinstance(value, str) and _HUB_ID.fullmatch(value):
            return value
    return None


def front_matter(card: str) -> dict[str, str]:
    """The top-level ``key: value`` lines of the card's YAML front matter (between its first
    two ``---`` lines); a key followed by a list (``- item`` lines) gets the items joined by
    ", ". Nothing else of YAML is needed here, and no YAML parser reads hostile text."""
    lines = card.splitlines()[:500]
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, list[str]] = {}
    key = None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        item = re.fullmatch(r"\s*-\s+(.+)", line)
        pair = re.fullmatch(r"([A-Za-z_][\w-]*):\s*(.*)", line)
        if item and key is not None:
            found[key].append(item[1])
        elif pair:
            key = pair[1]
            found[key] = [pair[2]] if pair[2] else []
        else:
            key = None
    return {k: ", ".join(v.strip().strip("'\"") for v in vs) for k, vs in found.items() if vs}


def benchmark_rows(card: str) -> list[dict[str, str]]:
    """The benchmark rows of the card: each row of a Markdown table whose header names BLEU,
    as {column: value}; [] when there is none."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in card.splitlines()[:2000]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if "|" in line else []
        if not cells:
            header = None
        elif header is None:
            header = cells if any(c.lower() == "bleu" for c in cells) else None
        elif not all(set(c) <= set("-: ") for c in cells) and len(cells) == len(header):
            rows.append({h[:40]: c[:80] for h, c in zip(header, cells, strict=True)})
    return rows[:50]


def card_summary(source: dict[str, Any]) -> str:
    """The card's numbers in one line, for a version's notes ('' without a card)."""
    rows = source.get("card") or []
    parts = []
    for row in rows:
        cells = list(row.items())
        label = cells[0][1] if cells else ""
        numbers = ", ".join(f"{k} {v}" for k, v in cells[1:] if _is_number(v))
        if numbers:
            parts.append(f"{label}: {numbers}")
    return ("Model card: " + "; ".join(parts)) if parts else ""


def _licence_file(d: Path) -> tuple[str | None, str]:
    """(the name of the folder's licence file, its text), or (None, '')."""
    for name in LICENCE_FILES:
        try:
            return name, read_text(d / name)
        except FileNotFoundError:
            continue
    return None, ""


def _first_line(text: str) -> str | None:
    return next((_short(line) for line in text.splitlines()[:50] if line.strip()), None)


def _short(value: Any) -> str | None:
    """A short clean one-line string of `value` (None for anything else or nothing)."""
    if not isinstance(value, str):
        return None
    text = " ".join("".join(c for c in value if c.isprintable()).split())
    return text[:_SHORT] or None


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
