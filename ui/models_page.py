"""Models page: every stored version with its scores; add a public model
(``public_model_panel``); rename, annotate, download, delete or serve one over HTTP; compare
several on a corpus' held-out test pairs (``compare_panel``); the served pairs and the API
keys (``serving_panel``).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ui import (
    compare_panel,
    dialogs,
    feedback,
    formatting,
    pickers,
    public_model_panel,
    serving_panel,
)
from ui.i18n import N_, _, localized, translate
from ui.signin import can
from workbench.evaluation import evaluation
from workbench.models import ctranslate2_export, engines, registry
from workbench.serving import served
from workbench.team.access import Permission
from workbench.training import stop_words


def render() -> None:
    versions = pickers.versions_or_train_hint(
        _(
            "No model version yet: start a run on the Train page; when it succeeds its "
            "version appears here."
        )
    )
    if not versions:
        public_model_panel.render()  # a public model is the other way to a first version
        return

    versions_table()
    manage_tab, compare_tab, http_tab = st.tabs(
        [
            ":material/edit: " + _("Manage a version"),
            ":material/compare_arrows: " + _("Compare versions"),
            ":material/api: " + _("HTTP API"),
        ],
        key="models_tab",
        # the server knows the open tab: a rerun in flight (a rename, a compare) never sends
        # the browser back to the first tab and hides the result (seen on a slow machine)
        on_change="rerun",
    )
    with manage_tab:
        manage(versions)
    with compare_tab:
        compare_panel.compare_tab(versions)
    with http_tab:
        serving_panel.http_api_tab()
    public_model_panel.render()


def versions_table() -> None:
    table = registry.versions_table()
    recorded_help = _(
        "Measured at the end of training on the version's validation pairs (see “{column}”), "
        "not on the test split that Compare uses. “—”: not measured; “{column}” says why.",
        column=_("scored on"),
    )
    # A score that was not measured reads "—" (not "None"); "scored on" says where each row's
    # scores come from (not the Compare tab's test pairs), or why there are none.
    for column, digits in SCORE_DIGITS.items():
        table[column] = [formatting.fmt_number(value, digits) for value in table[column]]
    table.insert(
        table.columns.get_loc("chrF") + 1,
        "scored on",
        [localized(evaluation.training_scores_note(i)) for i in table["id"]],
    )
    table.insert(
        table.columns.get_loc("name") + 1, "served", serving_panel.served_column(table["id"])
    )
    # an imported version has no corpus of its own: where it came from instead of "None"
    table["corpus"] = [
        _corpus_cell(corpus, origin)
        for corpus, origin in zip(table["corpus"], table["origin"], strict=True)
    ]
    table["origin"] = [_origin_cell(origin) for origin in table["origin"]]
    formatting.records_table(
        table,
        VERSION_COLUMNS,
        {
            "id": st.column_config.NumberColumn(_("id"), format="#%d", width="small"),
            "name": st.column_config.TextColumn(_("name"), width="medium"),
            "corpus": st.column_config.TextColumn(_("corpus")),
            "device": st.column_config.TextColumn(_("device")),
            "served": st.column_config.TextColumn(
                _("served"), width="small", help=_("The language pair it answers over HTTP")
            ),
            "created": st.column_config.DatetimeColumn(_("created"), format="YYYY-MM-DD HH:mm"),
            "pairs": st.column_config.NumberColumn(
                _("trained on (snapshot)"),
                format=_("%d pairs"),
                help=_(
                    "Training pairs of the corpus snapshot the version was trained on; the "
                    "corpus may hold more pairs now, and its validation and test pairs are not "
                    "counted."
                ),
            ),
            "parent": st.column_config.NumberColumn(
                _("continued from"),
                format="#%d",
                width="small",
                help=_("The version this one was warm-started from (its weights and tokenizer)."),
            ),
            **{
                column: st.column_config.NumberColumn(
                    translate(label),
                    format=number_format,
                    help=translate(help_id) if help_id else None,
                )
                for column, label, number_format, help_id in TRAINING_NUMBERS
            },
            "valid loss": st.column_config.TextColumn(
                _("valid loss"), help=recorded_help, width="small", alignment="right"
            ),
            "BLEU": st.column_config.TextColumn(
                _("valid BLEU"), help=recorded_help, width="small", alignment="right"
            ),
            "chrF": st.column_config.TextColumn(
                _("valid chrF"), help=recorded_help, width="small", alignment="right"
            ),
            "scored on": st.column_config.TextColumn(
                _("scored on"),
                help=_("The data and decoding behind this row's scores, or why it has none."),
            ),
            "origin": st.column_config.TextColumn(
                _("origin"),
                help=_(
                    "For a model added from elsewhere (Add a public model, `register`): the "
                    "file it came from, its Hugging Face id and its licence."
                ),
            ),
            "trained by": st.column_config.TextColumn(
                _("trained by"), help=_("Who started its training run")
            ),
            "added by": st.column_config.TextColumn(
                _("added by"), help=_("Who added a model made elsewhere")
            ),
            "notes": st.column_config.TextColumn(_("notes"), width="medium"),
        },
    )
    st.caption(
        _(
            "BLEU and chrF in this table were measured at the end of training, on each "
            "version's own validation pairs (see “{column}”); they compare across versions only "
            "on the same data. The Compare tab scores versions on the same test pairs.",
            column=_("scored on"),
        )
    )


SCORE_DIGITS = {"valid loss": 3, "BLEU": 1, "chrF": 1}  # the recorded scores, as shown
# What training cost, as (column, label, number format, help or None): plain numbers, shown
# alike.
TRAINING_NUMBERS = (
    ("parameters", N_("parameters"), "compact", None),
    ("train time (s)", N_("training time"), "%.0f s", None),
    ("train tokens", N_("tokens"), "compact", N_("Source + target tokens of its own training.")),
    (
        "cumulative tokens",
        N_("tokens in all"),
        "compact",
        N_("Its own training tokens plus those of every version it continues."),
    ),
    (
        "cumulative minutes",
        N_("minutes in all"),
        "%.1f",
        N_("Its own training time plus that of every version it continues."),
    ),
)
# The versions table's columns, in order: the scores the caption talks about (and where they
# come from) right after the name, in view on a 1400 px window; the rest scrolls.
VERSION_COLUMNS = (
    "id", "name", "served", "BLEU", "chrF", "valid loss", "scored on", "corpus", "origin",
    "pairs", "created", "parent", "parameters", "device", "train time (s)", "train tokens",
    "cumulative tokens", "cumulative minutes", "trained by", "added by", "notes",
)  # fmt: skip


def _corpus_cell(corpus: Any, origin: Any) -> str:
    """The corpus' name; else why there is none (pandas gives NaN for a missing cell)."""
    if isinstance(corpus, str):
        return corpus
    return _("(public model)") if isinstance(origin, dict) else _("(deleted corpus)")


def _origin_cell(origin: dict[str, Any] | None) -> str:
    """'opus-mt-zh-en.zip · Helsinki-NLP/opus-mt-zh-en · cc-by-4.0'; empty for a version trained
    here (a None cell would read "None")."""
    if not isinstance(origin, dict):  # (None, or pandas' NaN)
        return ""
    licence = origin.get("licence") or _("licence not stated")
    return " · ".join(str(x) for x in (origin.get("file"), origin.get("hub_id"), licence) if x)


# --------------------------------------------------------------------------------- manage


def manage(versions: list[Any]) -> None:
    version = pickers.version_picker(versions, key="models_version")
    left, right = st.columns([3, 2], gap="large")
    with left, st.form(f"edit_version_{version.id}", border=False):
        editable = can(Permission.TRAIN)
        name = st.text_input(_("Name"), value=version.name, disabled=not editable)
        notes = st.text_area(
            _("Notes"),
            value=version.notes,
            height=100,
            placeholder=_("What is special about it?"),
            disabled=not editable,
        )
        if st.form_submit_button(
            _("Save"), type="primary", icon=":material/save:", disabled=not editable
        ):
            with feedback.error_boundary(N_("saving the version")):
                if name != version.name:
                    registry.rename_version(version.id, name)
                if notes != version.notes:
                    registry.set_notes(version.id, notes)
                feedback.flash(_("Saved version #{id}.", id=version.id))
                st.rerun()
    with right:
        if version.imported:
            _imported_details(version)
        else:
            parent = next((v for v in versions if v.id == version.parent_version_id), None)
            _trained_details(version, parent)
        buttons = st.columns(2)
        with buttons[0]:
            st.download_button(
                _("Download .zip"),
                data=lambda: registry.version_zip(version.id),
                file_name=f"version-{version.id}.zip",
                mime="application/zip",
                icon=":material/download:",
                key=f"download_{version.id}",
                on_click="ignore",
                width="stretch",
            )
        if can(Permission.DELETE):
            with buttons[1]:
                if st.button(
                    _("Delete…"), icon=":material/delete:", key="delete_version", width="stretch"
                ):
                    dialogs.ask_confirmation("delete_version")
        if engines.ctranslate2_installed():
            ctranslate2_download(version)
        serving_panel.version_serving(version)
    dialogs.confirmation_dialog(
        "delete_version",
        _("Delete version"),
        _delete_question(version),
        _("Delete version"),
        lambda: _delete(version),
    )


def _delete_question(version: Any) -> str:
    """What deleting costs, served pair included: a version that answers for its language
    pair over HTTP leaves that pair unanswered."""
    question = _(
        "Delete version **#{id} {name}** and its files? This cannot be undone.",
        id=version.id,
        name=version.name,
    )
    serving = served.serving_of(version.id)
    if serving is None:
        return question
    return _(
        "{question} It is the version served for {pair} over HTTP: once it is deleted, {pair} "
        "requests get no answer until another version is served for that pair.",
        question=question,
        pair=serving.pair,
    )


def _trained_details(version: Any, parent: Any) -> None:
    """What a version trained here was trained on, how, by whom, and what it continued."""
    m = version.metrics
    st.markdown(
        _(
            "**Corpus** {corpus} · {pairs} · {device} · {duration}",
            corpus=version.corpus_name or _("(deleted corpus)"),
            pairs=formatting.pair_count_label(version.train_pair_count, "snapshot"),
            device=version.device,
            duration=formatting.fmt_duration(version.train_seconds),
        )
        + "  \n"
        + _(
            "**Parameters** {parameters} · **steps** {steps} · **stopped because** {reason}",
            parameters=formatting.fmt_int(version.param_count),
            steps=formatting.fmt_int(m["steps"]) if "steps" in m else "—",
            reason=localized(stop_words.version_stopped_because(version) or "—"),
        )
        + f"  \n{formatting.lineage_line(version, parent)}  \n"
        + _("**Trained by** {who}", who=version.trained_by or "—")
    )


def _imported_details(version: Any) -> None:
    """Where a version nobody here trained came from, and who added it: no corpus, pairs or
    training time (it has none here)."""
    lines = [
        formatting.lineage_line(version),
        _(
            "**Parameters** {parameters} · **translates** {src}→{tgt}",
            parameters=formatting.fmt_int(version.param_count),
            src=version.src_lang,
            tgt=version.tgt_lang,
        ),
    ]
    if version.corpus_name:
        lines.append(_("**Linked to corpus** {corpus}", corpus=version.corpus_name))
    lines.append(_("**Added by** {who}", who=version.trained_by or "—"))
    st.markdown("  \n".join(lines))


def ctranslate2_download(version: Any) -> None:
    """The version exported to CTranslate2 (model, vocabularies, SentencePiece models), for
    OpenNMT, Argos Translate or LibreTranslate; exported when the button is clicked."""
    weights, button = st.columns([1, 2], vertical_alignment="bottom")
    with weights:
        quantization = st.selectbox(
            _("CTranslate2 weights"),
            engines.QUANTIZATIONS,
            key=f"ct2_weights_{version.id}",
            help=_(
                "float32 decodes exactly as the handwritten decoder; int8 is about 4x smaller "
                "and 2-3x faster on a CPU, nearly the same translations."
            ),
        )
    with button:
        st.download_button(
            _("Download for CTranslate2"),
            data=lambda: ctranslate2_export.export_version_zip(version.id, quantization),
            file_name=ctranslate2_export.zip_name(version.id, quantization),
            mime="application/zip",
            icon=":material/download:",
            key=f"download_ct2_{version.id}",
            on_click="ignore",
            width="stretch",
        )


def _delete(version: Any) -> str:
    registry.delete_version(version.id)
    st.session_state.pop(pickers.CURRENT_VERSION, None)
    st.session_state.pop(compare_panel.COMPARISON, None)
    return _("Deleted version #{id}.", id=version.id)
