"""The XML files of the CAT tools (TMX, XLIFF), parsed safely, and their inline tags as text.

Parsing is lxml's with translate-toolkit's safe settings: no entities resolved, nothing
fetched from the network (``resolve_entities=False, no_network=True``), and
``huge_tree=False`` keeps libxml2's limits on depth and text size. XLIFF is read into a
translate-toolkit store (``parse_store``), TMX walked as a plain document
(``parse_document``: a 100k-unit file in a fifth of the time). On top,
a file that declares entities at all (``<!ENTITY`` — a "billion laughs" bomb or an external
entity that would read another file) is refused before it is parsed, and again if the parsed
document's DTD holds one: a one-line ``WorkbenchError``, nothing read from it.

Inline tags: the *codes* of a segment (TMX ``bpt/ept/ph/it/ut``, XLIFF 1.2
``bpt/ept/ph/it/x/bx/ex``, XLIFF 2.0 ``ph/sc/ec/cp``) are formatting of the original
document, e.g. ``<bpt i="1">&lt;b&gt;</bpt>``: they are dropped with what they hold. The
elements that mark up text (``hi``, ``g``, ``pc``, ``mrk``) are dropped and their text kept.
So "<g id="1">Hello</g> <x id="2"/>world" reads as "Hello world".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

from lxml import etree

from workbench.corpus.text_files import Data, read_bytes
from workbench.errors import WorkbenchError
from workbench.messages import N_

XML_NS = "http://www.w3.org/XML/1998/namespace"
# Inline codes, by local name: dropped with their content (see the module docstring).
CODES = frozenset({"bpt", "ept", "ph", "it", "ut", "x", "bx", "ex", "sc", "ec", "cp"})
_ENTITY_DECLS = tuple(
    "<!ENTITY".encode(enc) for enc in ("utf-8", "utf-16-le", "utf-16-be")
) + tuple("<!entity".encode(enc) for enc in ("utf-8", "utf-16-le", "utf-16-be"))
Store = TypeVar("Store")


def local(tag: Any) -> str:
    """An element's name without its namespace ("" for a comment or processing instruction)."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _refuse_entities() -> WorkbenchError:
    return WorkbenchError(
        N_(
            "refused: the XML file declares entities (<!ENTITY …>), which can expand without "
            "bound or read other files; remove its DOCTYPE and import it again"
        )
    )


def parse_store(store_class: type[Store], data: Data, kind: str, what: str = "file") -> Store:
    """A translate-toolkit store (``xlifffile``, ``Xliff2File``) of the file, parsed safely
    (module docstring); ``WorkbenchError`` naming the line for a file that is not
    well-formed XML or not of ``kind`` (e.g. "XLIFF")."""
    raw = _without_entities(data, what)
    with _read_as(kind):
        store = store_class.parsestring(raw)  # type: ignore[attr-defined]
    _refuse_dtd_entities(store.document)  # type: ignore[attr-defined]
    return store


def parse_document(data: Data, kind: str, root: str, what: str = "file") -> Any:
    """The root element of the file, whose name must be ``root``, parsed by lxml with the
    same safe settings as ``parse_store`` (no entities resolved, no network, libxml2's size
    limits kept) but without a translate-toolkit store: for a reader that walks the
    elements itself (TMX: about five times faster than building a ``tmxfile``'s units)."""
    raw = _without_entities(data, what)
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, strip_cdata=False
    )
    with _read_as(kind):
        element = etree.fromstring(raw, parser=parser)
    if local(element.tag) != root:
        raise WorkbenchError(N_("not a {kind} file"), kind=kind)
    _refuse_dtd_entities(element.getroottree())
    return element


def root_element(data: Data, what: str = "file") -> tuple[str, str, dict[str, str]] | None:
    """The root element's (namespace, local name, attributes), read from its start tag alone
    (entities refused first, then the same safe settings; a 64 KiB chunk at a time): what a
    reader that parses several dialects needs to pick one. None for bytes that are not
    well-formed up to the root: the full parse then says where."""
    raw = _without_entities(data, what)
    parser = etree.XMLPullParser(
        events=("start",), resolve_entities=False, no_network=True, huge_tree=False
    )
    try:
        for at in range(0, len(raw), 65536):
            parser.feed(raw[at : at + 65536])
            for _, element in parser.read_events():
                namespace = element.tag.partition("}")[0][1:] if element.tag[0] == "{" else ""
                return namespace, local(element.tag), dict(element.attrib)
    except etree.XMLSyntaxError:
        pass
    return None


def _without_entities(data: Data, what: str) -> bytes:
    """The file's bytes, refused when they declare an entity (before any parsing)."""
    raw = read_bytes(data, what)
    if any(decl in raw for decl in _ENTITY_DECLS):
        raise _refuse_entities()
    return raw


@contextmanager
def _read_as(kind: str) -> Iterator[None]:
    """A parse's errors as one line: the line of a file that is not well-formed XML, or "not
    a {kind} file" for one translate-toolkit cannot read as ``kind``."""
    try:
        yield
    except etree.XMLSyntaxError as exc:
        raise WorkbenchError(
            N_("not a valid {kind} file: line {line}: {error}"),
            kind=kind,
            line=exc.lineno or 0,
            error=_short_error(str(exc)),
        ) from None
    except (AssertionError, AttributeError, ValueError, StopIteration):
        raise WorkbenchError(N_("not a {kind} file"), kind=kind) from None


def _refuse_dtd_entities(document: Any) -> None:
    dtd = document.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.entities()):
        raise _refuse_entities()


def _short_error(text: str) -> str:
    """lxml's message without its "(<string>, line N)" tail (the line is given apart)."""
    return re.sub(r",? \(<string>, line \d+\)$", "", text).strip()


def plain_text(element: Any) -> str:
    """The text of a segment with its inline codes dropped and its markup's text kept
    (module docstring)."""
    parts = [element.text or ""]
    for child in element:
        if isinstance(child.tag, str) and local(child.tag) not in CODES:
            parts.append(plain_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def xml_lang(element: Any) -> str:
    """An element's ``xml:lang`` (TMX 1.1's ``lang`` too), "" when it has none."""
    return element.get(f"{{{XML_NS}}}lang") or element.get("lang") or ""


@lru_cache(maxsize=4096)  # a file repeats a few tags on every unit
def same_language(tag: str, lang: str) -> int:
    """How well a language tag of a file (zh-CN, zh-Hans, de-DE) names a corpus language
    (zh, de): 2 the same tag, 1 the same primary subtag (case-insensitive), 0 another."""
    a, b = tag.strip().lower().replace("_", "-"), lang.strip().lower().replace("_", "-")
    if not a or not b:
        return 0
    if a == b:
        return 2
    return 1 if a.split("-", 1)[0] == b.split("-", 1)[0] else 0
