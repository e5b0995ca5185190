"""The language of the pages: gettext catalogs managed with Babel, English as the source.

Every user-facing text of a page goes through ``_`` (or ``n_`` for a count): the English
text is the message id, named placeholders are filled in *after* translating
(``_("Saved {n} pairs", n=3)``), so a translation may reorder them. A text defined before any
page runs (a page title) is marked with ``N_`` and translated where it is shown. The catalogs
live in ``locale/<lang>/LC_MESSAGES/messages.po``; ``make i18n`` extracts, updates and
compiles them. The compiled ``.mo`` files are not committed (two branches that both add
messages would conflict on a binary file): a ``.mo`` that is missing or older than its ``.po``
is compiled from the ``.po`` in memory on first use, so a checkout works without ``make``.

The language is per browser session: the one in the address (``?lang=``, put back on every
run, as a reload or a bookmark keeps it) else the browser's (``st.context.locale``: zh* is
简体中文, anything else English). The sidebar's selector (``selector``) switches it.
Outside a Streamlit run (the CLI, services) everything is English.
"""

from __future__ import annotations

import functools
import gettext
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import streamlit as st
from babel import Locale
from babel.messages import mofile, pofile
from babel.numbers import format_decimal
from streamlit.runtime.scriptrunner import get_script_run_ctx

from workbench.messages import N_, Message

__all__ = [
    "LANGUAGES",
    "N_",
    "_",
    "choice_labels",
    "current",
    "labels",
    "locale",
    "localized",
    "n_",
    "p_",
    "selector",
    "translate",
]

SOURCE = "en"  # the catalog's source language: its message ids are the English texts
LANGUAGES = {"en": "English", "zh_Hans": "简体中文"}  # code (a locale/ folder) -> its own name
PARAM = "lang"  # the address' parameter holding a chosen language
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
DOMAIN = "messages"
_STATE = "_ui_language"
_PINNED = "_ui_language_pinned"  # chosen (in the address or the selector), so kept there


def for_browser_locale(browser_locale: str | None) -> str:
    """The language for a browser's ``navigator.language`` ("zh-CN", "zh-TW", "en-US", None):
    the first of ``LANGUAGES`` of the same language (zh* is 简体中文), else English."""
    wanted = (browser_locale or "").replace("_", "-").split("-")[0].lower()
    return next((code for code in LANGUAGES if code.split("_")[0].lower() == wanted), SOURCE)


def current() -> str:
    """This browser session's language (a key of ``LANGUAGES``); English outside a run."""
    if get_script_run_ctx() is None:
        return SOURCE
    lang = st.session_state.get(_STATE)
    if lang is None:
        given = st.query_params.get(PARAM)
        if given in LANGUAGES:
            lang = given
            st.session_state[_PINNED] = True
        else:
            lang = for_browser_locale(st.context.locale)
        st.session_state[_STATE] = lang
    return lang


def keep_in_address() -> None:
    """Put a chosen language (back) into the address: Streamlit clears the address'
    parameters on a page switch, and a reload must keep the language."""
    lang = current()
    if st.session_state.get(_PINNED) and st.query_params.get(PARAM) != lang:
        st.query_params[PARAM] = lang


def _choose() -> None:
    st.session_state[_STATE] = st.session_state["ui_language"]
    st.session_state[_PINNED] = True
    st.query_params[PARAM] = st.session_state[_STATE]


def selector() -> None:
    """The language switch in the sidebar (its label in both languages, on purpose)."""
    lang = current()
    st.session_state["ui_language"] = lang
    st.sidebar.radio(
        "Language · 语言",
        list(LANGUAGES),
        format_func=LANGUAGES.__getitem__,
        key="ui_language",
        on_change=_choose,
        horizontal=True,
    )


@functools.cache
def _translations(lang: str) -> gettext.NullTranslations:
    if lang == SOURCE:
        return gettext.NullTranslations()
    folder = LOCALE_DIR / lang / "LC_MESSAGES"
    compiled, source = folder / f"{DOMAIN}.mo", folder / f"{DOMAIN}.po"
    if compiled.exists() and compiled.stat().st_mtime >= source.stat().st_mtime:
        with compiled.open("rb") as f:
            return gettext.GNUTranslations(f)
    with source.open("rb") as f:
        catalog = pofile.read_po(f)
    buffer = io.BytesIO()
    mofile.write_mo(buffer, catalog)
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


@functools.cache
def _locale(lang: str) -> Locale:
    return Locale.parse(lang)


def locale() -> Locale:
    """The Babel locale of this session's language (numbers, dates: ``ui.formatting``)."""
    return _locale(current())


# A widget's ``format_func`` must not translate: AppTest calls it outside the script run, where
# the session's language is unknown. Give it the ``__getitem__`` of labels made in the run.


def labels(msgids: Iterable[str]) -> dict[str, str]:
    """Each message id's translation, made now, in the run: e.g. the ``column_config`` of a
    table whose columns are named by message ids."""
    return {msgid: translate(msgid) for msgid in msgids}


def choice_labels(msgids: Iterable[str]) -> Callable[[str], str]:
    """A widget's ``format_func`` for choices that are message ids: their translations made
    now, in the run (see above)."""
    return labels(msgids).__getitem__


def translate(msgid: str, params: dict[str, Any] | None = None) -> str:
    """``msgid`` in this session's language, its named placeholders filled in (a parameter
    that is itself a ``Message``, e.g. the reason inside an error, translated too)."""
    return _filled(_translations(current()).gettext(msgid), params)


def _filled(text: str, params: dict[str, Any] | None) -> str:
    """A translated text's placeholders filled in, a ``Message`` parameter translated too."""
    if not params:
        return text
    return text.format(
        **{k: localized(v) if isinstance(v, Message) else v for k, v in params.items()}
    )


def localized(text: str) -> str:
    """A service's text in this session's language: a ``workbench.messages.Message`` or a
    message id translated, any other text as it is."""
    if isinstance(text, Message):
        return translate(text.msgid, text.params)
    return translate(text) if text else text


def _(msgid: str, **params: Any) -> str:
    """A literal text of a page in this session's language: ``_("Saved {n} pairs", n=3)``."""
    return translate(msgid, params)


def p_(context: str, msgid: str, **params: Any) -> str:
    """A text whose English is shared by different meanings, told apart by ``context``
    (gettext's msgctxt): ``p_("grid", "Review")`` (the unsaved changes), not the Review page."""
    return _filled(_translations(current()).pgettext(context, msgid), params)


def n_(singular: str, plural: str, n: int, **params: Any) -> str:
    """A text about a count, in the plural form the language wants for ``n``:
    ``n_("{n} pair", "{n} pairs", n)``. ``{n}`` is filled with ``n`` as the locale writes it
    ("1,000")."""
    text = _translations(current()).ngettext(singular, plural, n)
    return _filled(text, {"n": format_decimal(n, locale=locale()), **params})
