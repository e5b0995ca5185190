"""Pickers shared by the pages: corpus, model version, decoding and engine, and the labels
they show.

A choice made in one page's picker is remembered across pages (``CURRENT_CORPUS``,
``CURRENT_VERSION`` in ``st.session_state``: view state only, the data is in the database).
A page's own corpus is also kept in the address (``?corpus=``), so that a reload, which
starts a new session, shows the same corpus (as ``?lang=`` and ``?drafts=`` keep theirs).
A picker over a list that grows at the top (finished runs) follows its newest entry until
the user picks another (``follow_newest``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import streamlit as st

from ui import feedback, navigation
from ui.formatting import pair_count_label
from ui.i18n import N_, _, choice_labels, translate
from ui.signin import role_labels
from workbench.models import engines, registry, translation

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

    from workbench.corpus.corpora import CorpusInfo
    from workbench.models.registry import VersionInfo

CURRENT_CORPUS = "current_corpus_id"  # view state shared by the pages (not a widget key)
CURRENT_VERSION = "current_version_id"
CORPUS_PARAM = "corpus"  # the address' query parameter of the page's corpus
_PENDING = "_pending_selection"
DECODINGS = (N_("Greedy"), N_("Beam search"))  # message ids: the options' values


def corpus_label(c: CorpusInfo) -> str:
    return f"{c.name} · {c.src_lang}→{c.tgt_lang} · {pair_count_label(c.pair_count, 'all')}"


def select_later(key: str, value: Any) -> None:
    """Make the picker with widget `key` show `value` on the next run (a widget's value can
    only be changed before the widget is drawn)."""
    st.session_state.setdefault(_PENDING, {})[key] = value


def keep_label_fresh(key: str, shown: Any) -> None:
    """Call before drawing the keyed widget `key` whose chosen option(s) read `shown`.

    The browser keeps showing the label it was sent with the choice (e.g. "… · 48 pairs")
    even when the options are re-sent with new labels (49 pairs after a Save, a new name after
    a rename). Re-assigning the value makes Streamlit send the choice again, with its label.
    """
    sent = f"_label_sent:{key}"
    if key in st.session_state and st.session_state.get(sent) != shown:
        st.session_state[key] = st.session_state[key]
    st.session_state[sent] = shown


def _prepare_picker(key: str, labels: dict[Any, str], shared: str, given: Any = None) -> None:
    """Give a keyed picker its value before it is drawn: a pending choice, else its own last
    value if still valid, else the choice shared across pages, else ``given`` (the address'
    choice), else the first option."""
    options = list(labels)
    pending = st.session_state.get(_PENDING, {})
    if key in pending and pending[key] in options:
        st.session_state[key] = pending.pop(key)
    elif st.session_state.get(key) not in options:
        current = st.session_state.get(shared)
        fallback = given if given in options else options[0]
        st.session_state[key] = current if current in options else fallback
    keep_label_fresh(key, labels[st.session_state[key]])


def follow_newest(key: str, labels: dict[Any, str]) -> None:
    """Call before drawing the keyed picker `key` over `labels` (newest first): it shows the
    newest option, and follows a newer one when it appears, unless the user picked another.

    A keyed widget keeps its value when its options change, so without this a list that
    grows at the top (finished runs) stays on what was newest when the page was opened."""
    options = list(labels)
    newest_before = st.session_state.get(f"_newest:{key}")
    chosen = st.session_state.get(key)
    if chosen not in options or chosen == newest_before:
        chosen = options[0]
    if st.session_state.get(key) != chosen:
        st.session_state[key] = chosen
    st.session_state[f"_newest:{key}"] = options[0]
    keep_label_fresh(key, labels[chosen])


def corpus_picker(
    corpora: Sequence[CorpusInfo],
    *,
    key: str,
    label: str | None = None,
    help: str | None = None,
    in_address: bool = True,
) -> CorpusInfo:
    """A selectbox over the corpora; the choice is remembered across pages and, for the
    page's own corpus (``in_address``; not a second picker such as "save to"), across
    reloads."""
    by_id = {c.id: c for c in corpora}
    labels = {i: corpus_label(c) for i, c in by_id.items()}
    given = st.query_params.get(CORPUS_PARAM, "") if in_address else ""
    _prepare_picker(key, labels, CURRENT_CORPUS, int(given) if given.isdigit() else None)
    chosen = st.selectbox(
        label or _("Corpus"), list(by_id), format_func=labels.__getitem__, key=key, help=help
    )
    st.session_state[CURRENT_CORPUS] = chosen
    if in_address and st.query_params.get(CORPUS_PARAM) != str(chosen):
        st.query_params[CORPUS_PARAM] = str(chosen)
    return by_id[chosen]


def role_picker(where: Any, *, key: str, help: str | None = None) -> str:
    """A selectbox over the team roles (``access.ROLES``) in ``where`` (a column): their
    names in the session's language, also the chosen one's after a language switch."""
    labels = role_labels()
    keep_label_fresh(key, labels.get(st.session_state.get(key), ""))
    return where.selectbox(
        _("Role"), list(labels), format_func=labels.__getitem__, key=key, help=help
    )


def version_label(v: VersionInfo) -> str:
    return f"#{v.id} {v.name} · {v.src_lang}→{v.tgt_lang}"


def versions_or_train_hint(hint: str) -> list[VersionInfo]:
    """Every stored version, for a page that works on one; before the first there are none,
    and the page shows ``hint`` (why it is empty) and a link to the Train page instead."""
    versions = registry.list_versions()
    if not versions:
        feedback.empty_state(hint, go_to=navigation.TRAIN)
    return versions


def version_picker(
    versions: Sequence[VersionInfo], *, key: str, label: str | None = None
) -> VersionInfo:
    """A selectbox over the versions (newest first); the choice is remembered across pages."""
    by_id = {v.id: v for v in versions}
    labels = {i: version_label(v) for i, v in by_id.items()}
    _prepare_picker(key, labels, CURRENT_VERSION)
    chosen = st.selectbox(
        label or _("Model version"), list(by_id), format_func=labels.__getitem__, key=key
    )
    st.session_state[CURRENT_VERSION] = chosen
    return by_id[chosen]


class VersionForm(NamedTuple):
    """The top of a form that decodes with one version: the version and the beam chosen, and
    the form's box and two columns, which the page fills with its own inputs."""

    version: VersionInfo
    beam: int
    box: DeltaGenerator
    left: DeltaGenerator
    right: DeltaGenerator


def version_form(prefix: str) -> VersionForm | None:
    """The form of a page that decodes with one version (Translate, Inspect): in a bordered
    box, the version on the left (widget key ``{prefix}_version``) and the decoding on the
    right (``decoding_picker``). None before the first version: the page then shows why, and
    a link to the Train page."""
    versions = versions_or_train_hint(
        _(
            "No model version yet: train one on the Train page (the demo corpus trains in "
            "about a minute), then come back here."
        )
    )
    if not versions:
        return None
    box = st.container(border=True)
    left, right = box.columns([3, 2], gap="medium")
    with left:
        version = version_picker(versions, key=f"{prefix}_version")
    with right:
        beam = decoding_picker(prefix)
    return VersionForm(version, beam, box, left, right)


def message_choice(
    label: str, choices: Iterable[str], *, key: str, help: str | None = None
) -> str | None:
    """A segmented control over message ids, the first chosen at first: the value stays the
    (English) id, the buttons show its translation. None once the user unselects it."""
    options = list(choices)
    return st.segmented_control(
        label,
        options,
        default=options[0],
        format_func=choice_labels(options),
        key=key,
        help=help,
    )


def decoding_picker(prefix: str) -> int:
    """Greedy or beam search (and its width); returns the beam size, 1 for greedy. Widget keys
    are `{prefix}_mode` and `{prefix}_beam`."""
    mode = message_choice(
        _("Decoding"),
        DECODINGS,
        key=f"{prefix}_mode",
        help=_(
            "Greedy takes the likeliest next piece; beam search (束搜索) keeps several "
            "candidate translations and is usually a little better, and slower."
        ),
    )
    if mode == DECODINGS[1]:
        return int(st.slider(_("Beam size"), 2, 8, translation.DEFAULT_BEAM, key=f"{prefix}_beam"))
    return 1


def engine_picker(prefix: str) -> str:
    """Who decodes (models.engines); returns the engine, our decoder by default. Widget key
    `{prefix}_engine`; with CTranslate2 not installed there is nothing to choose."""
    choices = engines.available_engines()
    if len(choices) == 1:
        return choices[0]
    engine = st.segmented_control(
        _("Engine"),
        choices,
        default=choices[0],
        format_func={e: translate(engines.ENGINE_LABELS[e]) for e in choices}.__getitem__,
        key=f"{prefix}_engine",
        help=_(
            "The handwritten decoder is the reference. CTranslate2 runs the same model "
            "exported to that engine with {quantization} weights (exported the first time, in "
            "seconds): faster on a CPU, nearly always the same output. The attention map is "
            "always the handwritten model's.",
            quantization=engines.ENGINE_QUANTIZATION,
        ),
    )
    return engine or choices[0]
