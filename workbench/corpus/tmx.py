"""TMX 1.4b, the translation memories every CAT tool exchanges: the ``tmx`` format's reader and
writer (``formats.FORMATS``): read from the lxml tree, parsed safely (``xml_files``), and
written through translate-toolkit.

Reading: each ``<tu>`` is a record numbered by its line in the file. Its ``<tuv>`` languages
(``xml:lang``) are matched to the corpus' by ``xml_files.same_language``: zh-CN, zh-Hans and
zh-TW all give a zh corpus' side (the same tag first, else the first of the same primary
subtag), de-DE a de corpus'; a unit of three or more languages gives the corpus' pair, and a
unit without one of the corpus' languages is an invalid row. Inline tags: codes dropped,
marked-up text kept (``xml_files.plain_text``). ``<note>``s become the pair's note and a
``<prop type="x-split">`` its split (what the writer writes).

Writing: a header with creationtool, creationtoolversion, segtype, o-tmf, adminlang, srclang
and datatype, then one ``<tu>`` per pair with its creation date and the user who made it,
and its last change's date and user, from the change history (``history.pair_authors``),
where known.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from lxml import etree
from translate.storage.tmx import tmxunit

from workbench.corpus.formats import ExportInfo, ExportRow, Files, Malformed, Record
from workbench.corpus.xml_files import (
    parse_document,
    plain_text,
    same_language,
    xml_lang,
)
from workbench.messages import N_, Message

CREATION_TOOL = "Translation workbench"
CREATION_TOOL_VERSION = "1.0"
SPLIT_PROP = "x-split"


def _tmx_date(at: datetime | None) -> str | None:
    """TMX's date form, YYYYMMDDThhmmssZ (UTC)."""
    if at is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _side(found: list[tuple[str, str]], lang: str, usual: str) -> str | None:
    """The segment of ``found`` (language, text) that best names ``lang``: the same tag, else
    the file's ``usual`` variant of it, else the first of the same primary subtag."""
    best, text = 0, None
    for tag, seg in found:
        quality = same_language(tag, lang)
        quality = 3 if quality == 2 else 2 if quality and tag.lower() == usual else quality
        if quality > best:
            best, text = quality, seg
    return text


def _usual_variant(tags: Counter[str], lang: str | None) -> str:
    """The variant of ``lang`` most units of the file use (zh-CN where a few units add zh-TW),
    lower case, from the counts of the file's ``<tuv>`` language tags; "" for none."""
    counts: Counter[str] = Counter()
    for tag, n in tags.items():
        if lang and same_language(tag, lang) == 1:
            counts[tag.lower()] += n
    return counts.most_common(1)[0][0] if counts else ""


def read_tmx(files: Files) -> Iterator[Record]:
    root = parse_document(files.data, "TMX", "tmx", files.what)
    header = root.find("header")
    header_src = header.get("srclang", "") if header is not None else ""
    src_lang, tgt_lang = files.src_lang, files.tgt_lang
    tags = Counter(map(xml_lang, root.iter("tuv")))  # (a <tuv> is always a unit's)
    usual = (_usual_variant(tags, src_lang), _usual_variant(tags, tgt_lang))
    for tu in root.iter("tu"):
        found: list[tuple[str, str]] = []
        notes, split = [], None
        for child in tu:  # (TMX has no namespace)
            name = child.tag
            if name == "tuv":
                seg = child.find("seg")
                if seg is not None:
                    found.append((xml_lang(child), plain_text(seg)))
            elif name == "note":
                notes.append(child.text or "")
            elif name == "prop" and child.get("type") == SPLIT_PROP:
                split = child.text or None
        langs = (src_lang or tu.get("srclang") or header_src, tgt_lang)
        if langs[1] is None:  # no corpus yet to say which: the unit's other language
            langs = (langs[0], next((t for t, _ in found if not same_language(t, langs[0])), ""))
        source, target = _side(found, langs[0], usual[0]), _side(found, langs[1] or "", usual[1])
        if source is None or target is None:
            yield Malformed(
                tu.sourceline or 0,
                Message(
                    N_("the unit has no {lang} segment (it has: {found})"),
                    lang=langs[0] if source is None else langs[1],
                    found=", ".join(t or "?" for t, _ in found) or "none",
                ),
            )
            continue
        yield tu.sourceline or 0, source, target, split, "\n".join(notes) or None


def write_tmx(rows: Iterable[ExportRow], info: ExportInfo) -> Iterator[str]:
    """The header, then one ``<tu>`` per row, in pieces of about a unit."""
    header = etree.Element(
        "header",
        creationtool=CREATION_TOOL,
        creationtoolversion=CREATION_TOOL_VERSION,
        segtype="sentence",
        **{"o-tmf": "workbench"},
        adminlang="en",
        srclang=info.src_lang,
        datatype="plaintext",
        creationdate=_tmx_date(datetime.now(UTC)) or "",
    )
    yield '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE tmx SYSTEM "tmx14.dtd">\n'
    yield '<tmx version="1.4">\n  ' + etree.tostring(header, encoding="unicode") + "\n  <body>\n"
    for row in rows:
        unit = tmxunit(None)
        tu = unit.xmlelement
        for attr, value in (
            ("creationdate", _tmx_date(row.created)),
            ("creationid", row.created_by),
            ("changedate", _tmx_date(row.changed)),
            ("changeid", row.changed_by),
        ):
            if value:
                tu.set(attr, value)
        if row.note:
            unit.addnote(row.note)
        if row.split:
            prop = etree.SubElement(tu, "prop", type=SPLIT_PROP)
            prop.text = row.split
        unit.setsource(row.source, info.src_lang)
        unit.settarget(row.target, info.tgt_lang)
        yield "    " + etree.tostring(tu, encoding="unicode") + "\n"
    yield "  </body>\n</tmx>\n"
