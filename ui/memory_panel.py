"""The Translate page's memory: each sentence's memory matches (score, differing words
highlighted) and a CAT tool's XLIFF file translated (upload → download). The services are
``workbench.memory`` and ``workbench.memory.file_translation``."""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from ui import feedback
from ui.i18n import N_, _
from workbench.memory import file_translation
from workbench.memory.matches import MIN_SCORE, Match
from workbench.memory.recall import Recalled

MATCHES = 3  # per sentence, on the page
XLIFF_RESULT = "translate_xliff_result"
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain_memory(recalled: Recalled) -> dict[str, Any]:
    """A sentence's memory as plain values for session_state."""
    return {
        "from_memory": recalled.exact is not None,
        "matches": [_plain_match(m) for m in recalled.matches],
    }


def _plain_match(match: Match) -> dict[str, Any]:
    return {
        "pair_id": match.pair_id,
        "target": match.target,
        "score": match.score,
        "spans": [list(span) for span in match.spans],
    }


def _highlighted(spans: list[list[Any]]) -> str:
    """The match's source as Markdown, its differing words on an orange background."""
    out = []
    for text, differs in spans:
        escaped = _MARKDOWN.sub(r"\\\1", text)
        out.append(f":orange-background[{escaped}]" if differs and text.strip() else escaped)
    return "".join(out)


def matches_view(item: dict[str, Any]) -> None:
    """The picked sentence's memory matches, best first."""
    matches = item.get("matches") or []
    st.markdown("**" + _("Memory matches") + "**")
    if item.get("from_memory"):
        st.caption(
            _("This translation is from the memory: the curated target of an exact match."),
        )
    if not matches:
        st.caption(
            _(
                "No pair of the memory is close to this sentence (a score of at least {score}).",
                score=f"{MIN_SCORE:.0f}",
            )
        )
        return
    for match in matches:
        with st.container(border=True):
            st.markdown(
                f"**{match['score']:.0f} %** · "
                + _("pair #{id}", id=match["pair_id"])
                + "  \n"
                + _highlighted(match["spans"])
            )
            st.markdown(_MARKDOWN.sub(r"\\\1", match["target"]))
    st.caption(_("Highlighted: the words of the memory's source that differ from this sentence."))


def xliff_panel(version: Any, beam: int, engine: str) -> None:
    """Upload an XLIFF file, translate it with the version, download it."""
    with st.expander(_("Translate a file (XLIFF)"), icon=":material/description:"):
        st.caption(
            _(
                "An XLIFF 1.2 or 2.x file from a CAT tool (memoQ, Trados, OmegaT, Phrase…): "
                "every empty target is filled with this version's translation, its tags kept, "
                "marked as machine output to review; targets already written and units marked "
                "untranslatable are left as they are."
            )
        )
        upload = st.file_uploader(
            _("XLIFF file"), type=["xlf", "xliff"], key="translate_xliff_upload"
        )
        use_memory = st.toggle(
            _("Fill units that the memory holds exactly with its curated target"),
            value=False,
            key="translate_xliff_memory",
            disabled=version.corpus_id is None,
        )
        if upload is not None and st.button(
            _("Translate file"), icon=":material/translate:", key="translate_xliff"
        ):
            with (
                feedback.error_boundary(N_("translating the file")),
                st.spinner(_("Translating the file…"), show_time=True),
            ):
                filled = file_translation.translate_xliff(
                    version.id, upload, beam=beam, engine=engine, use_memory=use_memory
                )
                st.session_state[XLIFF_RESULT] = {
                    "name": upload.name,
                    "data": filled.data,
                    "translated": filled.translated,
                    "from_memory": filled.from_memory,
                    "kept": filled.kept,
                    "untranslatable": filled.untranslatable,
                }
        done = st.session_state.get(XLIFF_RESULT)
        if done:
            st.success(
                _(
                    "{name}: {translated} units translated ({memory} from the memory), {kept} "
                    "already translated kept, {skipped} untranslatable left alone.",
                    name=done["name"],
                    translated=done["translated"],
                    memory=done["from_memory"],
                    kept=done["kept"],
                    skipped=done["untranslatable"],
                )
            )
            st.download_button(
                _("Download the translated file"),
                data=done["data"],
                file_name=done["name"],
                mime="application/xliff+xml",
                icon=":material/download:",
                key="translate_xliff_download",
                on_click="ignore",
            )
