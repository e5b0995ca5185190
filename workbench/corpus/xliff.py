"""XLIFF 1.2 and 2.x, the files CAT tools send out to be translated: the ``xliff`` format's
reader (the pairs of a bilingual file, ``formats.FORMATS``) and ``fill_targets`` (a file
translated, for the CLI, the Translate page and the HTTP API), through translate-toolkit,
parsed safely (``xml_files``).

Units: XLIFF 1.2 ``<trans-unit>``s, XLIFF 2.x ``<segment>``s of ``<unit>``s. A unit is left
alone when it, or the nearest group or file above it that says, is ``translate="no"``; XLIFF
2.x ``<ignorable>``s too.

Reading pairs: a unit with a source and a non-empty target is a pair (plain text, inline
tags as ``xml_files.plain_text`` says); one without a target is an invalid row numbered by
its line. The file's languages (``source-language``/``target-language``, ``srcLang``/
``trgLang``) must be the corpus' (by primary subtag: en-US gives en); a file the other way
round is read the other way round.

Filling targets: every translatable unit whose target is missing or empty gets one; a
target a translator already wrote is kept. The target is the source (1.2: its
``<seg-source>`` when it has one) with its tags as they are — ``<g>``, ``<x/>``, ``<ph>``,
``<bpt>``/``<ept>``, ``<pc>``, ``<mrk>``: same elements, attributes and order — and each run
of text between tags translated on its own (text inside a code, or inside
``<mrk translate="no">`` / ``<mrk mtype="protected">``, is copied). It is marked as output
to review: XLIFF 1.2 ``state="needs-review-translation"`` with ``state-qualifier=
"mt-suggestion"`` (``"exact-match"`` when the memory gave every run of it); XLIFF 2.x
``state="translated"`` with ``subState="workbench:mt"`` (``"workbench:tm"``) on the segment.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lxml import etree
from translate.storage.xliff import xlifffile
from translate.storage.xliff2 import Xliff2File

from workbench.corpus.formats import Files, Malformed, Record
from workbench.corpus.text_files import Data, read_bytes
from workbench.corpus.xml_files import (
    CODES,
    local,
    parse_store,
    plain_text,
    root_element,
    same_language,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

_XLIFF_NS = "urn:oasis:names:tc:xliff:document:"
_EDGES = re.compile(r"^(\s*)(.*?)(\s*)$", re.S)
# (translation, whether the memory gave it) of each text, in order
Translator = Callable[[list[str]], list[tuple[str, bool]]]


@dataclass(frozen=True)
class _Unit:
    line: int
    holder: Any  # the element a target and its state go on: trans-unit (1.2), segment (2.x)
    source: Any  # what is translated: <source>, or 1.2's <seg-source>
    target: Any | None
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Document:
    root: Any
    version: int  # 1: XLIFF 1.x, 2: XLIFF 2.x
    langs: tuple[str, str]  # the file's (source, target) languages, "" unknown


@dataclass(frozen=True)
class FilledFile:
    """A translated XLIFF file and what was done to it."""

    data: bytes
    translated: int  # units given a target
    from_memory: int  # of them, by the memory alone
    kept: int  # units whose target a translator had written
    untranslatable: int  # units marked translate="no"


def _load(data: Data, what: str) -> _Document:
    raw = read_bytes(data, what)
    v2 = _is_version_2(raw, what)
    store = parse_store(Xliff2File if v2 else xlifffile, raw, "XLIFF", what)
    root = store.document.getroot()
    if local(root.tag) != "xliff":
        raise WorkbenchError(N_("not a {kind} file"), kind="XLIFF")
    if v2:
        langs = (root.get("srcLang", ""), root.get("trgLang", ""))
    else:  # XLIFF 1.x names them on each <file>: a document of several pairs is refused
        pairs = dict.fromkeys(
            (f.get("source-language", ""), f.get("target-language", ""))
            for f in root.iter("{*}file")
        )
        if len({(a.lower(), b.lower()) for a, b in pairs}) > 1:
            raise WorkbenchError(
                N_(
                    "the XLIFF file's <file> elements are of different languages ({pairs}): "
                    "give one file per language pair"
                ),
                pairs=", ".join(f"{a or '?'}→{b or '?'}" for a, b in pairs),
            )
        langs = next(iter(pairs), ("", ""))
    return _Document(root, 2 if v2 else 1, langs)


def _is_version_2(raw: bytes, what: str) -> bool:
    """XLIFF 2.x or 1.x, by the root's namespace (or, without one, its ``version``); any other
    version is refused: read as 1.2 it would come back unchanged but for an added ``<body/>``."""
    root = root_element(raw, what)
    if root is None or root[1] != "xliff":
        return False  # the full parse says what is wrong
    namespace, _, attributes = root
    suffix = namespace.removeprefix(_XLIFF_NS) if namespace.startswith(_XLIFF_NS) else ""
    version = suffix or attributes.get("version") or "1.2"
    if version.startswith(("1.", "2.")):
        return version.startswith("2.")
    raise WorkbenchError(
        N_("XLIFF {version} is not supported: XLIFF 1.x and 2.x are"), version=version
    )


def _translatable(element: Any) -> bool:
    """The nearest ``translate`` attribute on the element or above it is not "no"."""
    while element is not None:
        value = element.get("translate")
        if value is not None:
            return value != "no"
        element = element.getparent()
    return True


def _child(element: Any, name: str) -> Any | None:
    return next((c for c in element if local(c.tag) == name), None)


def _units(doc: _Document) -> Iterator[_Unit | None]:
    """The document's units in order; None for one marked translate="no"."""
    if doc.version == 1:
        for tu in doc.root.iter("{*}trans-unit"):
            if not _translatable(tu):
                yield None
                continue
            notes = tuple(n.text or "" for n in tu if local(n.tag) == "note")
            source = _child(tu, "seg-source")
            source = source if source is not None else _child(tu, "source")
            if source is not None:
                yield _Unit(tu.sourceline or 0, tu, source, _child(tu, "target"), notes)
        return
    for unit in doc.root.iter("{*}unit"):
        if not _translatable(unit):
            yield None
            continue
        notes_el = _child(unit, "notes")
        notes = tuple(n.text or "" for n in notes_el) if notes_el is not None else ()
        for segment in unit:
            source = _child(segment, "source") if local(segment.tag) == "segment" else None
            if source is not None:
                target = _child(segment, "target")
                yield _Unit(segment.sourceline or 0, segment, source, target, notes)


def _oriented(doc: _Document, src_lang: str | None, tgt_lang: str | None) -> bool:
    """Whether the file's sides are the other way round from the corpus'; refuses a file of
    other languages."""
    file_src, file_tgt = doc.langs
    if not (src_lang and tgt_lang and file_src and file_tgt):
        return False
    if same_language(file_src, src_lang) and same_language(file_tgt, tgt_lang):
        return False
    if same_language(file_src, tgt_lang) and same_language(file_tgt, src_lang):
        return True
    raise WorkbenchError(
        N_("the XLIFF file is {file_src}→{file_tgt}, the corpus {src}→{tgt}"),
        file_src=file_src,
        file_tgt=file_tgt,
        src=src_lang,
        tgt=tgt_lang,
    )


def read_xliff(files: Files) -> Iterator[Record]:
    doc = _load(files.data, files.what)
    swap = _oriented(doc, files.src_lang, files.tgt_lang)
    for unit in _units(doc):
        if unit is None:
            continue
        target = plain_text(unit.target) if unit.target is not None else ""
        if not target.strip():
            yield Malformed(unit.line, Message(N_("the unit has no target (translation)")))
            continue
        source = plain_text(unit.source)
        note = "\n".join(unit.notes) or None
        yield (
            (unit.line, target, source, None, note)
            if swap
            else (
                unit.line,
                source,
                target,
                None,
                note,
            )
        )


# ------------------------------------------------------------------------- translating


def _verbatim(element: Any) -> bool:
    """An inline element whose content is copied, not translated."""
    return (
        local(element.tag) in CODES
        or element.get("translate") == "no"
        or element.get("mtype") == "protected"
    )


def _slots(element: Any) -> Iterator[tuple[Any, str]]:
    """(element, "text" or "tail") of every run of translatable text inside ``element``."""
    yield element, "text"
    for child in element:
        if isinstance(child.tag, str) and not _verbatim(child):
            yield from _slots(child)
        yield child, "tail"


def _new_target(unit: _Unit) -> Any:
    """The unit's target element, holding a copy of what is translated."""
    made = copy.deepcopy(unit.source)
    made.tag = etree.QName(etree.QName(unit.source).namespace, "target").text
    for attr in list(made.attrib):
        if etree.QName(attr).localname == "lang":
            del made.attrib[attr]
    if unit.target is None:
        made.tail = unit.source.tail
        unit.source.addnext(made)
        return made
    target = unit.target
    target.text = made.text
    for child in list(target):
        target.remove(child)
    target.extend(list(made))
    return target


def fill_targets(
    data: Data, translate: Translator, what: str = "file", languages: tuple[str, str] | None = None
) -> FilledFile:
    """The XLIFF file with every empty target filled (module docstring); ``translate`` is
    called once with every run of text to translate, each once. A file whose languages are
    not ``languages`` (the translator's source and target; a side the file or the translator
    leaves out is not checked) is refused: it would come back filled with another language."""
    doc = _load(data, what)
    if languages is not None and not all(
        same_language(side, lang)
        for side, lang in zip(doc.langs, languages, strict=True)
        if side and lang
    ):
        raise WorkbenchError(
            N_("the XLIFF file is {file_src}→{file_tgt}, the model version {src}→{tgt}"),
            file_src=doc.langs[0] or "?",
            file_tgt=doc.langs[1] or "?",
            src=languages[0],
            tgt=languages[1],
        )
    todo: list[tuple[_Unit, Any]] = []
    kept = untranslatable = 0
    for unit in _units(doc):
        if unit is None:
            untranslatable += 1
        elif unit.target is not None and plain_text(unit.target).strip():
            kept += 1
        else:
            todo.append((unit, _new_target(unit)))
    runs: dict[str, tuple[str, bool]] = {}
    places: list[list[tuple[Any, str, str, str, str]]] = []
    for _unit, target in todo:
        mine = []
        for element, slot in _slots(target):
            text = getattr(element, slot)
            if text and text.strip():
                lead, core, trail = _EDGES.match(text).groups()  # type: ignore[union-attr]
                runs[core] = ("", False)
                mine.append((element, slot, lead, core, trail))
        places.append(mine)
    texts = list(runs)
    for text, done in zip(texts, translate(texts) if texts else [], strict=True):
        runs[text] = done
    from_memory = 0
    for (unit, target), mine in zip(todo, places, strict=True):
        for element, slot, lead, core, trail in mine:
            setattr(element, slot, lead + runs[core][0] + trail)
        by_memory = bool(mine) and all(runs[core][1] for *_, core, _trail in mine)
        from_memory += by_memory
        if doc.version == 1:
            target.set("state", "needs-review-translation")
            target.set("state-qualifier", "exact-match" if by_memory else "mt-suggestion")
        else:
            unit.holder.set("state", "translated")
            unit.holder.set("subState", "workbench:tm" if by_memory else "workbench:mt")
    out = etree.tostring(doc.root.getroottree(), xml_declaration=True, encoding="UTF-8")
    return FilledFile(out, len(todo), from_memory, kept, untranslatable)
