"""The memory on the pages: each sentence's memory matches (score, differing words
highlighted), a CAT tool's XLIFF file translated (upload → download), and the kNN-MT
datastore's switch and state (Translate) and what it did at each step (Inspect). The services
are ``workbench.memory``'s."""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from ui import feedback
from ui.i18n import N_, _, localized, n_
from workbench.memory import datastore, explanation, file_translation
from workbench.memory.matches import MIN_SCORE, Match
from workbench.memory.recall import Recalled
from workbench.models import engines

MATCHES = 3  # per sentence, on the page
XLIFF_RESULT = "translate_xliff_result"
MEMORY_FOLLOW_S = 1.0  # how often a page follows the corpus memory's build
PREPARING = N_("preparing the corpus memory")  # the action of its error boundaries
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
            st.session_state.pop(XLIFF_RESULT, None)  # a refused file shows no earlier result
            with (
                feedback.error_boundary(N_("translating the file")),
                st.spinner(_("Translating the file…"), show_time=True),
            ):
                filled = file_translation.translate_xliff(
                    version.id, upload, beam=beam, engine=engine, use_memory=use_memory
                )
                st.session_state[XLIFF_RESULT] = (upload.name, filled)
        if XLIFF_RESULT in st.session_state:
            name, filled = st.session_state[XLIFF_RESULT]
            st.success(
                _(
                    "{name}: {translated} ({memory} from the memory), {kept} already "
                    "translated kept, {skipped} untranslatable left alone.",
                    name=name,
                    translated=n_("{n} unit translated", "{n} units translated", filled.translated),
                    memory=filled.from_memory,
                    kept=filled.kept,
                    skipped=filled.untranslatable,
                )
            )
            st.download_button(
                _("Download the translated file"),
                data=filled.data,
                file_name=name,
                mime="application/xliff+xml",
                icon=":material/download:",
                key="translate_xliff_download",
                on_click="ignore",
            )


def knn_toggle(version: Any, engine: str, key: str = "translate_knn") -> bool:
    """The switch of the corpus memory (kNN-MT), and the state of its store: built in the
    background the first time, with its progress, then kept up to date with the corpus."""
    usable = version.corpus_id is not None and engine == engines.ENGINES[0]
    on = st.toggle(
        _("Use the corpus memory (kNN-MT)"),
        value=False,
        key=key,
        disabled=not usable,
        help=_(
            "Every output word is also voted for by the closest decoder states of the "
            "corpus' train pairs: a pair saved there changes the next translation at once, "
            "without training. Needs the handwritten decoder and a version trained on a "
            "corpus here."
        ),
    )
    if on and usable:
        knn_state(version.id)
    return on and usable


def knn_state(version_id: int) -> bool:
    """The store's state on the page (its build's progress while it runs); whether it is
    ready."""
    with feedback.error_boundary(PREPARING):
        state = datastore.store_state(version_id)
        if state["state"] in ("missing", "failed"):
            datastore.build_in_background(version_id)
            state = datastore.store_state(version_id)
        if state["state"] == "building":
            # armed only while it builds (as the other panels' timers): an idle page refreshes
            # nothing
            st.fragment(_memory_build_progress, run_every=MEMORY_FOLLOW_S)(version_id)
        elif state["state"] == "ready":
            line = _(
                "Memory: {pairs:,} pairs, {entries:,} decoder states · k {k}, λ {lambda:.2f}, "
                "T {temperature:.3g}",
                **state,  # the store's description (``datastore.Store.describe``)
            )
            tuned = (
                _("tuned on the valid split") if state["tuning"] else _("defaults: no valid split")
            )
            st.caption(f"{line} ({tuned})")
            return True
    return False


def _memory_build_progress(version_id: int) -> None:
    """Only while the store is being built: its progress, then the whole page again. Its
    timed reruns run it alone, outside `knn_state`'s boundary, so it has the same boundary
    of its own: a corpus trashed (or a version deleted) during the build is one error line."""
    with feedback.error_boundary(PREPARING):
        state = datastore.store_state(version_id)
        if state["state"] != "building":
            st.rerun()
        st.progress(
            state["done"] / max(1, state["total"]),
            text=_(
                "Building the memory ({reason}): {done:,} of {total:,} pairs encoded…",
                reason=localized(state["reason"]),
                done=state["done"],
                total=state["total"],
            ),
        )


def knn_steps_view(steps: list[explanation.MemoryStep]) -> None:
    """Inspect: what the memory did at each decoding step (the model's own choice beside the
    one made with the memory, λ), and one step's neighbours with their pairs."""
    st.dataframe(
        [
            {
                _("step"): s.step,
                _("model alone"): f"{s.model_piece} ({s.model_p:.2f})",
                _("with the memory"): f"{s.chosen_piece} ({s.chosen_p:.2f})",
                "λ": round(s.lam, 2),
                _("moved"): "✓" if s.model_piece != s.chosen_piece else "",
            }
            for s in steps
        ],
        hide_index=True,
        width="stretch",
    )
    at = st.slider(_("Step"), 0, len(steps) - 1, 0, key="inspect_knn_step") if len(steps) > 1 else 0
    st.dataframe(
        [
            {
                _("pair"): n["pair_id"],
                _("source"): n["source"],
                _("target"): n["target"],
                _("next piece"): n["piece"],
                _("distance"): round(n["distance"], 3),
            }
            for n in steps[at].neighbours
        ],
        hide_index=True,
        width="stretch",
    )
    st.caption(
        _(
            "kNN-MT (Khandelwal et al., 2021): the decoder state h_t of each step is looked up "
            "among the stored states of the corpus' train pairs; the k nearest vote for the "
            "piece that followed them with weights softmax(−d/T), and "
            "p = λ·p_kNN + (1 − λ)·p_model. At an exact context (distance ≈ 0: the same source "
            "and prefix) only those entries vote and λ is higher."
        )
    )
